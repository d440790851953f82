//! LRB (Song et al., *Learning Relaxed Belady for Content Distribution Network Caching*,
//! NSDI'20) in object mode, built from MAT's parts so that the two are measured side by side:
//! the same [`Predictor`] (a compiled eviction .so, the oracle, a function), the same 44
//! features ([`MetaStore`], features/eviction.toml), the same cache entries ([`Slots`]), the
//! same object loop and the same decision clock as [`crate::mat::simulate_mat`].
//!
//! The decision (LRB's `evict`): sample `sample_size` (LRB: 64) distinct cached objects
//! uniformly at random (all of them when fewer are cached), predict each one's distance d from
//! its last access to its next access, and evict the one whose predicted next access
//! (last + d) is farthest (the first sampled among equal ones). Every sampled candidate costs a
//! prediction, so predictions per eviction = min(sample_size, cached objects): the cost MAT's
//! tail avoids. No prediction is kept between decisions (LRB predicts afresh each time).
//!
//! What differs from the NSDI'20 system, on purpose: the model is the one given (MAT's model,
//! trained on tail candidates), not one LRB trains online on its own random samples; and the
//! cache is libCacheSim's object model (a hit never changes the size; a miss evicts until the
//! object fits; an object larger than the cache is never inserted).
//!
//! With no predictor ([`crate::mat::NoPredictor`]) a decision takes one uniformly random
//! cached object, unpredicted: random eviction.
//!
//! The sampled set is an [`Eviction`] order ([`SampleSet`]: insert, remove and touch in O(1),
//! its `victim` the first member), so it plugs into the same trait as LRU and FIFO.

use std::time::Instant;

use crate::core::config::{err, ObjectConfig, SimError};
use crate::core::eviction::Eviction;
use crate::core::objects::check_trace;
use crate::core::ratio;
use crate::mat::lrb_features::{check_memory_window, EvictFeatures, MetaStore, EVICT_NUM_FEATURES};
use crate::mat::{DecisionClock, DenseTrace, Predictor, Slots};

/// LRB's sample size per eviction.
pub const SAMPLE_SIZE: u32 = 64;

const NIL: u32 = u32::MAX;

/// The cached units as a dense array with each unit's position in it: uniform sampling in
/// O(1) per sample; hits change nothing (no order to keep).
#[derive(Debug, Default, Clone)]
pub struct SampleSet {
    members: Vec<u32>,
    /// Position of each unit in `members` (NIL when absent), indexed by unit.
    pos: Vec<u32>,
}

impl SampleSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Move `m` distinct members chosen uniformly at random (a partial Fisher-Yates shuffle)
    /// to the front of the array and return them.
    pub fn sample(&mut self, m: usize, rng: &mut SplitMix) -> &[u32] {
        let n = self.members.len();
        let m = m.min(n);
        for i in 0..m {
            let j = i + rng.below((n - i) as u64) as usize;
            if i != j {
                self.members.swap(i, j);
                self.pos[self.members[i] as usize] = i as u32;
                self.pos[self.members[j] as usize] = j as u32;
            }
        }
        &self.members[..m]
    }

    pub fn contains(&self, unit: u32) -> bool {
        self.pos.get(unit as usize).is_some_and(|&p| p != NIL)
    }
}

impl Eviction for SampleSet {
    const REORDERS_ON_TOUCH: bool = false;
    fn insert(&mut self, unit: u32) {
        let u = unit as usize;
        if u >= self.pos.len() {
            self.pos.resize((u + 1).max(self.pos.len() * 2), NIL);
        }
        debug_assert_eq!(self.pos[u], NIL);
        self.pos[u] = self.members.len() as u32;
        self.members.push(unit);
    }
    fn touch(&mut self, _unit: u32) {}
    fn victim(&self) -> Option<u32> {
        self.members.first().copied()
    }
    fn remove(&mut self, unit: u32) {
        let p = self.pos[unit as usize] as usize;
        let last = self.members.pop().expect("remove from an empty set");
        if last != unit {
            self.members[p] = last;
            self.pos[last as usize] = p as u32;
        }
        self.pos[unit as usize] = NIL;
    }
    fn len(&self) -> usize {
        self.members.len()
    }
}

/// SplitMix64: a small deterministic generator (the samples depend on the seed alone).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n >= 1), by the multiply-shift reduction.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// LRB's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrbParams {
    /// Candidates sampled (and predicted) per eviction (LRB: 64).
    pub sample_size: u32,
    /// The contract's memory window (features, forgetting).
    pub memory_window: u64,
    /// Seed of the sampling.
    pub seed: u64,
    /// Record every victim as (logical time of the miss, key) in [`LrbResult::victims`].
    pub record_victims: bool,
}

impl Default for LrbParams {
    fn default() -> Self {
        LrbParams {
            sample_size: SAMPLE_SIZE,
            memory_window: crate::mat::lrb_features::MEMORY_WINDOW,
            seed: 0,
            record_victims: false,
        }
    }
}

impl LrbParams {
    pub fn validate(&self) -> Result<(), SimError> {
        if self.sample_size == 0 {
            return err("sample_size must be >= 1");
        }
        check_memory_window(self.memory_window)
    }
}

/// Counters of LRB's decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LrbStats {
    pub evictions: u64,
    /// Predictions made (the model called), one per sampled candidate.
    pub predictions: u64,
    /// Wall time of all eviction decisions (sampling, features, predictions), ns.
    pub decision_ns: u64,
}

/// LRB's victim chooser over a [`SampleSet`] of [`Slots`] and a [`Predictor`].
pub struct Lrb<P: Predictor> {
    pub params: LrbParams,
    pub predictor: P,
    pub stats: LrbStats,
    rng: SplitMix,
    features: EvictFeatures,
}

impl<P: Predictor> Lrb<P> {
    pub fn new(params: LrbParams, predictor: P) -> Self {
        Lrb {
            params,
            predictor,
            stats: LrbStats::default(),
            rng: SplitMix::new(params.seed),
            features: [0.0; EVICT_NUM_FEATURES],
        }
    }

    /// Choose and remove the victim (a slot) at logical time `now`: the sampled candidate with
    /// the farthest predicted next access. `meta` must be given when the predictor reads
    /// features.
    pub fn evict(
        &mut self,
        set: &mut SampleSet,
        now: u64,
        slots: &Slots,
        meta: Option<&MetaStore>,
    ) -> u32 {
        self.stats.evictions += 1;
        if !P::ACTIVE {
            let v = set.sample(1, &mut self.rng)[0];
            set.remove(v);
            return v;
        }
        let m = self.params.sample_size as usize;
        let cands = set.sample(m, &mut self.rng);
        if P::NEEDS_FEATURES {
            if let Some(meta) = meta {
                for &c in cands {
                    meta.prefetch_meta(slots.obj(c));
                }
                for &c in cands {
                    meta.prefetch_history(slots.obj(c));
                }
            }
        }
        let mut best = (NIL, f64::NEG_INFINITY);
        for &c in cands {
            let last = slots.last(c);
            if P::NEEDS_FEATURES {
                if let Some(meta) = meta {
                    meta.features(slots.obj(c), now, &mut self.features);
                }
            }
            let d = self.predictor.distance(last, slots.note(c), &self.features);
            self.stats.predictions += 1;
            // the predicted next access relative to now: d - age (the age fits an i64)
            let next = d - (now - last) as i64 as f64;
            if best.0 == NIL || next > best.1 {
                best = (c, next);
            }
        }
        set.remove(best.0);
        best.0
    }
}

/// The result of an object-mode LRB run.
#[derive(Debug, Clone, PartialEq)]
pub struct LrbResult {
    pub requests: u64,
    pub hits: u64,
    pub miss_ratio: f64,
    pub byte_miss_ratio: f64,
    pub stats: LrbStats,
    pub wall_s: f64,
    /// With `record_victims`: (logical time, key) of each eviction, in order.
    pub victims: Option<Vec<(u64, u64)>>,
}

impl LrbResult {
    pub fn predictions_per_eviction(&self) -> f64 {
        ratio(self.stats.predictions, self.stats.evictions)
    }
    pub fn ns_per_eviction(&self) -> f64 {
        ratio(self.stats.decision_ns, self.stats.evictions)
    }
}

/// Object-mode LRB with predictor `predictor` (`cfg.eviction` is ignored); `trace` must be
/// `DenseTrace::new(keys)`. The loop is [`crate::mat::simulate_mat`]'s.
pub fn simulate_lrb<P: Predictor>(
    keys: &[u64],
    sizes: &[u64],
    cfg: &ObjectConfig,
    params: LrbParams,
    predictor: P,
    trace: &DenseTrace,
) -> Result<LrbResult, SimError> {
    check_trace(keys, sizes, cfg)?;
    params.validate()?;
    if trace.ids.len() != keys.len() {
        return err("the dense trace does not belong to these keys");
    }
    let start = Instant::now();
    let n = keys.len();
    let notes = P::NOTES;
    let mut lrb = Lrb::new(params, predictor);
    let mut meta = P::NEEDS_FEATURES.then(|| MetaStore::new(trace.objects, params.memory_window));
    let mut set = SampleSet::new();
    let mut slots = Slots::default();
    let mut obj_slot = vec![NIL; trace.objects];
    let (mut used, capacity) = (0u64, cfg.capacity);
    let (mut hits, mut miss_bytes, mut req_bytes) = (0u64, 0u64, 0u64);
    let mut victims = params.record_victims.then(Vec::new);
    let mut clock = DecisionClock::new();
    for (t, (&id, &raw_size)) in trace.ids.iter().zip(sizes).enumerate() {
        let now = t as u64;
        req_bytes += raw_size;
        if let Some(m) = &mut meta {
            m.access(id, now, raw_size);
        }
        let note = if notes { lrb.predictor.note(now) } else { 0 };
        let slot = obj_slot[id as usize];
        if slot != NIL {
            hits += 1;
            slots.touch(slot, now, note);
            continue;
        }
        miss_bytes += raw_size;
        let size = cfg.unit.charge(raw_size);
        if size > capacity {
            continue;
        }
        if used + size > capacity {
            let t0 = clock.now();
            while used + size > capacity {
                let v = lrb.evict(&mut set, now, &slots, meta.as_ref());
                if let Some(vs) = &mut victims {
                    vs.push((now, keys[slots.last(v) as usize]));
                }
                obj_slot[slots.obj(v) as usize] = NIL;
                used -= slots.size(v);
                slots.release(v);
            }
            clock.add_since(t0);
        }
        let s = slots.alloc(id, now, size, note);
        obj_slot[id as usize] = s;
        set.insert(s);
        used += size;
    }
    lrb.stats.decision_ns = clock.total_ns();
    Ok(LrbResult {
        requests: n as u64,
        hits,
        miss_ratio: (n as u64 - hits) as f64 / n as f64,
        byte_miss_ratio: ratio(miss_bytes, req_bytes),
        stats: lrb.stats,
        wall_s: start.elapsed().as_secs_f64(),
        victims,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{CapacityUnit, EvictionKind};
    use crate::core::objects::simulate_objects;
    use crate::mat::lrb_features::MEMORY_WINDOW;
    use crate::mat::{simulate_mat, FnPredictor, MatParams, NoPredictor, Oracle};

    fn cfg(capacity: u64, unit: CapacityUnit) -> ObjectConfig {
        ObjectConfig {
            eviction: EvictionKind::Lru,
            capacity,
            unit,
        }
    }

    fn trace(n: usize, keys: u64, seed: u64) -> (Vec<u64>, Vec<u64>) {
        let mut r = SplitMix::new(seed);
        let k: Vec<u64> = (0..n).map(|_| r.below(keys).min(r.below(keys))).collect();
        let s = k.iter().map(|&k| 1 + k % 7 * 100).collect();
        (k, s)
    }

    #[test]
    fn sample_set_keeps_positions() {
        let mut s = SampleSet::new();
        for u in [5, 1, 9, 3] {
            s.insert(u);
        }
        s.remove(1);
        assert_eq!(s.len(), 3);
        assert!(!s.contains(1) && s.contains(9));
        let mut rng = SplitMix::new(7);
        let mut got = s.sample(10, &mut rng).to_vec();
        got.sort();
        assert_eq!(got, vec![3, 5, 9]); // all of them when fewer than asked
        for _ in 0..50 {
            let two = s.sample(2, &mut rng).to_vec();
            assert_ne!(two[0], two[1]); // distinct
        }
        s.remove(9);
        s.remove(5);
        assert_eq!(s.victim(), Some(3));
        s.remove(3);
        assert!(s.is_empty());
    }

    /// By hand: four cached objects, a predictor of the last access; the sample holds all four
    /// (sample size 64 > 4) and the one whose predicted next access (last + d) is farthest goes,
    /// not the one with the largest d nor the oldest.
    #[test]
    fn farthest_predicted_next_access_is_evicted() {
        let mut slots = Slots::default();
        let mut set = SampleSet::new();
        for o in 0..4u32 {
            set.insert(slots.alloc(o, o as u64 * 10, 1, 0)); // last = 0, 10, 20, 30
        }
        // d by last access; next access = last + d: 50, 45, 70, 31
        let d = |last: u64| match last {
            0 => 50.0,
            10 => 35.0,
            20 => 50.0,
            _ => 1.0,
        };
        let mut lrb = Lrb::new(LrbParams::default(), FnPredictor(|l, _| d(l)));
        let mut meta = MetaStore::new(4, MEMORY_WINDOW);
        for o in 0..4u32 {
            meta.access(o, o as u64 * 10, 1);
        }
        let v = lrb.evict(&mut set, 40, &slots, Some(&meta));
        assert_eq!(slots.obj(v), 2);
        assert_eq!(lrb.stats.predictions, 4);
        assert!(!set.contains(v) && set.len() == 3);
        // next: 50 (object 0) beats 45 and 31
        let v = lrb.evict(&mut set, 40, &slots, Some(&meta));
        assert_eq!(slots.obj(v), 0);
        assert_eq!(lrb.stats.predictions, 7);
        assert_eq!(lrb.stats.evictions, 2);
    }

    /// Predictions per eviction equal the sample size when the cache always holds more
    /// objects than it (object capacity 200, samples of 64 and 16).
    #[test]
    fn predictions_per_eviction_equal_the_sample_size() {
        let (k, s) = trace(20_000, 2_000, 3);
        let c = cfg(200, CapacityUnit::Objects);
        let dt = DenseTrace::new(&k).unwrap();
        for m in [64u32, 16] {
            let p = LrbParams {
                sample_size: m,
                ..LrbParams::default()
            };
            let f = FnPredictor(|last: u64, f: &EvictFeatures| (last % 97) as f64 + f[0]);
            let r = simulate_lrb(&k, &s, &c, p, f, &dt).unwrap();
            assert!(r.stats.evictions > 1000);
            assert_eq!(r.stats.predictions, m as u64 * r.stats.evictions);
            assert_eq!(r.predictions_per_eviction(), m as f64);
        }
        // a cache of 10 objects: every decision predicts all 10
        let r = simulate_lrb(
            &k,
            &s,
            &cfg(10, CapacityUnit::Objects),
            LrbParams::default(),
            FnPredictor(|l, _| l as f64),
            &dt,
        )
        .unwrap();
        assert_eq!(r.predictions_per_eviction(), 10.0);
    }

    /// Against a slow obvious sampled-Belady (the oracle as the model; all cached objects in
    /// the sample): LRB with the oracle and a sample larger than the cache is Belady's MIN.
    #[test]
    fn oracle_with_the_whole_cache_is_belady() {
        let (k, s) = trace(5_000, 300, 9);
        let dt = DenseTrace::new(&k).unwrap();
        let next = dt.next();
        for cap in [5u64, 30, 60] {
            let c = cfg(cap, CapacityUnit::Objects);
            let r = simulate_lrb(
                &k,
                &s,
                &c,
                LrbParams::default(),
                Oracle { next: &next },
                &dt,
            )
            .unwrap();
            let b = crate::mat::simulate_belady(&k, &s, &c).unwrap();
            assert_eq!((r.hits, r.stats.evictions), (b.hits, b.evictions), "{cap}");
        }
    }

    /// Deterministic for a seed; no predictor is random eviction (0 predictions), which on
    /// a skewed trace lands between FIFO-like and LRU-like, never Belady.
    #[test]
    fn seeded_and_no_predictor() {
        let (k, s) = trace(10_000, 500, 5);
        let c = cfg(3_000, CapacityUnit::Bytes);
        let dt = DenseTrace::new(&k).unwrap();
        let p = LrbParams {
            record_victims: true,
            ..LrbParams::default()
        };
        let a = simulate_lrb(&k, &s, &c, p, NoPredictor, &dt).unwrap();
        let b = simulate_lrb(&k, &s, &c, p, NoPredictor, &dt).unwrap();
        assert_eq!(a.victims, b.victims);
        assert_eq!(a.stats.predictions, 0);
        let other = simulate_lrb(&k, &s, &c, LrbParams { seed: 1, ..p }, NoPredictor, &dt);
        assert_ne!(a.victims, other.unwrap().victims);
        let lru = simulate_objects(&k, &s, &c).unwrap();
        assert_eq!(a.stats.evictions as f64 > 0.0, lru.evictions > 0);
    }

    /// MAT and LRB over one predictor on one trace: MAT's predictions per eviction are at most
    /// its candidates (L = 10), LRB's the sample size.
    #[test]
    fn side_by_side_with_mat() {
        let (k, s) = trace(30_000, 3_000, 13);
        let c = cfg(300, CapacityUnit::Objects);
        let dt = DenseTrace::new(&k).unwrap();
        let next = dt.next();
        let mat = simulate_mat(
            &k,
            &s,
            &c,
            MatParams::default(),
            Oracle { next: &next },
            &dt,
        )
        .unwrap();
        let lrb = simulate_lrb(
            &k,
            &s,
            &c,
            LrbParams::default(),
            Oracle { next: &next },
            &dt,
        )
        .unwrap();
        assert!(mat.predictions_per_eviction() <= 10.0);
        assert_eq!(lrb.predictions_per_eviction(), 64.0);
        assert!(lrb.hits > mat.hits / 2);
    }

    #[test]
    fn bad_params() {
        let dt = DenseTrace::new(&[1]).unwrap();
        let c = cfg(1, CapacityUnit::Objects);
        for p in [
            LrbParams {
                sample_size: 0,
                ..LrbParams::default()
            },
            LrbParams {
                memory_window: 10,
                ..LrbParams::default()
            },
        ] {
            assert!(simulate_lrb(&[1], &[1], &c, p, NoPredictor, &dt).is_err());
        }
    }
}
