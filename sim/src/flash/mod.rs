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
//!
//! MAT (learned eviction at the tail of the block LRU) is another eviction of this mode, in
//! `crate::compose::flash_mat` (LRU with block-level recency only; same loop, its own `Orders`).
//!
//! Partitioned mode (optional, [`StreamPartition`]; MLCache in flash mode): the
//! cache is divided among `k` streams (e.g. namespaces), each with its own eviction order (of
//! the same kind and units as above) and its own quota of segments; the quotas change at
//! given interval boundaries. Every metric stays whole-cache; `Info::streams` adds per-stream
//! counts and the quotas applied.
//! * A block belongs to the partition of the stream whose access inserted it while it was
//!   not cached (stored per block). An access of stream `s` to a block owned by another
//!   stream is treated as that owner's: its recency and its insertions (the missing and the
//!   prefetched segments) go to the owner's order and quota. Keys normally belong to one
//!   namespace; the access is still counted as a GET (and hit) of `s`, while the admitted
//!   segments and the evictions are counted under the partition (the owner).
//! * Capacity per partition: the global rule applied to the quota; inserting into partition
//!   `p` evicts from `p`'s own order while `used[p] > 0 && used[p] + 1 >= quota[p]`, so `p`
//!   holds at most `quota[p] - 1` segments. A partition whose quota is 0 or 1 caches
//!   nothing: its misses are asked to the admission policy as usual, then treated as
//!   rejected (nothing inserted, nothing prefetched, not counted as admitted). This differs
//!   from the unpartitioned cache at capacity 1, which holds one segment. This is the one
//!   definition of a quota: the runtime's engine holds q - 1 regions per quota of q
//!   (`frt_partition_holds`, runtime/src/engine/policy_slots.h).
//! * Interval `j` starts before access `bounds[j]`: the quotas become
//!   `core::shares::pages_of_shares(shares[j], capacity)` (an invalid row: an even split,
//!   counted in `fallbacks`), and every partition holding at least its new quota evicts from
//!   its own order (LRU end) until it holds at most `quota - 1` (none when the quota is <= 1).
//!   These count as evictions (their age is taken at the time of access `bounds[j]`) and
//!   also as `resize_evictions`. Equal bounds make an empty interval: its quotas are applied,
//!   then at once the next interval's.

pub mod admission;
pub mod online_features;
pub mod prefetch;

use std::time::Instant;

use crate::core::config::{
    err, AdmissionKind, EvictionKind, FlashConfig, PrefetchKind, SimError, WhenKind,
};
use crate::core::eviction::{Eviction, Fifo, Lru};
use crate::core::hash::{new_map, FastMap};
use crate::core::shares::pages_of_shares;
use crate::flash::admission::{
    Admission, AdmitAll, CoinFlip, MissCtx, Opt, RejectX, RejectXBlock, Threshold,
};
use crate::flash::prefetch::{GivenRange, NoPrefetch, Prefetch, Triggered, When, WholeBlock};

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

/// The optional partitioned mode's inputs (module docs, "Partitioned mode"): `streams` (k)
/// partitions, the stream of every access, the intervals and each interval's shares.
#[derive(Debug, Clone, Copy)]
pub struct StreamPartition<'a> {
    /// The number of streams, k >= 1.
    pub streams: u32,
    /// Per access (GETs and PUTs alike): its stream, in 0..k.
    pub stream: &'a [u32],
    /// Access indices where the intervals start: `bounds[0] == 0`, non-decreasing, each below
    /// the number of accesses; interval j covers accesses `bounds[j]..bounds[j+1]` (the last
    /// one to the end of the trace).
    pub bounds: &'a [u64],
    /// Interval j's share of the capacity for each stream: `bounds.len() x k`, row-major.
    pub shares: &'a [f64],
}

/// Check the partitioned mode's inputs against a trace of `n` accesses; O(n), no allocation.
pub fn validate_partition(n: usize, part: &StreamPartition) -> Result<(), SimError> {
    let k = part.streams;
    if k == 0 {
        return err("partitioned mode needs at least one stream ('streams' is 0)");
    }
    if part.stream.len() != n {
        return err(format!(
            "array 'stream' has {} elements but the trace has {n} accesses",
            part.stream.len()
        ));
    }
    if let Some((i, s)) = part.stream.iter().enumerate().find(|(_, &s)| s >= k) {
        return err(format!(
            "array 'stream': access {i} has stream {s}, but there are {k} streams (0..{k})"
        ));
    }
    let b = part.bounds;
    match b.first() {
        None => return err("array 'bounds' is empty; it needs at least the first interval's start, 0"),
        Some(&b0) if b0 != 0 => {
            return err(format!(
                "array 'bounds' must start at 0 (the first interval starts with the first access), got {b0}"
            ))
        }
        Some(_) => {}
    }
    if let Some(j) = (1..b.len()).find(|&j| b[j] < b[j - 1]) {
        return err(format!(
            "array 'bounds' must be ascending: bounds[{j}] = {} is below bounds[{}] = {}",
            b[j],
            j - 1,
            b[j - 1]
        ));
    }
    let last = b[b.len() - 1];
    if last >= n as u64 {
        return err(format!(
            "array 'bounds': bounds[{}] = {last} is not below the trace's {n} accesses",
            b.len() - 1
        ));
    }
    let want = b.len() as u128 * k as u128;
    if part.shares.len() as u128 != want {
        return err(format!(
            "array 'shares' has {} elements but intervals x streams = {} x {k} = {want}",
            part.shares.len(),
            b.len()
        ));
    }
    Ok(())
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
    /// Partitioned mode's per-stream counts (None without partitions).
    pub streams: Option<StreamInfo>,
}

/// Per-stream counts of a partitioned run (vectors of length k, indexed by stream).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamInfo {
    pub streams: u32,
    /// GETs of each stream (by the access's own stream).
    pub gets: Vec<u64>,
    /// GET hits of each stream (by the access's own stream).
    pub hits: Vec<u64>,
    /// Segments inserted into each stream's partition (requested and prefetched).
    pub admitted_segments: Vec<u64>,
    /// Segments evicted from each stream's partition (on insertion and on resize).
    pub evictions: Vec<u64>,
    /// The quotas applied, in segments: one row of k per interval (`intervals x k`).
    pub quotas: Vec<u64>,
    /// Evictions because a partition's quota shrank at an interval boundary (also counted
    /// in `evictions` and `Info::evictions`).
    pub resize_evictions: u64,
    /// Share rows that were invalid and replaced by an even split.
    pub fallbacks: u64,
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
    simulate_partitioned(trace, arrays, cfg, None)
}

/// Run the flash-cache simulation, partitioned among streams when `part` is given (module
/// docs, "Partitioned mode"); with None exactly `simulate`.
pub fn simulate_partitioned(
    trace: &Trace,
    arrays: &PolicyArrays,
    cfg: &FlashConfig,
    part: Option<&StreamPartition>,
) -> Result<FlashResult, SimError> {
    let start = Instant::now();
    validate(trace, arrays, cfg)?;
    if let Some(p) = part {
        validate_partition(trace.time.len(), p)?;
    }
    let (mut admission, mut prefetch) = policies(cfg, arrays);
    let mut result = run_policies(trace, cfg, admission.as_mut(), prefetch.as_mut(), part);
    result.metrics.wall_s = start.elapsed().as_secs_f64();
    Ok(result)
}

/// The admission and prefetch policies `cfg` names, reading `arrays` (validated).
pub(crate) fn policies<'a>(
    cfg: &FlashConfig,
    arrays: &PolicyArrays<'a>,
) -> (Box<dyn Admission + 'a>, Box<dyn Prefetch + 'a>) {
    let spb = cfg.segments_per_block();
    let admission: Box<dyn Admission + 'a> = match cfg.admission {
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
    let prefetch: Box<dyn Prefetch + 'a> = match cfg.prefetch {
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
    (admission, prefetch)
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
    let mut result = run_policies(trace, cfg, admission, prefetch, None);
    result.metrics.wall_s = start.elapsed().as_secs_f64();
    Ok(result)
}

/// Run a validated trace (and partition) with the eviction kind of `cfg`.
fn run_policies(
    trace: &Trace,
    cfg: &FlashConfig,
    admission: &mut dyn Admission,
    prefetch: &mut dyn Prefetch,
    part: Option<&StreamPartition>,
) -> FlashResult {
    match cfg.eviction {
        EvictionKind::Lru => run_orders(Lru::new, trace, cfg, admission, prefetch, part),
        EvictionKind::Fifo => run_orders(Fifo::new, trace, cfg, admission, prefetch, part),
    }
}

/// Run with one eviction order of `new`'s kind for the whole cache, or one per stream.
fn run_orders<E: Eviction>(
    new: fn() -> E,
    trace: &Trace,
    cfg: &FlashConfig,
    admission: &mut dyn Admission,
    prefetch: &mut dyn Prefetch,
    part: Option<&StreamPartition>,
) -> FlashResult {
    match part {
        None => FlashSim::new(cfg, Whole(new()), 1).run(trace, admission, prefetch, None),
        Some(p) => {
            let block_units = cfg.eviction == EvictionKind::Lru && cfg.block_level_recency;
            let upb = if block_units {
                1
            } else {
                cfg.segments_per_block()
            };
            let orders = PerStream::new((0..p.streams).map(|_| new()).collect(), upb);
            FlashSim::new(cfg, orders, p.streams as usize).run(trace, admission, prefetch, part)
        }
    }
}

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
struct Whole<E>(E);

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
struct PerStream<E> {
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
    fn new(orders: Vec<E>, upb: u32) -> Self {
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

/// The cache state plus counters; generic over the eviction policy and where its orders live
/// (static dispatch in the hot loop), with admission and prefetch as trait objects (called
/// on misses only).
pub(crate) struct FlashSim<'c, E: Eviction, L: Orders<E>> {
    cfg: &'c FlashConfig,
    pub(crate) orders: L,
    _order_kind: std::marker::PhantomData<E>,
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
    // Partitioned mode only (left empty otherwise):
    /// The partition of the current access: its block's owner, else its own stream.
    part: u32,
    /// Each partition's quota and the segments it holds.
    quota: Vec<u64>,
    part_used: Vec<u64>,
    /// The per-stream counts reported in `Info::streams`.
    streams: StreamInfo,
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
    /// A cache of `cfg`'s capacity and units with `orders` (of `k` partitions when
    /// partitioned).
    pub(crate) fn new(cfg: &'c FlashConfig, orders: L, k: usize) -> Self {
        let spb = cfg.segments_per_block();
        let k = if L::PARTITIONED { k } else { 0 };
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
            quota: vec![0; k],
            part_used: vec![0; k],
            streams: StreamInfo {
                streams: k as u32,
                gets: vec![0; k],
                hits: vec![0; k],
                admitted_segments: vec![0; k],
                evictions: vec![0; k],
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
    fn set_quotas(&mut self, shares: &[f64], t: f64) {
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
    fn insert(&mut self, key: u64, mut cur: Option<u32>, s: u32, t: f64) -> u32 {
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

    /// Simulate the (validated) trace; `part` is the partition when `L::PARTITIONED`.
    pub(crate) fn run(
        &mut self,
        trace: &Trace,
        admission: &mut dyn Admission,
        prefetch: &mut dyn Prefetch,
        part: Option<&StreamPartition>,
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
        let (stream_of, bounds, shares): (&[u32], &[u64], &[f64]) = match part {
            Some(p) if L::PARTITIONED => (p.stream, p.bounds, p.shares),
            _ => (&[], &[], &[]),
        };
        let n_streams = self.quota.len();
        // The next interval to start.
        let mut next_iv = 0usize;

        for i in 0..n {
            let t = trace.time[i];
            if L::PARTITIONED {
                while next_iv < bounds.len() && bounds[next_iv] == i as u64 {
                    let row = &shares[next_iv * n_streams..(next_iv + 1) * n_streams];
                    self.set_quotas(row, t);
                    next_iv += 1;
                }
            }
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
            self.orders.on_get(i, slot);
            let stream = if L::PARTITIONED {
                let s = stream_of[i];
                self.streams.gets[s as usize] += 1;
                // the block's owner, if cached, else the access's stream
                self.part = slot.map_or(s, |sl| self.orders.part_of(sl));
                s as usize
            } else {
                0
            };
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
                    } else if L::EARLY_REFRESH
                        && self.block_units
                        && self.slot_count[sl as usize] == cached
                    {
                        // only the order: the last access is set by the deferred refresh
                        let part = self.orders.part_of(sl);
                        self.orders.touch(part, sl);
                    }
                } else {
                    let spb = self.spb;
                    let base = sl * spb;
                    let part = self.orders.part_of(sl);
                    let (seg_last, orders) = (&mut self.seg_last, &mut self.orders);
                    let masks = &self.masks;
                    let words = self.words;
                    for_cached_in(masks, sl as usize * words, s0, s1, |s| {
                        let u = base + s;
                        seg_last[u as usize] = t;
                        if E::REORDERS_ON_TOUCH {
                            orders.touch(part, u);
                        }
                    });
                }
            }
            if cached == nseg {
                if L::PARTITIONED {
                    self.streams.hits[stream] += 1;
                }
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
            // A partition whose quota is <= 1 caches nothing: the miss is treated as rejected.
            let admitted = admitted && (!L::PARTITIONED || self.quota[self.part as usize] > 1);
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
            rejectx_history: self.cfg.rejectx_history() as u64,
            peak_cached_blocks: self.peak_blocks,
            streams: L::PARTITIONED.then(|| std::mem::take(&mut self.streams)),
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
pub(crate) mod tests {
    use super::*;

    pub(crate) const SEG: u64 = 131_072;

    /// A trace's columns, owned (tests build them; `trace` lends them out).
    pub(crate) struct Rows {
        pub time: Vec<f64>,
        pub key: Vec<u64>,
        pub offset: Vec<u64>,
        pub size: Vec<u64>,
        pub op: Vec<u8>,
    }

    impl Rows {
        pub(crate) fn trace(&self) -> Trace<'_> {
            Trace {
                time: &self.time,
                key: &self.key,
                offset: &self.offset,
                size: &self.size,
                op: &self.op,
            }
        }
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
        simulate(&r.trace(), arrays, cfg)
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

    // --- Partitioned mode ------------------------------------------------------------------

    fn run_part(
        r: &Rows,
        cfg: &FlashConfig,
        stream: &[u32],
        bounds: &[u64],
        shares: &[f64],
        streams: u32,
    ) -> Result<FlashResult, SimError> {
        let t = Trace {
            time: &r.time,
            key: &r.key,
            offset: &r.offset,
            size: &r.size,
            op: &r.op,
        };
        let part = StreamPartition {
            streams,
            stream,
            bounds,
            shares,
        };
        simulate_partitioned(&t, &PolicyArrays::default(), cfg, Some(&part))
    }

    /// A random trace of `n` accesses (one in ten a PUT), each of a random stream of `k`;
    /// keys are disjoint between streams (stream s: `s * 1000 + 0..keys`). Each access reads
    /// 1-3 segments from the block's first 6. Returns the rows and each access's stream.
    fn random_streams(seed: u64, n: usize, k: u32, keys: u64) -> (Rows, Vec<u32>) {
        let mut r = crate::core::hash::lcg(seed);
        let mut rows_v = Vec::with_capacity(n);
        let mut stream = Vec::with_capacity(n);
        for i in 0..n {
            let s = (r() % k as u64) as u32;
            // skewed keys: the square of a uniform draw favours low ranks
            let u = r() % keys;
            let key = s as u64 * 1000 + u * u / keys;
            let s0 = r() % 4;
            let len = 1 + r() % 3;
            let op = if r().is_multiple_of(10) { 3 } else { 1 };
            rows_v.push((i as f64 * 0.5, key, s0 * SEG, len * SEG, op));
            stream.push(s);
        }
        (rows(&rows_v), stream)
    }

    /// The rows of stream `s` alone.
    fn rows_of(r: &Rows, stream: &[u32], s: u32) -> Rows {
        let keep: Vec<usize> = (0..stream.len()).filter(|&i| stream[i] == s).collect();
        Rows {
            time: keep.iter().map(|&i| r.time[i]).collect(),
            key: keep.iter().map(|&i| r.key[i]).collect(),
            offset: keep.iter().map(|&i| r.offset[i]).collect(),
            size: keep.iter().map(|&i| r.size[i]).collect(),
            op: keep.iter().map(|&i| r.op[i]).collect(),
        }
    }

    /// The eviction configurations: LRU with block units, LRU with segment units (also with
    /// a block of 6 segments, not a power of two), FIFO (with and without block-level
    /// recency), and LRU with whole-block prefetch.
    fn eviction_configs(capacity: u64) -> Vec<(&'static str, FlashConfig)> {
        let base = FlashConfig {
            capacity_segments: capacity,
            ..tiny()
        };
        vec![
            ("lru blocks", base.clone()),
            (
                "lru segments",
                FlashConfig {
                    block_level_recency: false,
                    ..base.clone()
                },
            ),
            (
                "fifo",
                FlashConfig {
                    eviction: EvictionKind::Fifo,
                    ..base.clone()
                },
            ),
            (
                "fifo segment recency",
                FlashConfig {
                    eviction: EvictionKind::Fifo,
                    block_level_recency: false,
                    ..base.clone()
                },
            ),
            (
                "lru segments, 6 segments per block",
                FlashConfig {
                    block_level_recency: false,
                    block_bytes: 6 * SEG,
                    ..base.clone()
                },
            ),
            (
                "lru blocks, prefetch block",
                FlashConfig {
                    prefetch: PrefetchKind::Block,
                    ..base
                },
            ),
        ]
    }

    /// Debug text: equal iff every float is bit-identical (NaN included).
    fn bits_of<T: std::fmt::Debug>(x: &T) -> String {
        format!("{x:?}")
    }

    /// One stream owning the whole cache is the unpartitioned cache: every metric, series
    /// and count, over several intervals (one with an invalid share row: an even split of
    /// one stream is the whole cache too).
    #[test]
    fn one_stream_with_the_whole_cache_is_unpartitioned() {
        let (r, _) = random_streams(11, 3000, 1, 90);
        let n = r.time.len();
        let stream = vec![0u32; n];
        let bounds = [0, 700, 700, 2100];
        let shares = [1.0, 0.25, f64::NAN, 3.0];
        let mut configs = eviction_configs(40);
        configs.push((
            "rejectx",
            FlashConfig {
                admission: AdmissionKind::RejectX { x: 1, factor: 2.0 },
                capacity_segments: 40,
                ..tiny()
            },
        ));
        for (name, cfg) in configs {
            let mut want = run(&r, &cfg, &PolicyArrays::default()).unwrap();
            let mut got = run_part(&r, &cfg, &stream, &bounds, &shares, 1).unwrap();
            assert!(
                want.info.evictions > 100,
                "{name}: the cache must be under pressure"
            );
            want.metrics.wall_s = 0.0;
            got.metrics.wall_s = 0.0;
            assert_eq!(bits_of(&got.metrics), bits_of(&want.metrics), "{name}");
            assert_eq!(bits_of(&got.series), bits_of(&want.series), "{name}");
            let st = got.info.streams.take().expect("per-stream counts");
            assert_eq!(bits_of(&got.info), bits_of(&want.info), "{name}");
            assert_eq!(st.streams, 1);
            assert_eq!(st.gets, [want.info.get_accesses], "{name}");
            assert_eq!(st.hits, [want.info.hits], "{name}");
            assert_eq!(st.admitted_segments, [want.metrics.admitted_segments]);
            assert_eq!(st.evictions, [want.info.evictions], "{name}");
            assert_eq!(st.quotas, [40; 4]);
            assert_eq!((st.resize_evictions, st.fallbacks), (0, 1), "{name}");
        }
    }

    /// Two streams with disjoint keys and fixed shares: each stream's counts are those of
    /// the unpartitioned cache run on its accesses alone with its quota as the capacity.
    #[test]
    fn fixed_partitions_are_independent_caches() {
        let (r, stream) = random_streams(5, 4000, 2, 70);
        let bounds = [0, 1000, 2500];
        let shares = [0.3, 0.7, 3.0, 7.0, 0.3, 0.7];
        let (quotas, valid) = pages_of_shares(&shares[..2], 40);
        assert!(valid);
        assert_eq!(quotas, [12, 28]);
        for (name, cfg) in eviction_configs(40) {
            let got = run_part(&r, &cfg, &stream, &bounds, &shares, 2).unwrap();
            let st = got.info.streams.as_ref().unwrap();
            assert_eq!(st.quotas, [12, 28, 12, 28, 12, 28]);
            assert_eq!((st.resize_evictions, st.fallbacks), (0, 0));
            for s in 0..2u32 {
                let alone = rows_of(&r, &stream, s);
                let cfg_s = FlashConfig {
                    capacity_segments: quotas[s as usize],
                    ..cfg.clone()
                };
                let want = run(&alone, &cfg_s, &PolicyArrays::default()).unwrap();
                let i = s as usize;
                assert!(
                    want.info.evictions > 50,
                    "{name}: stream {s} under pressure"
                );
                assert_eq!(st.gets[i], want.info.get_accesses, "{name}: stream {s}");
                assert_eq!(st.hits[i], want.info.hits, "{name}: stream {s}");
                assert_eq!(
                    st.admitted_segments[i], want.metrics.admitted_segments,
                    "{name}: stream {s}"
                );
                assert_eq!(st.evictions[i], want.info.evictions, "{name}: stream {s}");
            }
            // whole-cache counts are the streams' sums
            assert_eq!(got.info.hits, st.hits.iter().sum::<u64>());
            assert_eq!(got.info.evictions, st.evictions.iter().sum::<u64>());
            assert_eq!(
                got.metrics.admitted_segments,
                st.admitted_segments.iter().sum::<u64>()
            );
        }
    }

    /// A quota drops at an interval boundary: the stream's least recently used units are
    /// evicted at once (computed by hand), the other stream keeps its content.
    #[test]
    fn hand_computed_shrink_at_a_boundary() {
        // Capacity 10: quotas 5, 5 then 2, 8 (stream 0 may hold 4, then 1 segment).
        let r = rows(&[
            (0.0, 1, 0, SEG, 1),   // s0: miss
            (1.0, 2, 0, SEG, 1),   // s0: miss
            (2.0, 3, 0, SEG, 1),   // s0: miss
            (3.0, 4, 0, SEG, 1),   // s0: miss (holds 4)
            (4.0, 100, 0, SEG, 1), // s1: miss
            (5.0, 1, 0, SEG, 1),   // s0: hit; LRU order 2, 3, 4, 1
            // interval 1 (quota 2): keys 2, 3, 4 go (ages 9, 8, 7)
            (10.0, 1, 0, SEG, 1),   // s0: hit
            (11.0, 100, 0, SEG, 1), // s1: hit
            (12.0, 4, 0, SEG, 1),   // s0: miss, evicts key 1 (age 2)
            (13.0, 1, 0, SEG, 1),   // s0: miss, evicts key 4 (age 1)
        ]);
        let stream = [0, 0, 0, 0, 1, 0, 0, 1, 0, 0];
        let bounds = [0, 6];
        let shares = [0.5, 0.5, 0.2, 0.8];
        for block_level in [true, false] {
            let cfg = FlashConfig {
                capacity_segments: 10,
                block_level_recency: block_level,
                ..tiny()
            };
            let res = run_part(&r, &cfg, &stream, &bounds, &shares, 2).unwrap();
            let st = res.info.streams.as_ref().unwrap();
            assert_eq!(st.quotas, [5, 5, 2, 8]);
            assert_eq!(st.resize_evictions, 3);
            assert_eq!(st.gets, [8, 2]);
            assert_eq!(st.hits, [2, 1]);
            assert_eq!(st.admitted_segments, [6, 1]);
            assert_eq!(st.evictions, [5, 0]);
            assert_eq!((res.info.evictions, res.info.hits), (5, 3));
            assert!(close(res.metrics.avg_eviction_age_s, 27.0 / 5.0));
            assert_eq!(res.metrics.admitted_segments, 7);
        }
    }

    /// A stream whose quota is 0 or 1 caches nothing (its misses are rejected), and a
    /// quota dropping to 1 empties the partition.
    #[test]
    fn quota_of_one_or_less_caches_nothing() {
        // stream 1 reads key 9 over and over; stream 0 reads key 1
        let r = rows(&[
            (0.0, 9, 0, SEG, 1),
            (1.0, 9, 0, SEG, 1),
            (2.0, 1, 0, 2 * SEG, 1),
            (3.0, 9, 0, SEG, 1),
            (4.0, 9, 0, SEG, 1), // interval 1: quota 4 (holds key 9 after this miss)
            (5.0, 9, 0, SEG, 1), // hit
            (6.0, 9, 0, SEG, 1), // interval 2: quota 1, key 9 evicted at the boundary: miss
            (7.0, 9, 0, SEG, 1), // miss
            (8.0, 1, 0, 2 * SEG, 1),
        ]);
        let stream = [1, 1, 0, 1, 1, 1, 1, 1, 0];
        let bounds = [0, 4, 6];
        // capacity 4: [4, 0], then [0, 4] (stream 0's 2 segments go), then [3, 1]
        let shares = [1.0, 0.0, 0.0, 1.0, 0.75, 0.25];
        let cfg = FlashConfig {
            capacity_segments: 4,
            ..tiny()
        };
        let res = run_part(&r, &cfg, &stream, &bounds, &shares, 2).unwrap();
        let st = res.info.streams.as_ref().unwrap();
        assert_eq!(st.quotas, [4, 0, 0, 4, 3, 1]);
        assert_eq!(st.gets, [2, 7]);
        assert_eq!(st.hits, [0, 1]);
        assert_eq!(st.admitted_segments, [4, 1]);
        // stream 0 shrinks to 0 at access 4 (2 segments), stream 1 to 1 at access 6 (1)
        assert_eq!(st.evictions, [2, 1]);
        assert_eq!(st.resize_evictions, 3);
        assert_eq!(res.info.hits, 1);
        assert_eq!(res.metrics.admitted_segments, 5);
        // every miss still reads from the backend
        assert_eq!(res.metrics.backend_ios, 8);
    }

    /// An access to a block another stream inserted is the owner's: its insertions go to
    /// the owner's partition, while its GET and hit count for its own stream.
    #[test]
    fn an_access_to_another_streams_block_is_the_owners() {
        let r = rows(&[
            (0.0, 1, 0, SEG, 1),   // s0: miss, key 1 is stream 0's
            (1.0, 1, 0, SEG, 1),   // s1: hit (a hit of stream 1)
            (2.0, 1, SEG, SEG, 1), // s1: miss; segment 1 goes into stream 0's partition
            (3.0, 2, 0, SEG, 1),   // s1: keys 2-5 fill stream 1's partition (4 segments)
            (4.0, 3, 0, SEG, 1),
            (5.0, 4, 0, SEG, 1),
            (6.0, 5, 0, SEG, 1),
            (7.0, 6, 0, SEG, 1), // s1: evicts key 2 from stream 1's partition only
            (8.0, 1, 0, 2 * SEG, 1), // s0: hit on both segments
        ]);
        let stream = [0, 1, 1, 1, 1, 1, 1, 1, 0];
        for block_level in [true, false] {
            let cfg = FlashConfig {
                capacity_segments: 10,
                block_level_recency: block_level,
                ..tiny()
            };
            let res = run_part(&r, &cfg, &stream, &[0], &[0.5, 0.5], 2).unwrap();
            let st = res.info.streams.as_ref().unwrap();
            assert_eq!(st.quotas, [5, 5]);
            assert_eq!(st.gets, [2, 7]);
            assert_eq!(st.hits, [1, 1]);
            assert_eq!(st.admitted_segments, [2, 5]);
            assert_eq!(st.evictions, [0, 1]);
        }
    }

    #[test]
    fn partition_errors_name_the_array() {
        let r = rows(&[
            (0.0, 1, 0, SEG, 1),
            (1.0, 1, 0, SEG, 1),
            (2.0, 2, 0, SEG, 1),
        ]);
        let cfg = tiny();
        let e = |stream: &[u32], bounds: &[u64], shares: &[f64], k: u32| {
            run_part(&r, &cfg, stream, bounds, shares, k).unwrap_err().0
        };
        let ok_shares = [0.5, 0.5];
        assert!(e(&[0, 0], &[0], &ok_shares, 2).contains("array 'stream' has 2 elements"));
        assert!(e(&[0, 2, 0], &[0], &ok_shares, 2).contains("array 'stream': access 1"));
        assert!(e(&[0, 1, 0], &[], &[], 2).contains("array 'bounds' is empty"));
        assert!(e(&[0, 1, 0], &[1], &ok_shares, 2).contains("array 'bounds' must start at 0"));
        let four = [0.5; 6];
        assert!(e(&[0, 1, 0], &[0, 2, 1], &four, 2).contains("array 'bounds' must be ascending"));
        assert!(e(&[0, 1, 0], &[0, 3], &[0.5; 4], 2).contains("not below the trace's 3"));
        assert!(e(&[0, 1, 0], &[0, 1], &ok_shares, 2).contains("array 'shares' has 2 elements"));
        assert!(e(&[0, 0, 0], &[0], &[], 0).contains("at least one stream"));
        // the trace's own checks come first
        let bad = FlashConfig {
            warmup_s: 100.0,
            ..tiny()
        };
        assert!(run_part(&r, &bad, &[0, 1, 0], &[0], &ok_shares, 2).is_err());
        // valid: equal bounds make an empty interval
        assert!(run_part(&r, &cfg, &[0, 1, 0], &[0, 1, 1], &four, 2).is_ok());
    }
}
