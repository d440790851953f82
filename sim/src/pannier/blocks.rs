//! Block mode: a flash cache of small blocks (4 KiB pages of a block-level trace, reads and
//! writes) judged by what it costs the flash: Pannier's setting (Middleware '15).
//!
//! * A request reads or writes `len` consecutive blocks. A read is a hit only if every block
//!   is cached (the paper's read-hit ratio, RHR); a missed block is inserted after the miss
//!   (subject to admission). A write invalidates the cached copy of each block and inserts the
//!   new data (subject to admission); writes always reach the backend (write-through: the
//!   paper's write mode is not recoverable from its text).
//! * Two families of caches implement [`BlockCache`]:
//!   - per-block policies ([`PerBlock`] over a [`PageOrder`]: LRU, S2LRU, MQ, Belady with
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

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use crate::core::config::{err, SimError};
use crate::core::eviction::{Eviction, Lru};
use crate::core::hash::{new_map, splitmix64, FastMap};
use crate::core::list::DList;
use crate::pannier::ftl::Ftl;
use crate::pannier::tire::{Gate, InsertKind, Quantum, TireConfig};
use crate::pannier::ContainerCache;

/// A block-level request trace: request `i` at `times[i]` seconds covers blocks
/// `pages[i] .. pages[i] + lens[i]`, a write iff `writes[i]`.
#[derive(Debug, Clone, Copy)]
pub struct BlockTrace<'a> {
    pub times: &'a [f64],
    pub pages: &'a [u64],
    pub lens: &'a [u32],
    pub writes: &'a [bool],
}

impl BlockTrace<'_> {
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    pub fn validate(&self) -> Result<(), SimError> {
        let n = self.pages.len();
        if self.times.len() != n || self.lens.len() != n || self.writes.len() != n {
            return err(format!(
                "times, pages, lens and writes must have one element per request: {}, {n}, {}, {}",
                self.times.len(),
                self.lens.len(),
                self.writes.len()
            ));
        }
        if n == 0 {
            return err("the trace has no requests");
        }
        if let Some(i) = self.lens.iter().position(|&l| l == 0) {
            return err(format!(
                "request {i}: length 0 blocks (every request covers >= 1)"
            ));
        }
        if let Some(i) = self.times.iter().position(|t| !t.is_finite()) {
            return err(format!(
                "request {i}: time {} is not a finite number",
                self.times[i]
            ));
        }
        if let Some(i) = self.times.windows(2).position(|w| w[1] < w[0]) {
            return err(format!(
                "request {}: time {} is before the previous request's {} (sort the trace by time)",
                i + 1,
                self.times[i + 1],
                self.times[i]
            ));
        }
        if let Some(i) = (0..n).find(|&i| self.pages[i].checked_add(self.lens[i] as u64).is_none())
        {
            return err(format!(
                "request {i}: block {} + {} overflows 64 bits",
                self.pages[i], self.lens[i]
            ));
        }
        Ok(())
    }

    /// Every block access in trace order: (block, write).
    pub fn accesses(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        (0..self.len()).flat_map(move |i| {
            let w = self.writes[i];
            (self.pages[i]..self.pages[i] + self.lens[i] as u64).map(move |p| (p, w))
        })
    }

    pub fn n_accesses(&self) -> usize {
        self.lens.iter().map(|&l| l as usize).sum()
    }
}

/// The block-mode policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockPolicy {
    Lru,
    S2lru,
    Mq,
    Belady,
    LruPlus,
    S2lruPlus,
    RipqPlus,
    Pannier,
}

pub const BLOCK_POLICIES: [(&str, BlockPolicy); 8] = [
    ("lru", BlockPolicy::Lru),
    ("s2lru", BlockPolicy::S2lru),
    ("mq", BlockPolicy::Mq),
    ("belady", BlockPolicy::Belady),
    ("lru_plus", BlockPolicy::LruPlus),
    ("s2lru_plus", BlockPolicy::S2lruPlus),
    ("ripq_plus", BlockPolicy::RipqPlus),
    ("pannier", BlockPolicy::Pannier),
];

impl BlockPolicy {
    pub fn parse(s: &str) -> Result<Self, SimError> {
        let l = s.to_ascii_lowercase();
        BLOCK_POLICIES
            .iter()
            .find(|(n, _)| *n == l)
            .map(|&(_, p)| p)
            .ok_or_else(|| {
                let names: Vec<&str> = BLOCK_POLICIES.iter().map(|(n, _)| *n).collect();
                SimError(format!(
                    "unknown block-mode policy {s:?}; one of {}",
                    names.join(", ")
                ))
            })
    }

    pub fn name(self) -> &'static str {
        BLOCK_POLICIES.iter().find(|(_, p)| *p == self).unwrap().0
    }

    /// Whether the policy writes whole containers (no FTL) rather than single blocks.
    pub fn is_container(self) -> bool {
        matches!(
            self,
            BlockPolicy::LruPlus | BlockPolicy::S2lruPlus | BlockPolicy::Pannier
        )
    }
}

/// Block-mode configuration. Defaults are the paper's (Table 3 and §4.4).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockConfig {
    /// Flash cache size in bytes (usable: per-block policies get `op` more on top).
    pub cache_bytes: u64,
    /// The block (page) size: the unit of insert, read and invalidate.
    pub page_bytes: u64,
    /// The container size (2 MiB): written and evicted whole.
    pub container_bytes: u64,
    /// The flash erase block; None: the container size (the paper's alignment). A container
    /// must be a whole number of erase blocks; per-block policies' FTL uses it too.
    pub erase_bytes: Option<u64>,
    /// Over-provisioning of the per-block policies' FTL (0.07).
    pub op: f64,
    /// TIRE's lifespan target in erasures per erase block per day; None: no TIRE.
    pub tire_epbpd: Option<f64>,
    /// TIRE's slack K (4).
    pub tire_slack: f64,
    /// TIRE's intervals in (q, K q] (3).
    pub tire_steps: u32,
    /// TIRE's quantum in seconds (300).
    pub quantum_s: f64,
    /// S2LRU*: accesses needed to promote a cold container, in % of its blocks (5).
    pub promotion_pct: f64,
    /// Share of blocks and containers sampled for the distributions, in % (3).
    pub sample_pct: f64,
    /// The lifetime is this percentile of sampled reuse distances (99).
    pub lifetime_pct: f64,
    /// The ghost cache remembers access counts for this many times the cache's blocks (2).
    pub ghost_factor: f64,
    /// Pannier's parts, for ablations (all on: Pannier; all off: S2LRU* alone).
    pub survival: bool,
    pub aging: bool,
    pub invalidation_aware: bool,
    /// Pack blocks into hot and cold open containers by ghost access count.
    pub packing: bool,
    /// A fixed lifetime in insertions instead of the sampled percentile (tests, tuning).
    pub fixed_lifetime: Option<u64>,
    /// Charge the RAM open containers to the cache size (sealed + open <= its containers), so
    /// that a policy with more open containers gets no more cache; off: the paper's model
    /// (open containers in RAM beside the flash).
    pub open_in_cache: bool,
    /// The storage system's RAM cache in front of the flash cache, in % of the flash cache's
    /// size (the paper's simulator, §4.3: an LRU of 5%); 0: none. See [`ram_served`].
    pub ram_pct: f64,
}

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig {
            cache_bytes: 1 << 30,
            page_bytes: 4096,
            container_bytes: 2 << 20,
            erase_bytes: None,
            op: 0.07,
            tire_epbpd: None,
            tire_slack: 4.0,
            tire_steps: 3,
            quantum_s: 300.0,
            promotion_pct: 5.0,
            sample_pct: 3.0,
            lifetime_pct: 99.0,
            ghost_factor: 2.0,
            survival: true,
            aging: true,
            invalidation_aware: true,
            packing: true,
            fixed_lifetime: None,
            open_in_cache: false,
            ram_pct: 0.0,
        }
    }
}

impl BlockConfig {
    /// The checks the RAM cache's pass ([`ram_served`] over [`BlockConfig::ram_pages`])
    /// needs: the block size and the RAM cache's size (part of [`BlockConfig::validate`]).
    pub fn validate_ram(&self) -> Result<(), SimError> {
        if self.page_bytes == 0 {
            return err("block size must be > 0 bytes");
        }
        if !(self.ram_pct >= 0.0 && self.ram_pct <= 100.0) {
            return err(format!(
                "RAM cache size {}% of the flash cache is not in [0, 100]",
                self.ram_pct
            ));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), SimError> {
        self.validate_ram()?;
        if self.container_bytes < self.page_bytes {
            return err(format!(
                "container size {} bytes is smaller than a block ({} bytes)",
                self.container_bytes, self.page_bytes
            ));
        }
        if !self.container_bytes.is_multiple_of(self.page_bytes) {
            return err(format!(
                "container size {} bytes is not a whole number of {}-byte blocks",
                self.container_bytes, self.page_bytes
            ));
        }
        let erase = self.erase_block_bytes();
        if erase < self.page_bytes || !erase.is_multiple_of(self.page_bytes) {
            return err(format!(
                "erase block {erase} bytes is not a whole number of {}-byte blocks",
                self.page_bytes
            ));
        }
        if !self.container_bytes.is_multiple_of(erase) {
            return err(format!(
                "container size {} bytes is not a whole number of {erase}-byte erase blocks \
                 (a container that is not erase-aligned would need the FTL's garbage collection)",
                self.container_bytes
            ));
        }
        if self.container_bytes / self.page_bytes > 1 << 20 {
            return err("more than 2^20 blocks per container");
        }
        if self.cache_bytes < 2 * self.container_bytes {
            return err(format!(
                "cache size {} bytes holds fewer than 2 containers of {} bytes",
                self.cache_bytes, self.container_bytes
            ));
        }
        if self.cache_bytes / self.page_bytes >= u32::MAX as u64 / 2 {
            return err("the cache has more than 2^31 blocks; use larger blocks");
        }
        if !(0.0..=1.0).contains(&self.op) {
            return err(format!(
                "over-provisioning must be in [0, 1], got {}",
                self.op
            ));
        }
        if !(self.promotion_pct >= 0.0 && self.promotion_pct <= 100.0) {
            return err(format!(
                "promotion threshold must be in [0, 100] %, got {}",
                self.promotion_pct
            ));
        }
        if !(self.sample_pct > 0.0 && self.sample_pct <= 100.0) {
            return err(format!(
                "sample share must be in (0, 100] %, got {}",
                self.sample_pct
            ));
        }
        if !(self.lifetime_pct > 0.0 && self.lifetime_pct <= 100.0) {
            return err(format!(
                "lifetime percentile must be in (0, 100], got {}",
                self.lifetime_pct
            ));
        }
        if !(self.ghost_factor >= 0.0 && self.ghost_factor.is_finite()) {
            return err(format!(
                "ghost factor must be >= 0, got {}",
                self.ghost_factor
            ));
        }
        if self.fixed_lifetime == Some(0) {
            return err("a fixed lifetime must be >= 1 insertion");
        }
        if let Some(e) = self.tire_epbpd {
            if !(e.is_finite() && e > 0.0) {
                return err(format!(
                    "lifespan target must be > 0 erasures per block per day, got {e}: with no \
                     erasures allowed nothing could ever be cached"
                ));
            }
            self.tire(1).validate()?;
        }
        Ok(())
    }

    pub fn pages_per_container(&self) -> u32 {
        (self.container_bytes / self.page_bytes) as u32
    }

    pub fn erase_block_bytes(&self) -> u64 {
        self.erase_bytes.unwrap_or(self.container_bytes)
    }

    pub fn pages_per_erase_block(&self) -> u32 {
        (self.erase_block_bytes() / self.page_bytes) as u32
    }

    /// Erase blocks of a container.
    pub fn erase_blocks_per_container(&self) -> u64 {
        self.container_bytes / self.erase_block_bytes()
    }

    /// Blocks the RAM cache in front holds (0: none).
    pub fn ram_pages(&self) -> usize {
        (self.cache_bytes as f64 * self.ram_pct / 100.0 / self.page_bytes as f64) as usize
    }

    pub fn cache_pages(&self) -> u32 {
        (self.cache_bytes / self.page_bytes) as u32
    }

    pub fn containers(&self) -> u32 {
        (self.cache_bytes / self.container_bytes) as u32
    }

    /// TIRE over `erase_blocks` erase blocks (the quota scales with the flash size).
    pub fn tire(&self, erase_blocks: u32) -> TireConfig {
        TireConfig::from_epbpd(
            self.tire_epbpd.unwrap_or(0.0),
            erase_blocks,
            self.tire_slack,
            self.tire_steps,
            self.quantum_s,
        )
    }

    pub fn gate(&self, erase_blocks: u32) -> Gate {
        Gate::new(
            self.tire_epbpd.map(|_| self.tire(erase_blocks)),
            self.quantum_s,
        )
    }

    /// The ghost cache's size in blocks: 0 (off) when nothing reads its counts (no TIRE, and
    /// no hot/cold packing).
    pub fn ghost_blocks(&self, packs: bool) -> usize {
        if self.tire_epbpd.is_none() && !(packs && self.packing) {
            return 0;
        }
        (self.ghost_factor * self.cache_pages() as f64) as usize
    }

    /// Whether a key is in the 3% (sample_pct) sample.
    #[inline]
    pub fn sampled(&self, key: u64) -> bool {
        (splitmix64(key ^ 0x5A3D_17C0) % 10_000) as f64 <= self.sample_pct * 100.0 - 1.0
    }
}

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

/// The ghost cache: an approximate access count for every key seen recently, over about
/// `cap` keys (the paper: 2x the cache's blocks). Pannier's ghost is a key -> 8-bit count
/// table [§3.1]; a hash table of that size costs three lookups on every cold access, so this
/// one is a count-min sketch with conservative update and periodic halving (TinyLFU's way to
/// count recent accesses in O(1) without keys): 4 rows of `next_pow2(cap)` 8-bit counters,
/// a key's count is the minimum of its 4 counters (never below its true count since the last
/// halving), and after every `cap` accesses all counters halve (older accesses fade).
#[derive(Debug, Clone)]
pub struct Ghost {
    cap: usize,
    mask: usize,
    rows: Vec<u8>,
    since_halving: usize,
}

const GHOST_ROWS: usize = 4;

impl Ghost {
    pub fn new(cap: usize) -> Self {
        let width = if cap == 0 {
            0
        } else {
            cap.next_power_of_two().max(64)
        };
        Ghost {
            cap,
            mask: width.saturating_sub(1),
            rows: vec![0; width * GHOST_ROWS],
            since_halving: 0,
        }
    }

    #[inline]
    fn slots(&self, key: u64) -> [usize; GHOST_ROWS] {
        let h1 = splitmix64(key);
        let h2 = splitmix64(key ^ 0x6A09_E667_F3BC_C909) | 1;
        let w = self.mask + 1;
        let mut out = [0; GHOST_ROWS];
        for (i, o) in out.iter_mut().enumerate() {
            *o = i * w + (h1.wrapping_add((i as u64).wrapping_mul(h2)) as usize & self.mask);
        }
        out
    }

    /// Record an access; returns the (approximate) count of earlier accesses.
    #[inline]
    pub fn touch(&mut self, key: u64) -> u32 {
        if self.cap == 0 {
            return 0;
        }
        let idx = self.slots(key);
        let prev = self.min_of(&idx);
        if prev < u8::MAX {
            for &i in &idx {
                if self.rows[i] == prev {
                    self.rows[i] = prev + 1;
                }
            }
        }
        self.since_halving += 1;
        if self.since_halving >= self.cap {
            self.since_halving = 0;
            for c in self.rows.iter_mut() {
                *c >>= 1;
            }
        }
        prev as u32
    }

    /// The key's count (0 for a key never seen or long faded).
    pub fn count(&self, key: u64) -> u32 {
        if self.cap == 0 {
            return 0;
        }
        self.min_of(&self.slots(key)) as u32
    }

    /// A key's count: the smallest of its counters.
    #[inline]
    fn min_of(&self, idx: &[usize; GHOST_ROWS]) -> u8 {
        idx.iter().map(|&i| self.rows[i]).min().unwrap_or(0)
    }
}

/// A percentile over the most recent samples (a ring of `cap`), recomputed every `every` new
/// samples.
#[derive(Debug, Clone)]
pub struct Sampler {
    ring: Vec<u64>,
    cap: usize,
    next: usize,
    fresh: usize,
    every: usize,
    pct: f64,
    value: Option<u64>,
}

impl Sampler {
    pub fn new(pct: f64, cap: usize, every: usize) -> Self {
        Sampler {
            ring: Vec::new(),
            cap,
            next: 0,
            fresh: 0,
            every,
            pct,
            value: None,
        }
    }

    pub fn push(&mut self, x: u64) {
        if self.ring.len() < self.cap {
            self.ring.push(x);
        } else {
            self.ring[self.next] = x;
            self.next = (self.next + 1) % self.cap;
        }
        self.fresh += 1;
        if self.fresh >= self.every || self.value.is_none() && self.ring.len() >= 32 {
            self.fresh = 0;
            self.value = Some(nearest_rank(&self.ring, self.pct));
        }
    }

    /// The percentile, once 32 samples are in.
    pub fn value(&self) -> Option<u64> {
        self.value
    }
}

/// The nearest-rank percentile (`pct` in (0, 100]) of `xs`.
pub fn nearest_rank(xs: &[u64], pct: f64) -> u64 {
    let mut v = xs.to_vec();
    let rank = ((pct / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    *v.select_nth_unstable(rank - 1).1
}

/// The order of a per-block cache's slots.
pub trait PageOrder {
    fn insert(&mut self, slot: u32, key: u64, pos: usize);
    fn hit(&mut self, slot: u32, key: u64, pos: usize);
    /// Choose a victim and remove it.
    fn evict(&mut self) -> u32;
    /// Remove a slot (its block was overwritten).
    fn remove(&mut self, slot: u32);
    /// Whether to leave the block out of the cache altogether (Belady's bypass).
    fn bypass(&self, _pos: usize, _full: bool) -> bool {
        false
    }
}

impl<E: Eviction> PageOrder for E {
    fn insert(&mut self, slot: u32, _key: u64, _pos: usize) {
        Eviction::insert(self, slot);
    }
    fn hit(&mut self, slot: u32, _key: u64, _pos: usize) {
        Eviction::touch(self, slot);
    }
    fn evict(&mut self) -> u32 {
        let v = self.victim().expect("evict from a full cache");
        Eviction::remove(self, v);
        v
    }
    fn remove(&mut self, slot: u32) {
        Eviction::remove(self, slot);
    }
}

/// Segmented LRU with two segments (S2LRU): new units enter the probationary segment; a hit
/// there promotes to the protected segment's front; protected overflow (beyond
/// `protected_max`) is demoted to the probationary front; victims come from the probationary
/// back (the protected back when probation is empty).
#[derive(Debug, Default)]
pub struct S2lru {
    probation: DList,
    protected: DList,
    in_protected: Vec<bool>,
    protected_max: usize,
}

impl S2lru {
    pub fn new(protected_max: usize) -> Self {
        S2lru {
            protected_max: protected_max.max(1),
            ..Default::default()
        }
    }

    fn mark(&mut self, unit: u32, p: bool) {
        let i = unit as usize;
        if i >= self.in_protected.len() {
            self.in_protected
                .resize((i + 1).max(2 * self.in_protected.len()), false);
        }
        self.in_protected[i] = p;
    }
}

impl Eviction for S2lru {
    const REORDERS_ON_TOUCH: bool = true;
    fn insert(&mut self, unit: u32) {
        self.mark(unit, false);
        self.probation.push_front(unit);
    }
    fn touch(&mut self, unit: u32) {
        if self.in_protected[unit as usize] {
            self.protected.move_to_front(unit);
            return;
        }
        self.probation.unlink(unit);
        self.protected.push_front(unit);
        self.mark(unit, true);
        if self.protected.len() > self.protected_max {
            let d = self.protected.back().unwrap();
            self.protected.unlink(d);
            self.probation.push_front(d);
            self.mark(d, false);
        }
    }
    fn victim(&self) -> Option<u32> {
        self.probation.back().or_else(|| self.protected.back())
    }
    fn remove(&mut self, unit: u32) {
        if self.in_protected[unit as usize] {
            self.protected.unlink(unit);
        } else {
            self.probation.unlink(unit);
        }
    }
    fn len(&self) -> usize {
        self.probation.len() + self.protected.len()
    }
}

/// Multi-Queue (Zhou, Philbin and Li, USENIX ATC '01) with its usual constants: 8 LRU queues,
/// a block with f accesses lives in queue min(floor(log2 f), 7); each access sets its expiry
/// to now + `life`; a queue's LRU block past its expiry is demoted one queue; the victim is the
/// LRU block of the lowest non-empty queue; evicted blocks' counts are remembered in Qout
/// (4x the cache) and restored when they return. Time is the block access count; `life` is
/// the cache size in blocks (the paper tunes it to the peak temporal distance).
pub struct Mq {
    queues: Vec<DList>,
    queue_of: Vec<u8>,
    freq: Vec<u32>,
    expire: Vec<u64>,
    key_of: Vec<u64>,
    qout: FastMap<u64, (u32, u64)>,
    qout_fifo: VecDeque<(u64, u64)>,
    qout_cap: usize,
    seq: u64,
    life: u64,
    now: u64,
}

const MQ_QUEUES: usize = 8;

impl Mq {
    pub fn new(capacity: usize) -> Self {
        Mq {
            queues: (0..MQ_QUEUES).map(|_| DList::new()).collect(),
            queue_of: vec![0; capacity],
            freq: vec![0; capacity],
            expire: vec![0; capacity],
            key_of: vec![0; capacity],
            qout: new_map(),
            qout_fifo: VecDeque::new(),
            qout_cap: 4 * capacity,
            seq: 0,
            life: capacity as u64,
            now: 0,
        }
    }

    fn place(&mut self, slot: u32) {
        let f = self.freq[slot as usize];
        let q = (31 - f.max(1).leading_zeros()).min(MQ_QUEUES as u32 - 1) as usize;
        self.queues[q].push_front(slot);
        self.queue_of[slot as usize] = q as u8;
        self.expire[slot as usize] = self.now + self.life;
    }

    fn adjust(&mut self) {
        for k in 1..MQ_QUEUES {
            if let Some(b) = self.queues[k].back() {
                if self.expire[b as usize] < self.now {
                    self.queues[k].unlink(b);
                    self.queues[k - 1].push_front(b);
                    self.queue_of[b as usize] = (k - 1) as u8;
                    self.expire[b as usize] = self.now + self.life;
                }
            }
        }
    }
}

impl PageOrder for Mq {
    fn insert(&mut self, slot: u32, key: u64, pos: usize) {
        self.now = pos as u64;
        let f = self.qout.remove(&key).map_or(0, |e| e.0);
        self.freq[slot as usize] = f + 1;
        self.key_of[slot as usize] = key;
        self.place(slot);
        self.adjust();
    }
    fn hit(&mut self, slot: u32, _key: u64, pos: usize) {
        self.now = pos as u64;
        let s = slot as usize;
        self.queues[self.queue_of[s] as usize].unlink(slot);
        self.freq[s] = self.freq[s].saturating_add(1);
        self.place(slot);
        self.adjust();
    }
    fn evict(&mut self) -> u32 {
        let q = (0..MQ_QUEUES)
            .find(|&q| !self.queues[q].is_empty())
            .expect("evict from a full cache");
        let v = self.queues[q].back().unwrap();
        self.queues[q].unlink(v);
        self.seq += 1;
        let key = self.key_of[v as usize];
        self.qout.insert(key, (self.freq[v as usize], self.seq));
        self.qout_fifo.push_back((key, self.seq));
        while self.qout.len() > self.qout_cap {
            let (k, s) = self.qout_fifo.pop_front().unwrap();
            if self.qout.get(&k).is_some_and(|e| e.1 == s) {
                self.qout.remove(&k);
            }
        }
        if self.qout_fifo.len() > 2 * self.qout_cap + 16 {
            let m = &self.qout;
            self.qout_fifo
                .retain(|(k, s)| m.get(k).is_some_and(|e| e.1 == *s));
        }
        v
    }
    fn remove(&mut self, slot: u32) {
        self.queues[self.queue_of[slot as usize] as usize].unlink(slot);
    }
}

pub const NEVER: u64 = u64::MAX;

/// For each block access, the position of the next access of the same block if it is a read;
/// NEVER if the next access is a write (the cached copy would be overwritten unread) or there
/// is none. Accesses `served` by the RAM cache in front ([`ram_served`]) never reach the flash
/// cache: they are skipped (an empty `served`: none are).
pub fn next_reads(trace: &BlockTrace, served: &[bool]) -> Vec<u64> {
    let acc: Vec<(u64, bool)> = trace.accesses().collect();
    let mut next = vec![NEVER; acc.len()];
    let mut seen: FastMap<u64, (usize, bool)> = new_map();
    for i in (0..acc.len()).rev() {
        if served.get(i) == Some(&true) {
            continue;
        }
        let (p, w) = acc[i];
        if let Some(&(j, jw)) = seen.get(&p) {
            if !jw {
                next[i] = j as u64;
            }
        }
        seen.insert(p, (i, w));
    }
    next
}

/// For each block access, whether the storage system's RAM cache in front of the flash cache
/// serves it: an LRU of `ram_pages` blocks that every accessed block enters (a read's block
/// from below, a write's new data), serving the reads of blocks it holds; writes still reach
/// the flash cache (write-through, as without it). It depends on the trace only, so every
/// policy sees the same stream below it. Empty for `ram_pages` 0.
pub fn ram_served(trace: &BlockTrace, ram_pages: usize) -> Vec<bool> {
    if ram_pages == 0 {
        return Vec::new();
    }
    let mut served = Vec::with_capacity(trace.n_accesses());
    let mut slot_of: FastMap<u64, u32> = new_map();
    let mut page_of: Vec<u64> = Vec::with_capacity(ram_pages);
    let mut order = Lru::new();
    for (p, w) in trace.accesses() {
        if let Some(&s) = slot_of.get(&p) {
            order.touch(s);
            served.push(!w);
            continue;
        }
        served.push(false);
        let s = if page_of.len() < ram_pages {
            page_of.push(p);
            (page_of.len() - 1) as u32
        } else {
            let s = order.victim().expect("a full RAM cache has a victim");
            Eviction::remove(&mut order, s);
            slot_of.remove(&page_of[s as usize]);
            page_of[s as usize] = p;
            s
        };
        slot_of.insert(p, s);
        Eviction::insert(&mut order, s);
    }
    served
}

/// Belady's MIN with bypass (the paper's "perfect bypass"): evict the cached block read
/// farthest in the future; a block whose next read is farther than every cached block's (or
/// never comes before an overwrite) is not cached at all.
pub struct Belady {
    next: Vec<u64>,
    set: BTreeSet<(u64, u32)>,
    cur: Vec<u64>,
}

impl Belady {
    pub fn new(next: Vec<u64>, capacity: usize) -> Self {
        Belady {
            next,
            set: BTreeSet::new(),
            cur: vec![NEVER; capacity],
        }
    }
}

impl PageOrder for Belady {
    fn insert(&mut self, slot: u32, _key: u64, pos: usize) {
        let n = self.next[pos];
        self.cur[slot as usize] = n;
        self.set.insert((n, slot));
    }
    fn hit(&mut self, slot: u32, key: u64, pos: usize) {
        self.remove(slot);
        self.insert(slot, key, pos);
    }
    fn evict(&mut self) -> u32 {
        self.set.pop_last().expect("evict from a full cache").1
    }
    fn remove(&mut self, slot: u32) {
        self.set.remove(&(self.cur[slot as usize], slot));
    }
    fn bypass(&self, pos: usize, full: bool) -> bool {
        let n = self.next[pos];
        n == NEVER || full && self.set.last().is_some_and(|&(far, _)| n >= far)
    }
}

/// A per-block cache: blocks live in `capacity` slots (the FTL's logical pages); a new block
/// takes a free slot or the victim's.
pub struct PerBlock<O: PageOrder> {
    order: O,
    index: FastMap<u64, u32>,
    keys: Vec<u64>,
    free: Vec<u32>,
    used: u32,
    capacity: u32,
    ftl: Ftl,
    gate: Gate,
    ghost: Ghost,
    c: FlashCounters,
}

impl<O: PageOrder> PerBlock<O> {
    pub fn new(order: O, cfg: &BlockConfig) -> Self {
        let capacity = cfg.cache_pages();
        let ftl = Ftl::new(capacity, cfg.pages_per_erase_block(), cfg.op);
        let gate = cfg.gate(ftl.erase_blocks());
        PerBlock {
            order,
            index: new_map(),
            keys: vec![0; capacity as usize],
            free: Vec::new(),
            used: 0,
            capacity,
            ftl,
            gate,
            ghost: Ghost::new(cfg.ghost_blocks(false)),
            c: FlashCounters::default(),
        }
    }

    fn insert(&mut self, page: u64, pos: usize, kind: InsertKind, count: u32) {
        if !self.gate.admit(kind, count, self.ftl.erasures) {
            self.c.rejected_pages += 1;
            return;
        }
        let full = self.free.is_empty() && self.used == self.capacity;
        if self.order.bypass(pos, full) {
            self.c.bypassed_pages += 1;
            return;
        }
        let slot = if let Some(s) = self.free.pop() {
            s
        } else if self.used < self.capacity {
            self.used += 1;
            self.used - 1
        } else {
            let v = self.order.evict();
            self.index.remove(&self.keys[v as usize]);
            self.c.evictions += 1;
            v
        };
        self.keys[slot as usize] = page;
        self.index.insert(page, slot);
        self.ftl.write(slot);
        self.order.insert(slot, page, pos);
        self.c.inserted_pages += 1;
    }
}

impl<O: PageOrder> BlockCache for PerBlock<O> {
    fn access(&mut self, page: u64, write: bool, pos: usize) -> bool {
        let count = self.ghost.touch(page);
        if !write {
            self.c.page_reads += 1;
            if let Some(&s) = self.index.get(&page) {
                self.order.hit(s, page, pos);
                self.c.page_read_hits += 1;
                self.c.flash_read_pages += 1;
                return true;
            }
            self.insert(page, pos, InsertKind::ReadMiss, count);
            false
        } else {
            self.c.page_writes += 1;
            let cached = match self.index.remove(&page) {
                Some(s) => {
                    self.order.remove(s);
                    self.ftl.trim(s);
                    self.free.push(s);
                    true
                }
                None => false,
            };
            // as in the container caches (tire.rs): new data of a cached block is an overwrite
            let kind = if cached {
                InsertKind::Overwrite
            } else {
                InsertKind::ClientWrite
            };
            self.insert(page, pos, kind, count);
            cached
        }
    }
    fn tick(&mut self, now_s: f64) {
        self.gate.tick(now_s, self.ftl.erasures);
    }
    /// The cache's counts with the FTL's writes and erasures.
    fn counters(&self) -> FlashCounters {
        FlashCounters {
            host_write_pages: self.ftl.host_writes,
            internal_write_pages: self.ftl.gc_writes,
            erasures: self.ftl.erasures,
            ..self.c.clone()
        }
    }
    fn erase_blocks(&self) -> u32 {
        self.ftl.erase_blocks()
    }
    fn gate_mut(&mut self) -> &mut Gate {
        &mut self.gate
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
        tire: cfg.tire_epbpd.is_some(),
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

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
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
    fn s2lru_hand_example() {
        let mut s = S2lru::new(1);
        for u in 0..3 {
            Eviction::insert(&mut s, u);
        }
        // probation (back..front): 0 1 2. Hit 0 -> protected [0].
        Eviction::touch(&mut s, 0);
        assert_eq!(s.victim(), Some(1));
        // Hit 1 -> protected overflows (max 1): 0 demoted to probation front.
        Eviction::touch(&mut s, 1);
        assert_eq!(s.probation.iter_from_back().collect::<Vec<_>>(), vec![2, 0]);
        assert_eq!(s.protected.iter_from_back().collect::<Vec<_>>(), vec![1]);
        assert_eq!(s.len(), 3);
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
    fn ghost_counts_and_halving() {
        let mut g = Ghost::new(1000);
        assert_eq!(g.touch(1), 0);
        assert_eq!(g.touch(1), 1);
        assert_eq!(g.touch(2), 0);
        assert_eq!(g.touch(1), 2);
        assert_eq!((g.count(1), g.count(2), g.count(3)), (3, 1, 0));
        // Never below the true count (conservative update only overestimates on collisions).
        let mut x = 9u64;
        let mut truth = std::collections::HashMap::new();
        for _ in 0..900 {
            x = splitmix64(x);
            let k = x % 300;
            let c = truth.entry(k).or_insert(0u32);
            assert!(g.touch(k + 10) >= *c);
            *c += 1;
        }
        // 1000 accesses in all (4 + 900 < 1000: no halving yet); 96 more halve every count.
        let before = g.count(1);
        for k in 0..96 {
            g.touch(1_000_000 + k);
        }
        assert_eq!(g.count(1), before / 2);
        let mut s = Ghost::new(10);
        for _ in 0..300 {
            s.touch(5);
        }
        assert!(s.count(5) <= 20); // halved every 10 accesses: recent accesses only
        assert_eq!(Ghost::new(0).touch(5), 0);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let xs: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&xs, 99.0), 99);
        assert_eq!(nearest_rank(&xs, 50.0), 50);
        assert_eq!(nearest_rank(&xs, 100.0), 100);
        assert_eq!(nearest_rank(&[5], 1.0), 5);
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
        c.tire_epbpd = Some(0.0);
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
