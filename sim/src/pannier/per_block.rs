//! The per-block caches of block mode: [`PerBlock`] over a [`PageOrder`] (LRU, S2LRU, MQ,
//! Belady with bypass), writing single blocks into slots of a page-mapped FTL.

use std::collections::{BTreeSet, VecDeque};

use crate::core::eviction::Eviction;
use crate::core::hash::{new_map, FastMap};
use crate::core::list::DList;
use crate::pannier::blocks::{BlockCache, FlashCounters};
use crate::pannier::config::BlockConfig;
use crate::pannier::ftl::Ftl;
use crate::pannier::sketch::Ghost;
use crate::pannier::tire::{Gate, InsertKind};
use crate::pannier::trace::NEVER;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
