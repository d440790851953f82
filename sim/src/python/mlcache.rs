//! MLCache: per-stream stack distances, hit curves, the best split and the partitioned page cache.

use super::*;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::types::PyDict;

use crate::mlcache::partition;
use crate::mlcache::reuse;
use crate::mlcache::settings;

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
    // a negative value is refused before its cast (settings.toml's bounds; steps: > 0)
    let check = |name: &str, why: Option<&str>, v: i64| match why {
        Some(why) => Err(PyValueError::new_err(format!(
            "{name} must be {why}, got {v}"
        ))),
        None => Ok(v),
    };
    let cfg = partition::PartitionConfig {
        capacity: check("capacity", settings::capacity_problem(capacity), capacity)? as u64,
        interval: check("interval", settings::interval_problem(interval), interval)? as usize,
        steps: check("steps", (steps <= 0).then_some("> 0"), steps)? as usize,
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
pub(super) fn stack_distances<'py>(
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
#[pyo3(signature = (keys, streams, writes, n_streams, capacity, interval, steps=crate::core::contract::PARTITION_STEPS as i64,
                    writes_only=false, objective="hits"))]
#[allow(clippy::too_many_arguments)]
pub(super) fn partition_curves<'py>(
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
pub(super) fn best_split(curves: numpy::PyReadonlyArray2<'_, u64>) -> PyResult<(Vec<usize>, u64)> {
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

/// Partitioned page cache across streams (sim/src/mlcache/partition.rs): `policy` one of shared,
/// even, static_optimal, discrete_optimal, mlcache (`shares`: (intervals, n_streams) f64, a
/// share of the capacity per stream per interval). Returns the counts and ratios (hit,
/// read, write), per-stream requests/hits, "allocations" (intervals, n_streams) pages,
/// "interval_hits", evictions, resize_evictions, fallbacks, wall_s.
#[pyfunction]
#[pyo3(signature = (keys, streams, writes, n_streams, capacity, interval, policy, steps=crate::core::contract::PARTITION_STEPS as i64,
                    writes_only=false, objective="hits", shares=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn simulate_partitioned<'py>(
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
