//! An intrusive doubly linked list over dense `u32` handles, stored in flat vectors.
//! Front = most recently inserted/used, back = next victim. No allocation per operation
//! once the vectors have grown to the largest handle.

pub const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct DList {
    prev: Vec<u32>,
    next: Vec<u32>,
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
            prev: Vec::new(),
            next: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    #[inline]
    fn ensure(&mut self, id: u32) {
        let need = id as usize + 1;
        if need > self.prev.len() {
            let n = need.max(self.prev.len() * 2).max(16);
            self.prev.resize(n, NIL);
            self.next.resize(n, NIL);
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
        let i = id as usize;
        self.prev[i] = NIL;
        self.next[i] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = id;
        } else {
            self.tail = id;
        }
        self.head = id;
        self.len += 1;
    }

    #[inline]
    pub fn unlink(&mut self, id: u32) {
        let i = id as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            self.tail = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
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

    /// Handles from back (next victim) to front; for tests and debugging.
    pub fn iter_from_back(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.tail;
        std::iter::from_fn(move || {
            if cur == NIL {
                None
            } else {
                let c = cur;
                cur = self.prev[c as usize];
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
