//! Object-mode MAT: libCacheSim's object loop over LRU with [`Mat`] as the eviction.

use std::time::Instant;

use crate::core::config::{err, ObjectConfig, SimError};
use crate::core::eviction::{Eviction, Lru};
use crate::core::objects::check_trace;
use crate::core::ratio;
use crate::mat::dense::PREFETCH_AHEAD;
use crate::mat::lrb_features::{prefetch, MetaStore};
use crate::mat::{
    DecisionClock, DenseTrace, Mat, MatParams, MatStats, Predictor, SampleBuf, Samples, Slots, NIL,
};

/// The result of an object-mode MAT run.
#[derive(Debug, Clone, PartialEq)]
pub struct MatResult {
    pub requests: u64,
    pub hits: u64,
    pub miss_ratio: f64,
    pub byte_miss_ratio: f64,
    pub stats: MatStats,
    /// T after the run (NaN if no prediction was made).
    pub final_threshold: f64,
    pub wall_s: f64,
    pub samples: Option<Samples>,
    /// With `record_victims`: (logical time, key) of each eviction, in order.
    pub victims: Option<Vec<(u64, u64)>>,
}

impl MatResult {
    pub fn predictions_per_eviction(&self) -> f64 {
        ratio(self.stats.predictions, self.stats.evictions)
    }
    pub fn ns_per_eviction(&self) -> f64 {
        ratio(self.stats.decision_ns, self.stats.evictions)
    }
    /// Candidates taken per eviction (predicted or judged by a kept prediction).
    pub fn candidates_per_eviction(&self) -> f64 {
        ratio(
            self.stats.predictions + self.stats.reused,
            self.stats.evictions,
        )
    }
}

/// Object-mode MAT over LRU with predictor `predictor` (`cfg.eviction` is ignored).
/// `trace` must be `DenseTrace::new(keys)`.
pub fn simulate_mat<P: Predictor>(
    keys: &[u64],
    sizes: &[u64],
    cfg: &ObjectConfig,
    params: MatParams,
    predictor: P,
    trace: &DenseTrace,
) -> Result<MatResult, SimError> {
    check_trace(keys, sizes, cfg)?;
    params.validate()?;
    if trace.ids.len() != keys.len() {
        return err("the dense trace does not belong to these keys");
    }
    let start = Instant::now();
    let n = keys.len();
    let mut mat = Mat::new(params, predictor);
    let mut meta = mat
        .wants_features()
        .then(|| MetaStore::new(trace.objects, params.memory_window));
    let mut samples = params
        .collect_samples
        .then(|| SampleBuf::new(trace.objects, params.memory_window));
    let mut order = Lru::new();
    let mut slots = Slots::default();
    let mut obj_slot = crate::mat::hugepages::filled(trace.objects, NIL);
    let (mut used, capacity) = (0u64, cfg.capacity);
    let (mut hits, mut miss_bytes, mut req_bytes) = (0u64, 0u64, 0u64);
    let mut victims = params.record_victims.then(Vec::new);
    let mut clock = DecisionClock::new();
    for (t, (&id, &raw_size)) in trace.ids.iter().zip(sizes).enumerate() {
        let now = t as u64;
        req_bytes += raw_size;
        if let Some(m) = &mut meta {
            // the ids ahead are known: their metadata, then their history, into the caches
            if let Some(&a) = trace.ids.get(t + 2 * PREFETCH_AHEAD) {
                m.prefetch_meta(a);
            }
            if let Some(&a) = trace.ids.get(t + PREFETCH_AHEAD) {
                m.prefetch_history(a);
                // and where it is cached (a random read of a per-object array)
                prefetch(obj_slot.as_ptr().wrapping_add(a as usize));
            }
            if let (Some(s), Some(last)) = (&mut samples, m.last(id)) {
                s.requested(id, now, last);
            }
            m.access(id, now, raw_size);
        }
        let slot = obj_slot[id as usize];
        if slot != NIL {
            hits += 1;
            slots.touch(slot, now, mat.note(now));
            order.touch(slot);
            continue;
        }
        miss_bytes += raw_size;
        let size = cfg.unit.charge(raw_size);
        if size > capacity {
            continue;
        }
        if used + size > capacity {
            let t0 = clock.now();
            if let Some(m) = &meta {
                // (the next one's history is prefetched as each candidate is examined)
                mat.prefetch_candidates(order.iter_from_back(), &slots, m);
            }
            while used + size > capacity {
                let v = mat.evict(&mut order, now, &mut slots, meta.as_ref(), &mut samples);
                if let Some(vs) = &mut victims {
                    // the victim's last access names its key
                    vs.push((now, keys[slots.last(v) as usize]));
                }
                obj_slot[slots.obj(v) as usize] = NIL;
                used -= slots.size(v);
                slots.release(v);
            }
            clock.add_since(t0);
        }
        let note = mat.note(now);
        let s = slots.alloc(id, now, size, note);
        obj_slot[id as usize] = s;
        order.insert(s);
        used += size;
    }
    mat.stats.decision_ns = clock.total_ns();
    Ok(MatResult {
        requests: n as u64,
        hits,
        miss_ratio: ratio(n as u64 - hits, n as u64),
        byte_miss_ratio: ratio(miss_bytes, req_bytes),
        stats: mat.stats,
        final_threshold: mat.threshold,
        wall_s: start.elapsed().as_secs_f64(),
        samples: samples.map(|s| s.finish(n as u64)),
        victims,
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::CapacityUnit;
    use crate::core::objects::simulate_objects;
    use crate::mat::testing::{cfg, trace};
    use crate::mat::{FnPredictor, NoPredictor, Oracle};

    #[test]
    fn no_predictor_is_lru() {
        for (cap, unit) in [
            (50, CapacityUnit::Objects),
            (7, CapacityUnit::Objects),
            (5000, CapacityUnit::Bytes),
            (650, CapacityUnit::Bytes),
        ] {
            let (k, s) = trace(20_000, 400, 3);
            let c = cfg(cap, unit);
            let lru = simulate_objects(&k, &s, &c).unwrap();
            let dt = DenseTrace::new(&k).unwrap();
            let p = MatParams {
                collect_samples: true,
                ..MatParams::algorithm1()
            };
            let m = simulate_mat(&k, &s, &c, p, NoPredictor, &dt).unwrap();
            assert_eq!((m.hits, m.stats.evictions), (lru.hits, lru.evictions));
            assert_eq!(m.byte_miss_ratio, lru.byte_miss_ratio);
            assert_eq!(m.stats.predictions, 0);
            assert_eq!(m.samples.unwrap().len() as u64, m.stats.evictions);
            assert!(m.final_threshold.is_nan());
        }
    }

    /// A predictor that always says "far": every first candidate goes, so MAT is LRU with one
    /// prediction per eviction; T rises by (1 + delta) per eviction (r = 1 < k = 2).
    #[test]
    fn infinite_prediction_is_lru_with_one_try() {
        let (k, s) = trace(5_000, 300, 5);
        let c = cfg(40, CapacityUnit::Objects);
        let lru = simulate_objects(&k, &s, &c).unwrap();
        let dt = DenseTrace::new(&k).unwrap();
        let p = MatParams::algorithm1();
        let m = simulate_mat(&k, &s, &c, p, FnPredictor(|_, _| f64::INFINITY), &dt).unwrap();
        assert_eq!((m.hits, m.stats.evictions), (lru.hits, lru.evictions));
        assert_eq!(m.stats.predictions, m.stats.evictions);
        assert_eq!(m.stats.reinsertions, 0);
        let mut t = 40.0f64;
        for _ in 0..m.stats.evictions {
            t *= 1.0 + 1e-4;
        }
        assert_eq!(m.final_threshold, t);
    }

    /// A slow obvious MAT-oracle (Vec as the LRU list) against the fast one.
    fn slow_mat_oracle(keys: &[u64], cap: usize, k: f64, l: u32) -> (u64, u64, u64) {
        let n = keys.len();
        let next_of = |i: usize| (i + 1..n).find(|&j| keys[j] == keys[i]);
        let mut lru: Vec<(u64, usize)> = Vec::new(); // (key, last index), head = end
        let (mut hits, mut evictions, mut preds) = (0, 0, 0);
        let mut t_thr = f64::NAN;
        for (now, &key) in keys.iter().enumerate() {
            if let Some(p) = lru.iter().position(|e| e.0 == key) {
                hits += 1;
                lru.remove(p);
                lru.push((key, now));
                continue;
            }
            if lru.len() == cap {
                if t_thr.is_nan() {
                    t_thr = cap as f64;
                }
                evictions += 1;
                let mut best: Option<((u64, usize), f64)> = None;
                let mut r = 1;
                let mut victim = None;
                while r <= l {
                    let c = lru.remove(0);
                    preds += 1;
                    let tta = match next_of(c.1) {
                        Some(j) => (j - now) as f64,
                        None => f64::INFINITY,
                    };
                    if tta >= t_thr {
                        victim = Some(c);
                        break;
                    }
                    if best.is_none() || tta > best.unwrap().1 {
                        best = Some((c, tta));
                    }
                    lru.push(c);
                    r += 1;
                }
                if victim.is_none() {
                    let b = best.unwrap().0;
                    let p = lru.iter().position(|e| *e == b).unwrap();
                    lru.remove(p);
                }
                if (r as f64) < k {
                    t_thr *= 1.0 + 1e-4;
                } else if (r as f64) > k {
                    t_thr *= 1.0 - 1e-4;
                }
            }
            lru.push((key, now));
        }
        (hits, evictions, preds)
    }

    #[test]
    fn oracle_matches_slow_reference() {
        let (k, s) = trace(6_000, 500, 11);
        for (cap, kk, l) in [(30, 2.0, 10), (80, 3.0, 4), (5, 2.0, 10)] {
            let dt = DenseTrace::new(&k).unwrap();
            let next = dt.next();
            let p = MatParams {
                k: kk,
                max_candidates: l,
                ..MatParams::algorithm1()
            };
            let c = cfg(cap, CapacityUnit::Objects);
            let m = simulate_mat(&k, &s, &c, p, Oracle { next: &next }, &dt).unwrap();
            let want = slow_mat_oracle(&k, cap as usize, kk, l);
            assert_eq!((m.hits, m.stats.evictions, m.stats.predictions), want);
        }
    }

    #[test]
    fn record_victims_changes_nothing() {
        let (k, s) = trace(4_000, 300, 13);
        let dt = DenseTrace::new(&k).unwrap();
        let next = dt.next();
        let c = cfg(30, CapacityUnit::Objects);
        let p = MatParams::algorithm1();
        let a = simulate_mat(&k, &s, &c, p, Oracle { next: &next }, &dt).unwrap();
        let rec = MatParams {
            record_victims: true,
            ..p
        };
        let b = simulate_mat(&k, &s, &c, rec, Oracle { next: &next }, &dt).unwrap();
        assert_eq!((a.hits, a.stats.predictions), (b.hits, b.stats.predictions));
        assert_eq!(a.final_threshold, b.final_threshold);
        assert!(a.victims.is_none());
        let v = b.victims.unwrap();
        assert_eq!(v.len() as u64, b.stats.evictions);
        // capacity 1: a b a evicts a at 1, b at 2
        let dt = DenseTrace::new(&[7, 9, 7]).unwrap();
        let r = simulate_mat(
            &[7, 9, 7],
            &[1; 3],
            &cfg(1, CapacityUnit::Objects),
            rec,
            NoPredictor,
            &dt,
        );
        assert_eq!(r.unwrap().victims.unwrap(), vec![(1, 7), (2, 9)]);
    }

    #[test]
    fn bad_params() {
        let dt = DenseTrace::new(&[1]).unwrap();
        let c = cfg(1, CapacityUnit::Objects);
        for p in [
            MatParams {
                k: 0.0,
                ..MatParams::algorithm1()
            },
            MatParams {
                max_candidates: 0,
                ..MatParams::algorithm1()
            },
            MatParams {
                delta: 1.0,
                ..MatParams::algorithm1()
            },
            MatParams {
                initial_threshold: Some(f64::NAN),
                ..MatParams::algorithm1()
            },
            MatParams {
                memory_window: 100,
                ..MatParams::algorithm1()
            },
        ] {
            assert!(simulate_mat(&[1], &[1], &c, p, NoPredictor, &dt).is_err());
        }
        assert!(
            simulate_mat(&[1, 2], &[1], &c, MatParams::algorithm1(), NoPredictor, &dt).is_err()
        );
    }
}
