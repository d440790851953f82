//! Partitioned caching across streams (MLCache): a cache of `capacity` pages shared
//! by several streams, in object/page mode (every request is one page; sizes play no part).
//!
//! * Each stream has its own LRU partition with a quota of pages; a miss inserts the page into
//!   its stream's partition, evicting that partition's LRU pages while it is over quota (a
//!   partition of quota 0 caches nothing). The same key in two streams is two pages.
//! * Every `interval` requests (of those the cache sees) the [`PartitionPolicy`] gives new
//!   quotas; a partition that shrinks evicts its LRU pages until it fits (the paper's §3.2.3:
//!   one page at a time, classic LRU); one that grows just gets the room.
//! * Reads and writes are both cached unless `writes_only` (the paper's Alg. 1: reads go
//!   around the cache, never counted as hits). The headline is the write hit ratio; the hit
//!   ratio and the read hit ratio are reported beside it.
//!
//! Policies ([`PartitionKind`]): `shared` (one LRU over all streams, no partitions), `even`
//! (capacity / streams each), `static_optimal` (the best fixed split for the whole trace),
//! `discrete_optimal` (the best split of each interval, in hindsight: the paper's ideal
//! model and the labels MLCache trains on) and `mlcache` (a predicted share per stream per
//! interval, supplied as an array; the network comes later).
//!
//! The optima come from hit curves: a request hits an LRU partition of `c` pages iff its
//! per-stream stack distance is `<= c` ([`crate::mlcache::reuse`]), so the hits of a split are the sum
//! of each stream's hit curve at its size, and [`best_split`] maximises that sum by dynamic
//! programming over `steps` equal steps of the capacity (the paper's t = 10). Curves assume a
//! partition has had its size all along; the real outcome (warm-up after a resize included)
//! is what the simulation measures.

use std::time::Instant;

use crate::core::config::{err, SimError};
use crate::core::eviction::{Eviction, Lru};
use crate::core::hash::{new_map, FastMap};
use crate::core::ratio;
pub use crate::core::shares::{apportion, pages_of_shares};
pub use crate::mlcache::config::{Objective, PartitionConfig, PartitionKind, PARTITION_POLICIES};
pub use crate::mlcache::optimal::{best_split, discrete_optimal, pages_of_split, static_optimal};
pub use crate::mlcache::policy::{Even, Fixed, IntervalView, PartitionPolicy, PerInterval, Shared};
pub use crate::mlcache::trace::{CachedRequests, StreamTrace};

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionResult {
    pub requests: u64,
    pub hits: u64,
    pub reads: u64,
    pub read_hits: u64,
    pub writes: u64,
    pub write_hits: u64,
    pub hit_ratio: f64,
    pub read_hit_ratio: f64,
    pub write_hit_ratio: f64,
    /// Requests the cache saw (all, or the writes with `writes_only`).
    pub cached_requests: u64,
    pub intervals: u64,
    /// Evictions on a miss, and evictions because a partition shrank at a boundary.
    pub evictions: u64,
    pub resize_evictions: u64,
    /// Per stream: requests and hits (of every request, cached or not).
    pub stream_requests: Vec<u64>,
    pub stream_hits: Vec<u64>,
    /// Quotas in pages per interval (`intervals x n_streams`, row-major); empty for `shared`.
    pub allocations: Vec<u64>,
    /// Hits per interval (every request of the interval the cache saw).
    pub interval_hits: Vec<u64>,
    /// Invalid predicted share vectors replaced by an even split (`mlcache`).
    pub fallbacks: u64,
    pub wall_s: f64,
}

/// The partitioned cache's state: one LRU per partition (one in all when shared).
struct Partitions {
    lists: Vec<Lru>,
    quota: Vec<u64>,
    used: Vec<u64>,
    map: FastMap<(u32, u64), u32>,
    slot_item: Vec<(u32, u64)>,
    slot_list: Vec<u32>,
    free: Vec<u32>,
    shared: bool,
    evictions: u64,
}

impl Partitions {
    fn new(n_streams: usize) -> Self {
        Partitions {
            lists: (0..n_streams).map(|_| Lru::new()).collect(),
            quota: vec![0; n_streams],
            used: vec![0; n_streams],
            map: new_map(),
            slot_item: Vec::new(),
            slot_list: Vec::new(),
            free: Vec::new(),
            shared: false,
            evictions: 0,
        }
    }

    fn evict_from(&mut self, list: usize) {
        let v = self.lists[list]
            .victim()
            .expect("a partition over quota holds a page");
        self.lists[list].remove(v);
        self.map.remove(&self.slot_item[v as usize]);
        self.used[list] -= 1;
        self.free.push(v);
    }

    /// Set the quotas (None: one shared LRU of `capacity`); shrinking partitions evict.
    /// Returns the evictions it took.
    fn resize(&mut self, quotas: Option<&[u64]>, capacity: u64) -> u64 {
        let mut n = 0;
        match quotas {
            None => {
                self.shared = true;
                self.quota.iter_mut().for_each(|q| *q = 0);
                self.quota[0] = capacity;
            }
            Some(q) => {
                assert!(!self.shared, "a policy switched from shared to partitioned");
                self.quota.copy_from_slice(q);
            }
        }
        for l in 0..self.lists.len() {
            while self.used[l] > self.quota[l] {
                self.evict_from(l);
                n += 1;
            }
        }
        n
    }

    /// One request; true on a hit.
    fn access(&mut self, stream: u32, key: u64) -> bool {
        let item = (stream, key);
        if let Some(&slot) = self.map.get(&item) {
            let l = self.slot_list[slot as usize] as usize;
            self.lists[l].touch(slot);
            return true;
        }
        let l = if self.shared { 0 } else { stream as usize };
        if self.quota[l] == 0 {
            return false;
        }
        while self.used[l] >= self.quota[l] {
            self.evict_from(l);
            self.evictions += 1;
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slot_item[s as usize] = item;
                self.slot_list[s as usize] = l as u32;
                s
            }
            None => {
                self.slot_item.push(item);
                self.slot_list.push(l as u32);
                (self.slot_item.len() - 1) as u32
            }
        };
        self.map.insert(item, slot);
        self.lists[l].insert(slot);
        self.used[l] += 1;
        false
    }
}

/// Run `policy` over `trace`: intervals of `cfg.interval` cached requests, quotas from the
/// policy at the start of each.
pub fn simulate_partitioned_with<P: PartitionPolicy>(
    policy: &mut P,
    trace: &StreamTrace<'_>,
    cached: &CachedRequests,
    cfg: &PartitionConfig,
) -> Result<PartitionResult, SimError> {
    cfg.validate()?;
    trace.validate()?;
    let start = Instant::now();
    let n_streams = trace.n_streams;
    let n_iv = cached.n_intervals(cfg);
    let hist = cached.histograms(n_streams, cfg);
    let mut parts = Partitions::new(n_streams);
    let mut allocations = Vec::new();
    let mut interval_hits = vec![0u64; n_iv];
    let mut hit = vec![false; trace.keys.len()];
    let mut resize_evictions = 0;
    let mut shared = None;
    for iv in 0..n_iv {
        let view = IntervalView {
            n_streams,
            capacity: cfg.capacity,
            steps: cfg.steps,
            prev_histograms: (iv > 0)
                .then(|| &hist[(iv - 1) * n_streams * cfg.steps..iv * n_streams * cfg.steps]),
        };
        let quotas = policy.allocate(iv, &view);
        if *shared.get_or_insert(quotas.is_none()) != quotas.is_none() {
            return err(format!(
                "interval {iv}: a policy must be shared in every interval or in none"
            ));
        }
        if let Some(q) = &quotas {
            if q.len() != n_streams {
                return err(format!(
                    "interval {iv}: {} quotas for {n_streams} streams",
                    q.len()
                ));
            }
            let sum: u128 = q.iter().map(|&x| x as u128).sum();
            if sum > cfg.capacity as u128 {
                return err(format!(
                    "interval {iv}: quotas sum to {sum} pages, above the capacity {}",
                    cfg.capacity
                ));
            }
            allocations.extend_from_slice(q);
        }
        resize_evictions += parts.resize(quotas.as_deref(), cfg.capacity);
        let lo = iv * cfg.interval;
        let hi = (lo + cfg.interval).min(cached.keys.len());
        for j in lo..hi {
            if parts.access(cached.streams[j], cached.keys[j]) {
                hit[cached.index[j]] = true;
                interval_hits[iv] += 1;
            }
        }
    }
    let mut r = PartitionResult {
        requests: trace.keys.len() as u64,
        hits: 0,
        reads: 0,
        read_hits: 0,
        writes: 0,
        write_hits: 0,
        hit_ratio: f64::NAN,
        read_hit_ratio: f64::NAN,
        write_hit_ratio: f64::NAN,
        cached_requests: cached.keys.len() as u64,
        intervals: n_iv as u64,
        evictions: parts.evictions,
        resize_evictions,
        stream_requests: vec![0; n_streams],
        stream_hits: vec![0; n_streams],
        allocations,
        interval_hits,
        fallbacks: 0,
        wall_s: 0.0,
    };
    for (i, &h) in hit.iter().enumerate() {
        let h = h as u64;
        let s = trace.streams[i] as usize;
        r.stream_requests[s] += 1;
        r.stream_hits[s] += h;
        r.hits += h;
        if trace.writes[i] {
            r.writes += 1;
            r.write_hits += h;
        } else {
            r.reads += 1;
            r.read_hits += h;
        }
    }
    r.hit_ratio = ratio(r.hits, r.requests);
    r.read_hit_ratio = ratio(r.read_hits, r.reads);
    r.write_hit_ratio = ratio(r.write_hits, r.writes);
    r.wall_s = start.elapsed().as_secs_f64();
    Ok(r)
}

/// Run a named policy. `shares` (`intervals x n_streams`, row-major, fractions of the
/// capacity) is what `mlcache` needs: the share of every stream in every interval (an
/// interval past the given rows keeps the last row; invalid rows fall back to even).
pub fn simulate_partitioned(
    kind: PartitionKind,
    trace: &StreamTrace<'_>,
    cfg: &PartitionConfig,
    shares: Option<&[f64]>,
) -> Result<PartitionResult, SimError> {
    cfg.validate()?;
    trace.validate()?;
    if kind != PartitionKind::MlCache && shares.is_some() {
        return err("shares are only for policy mlcache");
    }
    let cached = CachedRequests::new(trace, cfg);
    let n_streams = trace.n_streams;
    let mut fallbacks = 0;
    let mut r = match kind {
        PartitionKind::Shared => simulate_partitioned_with(&mut Shared, trace, &cached, cfg)?,
        PartitionKind::Even => simulate_partitioned_with(&mut Even, trace, &cached, cfg)?,
        PartitionKind::StaticOptimal => {
            let curves = cached.curves(n_streams, cfg);
            let (split, _) = static_optimal(&curves, n_streams, cfg.steps);
            let mut p = Fixed(pages_of_split(&split, cfg.capacity));
            simulate_partitioned_with(&mut p, trace, &cached, cfg)?
        }
        PartitionKind::DiscreteOptimal => {
            let curves = cached.curves(n_streams, cfg);
            let splits = discrete_optimal(&curves, n_streams, cfg.steps);
            let pages = splits
                .iter()
                .map(|s| pages_of_split(s, cfg.capacity))
                .collect();
            simulate_partitioned_with(&mut PerInterval(pages), trace, &cached, cfg)?
        }
        PartitionKind::MlCache => {
            let Some(shares) = shares else {
                return err("policy mlcache needs shares: one row of n_streams per interval");
            };
            if shares.is_empty() || shares.len() % n_streams != 0 {
                return err(format!(
                    "shares has {} values, not a whole number (>= 1) of rows of {n_streams} streams",
                    shares.len()
                ));
            }
            let pages = shares
                .chunks(n_streams)
                .map(|row| {
                    let (p, ok) = pages_of_shares(row, cfg.capacity);
                    fallbacks += u64::from(!ok);
                    p
                })
                .collect();
            simulate_partitioned_with(&mut PerInterval(pages), trace, &cached, cfg)?
        }
    };
    r.fallbacks = fallbacks;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hash::lcg;

    type Quotas = Box<dyn Fn(usize) -> Option<Vec<u64>>>;

    /// A slow obvious partitioned LRU: one Vec per stream (front = most recent) or one shared.
    fn slow_partitioned(
        keys: &[u64],
        streams: &[u32],
        n_streams: usize,
        interval: usize,
        quotas: &dyn Fn(usize) -> Option<Vec<u64>>,
        capacity: u64,
    ) -> Vec<bool> {
        let mut lists: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n_streams];
        let mut shared = false;
        let mut q = vec![0u64; n_streams];
        let mut out = Vec::new();
        for (i, (&key, &s)) in keys.iter().zip(streams).enumerate() {
            if i % interval == 0 {
                match quotas(i / interval) {
                    None => {
                        shared = true;
                        q = vec![0; n_streams];
                        q[0] = capacity;
                    }
                    Some(v) => q = v,
                }
                for l in 0..n_streams {
                    lists[l].truncate(q[l] as usize);
                }
            }
            let item = (s, key);
            let l = if shared { 0 } else { s as usize };
            let found = lists.iter().position(|x| x.contains(&item));
            out.push(found.is_some());
            if let Some(fl) = found {
                let p = lists[fl].iter().position(|x| *x == item).unwrap();
                lists[fl].remove(p);
                lists[fl].insert(0, item);
            } else if q[l] > 0 {
                lists[l].insert(0, item);
                lists[l].truncate(q[l] as usize);
            }
        }
        out
    }

    fn random_trace(seed: u64, n: usize, n_streams: usize) -> (Vec<u64>, Vec<u32>, Vec<bool>) {
        let mut r = lcg(seed);
        let streams: Vec<u32> = (0..n).map(|_| (r() % n_streams as u64) as u32).collect();
        let keys: Vec<u64> = streams
            .iter()
            .map(|&s| r() % (10 + 25 * s as u64))
            .collect();
        let writes: Vec<bool> = (0..n).map(|_| !r().is_multiple_of(3)).collect();
        (keys, streams, writes)
    }

    #[test]
    fn simulation_equals_slow_reference() {
        for seed in 0..12u64 {
            let n_streams = 1 + (seed % 3) as usize;
            let (keys, streams, writes) = random_trace(seed, 1200, n_streams);
            let trace = StreamTrace {
                keys: &keys,
                streams: &streams,
                writes: &writes,
                n_streams,
            };
            let cfg = PartitionConfig {
                capacity: 23,
                interval: 150,
                steps: 5,
                writes_only: false,
                objective: Objective::Hits,
            };
            let cached = CachedRequests::new(&trace, &cfg);
            let curves = cached.curves(n_streams, &cfg);
            let splits = discrete_optimal(&curves, n_streams, cfg.steps);
            let disc: Vec<Vec<u64>> = splits.iter().map(|s| pages_of_split(s, 23)).collect();
            let even = apportion(&vec![1; n_streams], 23);
            let cases: Vec<(PartitionKind, Quotas)> = vec![
                (PartitionKind::Shared, Box::new(|_| None)),
                (PartitionKind::Even, Box::new(move |_| Some(even.clone()))),
                (
                    PartitionKind::DiscreteOptimal,
                    Box::new(move |iv| Some(disc[iv].clone())),
                ),
            ];
            for (kind, quotas) in cases {
                let r = simulate_partitioned(kind, &trace, &cfg, None).unwrap();
                let want = slow_partitioned(&keys, &streams, n_streams, 150, &*quotas, 23);
                let hits = want.iter().filter(|&&h| h).count() as u64;
                let whits = want.iter().zip(&writes).filter(|(&h, &w)| h && w).count() as u64;
                assert_eq!(
                    (r.hits, r.write_hits),
                    (hits, whits),
                    "{kind:?} seed {seed}"
                );
            }
        }
    }

    #[test]
    fn curves_predict_steady_state_hits() {
        // With fixed quotas there is no resize, so each partition is an LRU of its size from
        // the start: the simulated hits equal the curves' sum at those sizes exactly.
        let n_streams = 3;
        let (keys, streams, writes) = random_trace(5, 5000, n_streams);
        let trace = StreamTrace {
            keys: &keys,
            streams: &streams,
            writes: &writes,
            n_streams,
        };
        let cfg = PartitionConfig {
            capacity: 40,
            interval: 500,
            steps: 8,
            writes_only: true,
            objective: Objective::WriteHits,
        };
        let cached = CachedRequests::new(&trace, &cfg);
        let curves = cached.curves(n_streams, &cfg);
        let (split, _) = static_optimal(&curves, n_streams, cfg.steps);
        let total: u64 = split
            .iter()
            .enumerate()
            .map(|(s, &st)| {
                curves
                    .chunks(cfg.steps + 1)
                    .skip(s)
                    .step_by(n_streams)
                    .map(|c| c[st])
                    .sum::<u64>()
            })
            .sum();
        // 40 pages in 8 steps of 5: the split's pages are exactly its steps' capacities
        let r = simulate_partitioned(PartitionKind::StaticOptimal, &trace, &cfg, None).unwrap();
        assert_eq!(r.write_hits, total);
        assert_eq!(r.read_hits, 0);
        assert_eq!(r.allocations[..n_streams], pages_of_split(&split, 40)[..]);
        let even = simulate_partitioned(PartitionKind::Even, &trace, &cfg, None).unwrap();
        assert!(r.write_hits >= even.write_hits);
    }

    #[test]
    fn shrinking_evicts_lru_pages() {
        // stream 0: pages 1, 2, 3 with quota 3; then quota 1 keeps only 3 (the most recent)
        let keys = [1, 2, 3, 3, 1, 2];
        let streams = [0u32; 6];
        let writes = [true; 6];
        let trace = StreamTrace {
            keys: &keys,
            streams: &streams,
            writes: &writes,
            n_streams: 2,
        };
        let cfg = PartitionConfig {
            capacity: 4,
            interval: 3,
            steps: 4,
            writes_only: false,
            objective: Objective::Hits,
        };
        let cached = CachedRequests::new(&trace, &cfg);
        let mut p = PerInterval(vec![vec![3, 1], vec![1, 3]]);
        let r = simulate_partitioned_with(&mut p, &trace, &cached, &cfg).unwrap();
        assert_eq!(r.hits, 1); // the second 3
        assert_eq!(r.resize_evictions, 2);
        assert_eq!(r.allocations, vec![3, 1, 1, 3]);
    }

    #[test]
    fn mlcache_shares_and_errors() {
        let (keys, streams, writes) = random_trace(9, 600, 2);
        let trace = StreamTrace {
            keys: &keys,
            streams: &streams,
            writes: &writes,
            n_streams: 2,
        };
        let cfg = PartitionConfig {
            capacity: 20,
            interval: 100,
            steps: 10,
            writes_only: false,
            objective: Objective::Hits,
        };
        // shares equal to the discrete optimum's reproduce it
        let cached = CachedRequests::new(&trace, &cfg);
        let splits = discrete_optimal(&cached.curves(2, &cfg), 2, 10);
        let shares: Vec<f64> = splits
            .iter()
            .flat_map(|s| s.iter().map(|&x| x as f64 / 10.0))
            .collect();
        let ml = simulate_partitioned(PartitionKind::MlCache, &trace, &cfg, Some(&shares)).unwrap();
        let opt = simulate_partitioned(PartitionKind::DiscreteOptimal, &trace, &cfg, None).unwrap();
        assert_eq!(ml.hits, opt.hits);
        assert_eq!(ml.allocations, opt.allocations);
        // a bad row falls back to even
        let bad = vec![f64::NAN, 1.0];
        let r = simulate_partitioned(PartitionKind::MlCache, &trace, &cfg, Some(&bad)).unwrap();
        let even = simulate_partitioned(PartitionKind::Even, &trace, &cfg, None).unwrap();
        assert_eq!((r.hits, r.fallbacks), (even.hits, 1));
        assert!(simulate_partitioned(PartitionKind::MlCache, &trace, &cfg, None).is_err());
        assert!(simulate_partitioned(PartitionKind::MlCache, &trace, &cfg, Some(&[0.5])).is_err());
        assert!(PartitionKind::parse("nope").is_err());
    }
}
