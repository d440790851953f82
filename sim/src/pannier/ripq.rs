//! RIPQ+ (Pannier's baseline, from RIPQ, Tang et al., FAST '15, plus an overwrite operation):
//! a priority queue over flash approximated with K sections, each with its own open container
//! (RIPQ's active physical block) in RAM. Segmented LRU with K segments on top of it, as
//! RIPQ's SLRU-K: a new block enters the lowest section; a hit does not move the block on flash
//! but records a virtual reference one section higher (RIPQ's virtual block: the block's ID in
//! RAM); when a container leaves the tail of the lowest section, its blocks with a virtual
//! reference are copied forward into the open container of their referenced section, the rest
//! are dropped. Sections hold at most 1/K of the containers each (the lowest takes the rest);
//! a section over its limit hands its tail container down to the next lower one (no rewrite).
//! An overwrite invalidates the old copy and drops its virtual reference (RIPQ+'s addition).
//!
//! The Pannier paper runs RIPQ+ with 8 insertion points (Fig. 13): K = 8 here.

use crate::core::hash::{new_map, FastMap};
use crate::core::list::DList;
use crate::pannier::{ContainerPolicy, Store};

pub const SECTIONS: usize = 8;

pub struct RipqPlus {
    sections: Vec<DList>,
    section_of: Vec<u8>,
    limit: usize,
    virt: FastMap<u64, u8>,
}

impl RipqPlus {
    pub fn new(containers: usize) -> Self {
        RipqPlus {
            sections: (0..SECTIONS).map(|_| DList::new()).collect(),
            section_of: Vec::new(),
            limit: (containers / SECTIONS).max(1),
            virt: new_map(),
        }
    }

    fn place(&mut self, id: u32, s: usize) {
        let i = id as usize;
        if i >= self.section_of.len() {
            self.section_of.resize(i + 1, 0);
        }
        self.section_of[i] = s as u8;
        self.sections[s].push_front(id);
    }

    /// Sections over their limit hand their tail containers down, from the top.
    fn balance(&mut self) {
        for k in (1..SECTIONS).rev() {
            while self.sections[k].len() > self.limit {
                let t = self.sections[k].back().unwrap();
                self.sections[k].unlink(t);
                self.place(t, k - 1);
            }
        }
    }

    pub fn section_lens(&self) -> Vec<usize> {
        self.sections.iter().map(|s| s.len()).collect()
    }
}

impl ContainerPolicy for RipqPlus {
    fn on_seal(&mut self, st: &mut Store, id: u32) {
        let s = (st.containers[id as usize].open_slot as usize).min(SECTIONS - 1);
        self.place(id, s);
        self.balance();
    }

    fn on_hit(&mut self, _st: &mut Store, _id: u32, _: u32) {}

    fn on_block_hit(&mut self, _st: &Store, page: u64, id: u32) {
        let cur = self
            .virt
            .get(&page)
            .copied()
            .unwrap_or(self.section_of[id as usize]);
        self.virt.insert(page, (cur + 1).min(SECTIONS as u8 - 1));
    }

    fn on_block_invalidate(&mut self, page: u64) {
        self.virt.remove(&page);
    }

    fn victim(&mut self, _st: &mut Store) -> (u32, bool) {
        let s = (0..SECTIONS)
            .find(|&s| !self.sections[s].is_empty())
            .expect("a sealed container to evict");
        let v = self.sections[s].back().unwrap();
        self.sections[s].unlink(v);
        (v, true)
    }

    fn open_slots(&self) -> usize {
        SECTIONS
    }

    fn insert_slot(&self, _st: &Store, _count: u32) -> usize {
        0
    }

    fn copy_slot(&mut self, _st: &Store, key: u64, _freq: u8, _count: u32) -> Option<usize> {
        self.virt.remove(&key).map(|s| s as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pannier::blocks::BlockCache;
    use crate::pannier::ContainerCache;

    fn cache(containers: u64, ppc: u64) -> ContainerCache<RipqPlus> {
        ContainerCache::ripq_plus(&crate::pannier::blocks::tests::small_cfg(
            containers * ppc,
            ppc,
        ))
    }

    #[test]
    fn hit_blocks_are_copied_forward_one_section_up() {
        // 16 containers of 2 blocks: 2 per section.
        let mut c = cache(16, 2);
        for p in 0..32 {
            c.access(p, false, 0);
        }
        // Hit block 0 (in the oldest container, section 0): virtual reference to section 1.
        assert!(c.access(0, false, 0));
        // Two more containers: the oldest ({0, 1}) is evicted, 0 copied forward, 1 dropped.
        for p in 100..104 {
            c.access(p, false, 0);
        }
        assert!(c.access(0, false, 0));
        assert!(!c.access(1, false, 0));
        assert!(c.store().c.copied_forward_pages >= 1);
    }

    #[test]
    fn sections_keep_their_limits() {
        let mut c = cache(16, 2);
        let mut x = 5u64;
        for _ in 0..5000 {
            x = crate::core::hash::splitmix64(x);
            c.access(x % 200, x.is_multiple_of(5), 0);
        }
        let lens = c.policy().section_lens();
        assert!(lens[1..].iter().all(|&l| l <= 2), "{lens:?}");
        assert_eq!(lens.iter().sum::<usize>() as u32, c.store().sealed);
    }

    #[test]
    fn an_overwrite_drops_the_virtual_reference() {
        let mut c = cache(16, 2);
        for p in 0..32 {
            c.access(p, false, 0);
        }
        c.access(0, false, 0); // virtual reference for block 0
        c.access(0, true, 0); // overwritten: the new copy is in an open container
        assert!(!c.policy().virt.contains_key(&0));
    }
}
