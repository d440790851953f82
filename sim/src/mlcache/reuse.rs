//! Exact LRU stack (reuse) distances and miss-ratio curves (MLCache).
//!
//! The stack distance of a request is its 1-based position in the LRU stack just before the
//! request: the number of distinct keys requested since the previous request of the same key,
//! that key included. A request hits in an LRU cache of `c` items iff its distance is `<= c`
//! (Mattson's inclusion property), so one pass over the distances gives the hits at every
//! capacity: the hit curve `H(c) = #{requests with distance <= c}` and the miss-ratio curve
//! `1 - H(c) / n`. First requests of a key have an infinite distance, [`COLD`].
//!
//! Algorithm: a Fenwick tree over request positions holds a 1 at the last position of every
//! key seen so far. For a request at position `i` whose key was last at `p`, the keys seen
//! since are exactly the marks in `(p, i)`, so the distance is that count + 1; then the mark
//! moves from `p` to `i`. O(log n) per request, O(n log n) in all, exact (PARDA's splay tree,
//! which the paper uses, gives the same numbers).
//!
//! Why our own: no maintained crate on crates.io computes exact stack distances, and
//! libCacheSim's Python bindings (`libcachesim` 0.3.5, the project's external oracle) expose
//! caches and a trace analyser (reuse *time*, written to files) but no stack distance or MRC
//! API (its `distUtil` binary is not in the wheel). The tests check this module against a
//! slow obvious O(n*m) LRU stack walk, and tests/mlcache/test_partitioning.py checks the hit curve
//! against libCacheSim's own LRU at several capacities.

use crate::core::hash::{new_map, FastMap};

/// The distance of a key's first request: it misses at every capacity.
pub const COLD: u64 = u64::MAX;

/// A Fenwick (binary indexed) tree of counts over positions `0..n`.
pub struct Fenwick {
    tree: Vec<u32>,
}

impl Fenwick {
    pub fn new(n: usize) -> Self {
        Fenwick {
            tree: vec![0; n + 1],
        }
    }

    /// Add `delta` (+1 or -1) at position `i`.
    #[inline]
    pub fn add(&mut self, i: usize, delta: i32) {
        let mut j = i + 1;
        while j < self.tree.len() {
            self.tree[j] = self.tree[j].wrapping_add_signed(delta);
            j += j & j.wrapping_neg();
        }
    }

    /// Sum of positions `0..=i`.
    #[inline]
    pub fn prefix(&self, i: usize) -> u64 {
        let mut j = i + 1;
        let mut s = 0u64;
        while j > 0 {
            s += self.tree[j] as u64;
            j &= j - 1;
        }
        s
    }
}

/// The LRU stack distance of every request of one key sequence ([`COLD`] for first requests).
pub fn stack_distances(keys: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(keys.len());
    let mut fw = Fenwick::new(keys.len());
    let mut last: FastMap<u64, usize> = new_map();
    let mut distinct = 0u64; // marks in the tree = distinct keys seen so far
    for (i, &k) in keys.iter().enumerate() {
        match last.insert(k, i) {
            Some(p) => {
                // marks in (p, i) = distinct - marks in [0, p]
                out.push(distinct - fw.prefix(p) + 1);
                fw.add(p, -1);
            }
            None => {
                out.push(COLD);
                distinct += 1;
            }
        }
        fw.add(i, 1);
    }
    out
}

/// Per-stream stack distances: each request's distance within its own stream's subsequence
/// (a partitioned cache keeps one LRU stack per stream; the same key in two streams is two
/// items). `streams[i] < n_streams`. Returned in request order.
pub fn stream_stack_distances(keys: &[u64], streams: &[u32], n_streams: usize) -> Vec<u64> {
    assert_eq!(
        keys.len(),
        streams.len(),
        "keys and streams differ in length"
    );
    let mut positions: Vec<Vec<usize>> = vec![Vec::new(); n_streams];
    for (i, &s) in streams.iter().enumerate() {
        positions[s as usize].push(i);
    }
    let mut out = vec![COLD; keys.len()];
    let mut sub = Vec::new();
    for pos in &positions {
        sub.clear();
        sub.extend(pos.iter().map(|&i| keys[i]));
        for (&i, d) in pos.iter().zip(stack_distances(&sub)) {
            out[i] = d;
        }
    }
    out
}

/// Hits at each capacity of `capacities` (items): `H(c) = #{d <= c}` over `distances`.
pub fn hit_curve(distances: &[u64], capacities: &[u64]) -> Vec<u64> {
    let mut sorted: Vec<u64> = distances.iter().copied().filter(|&d| d != COLD).collect();
    sorted.sort_unstable();
    capacities
        .iter()
        .map(|&c| sorted.partition_point(|&d| d <= c) as u64)
        .collect()
}

/// The capacity of `s` steps out of `steps` equal steps of `capacity` items: `floor(s * C / t)`.
#[inline]
pub fn step_capacity(s: usize, steps: usize, capacity: u64) -> u64 {
    ((s as u128 * capacity as u128) / steps as u128) as u64
}

/// Per-interval, per-stream hit curves on the grid of `steps + 1` capacities
/// `step_capacity(0..=steps)`: `curves[(iv * n_streams + s) * (steps + 1) + j]` = requests of
/// stream `s` in interval `iv` (requests `iv * interval .. (iv + 1) * interval`) that are
/// counted (`counted[i]`, e.g. writes only; all when `None`) and whose distance is `<=`
/// `step_capacity(j)`. Distances are per-stream distances over the whole trace (LRU
/// partitions that have run at that size all along; the transient after a resize is left to
/// the simulation). Returns (curves, number of intervals).
pub fn interval_hit_curves(
    distances: &[u64],
    streams: &[u32],
    counted: Option<&[bool]>,
    n_streams: usize,
    interval: usize,
    steps: usize,
    capacity: u64,
) -> (Vec<u64>, usize) {
    assert!(interval > 0 && steps > 0);
    let n = distances.len();
    let n_iv = n.div_ceil(interval);
    let width = steps + 1;
    let grid: Vec<u64> = (0..=steps)
        .map(|j| step_capacity(j, steps, capacity))
        .collect();
    // first count each request at the smallest grid point that holds it, then accumulate
    let mut curves = vec![0u64; n_iv * n_streams * width];
    for i in 0..n {
        if counted.is_some_and(|c| !c[i]) {
            continue;
        }
        let d = distances[i];
        if d == COLD || d > capacity {
            continue;
        }
        let j = grid.partition_point(|&c| c < d);
        let row = ((i / interval) * n_streams + streams[i] as usize) * width;
        curves[row + j] += 1;
    }
    for row in curves.chunks_mut(width) {
        for j in 1..width {
            row[j] += row[j - 1];
        }
    }
    (curves, n_iv)
}

/// MLCache's monitor features (the paper's `A_i`, Alg. 2): per interval, per stream, the
/// number of requests whose distance falls in each of `steps` equal-width buckets of the
/// cache size, `floor((d - 1) * t / C)` for `1 <= d <= C`; longer distances and first
/// requests are not counted (the paper's bound T = the cache lines).
/// `hist[(iv * n_streams + s) * steps + b]`.
pub fn interval_histograms(
    distances: &[u64],
    streams: &[u32],
    counted: Option<&[bool]>,
    n_streams: usize,
    interval: usize,
    steps: usize,
    capacity: u64,
) -> (Vec<u64>, usize) {
    assert!(interval > 0 && steps > 0 && capacity > 0);
    let n = distances.len();
    let n_iv = n.div_ceil(interval);
    let mut hist = vec![0u64; n_iv * n_streams * steps];
    for i in 0..n {
        if counted.is_some_and(|c| !c[i]) {
            continue;
        }
        let d = distances[i];
        if d == COLD || d > capacity {
            continue;
        }
        let b = (((d - 1) as u128 * steps as u128) / capacity as u128) as usize;
        hist[((i / interval) * n_streams + streams[i] as usize) * steps + b] += 1;
    }
    (hist, n_iv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hash::lcg;

    /// The obvious definition: walk an explicit LRU stack (front = most recent). O(n * m).
    fn slow_distances(keys: &[u64]) -> Vec<u64> {
        let mut stack: Vec<u64> = Vec::new();
        keys.iter()
            .map(|&k| match stack.iter().position(|&x| x == k) {
                Some(p) => {
                    stack.remove(p);
                    stack.insert(0, k);
                    p as u64 + 1
                }
                None => {
                    stack.insert(0, k);
                    COLD
                }
            })
            .collect()
    }

    /// Hits of an LRU cache of `c` items, simulated directly.
    fn slow_lru_hits(keys: &[u64], c: usize) -> u64 {
        let mut stack: Vec<u64> = Vec::new();
        let mut hits = 0;
        for &k in keys {
            if let Some(p) = stack.iter().position(|&x| x == k) {
                hits += 1;
                stack.remove(p);
            } else if stack.len() == c {
                stack.pop();
            }
            if c > 0 {
                stack.insert(0, k);
            }
        }
        hits
    }

    #[test]
    fn paper_figure_1() {
        // a b c d b e c f a a: the paper's Fig. 1 (cache of 5); requests 5, 7 and 10 hit.
        // The figure prints 8 for request 9: a's reuse *time*; its stack distance is 6 (a, b,
        // c, d, e, f), above 5 either way.
        let keys = [1, 2, 3, 4, 2, 5, 3, 6, 1, 1];
        let d = stack_distances(&keys);
        let c = COLD;
        assert_eq!(d, vec![c, c, c, c, 3, c, 4, c, 6, 1]);
        assert_eq!(hit_curve(&d, &[5]), vec![3]);
        assert_eq!(slow_lru_hits(&keys, 5), 3);
    }

    #[test]
    fn fast_equals_slow_on_random_traces() {
        for seed in 0..40u64 {
            let mut r = lcg(seed);
            let n = (r() % 400) as usize;
            let m = 1 + r() % 60;
            let keys: Vec<u64> = (0..n).map(|_| r() % m).collect();
            assert_eq!(stack_distances(&keys), slow_distances(&keys), "seed {seed}");
        }
    }

    #[test]
    fn hit_curve_equals_simulated_lru() {
        let mut r = lcg(7);
        let keys: Vec<u64> = (0..3000).map(|_| (r() % 200) * (r() % 3 + 1)).collect();
        let d = stack_distances(&keys);
        let caps: Vec<u64> = (0..=250).step_by(7).collect();
        let curve = hit_curve(&d, &caps);
        for (&c, &h) in caps.iter().zip(&curve) {
            assert_eq!(h, slow_lru_hits(&keys, c as usize), "capacity {c}");
        }
    }

    #[test]
    fn per_stream_distances_ignore_other_streams() {
        let mut r = lcg(3);
        let n = 2000;
        let keys: Vec<u64> = (0..n).map(|_| r() % 50).collect();
        let streams: Vec<u32> = (0..n).map(|_| (r() % 3) as u32).collect();
        let d = stream_stack_distances(&keys, &streams, 3);
        for s in 0..3u32 {
            let idx: Vec<usize> = (0..n).filter(|&i| streams[i] == s).collect();
            let sub: Vec<u64> = idx.iter().map(|&i| keys[i]).collect();
            let want = slow_distances(&sub);
            let got: Vec<u64> = idx.iter().map(|&i| d[i]).collect();
            assert_eq!(got, want, "stream {s}");
        }
    }

    #[test]
    fn interval_curves_and_histograms_count_directly() {
        let mut r = lcg(11);
        let n = 1500;
        let keys: Vec<u64> = (0..n).map(|_| r() % 80).collect();
        let streams: Vec<u32> = (0..n).map(|_| (r() % 2) as u32).collect();
        let counted: Vec<bool> = (0..n).map(|_| !r().is_multiple_of(3)).collect();
        let d = stream_stack_distances(&keys, &streams, 2);
        let (cap, steps, interval) = (37u64, 4usize, 400usize);
        let (curves, n_iv) =
            interval_hit_curves(&d, &streams, Some(&counted), 2, interval, steps, cap);
        let (hist, n_iv2) =
            interval_histograms(&d, &streams, Some(&counted), 2, interval, steps, cap);
        assert_eq!((n_iv, n_iv2), (4, 4));
        for iv in 0..n_iv {
            for s in 0..2usize {
                let mine =
                    |i: &usize| i / interval == iv && streams[*i] as usize == s && counted[*i];
                for j in 0..=steps {
                    let c = step_capacity(j, steps, cap);
                    let want = (0..n).filter(|i| mine(i) && d[*i] <= c).count() as u64;
                    assert_eq!(curves[(iv * 2 + s) * (steps + 1) + j], want);
                }
                for b in 0..steps {
                    let want = (0..n)
                        .filter(|i| {
                            mine(i)
                                && d[*i] != COLD
                                && d[*i] <= cap
                                && (d[*i] - 1) * steps as u64 / cap == b as u64
                        })
                        .count() as u64;
                    assert_eq!(hist[(iv * 2 + s) * steps + b], want);
                }
            }
        }
    }

    #[test]
    fn empty_and_single() {
        assert!(stack_distances(&[]).is_empty());
        assert_eq!(stack_distances(&[9]), vec![COLD]);
        assert_eq!(hit_curve(&[], &[1, 2]), vec![0, 0]);
    }
}
