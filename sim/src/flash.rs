//! Flash-cache mode (Baleen's model): segments of blocks, backend IOs charged in disk-head
//! time (DT), admission and prefetch policies behind traits.
//!
//! Semantics, per access `i` at time `t` on block `key` covering segments `s0..=s1`:
//! * PUT (op in `put_ops`): one backend IO of `s1-s0+1` segments is charged; the cache is
//!   not touched.
//! * GET: the access hits iff all covered segments are cached. Recency: with block-level
//!   recency every cached segment of the block is refreshed (LRU: the block moves to the
//!   front; its last-access time becomes `t`), otherwise only the cached covered segments,
//!   in ascending order. On a hit this happens at once; on a miss with block-level recency
//!   it happens after the requested segments are inserted, as in the artifact (BCacheSim
//!   refreshes the covered segments, inserts the missed ones, then touches the whole block):
//!   while they are inserted, the block's cached segments outside the request keep their old
//!   place in the LRU order (and may be evicted from it), those inside are at the front.
//! * On a miss, the admission policy is asked once (a per-segment policy, the artifact's
//!   RejectX: once per uncached segment). The admitted requested segments are inserted in
//!   ascending order, then the block is refreshed; then, if the miss is admitted (per
//!   segment: any segment) and the prefetch policy gives a range (clipped to the block),
//!   its segments that are neither cached now nor missing requested ones are prefetched
//!   and inserted in ascending order (the artifact's order and set; a rejected miss never
//!   prefetches: nothing read beyond the request would be kept). One backend IO spans the
//!   first to the last segment read (missing requested or prefetched):
//!   `DT = t_seek + segments * segment_bytes / bandwidth`.
//! * Capacity: as the artifact's cache (BCacheSim's `QueueCache.admit`), an insertion that
//!   brings the cache to its capacity evicts one segment, so at most `capacity - 1`
//!   segments stay cached between insertions (a capacity of 1 still holds one segment; the
//!   artifact would evict it at once). One more corner where the two differ: a cache of at
//!   most one block (capacity <= segments per block) in which the accessed block is the only
//!   one left; flashml then evicts that block's lowest segment, the artifact its requested
//!   hits before the segments it just inserted.
//! * DT is kept per window for GETs and PUTs apart: `peak_dt_util` and its percentiles are
//!   GET disk-head time only (the artifact's PeakServiceTimeUtil1), the `_with_puts` metrics
//!   add PUT time (its PeakServiceTimeUsedWithPutUtil1).
//! * Eviction units: with LRU and block-level recency the unit is the block (its segments
//!   are contiguous in recency order) and a victim block loses its lowest-index cached segment;
//!   otherwise the unit is the segment. Eviction age = eviction time - last access time
//!   (of the block under block-level recency, else of the segment).

use std::time::Instant;

use crate::admission::{
    Admission, AdmitAll, CoinFlip, MissCtx, Opt, RejectX, RejectXBlock, Threshold,
};
use crate::config::{
    err, AdmissionKind, EvictionKind, FlashConfig, PrefetchKind, SimError, WhenKind,
};
use crate::eviction::{Eviction, Fifo, Lru};
use crate::hash::{new_map, FastMap};
use crate::prefetch::{GivenRange, NoPrefetch, Prefetch, Triggered, When, WholeBlock};

/// The canonical table's columns the simulator reads (borrowed, never copied).
#[derive(Debug, Clone, Copy)]
pub struct Trace<'a> {
    pub time: &'a [f64],
    pub key: &'a [u64],
    pub offset: &'a [u64],
    pub size: &'a [u64],
    pub op: &'a [u8],
}

/// Per-access arrays for the policies that need them.
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyArrays<'a> {
    pub admit: Option<&'a [u8]>,
    pub score: Option<&'a [f64]>,
    pub prefetch_start: Option<&'a [i64]>,
    pub prefetch_end: Option<&'a [i64]>,
    pub when_score: Option<&'a [f64]>,
}

/// The metrics, with the names the Python API and CLI report (README "Metrics" maps each to
/// BCacheSim's name). DT utilisations are over the measured windows (after the warm-up);
/// `peak/mean/p50/p90/p99_dt_util` count GET disk-head time, the `_with_puts` ones add PUTs.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashMetrics {
    pub peak_dt_util: f64,
    pub mean_dt_util: f64,
    pub p50_dt_util: f64,
    pub p90_dt_util: f64,
    pub p99_dt_util: f64,
    pub peak_dt_util_with_puts: f64,
    pub mean_dt_util_with_puts: f64,
    pub p50_dt_util_with_puts: f64,
    pub p90_dt_util_with_puts: f64,
    pub p99_dt_util_with_puts: f64,
    /// Segments written x segment bytes / trace seconds x 100/sample ratio, in 10^6 B/s.
    pub flash_write_rate_mbps: f64,
    /// The same in 2^20 B/s (the artifact's FlashWriteRate).
    pub flash_write_rate_mibps: f64,
    pub dwpd: f64,
    pub io_hit_ratio: f64,
    pub byte_hit_ratio: f64,
    pub segment_hit_ratio: f64,
    /// 1 - GET disk-head time / GET disk-head time with no cache, whole trace (the
    /// artifact's ServiceTimeSavedRatio1).
    pub service_time_saved_ratio: f64,
    /// GETs that were hits / GETs, whole trace (the artifact's IOPSSavedRatio; equal to
    /// `io_hit_ratio`, kept under both names).
    pub iops_saved_ratio: f64,
    pub avg_eviction_age_s: f64,
    pub backend_ios: u64,
    pub backend_bytes: u64,
    pub admitted_segments: u64,
    pub prefetched_segments: u64,
    pub accesses: u64,
    pub wall_s: f64,
}

/// Per-window series (all windows, warm-up included and flagged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Window start (trace seconds, same clock as the trace's `time`).
    pub time: Vec<f64>,
    /// GET disk-head time utilisation.
    pub dt_util: Vec<f64>,
    /// GET + PUT disk-head time utilisation.
    pub dt_util_with_puts: Vec<f64>,
    pub write_rate_mbps: Vec<f64>,
    pub warmup: Vec<bool>,
}

/// Extra counts that are useful but not part of the fixed metric set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    pub capacity_segments: u64,
    pub segments_per_block: u32,
    pub get_accesses: u64,
    pub put_accesses: u64,
    pub hits: u64,
    pub evictions: u64,
    pub trace_seconds: f64,
    pub windows: u64,
    pub measured_windows: u64,
    pub rejectx_history: u64,
    pub peak_cached_blocks: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FlashResult {
    pub metrics: FlashMetrics,
    pub series: Series,
    pub info: Info,
}

const MAX_WINDOWS: f64 = 1e7;

fn check_len<T>(name: &str, a: Option<&[T]>, n: usize, needed_by: &str) -> Result<(), SimError> {
    match a {
        None => err(format!("{needed_by} needs the per-access array '{name}'")),
        Some(a) if a.len() != n => err(format!(
            "array '{name}' has {} elements but the trace has {n} accesses",
            a.len()
        )),
        Some(_) => Ok(()),
    }
}

/// Check the trace and the arrays against the config; O(n), no allocation.
pub fn validate(trace: &Trace, arrays: &PolicyArrays, cfg: &FlashConfig) -> Result<(), SimError> {
    cfg.validate()?;
    let n = trace.time.len();
    if n == 0 {
        return err("the trace has no accesses");
    }
    for (name, len) in [
        ("key", trace.key.len()),
        ("offset", trace.offset.len()),
        ("size", trace.size.len()),
        ("op", trace.op.len()),
    ] {
        if len != n {
            return err(format!("column '{name}' has {len} rows but 'time' has {n}"));
        }
    }
    // Arrays given but unused must still agree in length (they are probably a mistake else).
    for (name, len) in [
        ("admit", arrays.admit.map(|a| a.len())),
        ("score", arrays.score.map(|a| a.len())),
        ("prefetch_start", arrays.prefetch_start.map(|a| a.len())),
        ("prefetch_end", arrays.prefetch_end.map(|a| a.len())),
        ("when_score", arrays.when_score.map(|a| a.len())),
    ] {
        if let Some(len) = len {
            if len != n {
                return err(format!(
                    "array '{name}' has {len} elements but the trace has {n} accesses"
                ));
            }
        }
    }
    match cfg.admission {
        AdmissionKind::Opt => check_len("admit", arrays.admit, n, "admission 'opt'")?,
        AdmissionKind::Threshold { .. } => {
            check_len("score", arrays.score, n, "admission 'threshold'")?
        }
        _ => {}
    }
    if cfg.prefetch == PrefetchKind::Range {
        check_len(
            "prefetch_start",
            arrays.prefetch_start,
            n,
            "prefetch 'range'",
        )?;
        check_len("prefetch_end", arrays.prefetch_end, n, "prefetch 'range'")?;
    }
    if matches!(cfg.prefetch_when, WhenKind::Score { .. }) && cfg.prefetch != PrefetchKind::None {
        check_len("when_score", arrays.when_score, n, "prefetch-when 'score'")?;
    }
    let mut prev = f64::NEG_INFINITY;
    for i in 0..n {
        let t = trace.time[i];
        if !t.is_finite() {
            return err(format!("access {i}: time is not finite ({t})"));
        }
        if t < prev {
            return err(format!("access {i}: time {t} is earlier than the previous access ({prev}); the trace must be sorted by time"));
        }
        prev = t;
        let size = trace.size[i];
        if size == 0 {
            return err(format!("access {i}: size is 0"));
        }
        match trace.offset[i].checked_add(size) {
            Some(end) if end <= cfg.block_bytes => {}
            _ => {
                return err(format!(
                    "access {i}: offset {} + size {size} exceeds the block size {}",
                    trace.offset[i], cfg.block_bytes
                ))
            }
        }
    }
    let span = trace.time[n - 1] - trace.time[0];
    if span <= 0.0 {
        return err("the trace spans 0 seconds: rates are undefined");
    }
    if span / cfg.window_s >= MAX_WINDOWS {
        return err(format!(
            "the trace spans {span} s, too many {} s windows",
            cfg.window_s
        ));
    }
    let windows = (span / cfg.window_s).floor() as u64 + 1;
    let measured = (0..windows).any(|k| k as f64 * cfg.window_s >= cfg.warmup_s);
    if !measured {
        return err(format!(
            "the trace spans {span} s, no window starts after the {} s warm-up; use a shorter warm-up (--warmup-s)",
            cfg.warmup_s
        ));
    }
    Ok(())
}

/// Run the flash-cache simulation.
pub fn simulate(
    trace: &Trace,
    arrays: &PolicyArrays,
    cfg: &FlashConfig,
) -> Result<FlashResult, SimError> {
    let start = Instant::now();
    validate(trace, arrays, cfg)?;
    let spb = cfg.segments_per_block();
    let mut admission: Box<dyn Admission + '_> = match cfg.admission {
        AdmissionKind::AdmitAll => Box::new(AdmitAll),
        AdmissionKind::CoinFlip { p, seed } => Box::new(CoinFlip { p, seed }),
        AdmissionKind::RejectX { x, .. } => Box::new(RejectX::new(x, cfg.rejectx_window())),
        AdmissionKind::RejectXBlock { x, .. } => Box::new(RejectXBlock::new(
            x,
            cfg.rejectx_history(),
            cfg.rejectx_fraction(),
        )),
        AdmissionKind::Opt => Box::new(Opt {
            flags: arrays.admit.unwrap(),
        }),
        AdmissionKind::Threshold { threshold, peak } => Box::new(Threshold {
            scores: arrays.score.unwrap(),
            threshold,
            peak,
        }),
    };
    let when = match cfg.prefetch_when {
        WhenKind::Miss => When::Miss,
        WhenKind::PartialHit => When::PartialHit,
        WhenKind::Score { threshold } => When::Score {
            scores: arrays.when_score.unwrap_or(&[]),
            threshold,
        },
    };
    let mut prefetch: Box<dyn Prefetch + '_> = match cfg.prefetch {
        PrefetchKind::None => Box::new(NoPrefetch),
        PrefetchKind::Block => Box::new(Triggered {
            inner: WholeBlock {
                segments_per_block: spb,
            },
            when,
        }),
        PrefetchKind::Range => Box::new(Triggered {
            inner: GivenRange {
                start: arrays.prefetch_start.unwrap(),
                end: arrays.prefetch_end.unwrap(),
            },
            when,
        }),
    };
    let mut result = run_policies(trace, cfg, admission.as_mut(), prefetch.as_mut());
    result.metrics.wall_s = start.elapsed().as_secs_f64();
    Ok(result)
}

/// Run the flash-cache simulation with caller-supplied admission and prefetch policies
/// (e.g. the compiled policy .so, `so_policy`); `cfg`'s own admission/prefetch settings are
/// only validated (use AdmitAll / None).
pub fn simulate_with(
    trace: &Trace,
    cfg: &FlashConfig,
    admission: &mut dyn Admission,
    prefetch: &mut dyn Prefetch,
) -> Result<FlashResult, SimError> {
    let start = Instant::now();
    validate(trace, &PolicyArrays::default(), cfg)?;
    let mut result = run_policies(trace, cfg, admission, prefetch);
    result.metrics.wall_s = start.elapsed().as_secs_f64();
    Ok(result)
}

fn run_policies(
    trace: &Trace,
    cfg: &FlashConfig,
    admission: &mut dyn Admission,
    prefetch: &mut dyn Prefetch,
) -> FlashResult {
    let spb = cfg.segments_per_block();
    let cap = cfg.capacity();
    let block_units = cfg.eviction == EvictionKind::Lru && cfg.block_level_recency;
    let mut result = match cfg.eviction {
        EvictionKind::Lru => {
            let mut sim = FlashSim::new(cfg, Lru::new(), cap, spb, block_units);
            sim.run(trace, admission, prefetch)
        }
        EvictionKind::Fifo => {
            let mut sim = FlashSim::new(cfg, Fifo::new(), cap, spb, block_units);
            sim.run(trace, admission, prefetch)
        }
    };
    result.info.rejectx_history = cfg.rejectx_history() as u64;
    result
}

/// The cache state plus counters; generic over the eviction policy (static dispatch in the
/// hot loop), with admission and prefetch as trait objects (called on misses only).
struct FlashSim<'c, E: Eviction> {
    cfg: &'c FlashConfig,
    evict: E,
    spb: u32,
    words: usize,
    capacity: u64,
    used: u64,
    block_units: bool,
    block_level: bool,
    map: FastMap<u64, u32>,
    slot_key: Vec<u64>,
    slot_count: Vec<u32>,
    masks: Vec<u64>,
    block_last: Vec<f64>,
    seg_last: Vec<f64>,
    free: Vec<u32>,
    evictions: u64,
    age_sum: f64,
    admitted: u64,
    prefetched: u64,
    win_admitted: Vec<u64>,
    peak_blocks: u64,
    /// The block of the current GET miss while its requested segments are inserted (before
    /// its deferred refresh), with block units: (slot, first and last requested segment).
    pending: Option<(u32, u32, u32)>,
    /// Scratch: the requested segments to insert (the admitted missing ones).
    to_insert: Vec<u32>,
    /// Scratch: the requested segments missing at lookup (admitted or not; ascending).
    missing: Vec<u32>,
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

impl<'c, E: Eviction> FlashSim<'c, E> {
    fn new(cfg: &'c FlashConfig, evict: E, capacity: u64, spb: u32, block_units: bool) -> Self {
        FlashSim {
            cfg,
            evict,
            spb,
            words: spb.div_ceil(64) as usize,
            capacity,
            used: 0,
            block_units,
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
        }
    }

    #[inline]
    fn is_cached(&self, slot: u32, s: u32) -> bool {
        let w = self.masks[slot as usize * self.words + (s / 64) as usize];
        (w >> (s % 64)) & 1 == 1
    }

    /// (cached count, first missing, last missing) over s0..=s1 of a present block.
    #[inline]
    fn scan(&self, slot: u32, s0: u32, s1: u32) -> (u32, u32, u32) {
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
    fn touch_block(&mut self, sl: u32, t: f64) {
        self.block_last[sl as usize] = t;
        if self.block_units {
            self.evict.touch(sl);
        } else if E::REORDERS_ON_TOUCH {
            let base = sl * self.spb;
            let evict = &mut self.evict;
            let mbase = sl as usize * self.words;
            for_cached_in(&self.masks, mbase, 0, self.spb - 1, |s| {
                evict.touch(base + s)
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
        self.map.insert(key, slot);
        if self.block_units {
            self.evict.insert(slot);
        }
        self.peak_blocks = self.peak_blocks.max(self.map.len() as u64);
        slot
    }

    /// Evict one segment; returns the slot if its block became empty and was freed.
    #[inline]
    fn evict_one(&mut self, t: f64) -> Option<u32> {
        let mut unit = self.evict.victim().expect("cache is full, so not empty");
        let (slot, seg, last) = if self.block_units {
            let mut seg = None;
            if let Some((p, s0, s1)) = self.pending {
                if unit == p {
                    // The block being accessed: only its segments outside the request are
                    // still at its old place; with none left it is at the front.
                    seg = self.lowest_cached_outside(p, s0, s1);
                    if seg.is_none() {
                        self.evict.touch(p);
                        self.pending = None;
                        unit = self.evict.victim().expect("not empty");
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
            self.evict.remove(unit);
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
        if self.slot_count[slot as usize] == 0 {
            if self.block_units {
                self.evict.remove(slot);
            }
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

    /// Insert segment `s` of `key` (not cached); returns the block's slot afterwards.
    #[inline]
    fn insert(&mut self, key: u64, mut cur: Option<u32>, s: u32, t: f64) -> u32 {
        // The artifact inserts, then evicts one if the cache reached its capacity: the same
        // as evicting first while the insertion would reach it.
        while self.used > 0 && self.used + 1 >= self.capacity {
            if let Some(freed) = self.evict_one(t) {
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
        if !self.block_units {
            let unit = slot * self.spb + s;
            if !self.block_level {
                self.seg_last[unit as usize] = t;
            }
            self.evict.insert(unit);
        }
        slot
    }

    fn run(
        &mut self,
        trace: &Trace,
        admission: &mut dyn Admission,
        prefetch: &mut dyn Prefetch,
    ) -> FlashResult {
        let cfg = self.cfg;
        let n = trace.time.len();
        let seg_bytes = cfg.segment_bytes;
        let seg_time = cfg.segment_time();
        let t_seek = cfg.t_seek_s;
        let t0 = trace.time[0];
        let span = trace.time[n - 1] - t0;
        let n_windows = (span / cfg.window_s).floor() as usize + 1;
        let mut win_dt = vec![0.0f64; n_windows];
        let mut win_put_dt = vec![0.0f64; n_windows];
        let (mut get_dt, mut get_dt_nocache) = (0.0f64, 0.0f64);
        let per_segment = admission.per_segment();
        self.win_admitted = vec![0u64; n_windows];
        let mut is_put = [false; 256];
        for &p in &cfg.put_ops {
            is_put[p as usize] = true;
        }

        let (mut gets, mut puts, mut hits) = (0u64, 0u64, 0u64);
        let (mut get_bytes, mut hit_bytes) = (0u64, 0u64);
        let (mut get_segs, mut hit_segs) = (0u64, 0u64);
        let (mut backend_ios, mut backend_bytes) = (0u64, 0u64);

        for i in 0..n {
            let t = trace.time[i];
            let key = trace.key[i];
            let off = trace.offset[i];
            let size = trace.size[i];
            let s0 = (off / seg_bytes) as u32;
            let s1 = ((off + size - 1) / seg_bytes) as u32;
            let nseg = s1 - s0 + 1;
            let k = (((t - t0) / cfg.window_s).floor() as usize).min(n_windows - 1);
            if is_put[trace.op[i] as usize] {
                puts += 1;
                backend_ios += 1;
                backend_bytes += nseg as u64 * seg_bytes;
                win_put_dt[k] += t_seek + nseg as f64 * seg_time;
                continue;
            }
            get_dt_nocache += t_seek + nseg as f64 * seg_time;
            gets += 1;
            get_bytes += size;
            get_segs += nseg as u64;
            let slot = self.map.get(&key).copied();
            let (cached, m0, m1) = match slot {
                None => (0, s0, s1),
                Some(sl) => self.scan(sl, s0, s1),
            };
            // A miss refreshes its block after inserting the requested segments (below).
            let deferred = self.block_level && cached < nseg;
            if let Some(sl) = slot {
                if self.block_level {
                    if !deferred {
                        self.touch_block(sl, t);
                    }
                } else {
                    let spb = self.spb;
                    let base = sl * spb;
                    let (seg_last, evict) = (&mut self.seg_last, &mut self.evict);
                    let masks = &self.masks;
                    let words = self.words;
                    for_cached_in(masks, sl as usize * words, s0, s1, |s| {
                        let u = base + s;
                        seg_last[u as usize] = t;
                        if E::REORDERS_ON_TOUCH {
                            evict.touch(u);
                        }
                    });
                }
            }
            if cached == nseg {
                hits += 1;
                hit_bytes += size;
                hit_segs += nseg as u64;
                continue;
            }
            hit_segs += cached as u64;
            let ctx = MissCtx {
                index: i,
                key,
                time: t,
                first_seg: s0,
                last_seg: s1,
                first_missing: m0,
                last_missing: m1,
                partial_hit: cached > 0,
            };
            // The requested segments missing at lookup, and those of them to insert (one
            // insertion may evict a requested hit of the same block: it stays evicted).
            self.to_insert.clear();
            self.missing.clear();
            for s in m0..=m1 {
                if slot.is_none_or(|sl| !self.is_cached(sl, s)) {
                    self.missing.push(s);
                }
            }
            let admitted = if per_segment {
                for j in 0..self.missing.len() {
                    let s = self.missing[j];
                    if admission.admit_segment(&ctx, s) {
                        self.to_insert.push(s);
                    }
                }
                !self.to_insert.is_empty()
            } else {
                let a = admission.admit(&ctx);
                if a {
                    self.to_insert.extend_from_slice(&self.missing);
                }
                a
            };
            // Prefetch only for an admitted miss (a rejected one keeps nothing it reads).
            let range = if admitted {
                prefetch.range(&ctx).and_then(|(p0, p1)| {
                    let (p0, p1) = (p0.max(0), p1.min(self.spb as i64 - 1));
                    (p0 <= p1).then_some((p0 as u32, p1 as u32))
                })
            } else {
                None
            };
            let mut cur = slot;
            if admitted {
                // the requested segments, with the block at its old place
                if self.block_units && deferred {
                    self.pending = slot.map(|sl| (sl, s0, s1));
                }
                for i_adm in 0..self.to_insert.len() {
                    let s = self.to_insert[i_adm];
                    cur = Some(self.insert(key, cur, s, t));
                    self.admitted += 1;
                    self.win_admitted[k] += 1;
                }
                self.pending = None;
            }
            if deferred {
                if let Some(sl) = cur {
                    self.touch_block(sl, t);
                }
            }
            // One backend IO from the first to the last segment read: the missing requested
            // ones and the prefetched ones (as the artifact: the prefetch range's segments
            // not cached once the requested ones are in, nor missing requested ones).
            let (mut lo, mut hi) = (m0, m1);
            if let Some((p0, p1)) = range {
                // then the prefetched segments, ascending
                for s in p0..=p1 {
                    if self.missing.binary_search(&s).is_ok()
                        || cur.is_some_and(|sl| self.is_cached(sl, s))
                    {
                        continue;
                    }
                    if per_segment && !admission.admit_segment(&ctx, s) {
                        continue;
                    }
                    cur = Some(self.insert(key, cur, s, t));
                    self.admitted += 1;
                    self.win_admitted[k] += 1;
                    self.prefetched += 1;
                    lo = lo.min(s);
                    hi = hi.max(s);
                }
            }
            let io_segs = hi - lo + 1;
            backend_ios += 1;
            backend_bytes += io_segs as u64 * seg_bytes;
            let dt = t_seek + io_segs as f64 * seg_time;
            win_dt[k] += dt;
            get_dt += dt;
        }

        // Metrics.
        let sr_scale = 100.0 / cfg.sample_ratio;
        let mut series = Series::default();
        let (mut measured, mut measured_puts) = (Vec::new(), Vec::new());
        let to_util = |dt: f64| dt / cfg.disks as f64 / (cfg.sample_ratio / 100.0) / cfg.window_s;
        for (k, &dt) in win_dt.iter().enumerate() {
            let util = to_util(dt);
            let util_puts = to_util(dt + win_put_dt[k]);
            let wr = self.win_admitted[k] as f64 * seg_bytes as f64 / cfg.window_s * sr_scale / 1e6;
            let warm = (k as f64) * cfg.window_s < cfg.warmup_s;
            series.time.push(t0 + k as f64 * cfg.window_s);
            series.dt_util.push(util);
            series.dt_util_with_puts.push(util_puts);
            series.write_rate_mbps.push(wr);
            series.warmup.push(warm);
            if !warm {
                measured.push(util);
                measured_puts.push(util_puts);
            }
        }
        let (peak, mean, p50, p90, p99) = window_stats(&mut measured);
        let (peak_p, mean_p, p50_p, p90_p, p99_p) = window_stats(&mut measured_puts);
        let written = self.admitted as f64 * seg_bytes as f64 / span * sr_scale;
        let wr = written / 1e6;
        let cache_bytes_full = self.capacity as f64 * seg_bytes as f64 * sr_scale;
        let ratio = |a: u64, b: u64| {
            if b == 0 {
                f64::NAN
            } else {
                a as f64 / b as f64
            }
        };
        let metrics = FlashMetrics {
            peak_dt_util: peak,
            mean_dt_util: mean,
            p50_dt_util: p50,
            p90_dt_util: p90,
            p99_dt_util: p99,
            peak_dt_util_with_puts: peak_p,
            mean_dt_util_with_puts: mean_p,
            p50_dt_util_with_puts: p50_p,
            p90_dt_util_with_puts: p90_p,
            p99_dt_util_with_puts: p99_p,
            flash_write_rate_mbps: wr,
            flash_write_rate_mibps: written / 1_048_576.0,
            dwpd: wr * 1e6 * 86_400.0 / cache_bytes_full,
            io_hit_ratio: ratio(hits, gets),
            byte_hit_ratio: ratio(hit_bytes, get_bytes),
            segment_hit_ratio: ratio(hit_segs, get_segs),
            service_time_saved_ratio: if get_dt_nocache > 0.0 {
                1.0 - get_dt / get_dt_nocache
            } else {
                f64::NAN
            },
            iops_saved_ratio: ratio(hits, gets),
            avg_eviction_age_s: if self.evictions == 0 {
                f64::NAN
            } else {
                self.age_sum / self.evictions as f64
            },
            backend_ios,
            backend_bytes,
            admitted_segments: self.admitted,
            prefetched_segments: self.prefetched,
            accesses: n as u64,
            wall_s: 0.0,
        };
        let info = Info {
            capacity_segments: self.capacity,
            segments_per_block: self.spb,
            get_accesses: gets,
            put_accesses: puts,
            hits,
            evictions: self.evictions,
            trace_seconds: span,
            windows: n_windows as u64,
            measured_windows: measured.len() as u64,
            rejectx_history: 0,
            peak_cached_blocks: self.peak_blocks,
        };
        FlashResult {
            metrics,
            series,
            info,
        }
    }
}

/// (peak, mean, p50, p90, p99) of the measured windows' utilisations (sorts them).
fn window_stats(measured: &mut [f64]) -> (f64, f64, f64, f64, f64) {
    let mean = measured.iter().sum::<f64>() / measured.len() as f64;
    measured.sort_by(f64::total_cmp);
    (
        *measured.last().unwrap(),
        mean,
        percentile(measured, 0.5),
        percentile(measured, 0.9),
        percentile(measured, 0.99),
    )
}

#[inline]
fn for_cached_in(masks: &[u64], base: usize, s0: u32, s1: u32, mut f: impl FnMut(u32)) {
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

/// Linear interpolation between closest ranks (numpy's default): `sorted` ascending, non-empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let pos = q * (n - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u64 = 131_072;

    struct Rows {
        time: Vec<f64>,
        key: Vec<u64>,
        offset: Vec<u64>,
        size: Vec<u64>,
        op: Vec<u8>,
    }

    fn rows(r: &[(f64, u64, u64, u64, u8)]) -> Rows {
        Rows {
            time: r.iter().map(|x| x.0).collect(),
            key: r.iter().map(|x| x.1).collect(),
            offset: r.iter().map(|x| x.2).collect(),
            size: r.iter().map(|x| x.3).collect(),
            op: r.iter().map(|x| x.4).collect(),
        }
    }

    fn run(r: &Rows, cfg: &FlashConfig, arrays: &PolicyArrays) -> Result<FlashResult, SimError> {
        let t = Trace {
            time: &r.time,
            key: &r.key,
            offset: &r.offset,
            size: &r.size,
            op: &r.op,
        };
        simulate(&t, arrays, cfg)
    }

    /// Capacity 5: holds 4 segments (the artifact's rule).
    fn tiny() -> FlashConfig {
        FlashConfig {
            capacity_segments: 5,
            t_seek_s: 0.01,
            bandwidth_bytes_per_s: 10.0 * SEG as f64,
            disks: 1,
            window_s: 10.0,
            warmup_s: 0.0,
            ..Default::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    /// The hand-computed trace (two blocks, a PUT in the second window).
    fn hand_rows() -> Rows {
        rows(&[
            (0.0, 1, 0, 2 * SEG, 1),
            (1.0, 1, 0, SEG, 1),
            (2.0, 2, 3 * SEG, 3 * SEG, 1),
            (3.0, 1, 0, 2 * SEG, 1),
            (12.0, 1, 0, SEG, 3),
            (15.0, 2, 4 * SEG, 2 * SEG, 1),
        ])
    }

    #[test]
    fn hand_computed_lru_block_level() {
        let r = hand_rows();
        let res = run(&r, &tiny(), &PolicyArrays::default()).unwrap();
        let m = &res.metrics;
        // window 1 has a PUT (0.11 s) and a hit: no GET disk time
        assert!(close(res.series.dt_util[0], 0.063) && close(res.series.dt_util[1], 0.0));
        assert!(close(res.series.dt_util_with_puts[1], 0.011));
        assert!(close(m.peak_dt_util, 0.063) && close(m.peak_dt_util_with_puts, 0.063));
        assert!(close(m.mean_dt_util, 0.0315) && close(m.mean_dt_util_with_puts, 0.037));
        assert!(close(
            m.flash_write_rate_mibps * 1_048_576.0,
            m.flash_write_rate_mbps * 1e6
        ));
        // GET disk time 0.63 s of 1.05 s with no cache (10 GET segments, 5 GET IOs)
        assert!(close(m.service_time_saved_ratio, 1.0 - 0.63 / 1.05));
        assert!(close(m.iops_saved_ratio, m.io_hit_ratio));
        assert!(close(m.io_hit_ratio, 0.4));
        assert!(close(m.byte_hit_ratio, 0.3));
        assert!(close(m.segment_hit_ratio, 0.4));
        assert_eq!(m.admitted_segments, 6);
        assert!(close(
            m.flash_write_rate_mbps,
            6.0 * SEG as f64 / 15.0 / 1e6
        ));
        assert!(close(m.avg_eviction_age_s, 1.0));
        assert_eq!((m.backend_ios, m.backend_bytes), (4, 7 * SEG));
        assert_eq!(
            (res.info.evictions, res.info.hits, res.info.put_accesses),
            (2, 2, 1)
        );
    }

    /// The same trace at capacity 4: the artifact holds 3 segments, and a miss refreshes its
    /// block only after inserting (computed by hand, README "Flash mode vs BCacheSim").
    #[test]
    fn hand_computed_artifact_capacity_rule() {
        let r = hand_rows();
        let cfg = FlashConfig {
            capacity_segments: 4,
            ..tiny()
        };
        let res = run(&r, &cfg, &PolicyArrays::default()).unwrap();
        let m = &res.metrics;
        // t2: key 2 evicts key 1's segments 0, 1; t3: key 1 misses both, evicts key 2's 3, 4;
        // t15: key 2 misses 4; the LRU block is key 2 itself, with nothing outside the
        // request: it is at the front, and key 1 loses segment 0 (age 12).
        assert!(close(res.series.dt_util[0], 0.073) && close(res.series.dt_util[1], 0.011));
        assert!(close(res.series.dt_util_with_puts[1], 0.022));
        assert!(close(m.io_hit_ratio, 0.2) && close(m.byte_hit_ratio, 0.1));
        assert!(close(m.segment_hit_ratio, 0.2));
        assert_eq!(m.admitted_segments, 8);
        assert!(close(m.avg_eviction_age_s, 16.0 / 5.0));
        assert_eq!((m.backend_ios, m.backend_bytes), (5, 9 * SEG));
        assert_eq!((res.info.evictions, res.info.hits), (5, 1));
    }

    /// A miss's block keeps its old LRU place for its segments outside the request while
    /// the requested ones are inserted (BCacheSim touches the whole block afterwards).
    #[test]
    fn miss_refreshes_its_block_after_inserting() {
        let r = rows(&[
            (0.0, 1, 0, 2 * SEG, 1),   // key 1: 0, 1
            (1.0, 2, 0, SEG, 1),       // key 2: 0 (3 cached: full)
            (2.0, 1, 2 * SEG, SEG, 1), // key 1 is LRU: its segment 0 goes, not key 2's
            (3.0, 2, 0, SEG, 1),       // hit
            (4.0, 1, 0, SEG, 1),       // miss; key 1 is LRU again: its segment 1 goes
            (5.0, 1, 2 * SEG, SEG, 1), // hit
        ]);
        let cfg = FlashConfig {
            capacity_segments: 4,
            ..tiny()
        };
        let res = run(&r, &cfg, &PolicyArrays::default()).unwrap();
        assert_eq!((res.info.hits, res.info.evictions), (2, 2));
        assert!(close(res.metrics.avg_eviction_age_s, 2.0));
    }

    #[test]
    fn multi_word_masks() {
        // 128 segments per block: accesses straddle the 64-bit word boundary.
        let cfg = FlashConfig {
            block_bytes: 128 * SEG,
            capacity_segments: 200,
            ..tiny()
        };
        let r = rows(&[
            (0.0, 1, 60 * SEG, 10 * SEG, 1),
            (1.0, 1, 62 * SEG, 4 * SEG, 1),
            (2.0, 1, 0, 128 * SEG, 1),
            (3.0, 1, 0, 128 * SEG, 1),
        ]);
        let res = run(&r, &cfg, &PolicyArrays::default()).unwrap();
        assert_eq!(res.info.hits, 2);
        assert_eq!(res.metrics.admitted_segments, 128);
        // access 2: missing 0..59 and 70..127 -> one IO over 0..127 (partial hits re-read)
        assert_eq!(res.metrics.backend_bytes, (10 + 128) * SEG);
    }

    #[test]
    fn errors_not_panics() {
        let good = rows(&[(0.0, 1, 0, SEG, 1), (1.0, 1, 0, SEG, 1)]);
        let none = PolicyArrays::default();
        assert!(run(
            &good,
            &FlashConfig {
                warmup_s: 5.0,
                ..tiny()
            },
            &none
        )
        .is_err());
        let opt = FlashConfig {
            admission: AdmissionKind::Opt,
            ..tiny()
        };
        assert!(run(&good, &opt, &none).unwrap_err().0.contains("'admit'"));
        let short = [1u8];
        let a = PolicyArrays {
            admit: Some(&short),
            ..Default::default()
        };
        assert!(run(&good, &opt, &a).unwrap_err().0.contains("1 elements"));
        let unsorted = rows(&[(1.0, 1, 0, SEG, 1), (0.0, 1, 0, SEG, 1)]);
        assert!(run(&unsorted, &tiny(), &none).is_err());
        let too_big = rows(&[(0.0, 1, 8 << 20, 1, 1), (1.0, 1, 0, SEG, 1)]);
        assert!(run(&too_big, &tiny(), &none).is_err());
        let empty = rows(&[]);
        assert!(run(&empty, &tiny(), &none).is_err());
    }

    #[test]
    fn percentile_matches_numpy_linear() {
        let v = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert!(close(percentile(&v, 0.9), 4.0 + 4.0 * 0.7));
        assert_eq!(percentile(&[5.0], 0.99), 5.0);
    }
}
