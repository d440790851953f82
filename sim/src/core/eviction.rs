//! Eviction policies over dense `u32` unit handles. The caches (flash and object mode) own the
//! items; a policy only orders handles and names the next victim. New policies implement
//! [`Eviction`] and plug into both caches without touching their loops.

use crate::core::list::DList;

pub trait Eviction {
    /// Whether `touch` can change the eviction order (lets caches skip no-op work).
    const REORDERS_ON_TOUCH: bool;
    /// A unit enters the cache.
    fn insert(&mut self, unit: u32);
    /// A cached unit is accessed.
    fn touch(&mut self, unit: u32);
    /// The unit that would be evicted next, without removing it.
    fn victim(&self) -> Option<u32>;
    /// A unit leaves the cache.
    fn remove(&mut self, unit: u32);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An eviction order whose tail can be examined and then kept or evicted: what MAT (machine
/// learning at the tail, `crate::mat`) needs of its base heuristic. The tail candidate
/// ([`Eviction::victim`], the paper's `RemoveFromTail`) is either evicted (`pop_tail`, or
/// `remove` for an earlier one) or kept (`keep_tail`: moved to the head, the paper's
/// `Insert(x, rank)` at the head, a second chance), and the next candidate is the unit before it.
pub trait Reinsert: Eviction {
    /// Remove and return the unit that would be evicted next.
    fn pop_tail(&mut self) -> Option<u32>;
    /// Move the tail unit to the head (the most recently used end); the unit before it becomes
    /// the tail. The same order as taking it off the tail and inserting it again.
    fn keep_tail(&mut self);
    /// The unit before `unit` (toward the head): the next candidate if `unit` leaves the tail.
    fn before(&self, unit: u32) -> Option<u32>;
}

/// A list of units: each enters at the front, victims come from the back. With
/// `MOVE_ON_TOUCH` a hit moves the unit to the front (least recently used, [`Lru`]); without
/// it hits change nothing (first in, first out, [`Fifo`]).
#[derive(Debug, Default)]
pub struct ListOrder<const MOVE_ON_TOUCH: bool> {
    list: DList,
}

/// Least recently used: a hit moves the unit to the front; victims come from the back.
pub type Lru = ListOrder<true>;
/// First in, first out: hits do not change the order.
pub type Fifo = ListOrder<false>;

impl<const MOVE_ON_TOUCH: bool> ListOrder<MOVE_ON_TOUCH> {
    pub fn new() -> Self {
        ListOrder { list: DList::new() }
    }

    /// Units from the tail (next victim) towards the head.
    pub fn iter_from_back(&self) -> impl Iterator<Item = u32> + '_ {
        self.list.iter_from_back()
    }
}

impl<const MOVE_ON_TOUCH: bool> Eviction for ListOrder<MOVE_ON_TOUCH> {
    const REORDERS_ON_TOUCH: bool = MOVE_ON_TOUCH;
    #[inline]
    fn insert(&mut self, unit: u32) {
        self.list.push_front(unit);
    }
    #[inline]
    fn touch(&mut self, unit: u32) {
        if MOVE_ON_TOUCH {
            self.list.move_to_front(unit);
        }
    }
    #[inline]
    fn victim(&self) -> Option<u32> {
        self.list.back()
    }
    #[inline]
    fn remove(&mut self, unit: u32) {
        self.list.unlink(unit);
    }
    fn len(&self) -> usize {
        self.list.len()
    }
}

impl<const MOVE_ON_TOUCH: bool> Reinsert for ListOrder<MOVE_ON_TOUCH> {
    #[inline]
    fn pop_tail(&mut self) -> Option<u32> {
        let u = self.list.back()?;
        self.list.unlink(u);
        Some(u)
    }
    /// To the front: for LRU the most recently used position; for FIFO, FIFO-reinsertion
    /// (CLOCK's second chance).
    #[inline(always)]
    fn keep_tail(&mut self) {
        if let Some(t) = self.list.back() {
            self.list.move_to_front(t);
        }
    }
    #[inline]
    fn before(&self, unit: u32) -> Option<u32> {
        self.list.toward_front(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_tail_and_pop_tail() {
        let mut l = Lru::new();
        for u in 0..3 {
            l.insert(u);
        }
        assert_eq!(l.before(0), Some(1));
        l.keep_tail();
        assert_eq!(l.len(), 3);
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![1, 2, 0]);
        assert_eq!(l.victim(), Some(1));
        assert_eq!(l.pop_tail(), Some(1));
        assert_eq!(l.pop_tail(), Some(2));
        assert_eq!(l.pop_tail(), Some(0));
        assert_eq!(l.pop_tail(), None);
        assert!(l.is_empty());
    }

    #[test]
    fn lru_vs_fifo() {
        let mut l = Lru::new();
        let mut f = Fifo::new();
        for u in 0..3 {
            l.insert(u);
            f.insert(u);
        }
        l.touch(0);
        f.touch(0);
        assert_eq!(l.victim(), Some(1));
        assert_eq!(f.victim(), Some(0));
        l.remove(1);
        f.remove(0);
        assert_eq!(l.victim(), Some(2));
        assert_eq!(f.victim(), Some(1));
        assert_eq!(l.len(), 2);
        assert!(!f.is_empty());
    }
}
