//! The state every container policy shares ([`Store`]): the block index, the containers with
//! their invalidation and access state, the open containers, the ghost cache, the sampled
//! distributions (lifetime, access threshold, hot/cold packing) and TIRE's gate.

use crate::core::hash::{new_map, FastMap};
use crate::core::list::NIL;
use crate::pannier::blocks::FlashCounters;
use crate::pannier::config::BlockConfig;
use crate::pannier::sketch::{Ghost, Sampler};
use crate::pannier::tire::Gate;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    #[default]
    Free,
    Open,
    Sealed,
}

#[derive(Debug, Clone, Default)]
pub struct Container {
    pub keys: Vec<u64>,
    pub valid: Vec<bool>,
    pub freq: Vec<u8>,
    pub n_valid: u32,
    /// Valid blocks with frequency > 0 (the access bitmap's count).
    pub n_accessed: u32,
    pub n_invalid: u32,
    /// Read hits since the container entered its current queue (promotion).
    pub hits: u32,
    pub seal_time: u64,
    pub seal_seq: u64,
    pub decay_point: u64,
    pub survival: u64,
    pub state: State,
    /// Blocks copied forward into it (internal writes when sealed).
    pub n_copied: u32,
    /// The open-container slot it was packed in (Pannier: `packed_hot`; RIPQ+: its section).
    pub open_slot: u8,
}

/// Whether Pannier's open slot `slot` packs hot blocks (slots 1 and 3; 0 and 2 are cold).
pub(super) fn packed_hot(slot: u8) -> bool {
    slot % 2 == 1
}

impl Container {
    pub(super) fn clear(&mut self) {
        self.keys.clear();
        self.valid.clear();
        self.freq.clear();
        self.n_valid = 0;
        self.n_accessed = 0;
        self.n_invalid = 0;
        self.hits = 0;
        self.n_copied = 0;
        self.state = State::Free;
    }

    /// Valid blocks with frequency > 0.
    pub fn hot_blocks(&self) -> u32 {
        self.n_accessed
    }
}

/// Open container slots of Pannier (and LRU+/S2LRU+, which use the first): insertion cold/hot,
/// reinsertion cold/hot. A policy may ask for more (`ContainerPolicy::open_slots`).
pub(super) const OPEN: usize = 4;

/// The state every container policy shares.
pub struct Store {
    pub ppc: u32,
    /// Flash capacity in containers.
    pub slots: u32,
    pub containers: Vec<Container>,
    pub(super) free_ids: Vec<u32>,
    pub sealed: u32,
    pub(super) index: FastMap<u64, u64>,
    pub(super) open: Vec<u32>,
    pub now: u64,
    pub(super) seal_seq: u64,
    pub ghost: Ghost,
    pub gate: Gate,
    pub c: FlashCounters,
    pub(super) packing: bool,
    pub(super) cfg: BlockConfig,
    pub(super) last_access: FastMap<u64, u64>,
    pub(super) reuse: Sampler,
    pub(super) access_pct: Sampler,
    pub(super) counts: Sampler,
    pub(super) pending: Vec<u32>,
    pub(super) sealing: bool,
}

pub(super) fn loc(id: u32, slot: u32) -> u64 {
    (id as u64) << 32 | slot as u64
}

pub(super) fn unloc(l: u64) -> (u32, u32) {
    ((l >> 32) as u32, l as u32)
}

impl Store {
    pub(super) fn new(cfg: &BlockConfig, packing: bool) -> Self {
        let slots = cfg.containers();
        Store {
            ppc: cfg.pages_per_container(),
            slots,
            containers: Vec::new(),
            free_ids: Vec::new(),
            sealed: 0,
            index: new_map(),
            open: vec![NIL; OPEN],
            now: 0,
            seal_seq: 0,
            ghost: Ghost::new(cfg.ghost_blocks(packing)),
            gate: cfg.gate(slots * cfg.erase_blocks_per_container() as u32),
            c: FlashCounters::default(),
            packing,
            cfg: cfg.clone(),
            last_access: new_map(),
            reuse: Sampler::new(cfg.lifetime_pct, 1 << 14, 1024),
            access_pct: Sampler::new(50.0, 1 << 12, 64),
            counts: Sampler::new(50.0, 1 << 12, 256),
            pending: Vec::new(),
            sealing: false,
        }
    }

    /// The lifetime in insertions: the sampled percentile of reuse distances.
    pub fn lifetime(&self) -> u64 {
        self.cfg
            .fixed_lifetime
            .or(self.reuse.value())
            .unwrap_or(self.slots as u64 * self.ppc as u64)
            .max(1)
    }

    /// The refill threshold: the median sampled container access share, in per-mille.
    pub(super) fn access_threshold(&self) -> u64 {
        self.access_pct.value().unwrap_or(1001)
    }

    pub fn access_permille(&self, id: u32) -> u64 {
        self.containers[id as usize].n_accessed as u64 * 1000 / self.ppc as u64
    }

    /// now + lifetime x the container's valid (not invalidated) share.
    pub fn survival_from_now(&self, id: u32) -> u64 {
        let c = &self.containers[id as usize];
        self.now + self.lifetime() * (self.ppc - c.n_invalid.min(self.ppc)) as u64 / self.ppc as u64
    }

    /// AgeContainer: every block's frequency drops by ceil((now - decay) / lifetime).
    pub fn age(&mut self, id: u32) {
        let life = self.lifetime();
        let now = self.now;
        let c = &mut self.containers[id as usize];
        if c.decay_point >= now {
            return;
        }
        let step = (now - c.decay_point).div_ceil(life).min(255) as u8;
        let mut accessed = 0;
        for i in 0..c.freq.len() {
            c.freq[i] = c.freq[i].saturating_sub(step);
            accessed += (c.valid[i] && c.freq[i] > 0) as u32;
        }
        c.n_accessed = accessed;
        c.decay_point = now + life;
    }

    pub(super) fn alloc(&mut self, open_slot: usize) -> u32 {
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None => {
                self.containers.push(Container::default());
                (self.containers.len() - 1) as u32
            }
        };
        let ppc = self.ppc as usize;
        let c = &mut self.containers[id as usize];
        c.keys.reserve(ppc);
        c.state = State::Open;
        c.open_slot = open_slot as u8;
        id
    }

    /// Open containers holding blocks (in RAM).
    pub fn open_in_use(&self) -> u32 {
        self.open.iter().filter(|&&id| id != NIL).count() as u32
    }

    /// The containers of cache the RAM open containers take (`open_in_cache`), else 0.
    pub(super) fn ram_charge(&self) -> u32 {
        if self.cfg.open_in_cache {
            self.open_in_use()
        } else {
            0
        }
    }

    pub fn hot(&self, count: u32) -> bool {
        self.packing && count as u64 > self.counts.value().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::unloc;
    use crate::pannier::container::tests::{pannier, read};

    #[test]
    fn aging_steps_by_elapsed_lifetimes() {
        let mut c = pannier(8, 4, 10);
        for p in 0..4 {
            read(&mut c, p);
        }
        let id = unloc(c.st.index[&0]).0;
        for _ in 0..5 {
            read(&mut c, 0);
        }
        read(&mut c, 1);
        read(&mut c, 1);
        assert_eq!(c.st.containers[id as usize].freq, vec![5, 2, 0, 0]);
        // decay point = 4 + 10 = 14; move the clock to 35: ceil((35 - 14) / 10) = 3 steps.
        c.st.now = 35;
        c.st.age(id);
        let k = &c.st.containers[id as usize];
        assert_eq!(k.freq, vec![2, 0, 0, 0]);
        assert_eq!(k.n_accessed, 1);
        assert_eq!(k.decay_point, 45);
        // Not yet at the new decay point: no change.
        c.st.now = 45;
        c.st.age(id);
        assert_eq!(c.st.containers[id as usize].freq, vec![2, 0, 0, 0]);
    }
}
