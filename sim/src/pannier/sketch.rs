//! Pannier's small counting structures: the ghost cache (a count-min sketch, [`Ghost`]) and
//! the percentile sampler ([`Sampler`], [`nearest_rank`]).

use crate::core::hash::splitmix64;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
