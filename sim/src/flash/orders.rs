//! Where the cache's eviction order(s) live: the [`Orders`] trait and its two plain
//! implementations, one order for the whole cache and one per stream.

use crate::core::eviction::Eviction;

/// Where the cache's eviction order(s) live: one for the whole cache ([`Whole`]) or one per
/// stream ([`PerStream`]). Units are the cache's handles, `slot * units_per_block + segment`
/// (block units: the slot). `FlashSim` is generic over it, and every piece of per-stream
/// work is behind the constant `PARTITIONED` or in `PerStream`, so the unpartitioned loop
/// compiles to the plain calls on one order. MAT (`crate::compose::flash_mat`) is one more
/// implementation, with its own hooks (`on_get`; no-ops here).
pub(crate) trait Orders<E: Eviction> {
    const PARTITIONED: bool;
    /// A GET (access index `i`) starts; `slot`: its block's slot if the block is cached.
    /// Called before the lookup's recency refresh, once per GET.
    #[inline(always)]
    fn on_get(&mut self, _i: usize, _slot: Option<u32>) {}
    /// With block units: a GET miss on a cached block none of whose cached segments lies
    /// outside the request refreshes the block's place in the order at once instead of at
    /// the deferred refresh. Nothing of such a block is left at its old place, so the
    /// evictions are the same either way (LRU reaching it at the tail moves it to the front
    /// and takes the next block); a victim chooser (MAT) then never ranks it there. Off for
    /// the plain orders: no extra work in their loop.
    const EARLY_REFRESH: bool = false;
    /// The partition that owns block `slot` (0 with one order).
    fn part_of(&self, slot: u32) -> u32;
    /// Block `slot` (free until now) now belongs to partition `p`.
    fn assign(&mut self, slot: u32, p: u32);
    /// Block `slot` was freed (its units have left the order).
    fn release(&mut self, slot: u32);
    fn insert(&mut self, p: u32, unit: u32);
    fn touch(&mut self, p: u32, unit: u32);
    /// The next victim of partition `p` (`&mut`: a chooser may decide and remember here).
    fn victim(&mut self, p: u32) -> Option<u32>;
    fn remove(&mut self, p: u32, unit: u32);
}

/// One eviction order for the whole cache (the unpartitioned mode).
pub(super) struct Whole<E>(pub(super) E);

impl<E: Eviction> Orders<E> for Whole<E> {
    const PARTITIONED: bool = false;
    #[inline(always)]
    fn part_of(&self, _: u32) -> u32 {
        0
    }
    #[inline(always)]
    fn assign(&mut self, _: u32, _: u32) {}
    #[inline(always)]
    fn release(&mut self, _: u32) {}
    #[inline(always)]
    fn insert(&mut self, _: u32, unit: u32) {
        self.0.insert(unit)
    }
    #[inline(always)]
    fn touch(&mut self, _: u32, unit: u32) {
        self.0.touch(unit)
    }
    #[inline(always)]
    fn victim(&mut self, _: u32) -> Option<u32> {
        self.0.victim()
    }
    #[inline(always)]
    fn remove(&mut self, _: u32, unit: u32) {
        self.0.remove(unit)
    }
}

/// One eviction order per stream (the partitioned mode). Each order sees dense local
/// handles (a partition's own block numbering): an order's storage grows with the blocks
/// its partition holds, not with every block of the cache, so k partitions cost about what
/// one cache does.
pub(super) struct PerStream<E> {
    orders: Vec<E>,
    /// Units per block: 1 (block units) or segments per block.
    upb: u32,
    /// log2(upb) when upb is a power of two (the usual case): shifts instead of divisions.
    shift: Option<u32>,
    /// Per block slot: its partition and its local number there.
    slot_part: Vec<u32>,
    slot_local: Vec<u32>,
    /// Per partition: each local number's block slot, and the free local numbers.
    local_slot: Vec<Vec<u32>>,
    local_free: Vec<Vec<u32>>,
}

impl<E: Eviction> PerStream<E> {
    pub(super) fn new(orders: Vec<E>, upb: u32) -> Self {
        let k = orders.len();
        PerStream {
            orders,
            upb,
            shift: upb.is_power_of_two().then(|| upb.trailing_zeros()),
            slot_part: Vec::new(),
            slot_local: Vec::new(),
            local_slot: vec![Vec::new(); k],
            local_free: vec![Vec::new(); k],
        }
    }

    /// (block, segment) of a unit (global or local).
    #[inline]
    fn split(&self, unit: u32) -> (u32, u32) {
        match self.shift {
            Some(sh) => (unit >> sh, unit & (self.upb - 1)),
            None => (unit / self.upb, unit % self.upb),
        }
    }

    /// The local handle of a (global) unit.
    #[inline]
    fn local(&self, unit: u32) -> u32 {
        let (slot, s) = self.split(unit);
        self.slot_local[slot as usize] * self.upb + s
    }
}

impl<E: Eviction> Orders<E> for PerStream<E> {
    const PARTITIONED: bool = true;
    #[inline]
    fn part_of(&self, slot: u32) -> u32 {
        self.slot_part[slot as usize]
    }
    fn assign(&mut self, slot: u32, p: u32) {
        let i = slot as usize;
        if i >= self.slot_part.len() {
            self.slot_part.resize(i + 1, 0);
            self.slot_local.resize(i + 1, 0);
        }
        let local = match self.local_free[p as usize].pop() {
            Some(l) => l,
            None => {
                self.local_slot[p as usize].push(0);
                (self.local_slot[p as usize].len() - 1) as u32
            }
        };
        self.local_slot[p as usize][local as usize] = slot;
        self.slot_part[i] = p;
        self.slot_local[i] = local;
    }
    fn release(&mut self, slot: u32) {
        let p = self.slot_part[slot as usize] as usize;
        self.local_free[p].push(self.slot_local[slot as usize]);
    }
    #[inline]
    fn insert(&mut self, p: u32, unit: u32) {
        let l = self.local(unit);
        self.orders[p as usize].insert(l)
    }
    #[inline]
    fn touch(&mut self, p: u32, unit: u32) {
        let l = self.local(unit);
        self.orders[p as usize].touch(l)
    }
    #[inline]
    fn victim(&mut self, p: u32) -> Option<u32> {
        let (local, s) = self.split(self.orders[p as usize].victim()?);
        Some(self.local_slot[p as usize][local as usize] * self.upb + s)
    }
    #[inline]
    fn remove(&mut self, p: u32, unit: u32) {
        let l = self.local(unit);
        self.orders[p as usize].remove(l)
    }
}
