//! The container eviction orders: the [`ContainerPolicy`] trait, container LRU ([`LruPlus`]),
//! S2LRU over containers ([`S2lruPlus`]) and Pannier's S2LRU* with the survival queue
//! ([`PannierPolicy`]), the last two over [`Queues`].

use std::collections::BTreeSet;

use crate::core::list::DList;
use crate::pannier::config::BlockConfig;
use crate::pannier::store::{packed_hot, Store, OPEN};

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
    pub(super) q: Queues,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pannier::blocks::simulate_blocks;
    use crate::pannier::config::BlockPolicy;
    use crate::pannier::container::tests::{cfg, pannier, read, write};
    use crate::pannier::container::ContainerCache;
    use crate::pannier::store::{unloc, State};
    use crate::pannier::trace::BlockTrace;

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
