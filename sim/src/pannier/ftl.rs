//! A page-mapped flash translation layer with greedy garbage collection: what a per-block
//! cache (one that writes and evicts single 4 KiB blocks) costs on flash. Pannier's baseline
//! model (Middleware '15 §4.4): erase blocks of 2 MiB and 7% over-provisioning for per-block
//! schemes. The cache writes logical pages (its slots); each write goes to the next free page
//! of the active erase block and invalidates the page's old physical copy. When free erase
//! blocks run out, the full block with the fewest valid pages is the victim: its valid pages
//! are copied forward (internal writes) and it is erased. Container caches write and evict
//! whole erase blocks, so they need none of this (write amplification 1).

use crate::core::list::NIL;

#[derive(Debug, Clone)]
pub struct Ftl {
    pages_per_eb: u32,
    /// Logical page -> physical page (NIL: not mapped).
    l2p: Vec<u32>,
    /// Physical page -> logical page (NIL: free or invalid).
    p2l: Vec<u32>,
    /// Valid pages per erase block.
    valid: Vec<u32>,
    /// Erase blocks ready to be written (erased).
    free: Vec<u32>,
    active: u32,
    /// Next page to program in the active erase block.
    wp: u32,
    /// Erase blocks that are neither free nor active (full); greedy GC picks among them.
    is_full: Vec<bool>,
    pub host_writes: u64,
    pub gc_writes: u64,
    pub erasures: u64,
}

impl Ftl {
    /// An FTL exporting `logical_pages` pages over `ceil(logical * (1 + op) / pages_per_eb)`
    /// erase blocks, and at least three more than the logical space needs: one reserve for
    /// GC's copies, one to write into, and one block's worth of invalid pages so that greedy
    /// GC always makes progress (matters only for tiny caches: 7% of 512 blocks is 36).
    pub fn new(logical_pages: u32, pages_per_eb: u32, op: f64) -> Self {
        let ppe = pages_per_eb.max(1);
        let need = logical_pages.div_ceil(ppe);
        let with_op = ((logical_pages as f64) * (1.0 + op.max(0.0)) / ppe as f64).ceil() as u32;
        let n_eb = with_op.max(need + 3);
        let n_pages = n_eb as usize * ppe as usize;
        let mut free: Vec<u32> = (1..n_eb).rev().collect();
        free.shrink_to_fit();
        Ftl {
            pages_per_eb: ppe,
            l2p: vec![NIL; logical_pages as usize],
            p2l: vec![NIL; n_pages],
            valid: vec![0; n_eb as usize],
            free,
            active: 0,
            wp: 0,
            is_full: vec![false; n_eb as usize],
            host_writes: 0,
            gc_writes: 0,
            erasures: 0,
        }
    }

    pub fn erase_blocks(&self) -> u32 {
        self.valid.len() as u32
    }

    pub fn pages_per_eb(&self) -> u32 {
        self.pages_per_eb
    }

    /// The cache writes logical page `lpn` (a new block in that slot).
    pub fn write(&mut self, lpn: u32) {
        self.host_writes += 1;
        self.program(lpn, false);
    }

    /// The cache drops logical page `lpn` (TRIM): its physical copy becomes invalid.
    pub fn trim(&mut self, lpn: u32) {
        let p = self.l2p[lpn as usize];
        if p != NIL {
            self.invalidate(p);
            self.l2p[lpn as usize] = NIL;
        }
    }

    fn invalidate(&mut self, p: u32) {
        self.p2l[p as usize] = NIL;
        self.valid[(p / self.pages_per_eb) as usize] -= 1;
    }

    fn program(&mut self, lpn: u32, in_gc: bool) {
        let old = self.l2p[lpn as usize];
        if old != NIL {
            self.invalidate(old);
        }
        if self.wp == self.pages_per_eb {
            self.is_full[self.active as usize] = true;
            if !in_gc {
                // Keep one erased block in reserve for GC's own copies.
                while self.free.len() <= 1 {
                    self.collect();
                }
            }
            // GC's copies may already have opened a new (partly written) active block.
            if self.wp == self.pages_per_eb {
                self.is_full[self.active as usize] = true;
                self.active = self.free.pop().expect("the GC reserve is never empty");
                self.wp = 0;
            }
        }
        let p = self.active * self.pages_per_eb + self.wp;
        self.wp += 1;
        self.p2l[p as usize] = lpn;
        self.l2p[lpn as usize] = p;
        self.valid[self.active as usize] += 1;
    }

    /// Greedy GC: the full erase block with the fewest valid pages.
    fn collect(&mut self) {
        let victim = (0..self.valid.len())
            .filter(|&b| self.is_full[b])
            .min_by_key(|&b| self.valid[b])
            .expect("a full erase block exists when free blocks run out")
            as u32;
        assert!(
            self.valid[victim as usize] < self.pages_per_eb,
            "FTL: no erase block with an invalid page (over-provisioning too small)"
        );
        let base = victim * self.pages_per_eb;
        for p in base..base + self.pages_per_eb {
            let lpn = self.p2l[p as usize];
            if lpn != NIL {
                self.gc_writes += 1;
                self.program(lpn, true);
            }
        }
        // After the copies: the victim may have been the (full) active block, which the
        // first copy marks full again on its way to a fresh block.
        self.is_full[victim as usize] = false;
        debug_assert_eq!(self.valid[victim as usize], 0);
        self.erasures += 1;
        self.free.push(victim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_overwrites_need_no_copies() {
        // Writing the logical space over and over in order leaves whole erase blocks invalid:
        // GC copies nothing, one erasure per erase block's worth of writes.
        let mut f = Ftl::new(64, 8, 0.07);
        for round in 0..10 {
            for l in 0..64 {
                f.write(l);
            }
            if round == 0 {
                assert_eq!(f.erasures, 0);
            }
        }
        assert_eq!(f.gc_writes, 0);
        assert_eq!(f.host_writes, 640);
        // 640 pages = 80 blocks programmed; all but the blocks still holding the last round
        // (8 full + the free ones never reused) were erased.
        assert!(f.erasures >= 80 - f.erase_blocks() as u64);
    }

    #[test]
    fn random_overwrites_amplify_and_conserve_pages() {
        let mut f = Ftl::new(512, 16, 0.07);
        let mut x = 12345u64;
        for l in 0..512 {
            f.write(l);
        }
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            f.write(((x >> 33) % 512) as u32);
        }
        // No erase block holds more valid pages than it has; free blocks hold none.
        assert!(f.valid.iter().all(|&v| v <= 16));
        assert!(f
            .free
            .iter()
            .all(|&b| f.valid[b as usize] == 0 && !f.is_full[b as usize]));
        // Every logical page is mapped exactly once.
        let mapped = f.p2l.iter().filter(|&&l| l != NIL).count();
        assert_eq!(mapped, 512);
        assert_eq!(f.valid.iter().sum::<u32>(), 512);
        // Programmed pages = host + GC writes = erasures * ppe + pages in non-erased blocks.
        let wa = (f.host_writes + f.gc_writes) as f64 / f.host_writes as f64;
        assert!(wa > 2.0, "uniform random writes at 7% OP amplify, got {wa}");
    }

    #[test]
    fn trim_frees_pages_for_gc() {
        let mut f = Ftl::new(64, 8, 0.07);
        for l in 0..64 {
            f.write(l);
        }
        for l in 0..32 {
            f.trim(l);
        }
        assert_eq!(f.valid.iter().sum::<u32>(), 32);
        for _ in 0..4 {
            for l in 32..64 {
                f.write(l);
            }
        }
        assert_eq!(f.gc_writes, 0);
    }
}
