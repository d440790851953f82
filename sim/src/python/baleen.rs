//! Baleen's flash cache: the simulator's settings, flash mode, the compiled policy .so and its online features.

use super::*;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadwriteArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::core::config::{SimParams, PARAM_FIELDS};
use crate::core::contract::NUM_FEATURES;
use crate::core::solib::Expected;
use crate::flash::online_features::{self as online, FeatureColumns, GET_OPS};
use crate::flash::so_policy::{self, Overrides, PolicyLib};
use crate::flash::{self};

/// The declared defaults of every config key, as a dict (sim_params! in config.rs).
#[pyfunction]
pub(super) fn default_config(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    params_dict(py, &SimParams::default())
}

/// The declaration of every config key, in order: a list of
/// (name, type, default, doc, choices) with type one of int, float, bool, str,
/// tuple[int, ...]; sequence defaults are tuples; choices is the tuple of accepted values of a
/// string key, else None.
#[pyfunction]
pub(super) fn config_fields(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
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
pub(super) fn capacity_segments(config: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
    Ok(config_from(config)?.capacity())
}

/// Simulate the flash cache over the canonical table's columns.
///
/// Arrays: time f64, key u64, offset u64, size u64, op u8 (C-contiguous; borrowed, not
/// copied); per-access policy arrays admit u8, score f64, prefetch_start/prefetch_end i16
/// (inclusive segment indices), when_score f64. Partitioned mode (all four or none):
/// `streams` k, `stream` u32 per access, `bounds` u64 (interval starts), `shares` f64
/// (intervals x k, flattened row-major); see sim/src/flash/mod.rs. Returns
/// {"metrics": {...}, "series": {"time", "dt_util", "write_rate_mbps", "warmup"}, "info": {...}};
/// partitioned, info also has "streams", "stream_gets", "stream_hits",
/// "stream_admitted_segments", "stream_evictions" (arrays of k), "quotas" ((intervals, k)
/// segments), "resize_evictions" and "fallbacks".
#[pyfunction]
#[pyo3(signature = (time, key, offset, size, op, config=None, *, admit=None, score=None,
                    prefetch_start=None, prefetch_end=None, when_score=None, stream=None,
                    bounds=None, shares=None, streams=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn simulate<'py>(
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
pub(super) fn result_dict(py: Python<'_>, r: flash::FlashResult) -> PyResult<Bound<'_, PyDict>> {
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

/// A policy .so through the one loader ([`load_verified`](crate::core::solib::load_verified)): `sha256` and
/// `size_bytes` are its manifest's (flashml.compiler.loader reads and checks the manifest);
/// without them only with `unverified`.
pub(super) fn load_policy(
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
pub(super) fn simulate_policy<'py>(
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
pub(super) fn policy_info(
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
/// With `counts` (contract indices: the count features) only those columns, as a
/// (len(counts), rows) uint32 array, without the float64 matrix of every feature
/// (ValueError on a value that is no integer in u32's range); with `out` too (a C-contiguous
/// uint32 array of that shape, e.g. a memory-mapped file) written into it, and None
/// returned. `segment_bytes` is required (flashml.config is the one place that knows it).
#[pyfunction]
#[pyo3(signature = (time, key, offset, size, op, namespace, user, *,
                    segment_bytes, get_ops=None, counts=None, out=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn online_features<'py>(
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
    counts: Option<Vec<usize>>,
    out: Option<PyReadwriteArray2<'py, u32>>,
) -> PyResult<Bound<'py, PyAny>> {
    let trace = trace_of(&time, &key, &offset, &size, &op)?;
    let cols = FeatureColumns {
        namespace: slice("namespace", &namespace)?,
        user: slice("user", &user)?,
    };
    let n = trace.time.len();
    if let Some(msg) = trace.mismatched_column() {
        return Err(PyValueError::new_err(msg));
    }
    for (name, len) in [
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
    let Some(features) = counts else {
        let flat =
            py.allow_threads(|| online::feature_matrix(trace, cols, segment_bytes, &get_ops));
        return Ok(PyArray1::from_vec(py, flat)
            .reshape([n, NUM_FEATURES])?
            .into_any());
    };
    let k = features.len();
    if let Some(mut out) = out {
        if out.shape() != [k, n] {
            return Err(PyValueError::new_err(format!(
                "out has shape {:?}, not ({k}, {n}) (counts x accesses)",
                out.shape()
            )));
        }
        let buf = out
            .as_slice_mut()
            .map_err(|_| PyValueError::new_err("out must be C-contiguous"))?;
        py.allow_threads(|| {
            online::count_columns_into(trace, cols, segment_bytes, &get_ops, &features, buf)
        })
        .map_err(counts_error)?;
        return Ok(py.None().into_bound(py));
    }
    let flat = py
        .allow_threads(|| online::count_columns(trace, cols, segment_bytes, &get_ops, &features))
        .map_err(counts_error)?;
    Ok(PyArray1::from_vec(py, flat).reshape([k, n])?.into_any())
}

fn counts_error(e: online::CountsError) -> PyErr {
    PyValueError::new_err(match e {
        online::CountsError::Column(j) => {
            format!("feature {j} is not a contract index (< {NUM_FEATURES})")
        }
        online::CountsError::Overflow {
            access,
            feature,
            value,
        } => {
            format!("access {access}: feature {feature} is {value}, not an integer in u32's range")
        }
    })
}

/// `episode_split(row, key, time, gap, s0, s1, threshold)`: a trace's GETs (row order) split
/// into Baleen's episodes at gaps above `threshold` (in `gap`'s unit) and replayed
/// (flash/episodes.rs): a dict of per-episode columns (episodes in order of their first row:
/// the index is the episode id) and, per GET, `episode` (u32) and `position`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(super) fn episode_split<'py>(
    py: Python<'py>,
    row: PyReadonlyArray1<'py, i64>,
    key: PyReadonlyArray1<'py, u64>,
    time: PyReadonlyArray1<'py, f64>,
    gap: PyReadonlyArray1<'py, f64>,
    s0: PyReadonlyArray1<'py, u8>,
    s1: PyReadonlyArray1<'py, u8>,
    threshold: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let g = crate::flash::episodes::Gets {
        row: slice("row", &row)?,
        key: slice("key", &key)?,
        time: slice("time", &time)?,
        gap: slice("gap", &gap)?,
        s0: slice("s0", &s0)?,
        s1: slice("s1", &s1)?,
    };
    let e = py
        .allow_threads(|| crate::flash::episodes::split(&g, threshold))
        .map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    d.set_item("key", PyArray1::from_vec(py, e.key))?;
    d.set_item("first_row", PyArray1::from_vec(py, e.first_row))?;
    d.set_item("first_time", PyArray1::from_vec(py, e.first_time))?;
    d.set_item("last_time", PyArray1::from_vec(py, e.last_time))?;
    d.set_item("gets", PyArray1::from_vec(py, e.gets))?;
    d.set_item("range_start", PyArray1::from_vec(py, e.range_start))?;
    d.set_item("range_end", PyArray1::from_vec(py, e.range_end))?;
    d.set_item("get_segments", PyArray1::from_vec(py, e.get_segments))?;
    d.set_item("replay_ios", PyArray1::from_vec(py, e.replay_ios))?;
    d.set_item("replay_segments", PyArray1::from_vec(py, e.replay_segments))?;
    d.set_item(
        "accessed_segments",
        PyArray1::from_vec(py, e.accessed_segments),
    )?;
    d.set_item("episode", PyArray1::from_vec(py, e.episode))?;
    d.set_item("position", PyArray1::from_vec(py, e.position))?;
    Ok(d)
}
