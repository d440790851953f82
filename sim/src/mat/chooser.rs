//! The victim chooser: Algorithm 1 at the tail of a [`Reinsert`] order.

use crate::core::eviction::Reinsert;
use crate::mat::lrb_features::{EvictFeatures, MetaStore, EVICT_NUM_FEATURES};
use crate::mat::{MatParams, Predictor, SampleBuf, Slots, NIL};

/// Counters of the victim chooser.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MatStats {
    pub evictions: u64,
    /// Predictions made (the model called).
    pub predictions: u64,
    /// Candidates judged by a prediction kept from an earlier try (`reuse_predictions`).
    pub reused: u64,
    /// Candidates kept (re-inserted at the head and not evicted in the same decision).
    pub reinsertions: u64,
    /// Wall time of all eviction decisions (features, predictions, list moves), ns.
    pub decision_ns: u64,
}

/// Algorithm 1 over a [`Reinsert`] order of [`Slots`] and a [`Predictor`].
pub struct Mat<P: Predictor> {
    pub params: MatParams,
    pub predictor: P,
    /// The current threshold T (NaN until the first predicted eviction).
    pub threshold: f64,
    pub stats: MatStats,
    features: EvictFeatures,
}

impl<P: Predictor> Mat<P> {
    pub fn new(params: MatParams, predictor: P) -> Self {
        Mat {
            params,
            predictor,
            threshold: f64::NAN,
            stats: MatStats::default(),
            features: [0.0; EVICT_NUM_FEATURES],
        }
    }

    /// The note to keep of an access at logical time `t` ([`Predictor::note`]; 0 for a
    /// predictor that keeps none).
    #[inline]
    pub fn note(&self, t: u64) -> u64 {
        if P::NOTES {
            self.predictor.note(t)
        } else {
            0
        }
    }

    /// Whether the candidate in `slot` is judged by its kept prediction alone (reused
    /// predictions, no samples to record): no features, no metadata are read for it.
    #[inline]
    fn judged_by_kept(&self, slot: u32, slots: &Slots) -> bool {
        self.params.reuse_predictions && !self.params.collect_samples && slots.kept(slot).is_some()
    }

    /// Whether the chooser reads the features (to predict or to record samples).
    pub fn wants_features(&self) -> bool {
        P::NEEDS_FEATURES || self.params.collect_samples
    }

    /// Start loading the metadata of the candidates the next decision will likely examine
    /// (the first ceil(k) + 1 of `tail`, the order from its tail, at most `max_candidates`:
    /// both controllers hold the candidates per decision near k): those it will read features
    /// of, i.e. all, or with reused predictions (and no samples) those without a kept
    /// prediction. Only a hint: a decision that goes further loads the rest itself.
    #[inline]
    pub fn prefetch_candidates(
        &self,
        tail: impl Iterator<Item = u32>,
        slots: &Slots,
        meta: &MetaStore,
    ) {
        let l = if P::ACTIVE {
            (self.params.k.ceil() as u32 + 1).min(self.params.max_candidates)
        } else {
            1
        };
        for s in tail.take(l as usize) {
            if !self.judged_by_kept(s, slots) {
                meta.prefetch_meta(slots.obj(s));
            }
        }
    }

    /// Examine the candidate at the tail (it stays there): its features (with `meta`, unless
    /// `reuse` has a prediction kept for it and no samples are collected) into
    /// `self.features`; tag it. Returns (slot, its last access, the kept prediction if any).
    #[inline]
    fn examine<E: Reinsert>(
        &mut self,
        order: &E,
        now: u64,
        slots: &Slots,
        meta: Option<&MetaStore>,
        samples: &mut Option<SampleBuf>,
    ) -> (u32, u64, Option<f64>) {
        let c = order.victim().expect("an eviction needs a cached object");
        let last = slots.last(c);
        let kept = if self.params.reuse_predictions {
            slots.kept(c)
        } else {
            None
        };
        if kept.is_some() && samples.is_none() {
            return (c, last, kept);
        }
        if let Some(m) = meta {
            // the next candidate's history, unless it will be judged by a kept prediction
            // (reading its metadata for nothing would stall on a cache miss)
            if let Some(next) = order.before(c) {
                if !self.judged_by_kept(next, slots) {
                    m.prefetch_history(slots.obj(next));
                }
            }
            m.features(slots.obj(c), now, &mut self.features);
        }
        if let Some(s) = samples {
            s.tag(slots.obj(c), now, last, &self.features);
        }
        (c, last, kept)
    }

    /// Choose and remove the victim (a slot) at logical time `now` (the request being
    /// served). `meta` must be given when [`Mat::wants_features`].
    pub fn evict<E: Reinsert>(
        &mut self,
        order: &mut E,
        now: u64,
        slots: &mut Slots,
        meta: Option<&MetaStore>,
        samples: &mut Option<SampleBuf>,
    ) -> u32 {
        debug_assert!(meta.is_some() || !self.wants_features());
        self.stats.evictions += 1;
        if !P::ACTIVE {
            let c = self.examine(order, now, slots, meta, samples).0;
            order.pop_tail();
            return c;
        }
        if self.threshold.is_nan() {
            self.threshold = (self.params.initial_threshold)
                .filter(|t| *t > 0.0) // 0: not given (the ABI's and settings.toml's)
                .unwrap_or(order.len() as f64);
        }
        let l = self.params.max_candidates;
        let mut best = (NIL, f64::NEG_INFINITY);
        let mut found = None;
        for r in 1..=l {
            let (c, last, kept) = self.examine(order, now, slots, meta, samples);
            let d = match kept {
                Some(d) => {
                    self.stats.reused += 1;
                    d
                }
                None => {
                    self.stats.predictions += 1;
                    let d = self.predictor.distance(last, slots.note(c), &self.features);
                    if self.params.reuse_predictions {
                        slots.keep(c, d);
                    }
                    d
                }
            };
            // (the age fits an i64: one conversion instruction, where u64 takes six)
            let tta = (d - (now - last) as i64 as f64).abs();
            if tta >= self.threshold {
                order.pop_tail();
                found = Some((c, r));
                break;
            }
            if best.0 == NIL || tta > best.1 {
                best = (c, tta);
            }
            order.keep_tail();
            self.stats.reinsertions += 1;
        }
        let (victim, r) = found.unwrap_or_else(|| {
            order.remove(best.0);
            self.stats.reinsertions -= 1;
            (best.0, l + 1)
        });
        self.threshold *= self.params.step(r);
        victim
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::CapacityUnit;
    use crate::core::eviction::{Eviction, Lru};
    use crate::mat::settings;
    use crate::mat::testing::{cfg, trace};
    use crate::mat::{simulate_mat, Controller, DenseTrace, FnPredictor};

    /// The controller and the exhaustion rule by hand: L = 3, k = 2, T0 = 10, delta = 0.5.
    #[test]
    fn threshold_controller_by_hand() {
        let params = MatParams {
            k: 2.0,
            max_candidates: 3,
            delta: 0.5,
            initial_threshold: Some(10.0),
            ..MatParams::algorithm1()
        };
        // four objects accessed at t = 0..4 (LRU tail = object 0); at now = 10 ages 10..7
        let mut slots = Slots::default();
        let mut order = Lru::new();
        for o in 0..4u32 {
            order.insert(slots.alloc(o, o as u64, 1, 0)); // slot o = object o
        }
        // predicted distances by last access: TTA = |d - age|
        let d = [12.0, 9.0, 0.0, 100.0]; // ttas at now=10: 2, 0, 8, 93
        let mut meta = MetaStore::new(4, settings::MEMORY_WINDOW);
        for o in 0..4u32 {
            meta.access(o, o as u64, 1); // accessed before: what features are asked of
        }
        let mut mat = Mat::new(params, FnPredictor(move |last, _| d[last as usize]));
        let mut none = None;
        let mut ev = |mat: &mut Mat<_>, order: &mut Lru, now| {
            mat.evict(order, now, &mut slots, Some(&meta), &mut none)
        };
        // tries: 0 (tta 2 < 10), 1 (0), 2 (8): exhausted; largest TTA = object 2
        assert_eq!(ev(&mut mat, &mut order, 10), 2);
        assert_eq!(mat.threshold, 5.0); // r = 4 > k: T *= 0.5
        assert_eq!(mat.stats.predictions, 3);
        assert_eq!(mat.stats.reinsertions, 2);
        // order now (tail first): 3, 0, 1; object 3: tta 93 >= 5 at the first try
        assert_eq!(ev(&mut mat, &mut order, 10), 3);
        assert_eq!(mat.threshold, 7.5); // r = 1 < k: T *= 1.5
                                        // tail 0 (tta 2), then 1 (tta 0), then 0 again: exhausted, best = 0 (the first max)
        assert_eq!(ev(&mut mat, &mut order, 10), 0);
        assert_eq!(mat.threshold, 3.75);
        assert_eq!(order.len(), 1);
        // at now = 20: object 1's tta |9 - 19| = 10 >= 3.75 at the first try
        let mut order2 = Lru::new();
        order2.insert(1);
        order2.insert(3);
        assert_eq!(ev(&mut mat, &mut order2, 20), 1);
        assert_eq!(mat.threshold, 3.75 * 1.5);
    }

    /// Reused predictions: with a predictor of the last access alone (a kept prediction is
    /// exactly what a new one would be) the decisions are those of a prediction per
    /// candidate, with fewer predictions; with one that reads the features (the age grows)
    /// they differ, and a kept prediction is never used after the object's next access.
    #[test]
    fn reused_predictions_are_exact_for_a_prediction_of_the_last_access() {
        let (keys, s) = trace(60_000, 2_000, 17);
        let c = cfg(300, CapacityUnit::Objects);
        let dt = DenseTrace::new(&keys).unwrap();
        let of_last = |last: u64, _f: &EvictFeatures| ((last * 2_654_435_761) % 5_000) as f64;
        let params = |reuse| MatParams {
            k: 4.0,
            delta: 1e-3,
            controller: Controller::Mean,
            reuse_predictions: reuse,
            record_victims: true,
            ..MatParams::algorithm1()
        };
        let fresh = simulate_mat(&keys, &s, &c, params(false), FnPredictor(of_last), &dt).unwrap();
        let kept = simulate_mat(&keys, &s, &c, params(true), FnPredictor(of_last), &dt).unwrap();
        assert_eq!(fresh.victims, kept.victims);
        assert_eq!(
            (fresh.hits, fresh.final_threshold),
            (kept.hits, kept.final_threshold)
        );
        assert_eq!(fresh.stats.reused, 0);
        assert!(
            kept.stats.reused > kept.stats.evictions / 2,
            "{:?}",
            kept.stats
        );
        assert_eq!(
            fresh.stats.predictions,
            kept.stats.predictions + kept.stats.reused
        );
        assert_eq!(
            fresh.candidates_per_eviction(),
            kept.candidates_per_eviction()
        );
        // a predictor of the age: kept predictions judge by the age now, so decisions move
        let of_age = |_l: u64, f: &EvictFeatures| 3.0 * f[0];
        let a = simulate_mat(&keys, &s, &c, params(false), FnPredictor(of_age), &dt).unwrap();
        let b = simulate_mat(&keys, &s, &c, params(true), FnPredictor(of_age), &dt).unwrap();
        assert_ne!(a.victims, b.victims);
        assert!(b.stats.predictions < a.stats.predictions);
    }
}
