//! LRB's 44 eviction features (the eviction contract, features/eviction.toml), kept per object
//! while the trace streams, for MAT (`crate::mat`). Every convention (logical clock,
//! forgetting after a gap of a memory window, NaN for missing distances, LRB's quantised EDC
//! decay, size of the request that started the history) is written in the TOML; the slow
//! reference is `flashml.features.eviction.features`, which the tests compare field by field.
//!
//! Memory: 24 bytes per object seen once; objects seen twice or more (within the window) also
//! own a 256-byte `Extra` (the ring of 31 distances and the 10 counters, four cache lines),
//! like LRB's `MetaExtra`, in one arena on huge pages where the kernel gives them
//! (`crate::mat::hugepages`): no allocation per object, and its random reads mostly hit the TLB.

pub use crate::core::contract::{EVICT_CONTRACT_HASH, EVICT_FEATURE_NAMES, EVICT_NUM_FEATURES};
/// The contract's memory window, logical requests (LRB's default).
pub const MEMORY_WINDOW: u64 = crate::core::contract::EVICT_MEMORY_WINDOW;
/// Past inter-access distances kept (LRB's max_n_past_distances).
pub const MAX_PAST_DISTANCES: usize = crate::core::contract::EVICT_MAX_PAST_DISTANCES;
/// Number of exponentially decayed counters.
pub const NUM_EDCS: usize = crate::core::contract::EVICT_NUM_EDCS;
/// log2 of the first counter's window (LRB's base_edc_window): windows are 2^(10+i).
pub const EDC_BASE_LOG2: u32 = crate::core::contract::EVICT_EDC_BASE_LOG2;
/// Index of the age (logical requests since the last access).
pub const F_AGE: usize = 0;
/// Index of the most recent inter-access distance (delta_1); delta_j is at F_DELTA1 + j - 1.
pub const F_DELTA1: usize = 1;
/// Index of the size in bytes.
pub const F_SIZE: usize = F_DELTA1 + MAX_PAST_DISTANCES;
/// Index of n_within (distances whose cumulative sum is below the window).
pub const F_N_WITHIN: usize = F_SIZE + 1;
/// Index of edc_0 (window 2^10); edc_i is at F_EDC0 + i.
pub const F_EDC0: usize = F_N_WITHIN + 1;

// The layout this code writes is the generated contract's (features/codegen.py).
const _: () = {
    use crate::core::contract::{EF_AGE, EF_DELTA_1, EF_EDC_0, EF_N_WITHIN, EF_SIZE};
    assert!(F_AGE == EF_AGE && F_DELTA1 == EF_DELTA_1 && F_SIZE == EF_SIZE);
    assert!(F_N_WITHIN == EF_N_WITHIN && F_EDC0 == EF_EDC_0);
    assert!(F_EDC0 + NUM_EDCS == EVICT_NUM_FEATURES);
};

/// One eviction feature vector.
pub type EvictFeatures = [f64; EVICT_NUM_FEATURES];

/// Object handle meaning "never seen" in `Meta::last`.
const NEVER: u64 = u64::MAX;

/// 0.5^k, exactly (an exact power of two, subnormal below 2^-1022, 0 below 2^-1074): equal to
/// Python's `0.5 ** k`.
#[inline]
pub fn half_pow(k: u64) -> f64 {
    if k < 1023 {
        f64::from_bits((1023 - k) << 52)
    } else if k <= 1074 {
        f64::from_bits(1u64 << (1074 - k))
    } else {
        0.0
    }
}

/// A hint to load the cache line at `p` (x86-64 only; never faults).
#[inline]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The history beyond the first access: LRB's `MetaExtra`. Four whole cache lines (what
/// `prefetch_history` loads).
#[derive(Debug, Clone)]
#[repr(C, align(64))]
struct Extra {
    /// Ring of the most recent distances; `dist[head]` is the most recent.
    dist: [u32; MAX_PAST_DISTANCES],
    len: u8,
    head: u8,
    /// The counters as of the last access (before decaying by the age).
    edc: [f64; NUM_EDCS],
}

/// `Meta::extra` of an object without history beyond its first access.
const NO_EXTRA: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Meta {
    last: u64,
    size: u64,
    /// Index of its history in `MetaStore::extras`, or NO_EXTRA.
    extra: u32,
}

/// Per-object metadata over dense object ids `0..n`: the last access time of every object and
/// the history the features read.
#[derive(Debug, Clone)]
pub struct MetaStore {
    metas: Vec<Meta>,
    /// The histories, in one arena (no allocation per object); `free` lists the indices of
    /// forgotten ones, reused first.
    extras: Vec<Extra>,
    free: Vec<u32>,
    window: u64,
    max_decay: u64,
}

impl MetaStore {
    /// `objects` dense ids; `memory_window` in logical requests (>= 1024; see
    /// [`check_memory_window`]).
    pub fn new(objects: usize, memory_window: u64) -> Self {
        MetaStore {
            metas: crate::mat::hugepages::filled(
                objects,
                Meta {
                    last: NEVER,
                    size: 0,
                    extra: NO_EXTRA,
                },
            ),
            // room for a million histories (256 MiB) up front, on huge pages; more grow
            extras: crate::mat::hugepages::with_capacity(objects.min(1 << 20)),
            free: Vec::new(),
            window: memory_window,
            max_decay: (memory_window >> EDC_BASE_LOG2).saturating_sub(1),
        }
    }

    pub fn memory_window(&self) -> u64 {
        self.window
    }

    /// LRB's quantised decay of counter `i` over `d` logical requests.
    #[inline]
    fn decay(&self, i: usize, d: u64) -> f64 {
        half_pow((d >> (EDC_BASE_LOG2 + i as u32)).min(self.max_decay))
    }

    /// Logical time of `id`'s last access (`None` if never accessed).
    #[inline]
    pub fn last(&self, id: u32) -> Option<u64> {
        let l = self.metas[id as usize].last;
        (l != NEVER).then_some(l)
    }

    /// Start loading `id`'s metadata into the CPU caches (call a few requests ahead).
    #[inline]
    pub fn prefetch_meta(&self, id: u32) {
        prefetch(self.metas.as_ptr().wrapping_add(id as usize));
    }

    /// Start loading `id`'s history (call after [`MetaStore::prefetch_meta`] had time).
    #[inline]
    pub fn prefetch_history(&self, id: u32) {
        let x = self.metas[id as usize].extra;
        if x != NO_EXTRA {
            let p: *const Extra = self.extras.as_ptr().wrapping_add(x as usize);
            prefetch(p);
            prefetch((p as *const u8).wrapping_add(64));
            prefetch((p as *const u8).wrapping_add(128));
            prefetch((p as *const u8).wrapping_add(192));
        }
    }

    /// Record an access of `id` (a request of `size` bytes) at logical time `t`, later than
    /// every earlier one.
    #[inline]
    pub fn access(&mut self, id: u32, t: u64, size: u64) {
        let window = self.window;
        let m = &self.metas[id as usize];
        let last = m.last;
        if last == NEVER || t - last >= window {
            let m = &mut self.metas[id as usize];
            m.last = t;
            m.size = size;
            if m.extra != NO_EXTRA {
                self.free.push(m.extra);
                m.extra = NO_EXTRA;
            }
            return;
        }
        let d = t - last; // in 1..window, and window < 2^32
        let mut decays = [0.0; NUM_EDCS];
        for (i, x) in decays.iter_mut().enumerate() {
            *x = self.decay(i, d);
        }
        let m = &mut self.metas[id as usize];
        m.last = t;
        match m.extra {
            NO_EXTRA => {
                let mut dist = [0u32; MAX_PAST_DISTANCES];
                dist[0] = d as u32;
                let mut edc = [0.0; NUM_EDCS];
                for (e, x) in edc.iter_mut().zip(decays) {
                    *e = 1.0 * x + 1.0;
                }
                let e = Extra {
                    dist,
                    len: 1,
                    head: 0,
                    edc,
                };
                m.extra = match self.free.pop() {
                    Some(x) => {
                        self.extras[x as usize] = e;
                        x
                    }
                    None => {
                        self.extras.push(e);
                        (self.extras.len() - 1) as u32
                    }
                };
            }
            x => {
                let e = &mut self.extras[x as usize];
                e.head = ((e.head as usize + 1) % MAX_PAST_DISTANCES) as u8;
                e.dist[e.head as usize] = d as u32;
                e.len = (e.len + 1).min(MAX_PAST_DISTANCES as u8);
                for (c, x) in e.edc.iter_mut().zip(decays) {
                    *c = *c * x + 1.0;
                }
            }
        }
    }

    /// The features of `id` (accessed before) at logical time `now` (after its last access).
    pub fn features(&self, id: u32, now: u64, out: &mut EvictFeatures) {
        let m = &self.metas[id as usize];
        debug_assert!(m.last != NEVER && now >= m.last);
        let age = now - m.last;
        // (both fit an i64, whose conversion is one instruction where u64's takes six)
        out[F_AGE] = age as i64 as f64;
        out[F_SIZE] = m.size as i64 as f64;
        let mut within = 0u32;
        match m.extra {
            NO_EXTRA => {
                out[F_DELTA1..F_SIZE].fill(f64::NAN);
                for i in 0..NUM_EDCS {
                    out[F_EDC0 + i] = self.decay(i, age);
                }
            }
            x => {
                let e = &self.extras[x as usize];
                let n = e.len as usize;
                let mut total = 0u64;
                for j in 0..n {
                    let d = e.dist[(e.head as usize + MAX_PAST_DISTANCES - j) % MAX_PAST_DISTANCES];
                    out[F_DELTA1 + j] = d as f64;
                    total += d as u64;
                    if total < self.window {
                        within += 1;
                    }
                }
                out[F_DELTA1 + n..F_SIZE].fill(f64::NAN);
                for i in 0..NUM_EDCS {
                    out[F_EDC0 + i] = e.edc[i] * self.decay(i, age);
                }
            }
        }
        out[F_N_WITHIN] = within as f64;
    }
}

/// The memory window must be at least LRB's first EDC window (1024: its decay clamp
/// `window / 1024 - 1` must be >= 0) and fit the u32 distances (settings.toml's bounds).
pub fn check_memory_window(w: u64) -> Result<(), crate::core::config::SimError> {
    match crate::mat::settings::memory_window_problem(i64::try_from(w).unwrap_or(i64::MAX)) {
        Some(why) => crate::core::config::err(format!("memory_window must be {why}, got {w}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_pow_is_exact() {
        assert_eq!(half_pow(0), 1.0);
        assert_eq!(half_pow(3), 0.125);
        assert_eq!(half_pow(1022), 2f64.powi(-1022));
        assert_eq!(half_pow(1074), f64::from_bits(1));
        assert_eq!(half_pow(1075), 0.0);
        assert_eq!(half_pow(65535), 0.0);
    }

    #[test]
    fn hand_example() {
        // accesses at 0, 5, 7 (sizes 100, 1, 1); features at 10
        let mut m = MetaStore::new(1, MEMORY_WINDOW);
        m.access(0, 0, 100);
        m.access(0, 5, 1);
        m.access(0, 7, 1);
        let mut f = [0.0; EVICT_NUM_FEATURES];
        m.features(0, 10, &mut f);
        assert_eq!(f[F_AGE], 3.0);
        assert_eq!(f[F_DELTA1], 2.0);
        assert_eq!(f[F_DELTA1 + 1], 5.0);
        assert!(f[F_DELTA1 + 2].is_nan() && f[F_SIZE - 1].is_nan());
        assert_eq!(f[F_SIZE], 100.0);
        assert_eq!(f[F_N_WITHIN], 2.0);
        // no distance reaches a window of 1024: every counter counts 3 accesses
        assert!(f[F_EDC0..].iter().all(|&x| x == 3.0));
    }

    #[test]
    fn decay_ring_and_forgetting() {
        let w = 4096;
        let mut m = MetaStore::new(1, w);
        let mut t = 0;
        for _ in 0..40 {
            m.access(0, t, 8);
            t += 1024;
        }
        let mut f = [0.0; EVICT_NUM_FEATURES];
        m.features(0, t - 1024 + 2048, &mut f);
        assert_eq!(f[F_AGE], 2048.0);
        assert!(f[F_DELTA1..F_SIZE].iter().all(|&d| d == 1024.0)); // 31 kept
                                                                   // cumulative 1024, 2048, 3072 < 4096
        assert_eq!(f[F_N_WITHIN], 3.0);
        // edc_0: each access halves once (1024 / 1024); fixed point 2, then age halves twice
        let mut e = 1.0;
        for _ in 1..40 {
            e = e * 0.5 + 1.0;
        }
        assert_eq!(f[F_EDC0], e * 0.25);
        // a gap of the window forgets the history
        m.access(0, t - 1024 + w, 9);
        m.features(0, t - 1024 + w + 1, &mut f);
        assert_eq!(f[F_SIZE], 9.0);
        assert!(f[F_DELTA1].is_nan());
        assert_eq!(f[F_N_WITHIN], 0.0);
        assert_eq!(f[F_EDC0], 1.0);
    }
}
