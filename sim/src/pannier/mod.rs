//! Container caches (Pannier, Middleware '15): blocks are packed into RAM open containers,
//! sealed when full and written to flash whole (one erase block each), evicted and erased
//! whole. Overwrites invalidate the sealed copy (the new data goes to an open container).
//!
//! The shared machinery is [`Store`] (block index, containers with invalidation/access state
//! and 8-bit block counters, open containers, the ghost cache, the sampled distributions,
//! TIRE); the eviction order is a [`ContainerPolicy`]:
//!
//! * [`LruPlus`]: container LRU (from Nitro): any hit moves the container to the front.
//! * [`S2lruPlus`]: S2LRU at container granularity: a hit in the cold queue promotes.
//! * [`PannierPolicy`]: S2LRU* (promotion after `promotion_pct`% of the container's blocks in
//!   accesses) plus the survival queue (Fig. 5): on seal, decay point = survival time = seal
//!   time + lifetime; on invalidation, survival = now + lifetime x valid share; on access,
//!   aging and survival renewal; on eviction, an expired survival-queue top has its blocks
//!   with frequency > 0 copied forward (through TIRE and the hot/cold packing), otherwise the
//!   cold queue's LRU container goes, its blocks with frequency > 0 copied forward the same
//!   way (the paper's Reinsertion paragraph; see `PannierPolicy::victim`).
//!
//! Choices where the paper is silent (stated once, here):
//! * The clock (`now`) is +1 per client insertion attempt (a read miss or a write), whether
//!   or not admission lets it in; copy-forward does not advance it.
//! * A survival time expires when `survival <= now` (the paper: `<`), so a container
//!   invalidated to 100% is evicted at the very next eviction.
//! * An expired container whose valid blocks are all still accessed (frequency > 0) is not
//!   copied forward whole (that would free nothing): its survival is renewed and the cold LRU
//!   goes instead. A cold-LRU victim whose valid blocks are all accessed is dropped whole.
//! * The lifetime is the percentile of sampled reuse distances *of hits* (re-accesses of
//!   blocks still in the cache): over all re-accesses, a heavy-tailed trace's 99th percentile
//!   is many cache turnovers, and no container would ever outlive its survival time.
//! * The lifetime starts at one cache turnover (the cache's blocks in insertions) until 32
//!   reuse distances are sampled; the access threshold starts above 100% (no refill) until 32
//!   containers are sampled; a block is packed hot when its ghost count exceeds the median of
//!   sampled counts.
//! * Reads served from an open (RAM) container are hits but not flash reads. The open
//!   containers are RAM beside the flash (the paper's prototype), unless `open_in_cache`
//!   charges them to the cache size (sealed + open <= the cache's containers), so that a
//!   policy with more open containers (Pannier's 4, RIPQ+'s 8) gets no more cache than LRU+
//!   (1) or the per-block policies (none).
//! * Open containers: 4 for Pannier (insertion and reinsertion, each hot and cold; the
//!   paper's clean/dirty split is not modelled: writes are write-through), 1 for LRU+/S2LRU+.

pub mod blocks;
pub mod config;
pub mod ftl;
pub mod per_block;
pub mod ripq;
pub mod sketch;
pub mod tire;
pub mod trace;

use std::collections::BTreeSet;

use crate::core::hash::{new_map, FastMap};
use crate::core::list::{DList, NIL};
use crate::pannier::blocks::{BlockCache, FlashCounters};
use crate::pannier::config::BlockConfig;
use crate::pannier::sketch::{Ghost, Sampler};
use crate::pannier::tire::{Gate, InsertKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    LruPlus,
    S2lruPlus,
    RipqPlus,
    Pannier,
}

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
fn packed_hot(slot: u8) -> bool {
    slot % 2 == 1
}

impl Container {
    fn clear(&mut self) {
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
const OPEN: usize = 4;

/// The state every container policy shares.
pub struct Store {
    pub ppc: u32,
    /// Flash capacity in containers.
    pub slots: u32,
    pub containers: Vec<Container>,
    free_ids: Vec<u32>,
    pub sealed: u32,
    index: FastMap<u64, u64>,
    open: Vec<u32>,
    pub now: u64,
    seal_seq: u64,
    pub ghost: Ghost,
    pub gate: Gate,
    pub c: FlashCounters,
    packing: bool,
    cfg: BlockConfig,
    last_access: FastMap<u64, u64>,
    reuse: Sampler,
    access_pct: Sampler,
    counts: Sampler,
    pending: Vec<u32>,
    sealing: bool,
}

fn loc(id: u32, slot: u32) -> u64 {
    (id as u64) << 32 | slot as u64
}

fn unloc(l: u64) -> (u32, u32) {
    ((l >> 32) as u32, l as u32)
}

impl Store {
    fn new(cfg: &BlockConfig, packing: bool) -> Self {
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
    fn access_threshold(&self) -> u64 {
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

    fn alloc(&mut self, open_slot: usize) -> u32 {
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
    fn ram_charge(&self) -> u32 {
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

/// A container eviction order.
pub trait ContainerPolicy {
    /// A container was sealed (written to flash).
    fn on_seal(&mut self, st: &mut Store, id: u32);
    /// A read hit on a sealed container; `accessed_before` = its accessed blocks before.
    fn on_hit(&mut self, st: &mut Store, id: u32, accessed_before: u32);
    /// A block of a sealed container was invalidated.
    fn on_invalidate(&mut self, _st: &mut Store, _id: u32) {}
    /// Choose the next victim and take it out of the order; true: copy its valid blocks forward
    /// (those `copy_slot` places; by default the ones with frequency > 0).
    fn victim(&mut self, st: &mut Store) -> (u32, bool);
    /// Open containers the policy packs into (at least Pannier's 4 slots are kept).
    fn open_slots(&self) -> usize {
        OPEN
    }
    /// The open slot a newly inserted block goes to (default: cold 0 / hot 1 by packing).
    fn insert_slot(&self, st: &Store, count: u32) -> usize {
        st.hot(count) as usize
    }
    /// Where a valid block of a victim chosen for copy-forward goes (None: dropped); default:
    /// blocks with frequency > 0, to the reinsertion slots (cold 2 / hot 3 by packing).
    fn copy_slot(&mut self, st: &Store, _key: u64, freq: u8, count: u32) -> Option<usize> {
        (freq > 0).then(|| 2 + st.hot(count) as usize)
    }
    /// A read hit on block `page` of sealed container `id` (before `on_hit`).
    fn on_block_hit(&mut self, _st: &Store, _page: u64, _id: u32) {}
    /// Block `page` was overwritten (its cached copy invalidated).
    fn on_block_invalidate(&mut self, _page: u64) {}
}

/// Container LRU.
#[derive(Default)]
pub struct LruPlus {
    list: DList,
}

impl ContainerPolicy for LruPlus {
    fn on_seal(&mut self, _st: &mut Store, id: u32) {
        self.list.push_front(id);
    }
    fn on_hit(&mut self, _st: &mut Store, id: u32, _: u32) {
        self.list.move_to_front(id);
    }
    fn victim(&mut self, _st: &mut Store) -> (u32, bool) {
        let v = self.list.back().expect("a sealed container to evict");
        self.list.unlink(v);
        (v, false)
    }
}

/// Two container queues: hot (protected) and cold (probationary), the hot one at most
/// `hot_max` containers; a cold container reaching `promote_at` hits moves to the hot front;
/// hot overflow goes to the cold front.
pub struct Queues {
    pub hot: DList,
    pub cold: DList,
    in_hot: Vec<bool>,
    hot_max: usize,
    promote_at: u32,
}

impl Queues {
    pub fn new(hot_max: usize, promote_at: u32) -> Self {
        Queues {
            hot: DList::new(),
            cold: DList::new(),
            in_hot: Vec::new(),
            hot_max: hot_max.max(1),
            promote_at: promote_at.max(1),
        }
    }

    fn set_hot(&mut self, id: u32, h: bool) {
        let i = id as usize;
        if i >= self.in_hot.len() {
            self.in_hot.resize(i + 1, false);
        }
        self.in_hot[i] = h;
    }

    pub fn is_hot(&self, id: u32) -> bool {
        self.in_hot.get(id as usize).copied().unwrap_or(false)
    }

    fn push_hot(&mut self, st: &mut Store, id: u32) {
        self.hot.push_front(id);
        self.set_hot(id, true);
        st.containers[id as usize].hits = 0;
        if self.hot.len() > self.hot_max {
            let d = self.hot.back().unwrap();
            self.hot.unlink(d);
            self.push_cold(st, d);
        }
    }

    fn push_cold(&mut self, st: &mut Store, id: u32) {
        self.cold.push_front(id);
        self.set_hot(id, false);
        st.containers[id as usize].hits = 0;
    }

    fn insert(&mut self, st: &mut Store, id: u32, hot: bool) {
        if hot {
            self.push_hot(st, id)
        } else {
            self.push_cold(st, id)
        }
    }

    fn hit(&mut self, st: &mut Store, id: u32) {
        if self.is_hot(id) {
            self.hot.move_to_front(id);
            return;
        }
        let c = &mut st.containers[id as usize];
        c.hits += 1;
        if c.hits >= self.promote_at {
            self.cold.unlink(id);
            self.push_hot(st, id);
        } else {
            self.cold.move_to_front(id);
        }
    }

    fn remove(&mut self, id: u32) {
        if self.is_hot(id) {
            self.hot.unlink(id);
        } else {
            self.cold.unlink(id);
        }
    }

    /// The cold queue's LRU container (the hot queue's when cold is empty).
    fn lru(&self) -> u32 {
        self.cold
            .back()
            .or_else(|| self.hot.back())
            .expect("a sealed container to evict")
    }
}

/// S2LRU+: S2LRU over containers, promotion on the first hit.
pub struct S2lruPlus {
    q: Queues,
}

impl ContainerPolicy for S2lruPlus {
    fn on_seal(&mut self, st: &mut Store, id: u32) {
        self.q.insert(st, id, false);
    }
    fn on_hit(&mut self, st: &mut Store, id: u32, _: u32) {
        self.q.hit(st, id);
    }
    fn victim(&mut self, _st: &mut Store) -> (u32, bool) {
        let v = self.q.lru();
        self.q.remove(v);
        (v, false)
    }
}

/// Pannier: S2LRU* + the survival queue, aging and invalidation-awareness (each can be
/// switched off for ablations).
pub struct PannierPolicy {
    pub q: Queues,
    pub survival: BTreeSet<(u64, u32)>,
    use_survival: bool,
    aging: bool,
    invalidation_aware: bool,
}

impl PannierPolicy {
    pub fn new(cfg: &BlockConfig) -> Self {
        let ppc = cfg.pages_per_container();
        let promote_at = (cfg.promotion_pct / 100.0 * ppc as f64).ceil() as u32;
        PannierPolicy {
            q: Queues::new(cfg.containers() as usize / 2, promote_at),
            survival: BTreeSet::new(),
            use_survival: cfg.survival,
            aging: cfg.aging,
            invalidation_aware: cfg.invalidation_aware,
        }
    }

    fn set_survival(&mut self, st: &mut Store, id: u32, t: u64) {
        let c = &mut st.containers[id as usize];
        if self.use_survival {
            self.survival.remove(&(c.survival, id));
            self.survival.insert((t, id));
        }
        c.survival = t;
    }

    fn take(&mut self, st: &Store, id: u32) {
        self.q.remove(id);
        self.survival
            .remove(&(st.containers[id as usize].survival, id));
    }
}

impl ContainerPolicy for PannierPolicy {
    fn on_seal(&mut self, st: &mut Store, id: u32) {
        let life = st.lifetime();
        let c = &mut st.containers[id as usize];
        c.decay_point = c.seal_time + life;
        c.survival = c.seal_time + life;
        let hot = packed_hot(c.open_slot);
        if self.use_survival {
            self.survival.insert((c.survival, id));
        }
        self.q.insert(st, id, hot);
    }

    fn on_hit(&mut self, st: &mut Store, id: u32, accessed_before: u32) {
        self.q.hit(st, id);
        if self.aging {
            st.age(id);
        }
        let refill = st.access_permille(id) > st.access_threshold();
        if st.containers[id as usize].n_accessed > accessed_before || refill {
            let t = st.survival_from_now(id);
            self.set_survival(st, id, t);
        }
    }

    fn on_invalidate(&mut self, st: &mut Store, id: u32) {
        if self.invalidation_aware {
            let t = st.survival_from_now(id);
            self.set_survival(st, id, t);
        }
    }

    fn victim(&mut self, st: &mut Store) -> (u32, bool) {
        if let Some(&(_, top)) = self.survival.first().filter(|_| self.use_survival) {
            if self.aging {
                st.age(top);
            }
            let c = &st.containers[top as usize];
            if c.survival <= st.now {
                if copy_frees_space(st, top) {
                    self.take(st, top);
                    return (top, true);
                }
                let t = st.now + st.lifetime();
                self.set_survival(st, top, t);
            }
        }
        // The cold queue's LRU container. Its accessed blocks are copied forward too: the
        // paper's Reinsertion paragraph (§3.2: "When the cache is full and a container has
        // been selected for eviction, Pannier copies accessed blocks forward to new containers
        // according to the TIRE policy"), although Fig. 5's pseudo-code and the OnEvict text
        // show the copy on the survival path only. Without it, the lifetime is so long that
        // containers reach the cold LRU end long before their survival time expires, and their
        // accessed blocks are dropped. Exception (as on the survival path): when the blocks the
        // copy-forward would take (`hot_blocks`: valid with frequency > 0, `copy_slot`'s
        // predicate) fill a whole container, copying would free nothing (without this, web-like
        // live-locks), so the victim is dropped whole. The copies pass TIRE's gate as
        // reinsertions, as on the survival path (`evict_one`).
        let v = self.q.lru();
        self.take(st, v);
        (v, copy_frees_space(st, v))
    }
}

/// Whether copying the accessed blocks of victim `id` forward frees any space: they do not
/// fill a whole container.
fn copy_frees_space(st: &Store, id: u32) -> bool {
    st.containers[id as usize].hot_blocks() < st.ppc
}

/// A container cache: [`Store`] + a [`ContainerPolicy`].
pub struct ContainerCache<P: ContainerPolicy> {
    st: Store,
    policy: P,
    kind: ContainerKind,
}

impl ContainerCache<LruPlus> {
    pub fn lru_plus(cfg: &BlockConfig) -> Self {
        ContainerCache::with(ContainerKind::LruPlus, LruPlus::default(), cfg)
    }
}

impl ContainerCache<S2lruPlus> {
    pub fn s2lru_plus(cfg: &BlockConfig) -> Self {
        let q = Queues::new(cfg.containers() as usize / 2, 1);
        ContainerCache::with(ContainerKind::S2lruPlus, S2lruPlus { q }, cfg)
    }
}

impl ContainerCache<crate::pannier::ripq::RipqPlus> {
    pub fn ripq_plus(cfg: &BlockConfig) -> Self {
        let p = crate::pannier::ripq::RipqPlus::new(cfg.containers() as usize);
        ContainerCache::with(ContainerKind::RipqPlus, p, cfg)
    }
}

impl ContainerCache<PannierPolicy> {
    pub fn pannier(cfg: &BlockConfig) -> Self {
        ContainerCache::with(ContainerKind::Pannier, PannierPolicy::new(cfg), cfg)
    }
}

impl<P: ContainerPolicy> ContainerCache<P> {
    pub fn with(kind: ContainerKind, policy: P, cfg: &BlockConfig) -> Self {
        let pannier = kind == ContainerKind::Pannier;
        let mut st = Store::new(cfg, pannier && cfg.packing);
        st.open = vec![NIL; policy.open_slots().max(OPEN)];
        ContainerCache { st, policy, kind }
    }

    pub fn store(&self) -> &Store {
        &self.st
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }

    fn insert(&mut self, page: u64, kind: InsertKind, count: u32) {
        if !self.st.gate.admit(kind, count, self.st.c.erasures) {
            self.st.c.rejected_pages += 1;
            return;
        }
        self.st.c.inserted_pages += 1;
        if self.st.packing && self.st.cfg.sampled(page) {
            self.st.counts.push(count as u64);
        }
        let slot = self.policy.insert_slot(&self.st, count);
        self.add(page, slot, false, 0);
    }

    /// Put a block into open container `slot_kind`; seal it when full. Pannier's slots: 0/1
    /// insertion cold/hot, 2/3 reinsertion cold/hot.
    fn add(&mut self, page: u64, slot_kind: usize, copied: bool, freq: u8) {
        let mut id = self.st.open[slot_kind];
        if id == NIL {
            id = self.st.alloc(slot_kind);
            self.st.open[slot_kind] = id;
        }
        let c = &mut self.st.containers[id as usize];
        let slot = c.keys.len() as u32;
        c.n_copied += copied as u32;
        c.keys.push(page);
        c.valid.push(true);
        c.freq.push(freq);
        c.n_valid += 1;
        c.n_accessed += (freq > 0) as u32;
        let full = c.keys.len() as u32 == self.st.ppc;
        self.st.index.insert(page, loc(id, slot));
        if full {
            self.st.open[slot_kind] = NIL;
            self.seal(id);
        }
    }

    fn seal(&mut self, id: u32) {
        self.st.pending.push(id);
        if self.st.sealing {
            return;
        }
        self.st.sealing = true;
        while let Some(c) = self.st.pending.pop() {
            // With open_in_cache the cache size covers the RAM open containers too (per-block
            // policies have no RAM buffer): sealed + open <= slots.
            while self.st.sealed > 0 && self.st.sealed + self.st.ram_charge() >= self.st.slots {
                self.evict_one();
            }
            self.write_sealed(c);
        }
        self.st.sealing = false;
    }

    fn write_sealed(&mut self, id: u32) {
        let st = &mut self.st;
        st.seal_seq += 1;
        let c = &mut st.containers[id as usize];
        c.state = State::Sealed;
        c.seal_time = st.now;
        c.seal_seq = st.seal_seq;
        st.sealed += 1;
        st.c.internal_write_pages += c.n_copied as u64;
        st.c.host_write_pages += (st.ppc - c.n_copied) as u64;
        self.policy.on_seal(&mut self.st, id);
    }

    fn evict_one(&mut self) {
        let (v, copy) = self.policy.victim(&mut self.st);
        let st = &mut self.st;
        let seq = st.containers[v as usize].seal_seq;
        if st.cfg.sampled(seq) {
            let a = st.access_permille(v);
            st.access_pct.push(a);
        }
        let c = std::mem::take(&mut st.containers[v as usize]);
        for i in 0..c.keys.len() {
            if !c.valid[i] {
                continue;
            }
            let key = c.keys[i];
            self.st.index.remove(&key);
            if !copy {
                continue;
            }
            let count = self.st.ghost.count(key);
            if let Some(slot) = self.policy.copy_slot(&self.st, key, c.freq[i], count) {
                if self
                    .st
                    .gate
                    .admit(InsertKind::Reinsertion, count, self.st.c.erasures)
                {
                    self.st.c.copied_forward_pages += 1;
                    self.add(key, slot, true, c.freq[i]);
                } else {
                    self.st.c.rejected_pages += 1;
                }
            }
        }
        let st = &mut self.st;
        let mut c = c;
        c.clear();
        st.containers[v as usize] = c;
        st.free_ids.push(v);
        st.sealed -= 1;
        st.c.erasures += st.cfg.erase_blocks_per_container();
        st.c.evictions += 1;
    }
}

impl<P: ContainerPolicy> BlockCache for ContainerCache<P> {
    fn access(&mut self, page: u64, write: bool, _pos: usize) -> bool {
        let count = self.st.ghost.touch(page);
        let found = self.st.index.get(&page).copied();
        if self.kind == ContainerKind::Pannier && self.st.cfg.sampled(page) {
            if let Some(last) = self.st.last_access.insert(page, self.st.now) {
                if found.is_some() {
                    self.st.reuse.push(self.st.now - last);
                }
            }
        }
        if !write {
            self.st.c.page_reads += 1;
            let Some(l) = found else {
                self.st.now += 1;
                self.insert(page, InsertKind::ReadMiss, count);
                return false;
            };
            let (id, slot) = unloc(l);
            self.st.c.page_read_hits += 1;
            let c = &mut self.st.containers[id as usize];
            let before = c.n_accessed;
            let f = &mut c.freq[slot as usize];
            if *f == 0 {
                c.n_accessed += 1;
            }
            *f = f.saturating_add(1);
            if c.state == State::Sealed {
                self.st.c.flash_read_pages += 1;
                self.policy.on_block_hit(&self.st, page, id);
                self.policy.on_hit(&mut self.st, id, before);
            }
            return true;
        }
        self.st.c.page_writes += 1;
        self.st.now += 1;
        let Some(l) = found else {
            self.insert(page, InsertKind::ClientWrite, count);
            return false;
        };
        let (id, slot) = unloc(l);
        let c = &mut self.st.containers[id as usize];
        if c.state == State::Open {
            // Updated in place in RAM.
            return true;
        }
        let s = slot as usize;
        c.valid[s] = false;
        c.n_valid -= 1;
        c.n_invalid += 1;
        if c.freq[s] > 0 {
            c.n_accessed -= 1;
        }
        c.freq[s] = 0;
        self.st.index.remove(&page);
        self.policy.on_block_invalidate(page);
        self.policy.on_invalidate(&mut self.st, id);
        // The new data of a block cached in flash: gated as an overwrite (TIRE's first
        // interval still admits it; only writes of blocks not in the cache are new writes).
        self.insert(page, InsertKind::Overwrite, count);
        true
    }

    fn tick(&mut self, now_s: f64) {
        self.st.gate.tick(now_s, self.st.c.erasures);
    }

    fn counters(&self) -> FlashCounters {
        self.st.c.clone()
    }

    fn erase_blocks(&self) -> u32 {
        self.st.slots * self.st.cfg.erase_blocks_per_container() as u32
    }

    fn gate_mut(&mut self) -> &mut Gate {
        &mut self.st.gate
    }

    fn lifetime(&self) -> Option<u64> {
        (self.kind == ContainerKind::Pannier).then(|| self.st.lifetime())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pannier::blocks::simulate_blocks;
    use crate::pannier::config::BlockPolicy;
    use crate::pannier::trace::BlockTrace;

    fn cfg(containers: u64, ppc: u64) -> BlockConfig {
        crate::pannier::blocks::tests::small_cfg(containers * ppc, ppc)
    }

    fn read<P: ContainerPolicy>(c: &mut ContainerCache<P>, p: u64) -> bool {
        c.access(p, false, 0)
    }

    fn write<P: ContainerPolicy>(c: &mut ContainerCache<P>, p: u64) -> bool {
        c.access(p, true, 0)
    }

    #[test]
    fn promotion_threshold_is_5_percent_of_512_blocks() {
        // ceil(0.05 x 512) = ceil(25.6) = 26 accesses.
        let p = PannierPolicy::new(&cfg(8, 512));
        assert_eq!(p.q.promote_at, 26);
        let p = PannierPolicy::new(&BlockConfig {
            promotion_pct: 1.0,
            ..cfg(8, 512)
        });
        assert_eq!(p.q.promote_at, 6);
    }

    #[test]
    fn lru_plus_packs_seals_and_evicts_whole_containers() {
        // 2 containers of 4 blocks.
        let mut c = ContainerCache::lru_plus(&cfg(2, 4));
        for p in 0..4 {
            assert!(!read(&mut c, p));
        }
        assert_eq!(c.st.sealed, 1);
        assert_eq!(c.st.c.host_write_pages, 4);
        assert!(read(&mut c, 0));
        assert_eq!(c.st.c.flash_read_pages, 1);
        for p in 4..8 {
            read(&mut c, p);
        }
        // A hit on the first container keeps it; filling a third evicts the second (LRU).
        assert!(read(&mut c, 1));
        for p in 8..12 {
            read(&mut c, p);
        }
        assert_eq!(c.st.c.erasures, 1);
        assert!(read(&mut c, 2));
        assert!(!read(&mut c, 5));
    }

    #[test]
    fn containers_of_several_erase_blocks() {
        // 2 containers of 8 blocks, each 4 erase blocks of 2 blocks.
        let four = BlockConfig {
            erase_bytes: Some(2 * 4096),
            ..cfg(2, 8)
        };
        four.validate().unwrap();
        let mut c = ContainerCache::lru_plus(&four);
        assert_eq!(c.erase_blocks(), 8);
        for p in 0..24 {
            read(&mut c, p);
        }
        assert_eq!(c.st.c.erasures, 4); // one container evicted = 4 erase blocks
        let bad = BlockConfig {
            erase_bytes: Some(3 * 4096),
            ..cfg(2, 8)
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .0
            .contains("whole number of 12288-byte erase blocks"));
    }

    #[test]
    fn s2lru_plus_promotes_on_first_hit() {
        let mut c = ContainerCache::s2lru_plus(&cfg(4, 2));
        for p in 0..8 {
            read(&mut c, p);
        }
        // Hit container {0,1}: promoted to hot; the next eviction takes {2,3} (cold LRU).
        read(&mut c, 0);
        read(&mut c, 8);
        read(&mut c, 9);
        assert!(read(&mut c, 1));
        assert!(!read(&mut c, 2));
    }

    #[test]
    fn tire_interval_1_keeps_overwrites_of_cached_blocks_but_not_new_writes() {
        // LRU+ with 3 containers of 2 blocks; TIRE with q = 1 erasure per quantum, K = 4, 3
        // intervals: (1, 2] is interval 1.
        let mut c = ContainerCache::lru_plus(&cfg(3, 2));
        for p in 0..6 {
            read(&mut c, p);
        }
        let tire = crate::pannier::tire::TireConfig {
            quota: 1.0,
            slack: 4.0,
            steps: 3,
            quantum_s: 300.0,
        };
        c.st.gate = Gate::new(Some(tire), 300.0);
        c.tick(0.0);
        // Two more containers evict {0,1} then {2,3}: 2 erasures -> interval 1.
        for p in 6..10 {
            read(&mut c, p);
        }
        assert_eq!(c.st.c.erasures, 2);
        assert_eq!(c.st.gate.level(2), 1);
        // Block 4 is cached in flash: its overwrite is admitted (to the open container).
        assert!(write(&mut c, 4));
        assert_eq!(c.st.c.rejected_pages, 0);
        // Block 100 is not cached: a new write, refused.
        assert!(!write(&mut c, 100));
        assert_eq!(c.st.c.rejected_pages, 1);
        assert!(read(&mut c, 4));
        assert!(!read(&mut c, 100));
    }

    /// A Pannier cache with a fixed lifetime and no packing, for hand examples.
    fn pannier(containers: u64, ppc: u64, life: u64) -> ContainerCache<PannierPolicy> {
        let cfg = BlockConfig {
            fixed_lifetime: Some(life),
            packing: false,
            ..cfg(containers, ppc)
        };
        ContainerCache::pannier(&cfg)
    }

    #[test]
    fn seal_sets_decay_and_survival() {
        let mut c = pannier(4, 2, 100);
        read(&mut c, 0);
        read(&mut c, 1);
        let id = unloc(c.st.index[&0]).0;
        let k = &c.st.containers[id as usize];
        // Sealed at clock 2 (two insertions): decay = survival = 2 + 100.
        assert_eq!((k.seal_time, k.decay_point, k.survival), (2, 102, 102));
        assert_eq!(c.policy.survival.first(), Some(&(102, id)));
    }

    #[test]
    fn fully_invalidated_container_is_evicted_first() {
        let mut c = pannier(3, 2, 1000);
        for p in 0..6 {
            read(&mut c, p);
        }
        let second = unloc(c.st.index[&2]).0;
        // Overwrite both blocks of the second container: survival = now + 1000 x 0% = now.
        write(&mut c, 2);
        let half = c.st.containers[second as usize].survival;
        assert_eq!(half, c.st.now + 1000 / 2);
        write(&mut c, 3);
        assert_eq!(c.st.containers[second as usize].survival, c.st.now);
        // The overwrites filled a new container: sealing it evicts the invalid one, not the
        // LRU (first) container.
        assert_eq!(c.st.c.erasures, 1);
        assert_eq!(c.st.containers[second as usize].state, State::Free);
        assert!(read(&mut c, 0));
        assert!(read(&mut c, 2));
        let fresh = unloc(c.st.index[&3]).0;
        assert_eq!(c.st.containers[fresh as usize].state, State::Sealed);
        assert_eq!(c.st.containers[fresh as usize].keys, vec![2, 3]);
    }

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

    #[test]
    fn expired_container_copies_its_hot_blocks_forward() {
        let mut c = pannier(3, 4, 8);
        c.st.cfg.open_in_cache = true;
        for p in 0..4 {
            read(&mut c, p);
        }
        // Two hits on block 1 at clock 4: freq 2; survival renewed to 4 + 8 = 12.
        read(&mut c, 1);
        read(&mut c, 1);
        for p in 4..12 {
            read(&mut c, p);
        }
        // The fourth container seals at clock 16 with the flash full: the survival top (the
        // first container, 12 <= 16) is aged by ceil((16 - 12) / 8) = 1 (block 1: freq 1),
        // then evicted with block 1 copied forward; 0, 2 and 3 (freq 0) are dropped. The
        // copy opens a reinsertion container in RAM, which counts against the cache: the next
        // survival top (the second container, 8 + 8 = 16 <= 16, nothing hot) goes too.
        for p in 12..16 {
            read(&mut c, p);
        }
        assert_eq!(c.st.c.copied_forward_pages, 1);
        assert_eq!(c.st.c.erasures, 2);
        assert!(!c.st.index.contains_key(&4));
        assert!(c.st.index.contains_key(&8));
        assert!(c.st.index.contains_key(&1));
        assert!(!c.st.index.contains_key(&0));
        assert!(read(&mut c, 1));
    }

    #[test]
    fn cold_lru_victim_copies_its_accessed_blocks_forward_unless_all_are() {
        // 3 containers of 4 blocks, lifetime 1000 (no survival time expires here), promotion
        // after ceil(100% x 4) = 4 hits (every container stays in the cold queue).
        let cfg = BlockConfig {
            fixed_lifetime: Some(1000),
            packing: false,
            promotion_pct: 100.0,
            ..cfg(3, 4)
        };
        let mut c = ContainerCache::pannier(&cfg);
        // A = {0..3} sealed at clock 4; one hit on block 1 (freq 1): survival 4 + 1000.
        for p in 0..4 {
            read(&mut c, p);
        }
        assert!(read(&mut c, 1));
        // B = {4..7}: 4, 5, 6 read again while open (RAM hits), 7 once sealed (clock 8): all
        // four accessed; survival 8 + 1000.
        for p in 4..7 {
            assert!(!read(&mut c, p));
            assert!(read(&mut c, p));
        }
        assert!(!read(&mut c, 7));
        assert!(read(&mut c, 7));
        let b = unloc(c.st.index[&4]).0;
        assert_eq!(c.st.containers[b as usize].hot_blocks(), 4);
        // C = {8..11} at clock 12; cold queue (LRU first): A, B, C.
        for p in 8..12 {
            read(&mut c, p);
        }
        // D = {12..15} seals at clock 16 with the flash full: the survival top (A, 1004) has
        // not expired, so the cold LRU (A) goes; its accessed block 1 is copied forward (to a
        // reinsertion container in RAM), 0, 2 and 3 are dropped.
        for p in 12..16 {
            read(&mut c, p);
        }
        assert_eq!(c.st.c.erasures, 1);
        assert_eq!(c.st.c.copied_forward_pages, 1);
        assert!(c.st.index.contains_key(&1));
        for p in [0, 2, 3] {
            assert!(!c.st.index.contains_key(&p));
        }
        // E = {16..19} at clock 20: the cold LRU is B, all of whose blocks are accessed:
        // copying would free nothing, so it is dropped whole.
        for p in 16..20 {
            read(&mut c, p);
        }
        assert_eq!(c.st.c.erasures, 2);
        assert_eq!(c.st.c.copied_forward_pages, 1);
        for p in 4..8 {
            assert!(!c.st.index.contains_key(&p));
        }
        assert!(read(&mut c, 1));
        assert!(!read(&mut c, 0));
        assert!(!read(&mut c, 4));
    }

    #[test]
    fn pannier_beats_lru_plus_on_divergent_containers() {
        // A small hot set interleaved with a cold scan: LRU+ keeps whole containers for a
        // few hot blocks; Pannier separates them.
        let n = 200_000usize;
        let mut pages = Vec::with_capacity(n);
        let mut x = 1u64;
        let mut cold = 1_000_000u64;
        for i in 0..n {
            x = crate::core::hash::splitmix64(x);
            if i % 4 == 0 {
                pages.push(x % 256);
            } else {
                pages.push(cold);
                cold += 1;
            }
        }
        let t: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let l = vec![1u32; n];
        let w = vec![false; n];
        let tr = BlockTrace {
            times: &t,
            pages: &pages,
            lens: &l,
            writes: &w,
        };
        let cfg = cfg(16, 64);
        let lru = simulate_blocks(BlockPolicy::LruPlus, &tr, &cfg).unwrap();
        let pan = simulate_blocks(BlockPolicy::Pannier, &tr, &cfg).unwrap();
        assert!(
            pan.read_hit_ratio > lru.read_hit_ratio * 1.2,
            "{} vs {}",
            pan.read_hit_ratio,
            lru.read_hit_ratio
        );
        assert!(pan.fue > lru.fue);
    }
}
