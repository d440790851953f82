//! The object cache (libCacheSim's model: key, size; byte or count capacity) with the plain eviction policies.

use super::*;
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::types::PyDict;

use crate::core::config::{CapacityUnit, EvictionKind, ObjectConfig};
use crate::core::objects;
use crate::mat::{self};

/// Simulate an object cache (libCacheSim's model) over (key u64, size u64) requests.
/// `policy`: lru | fifo | belady (MIN: evict the farthest next request); `unit`: bytes | objects. Returns
/// {"miss_ratio", "byte_miss_ratio", "requests", "hits", "evictions", "wall_s"}.
#[pyfunction]
#[pyo3(signature = (key, size, capacity, policy="lru", unit="bytes"))]
pub(super) fn simulate_objects<'py>(
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

pub(super) fn capacity_unit(unit: &str) -> PyResult<CapacityUnit> {
    match unit.to_ascii_lowercase().as_str() {
        "bytes" => Ok(CapacityUnit::Bytes),
        "objects" => Ok(CapacityUnit::Objects),
        other => Err(PyValueError::new_err(format!(
            "unknown capacity unit {other:?}; expected bytes or objects"
        ))),
    }
}
