//! The flash cache's state ([`FlashSim`]): the block map, the per-block segment masks,
//! the recency and eviction bookkeeping, the partitions' quotas; lookup, insertion and
//! eviction of segments. The per-access loop is in `run.rs`.

use crate::core::config::{EvictionKind, FlashConfig};
use crate::core::eviction::Eviction;
use crate::core::hash::{new_map, FastMap};
use crate::core::shares::pages_of_shares;
use crate::flash::metrics::StreamInfo;
use crate::flash::orders::Orders;

/// The cache state plus counters; generic over the eviction policy and where its orders live
/// (static dispatch in the hot loop), with admission and prefetch as trait objects (called
/// on misses only).
pub(crate) struct FlashSim<'c, E: Eviction, L: Orders<E>> {
    pub(super) cfg: &'c FlashConfig,
    pub(crate) orders: L,
    _order_kind: std::marker::PhantomData<E>,
    pub(super) spb: u32,
    pub(super) words: usize,
    pub(super) capacity: u64,
    used: u64,
    pub(super) block_units: bool,
    pub(super) block_level: bool,
    pub(super) map: FastMap<u64, u32>,
    slot_key: Vec<u64>,
    pub(super) slot_count: Vec<u32>,
    pub(super) masks: Vec<u64>,
    block_last: Vec<f64>,
    pub(super) seg_last: Vec<f64>,
    free: Vec<u32>,
    pub(super) evictions: u64,
    pub(super) age_sum: f64,
    pub(super) admitted: u64,
    pub(super) prefetched: u64,
    pub(super) win_admitted: Vec<u64>,
    pub(super) peak_blocks: u64,
    /// The block of the current GET miss while its requested segments are inserted (before
    /// its deferred refresh), with block units: (slot, first and last requested segment).
    pub(super) pending: Option<(u32, u32, u32)>,
    /// Scratch: the requested segments to insert (the admitted missing ones).
    pub(super) to_insert: Vec<u32>,
    /// Scratch: the requested segments missing at lookup (admitted or not; ascending).
    pub(super) missing: Vec<u32>,
    // Partitioned mode only (left empty otherwise):
    /// The partition of the current access: its block's owner, else its own stream.
    pub(super) part: u32,
    /// Each partition's quota and the segments it holds.
    pub(super) quota: Vec<u64>,
    part_used: Vec<u64>,
    /// The per-stream counts reported in `Info::streams`.
    pub(super) streams: StreamInfo,
}

#[inline]
fn bits(lo: u32, hi: u32) -> u64 {
    // bits lo..=hi of one word, 0 <= lo <= hi <= 63
    let width = hi - lo + 1;
    if width == 64 {
        !0
    } else {
        ((1u64 << width) - 1) << lo
    }
}

impl<'c, E: Eviction, L: Orders<E>> FlashSim<'c, E, L> {
    /// A cache of `cfg`'s capacity and units with `orders` (of `streams` partitions when
    /// partitioned).
    pub(crate) fn new(cfg: &'c FlashConfig, orders: L, streams: usize) -> Self {
        let spb = cfg.segments_per_block();
        let streams = if L::PARTITIONED { streams } else { 0 };
        FlashSim {
            cfg,
            orders,
            _order_kind: std::marker::PhantomData,
            spb,
            words: spb.div_ceil(64) as usize,
            capacity: cfg.capacity(),
            used: 0,
            block_units: cfg.eviction == EvictionKind::Lru && cfg.block_level_recency,
            block_level: cfg.block_level_recency,
            map: new_map(),
            slot_key: Vec::new(),
            slot_count: Vec::new(),
            masks: Vec::new(),
            block_last: Vec::new(),
            seg_last: Vec::new(),
            free: Vec::new(),
            evictions: 0,
            age_sum: 0.0,
            admitted: 0,
            prefetched: 0,
            win_admitted: Vec::new(),
            peak_blocks: 0,
            pending: None,
            to_insert: Vec::new(),
            missing: Vec::new(),
            part: 0,
            quota: vec![0; streams],
            part_used: vec![0; streams],
            streams: StreamInfo {
                streams: streams as u32,
                gets: vec![0; streams],
                hits: vec![0; streams],
                admitted_segments: vec![0; streams],
                evictions: vec![0; streams],
                ..Default::default()
            },
        }
    }

    /// The slots of the cached blocks (tests).
    #[cfg(test)]
    pub(crate) fn cached_slots(&self) -> Vec<u32> {
        self.map.values().copied().collect()
    }

    /// Start an interval: apply its shares' quotas, then shrink every partition holding at
    /// least its new quota to `quota - 1` segments (none when the quota is <= 1), evicting
    /// from its own order at time `t`.
    pub(super) fn set_quotas(&mut self, shares: &[f64], t: f64) {
        let (quotas, valid) = pages_of_shares(shares, self.capacity);
        self.streams.fallbacks += u64::from(!valid);
        self.streams.quotas.extend_from_slice(&quotas);
        for (p, &q) in quotas.iter().enumerate() {
            self.quota[p] = q;
            while self.part_used[p] > 0 && self.part_used[p] >= q {
                self.evict_one(p as u32, t);
                self.streams.resize_evictions += 1;
            }
        }
    }

    #[inline]
    pub(super) fn is_cached(&self, slot: u32, s: u32) -> bool {
        let w = self.masks[slot as usize * self.words + (s / 64) as usize];
        (w >> (s % 64)) & 1 == 1
    }

    /// (cached count, first missing, last missing) over s0..=s1 of a present block.
    #[inline]
    pub(super) fn scan(&self, slot: u32, s0: u32, s1: u32) -> (u32, u32, u32) {
        let base = slot as usize * self.words;
        let mut cached = 0u32;
        let mut first = u32::MAX;
        let mut last = 0u32;
        for w in (s0 / 64)..=(s1 / 64) {
            let lo = if w == s0 / 64 { s0 % 64 } else { 0 };
            let hi = if w == s1 / 64 { s1 % 64 } else { 63 };
            let m = bits(lo, hi);
            let word = self.masks[base + w as usize];
            cached += (word & m).count_ones();
            let miss = !word & m;
            if miss != 0 {
                if first == u32::MAX {
                    first = w * 64 + miss.trailing_zeros();
                }
                last = w * 64 + 63 - miss.leading_zeros();
            }
        }
        (cached, first, last)
    }

    #[inline]
    fn lowest_cached(&self, slot: u32) -> u32 {
        self.lowest_cached_outside(slot, 1, 0)
            .expect("a cached block has at least one segment")
    }

    /// The lowest cached segment of the block outside s0..=s1 (s0 > s1: anywhere).
    #[inline]
    fn lowest_cached_outside(&self, slot: u32, s0: u32, s1: u32) -> Option<u32> {
        let base = slot as usize * self.words;
        for w in 0..self.words {
            let mut m = self.masks[base + w];
            if s0 <= s1 {
                let (lo, hi) = (w as u32 * 64, w as u32 * 64 + 63);
                if s0 <= hi && s1 >= lo {
                    m &= !bits(s0.max(lo) - lo, s1.min(hi) - lo);
                }
            }
            if m != 0 {
                return Some(w as u32 * 64 + m.trailing_zeros());
            }
        }
        None
    }

    /// Refresh a block's recency (block-level): the block moves to the front (block units)
    /// or its cached segments do in ascending order (an LRU of segments); last access = t.
    #[inline]
    pub(super) fn touch_block(&mut self, sl: u32, t: f64) {
        self.block_last[sl as usize] = t;
        let part = self.orders.part_of(sl);
        if self.block_units {
            self.orders.touch(part, sl);
        } else if E::REORDERS_ON_TOUCH {
            let base = sl * self.spb;
            let orders = &mut self.orders;
            let mbase = sl as usize * self.words;
            for_cached_in(&self.masks, mbase, 0, self.spb - 1, |s| {
                orders.touch(part, base + s)
            });
        }
    }

    fn alloc(&mut self, key: u64, t: f64) -> u32 {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let s = self.slot_key.len() as u32;
                self.slot_key.push(0);
                self.slot_count.push(0);
                self.block_last.push(0.0);
                self.masks.resize(self.masks.len() + self.words, 0);
                if !self.block_level {
                    self.seg_last
                        .resize(self.seg_last.len() + self.spb as usize, 0.0);
                }
                s
            }
        };
        let i = slot as usize;
        self.slot_key[i] = key;
        self.slot_count[i] = 0;
        self.block_last[i] = t;
        self.orders.assign(slot, self.part);
        self.map.insert(key, slot);
        if self.block_units {
            self.orders.insert(self.part, slot);
        }
        self.peak_blocks = self.peak_blocks.max(self.map.len() as u64);
        slot
    }

    /// Evict one segment of partition `part` (any, without partitions); returns the slot if
    /// its block became empty and was freed.
    #[inline]
    fn evict_one(&mut self, part: u32, t: f64) -> Option<u32> {
        let mut unit = self
            .orders
            .victim(part)
            .expect("cache is full, so not empty");
        let (slot, seg, last) = if self.block_units {
            let mut seg = None;
            if let Some((p, s0, s1)) = self.pending {
                if unit == p {
                    // The block being accessed: only its segments outside the request are
                    // still at its old place; with none left it is at the front.
                    seg = self.lowest_cached_outside(p, s0, s1);
                    if seg.is_none() {
                        self.orders.touch(part, p);
                        self.pending = None;
                        unit = self.orders.victim(part).expect("not empty");
                    }
                }
            }
            let slot = unit;
            (
                slot,
                seg.unwrap_or_else(|| self.lowest_cached(slot)),
                self.block_last[slot as usize],
            )
        } else {
            self.orders.remove(part, unit);
            let slot = unit / self.spb;
            let last = if self.block_level {
                self.block_last[slot as usize]
            } else {
                self.seg_last[unit as usize]
            };
            (slot, unit % self.spb, last)
        };
        self.masks[slot as usize * self.words + (seg / 64) as usize] &= !(1u64 << (seg % 64));
        self.slot_count[slot as usize] -= 1;
        self.used -= 1;
        self.evictions += 1;
        self.age_sum += t - last;
        if L::PARTITIONED {
            self.part_used[part as usize] -= 1;
            self.streams.evictions[part as usize] += 1;
        }
        if self.slot_count[slot as usize] == 0 {
            if self.block_units {
                self.orders.remove(part, slot);
            }
            self.orders.release(slot);
            if matches!(self.pending, Some((p, _, _)) if p == slot) {
                self.pending = None;
            }
            self.map.remove(&self.slot_key[slot as usize]);
            self.free.push(slot);
            Some(slot)
        } else {
            None
        }
    }

    /// Insert segment `s` of `key` (not cached) into the current access's partition
    /// (`self.part`, with partitions: its quota is > 1); returns the block's slot afterwards.
    #[inline]
    pub(super) fn insert(&mut self, key: u64, mut cur: Option<u32>, s: u32, t: f64) -> u32 {
        // The artifact inserts, then evicts one if the cache reached its capacity: the same
        // as evicting first while the insertion would reach it. With partitions, the same
        // rule with the partition's quota.
        let part = self.part;
        loop {
            let full = if L::PARTITIONED {
                let used = self.part_used[part as usize];
                used > 0 && used + 1 >= self.quota[part as usize]
            } else {
                self.used > 0 && self.used + 1 >= self.capacity
            };
            if !full {
                break;
            }
            if let Some(freed) = self.evict_one(part, t) {
                if cur == Some(freed) {
                    cur = None;
                }
            }
        }
        let slot = match cur {
            Some(sl) => sl,
            None => self.alloc(key, t),
        };
        self.masks[slot as usize * self.words + (s / 64) as usize] |= 1u64 << (s % 64);
        self.slot_count[slot as usize] += 1;
        self.used += 1;
        if L::PARTITIONED {
            self.part_used[part as usize] += 1;
            self.streams.admitted_segments[part as usize] += 1;
        }
        if !self.block_units {
            let unit = slot * self.spb + s;
            if !self.block_level {
                self.seg_last[unit as usize] = t;
            }
            self.orders.insert(part, unit);
        }
        slot
    }
}

#[inline]
pub(super) fn for_cached_in(masks: &[u64], base: usize, s0: u32, s1: u32, mut f: impl FnMut(u32)) {
    for w in (s0 / 64)..=(s1 / 64) {
        let lo = if w == s0 / 64 { s0 % 64 } else { 0 };
        let hi = if w == s1 / 64 { s1 % 64 } else { 63 };
        let mut m = masks[base + w as usize] & bits(lo, hi);
        while m != 0 {
            f(w * 64 + m.trailing_zeros());
            m &= m - 1;
        }
    }
}
