//! Block mode's trace: a block-level request trace ([`BlockTrace`]) and what is computed
//! from it ahead of a run: each access's next read ([`next_reads`], Belady's look-ahead) and
//! the accesses the RAM cache in front serves ([`ram_served`]).

use crate::core::config::{err, SimError};
use crate::core::eviction::{Eviction, Lru};
use crate::core::hash::{new_map, FastMap};

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
