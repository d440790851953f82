//! MAT (learned eviction at the tail of LRU, `crate::mat`) as the eviction of flash-cache mode
//! (`crate::flash`): it combines with every admission and prefetch policy of that mode
//! (Baleen's learned admission included), because only the eviction order changes.
//!
//! Semantics (what was chosen, and why):
//! * Only with LRU and block-level recency (`eviction = lru`, `block_level_recency = true`,
//!   the default): there the eviction unit is the block, which is what MAT ranks (a block
//!   loses its lowest-index cached segment per eviction, `FlashSim::evict_one`). FIFO or
//!   segment units are refused with a [`SimError`]; so is the partitioned mode (not offered).
//! * Logical time = the access index i: every access, GET or PUT, advances it (as object
//!   mode uses request indices). Decisions are made during GETs (only GETs insert), so a
//!   decision's `now` is the index of the GET whose insertion needs room.
//! * Blocks get dense ids over all accesses ([`DenseTrace`] of the key column). A block's
//!   feature history ([`MetaStore`], LRB's 44 features, `crate::mat::lrb_features`) is updated at
//!   the START of each GET of the block (before its lookup, insertions and evictions, as
//!   object mode records a request before serving it), with size = that access's `size`
//!   column (its bytes; always present in the flash [`Trace`] and validated > 0, so the
//!   segment rounding (s1-s0+1)*segment_bytes is not used). PUTs do not read the cache and
//!   are not recorded in the history (they still advance the logical time). The history of
//!   uncached blocks is kept (the ghost store, as object mode), forgotten after a gap of the
//!   memory window.
//! * A cached block's last access (what the predictor and TTA's age read) is its last GET,
//!   also taken at the start of the GET; the same holds while the block is the one being
//!   accessed (a GET miss whose requested segments are being inserted): MAT sees it as
//!   accessed now (age 0), even though, as in the artifact, its segments outside the request
//!   keep their old place in the LRU order until the deferred refresh (`crate::flash` docs).
//! * Eviction: when the cache must evict and no block is "condemned", MAT chooses a victim
//!   block by Algorithm 1 ([`Mat::evict`], the very code of object mode) over the block LRU
//!   order: pop the tail, features, predict the distance d from the block's last access,
//!   TTA = |d - age|, evict if TTA >= T else re-insert at the head, at most L tries, then the
//!   largest TTA; the controller on T and the default T0 (the number of cached blocks at the
//!   first predicted decision) as object mode. The chosen block is condemned: it leaves the
//!   LRU order, and the following evictions take its segments (lowest index first, or, while
//!   it is the block being accessed, lowest outside the request first, as LRU does) until it
//!   is empty, without new predictions. Cached blocks = the LRU order + the condemned block.
//! * An access to the condemned block un-condemns it when it refreshes the block's recency:
//!   at once on a hit; on a miss after the requested segments are inserted (the deferred
//!   refresh of block-level recency; while they are inserted the block keeps its condemned
//!   place, as an LRU tail block keeps its segments outside the request at the tail). The
//!   refresh puts it back at the head of the LRU order (the "touch as usual"). It is also
//!   un-condemned when its last segment leaves. Between the two the condemned block is in
//!   no order, so the order's invariants hold: every block in the order is cached and not
//!   condemned; the `pending` logic of a GET miss applies to the condemned block as to the
//!   LRU tail (when the accessed block has no segment outside the request left it is
//!   refreshed early: un-condemned, and the next eviction makes a new decision).
//! * A GET miss on a cached block none of whose cached segments lies outside the request
//!   moves the block to the head of the order at once (`Orders::EARLY_REFRESH`): nothing of
//!   it is left at its old place, and LRU would only move it there on reaching it (the same
//!   evictions either way), but MAT would otherwise rank it at the tail and condemn a block
//!   with nothing to evict (a wasted decision and prediction). The last access and the
//!   eviction-age clock are still set by the refresh (at the start of the GET and at the
//!   deferred refresh, as above).
//! * The predictor may choose the block being accessed (e.g. the largest TTA on exhaustion);
//!   then its segments outside the request go first, then (refreshed early) it is kept.
//! * Counters: predictions (one per candidate examined), decisions (one per condemned block,
//!   [`MatStats::evictions`]), reinsertions, evicted segments (`Info::evictions`: all of
//!   them come from condemned blocks); `predictions_per_eviction` = predictions / decisions;
//!   `ns_per_eviction` = wall time of the decisions (Algorithm 1, TSC-timed) / decisions.
//!
//! Predictors: none ([`NoPredictor`](crate::mat::NoPredictor): the tail block is condemned
//! unpredicted, so flash MAT is exactly flash LRU: same metrics, every one), the oracle
//! ([`Oracle`](crate::mat::Oracle) over [`next_gets`]: the index of the block's next GET, not
//! PUT, since a PUT does not read the cache; "never" when none), a function (`FnPredictor`,
//! tests) and the compiled eviction .so (`crate::mat::so_evict::SoPredictor`), reading the same 44
//! features as in object mode.
//!
//! Training samples (`collect_samples`), as object mode: every candidate that leaves the
//! tail (once per time it leaves) is tagged with its features and (time, last access); at
//! the block's next GET it gets the label log1p(that GET - its last access), with the same
//! window and censoring rules ([`SampleBuf`]). With no predictor that is one sample per
//! decision: the LRU tail block when it is condemned.
//!
//! Performance: the plain flash policies do not change; MAT is a separate monomorphised
//! `Orders` implementation (`MatOrders`), and what it added to the flash loop is an empty
//! inline hook (`Orders::on_get`) and a branch on a constant (`Orders::EARLY_REFRESH`) for
//! them. Cost of MAT: 4 bytes per access (dense ids; the oracle 4 more for its next GETs),
//! ~36 per cached block, and with features or samples `lrb_features`' 24 bytes per distinct
//! block (+208 for blocks with two GETs within the window) and 377 per sample.

use std::time::Instant;

use crate::core::config::{err, EvictionKind, FlashConfig, SimError};
use crate::core::eviction::{Eviction, Lru};
use crate::core::ratio;
use crate::flash::admission::Admission;
use crate::flash::prefetch::Prefetch;
use crate::flash::{policies, validate, FlashResult, FlashSim, Orders, PolicyArrays, Trace};
use crate::mat::lrb_features::MetaStore;
use crate::mat::{
    DecisionClock, DenseTrace, Mat, MatParams, MatStats, Predictor, SampleBuf, Samples, Slots,
    NO_NEXT,
};

/// The result of a flash-mode MAT run: the flash metrics and MAT's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct MatFlashResult {
    pub flash: FlashResult,
    /// `evictions` here counts decisions (condemned blocks); evicted segments are
    /// `flash.info.evictions`.
    pub stats: MatStats,
    /// T after the run (NaN if no prediction was made).
    pub final_threshold: f64,
    pub samples: Option<Samples>,
}

impl MatFlashResult {
    /// Predictions per decision (per condemned block).
    pub fn predictions_per_eviction(&self) -> f64 {
        ratio(self.stats.predictions, self.stats.evictions)
    }
    /// Wall time of the decisions per decision, ns.
    pub fn ns_per_eviction(&self) -> f64 {
        ratio(self.stats.decision_ns, self.stats.evictions)
    }
}

/// `next[i]` = the index of the next GET (an op not in `cfg.put_ops`) of access i's key after
/// i, or [`NO_NEXT`]: the oracle's note. `dense` must be `DenseTrace::new(trace.key)`.
pub fn next_gets(trace: &Trace, cfg: &FlashConfig, dense: &DenseTrace) -> Vec<u32> {
    let mut is_put = [false; 256];
    for &p in &cfg.put_ops {
        is_put[p as usize] = true;
    }
    let n = dense.ids.len();
    let mut seen = vec![NO_NEXT; dense.objects];
    let mut next = vec![NO_NEXT; n];
    for i in (0..n).rev() {
        let o = dense.ids[i] as usize;
        next[i] = seen[o];
        if !is_put[trace.op[i] as usize] {
            seen[o] = i as u32;
        }
    }
    next
}

/// The block LRU order with MAT choosing victims (module docs): the flash cache's eviction
/// order in flash-mode MAT. Handles are the cache's block slots.
pub(crate) struct MatOrders<'a, P: Predictor> {
    /// The cached blocks but the condemned one; tail = next candidate.
    order: Lru,
    /// The block whose segments are being evicted (in no order).
    condemned: Option<u32>,
    mat: Mat<P>,
    /// Per block slot: dense id, last GET (logical time), the predictor's note.
    slots: Slots,
    meta: Option<MetaStore>,
    samples: Option<SampleBuf>,
    /// Dense block id and bytes of every access.
    ids: &'a [u32],
    sizes: &'a [u64],
    /// The current GET's index.
    now: u64,
    clock: DecisionClock,
}

impl<'a, P: Predictor> MatOrders<'a, P> {
    fn new(params: MatParams, predictor: P, dense: &'a DenseTrace, sizes: &'a [u64]) -> Self {
        let mat = Mat::new(params, predictor);
        let meta = mat
            .wants_features()
            .then(|| MetaStore::new(dense.objects, params.memory_window));
        let samples = params
            .collect_samples
            .then(|| SampleBuf::new(dense.objects, params.memory_window));
        MatOrders {
            order: Lru::new(),
            condemned: None,
            mat,
            slots: Slots::default(),
            meta,
            samples,
            ids: &dense.ids,
            sizes,
            now: 0,
            clock: DecisionClock::new(),
        }
    }
}

impl<P: Predictor> Orders<Lru> for MatOrders<'_, P> {
    const PARTITIONED: bool = false;
    const EARLY_REFRESH: bool = true;

    #[inline]
    fn on_get(&mut self, i: usize, slot: Option<u32>) {
        let now = i as u64;
        self.now = now;
        if let Some(m) = &mut self.meta {
            let id = self.ids[i];
            if let (Some(s), Some(last)) = (&mut self.samples, m.last(id)) {
                s.requested(id, now, last);
            }
            m.access(id, now, self.sizes[i]);
        }
        if let Some(sl) = slot {
            let note = self.mat.note(now);
            self.slots.touch(sl, now, note);
        }
    }

    #[inline(always)]
    fn part_of(&self, _: u32) -> u32 {
        0
    }

    /// A block is allocated: by the current GET (the only accesses that insert).
    #[inline]
    fn assign(&mut self, slot: u32, _: u32) {
        let note = self.mat.note(self.now);
        let id = self.ids[self.now as usize];
        self.slots.set(slot, id, self.now, 0, note);
    }

    #[inline(always)]
    fn release(&mut self, _: u32) {}

    #[inline]
    fn insert(&mut self, _: u32, unit: u32) {
        self.order.insert(unit);
    }

    /// The block's recency is refreshed (by the current GET): to the head; a condemned block
    /// is un-condemned.
    #[inline]
    fn touch(&mut self, _: u32, unit: u32) {
        if self.condemned == Some(unit) {
            self.condemned = None;
            self.order.insert(unit);
        } else {
            self.order.touch(unit);
        }
    }

    /// The condemned block, or a new decision (Algorithm 1) that condemns one.
    #[inline]
    fn victim(&mut self, _: u32) -> Option<u32> {
        if self.condemned.is_some() {
            return self.condemned;
        }
        if self.order.is_empty() {
            return None;
        }
        let t0 = self.clock.now();
        if let Some(m) = &self.meta {
            self.mat
                .prefetch_candidates(self.order.iter_from_back(), &self.slots, m);
        }
        let v = self.mat.evict(
            &mut self.order,
            self.now,
            &mut self.slots,
            self.meta.as_ref(),
            &mut self.samples,
        );
        self.clock.add_since(t0);
        self.condemned = Some(v);
        Some(v)
    }

    /// A block's last segment left.
    #[inline]
    fn remove(&mut self, _: u32, unit: u32) {
        if self.condemned == Some(unit) {
            self.condemned = None;
        } else {
            self.order.remove(unit);
        }
    }
}

/// Flash-cache mode with MAT as the eviction (module docs), any admission and prefetch policy
/// of `cfg` (with its `arrays`). `dense` must be `DenseTrace::new(trace.key)`; for the oracle,
/// build it from [`next_gets`].
pub fn simulate_mat_flash<P: Predictor>(
    trace: &Trace,
    arrays: &PolicyArrays,
    cfg: &FlashConfig,
    params: MatParams,
    predictor: P,
    dense: &DenseTrace,
) -> Result<MatFlashResult, SimError> {
    validate(trace, arrays, cfg)?;
    let (mut admission, mut prefetch) = policies(cfg, arrays);
    run_mat_flash(
        trace,
        cfg,
        admission.as_mut(),
        prefetch.as_mut(),
        params,
        predictor,
        dense,
    )
}

/// [`simulate_mat_flash`] with caller-supplied admission and prefetch policies (the compiled
/// policy .so's, `crate::compose::so_policy::simulate_mat`: Baleen's learned admission + prefetch with
/// MAT's learned eviction); `cfg`'s own admission/prefetch settings are only validated (use
/// AdmitAll / None). The policies are asked exactly as in [`simulate_mat_flash`]: on each
/// GET miss, before its insertions (and so before any eviction decision they cause).
pub fn simulate_mat_flash_with<P: Predictor>(
    trace: &Trace,
    cfg: &FlashConfig,
    admission: &mut dyn Admission,
    prefetch: &mut dyn Prefetch,
    params: MatParams,
    predictor: P,
    dense: &DenseTrace,
) -> Result<MatFlashResult, SimError> {
    validate(trace, &PolicyArrays::default(), cfg)?;
    run_mat_flash(trace, cfg, admission, prefetch, params, predictor, dense)
}

/// The flash cache with MAT's eviction and the given admission and prefetch, once the trace
/// and `cfg` are validated (with the policies' per-access arrays, where `cfg`'s own policies
/// read them).
fn run_mat_flash<P: Predictor>(
    trace: &Trace,
    cfg: &FlashConfig,
    admission: &mut dyn Admission,
    prefetch: &mut dyn Prefetch,
    params: MatParams,
    predictor: P,
    dense: &DenseTrace,
) -> Result<MatFlashResult, SimError> {
    let start = Instant::now();
    if cfg.eviction != EvictionKind::Lru || !cfg.block_level_recency {
        return err(format!(
            "MAT in flash mode needs LRU eviction with block-level recency (its eviction unit \
             is the block); got eviction {} with block_level_recency = {}",
            cfg.eviction.name(),
            cfg.block_level_recency
        ));
    }
    params.validate()?;
    if params.record_victims {
        return err("record_victims is not supported by MAT in flash mode");
    }
    if dense.ids.len() != trace.key.len() {
        return err("the dense trace does not belong to these keys");
    }
    let n = trace.key.len() as u64;
    let orders = MatOrders::new(params, predictor, dense, trace.size);
    let mut sim: FlashSim<'_, Lru, MatOrders<'_, P>> = FlashSim::new(cfg, orders, 1);
    let mut flash = sim.run(trace, admission, prefetch, None);
    let mut o = sim.orders;
    o.mat.stats.decision_ns = o.clock.total_ns();
    flash.metrics.wall_s = start.elapsed().as_secs_f64();
    Ok(MatFlashResult {
        flash,
        stats: o.mat.stats,
        final_threshold: o.mat.threshold,
        samples: o.samples.map(|s| s.finish(n)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{AdmissionKind, PrefetchKind};
    use crate::flash::simulate;
    use crate::mat::lrb_features::F_AGE;
    use crate::mat::{FnPredictor, NoPredictor, Oracle};

    use crate::flash::testing::{Rows, SEG};

    /// (key, first segment, segments, op) at times 0, 1, 2, ...
    fn rows(r: &[(u64, u64, u64, u8)]) -> Rows {
        Rows {
            time: (0..r.len()).map(|i| i as f64).collect(),
            key: r.iter().map(|x| x.0).collect(),
            offset: r.iter().map(|x| x.1 * SEG).collect(),
            size: r.iter().map(|x| x.2 * SEG).collect(),
            op: r.iter().map(|x| x.3).collect(),
        }
    }

    fn cfg(capacity: u64) -> FlashConfig {
        FlashConfig {
            capacity_segments: capacity,
            window_s: 10.0,
            warmup_s: 0.0,
            ..Default::default()
        }
    }

    /// A skewed random trace: keys, ranges within 8 segments, a few PUTs.
    fn random_rows(n: usize, keys: u64, seed: u64) -> Rows {
        let mut x = seed | 1;
        let mut step = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut r = Vec::with_capacity(n);
        for _ in 0..n {
            let k = (step() % keys).min(step() % keys);
            let s0 = step() % 8;
            let len = 1 + step() % (8 - s0);
            let op = if step() % 10 == 0 { 3 } else { 1 };
            r.push((k, s0, len, op));
        }
        rows(&r)
    }

    fn run<P: Predictor>(r: &Rows, c: &FlashConfig, params: MatParams, p: P) -> MatFlashResult {
        let t = r.trace();
        let dense = DenseTrace::new(t.key).unwrap();
        simulate_mat_flash(&t, &PolicyArrays::default(), c, params, p, &dense).unwrap()
    }

    fn same_flash(a: &FlashResult, b: &FlashResult) {
        let mut a = a.clone();
        a.metrics.wall_s = b.metrics.wall_s;
        assert_eq!(&a, b);
    }

    #[test]
    fn no_predictor_is_flash_lru() {
        let r = random_rows(20_000, 300, 7);
        for capacity in [3, 20, 60, 200] {
            for (admission, prefetch) in [
                (AdmissionKind::AdmitAll, PrefetchKind::None),
                (
                    AdmissionKind::RejectX { x: 1, factor: 2.0 },
                    PrefetchKind::None,
                ),
                (AdmissionKind::AdmitAll, PrefetchKind::Block),
            ] {
                let c = FlashConfig {
                    admission,
                    prefetch,
                    ..cfg(capacity)
                };
                let lru = simulate(&r.trace(), &PolicyArrays::default(), &c).unwrap();
                let p = MatParams {
                    collect_samples: true,
                    memory_window: 1024,
                    ..MatParams::algorithm1()
                };
                let m = run(&r, &c, p, NoPredictor);
                same_flash(&m.flash, &lru);
                assert!(lru.info.evictions > 0);
                assert_eq!(m.stats.predictions, 0);
                assert!(m.stats.evictions > 0 && m.stats.evictions <= lru.info.evictions);
                // one sample per decision: the condemned tail block
                assert_eq!(m.samples.unwrap().len() as u64, m.stats.evictions);
                assert!(m.final_threshold.is_nan());
            }
        }
    }

    /// Always "far": the first candidate goes, so MAT is LRU with one prediction per
    /// decision.
    #[test]
    fn infinite_prediction_is_lru_with_one_try() {
        let r = random_rows(10_000, 200, 9);
        let c = cfg(40);
        let lru = simulate(&r.trace(), &PolicyArrays::default(), &c).unwrap();
        let m = run(
            &r,
            &c,
            MatParams::algorithm1(),
            FnPredictor(|_, _| f64::INFINITY),
        );
        same_flash(&m.flash, &lru);
        assert_eq!(m.stats.predictions, m.stats.evictions);
        assert_eq!(m.stats.reinsertions, 0);
        assert!(m.final_threshold > 0.0);
    }

    /// By hand, capacity 8 (holds 7 segments), GETs at t = 0, 1, ...: A, B, C (keys 1, 2, 3)
    /// of 2 segments; D (key 4, 2 segments) at 3 needs room for its second one: decision 1
    /// examines the LRU tail A (last 0, age 3, predicted back at once: TTA 0, kept) then B
    /// (last 1, age 2, predicted far: condemned; r = 2 > k = 1.5, T = 5 * 0.5). B loses
    /// segment 0. E (key 5, 3 segments) at 4: its first segment takes B's segment 1 with no
    /// new decision (B is then empty); its second needs decision 2: the tail is C (A was
    /// re-inserted at the head), condemned at the first try (r = 1 < k: T *= 1.5), and C's two
    /// segments go one by one. A hits at 5 (plain LRU would have evicted it at 3); B misses
    /// at 6: decision 3 condemns the tail D (T *= 1.5).
    #[test]
    fn hand_example_condemned_block_leaves_segment_by_segment() {
        let r = rows(&[
            (1, 0, 2, 1),
            (2, 0, 2, 1),
            (3, 0, 2, 1),
            (4, 0, 2, 1),
            (5, 0, 3, 1),
            (1, 0, 2, 1),
            (2, 0, 1, 1),
        ]);
        let c = cfg(8);
        let params = MatParams {
            initial_threshold: Some(5.0),
            k: 1.5,
            delta: 0.5,
            collect_samples: true,
            memory_window: 1024,
            ..MatParams::algorithm1()
        };
        let seen = std::cell::RefCell::new(Vec::new());
        let pred = FnPredictor(|last, f: &crate::mat::lrb_features::EvictFeatures| {
            seen.borrow_mut().push((last, f[F_AGE]));
            if last == 0 {
                f[F_AGE] // TTA 0
            } else {
                1e9
            }
        });
        let m = run(&r, &c, params, pred);
        assert_eq!(*seen.borrow(), vec![(0, 3.0), (1, 2.0), (2, 2.0), (3, 3.0)]);
        assert_eq!(m.stats.evictions, 3); // decisions
        assert_eq!(m.stats.predictions, 4);
        assert_eq!(m.stats.reinsertions, 1);
        assert_eq!(m.predictions_per_eviction(), 4.0 / 3.0);
        // segments: B 0 (t3), B 1, C 0, C 1 (t4), D 0 (t6)
        assert_eq!(m.flash.info.evictions, 5);
        assert_eq!(m.flash.info.hits, 1);
        assert_eq!(m.final_threshold, 5.0 * 0.5 * 1.5 * 1.5);
        let lru = simulate(&r.trace(), &PolicyArrays::default(), &c).unwrap();
        // LRU: A 0 (t3); A 1, B 0, B 1 (t4); A misses at 5: C 0, C 1; D 0 (t6)
        assert_eq!((lru.info.hits, lru.info.evictions), (0, 7));
        let s = m.samples.unwrap();
        assert_eq!(s.time, vec![3, 3, 4, 6]);
        assert_eq!(s.last, vec![0, 1, 2, 3]);
        // A returns at 5, B at 6; C and D never (censored: their window passes the end)
        let far = 2048f64.ln_1p();
        assert_eq!(s.label, vec![5f64.ln_1p(), 5f64.ln_1p(), far, far]);
        assert_eq!(s.censored, vec![false, false, true, true]);
        assert_eq!(s.features[F_AGE], 3.0);
        assert_eq!(
            s.features[crate::mat::lrb_features::F_SIZE],
            (2 * SEG) as f64
        );
    }

    /// The block being accessed by a GET miss: with a cached segment outside the request it
    /// stays at its old place (the tail here) and is a candidate, seen as accessed now (age
    /// 0); its outside segment goes first. With none outside it is refreshed at once and never
    /// a candidate (`EARLY_REFRESH`).
    #[test]
    fn the_accessed_block_at_the_tail() {
        let c = cfg(8);
        let params = MatParams {
            collect_samples: true,
            memory_window: 1024,
            ..MatParams::algorithm1()
        };
        for (a_segs, get, want_last, want_age) in [
            // A caches 0..=2; the GET of 1..=3 misses 3: A (last 3 = now) condemned, loses 0
            (3, (1, 3), 3, 0.0),
            // A caches 0..=1, all inside the GET of 0..=3: B (the next tail) is condemned
            (2, (0, 4), 1, 2.0),
        ] {
            let r = rows(&[
                (1, 0, a_segs, 1),
                (2, 0, 2, 1),
                (3, 0, 2, 1),
                (1, get.0, get.1, 1),
            ]);
            let seen = std::cell::RefCell::new(Vec::new());
            let pred = FnPredictor(|last, f: &crate::mat::lrb_features::EvictFeatures| {
                seen.borrow_mut().push((last, f[F_AGE]));
                f64::INFINITY
            });
            let m = run(&r, &c, params, pred);
            assert_eq!(*seen.borrow(), vec![(want_last, want_age)], "{a_segs:?}");
            assert_eq!(m.stats.evictions, 1);
            assert_eq!(m.flash.info.evictions, 1);
            let lru = simulate(&r.trace(), &PolicyArrays::default(), &c).unwrap();
            same_flash(&m.flash, &lru);
            let s = m.samples.unwrap();
            assert_eq!((s.time.clone(), s.last.clone()), (vec![3], vec![want_last]));
        }
    }

    /// The order holds the cached blocks but the condemned one, which is cached; checked at
    /// the end of many prefixes of a run that reshuffles a lot (oracle, L = 4, small cache).
    #[test]
    fn order_invariants_hold() {
        let r = random_rows(2_000, 60, 21);
        let c = cfg(30);
        let params = MatParams {
            max_candidates: 4,
            ..MatParams::algorithm1()
        };
        let mut condemned_seen = 0;
        for end in (1..=2_000).step_by(37) {
            let t = Trace {
                time: &r.time[..end],
                key: &r.key[..end],
                offset: &r.offset[..end],
                size: &r.size[..end],
                op: &r.op[..end],
            };
            let dense = DenseTrace::new(t.key).unwrap();
            let next = next_gets(&t, &c, &dense);
            let (mut adm, mut pf) = policies(&c, &PolicyArrays::default());
            let orders = MatOrders::new(params, Oracle { next: &next }, &dense, t.size);
            let mut sim: FlashSim<'_, Lru, MatOrders<'_, Oracle>> = FlashSim::new(&c, orders, 1);
            sim.run(&t, adm.as_mut(), pf.as_mut(), None);
            let o = &sim.orders;
            let mut want = sim.cached_slots();
            want.sort_unstable();
            let mut got: Vec<u32> = o.order.iter_from_back().chain(o.condemned).collect();
            got.sort_unstable();
            assert_eq!(got, want, "prefix {end}");
            condemned_seen += usize::from(o.condemned.is_some());
        }
        assert!(condemned_seen > 0);
    }

    #[test]
    fn oracle_never_loses_to_lru_on_misses_here() {
        let r = random_rows(30_000, 400, 5);
        for capacity in [40, 120] {
            let c = cfg(capacity);
            let t = r.trace();
            let lru = simulate(&t, &PolicyArrays::default(), &c).unwrap();
            let dense = DenseTrace::new(t.key).unwrap();
            let next = next_gets(&t, &c, &dense);
            let m = simulate_mat_flash(
                &t,
                &PolicyArrays::default(),
                &c,
                MatParams::algorithm1(),
                Oracle { next: &next },
                &dense,
            )
            .unwrap();
            assert!(m.flash.info.hits > lru.info.hits, "capacity {capacity}");
            assert!(m.stats.predictions >= m.stats.evictions);
        }
    }

    #[test]
    fn next_gets_skip_puts() {
        let r = rows(&[(1, 0, 1, 1), (1, 0, 1, 3), (2, 0, 1, 1), (1, 0, 1, 1)]);
        let t = r.trace();
        let dense = DenseTrace::new(t.key).unwrap();
        let next = next_gets(&t, &cfg(8), &dense);
        assert_eq!(next, vec![3, 3, NO_NEXT, NO_NEXT]);
    }

    #[test]
    fn bad_configs() {
        let r = rows(&[(1, 0, 1, 1), (2, 0, 1, 1)]);
        let t = r.trace();
        let dense = DenseTrace::new(t.key).unwrap();
        let a = PolicyArrays::default();
        for c in [
            FlashConfig {
                eviction: EvictionKind::Fifo,
                ..cfg(8)
            },
            FlashConfig {
                block_level_recency: false,
                ..cfg(8)
            },
        ] {
            let e = simulate_mat_flash(&t, &a, &c, MatParams::algorithm1(), NoPredictor, &dense)
                .unwrap_err();
            assert!(e.0.contains("block-level recency"), "{}", e.0);
        }
        let bad = MatParams {
            max_candidates: 0,
            ..MatParams::algorithm1()
        };
        assert!(simulate_mat_flash(&t, &a, &cfg(8), bad, NoPredictor, &dense).is_err());
        let other = DenseTrace::new(&[1]).unwrap();
        assert!(simulate_mat_flash(
            &t,
            &a,
            &cfg(8),
            MatParams::algorithm1(),
            NoPredictor,
            &other
        )
        .is_err());
    }
}
