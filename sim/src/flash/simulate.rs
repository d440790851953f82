//! The entry points: validate, build the policies and the eviction order(s) the config
//! names, and run the cache.

use std::time::Instant;

use crate::core::config::{
    AdmissionKind, EvictionKind, FlashConfig, PrefetchKind, SimError, WhenKind,
};
use crate::core::eviction::{Eviction, Fifo, Lru};
use crate::flash::admission::{
    Admission, AdmitAll, CoinFlip, Opt, RejectX, RejectXBlock, Threshold,
};
use crate::flash::cache::FlashSim;
use crate::flash::input::{validate, validate_partition, PolicyArrays, StreamPartition, Trace};
use crate::flash::metrics::FlashResult;
use crate::flash::orders::{PerStream, Whole};
use crate::flash::prefetch::{GivenRange, NoPrefetch, Prefetch, Triggered, When, WholeBlock};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::shares::pages_of_shares;
    use crate::flash::testing::{close, rows, run, run_part, tiny, Rows, SEG};

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
}
