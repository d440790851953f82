//! KML's offline twin: the closed-loop page cache with Linux-like readahead.

use super::*;
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::types::PyDict;

use crate::kml::readahead::{self, ReadaheadConfig, ReadaheadTrace};

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
/// feature window at a time (sim/src/kml/readahead.rs describes the model).
///
/// `ReadaheadSim(files u32, pages u64, npages u32, writes bool, *, cache_pages, riops, rbps,
/// cpu_us, page_bytes, window_ms)`; by default the real testbed's device (read_iops and
/// read_mbps of flashml/systems/kml/settings.toml, rbps in bytes/s), `readahead::CPU_US` and
/// the contract's page and window. The arrays are copied once (the simulation keeps its trace
/// across windows). `run_window(ra_kib)` runs the next window at that readahead and returns
/// its features and counters; `run_fixed(ra_kib)` resets and runs the whole trace at one
/// size; `reset()` starts over.
#[pyclass(name = "ReadaheadSim", module = "flashml_sim")]
pub(super) struct PyReadaheadSim {
    sim: readahead::ReadaheadSim,
}

#[pymethods]
impl PyReadaheadSim {
    #[new]
    #[pyo3(signature = (files, pages, npages, writes, *, cache_pages,
                        riops=crate::kml::settings::READ_IOPS as f64, rbps=readahead::RBPS,
                        cpu_us=readahead::CPU_US,
                        page_bytes=crate::core::contract::READAHEAD_PAGE_BYTES as i64,
                        window_ms=crate::core::contract::READAHEAD_WINDOW_MS as i64))]
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
