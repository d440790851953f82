//! The thin PyO3 layer: NumPy arrays are borrowed (never copied), the GIL is released while
//! the simulation runs, and every invalid input becomes a Python `ValueError`.
//!
//! One file per system's functions ([`baleen`]: flash mode and the compiled policy; [`mat`];
//! [`mlcache`]; [`pannier`]; [`kml`]; [`objects`]: the plain object cache), the conversions they
//! share here, and the module's table of names at the end.

use numpy::{Element, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::config::{sim_params, FlashConfig, ParamType, SimError, SimParams, PARAM_FIELDS};
use crate::core::forest::{self, TreeArrays};
use crate::flash::{PolicyArrays, Trace};
use crate::mat::lrb_features::{EVICT_CONTRACT_HASH, EVICT_FEATURE_NAMES, EVICT_NUM_FEATURES};
use crate::mlcache::partition;
use crate::mlcache::reuse;

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
    prefetch_start: &'a Option<PyReadonlyArray1<'_, i16>>,
    prefetch_end: &'a Option<PyReadonlyArray1<'_, i16>>,
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

mod baleen;
mod kml;
mod mat;
mod mlcache;
mod objects;
mod pannier;

use baleen::*;
use kml::*;
use mat::*;
use mlcache::*;
use objects::*;
use pannier::*;

#[pymodule]
fn flashml_sim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ABI_VERSION", crate::core::contract::ABI_VERSION)?;
    m.add("CONTRACT_HASH", crate::core::contract::CONTRACT_HASH)?;
    m.add("NUM_FEATURES", crate::core::contract::NUM_FEATURES)?;
    m.add(
        "FEATURE_NAMES",
        crate::core::contract::FEATURE_NAMES.to_vec(),
    )?;
    m.add(
        "REJECTX_DITHER_SEED",
        crate::flash::admission::REJECTX_DITHER_SEED,
    )?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_objects, m)?)?;
    m.add_function(wrap_pyfunction!(default_config, m)?)?;
    m.add_function(wrap_pyfunction!(config_fields, m)?)?;
    m.add_function(wrap_pyfunction!(capacity_segments, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_policy, m)?)?;
    m.add_function(wrap_pyfunction!(policy_info, m)?)?;
    m.add_function(wrap_pyfunction!(online_features, m)?)?;
    m.add_function(wrap_pyfunction!(episode_split, m)?)?;
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
    m.add_function(wrap_pyfunction!(distinct_rows, m)?)?;
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
        let (data, width) = c_matrix(&x)?;
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

/// Two int64 NumPy arrays.
type Int64Pair<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>);

/// `distinct_rows(x, cols)`: for a C-contiguous float64 matrix, the first row of each distinct
/// row (by the bits of its values in `cols`), in the order they appear, and each row's index
/// into those (both int64; core/rows.rs).
#[pyfunction]
fn distinct_rows<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f64>,
    cols: Vec<usize>,
) -> PyResult<Int64Pair<'py>> {
    let (data, width) = c_matrix(&x)?;
    let (first, inverse) = py
        .allow_threads(|| crate::core::rows::distinct_rows(data, width, &cols))
        .map_err(PyValueError::new_err)?;
    Ok((
        PyArray1::from_vec(py, first),
        PyArray1::from_vec(py, inverse),
    ))
}

/// A C-contiguous float64 matrix's values (row-major) and its width; as_slice also takes a
/// Fortran-ordered matrix (columns first), refused here.
fn c_matrix<'a>(x: &'a PyReadonlyArray2<'_, f64>) -> PyResult<(&'a [f64], usize)> {
    let width = x.shape()[1];
    let data = x
        .as_slice()
        .ok()
        .filter(|_| x.is_c_contiguous())
        .ok_or_else(|| PyValueError::new_err("x must be a C-contiguous float64 matrix"))?;
    Ok((data, width))
}
