//! Dense object ids for a trace, and each request's next request.

use crate::core::config::{err, SimError};

/// No next access (in [`DenseTrace::next`]).
pub const NO_NEXT: u32 = u32::MAX;

/// How many keys ahead [`DenseTrace::new`] prefetches their table slots (the table is far
/// larger than the CPU caches on big traces: one memory round trip per key otherwise).
pub(super) const PREFETCH_AHEAD: usize = 16;

/// key -> dense id, open addressing with linear probing over (key, id + 1) pairs (0 = empty),
/// at most half full; the multiplicative hash's top bits pick the slot.
struct IdTable {
    slots: Vec<(u64, u32)>,
    shift: u32,
    len: u32,
}

impl IdTable {
    fn new(expected: usize) -> Self {
        let cap = (expected.max(8) * 2).next_power_of_two();
        IdTable {
            slots: vec![(0, 0); cap],
            shift: 64 - cap.trailing_zeros(),
            len: 0,
        }
    }

    #[inline]
    fn home(&self, k: u64) -> usize {
        ((k ^ (k >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    fn prefetch(&self, k: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.slots.as_ptr().wrapping_add(self.home(k)) as *const i8;
            // SAFETY: a prefetch hint to an address inside the table; it never faults.
            unsafe { core::arch::x86_64::_mm_prefetch(p, core::arch::x86_64::_MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = k;
    }

    /// The id of `k`, a new one (the next integer) if unseen.
    #[inline]
    fn id(&mut self, k: u64) -> u32 {
        let mask = self.slots.len() - 1;
        let mut i = self.home(k);
        loop {
            let (key, v) = self.slots[i];
            if v == 0 {
                break;
            }
            if key == k {
                return v - 1;
            }
            i = (i + 1) & mask;
        }
        let id = self.len;
        self.slots[i] = (k, id + 1);
        self.len += 1;
        if self.len as usize * 2 > self.slots.len() {
            self.grow();
        }
        id
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let cap = old.len() * 2;
        self.slots = vec![(0, 0); cap];
        self.shift = 64 - cap.trailing_zeros();
        let mask = cap - 1;
        for (k, v) in old.into_iter().filter(|e| e.1 != 0) {
            let mut i = self.home(k);
            while self.slots[i].1 != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = (k, v);
        }
    }
}

/// A trace with dense object ids: request i is object `ids[i]`, ids in `0..objects`.
#[derive(Debug, Clone)]
pub struct DenseTrace {
    pub ids: Vec<u32>,
    pub objects: usize,
}

impl DenseTrace {
    /// Dense ids in order of first appearance. At most 2^32 - 1 requests.
    pub fn new(keys: &[u64]) -> Result<Self, SimError> {
        if keys.len() >= u32::MAX as usize {
            return err(format!(
                "MAT/Belady traces are limited to 2^32 - 1 requests, got {}",
                keys.len()
            ));
        }
        let mut table = IdTable::new(keys.len().min(1 << 20));
        let mut ids = Vec::with_capacity(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(i + PREFETCH_AHEAD) {
                table.prefetch(ahead);
            }
            ids.push(table.id(k));
        }
        Ok(DenseTrace {
            ids,
            objects: table.len as usize,
        })
    }

    /// `next[i]` = the index of the next request of `ids[i]` after i, or [`NO_NEXT`].
    pub fn next(&self) -> Vec<u32> {
        let mut seen = vec![NO_NEXT; self.objects];
        let mut next = vec![NO_NEXT; self.ids.len()];
        for i in (0..self.ids.len()).rev() {
            let o = self.ids[i] as usize;
            next[i] = seen[o];
            seen[o] = i as u32;
        }
        next
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_ids_and_next() {
        let t = DenseTrace::new(&[7, 9, 7, 3, 9]).unwrap();
        assert_eq!(t.ids, vec![0, 1, 0, 2, 1]);
        assert_eq!(t.objects, 3);
        assert_eq!(t.next(), vec![2, 4, NO_NEXT, NO_NEXT, NO_NEXT]);
        // the table grows past its first size; key 0 and u64::MAX are keys like any other
        let keys: Vec<u64> = (0..5000u64)
            .map(|i| {
                (i % 1700).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i % 3).wrapping_mul(u64::MAX)
            })
            .collect();
        let t = DenseTrace::new(&keys).unwrap();
        let mut first = std::collections::HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            let n = first.len() as u32;
            assert_eq!(t.ids[i], *first.entry(*k).or_insert(n));
        }
        assert_eq!(t.objects, first.len());
    }
}
