//! Block mode's policies ([`BlockPolicy`]) and configuration ([`BlockConfig`]) with its
//! validation.

use crate::core::config::{err, SimError};
use crate::core::hash::splitmix64;
use crate::pannier::settings;
use crate::pannier::tire::{Gate, TireConfig};

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

/// Block-mode configuration. Defaults are the paper's (Table 3 and §4.4), as
/// flashml/systems/pannier/settings.toml declares them ([`settings`]).
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
    pub lifespan_epbpd: Option<f64>,
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
    /// size (the paper's simulator, §4.3: an LRU of 5%); 0: none. See [`ram_served`](crate::pannier::trace::ram_served).
    pub ram_pct: f64,
}

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig {
            cache_bytes: 1 << 30,
            page_bytes: 4096,
            container_bytes: 2 << 20,
            erase_bytes: None,
            op: settings::OP,
            lifespan_epbpd: None,
            tire_slack: settings::TIRE_SLACK,
            tire_steps: settings::TIRE_STEPS as u32,
            quantum_s: settings::QUANTUM_S,
            promotion_pct: settings::PROMOTION_PCT,
            sample_pct: settings::SAMPLE_PCT,
            lifetime_pct: settings::LIFETIME_PCT,
            ghost_factor: settings::GHOST_FACTOR,
            survival: true,
            aging: true,
            invalidation_aware: true,
            packing: true,
            fixed_lifetime: None,
            open_in_cache: false,
            ram_pct: settings::RAM_PCT,
        }
    }
}

impl BlockConfig {
    /// The checks the RAM cache's pass ([`ram_served`](crate::pannier::trace::ram_served) over [`BlockConfig::ram_pages`])
    /// needs: the block size and the RAM cache's size (part of [`BlockConfig::validate`]).
    pub fn validate_ram(&self) -> Result<(), SimError> {
        if self.page_bytes == 0 {
            return err("block size must be > 0 bytes");
        }
        if let Some(why) = settings::ram_pct_problem(self.ram_pct) {
            return err(format!(
                "RAM cache size must be {why} of the flash cache, got {}",
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
        let bound = |name: &str, why: Option<&str>, v: f64| match why {
            Some(w) => err(format!("{name} must be {w}, got {v}")),
            None => Ok(()),
        };
        bound("over-provisioning", settings::op_problem(self.op), self.op)?;
        bound(
            "promotion threshold",
            settings::promotion_pct_problem(self.promotion_pct),
            self.promotion_pct,
        )?;
        bound(
            "sample share",
            settings::sample_pct_problem(self.sample_pct),
            self.sample_pct,
        )?;
        bound(
            "lifetime percentile",
            settings::lifetime_pct_problem(self.lifetime_pct),
            self.lifetime_pct,
        )?;
        bound(
            "ghost factor",
            settings::ghost_factor_problem(self.ghost_factor),
            self.ghost_factor,
        )?;
        if self.fixed_lifetime == Some(0) {
            return err("a fixed lifetime must be >= 1 insertion");
        }
        if let Some(e) = self.lifespan_epbpd {
            if let Some(why) = settings::lifespan_epbpd_problem(e) {
                let none = if e > 0.0 {
                    ""
                } else {
                    ": with no erasures allowed nothing could ever be cached"
                };
                return err(format!("lifespan target must be {why}, got {e}{none}"));
            }
            bound(
                "TIRE slack K",
                settings::tire_slack_problem(self.tire_slack),
                self.tire_slack,
            )?;
            if let Some(why) = settings::tire_steps_problem(self.tire_steps.into()) {
                return err(format!("TIRE steps must be {why}, got {}", self.tire_steps));
            }
            bound(
                "TIRE quantum",
                settings::quantum_s_problem(self.quantum_s),
                self.quantum_s,
            )?;
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
            self.lifespan_epbpd.unwrap_or(0.0),
            erase_blocks,
            self.tire_slack,
            self.tire_steps,
            self.quantum_s,
        )
    }

    pub fn gate(&self, erase_blocks: u32) -> Gate {
        Gate::new(
            self.lifespan_epbpd.map(|_| self.tire(erase_blocks)),
            self.quantum_s,
        )
    }

    /// The ghost cache's size in blocks: 0 (off) when nothing reads its counts (no TIRE, and
    /// no hot/cold packing).
    pub fn ghost_blocks(&self, packs: bool) -> usize {
        if self.lifespan_epbpd.is_none() && !(packs && self.packing) {
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
