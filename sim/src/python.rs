//! The thin PyO3 layer: NumPy arrays are borrowed (never copied), the GIL is released while
//! the simulation runs, and every invalid input becomes a Python `ValueError`.

use numpy::{
    Element, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::blocks;
use crate::config::{
    sim_params, CapacityUnit, EvictionKind, FlashConfig, ObjectConfig, ParamType, SimError,
    SimParams, PARAM_FIELDS,
};
use crate::contract::NUM_FEATURES;
use crate::flash::{self, PolicyArrays, Trace};
use crate::flash_mat;
use crate::forest::{self, TreeArrays};
use crate::lrb::{self, LrbParams};
use crate::lrb_features::{EVICT_CONTRACT_HASH, EVICT_FEATURE_NAMES, EVICT_NUM_FEATURES};
use crate::mat::{self, Controller, DenseTrace, MatParams, NoPredictor, Oracle};
use crate::objects;
use crate::online_features::{self as online, FeatureColumns, GET_OPS};
use crate::partition;
use crate::readahead::{self, ReadaheadConfig, ReadaheadTrace};
use crate::reuse;
use crate::so_evict::{EvictLib, SoPredictor};
use crate::so_policy::{self, Expected, Overrides, PolicyLib};

/// A dict of `src`'s named fields, each keyed by its field name (so a metric's Python key is
/// its Rust name, written once); `key => value` pairs may follow for the rest.
macro_rules! fields_dict {
    ($py:expr, $src:expr; $($f:ident),* $(; $($k:literal => $v:expr),+)? $(,)?) => {{
        let d = PyDict::new($py);
        $(d.set_item(stringify!($f), $src.$f)?;)*
        $($(d.set_item($k, $v)?;)+)?
        d
    }};
}

fn value_error(e: SimError) -> PyErr {
    PyValueError::new_err(e.0)
}

/// `config 'name' must be TYPE, got ...` for a value of the wrong type or out of range.
fn get<'py, T: FromPyObject<'py>>(name: &str, ty: &str, v: &Bound<'py, PyAny>) -> PyResult<T> {
    v.extract::<T>().map_err(|e| {
        let got = v
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "?".into());
        PyValueError::new_err(format!("config '{name}' must be {ty}, got {got}: {e}"))
    })
}

/// The Python side of `sim_params!` (config.rs): dict -> `SimParams` and `SimParams` -> dict,
/// generated from the one field list (`config_fields()` reports it with `PARAM_FIELDS`).
macro_rules! python_params {
    ($($(#[doc = $doc:literal])* $name:ident: $ty:ty = $default:expr $(, one of $choices:expr)?;)*) => {
        /// Set one key of `p` from a Python value; ValueError naming the key if it is unknown
        /// or its value has the wrong type.
        fn set_param(p: &mut SimParams, key: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
            match key {
                $(stringify!($name) => {
                    p.$name = get::<$ty>(key, <$ty as ParamType>::PY_TYPE, v)?
                })*
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "unknown config key '{key}'; known keys: {}",
                        PARAM_FIELDS.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
                    )))
                }
            }
            Ok(())
        }

        /// Every key of `p` as a dict (lists for the sequence fields).
        fn params_dict<'py>(py: Python<'py>, p: &SimParams) -> PyResult<Bound<'py, PyDict>> {
            let d = PyDict::new(py);
            $(d.set_item(stringify!($name), &p.$name)?;)*
            Ok(d)
        }
    };
}

sim_params!(python_params);

/// The parameters a Python config dict gives: the declared defaults, updated by the dict.
fn params_from(config: Option<&Bound<'_, PyDict>>) -> PyResult<SimParams> {
    let mut p = SimParams::default();
    if let Some(d) = config {
        for (k, v) in d.iter() {
            let key = k
                .extract::<String>()
                .map_err(|_| PyValueError::new_err(format!("config key {k} is not a string")))?;
            set_param(&mut p, &key, &v)?;
        }
    }
    Ok(p)
}

/// The validated simulator configuration of a Python config dict.
fn config_from(config: Option<&Bound<'_, PyDict>>) -> PyResult<FlashConfig> {
    params_from(config)?.build().map_err(value_error)
}

fn slice<'a, T: Element>(name: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err(format!("array '{name}' must be C-contiguous")))
}

/// The canonical table's columns as borrowed slices (each must be C-contiguous).
fn trace_of<'a>(
    time: &'a PyReadonlyArray1<'_, f64>,
    key: &'a PyReadonlyArray1<'_, u64>,
    offset: &'a PyReadonlyArray1<'_, u64>,
    size: &'a PyReadonlyArray1<'_, u64>,
    op: &'a PyReadonlyArray1<'_, u8>,
) -> PyResult<Trace<'a>> {
    Ok(Trace {
        time: slice("time", time)?,
        key: slice("key", key)?,
        offset: slice("offset", offset)?,
        size: slice("size", size)?,
        op: slice("op", op)?,
    })
}

fn opt_slice<'a, T: Element>(
    name: &str,
    a: &'a Option<PyReadonlyArray1<'_, T>>,
) -> PyResult<Option<&'a [T]>> {
    a.as_ref().map(|a| slice(name, a)).transpose()
}

/// The per-access policy arrays given to a flash-mode simulation (each optional).
fn policy_arrays<'a>(
    admit: &'a Option<PyReadonlyArray1<'_, u8>>,
    score: &'a Option<PyReadonlyArray1<'_, f64>>,
    prefetch_start: &'a Option<PyReadonlyArray1<'_, i64>>,
    prefetch_end: &'a Option<PyReadonlyArray1<'_, i64>>,
    when_score: &'a Option<PyReadonlyArray1<'_, f64>>,
) -> PyResult<PolicyArrays<'a>> {
    Ok(PolicyArrays {
        admit: opt_slice("admit", admit)?,
        score: opt_slice("score", score)?,
        prefetch_start: opt_slice("prefetch_start", prefetch_start)?,
        prefetch_end: opt_slice("prefetch_end", prefetch_end)?,
        when_score: opt_slice("when_score", when_score)?,
    })
}

/// The declared defaults of every config key, as a dict (sim_params! in config.rs).
#[pyfunction]
fn default_config(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    params_dict(py, &SimParams::default())
}

/// The declaration of every config key, in order: a list of
/// (name, type, default, doc, choices) with type one of int, float, bool, str,
/// tuple[int, ...]; sequence defaults are tuples; choices is the tuple of accepted values of a
/// string key, else None.
#[pyfunction]
fn config_fields(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let defaults = default_config(py)?;
    let out = PyList::empty(py);
    for f in PARAM_FIELDS {
        let mut default = defaults.get_item(f.name)?.ok_or_else(|| {
            PyValueError::new_err(format!("no default for config key '{}'", f.name))
        })?;
        if let Ok(list) = default.downcast::<PyList>() {
            default = list.to_tuple().into_any();
        }
        let doc = f.doc.lines().map(str::trim).collect::<Vec<_>>().join(" ");
        let choices = if f.choices.is_empty() {
            py.None().into_bound(py)
        } else {
            PyTuple::new(py, f.choices)?.into_any()
        };
        out.append((f.name, f.py_type, default, doc.trim(), choices))?;
    }
    Ok(out)
}

/// Capacity in segments that a config dict gives (after validation).
#[pyfunction]
#[pyo3(signature = (config=None))]
fn capacity_segments(config: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
    Ok(config_from(config)?.capacity())
}

/// Simulate the flash cache over the canonical table's columns.
///
/// Arrays: time f64, key u64, offset u64, size u64, op u8 (C-contiguous; borrowed, not
/// copied); per-access policy arrays admit u8, score f64, prefetch_start/prefetch_end i64
/// (inclusive segment indices), when_score f64. Partitioned mode (all four or none):
/// `streams` k, `stream` u32 per access, `bounds` u64 (interval starts), `shares` f64
/// (intervals x k, flattened row-major); see sim/src/flash.rs. Returns
/// {"metrics": {...}, "series": {"time", "dt_util", "write_rate_mbps", "warmup"}, "info": {...}};
/// partitioned, info also has "streams", "stream_gets", "stream_hits",
/// "stream_admitted_segments", "stream_evictions" (arrays of k), "quotas" ((intervals, k)
/// segments), "resize_evictions" and "fallbacks".
#[pyfunction]
#[pyo3(signature = (time, key, offset, size, op, config=None, *, admit=None, score=None,
                    prefetch_start=None, prefetch_end=None, when_score=None, stream=None,
                    bounds=None, shares=None, streams=None))]
#[allow(clippy::too_many_arguments)]
fn simulate<'py>(
    py: Python<'py>,
    time: PyReadonlyArray1<'py, f64>,
    key: PyReadonlyArray1<'py, u64>,
    offset: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    op: PyReadonlyArray1<'py, u8>,
    config: Option<&Bound<'py, PyDict>>,
    admit: Option<PyReadonlyArray1<'py, u8>>,
    score: Option<PyReadonlyArray1<'py, f64>>,
    prefetch_start: Option<PyReadonlyArray1<'py, i64>>,
    prefetch_end: Option<PyReadonlyArray1<'py, i64>>,
    when_score: Option<PyReadonlyArray1<'py, f64>>,
    stream: Option<PyReadonlyArray1<'py, u32>>,
    bounds: Option<PyReadonlyArray1<'py, u64>>,
    shares: Option<PyReadonlyArray1<'py, f64>>,
    streams: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config_from(config)?;
    let trace = trace_of(&time, &key, &offset, &size, &op)?;
    let arrays = policy_arrays(&admit, &score, &prefetch_start, &prefetch_end, &when_score)?;
    let part = match (&stream, &bounds, &shares, streams) {
        (None, None, None, None) => None,
        (Some(st), Some(b), Some(sh), Some(k)) => Some(flash::StreamPartition {
            streams: u32::try_from(k).ok().filter(|&k| k >= 1).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "'streams' must be a number of streams in 1..2^32, got {k}"
                ))
            })?,
            stream: slice("stream", st)?,
            bounds: slice("bounds", b)?,
            shares: slice("shares", sh)?,
        }),
        _ => {
            let missing: Vec<&str> = [
                ("stream", stream.is_none()),
                ("bounds", bounds.is_none()),
                ("shares", shares.is_none()),
                ("streams", streams.is_none()),
            ]
            .iter()
            .filter(|(_, m)| *m)
            .map(|(name, _)| *name)
            .collect();
            return Err(PyValueError::new_err(format!(
                "partitioned mode needs 'stream', 'bounds', 'shares' and 'streams' together; \
                 missing: {}",
                missing.join(", ")
            )));
        }
    };
    let r = py
        .allow_threads(|| flash::simulate_partitioned(&trace, &arrays, &cfg, part.as_ref()))
        .map_err(value_error)?;
    result_dict(py, r)
}

/// The result of a flash-cache run as the Python dict `simulate` returns.
fn result_dict(py: Python<'_>, r: flash::FlashResult) -> PyResult<Bound<'_, PyDict>> {
    let m = &r.metrics;
    let metrics = fields_dict!(py, m; peak_dt_util, mean_dt_util, p50_dt_util, p90_dt_util,
        p99_dt_util, peak_dt_util_with_puts, mean_dt_util_with_puts, p50_dt_util_with_puts,
        p90_dt_util_with_puts, p99_dt_util_with_puts, flash_write_rate_mbps,
        flash_write_rate_mibps, dwpd, io_hit_ratio, byte_hit_ratio, segment_hit_ratio,
        service_time_saved_ratio, iops_saved_ratio, avg_eviction_age_s, backend_ios,
        backend_bytes, admitted_segments, prefetched_segments, accesses, wall_s);
    let s = r.series;
    let series = fields_dict!(py, s; ;
        "time" => PyArray1::from_vec(py, s.time),
        "dt_util" => PyArray1::from_vec(py, s.dt_util),
        "dt_util_with_puts" => PyArray1::from_vec(py, s.dt_util_with_puts),
        "write_rate_mbps" => PyArray1::from_vec(py, s.write_rate_mbps),
        "warmup" => PyArray1::from_vec(py, s.warmup));
    let i = &r.info;
    let info = fields_dict!(py, i; capacity_segments, segments_per_block, get_accesses,
        put_accesses, hits, evictions, trace_seconds, windows, measured_windows,
        rejectx_history, peak_cached_blocks);
    if let Some(st) = r.info.streams {
        let k = st.streams as usize;
        let rows = st.quotas.len() / k.max(1);
        info.set_item("streams", st.streams)?;
        info.set_item("stream_gets", PyArray1::from_vec(py, st.gets))?;
        info.set_item("stream_hits", PyArray1::from_vec(py, st.hits))?;
        info.set_item(
            "stream_admitted_segments",
            PyArray1::from_vec(py, st.admitted_segments),
        )?;
        info.set_item("stream_evictions", PyArray1::from_vec(py, st.evictions))?;
        info.set_item(
            "quotas",
            PyArray1::from_vec(py, st.quotas).reshape([rows, k])?,
        )?;
        info.set_item("resize_evictions", st.resize_evictions)?;
        info.set_item("fallbacks", st.fallbacks)?;
    }
    Ok(fields_dict!(py, r; ; "metrics" => metrics, "series" => series, "info" => info))
}

/// A policy .so through the one loader ([`so_policy::load_verified`]): `sha256` and
/// `size_bytes` are its manifest's (flashml.compiler.loader reads and checks the manifest);
/// without them only with `unverified`.
fn load_policy(
    policy: &std::path::Path,
    sha256: Option<String>,
    size_bytes: Option<u64>,
    unverified: bool,
) -> PyResult<PolicyLib> {
    let what = policy.display().to_string();
    let expect =
        Expected::from_parts(&what, sha256, size_bytes, unverified).map_err(value_error)?;
    PolicyLib::load(policy, expect.as_ref()).map_err(value_error)
}

/// Simulate the flash cache with a compiled policy .so (compiler/) as admission + prefetch:
/// features computed online from the trace (time, key, offset, size, op, namespace u32,
/// user u32), the .so called on each miss. The ABI version and contract hash are checked
/// (ValueError otherwise). Thresholds default to the .so's own; `config`'s admission and
/// prefetch keys are ignored. `get_ops`: op codes counted as GETs by the features.
/// Returns the same dict as `simulate`.
#[pyfunction]
#[pyo3(signature = (time, key, offset, size, op, namespace, user, policy, config=None, *,
                    threshold=None, when_threshold=None, get_ops=None, sha256=None,
                    size_bytes=None, unverified=false))]
#[allow(clippy::too_many_arguments)]
fn simulate_policy<'py>(
    py: Python<'py>,
    time: PyReadonlyArray1<'py, f64>,
    key: PyReadonlyArray1<'py, u64>,
    offset: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    op: PyReadonlyArray1<'py, u8>,
    namespace: PyReadonlyArray1<'py, u32>,
    user: PyReadonlyArray1<'py, u32>,
    policy: std::path::PathBuf,
    config: Option<&Bound<'py, PyDict>>,
    threshold: Option<f64>,
    when_threshold: Option<f64>,
    get_ops: Option<Vec<u8>>,
    sha256: Option<String>,
    size_bytes: Option<u64>,
    unverified: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config_from(config)?;
    let trace = trace_of(&time, &key, &offset, &size, &op)?;
    let cols = FeatureColumns {
        namespace: slice("namespace", &namespace)?,
        user: slice("user", &user)?,
    };
    let lib = load_policy(&policy, sha256, size_bytes, unverified)?;
    let overrides = Overrides {
        admit_threshold: threshold,
        when_threshold,
    };
    let get_ops = get_ops.unwrap_or_else(|| GET_OPS.to_vec());
    let r = py
        .allow_threads(|| so_policy::simulate(&trace, cols, &cfg, &lib, overrides, &get_ops))
        .map_err(value_error)?;
    result_dict(py, r)
}

/// What a policy .so reports about itself (after the ABI and contract checks):
/// {"abi_version", "contract_hash", "admit_threshold", "when_threshold", "peak_hours", "peak_bonus",
/// "target_write_rate_mbps", "eviction_age_s"}.
#[pyfunction]
#[pyo3(signature = (policy, *, sha256=None, size_bytes=None, unverified=false))]
fn policy_info(
    py: Python<'_>,
    policy: std::path::PathBuf,
    sha256: Option<String>,
    size_bytes: Option<u64>,
    unverified: bool,
) -> PyResult<Bound<'_, PyDict>> {
    let lib = load_policy(&policy, sha256, size_bytes, unverified)?;
    Ok(
        fields_dict!(py, lib; abi_version, admit_threshold, when_threshold,
        target_write_rate_mbps, eviction_age_s; "contract_hash" => &lib.contract_hash,
        "peak_hours" => (0..24u32).filter(|h| lib.peak.hours >> h & 1 == 1).collect::<Vec<u32>>(),
        "peak_bonus" => lib.peak.bonus),
    )
}

/// The admission features of every access computed online in Rust (the simulator's .so
/// path), as a (rows, NUM_FEATURES) float64 array; equal to features/online.py's matrix.
/// `segment_bytes` is required (flashml.config is the one place that knows it).
#[pyfunction]
#[pyo3(signature = (time, key, offset, size, op, namespace, user, *,
                    segment_bytes, get_ops=None))]
#[allow(clippy::too_many_arguments)]
fn online_features<'py>(
    py: Python<'py>,
    time: PyReadonlyArray1<'py, f64>,
    key: PyReadonlyArray1<'py, u64>,
    offset: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    op: PyReadonlyArray1<'py, u8>,
    namespace: PyReadonlyArray1<'py, u32>,
    user: PyReadonlyArray1<'py, u32>,
    segment_bytes: u64,
    get_ops: Option<Vec<u8>>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let trace = trace_of(&time, &key, &offset, &size, &op)?;
    let cols = FeatureColumns {
        namespace: slice("namespace", &namespace)?,
        user: slice("user", &user)?,
    };
    let n = trace.time.len();
    for (name, len) in [
        ("key", trace.key.len()),
        ("offset", trace.offset.len()),
        ("size", trace.size.len()),
        ("op", trace.op.len()),
        ("namespace", cols.namespace.len()),
        ("user", cols.user.len()),
    ] {
        if len != n {
            return Err(PyValueError::new_err(format!(
                "column '{name}' has {len} rows but 'time' has {n}"
            )));
        }
    }
    if segment_bytes == 0 {
        return Err(PyValueError::new_err("segment_bytes must be > 0"));
    }
    if let Some(i) = (0..n).find(|&i| trace.size[i] == 0) {
        return Err(PyValueError::new_err(format!("access {i}: size is 0")));
    }
    let get_ops = get_ops.unwrap_or_else(|| GET_OPS.to_vec());
    let flat = py.allow_threads(|| online::feature_matrix(trace, cols, segment_bytes, &get_ops));
    PyArray1::from_vec(py, flat).reshape([n, NUM_FEATURES])
}

/// Simulate an object cache (libCacheSim's model) over (key u64, size u64) requests.
/// `policy`: lru | fifo | belady (MIN: evict the farthest next request); `unit`: bytes | objects. Returns
/// {"miss_ratio", "byte_miss_ratio", "requests", "hits", "evictions", "wall_s"}.
#[pyfunction]
#[pyo3(signature = (key, size, capacity, policy="lru", unit="bytes"))]
fn simulate_objects<'py>(
    py: Python<'py>,
    key: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    capacity: i64,
    policy: &str,
    unit: &str,
) -> PyResult<Bound<'py, PyDict>> {
    if capacity <= 0 {
        return Err(PyValueError::new_err(format!(
            "capacity must be > 0, got {capacity}"
        )));
    }
    let unit = capacity_unit(unit)?;
    let belady = policy.eq_ignore_ascii_case("belady");
    let cfg = ObjectConfig {
        eviction: if belady {
            EvictionKind::Lru // unused by simulate_belady
        } else {
            EvictionKind::parse(policy)
                .map_err(|e| PyValueError::new_err(format!("{}, belady", e.0)))?
        },
        capacity: capacity as u64,
        unit,
    };
    let keys = slice("key", &key)?;
    let sizes = slice("size", &size)?;
    let r = py
        .allow_threads(|| {
            if belady {
                mat::simulate_belady(keys, sizes, &cfg)
            } else {
                objects::simulate_objects(keys, sizes, &cfg)
            }
        })
        .map_err(value_error)?;
    Ok(fields_dict!(py, r; miss_ratio, byte_miss_ratio, requests, hits, evictions, wall_s))
}

fn capacity_unit(unit: &str) -> PyResult<CapacityUnit> {
    match unit.to_ascii_lowercase().as_str() {
        "bytes" => Ok(CapacityUnit::Bytes),
        "objects" => Ok(CapacityUnit::Objects),
        other => Err(PyValueError::new_err(format!(
            "unknown capacity unit {other:?}; expected bytes or objects"
        ))),
    }
}

/// Object-mode MAT (learned eviction at the LRU tail, sim/src/mat.rs) over (key u64, size u64)
/// requests. `predictor`: "none" (evict the LRU tail: exactly LRU, zero predictions),
/// "oracle" (the true next access), or the path of an eviction policy .so
/// (`flashml_evict_predict`, sim/src/so_evict.rs). `k`, `max_candidates`, `delta`,
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
fn simulate_objects_mat<'py>(
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

/// Object-mode LRB on MAT's parts (sim/src/lrb.rs): each eviction samples `sample_size`
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
fn simulate_objects_lrb<'py>(
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
        None => crate::lrb_features::MEMORY_WINDOW,
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
/// A path is loaded through [`so_policy::load_verified`] against `sha256` and `size_bytes`
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

/// MAT's parameters: each knob given, else the .so's exported one, else the default (2, 10,
/// 1e-4, the number of cached units at the first decision, the contract's window).
fn mat_params(
    so: Option<&EvictLib>,
    knobs: MatKnobs,
    collect_samples: bool,
    record_victims: bool,
) -> PyResult<MatParams> {
    let max_candidates = match knobs
        .max_candidates
        .or(so.and_then(|l| l.max_candidates.map(i64::from)))
    {
        None => 10,
        Some(l) if (1..=u32::MAX as i64).contains(&l) => l as u32,
        Some(l) => {
            return Err(PyValueError::new_err(format!(
                "max_candidates must be >= 1, got {l}"
            )))
        }
    };
    let memory_window = match knobs.memory_window.or(so.and_then(|l| l.memory_window)) {
        None => crate::lrb_features::MEMORY_WINDOW,
        Some(w) if w > 0 => w as u64,
        Some(w) => {
            return Err(PyValueError::new_err(format!(
                "memory_window must be > 0, got {w}"
            )))
        }
    };
    let controller = match (knobs.controller, so.and_then(|l| l.controller)) {
        (Some(name), _) => Controller::from_name(name).map_err(value_error)?,
        (None, Some(code)) => Controller::from_code(code.into()).map_err(value_error)?,
        (None, None) => Controller::Sign,
    };
    let reuse_predictions = knobs
        .reuse_predictions
        .or(so.and_then(|l| l.reuse_predictions.map(|v| v != 0)))
        .unwrap_or(false);
    Ok(MatParams {
        controller,
        reuse_predictions,
        k: knobs.k.or(so.and_then(|l| l.k)).unwrap_or(2.0),
        max_candidates,
        delta: knobs.delta.or(so.and_then(|l| l.delta)).unwrap_or(1e-4),
        initial_threshold: knobs
            .initial_threshold
            .or(so.and_then(|l| l.initial_threshold)),
        memory_window,
        collect_samples,
        record_victims,
    })
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
/// sim/src/flash_mat.rs): the arguments of `simulate` (no partitioned mode) plus MAT's, as
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
fn simulate_mat_flash<'py>(
    py: Python<'py>,
    time: PyReadonlyArray1<'py, f64>,
    key: PyReadonlyArray1<'py, u64>,
    offset: PyReadonlyArray1<'py, u64>,
    size: PyReadonlyArray1<'py, u64>,
    op: PyReadonlyArray1<'py, u8>,
    config: Option<&Bound<'py, PyDict>>,
    admit: Option<PyReadonlyArray1<'py, u8>>,
    score: Option<PyReadonlyArray1<'py, f64>>,
    prefetch_start: Option<PyReadonlyArray1<'py, i64>>,
    prefetch_end: Option<PyReadonlyArray1<'py, i64>>,
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
fn eviction_features<'py>(
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
    let w = memory_window.unwrap_or(crate::lrb_features::MEMORY_WINDOW);
    crate::lrb_features::check_memory_window(w).map_err(value_error)?;
    let trace = DenseTrace::new(keys).map_err(value_error)?;
    let mut ids = crate::hash::new_map();
    for (i, &k) in keys.iter().enumerate() {
        ids.entry(k).or_insert(trace.ids[i]);
    }
    let mut order: Vec<usize> = (0..queries.len()).collect();
    order.sort_by_key(|&q| queries[q].1);
    let mut meta = crate::lrb_features::MetaStore::new(trace.objects, w);
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

// --- MLCache: stack distances and partitioned caching (sim/src/reuse.rs,
// sim/src/partition.rs) ---------------------------------------------------------------------

/// The (keys, streams, writes) arrays of a multi-stream page trace, checked.
fn stream_trace<'a>(
    keys: &'a PyReadonlyArray1<'_, u64>,
    streams: &'a PyReadonlyArray1<'_, u32>,
    writes: &'a PyReadonlyArray1<'_, bool>,
    n_streams: i64,
) -> PyResult<partition::StreamTrace<'a>> {
    if n_streams < 1 {
        return Err(PyValueError::new_err(format!(
            "n_streams must be >= 1, got {n_streams}"
        )));
    }
    let t = partition::StreamTrace {
        keys: slice("keys", keys)?,
        streams: slice("streams", streams)?,
        writes: slice("writes", writes)?,
        n_streams: n_streams as usize,
    };
    t.validate().map_err(value_error)?;
    Ok(t)
}

fn partition_config(
    capacity: i64,
    interval: i64,
    steps: i64,
    writes_only: bool,
    objective: &str,
) -> PyResult<partition::PartitionConfig> {
    let pos = |name: &str, v: i64| {
        if v <= 0 {
            Err(PyValueError::new_err(format!(
                "{name} must be > 0, got {v}"
            )))
        } else {
            Ok(v)
        }
    };
    let cfg = partition::PartitionConfig {
        capacity: pos("capacity", capacity)? as u64,
        interval: pos("interval", interval)? as usize,
        steps: pos("steps", steps)? as usize,
        writes_only,
        objective: partition::Objective::parse(objective).map_err(value_error)?,
    };
    cfg.validate().map_err(value_error)?;
    Ok(cfg)
}

/// Exact LRU stack distances (1-based; `COLD_DISTANCE` = 2^64 - 1 for a key's first request):
/// over the whole sequence, or per stream when `streams` (u32, each < n_streams) is given.
#[pyfunction]
#[pyo3(signature = (keys, streams=None, n_streams=None))]
fn stack_distances<'py>(
    py: Python<'py>,
    keys: PyReadonlyArray1<'py, u64>,
    streams: Option<PyReadonlyArray1<'py, u32>>,
    n_streams: Option<i64>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let k = slice("keys", &keys)?;
    let d = match &streams {
        None => py.allow_threads(|| reuse::stack_distances(k)),
        Some(s) => {
            let s = slice("streams", s)?;
            if s.len() != k.len() {
                return Err(PyValueError::new_err(format!(
                    "'keys' has {} elements but 'streams' has {}",
                    k.len(),
                    s.len()
                )));
            }
            let n = match n_streams {
                Some(n) => n,
                None => s.iter().max().map_or(1, |&m| m as i64 + 1),
            };
            if n < 1 || s.iter().any(|&x| x as i64 >= n) {
                return Err(PyValueError::new_err(format!(
                    "every stream must be in 0..n_streams = {n}"
                )));
            }
            py.allow_threads(|| reuse::stream_stack_distances(k, s, n as usize))
        }
    };
    Ok(PyArray1::from_vec(py, d))
}

/// Per-interval, per-stream hit curves of the requests the cache sees, on the grid of
/// `steps + 1` capacities floor(j * capacity / steps), j = 0..steps, and the monitor's
/// histograms (the paper's A_i: distances in `steps` equal buckets of the capacity).
/// Returns {"curves": (intervals, n_streams, steps + 1) u64, "histograms": (intervals,
/// n_streams, steps) u64, "grid": capacities}.
#[pyfunction]
#[pyo3(signature = (keys, streams, writes, n_streams, capacity, interval, steps=10,
                    writes_only=false, objective="hits"))]
#[allow(clippy::too_many_arguments)]
fn partition_curves<'py>(
    py: Python<'py>,
    keys: PyReadonlyArray1<'py, u64>,
    streams: PyReadonlyArray1<'py, u32>,
    writes: PyReadonlyArray1<'py, bool>,
    n_streams: i64,
    capacity: i64,
    interval: i64,
    steps: i64,
    writes_only: bool,
    objective: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let trace = stream_trace(&keys, &streams, &writes, n_streams)?;
    let cfg = partition_config(capacity, interval, steps, writes_only, objective)?;
    let k = trace.n_streams;
    let (curves, hist, n_iv) = py.allow_threads(|| {
        let c = partition::CachedRequests::new(&trace, &cfg);
        (
            c.curves(k, &cfg),
            c.histograms(k, &cfg),
            c.n_intervals(&cfg),
        )
    });
    let t = cfg.steps;
    let grid: Vec<u64> = (0..=t)
        .map(|j| reuse::step_capacity(j, t, cfg.capacity))
        .collect();
    let d = PyDict::new(py);
    d.set_item(
        "curves",
        PyArray1::from_vec(py, curves).reshape([n_iv, k, t + 1])?,
    )?;
    d.set_item(
        "histograms",
        PyArray1::from_vec(py, hist).reshape([n_iv, k, t])?,
    )?;
    d.set_item("grid", PyArray1::from_vec(py, grid))?;
    Ok(d)
}

/// The split of `steps` equal steps that maximises total hits, by dynamic programming:
/// `curves` is (n_streams, steps + 1) u64, curves[i, s] = hits of stream i with s steps.
/// Returns (steps per stream, hits).
#[pyfunction]
fn best_split(curves: numpy::PyReadonlyArray2<'_, u64>) -> PyResult<(Vec<usize>, u64)> {
    let a = curves.as_array();
    let w = a.dim().1;
    if w == 0 {
        return Err(PyValueError::new_err(
            "curves need at least one column (0 steps)",
        ));
    }
    let rows: Vec<Vec<u64>> = a.outer_iter().map(|r| r.to_vec()).collect();
    let refs: Vec<&[u64]> = rows.iter().map(|r| r.as_slice()).collect();
    Ok(partition::best_split(&refs, w - 1))
}

/// Partitioned page cache across streams (sim/src/partition.rs): `policy` one of shared,
/// even, static_optimal, discrete_optimal, mlcache (`shares`: (intervals, n_streams) f64, a
/// share of the capacity per stream per interval). Returns the counts and ratios (hit,
/// read, write), per-stream requests/hits, "allocations" (intervals, n_streams) pages,
/// "interval_hits", evictions, resize_evictions, fallbacks, wall_s.
#[pyfunction]
#[pyo3(signature = (keys, streams, writes, n_streams, capacity, interval, policy, steps=10,
                    writes_only=false, objective="hits", shares=None))]
#[allow(clippy::too_many_arguments)]
fn simulate_partitioned<'py>(
    py: Python<'py>,
    keys: PyReadonlyArray1<'py, u64>,
    streams: PyReadonlyArray1<'py, u32>,
    writes: PyReadonlyArray1<'py, bool>,
    n_streams: i64,
    capacity: i64,
    interval: i64,
    policy: &str,
    steps: i64,
    writes_only: bool,
    objective: &str,
    shares: Option<numpy::PyReadonlyArray2<'py, f64>>,
) -> PyResult<Bound<'py, PyDict>> {
    let trace = stream_trace(&keys, &streams, &writes, n_streams)?;
    let cfg = partition_config(capacity, interval, steps, writes_only, objective)?;
    let kind = partition::PartitionKind::parse(policy).map_err(value_error)?;
    let k = trace.n_streams;
    let shares: Option<Vec<f64>> = match &shares {
        None => None,
        Some(a) => {
            let a = a.as_array();
            if a.dim().1 != k {
                return Err(PyValueError::new_err(format!(
                    "shares has {} columns, expected one per stream ({k})",
                    a.dim().1
                )));
            }
            Some(a.iter().copied().collect())
        }
    };
    let r = py
        .allow_threads(|| partition::simulate_partitioned(kind, &trace, &cfg, shares.as_deref()))
        .map_err(value_error)?;
    let rows = if r.allocations.is_empty() {
        0
    } else {
        r.intervals as usize
    };
    let d = fields_dict!(py, r; requests, hits, reads, read_hits, writes, write_hits,
        hit_ratio, read_hit_ratio, write_hit_ratio, cached_requests, intervals, evictions,
        resize_evictions, fallbacks, wall_s);
    d.set_item("stream_requests", PyArray1::from_vec(py, r.stream_requests))?;
    d.set_item("stream_hits", PyArray1::from_vec(py, r.stream_hits))?;
    d.set_item("interval_hits", PyArray1::from_vec(py, r.interval_hits))?;
    d.set_item(
        "allocations",
        PyArray1::from_vec(py, r.allocations).reshape([rows, k])?,
    )?;
    Ok(d)
}

/// A block trace over the four arrays of the block-mode functions (contiguous, or an error).
fn block_trace<'a>(
    times: &'a PyReadonlyArray1<'_, f64>,
    pages: &'a PyReadonlyArray1<'_, u64>,
    lens: &'a PyReadonlyArray1<'_, u32>,
    writes: &'a PyReadonlyArray1<'_, bool>,
) -> PyResult<blocks::BlockTrace<'a>> {
    Ok(blocks::BlockTrace {
        times: times.as_slice()?,
        pages: pages.as_slice()?,
        lens: lens.as_slice()?,
        writes: writes.as_slice()?,
    })
}

/// The RAM cache's pass of block mode (`blocks::ram_served`): for each block access, whether
/// the LRU RAM cache of `ram_pct`% of `cache_bytes` in front of the flash cache serves it
/// (empty for ram_pct 0), and the seconds the pass took: (bool array, float), to give
/// `simulate_blocks` for every policy run on the same trace and sizes.
#[pyfunction]
#[pyo3(signature = (times, pages, lens, writes, cache_bytes, *, page_bytes=4096, ram_pct=0.0))]
#[allow(clippy::too_many_arguments)]
fn block_ram_served<'py>(
    py: Python<'py>,
    times: PyReadonlyArray1<'py, f64>,
    pages: PyReadonlyArray1<'py, u64>,
    lens: PyReadonlyArray1<'py, u32>,
    writes: PyReadonlyArray1<'py, bool>,
    cache_bytes: u64,
    page_bytes: u64,
    ram_pct: f64,
) -> PyResult<(Bound<'py, PyArray1<bool>>, f64)> {
    let cfg = blocks::BlockConfig {
        cache_bytes,
        page_bytes,
        ram_pct,
        ..blocks::BlockConfig::default()
    };
    // (only the knobs the pass reads: the container knobs are the policies')
    cfg.validate_ram().map_err(value_error)?;
    let trace = block_trace(&times, &pages, &lens, &writes)?;
    trace.validate().map_err(value_error)?;
    let (served, secs) = py.allow_threads(|| {
        let t0 = std::time::Instant::now();
        let s = blocks::ram_served(&trace, cfg.ram_pages());
        (s, t0.elapsed().as_secs_f64())
    });
    Ok((PyArray1::from_vec(py, served), secs))
}

/// Block mode (Pannier's setting; sim/src/blocks.rs): replay a block-level trace (request i at
/// `times[i]` s covers blocks `pages[i] .. pages[i] + lens[i]`, a write iff `writes[i]`)
/// through one policy: lru, s2lru, mq, belady (per block, over an FTL with `op`
/// over-provisioning), lru_plus, s2lru_plus or pannier (containers of `container_bytes`,
/// each a whole number of `erase_bytes` erase blocks; default: one).
/// `tire_epbpd`: gate insertions with TIRE at that many erasures per erase block per day.
/// `ram_pct`: the RAM cache in front, % of the cache; `ram_served`, `ram_served_s`: its pass
/// as `block_ram_served` returned it for the same trace, cache_bytes, page_bytes and ram_pct
/// (shared by the policies run on them; None: computed here).
/// Returns the counts, ratios and flash figures, and the quanta (start_s, credit, erasures,
/// blocked) as arrays.
#[pyfunction]
#[pyo3(signature = (times, pages, lens, writes, policy, cache_bytes, *, page_bytes=4096,
                    container_bytes=2_097_152, erase_bytes=None, op=0.07, tire_epbpd=None, tire_slack=4.0,
                    tire_steps=3, quantum_s=300.0, promotion_pct=5.0, sample_pct=3.0,
                    lifetime_pct=99.0, ghost_factor=2.0, survival=true, aging=true,
                    invalidation_aware=true, packing=true, fixed_lifetime=None,
                    open_in_cache=false, ram_pct=0.0, ram_served=None, ram_served_s=0.0))]
#[allow(clippy::too_many_arguments)]
fn simulate_blocks<'py>(
    py: Python<'py>,
    times: PyReadonlyArray1<'py, f64>,
    pages: PyReadonlyArray1<'py, u64>,
    lens: PyReadonlyArray1<'py, u32>,
    writes: PyReadonlyArray1<'py, bool>,
    policy: &str,
    cache_bytes: u64,
    page_bytes: u64,
    container_bytes: u64,
    erase_bytes: Option<u64>,
    op: f64,
    tire_epbpd: Option<f64>,
    tire_slack: f64,
    tire_steps: u32,
    quantum_s: f64,
    promotion_pct: f64,
    sample_pct: f64,
    lifetime_pct: f64,
    ghost_factor: f64,
    survival: bool,
    aging: bool,
    invalidation_aware: bool,
    packing: bool,
    fixed_lifetime: Option<u64>,
    open_in_cache: bool,
    ram_pct: f64,
    ram_served: Option<PyReadonlyArray1<'py, bool>>,
    ram_served_s: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = blocks::BlockPolicy::parse(policy).map_err(value_error)?;
    let cfg = blocks::BlockConfig {
        cache_bytes,
        page_bytes,
        container_bytes,
        erase_bytes,
        op,
        tire_epbpd,
        tire_slack,
        tire_steps,
        quantum_s,
        promotion_pct,
        sample_pct,
        lifetime_pct,
        ghost_factor,
        survival,
        aging,
        invalidation_aware,
        packing,
        fixed_lifetime,
        open_in_cache,
        ram_pct,
    };
    let trace = block_trace(&times, &pages, &lens, &writes)?;
    let ram = match &ram_served {
        Some(a) => Some((a.as_slice()?, ram_served_s)),
        None => None,
    };
    let r = py
        .allow_threads(|| blocks::simulate_blocks_served(kind, &trace, &cfg, ram))
        .map_err(value_error)?;
    let d = fields_dict!(py, r; tire, requests, reads, read_hits, writes, write_hits,
        read_hit_ratio, write_hit_ratio, page_reads, page_read_hits, ram_read_hits, page_writes,
        inserted_pages, rejected_pages, bypassed_pages, copied_forward_pages, evictions,
        flash_read_bytes, host_write_bytes, internal_write_bytes, flash_write_bytes, erasures,
        erase_blocks, fue, write_amplification, days, dwpd, epbpd, quota, final_credit,
        lifetime, wall_s, requests_per_s, blocks_per_s; "policy" => r.policy.clone());
    let q = &r.quanta;
    d.set_item(
        "quanta_start_s",
        PyArray1::from_vec(py, q.iter().map(|x| x.start_s).collect()),
    )?;
    d.set_item(
        "quanta_credit",
        PyArray1::from_vec(py, q.iter().map(|x| x.credit).collect()),
    )?;
    d.set_item(
        "quanta_erasures",
        PyArray1::from_vec(py, q.iter().map(|x| x.erasures).collect()),
    )?;
    d.set_item(
        "quanta_blocked",
        PyArray1::from_vec(py, q.iter().map(|x| x.blocked).collect()),
    )?;
    Ok(d)
}

// --- KML's offline twin (sim/src/readahead.rs) ----------------------------------

/// A readahead size from Python: an int > 0 (KiB).
fn ra_kib_of(ra_kib: i64) -> PyResult<u64> {
    if ra_kib <= 0 {
        return Err(PyValueError::new_err(format!(
            "ra_kib must be > 0, got {ra_kib}"
        )));
    }
    Ok(ra_kib as u64)
}

/// A page cache with Linux-like mmap readahead over a throttled device, closed loop, run one
/// feature window at a time (sim/src/readahead.rs describes the model).
///
/// `ReadaheadSim(files u32, pages u64, npages u32, writes bool, *, cache_pages, riops=2000,
/// rbps=64 MiB/s, cpu_us=5, page_bytes=4096, window_ms=the contract's)`: the arrays are copied
/// once (the simulation keeps its trace across windows). `run_window(ra_kib)` runs the next
/// window at that readahead and returns its features and counters; `run_fixed(ra_kib)` resets
/// and runs the whole trace at one size; `reset()` starts over.
#[pyclass(name = "ReadaheadSim", module = "flashml_sim")]
struct PyReadaheadSim {
    sim: readahead::ReadaheadSim,
}

#[pymethods]
impl PyReadaheadSim {
    #[new]
    #[pyo3(signature = (files, pages, npages, writes, *, cache_pages, riops=2000.0,
                        rbps=67108864.0, cpu_us=5.0, page_bytes=4096,
                        window_ms=crate::contract::READAHEAD_WINDOW_MS as i64))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        files: PyReadonlyArray1<'_, u32>,
        pages: PyReadonlyArray1<'_, u64>,
        npages: PyReadonlyArray1<'_, u32>,
        writes: PyReadonlyArray1<'_, bool>,
        cache_pages: i64,
        riops: f64,
        rbps: f64,
        cpu_us: f64,
        page_bytes: i64,
        window_ms: i64,
    ) -> PyResult<Self> {
        for (name, v) in [
            ("cache_pages", cache_pages),
            ("page_bytes", page_bytes),
            ("window_ms", window_ms),
        ] {
            if v <= 0 {
                return Err(PyValueError::new_err(format!(
                    "{name} must be > 0, got {v}"
                )));
            }
        }
        let cfg = ReadaheadConfig {
            cache_pages: cache_pages as usize,
            riops,
            rbps,
            cpu_us,
            page_bytes: page_bytes as u64,
            window_ms: window_ms as u64,
        };
        cfg.validate().map_err(value_error)?;
        let trace = ReadaheadTrace::new(
            slice("files", &files)?.to_vec(),
            slice("pages", &pages)?.to_vec(),
            slice("npages", &npages)?.to_vec(),
            slice("writes", &writes)?.to_vec(),
        )
        .map_err(value_error)?;
        let sim = readahead::ReadaheadSim::new(trace, cfg).map_err(value_error)?;
        Ok(PyReadaheadSim { sim })
    }

    /// Run the next window at `ra_kib` KiB of readahead: {"window", "features" (the
    /// contract's five, in order), "empty" (no page added: a tuner keeps its readahead),
    /// "requests", "hits", "misses" (read pages), "ios", "read_bytes", "events",
    /// "write_pages", "elapsed_s", "clock_s", "done"}.
    fn run_window<'py>(&mut self, py: Python<'py>, ra_kib: i64) -> PyResult<Bound<'py, PyDict>> {
        let ra = ra_kib_of(ra_kib)?;
        let sim = &mut self.sim;
        let s = py
            .allow_threads(|| sim.run_window(ra))
            .map_err(value_error)?;
        Ok(
            fields_dict!(py, s; window, empty, requests, hits, misses, ios, read_bytes, events,
                        write_pages, done;
                        "features" => s.features.to_vec(), "elapsed_s" => s.elapsed,
                        "clock_s" => s.clock),
        )
    }

    /// The whole trace from the start (resets first) at one readahead size: {"requests",
    /// "clock_s", "ops_per_s" (requests per simulated second), "hits", "misses", "hit_ratio",
    /// "ios", "read_bytes", "events", "write_pages", "windows"}.
    fn run_fixed<'py>(&mut self, py: Python<'py>, ra_kib: i64) -> PyResult<Bound<'py, PyDict>> {
        let ra = ra_kib_of(ra_kib)?;
        let sim = &mut self.sim;
        let t = py
            .allow_threads(|| sim.run_fixed(ra))
            .map_err(value_error)?;
        Ok(
            fields_dict!(py, t; requests, ops_per_s, hits, misses, hit_ratio, ios, read_bytes,
                        events, write_pages, windows; "clock_s" => t.clock),
        )
    }

    /// Start over: empty cache, clock 0, no events.
    fn reset(&mut self) {
        self.sim.reset();
    }

    /// Requests done so far.
    #[getter]
    fn position(&self) -> usize {
        self.sim.position()
    }

    /// The simulated clock, s.
    #[getter]
    fn clock_s(&self) -> f64 {
        self.sim.clock()
    }

    /// The trace is finished.
    #[getter]
    fn done(&self) -> bool {
        self.sim.done()
    }
}

#[pymodule]
fn flashml_sim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ABI_VERSION", crate::contract::ABI_VERSION)?;
    m.add("CONTRACT_HASH", crate::contract::CONTRACT_HASH)?;
    m.add("NUM_FEATURES", crate::contract::NUM_FEATURES)?;
    m.add("FEATURE_NAMES", crate::contract::FEATURE_NAMES.to_vec())?;
    m.add("REJECTX_DITHER_SEED", crate::admission::REJECTX_DITHER_SEED)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_objects, m)?)?;
    m.add_function(wrap_pyfunction!(default_config, m)?)?;
    m.add_function(wrap_pyfunction!(config_fields, m)?)?;
    m.add_function(wrap_pyfunction!(capacity_segments, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_policy, m)?)?;
    m.add_function(wrap_pyfunction!(policy_info, m)?)?;
    m.add_function(wrap_pyfunction!(online_features, m)?)?;
    m.add("EVICT_NUM_FEATURES", EVICT_NUM_FEATURES)?;
    m.add("EVICT_CONTRACT_HASH", EVICT_CONTRACT_HASH)?;
    m.add("EVICT_FEATURE_NAMES", EVICT_FEATURE_NAMES.to_vec())?;
    m.add_function(wrap_pyfunction!(simulate_objects_mat, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_objects_lrb, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_mat_flash, m)?)?;
    m.add_function(wrap_pyfunction!(eviction_features, m)?)?;
    m.add("COLD_DISTANCE", reuse::COLD)?;
    m.add("PARTITION_POLICIES", partition::PARTITION_POLICIES.to_vec())?;
    m.add_function(wrap_pyfunction!(stack_distances, m)?)?;
    m.add_function(wrap_pyfunction!(partition_curves, m)?)?;
    m.add_function(wrap_pyfunction!(best_split, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_partitioned, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(block_ram_served, m)?)?;
    m.add_class::<PyReadaheadSim>()?;
    m.add_class::<PyForest>()?;
    Ok(())
}

/// One tree's node arrays as Treelite's accessor gives them: (is_leaf, split_feature,
/// threshold, default_left, left child, right child, leaf_value).
type TreeTuple<'py> = (
    PyReadonlyArray1<'py, bool>,
    PyReadonlyArray1<'py, u32>,
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, bool>,
    PyReadonlyArray1<'py, i32>,
    PyReadonlyArray1<'py, i32>,
    PyReadonlyArray1<'py, f64>,
);

/// `Forest(trees, n_features, base_score=0.0, sigmoid_alpha=None, cols=None)`: a tree
/// ensemble scored exactly as LightGBM scores it (forest.rs); `predict(x, threads=2,
/// vector=True)` for a C-contiguous float64 matrix whose column `cols[i]` is the model's
/// feature i (`vector=False`: the scalar walk even where the byte-vector evaluator runs).
#[pyclass(name = "Forest", module = "flashml_sim", frozen)]
struct PyForest {
    forest: forest::Forest,
}

#[pymethods]
impl PyForest {
    #[new]
    #[pyo3(signature = (trees, n_features, base_score=0.0, sigmoid_alpha=None, cols=None))]
    fn new(
        trees: Vec<TreeTuple<'_>>,
        n_features: usize,
        base_score: f64,
        sigmoid_alpha: Option<f64>,
        cols: Option<Vec<usize>>,
    ) -> PyResult<Self> {
        let parts = trees
            .iter()
            .map(|t| -> PyResult<TreeArrays<'_>> {
                Ok(TreeArrays {
                    is_leaf: slice("is_leaf", &t.0)?,
                    split_feature: slice("split_feature", &t.1)?,
                    threshold: slice("threshold", &t.2)?,
                    default_left: slice("default_left", &t.3)?,
                    left: slice("left", &t.4)?,
                    right: slice("right", &t.5)?,
                    leaf_value: slice("leaf_value", &t.6)?,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let bad = |e: forest::ForestError| PyValueError::new_err(e.0);
        let mut f =
            forest::Forest::new(&parts, n_features, base_score, sigmoid_alpha).map_err(bad)?;
        if let Some(c) = cols {
            f = f.with_columns(c).map_err(bad)?;
        }
        Ok(PyForest { forest: f })
    }

    #[pyo3(signature = (x, threads=2, vector=true))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray2<'py, f64>,
        threads: usize,
        vector: bool,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let width = x.shape()[1];
        // as_slice also takes a Fortran-ordered matrix (columns first): refused here
        let data = x
            .as_slice()
            .ok()
            .filter(|_| x.is_c_contiguous())
            .ok_or_else(|| PyValueError::new_err("x must be a C-contiguous float64 matrix"))?;
        let out = py
            .allow_threads(|| self.forest.predict(data, width, threads, vector))
            .map_err(|e| PyValueError::new_err(e.0))?;
        Ok(PyArray1::from_vec(py, out))
    }

    #[getter]
    fn num_trees(&self) -> usize {
        self.forest.num_trees()
    }

    #[getter]
    fn num_features(&self) -> usize {
        self.forest.num_features()
    }

    /// Whether predict(vector=True) runs the byte-vector evaluator here.
    #[getter]
    fn vectorised(&self) -> bool {
        self.forest.vectorised()
    }
}
