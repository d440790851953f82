//! Pannier's block mode: per-block and container caches over a page-mapped FTL.

use super::*;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::types::PyDict;

use crate::pannier::{blocks, config, settings, trace};

/// A block trace over the four arrays of the block-mode functions (contiguous, or an error).
fn block_trace<'a>(
    times: &'a PyReadonlyArray1<'_, f64>,
    pages: &'a PyReadonlyArray1<'_, u64>,
    lens: &'a PyReadonlyArray1<'_, u32>,
    writes: &'a PyReadonlyArray1<'_, bool>,
) -> PyResult<trace::BlockTrace<'a>> {
    Ok(trace::BlockTrace {
        times: times.as_slice()?,
        pages: pages.as_slice()?,
        lens: lens.as_slice()?,
        writes: writes.as_slice()?,
    })
}

/// The RAM cache's pass of block mode (`trace::ram_served`): for each block access, whether
/// the LRU RAM cache of `ram_pct`% of `cache_bytes` in front of the flash cache serves it
/// (empty for ram_pct 0), and the seconds the pass took: (bool array, float), to give
/// `simulate_blocks` for every policy run on the same trace and sizes.
#[pyfunction]
#[pyo3(signature = (times, pages, lens, writes, cache_bytes, *, page_bytes=4096, ram_pct=settings::RAM_PCT))]
#[allow(clippy::too_many_arguments)]
pub(super) fn block_ram_served<'py>(
    py: Python<'py>,
    times: PyReadonlyArray1<'py, f64>,
    pages: PyReadonlyArray1<'py, u64>,
    lens: PyReadonlyArray1<'py, u32>,
    writes: PyReadonlyArray1<'py, bool>,
    cache_bytes: u64,
    page_bytes: u64,
    ram_pct: f64,
) -> PyResult<(Bound<'py, PyArray1<bool>>, f64)> {
    let cfg = config::BlockConfig {
        cache_bytes,
        page_bytes,
        ram_pct,
        ..config::BlockConfig::default()
    };
    // (only the knobs the pass reads: the container knobs are the policies')
    cfg.validate_ram().map_err(value_error)?;
    let trace = block_trace(&times, &pages, &lens, &writes)?;
    trace.validate().map_err(value_error)?;
    let (served, secs) = py.allow_threads(|| {
        let t0 = std::time::Instant::now();
        let s = trace::ram_served(&trace, cfg.ram_pages());
        (s, t0.elapsed().as_secs_f64())
    });
    Ok((PyArray1::from_vec(py, served), secs))
}

/// Block mode (Pannier's setting; sim/src/pannier/blocks.rs): replay a block-level trace (request i at
/// `times[i]` s covers blocks `pages[i] .. pages[i] + lens[i]`, a write iff `writes[i]`)
/// through one policy: lru, s2lru, mq, belady (per block, over an FTL with `op`
/// over-provisioning), lru_plus, s2lru_plus or pannier (containers of `container_bytes`,
/// each a whole number of `erase_bytes` erase blocks; default: one).
/// `lifespan_epbpd`: gate insertions with TIRE at that many erasures per erase block per day.
/// `ram_pct`: the RAM cache in front, % of the cache; `ram_served`, `ram_served_s`: its pass
/// as `block_ram_served` returned it for the same trace, cache_bytes, page_bytes and ram_pct
/// (shared by the policies run on them; None: computed here).
/// Returns the counts, ratios and flash figures, and the quanta (start_s, credit, erasures,
/// blocked) as arrays.
#[pyfunction]
#[pyo3(signature = (times, pages, lens, writes, policy, cache_bytes, *, page_bytes=4096,
                    container_bytes=2_097_152, erase_bytes=None, op=settings::OP,
                    lifespan_epbpd=None, tire_slack=settings::TIRE_SLACK,
                    tire_steps=settings::TIRE_STEPS as u32, quantum_s=settings::QUANTUM_S,
                    promotion_pct=settings::PROMOTION_PCT, sample_pct=settings::SAMPLE_PCT,
                    lifetime_pct=settings::LIFETIME_PCT, ghost_factor=settings::GHOST_FACTOR,
                    survival=true, aging=true, invalidation_aware=true, packing=true,
                    fixed_lifetime=None, open_in_cache=false, ram_pct=settings::RAM_PCT,
                    ram_served=None, ram_served_s=0.0))]
#[allow(clippy::too_many_arguments)]
pub(super) fn simulate_blocks<'py>(
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
    lifespan_epbpd: Option<f64>,
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
    let kind = config::BlockPolicy::parse(policy).map_err(value_error)?;
    let cfg = config::BlockConfig {
        cache_bytes,
        page_bytes,
        container_bytes,
        erase_bytes,
        op,
        lifespan_epbpd,
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

// --- KML's offline twin (sim/src/kml/readahead.rs) ----------------------------------
