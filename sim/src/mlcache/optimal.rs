//! The best splits of the capacity among streams: the DP over per-stream hit curves
//! ([`best_split`]) and the static and discrete optima built on it.

use crate::core::shares::apportion;

/// The split of `steps` equal steps among streams that maximises total hits: `curves[i][s]`
/// = hits of stream `i` with `s` steps (`s = 0..=steps`). Dynamic programming over streams
/// and steps used, O(k * steps^2). Returns (steps per stream, summing to `steps`; the hits).
/// Ties go to the split found first (fewer steps to later streams).
pub fn best_split(curves: &[&[u64]], steps: usize) -> (Vec<usize>, u64) {
    let streams = curves.len();
    assert!(curves.iter().all(|c| c.len() == steps + 1));
    if streams == 0 {
        return (Vec::new(), 0);
    }
    // best[i][b]: the most hits of streams 0..=i with exactly b steps; choice[i][b] its s_i
    let neg = i128::MIN;
    let mut best = vec![vec![neg; steps + 1]; streams];
    let mut choice = vec![vec![0usize; steps + 1]; streams];
    for b in 0..=steps {
        best[0][b] = curves[0][b] as i128;
        choice[0][b] = b;
    }
    for i in 1..streams {
        for b in 0..=steps {
            for s in 0..=b {
                let prev = best[i - 1][b - s];
                if prev == neg {
                    continue;
                }
                let v = prev + curves[i][s] as i128;
                if v > best[i][b] {
                    best[i][b] = v;
                    choice[i][b] = s;
                }
            }
        }
    }
    let mut split = vec![0usize; streams];
    let mut b = steps;
    for i in (0..streams).rev() {
        split[i] = choice[i][b];
        b -= split[i];
    }
    (split, best[streams - 1][steps] as u64)
}

/// The pages of a DP split of `steps` steps: `split[i] / steps` of the capacity each.
pub fn pages_of_split(split: &[usize], capacity: u64) -> Vec<u64> {
    let w: Vec<u64> = split.iter().map(|&s| s as u64).collect();
    apportion(&w, capacity)
}

/// `static_optimal`: the best fixed split for the whole trace (the sum of every interval's
/// curves). Returns (steps per stream, the hits the curves give it).
pub fn static_optimal(curves: &[u64], n_streams: usize, steps: usize) -> (Vec<usize>, u64) {
    let width = steps + 1;
    let mut total = vec![vec![0u64; width]; n_streams];
    for (r, row) in curves.chunks(width).enumerate() {
        for (j, &h) in row.iter().enumerate() {
            total[r % n_streams][j] += h;
        }
    }
    let refs: Vec<&[u64]> = total.iter().map(|c| c.as_slice()).collect();
    best_split(&refs, steps)
}

/// `discrete_optimal`: the best split of each interval on its own curves (in hindsight).
/// Returns the steps per stream of every interval.
pub fn discrete_optimal(curves: &[u64], n_streams: usize, steps: usize) -> Vec<Vec<usize>> {
    let width = steps + 1;
    curves
        .chunks(n_streams * width)
        .map(|iv| {
            let refs: Vec<&[u64]> = iv.chunks(width).collect();
            best_split(&refs, steps).0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hash::lcg;

    /// Every composition of `steps` into `streams` parts.
    fn compositions(streams: usize, steps: usize) -> Vec<Vec<usize>> {
        if streams == 1 {
            return vec![vec![steps]];
        }
        let mut out = Vec::new();
        for s in 0..=steps {
            for mut rest in compositions(streams - 1, steps - s) {
                rest.insert(0, s);
                out.push(rest);
            }
        }
        out
    }

    #[test]
    fn dp_equals_brute_force() {
        for seed in 0..60u64 {
            let mut r = lcg(seed);
            let streams = 1 + (r() % 4) as usize;
            let steps = 1 + (r() % 7) as usize;
            // non-decreasing curves, as hit curves are, and arbitrary ones: the DP needs neither
            let monotone = seed % 2 == 0;
            let curves: Vec<Vec<u64>> = (0..streams)
                .map(|_| {
                    let mut acc = 0;
                    (0..=steps)
                        .map(|_| {
                            if monotone {
                                acc += r() % 50;
                                acc
                            } else {
                                r() % 100
                            }
                        })
                        .collect()
                })
                .collect();
            let refs: Vec<&[u64]> = curves.iter().map(|c| c.as_slice()).collect();
            let (split, hits) = best_split(&refs, steps);
            let value = |s: &[usize]| -> u64 { s.iter().zip(&curves).map(|(&x, c)| c[x]).sum() };
            let brute = compositions(streams, steps)
                .iter()
                .map(|s| value(s))
                .max()
                .unwrap();
            assert_eq!(hits, brute, "seed {seed}");
            assert_eq!(value(&split), hits);
            assert_eq!(split.iter().sum::<usize>(), steps);
        }
    }

    #[test]
    fn hand_split() {
        // stream 0 saturates after 1 step, stream 1 keeps gaining: 1 step + 3 steps
        let a = [0u64, 10, 10, 10, 10];
        let b = [0u64, 4, 8, 12, 16];
        assert_eq!(best_split(&[&a, &b], 4), (vec![1, 3], 22));
    }
}
