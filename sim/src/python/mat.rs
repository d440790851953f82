//! MAT: learned eviction at LRU's tail in object and flash mode, LRB's decision, LRB's eviction features.

use super::*;
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::types::PyDict;

use crate::compose::flash_mat;
use crate::compose::so_policy::{self, Overrides};
use crate::core::config::{EvictionKind, ObjectConfig};
use crate::core::solib::Expected;
use crate::flash::online_features::{FeatureColumns, GET_OPS};
use crate::mat::lrb::{self, LrbParams};
use crate::mat::lrb_features::EVICT_NUM_FEATURES;
use crate::mat::settings;
use crate::mat::so_evict::{EvictLib, SoPredictor};
use crate::mat::{self, Controller, DenseTrace, MatParams, NoPredictor, Oracle};

/// Object-mode MAT (learned eviction at the LRU tail, sim/src/mat/object.rs) over (key u64, size u64)
/// requests. `predictor`: "none" (evict the LRU tail: exactly LRU, zero predictions),
/// "oracle" (the true next access), or the path of an eviction policy .so
/// (`flashml_evict_predict`, sim/src/mat/so_evict.rs). `k`, `max_candidates`, `delta`,
/// `initial_threshold`, `controller` ("sign" | "mean"), `reuse_predictions`: Algorithm 1's
/// knobs; None takes the .so's exported value if any, else 2, 10, 1e-4, the number of cached
/// objects at the first eviction, "sign" and false. `memory_window`: None
/// is the .so's (flashml_evict_memory_window) if it exports one, else the eviction
/// contract's. Returns {"miss_ratio", "byte_miss_ratio", "requests", "hits",
/// "evictions", "predictions", "predictions_per_eviction", "reinsertions",
/// "ns_per_eviction", "final_threshold", "wall_s", "params": {...}} and, with
/// `collect_samples`, "samples": {"features" (n, 44) f64, "label", "time", "last",
/// "censored"}; with `record_victims`, "victims": {"time", "key"} (u64, one per eviction).
#[pyfunction]
#[pyo3(signature = (key, size, capacity, unit="bytes", *, predictor="none", k=None,
                    max_candidates=None, delta=None, initial_threshold=None,
                    collect_samples=false, memory_window=None, record_victims=false,
                    controller=None, reuse_predictions=None, sha256=None, size_bytes=None,
                    unverified=false))]
#[allow(clippy::too_many_arguments)]
pub(super) fn simulate_objects_mat<'py>(
    py: Python<'py>,
    key: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    capacity: i64,
    unit: &str,
    predictor: &str,
    k: Option<f64>,
    max_candidates: Option<i64>,
    delta: Option<f64>,
    initial_threshold: Option<f64>,
    collect_samples: bool,
    memory_window: Option<i64>,
    record_victims: bool,
    controller: Option<&str>,
    reuse_predictions: Option<bool>,
    sha256: Option<String>,
    size_bytes: Option<u64>,
    unverified: bool,
) -> PyResult<Bound<'py, PyDict>> {
    if capacity <= 0 {
        return Err(PyValueError::new_err(format!(
            "capacity must be > 0, got {capacity}"
        )));
    }
    let cfg = ObjectConfig {
        eviction: EvictionKind::Lru,
        capacity: capacity as u64,
        unit: capacity_unit(unit)?,
    };
    let keys = slice("key", &key)?;
    let sizes = slice("size", &size)?;
    let (kind, lib) = evict_predictor(predictor, sha256, size_bytes, unverified)?;
    let so = lib.as_ref();
    let params = mat_params(
        so,
        MatKnobs {
            k,
            max_candidates,
            delta,
            initial_threshold,
            memory_window,
            controller,
            reuse_predictions,
        },
        collect_samples,
        record_victims,
    )?;
    let r = py
        .allow_threads(|| {
            let trace = DenseTrace::new(keys)?;
            match (kind.as_str(), so) {
                (_, Some(lib)) => {
                    mat::simulate_mat(keys, sizes, &cfg, params, SoPredictor { lib }, &trace)
                }
                ("oracle", None) => {
                    let next = trace.next();
                    mat::simulate_mat(keys, sizes, &cfg, params, Oracle { next: &next }, &trace)
                }
                _ => mat::simulate_mat(keys, sizes, &cfg, params, NoPredictor, &trace),
            }
        })
        .map_err(value_error)?;
    let st = &r.stats;
    let params_d = mat_params_dict(py, &params, predictor)?;
    let d = fields_dict!(py, r; miss_ratio, byte_miss_ratio, requests, hits, final_threshold,
        wall_s; "evictions" => st.evictions, "predictions" => st.predictions,
        "predictions_per_eviction" => r.predictions_per_eviction(),
        "reused_predictions" => st.reused,
        "candidates_per_eviction" => r.candidates_per_eviction(),
        "reinsertions" => st.reinsertions, "ns_per_eviction" => r.ns_per_eviction(),
        "params" => params_d);
    if let Some(s) = r.samples {
        d.set_item("samples", samples_dict(py, s)?)?;
    }
    if let Some(v) = r.victims {
        let victims = PyDict::new(py);
        let (time, key): (Vec<u64>, Vec<u64>) = v.into_iter().unzip();
        victims.set_item("time", PyArray1::from_vec(py, time))?;
        victims.set_item("key", PyArray1::from_vec(py, key))?;
        d.set_item("victims", victims)?;
    }
    Ok(d)
}

/// Object-mode LRB on MAT's parts (sim/src/mat/lrb.rs): each eviction samples `sample_size`
/// (64) distinct cached objects, predicts each one's distance to its next access and evicts
/// the farthest predicted next access. `predictor`: "none" (a random victim, no
/// predictions), "oracle", or an eviction policy .so as for `simulate_objects_mat`.
/// `memory_window`: None is the .so's if it exports one, else the contract's. Returns
/// {"miss_ratio", "byte_miss_ratio", "requests", "hits", "evictions", "predictions",
/// "predictions_per_eviction", "ns_per_eviction", "wall_s", "params"}; with
/// `record_victims`, "victims": {"time", "key"}.
#[pyfunction]
#[pyo3(signature = (key, size, capacity, unit="bytes", *, predictor="none", sample_size=64,
                    memory_window=None, seed=0, record_victims=false, sha256=None,
                    size_bytes=None, unverified=false))]
#[allow(clippy::too_many_arguments)]
pub(super) fn simulate_objects_lrb<'py>(
    py: Python<'py>,
    key: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    capacity: i64,
    unit: &str,
    predictor: &str,
    sample_size: i64,
    memory_window: Option<i64>,
    seed: u64,
    record_victims: bool,
    sha256: Option<String>,
    size_bytes: Option<u64>,
    unverified: bool,
) -> PyResult<Bound<'py, PyDict>> {
    if capacity <= 0 {
        return Err(PyValueError::new_err(format!(
            "capacity must be > 0, got {capacity}"
        )));
    }
    if !(1..=u32::MAX as i64).contains(&sample_size) {
        return Err(PyValueError::new_err(format!(
            "sample_size must be >= 1, got {sample_size}"
        )));
    }
    let cfg = ObjectConfig {
        eviction: EvictionKind::Lru,
        capacity: capacity as u64,
        unit: capacity_unit(unit)?,
    };
    let keys = slice("key", &key)?;
    let sizes = slice("size", &size)?;
    let (kind, lib) = evict_predictor(predictor, sha256, size_bytes, unverified)?;
    let so = lib.as_ref();
    let memory_window = match memory_window.or(so.and_then(|l| l.memory_window)) {
        None => crate::mat::lrb_features::MEMORY_WINDOW,
        Some(w) if w > 0 => w as u64,
        Some(w) => {
            return Err(PyValueError::new_err(format!(
                "memory_window must be > 0, got {w}"
            )))
        }
    };
    let params = LrbParams {
        sample_size: sample_size as u32,
        memory_window,
        seed,
        record_victims,
    };
    let r = py
        .allow_threads(|| {
            let trace = DenseTrace::new(keys)?;
            match (kind.as_str(), so) {
                (_, Some(lib)) => {
                    lrb::simulate_lrb(keys, sizes, &cfg, params, SoPredictor { lib }, &trace)
                }
                ("oracle", None) => {
                    let next = trace.next();
                    lrb::simulate_lrb(keys, sizes, &cfg, params, Oracle { next: &next }, &trace)
                }
                _ => lrb::simulate_lrb(keys, sizes, &cfg, params, NoPredictor, &trace),
            }
        })
        .map_err(value_error)?;
    let st = &r.stats;
    let params_d = fields_dict!(py, params; sample_size, memory_window, seed;
        "predictor" => predictor);
    let d = fields_dict!(py, r; miss_ratio, byte_miss_ratio, requests, hits, wall_s;
        "evictions" => st.evictions, "predictions" => st.predictions,
        "predictions_per_eviction" => r.predictions_per_eviction(),
        "ns_per_eviction" => r.ns_per_eviction(), "params" => params_d);
    if let Some(v) = r.victims {
        let victims = PyDict::new(py);
        let (time, key): (Vec<u64>, Vec<u64>) = v.into_iter().unzip();
        victims.set_item("time", PyArray1::from_vec(py, time))?;
        victims.set_item("key", PyArray1::from_vec(py, key))?;
        d.set_item("victims", victims)?;
    }
    Ok(d)
}

/// Algorithm 1's knobs as Python passes them (None: the .so's value, else the default).
struct MatKnobs<'a> {
    k: Option<f64>,
    max_candidates: Option<i64>,
    delta: Option<f64>,
    initial_threshold: Option<f64>,
    memory_window: Option<i64>,
    controller: Option<&'a str>,
    reuse_predictions: Option<bool>,
}

/// The knobs a MAT run used, as both simulate functions return them ("params",
/// "mat_params").
fn mat_params_dict<'py>(
    py: Python<'py>,
    p: &MatParams,
    predictor: &str,
) -> PyResult<Bound<'py, PyDict>> {
    Ok(
        fields_dict!(py, p; k, max_candidates, delta, initial_threshold,
        memory_window, collect_samples, reuse_predictions; "predictor" => predictor,
        "controller" => p.controller.name()),
    )
}

/// The predictor named by `predictor`: ("none" | "oracle" | the path, lowercased) and the
/// loaded eviction .so when it is a path.
/// A path is loaded through [`load_verified`](crate::core::solib::load_verified) against `sha256` and `size_bytes`
/// (its manifest's), or without them only with `unverified`.
fn evict_predictor(
    predictor: &str,
    sha256: Option<String>,
    size_bytes: Option<u64>,
    unverified: bool,
) -> PyResult<(String, Option<EvictLib>)> {
    let kind = predictor.to_ascii_lowercase();
    let lib = match kind.as_str() {
        "none" | "oracle" => None,
        _ => {
            let expect = Expected::from_parts(predictor, sha256, size_bytes, unverified)
                .map_err(value_error)?;
            Some(
                EvictLib::load(std::path::Path::new(predictor), expect.as_ref())
                    .map_err(value_error)?,
            )
        }
    };
    Ok((kind, lib))
}

/// MAT's parameters: each knob given, else the .so's exported one (a .so without the
/// controller or reuse function: their `*_LEGACY` values), else the declared default
/// (`MatParams::default`: sim/src/mat/settings.rs); then `MatParams::validate`.
fn mat_params(
    so: Option<&EvictLib>,
    knobs: MatKnobs,
    collect_samples: bool,
    record_victims: bool,
) -> PyResult<MatParams> {
    let d = MatParams::default();
    // out of u32/u64 range: the declared bounds' message (settings::*_problem)
    let bound = |name: &str, why: Option<&str>, v: i64| {
        PyValueError::new_err(format!(
            "{name} must be {}, got {v}",
            why.unwrap_or("in range")
        ))
    };
    let max_candidates = match knobs
        .max_candidates
        .or(so.and_then(|l| l.max_candidates.map(i64::from)))
    {
        None => d.max_candidates,
        Some(l) => u32::try_from(l)
            .map_err(|_| bound("max_candidates", settings::max_candidates_problem(l), l))?,
    };
    let memory_window = match knobs.memory_window.or(so.and_then(|l| l.memory_window)) {
        None => d.memory_window,
        Some(w) => u64::try_from(w)
            .map_err(|_| bound("memory_window", settings::memory_window_problem(w), w))?,
    };
    let controller = match (knobs.controller, so) {
        (Some(name), _) => Controller::from_name(name).map_err(value_error)?,
        (None, Some(l)) => match l.controller {
            Some(code) => Controller::from_code(code.into()).map_err(value_error)?,
            None => Controller::legacy(),
        },
        (None, None) => d.controller,
    };
    let reuse_predictions = match (knobs.reuse_predictions, so) {
        (Some(r), _) => r,
        (None, Some(l)) => l
            .reuse_predictions
            .map_or(settings::REUSE_PREDICTIONS_LEGACY, |v| v != 0),
        (None, None) => d.reuse_predictions,
    };
    let p = MatParams {
        controller,
        reuse_predictions,
        k: knobs.k.or(so.and_then(|l| l.k)).unwrap_or(d.k),
        max_candidates,
        delta: knobs.delta.or(so.and_then(|l| l.delta)).unwrap_or(d.delta),
        initial_threshold: knobs
            .initial_threshold
            .or(so.and_then(|l| l.initial_threshold))
            .or(d.initial_threshold),
        memory_window,
        collect_samples,
        record_victims,
    };
    p.validate().map_err(value_error)?;
    Ok(p)
}

/// MAT's training samples as a dict of NumPy arrays: "features" (n, 44) f64, "label",
/// "time", "last", "censored".
fn samples_dict(py: Python<'_>, s: mat::Samples) -> PyResult<Bound<'_, PyDict>> {
    let n = s.len();
    let samples = PyDict::new(py);
    samples.set_item(
        "features",
        PyArray1::from_vec(py, s.features).reshape([n, EVICT_NUM_FEATURES])?,
    )?;
    samples.set_item("label", PyArray1::from_vec(py, s.label))?;
    samples.set_item("time", PyArray1::from_vec(py, s.time))?;
    samples.set_item("last", PyArray1::from_vec(py, s.last))?;
    samples.set_item("censored", PyArray1::from_vec(py, s.censored))?;
    Ok(samples)
}

/// Flash-cache mode with MAT as the eviction (learned eviction at the tail of the block LRU,
/// sim/src/compose/flash_mat.rs): the arguments of `simulate` (no partitioned mode) plus MAT's, as
/// `simulate_objects_mat` takes them (`predictor` "none" | "oracle" | an eviction .so path;
/// the oracle reads the next GET of the block). The config must have eviction "lru" with
/// block-level recency (ValueError otherwise). Returns the dict of `simulate`, with MAT's
/// figures added to "metrics": "mat_predictions", "mat_reused_predictions",
/// "mat_decisions" (condemned blocks),
/// "mat_reinsertions", "mat_evicted_segments", "predictions_per_eviction" and
/// "ns_per_eviction" (per decision), "final_threshold"; "info" gains "mat_params" (the knobs
/// used); with `collect_samples`, "samples" as `simulate_objects_mat` gives them.
#[pyfunction]
#[pyo3(signature = (time, key, offset, size, op, config=None, *, admit=None, score=None,
                    prefetch_start=None, prefetch_end=None, when_score=None,
                    predictor="none", k=None, max_candidates=None, delta=None,
                    initial_threshold=None, memory_window=None, collect_samples=false,
                    controller=None, reuse_predictions=None, sha256=None, size_bytes=None,
                    unverified=false, policy=None, namespace=None, user=None, threshold=None,
                    when_threshold=None, get_ops=None, policy_sha256=None,
                    policy_size_bytes=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn simulate_mat_flash<'py>(
    py: Python<'py>,
    time: PyReadonlyArray1<'py, f64>,
    key: PyReadonlyArray1<'py, u64>,
    offset: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    op: PyReadonlyArray1<'py, u8>,
    config: Option<&Bound<'py, PyDict>>,
    admit: Option<PyReadonlyArray1<'py, u8>>,
    score: Option<PyReadonlyArray1<'py, f64>>,
    prefetch_start: Option<PyReadonlyArray1<'py, i16>>,
    prefetch_end: Option<PyReadonlyArray1<'py, i16>>,
    when_score: Option<PyReadonlyArray1<'py, f64>>,
    predictor: &str,
    k: Option<f64>,
    max_candidates: Option<i64>,
    delta: Option<f64>,
    initial_threshold: Option<f64>,
    memory_window: Option<i64>,
    collect_samples: bool,
    controller: Option<&str>,
    reuse_predictions: Option<bool>,
    sha256: Option<String>,
    size_bytes: Option<u64>,
    unverified: bool,
    policy: Option<std::path::PathBuf>,
    namespace: Option<PyReadonlyArray1<'py, u32>>,
    user: Option<PyReadonlyArray1<'py, u32>>,
    threshold: Option<f64>,
    when_threshold: Option<f64>,
    get_ops: Option<Vec<u8>>,
    policy_sha256: Option<String>,
    policy_size_bytes: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config_from(config)?;
    let trace = trace_of(&time, &key, &offset, &size, &op)?;
    let arrays = policy_arrays(&admit, &score, &prefetch_start, &prefetch_end, &when_score)?;
    // Baleen's admission + prefetch from a policy .so (so_policy::simulate_mat) or cfg's.
    let baleen = match &policy {
        None => None,
        Some(path) => {
            if admit.is_some()
                || score.is_some()
                || prefetch_start.is_some()
                || prefetch_end.is_some()
                || when_score.is_some()
            {
                return Err(PyValueError::new_err(
                    "policy: the .so decides admission and prefetch; give no admit, score, \
                     prefetch or when_score arrays with it",
                ));
            }
            if namespace.is_none() || user.is_none() {
                return Err(PyValueError::new_err(
                    "policy needs the namespace and user columns (its features read them)",
                ));
            }
            let lib = load_policy(path, policy_sha256, policy_size_bytes, unverified)?;
            let overrides = Overrides {
                admit_threshold: threshold,
                when_threshold,
            };
            Some((lib, overrides))
        }
    };
    let get_ops = get_ops.unwrap_or_else(|| GET_OPS.to_vec());
    let cols = match (&baleen, &namespace, &user) {
        (Some(_), Some(ns), Some(us)) => Some(FeatureColumns {
            namespace: slice("namespace", ns)?,
            user: slice("user", us)?,
        }),
        _ => None,
    };
    let (kind, lib) = evict_predictor(predictor, sha256, size_bytes, unverified)?;
    let so = lib.as_ref();
    let knobs = MatKnobs {
        k,
        max_candidates,
        delta,
        initial_threshold,
        memory_window,
        controller,
        reuse_predictions,
    };
    let params = mat_params(so, knobs, collect_samples, false)?;
    let r = py
        .allow_threads(|| {
            let dense = DenseTrace::new(trace.key)?;
            let (t, a, c) = (&trace, &arrays, &cfg);
            if let (Some((plib, ov)), Some(cols)) = (&baleen, cols) {
                let g = &get_ops;
                return match (kind.as_str(), so) {
                    (_, Some(lib)) => so_policy::simulate_mat(
                        t,
                        cols,
                        c,
                        plib,
                        *ov,
                        g,
                        params,
                        SoPredictor { lib },
                        &dense,
                    ),
                    ("oracle", None) => {
                        let next = flash_mat::next_gets(t, c, &dense);
                        let oracle = Oracle { next: &next };
                        so_policy::simulate_mat(t, cols, c, plib, *ov, g, params, oracle, &dense)
                    }
                    _ => so_policy::simulate_mat(
                        t,
                        cols,
                        c,
                        plib,
                        *ov,
                        g,
                        params,
                        NoPredictor,
                        &dense,
                    ),
                };
            }
            match (kind.as_str(), so) {
                (_, Some(lib)) => {
                    flash_mat::simulate_mat_flash(t, a, c, params, SoPredictor { lib }, &dense)
                }
                ("oracle", None) => {
                    let next = flash_mat::next_gets(t, c, &dense);
                    let oracle = Oracle { next: &next };
                    flash_mat::simulate_mat_flash(t, a, c, params, oracle, &dense)
                }
                _ => flash_mat::simulate_mat_flash(t, a, c, params, NoPredictor, &dense),
            }
        })
        .map_err(value_error)?;
    let st = r.stats;
    let extra = (
        r.predictions_per_eviction(),
        r.ns_per_eviction(),
        r.final_threshold,
    );
    let evicted = r.flash.info.evictions;
    let d = result_dict(py, r.flash)?;
    let metrics = d.get_item("metrics")?.expect("result_dict has metrics");
    metrics.set_item("mat_predictions", st.predictions)?;
    metrics.set_item("mat_reused_predictions", st.reused)?;
    metrics.set_item("mat_decisions", st.evictions)?;
    metrics.set_item("mat_reinsertions", st.reinsertions)?;
    metrics.set_item("mat_evicted_segments", evicted)?;
    metrics.set_item("predictions_per_eviction", extra.0)?;
    metrics.set_item("ns_per_eviction", extra.1)?;
    metrics.set_item("final_threshold", extra.2)?;
    let params_d = mat_params_dict(py, &params, predictor)?;
    d.get_item("info")?
        .expect("result_dict has info")
        .set_item("mat_params", params_d)?;
    if let Some(s) = r.samples {
        d.set_item("samples", samples_dict(py, s)?)?;
    }
    Ok(d)
}

/// LRB's eviction features of object `key` at logical time `now` (request index), computed
/// by the simulator's streaming code over requests 0..now of the trace: a (44,) array
/// (tests compare it with flashml.features.eviction.features).
#[pyfunction]
#[pyo3(signature = (key, size, queries, memory_window=None))]
pub(super) fn eviction_features<'py>(
    py: Python<'py>,
    key: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    queries: Vec<(u64, usize)>,
    memory_window: Option<u64>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let keys = slice("key", &key)?;
    let sizes = slice("size", &size)?;
    if keys.len() != sizes.len() {
        return Err(PyValueError::new_err("'key' and 'size' differ in length"));
    }
    let w = memory_window.unwrap_or(crate::mat::lrb_features::MEMORY_WINDOW);
    crate::mat::lrb_features::check_memory_window(w).map_err(value_error)?;
    let trace = DenseTrace::new(keys).map_err(value_error)?;
    let mut ids = crate::core::hash::new_map();
    for (i, &k) in keys.iter().enumerate() {
        ids.entry(k).or_insert(trace.ids[i]);
    }
    let mut order: Vec<usize> = (0..queries.len()).collect();
    order.sort_by_key(|&q| queries[q].1);
    let mut meta = crate::mat::lrb_features::MetaStore::new(trace.objects, w);
    let mut out = vec![0.0; queries.len() * EVICT_NUM_FEATURES];
    let mut t = 0usize;
    for q in order {
        let (k, now) = queries[q];
        if now > keys.len() {
            return Err(PyValueError::new_err(format!(
                "time {now} is past the trace"
            )));
        }
        while t < now {
            meta.access(trace.ids[t], t as u64, sizes[t]);
            t += 1;
        }
        let id = match ids.get(&k) {
            Some(&id) if meta.last(id).is_some() => id,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "key {k} has no request before time {now}"
                )))
            }
        };
        let row: &mut [f64; EVICT_NUM_FEATURES] = (&mut out
            [q * EVICT_NUM_FEATURES..(q + 1) * EVICT_NUM_FEATURES])
            .try_into()
            .expect("one row");
        meta.features(id, now as u64, row);
    }
    PyArray1::from_vec(py, out).reshape([queries.len(), EVICT_NUM_FEATURES])
}

// --- MLCache: stack distances and partitioned caching (sim/src/mlcache/reuse.rs,
// sim/src/mlcache/partition.rs) ---------------------------------------------------------------------
