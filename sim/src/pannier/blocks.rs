//! Block mode: a flash cache of small blocks (4 KiB pages of a block-level trace, reads and
//! writes) judged by what it costs the flash: Pannier's setting (Middleware '15). This file
//! holds the driver ([`simulate_blocks`], [`run`]), the cache trait ([`BlockCache`]) and the
//! counters and results; the trace is in [`crate::pannier::trace`], the policies and
//! configuration in [`crate::pannier::config`], the per-block caches in
//! [`crate::pannier::per_block`], the ghost sketch and sampler in [`crate::pannier::sketch`].
//!
//! * A request reads or writes `len` consecutive blocks. A read is a hit only if every block
//!   is cached (the paper's read-hit ratio, RHR); a missed block is inserted after the miss
//!   (subject to admission). A write invalidates the cached copy of each block and inserts the
//!   new data (subject to admission); writes always reach the backend (write-through: the
//!   paper's write mode is not recoverable from its text).
//! * Two families of caches implement [`BlockCache`]:
//!   - per-block policies ([`PerBlock`] over a [`PageOrder`](crate::pannier::per_block::PageOrder): LRU, S2LRU, MQ, Belady with
//!     bypass) write single blocks into cache slots, which a page-mapped FTL with greedy GC
//!     and 7% over-provisioning ([`crate::pannier::ftl`]) turns into flash writes and erasures;
//!   - container policies ([`crate::pannier`]: LRU+, S2LRU+, Pannier; [`crate::pannier::ripq`]: RIPQ+)
//!     pack blocks into erase-block-sized containers, written and erased whole.
//! * Either can be gated by TIRE ([`crate::pannier::tire`]), fed by the erasures the cache causes.
//! * A RAM cache may sit in front (`BlockConfig::ram_pct`; the paper's simulator: an LRU of 5%
//!   of the flash cache, [`ram_served`]): the reads it serves are hits that never reach the
//!   flash cache.
//! * Metrics: read- and write-hit ratios, flash bytes read and written (host and internal),
//!   erasures, FUE (flash bytes read / written), DWPD, erasures per erase block per day
//!   (EPBPD) and the erasure credit per quantum.

use std::time::Instant;

use crate::core::config::{err, SimError};
use crate::core::eviction::Lru;
use crate::pannier::config::{BlockConfig, BlockPolicy};
use crate::pannier::per_block::{Belady, Mq, PerBlock, S2lru};
use crate::pannier::tire::{Gate, Quantum};
use crate::pannier::trace::{next_reads, ram_served, BlockTrace};
use crate::pannier::ContainerCache;

/// What the cache wrote, read and erased (in blocks), counted by the cache.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlashCounters {
    pub page_reads: u64,
    pub page_read_hits: u64,
    pub page_writes: u64,
    /// Blocks served from flash (hits on sealed containers; every per-block hit).
    pub flash_read_pages: u64,
    /// Blocks the cache admitted (client writes and read misses).
    pub inserted_pages: u64,
    /// Blocks TIRE refused.
    pub rejected_pages: u64,
    /// Blocks Belady chose not to cache.
    pub bypassed_pages: u64,
    /// Blocks (per-block) or containers evicted.
    pub evictions: u64,
    /// Blocks copied forward from evicted containers.
    pub copied_forward_pages: u64,
    /// Flash writes in blocks: host = client data, internal = copy-forward and FTL GC.
    pub host_write_pages: u64,
    pub internal_write_pages: u64,
    pub erasures: u64,
}

/// A cache in block mode. `access` handles one block of a request; `pos` is the index of the
/// access among all block accesses of the trace (Belady's clock).
pub trait BlockCache {
    /// Returns whether the block was cached before this access.
    fn access(&mut self, page: u64, write: bool, pos: usize) -> bool;
    /// Time passes (TIRE's quanta).
    fn tick(&mut self, now_s: f64);
    fn counters(&self) -> FlashCounters;
    /// Erase blocks of the flash the cache uses (for EPBPD).
    fn erase_blocks(&self) -> u32;
    fn gate_mut(&mut self) -> &mut Gate;
    /// Pannier's current lifetime in insertions, if it has one.
    fn lifetime(&self) -> Option<u64> {
        None
    }
}

/// One block-mode run.
#[derive(Debug, Clone, Default)]
pub struct BlockResult {
    pub policy: String,
    pub tire: bool,
    pub requests: u64,
    pub reads: u64,
    pub read_hits: u64,
    pub writes: u64,
    pub write_hits: u64,
    pub read_hit_ratio: f64,
    pub write_hit_ratio: f64,
    pub page_reads: u64,
    pub page_read_hits: u64,
    /// Block reads the RAM cache in front served (they never reached the flash cache).
    pub ram_read_hits: u64,
    pub page_writes: u64,
    pub inserted_pages: u64,
    pub rejected_pages: u64,
    pub bypassed_pages: u64,
    pub copied_forward_pages: u64,
    pub evictions: u64,
    pub flash_read_bytes: u64,
    pub host_write_bytes: u64,
    pub internal_write_bytes: u64,
    pub flash_write_bytes: u64,
    pub erasures: u64,
    pub erase_blocks: u32,
    /// Flash usage effectiveness: flash bytes read / flash bytes written (host + internal).
    pub fue: f64,
    pub write_amplification: f64,
    /// The trace's span in days (at least one second).
    pub days: f64,
    /// Flash bytes written per cache size per day.
    pub dwpd: f64,
    /// Erasures per erase block per day.
    pub epbpd: f64,
    /// TIRE's quota in erasures per quantum (0 without TIRE).
    pub quota: f64,
    /// The erasure credit after the last quantum (TIRE only; 0 otherwise).
    pub final_credit: f64,
    pub quanta: Vec<Quantum>,
    /// Pannier's lifetime at the end (insertions; 0 for other policies).
    pub lifetime: u64,
    pub wall_s: f64,
    pub requests_per_s: f64,
    pub blocks_per_s: f64,
}

/// Replay `trace` through `cache`.
pub fn run<C: BlockCache>(
    cache: &mut C,
    trace: &BlockTrace,
    cfg: &BlockConfig,
    policy: &str,
    served: &[bool],
) -> BlockResult {
    let t0 = Instant::now();
    let mut r = BlockResult {
        policy: policy.to_string(),
        tire: cfg.lifespan_epbpd.is_some(),
        ..Default::default()
    };
    let mut pos = 0usize;
    for i in 0..trace.len() {
        cache.tick(trace.times[i]);
        let w = trace.writes[i];
        let mut all = true;
        for p in trace.pages[i]..trace.pages[i] + trace.lens[i] as u64 {
            if served.get(pos) == Some(&true) {
                r.ram_read_hits += 1;
            } else {
                all &= cache.access(p, w, pos);
            }
            pos += 1;
        }
        if w {
            r.writes += 1;
            r.write_hits += all as u64;
        } else {
            r.reads += 1;
            r.read_hits += all as u64;
        }
    }
    let c = cache.counters();
    cache.gate_mut().finish(c.erasures);
    let wall = t0.elapsed().as_secs_f64();
    let pb = cfg.page_bytes;
    r.requests = trace.len() as u64;
    r.read_hit_ratio = ratio(r.read_hits, r.reads);
    r.write_hit_ratio = ratio(r.write_hits, r.writes);
    r.page_reads = c.page_reads;
    r.page_read_hits = c.page_read_hits;
    r.page_writes = c.page_writes;
    r.inserted_pages = c.inserted_pages;
    r.rejected_pages = c.rejected_pages;
    r.bypassed_pages = c.bypassed_pages;
    r.copied_forward_pages = c.copied_forward_pages;
    r.evictions = c.evictions;
    r.flash_read_bytes = c.flash_read_pages * pb;
    r.host_write_bytes = c.host_write_pages * pb;
    r.internal_write_bytes = c.internal_write_pages * pb;
    r.flash_write_bytes = r.host_write_bytes + r.internal_write_bytes;
    r.erasures = c.erasures;
    r.erase_blocks = cache.erase_blocks();
    r.fue = ratio(r.flash_read_bytes, r.flash_write_bytes);
    r.write_amplification = ratio(r.flash_write_bytes, r.host_write_bytes);
    let span = trace.times[trace.len() - 1] - trace.times[0];
    r.days = span.max(1.0) / 86_400.0;
    r.dwpd = r.flash_write_bytes as f64 / cfg.cache_bytes as f64 / r.days;
    r.epbpd = r.erasures as f64 / r.erase_blocks as f64 / r.days;
    let gate = cache.gate_mut();
    r.quota = gate.quota().unwrap_or(0.0);
    r.final_credit = if r.tire { gate.credit() } else { 0.0 };
    r.quanta = gate.series.clone();
    r.lifetime = cache.lifetime().unwrap_or(0);
    r.wall_s = wall;
    r.requests_per_s = r.requests as f64 / wall.max(1e-9);
    r.blocks_per_s = pos as f64 / wall.max(1e-9);
    r
}

/// Pannier's reports count an empty class (no reads, no writes) as a 0 ratio.
fn ratio(a: u64, b: u64) -> f64 {
    crate::core::ratio_or(a, b, 0.0)
}

/// Simulate one policy over a block trace.
pub fn simulate_blocks(
    policy: BlockPolicy,
    trace: &BlockTrace,
    cfg: &BlockConfig,
) -> Result<BlockResult, SimError> {
    simulate_blocks_served(policy, trace, cfg, None)
}

/// [`simulate_blocks`] with the RAM cache's pass given: `(ram_served(trace,
/// cfg.ram_pages()), the seconds it took)`, computed once for the policies that share a
/// trace and configuration (the pass is the same for all of them; its time still counts in
/// each run's). None: computed here.
pub fn simulate_blocks_served(
    policy: BlockPolicy,
    trace: &BlockTrace,
    cfg: &BlockConfig,
    ram: Option<(&[bool], f64)>,
) -> Result<BlockResult, SimError> {
    trace.validate()?;
    cfg.validate()?;
    let name = policy.name();
    let cap = cfg.cache_pages() as usize;
    let computed;
    let (sv, ram_s) = match ram {
        Some((served, secs)) => {
            let want = if cfg.ram_pages() == 0 {
                0
            } else {
                trace.n_accesses()
            };
            if served.len() != want {
                return err(format!(
                    "the RAM cache's pass has {} entries, this trace and configuration need {want} \
                     (one per block access, none without a RAM cache): it was computed for \
                     another trace or RAM size",
                    served.len()
                ));
            }
            (served, secs)
        }
        None => {
            let t0 = Instant::now();
            computed = ram_served(trace, cfg.ram_pages());
            (computed.as_slice(), t0.elapsed().as_secs_f64())
        }
    };
    let mut r = match policy {
        BlockPolicy::Lru => run(&mut PerBlock::new(Lru::new(), cfg), trace, cfg, name, sv),
        BlockPolicy::S2lru => {
            let order = S2lru::new(cap / 2);
            run(&mut PerBlock::new(order, cfg), trace, cfg, name, sv)
        }
        BlockPolicy::Mq => run(&mut PerBlock::new(Mq::new(cap), cfg), trace, cfg, name, sv),
        BlockPolicy::Belady => {
            let order = Belady::new(next_reads(trace, sv), cap);
            run(&mut PerBlock::new(order, cfg), trace, cfg, name, sv)
        }
        BlockPolicy::LruPlus => run(&mut ContainerCache::lru_plus(cfg), trace, cfg, name, sv),
        BlockPolicy::S2lruPlus => run(&mut ContainerCache::s2lru_plus(cfg), trace, cfg, name, sv),
        BlockPolicy::RipqPlus => run(&mut ContainerCache::ripq_plus(cfg), trace, cfg, name, sv),
        BlockPolicy::Pannier => run(&mut ContainerCache::pannier(cfg), trace, cfg, name, sv),
    };
    // the RAM cache's pass is part of the simulation's time (Belady's look-ahead is not)
    r.wall_s += ram_s;
    r.requests_per_s = r.requests as f64 / r.wall_s.max(1e-9);
    r.blocks_per_s = trace.n_accesses() as f64 / r.wall_s.max(1e-9);
    Ok(r)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::hash::splitmix64;
    use crate::pannier::trace::NEVER;

    /// 4 KiB blocks, containers of `ppc` blocks, a cache of `cache_pages` blocks.
    pub(crate) fn small_cfg(cache_pages: u64, ppc: u64) -> BlockConfig {
        BlockConfig {
            cache_bytes: cache_pages * 4096,
            page_bytes: 4096,
            container_bytes: ppc * 4096,
            ..Default::default()
        }
    }

    fn trace_of(reqs: &[(u64, bool)]) -> (Vec<f64>, Vec<u64>, Vec<u32>, Vec<bool>) {
        let n = reqs.len();
        (
            (0..n).map(|i| i as f64).collect(),
            reqs.iter().map(|r| r.0).collect(),
            vec![1; n],
            reqs.iter().map(|r| r.1).collect(),
        )
    }

    #[test]
    fn ram_served_by_hand() {
        // RAM of 2 blocks: read 1, read 2, read 1 (served), write 3 (enters, evicts 2; a write
        // is never served), read 3 (served), read 2 (evicted: not served).
        let (t, p, l, w) = trace_of(&[
            (1, false),
            (2, false),
            (1, false),
            (3, true),
            (3, false),
            (2, false),
        ]);
        let tr = BlockTrace {
            times: &t,
            pages: &p,
            lens: &l,
            writes: &w,
        };
        let f = false;
        assert_eq!(ram_served(&tr, 2), vec![f, f, true, f, true, f]);
        assert!(ram_served(&tr, 0).is_empty());
        // Belady's look-ahead skips served reads: below the RAM, block 1 is never read again.
        assert_eq!(next_reads(&tr, &ram_served(&tr, 2))[0], NEVER);
        assert_eq!(next_reads(&tr, &[])[0], 2);
    }

    #[test]
    fn belady_bypass_and_overwrite() {
        // Cache of 2 blocks (container of 1 block keeps the config valid).
        let cfg = small_cfg(2, 1);
        // a b c a b: c's next read never comes -> bypassed; a and b hit.
        let (t, p, l, w) = trace_of(&[(1, false), (2, false), (3, false), (1, false), (2, false)]);
        let tr = BlockTrace {
            times: &t,
            pages: &p,
            lens: &l,
            writes: &w,
        };
        let r = simulate_blocks(BlockPolicy::Belady, &tr, &cfg).unwrap();
        assert_eq!(r.read_hits, 2);
        // a written then read, but overwritten first: the first copy is never read.
        let (t, p, l, w) = trace_of(&[(1, true), (1, true), (1, false)]);
        let tr = BlockTrace {
            times: &t,
            pages: &p,
            lens: &l,
            writes: &w,
        };
        assert_eq!(next_reads(&tr, &[]), vec![NEVER, 2, NEVER]);
        let r = simulate_blocks(BlockPolicy::Belady, &tr, &cfg).unwrap();
        assert_eq!((r.read_hits, r.bypassed_pages, r.inserted_pages), (1, 1, 1));
    }

    #[test]
    fn belady_is_best_per_block() {
        let n = 20_000;
        let mut x = 7u64;
        let mut pages = Vec::new();
        let mut writes = Vec::new();
        for _ in 0..n {
            x = splitmix64(x);
            let u = (x % 1000) as f64 / 1000.0;
            pages.push((u * u * 400.0) as u64);
            writes.push(x.is_multiple_of(7));
        }
        let t: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let l = vec![1u32; n];
        let tr = BlockTrace {
            times: &t,
            pages: &pages,
            lens: &l,
            writes: &writes,
        };
        let cfg = small_cfg(64, 8);
        let hits = |p| simulate_blocks(p, &tr, &cfg).unwrap().read_hits;
        let b = hits(BlockPolicy::Belady);
        for p in [BlockPolicy::Lru, BlockPolicy::S2lru, BlockPolicy::Mq] {
            assert!(b > hits(p), "{p:?}");
        }
    }

    #[test]
    fn bad_config_and_trace() {
        let mut c = BlockConfig {
            container_bytes: 1024,
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().0.contains("smaller than a block"));
        c.container_bytes = 2 << 20;
        c.cache_bytes = 3 << 20;
        assert!(c
            .validate()
            .unwrap_err()
            .0
            .contains("fewer than 2 containers"));
        c.cache_bytes = 1 << 30;
        c.lifespan_epbpd = Some(0.0);
        assert!(c.validate().unwrap_err().0.contains("lifespan target"));
        let (t, p, _, w) = trace_of(&[(1, false), (2, false)]);
        let l = vec![1, 0];
        let tr = BlockTrace {
            times: &t,
            pages: &p,
            lens: &l,
            writes: &w,
        };
        assert!(tr.validate().unwrap_err().0.contains("request 1: length 0"));
        let t2 = vec![5.0, 4.0];
        let l = vec![1, 1];
        let tr = BlockTrace {
            times: &t2,
            pages: &p,
            lens: &l,
            writes: &w,
        };
        assert!(tr.validate().unwrap_err().0.contains("request 1: time 4"));
    }
}
