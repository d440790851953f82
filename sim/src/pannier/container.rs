//! A container cache ([`ContainerCache`]): the [`Store`] and a [`ContainerPolicy`] driven as a
//! block-mode cache: blocks packed into open containers, sealed, evicted and erased whole,
//! accessed blocks copied forward through TIRE's gate.

use crate::core::list::NIL;
use crate::pannier::blocks::{BlockCache, FlashCounters};
use crate::pannier::config::BlockConfig;
use crate::pannier::policy::{ContainerPolicy, LruPlus, PannierPolicy, Queues, S2lruPlus};
use crate::pannier::store::{loc, unloc, State, Store, OPEN};
use crate::pannier::tire::{Gate, InsertKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    LruPlus,
    S2lruPlus,
    RipqPlus,
    Pannier,
}

/// A container cache: [`Store`] + a [`ContainerPolicy`].
pub struct ContainerCache<P: ContainerPolicy> {
    pub(super) st: Store,
    pub(super) policy: P,
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
pub(super) mod tests {
    use super::*;

    pub(in crate::pannier) fn cfg(containers: u64, ppc: u64) -> BlockConfig {
        crate::pannier::blocks::tests::small_cfg(containers * ppc, ppc)
    }

    pub(in crate::pannier) fn read<P: ContainerPolicy>(c: &mut ContainerCache<P>, p: u64) -> bool {
        c.access(p, false, 0)
    }

    pub(in crate::pannier) fn write<P: ContainerPolicy>(c: &mut ContainerCache<P>, p: u64) -> bool {
        c.access(p, true, 0)
    }

    /// A Pannier cache with a fixed lifetime and no packing, for hand examples.
    pub(in crate::pannier) fn pannier(
        containers: u64,
        ppc: u64,
        life: u64,
    ) -> ContainerCache<PannierPolicy> {
        let cfg = BlockConfig {
            fixed_lifetime: Some(life),
            packing: false,
            ..cfg(containers, ppc)
        };
        ContainerCache::pannier(&cfg)
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
}
