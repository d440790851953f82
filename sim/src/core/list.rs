//! An intrusive doubly linked list over dense `u32` handles, stored in flat vectors.
//! Front = most recently inserted/used, back = next victim. No allocation per operation
//! once the vectors have grown to the largest handle.

pub const NIL: u32 = u32::MAX;

/// A node's links: [previous (toward the front), next (toward the back)]. Both in one 8-byte
/// entry, so a list operation touches one cache line per node (two separate vectors cost
/// two: measurable in MAT's decision loop, which walks the tail node by node).
type Links = [u32; 2];
const PREV: usize = 0;
const NEXT: usize = 1;

#[derive(Debug, Clone)]
pub struct DList {
    links: Vec<Links>,
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for DList {
    /// Empty (head and tail NIL; a derived Default would make them 0, a live handle).
    fn default() -> Self {
        DList::new()
    }
}

impl DList {
    pub fn new() -> Self {
        DList {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    #[inline]
    fn ensure(&mut self, id: u32) {
        let need = id as usize + 1;
        if need > self.links.len() {
            let n = need.max(self.links.len() * 2).max(16);
            self.links.resize(n, [NIL, NIL]);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn push_front(&mut self, id: u32) {
        self.ensure(id);
        self.links[id as usize] = [NIL, self.head];
        if self.head != NIL {
            self.links[self.head as usize][PREV] = id;
        } else {
            self.tail = id;
        }
        self.head = id;
        self.len += 1;
    }

    #[inline]
    pub fn unlink(&mut self, id: u32) {
        let [p, n] = self.links[id as usize];
        if p != NIL {
            self.links[p as usize][NEXT] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.links[n as usize][PREV] = p;
        } else {
            self.tail = p;
        }
        self.links[id as usize] = [NIL, NIL];
        self.len -= 1;
    }

    #[inline]
    pub fn move_to_front(&mut self, id: u32) {
        if self.head != id {
            self.unlink(id);
            self.push_front(id);
        }
    }

    #[inline]
    pub fn back(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// The handle after `id` toward the front (the next victim once `id` is gone), if any.
    #[inline]
    pub fn toward_front(&self, id: u32) -> Option<u32> {
        let p = self.links[id as usize][PREV];
        (p != NIL).then_some(p)
    }

    /// Handles from back (next victim) to front; for tests and debugging.
    pub fn iter_from_back(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.tail;
        std::iter::from_fn(move || {
            if cur == NIL {
                None
            } else {
                let c = cur;
                cur = self.links[c as usize][PREV];
                Some(c)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_moves() {
        let mut l = DList::new();
        for i in [3, 1, 7] {
            l.push_front(i);
        }
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![3, 1, 7]);
        l.move_to_front(3);
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![1, 7, 3]);
        l.move_to_front(l.back().unwrap());
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![7, 3, 1]);
        assert_eq!(
            (l.back(), l.toward_front(7), l.toward_front(1)),
            (Some(7), Some(3), None)
        );
        l.move_to_front(7);
        l.move_to_front(3);
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![1, 7, 3]);
        l.unlink(7);
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(l.back(), Some(1));
        l.unlink(1);
        l.unlink(3);
        assert!(l.is_empty());
        assert_eq!(l.back(), None);
        l.push_front(100);
        assert_eq!(l.len(), 1);
        assert_eq!(l.back(), Some(100));
    }
}
