//! Capacity split across streams: weights or shares (fractions of the capacity) as whole
//! pages per stream. MLCache's partitions and the flash cache's partitioned mode both size
//! their quotas with these rules.

/// Pages for each stream in proportion to `weights`, summing to `capacity` exactly
/// (largest remainder: each gets `floor(w * C / W)`, the pages left over go one each to the
/// largest remainders, ties to the lower stream). All-zero weights split evenly.
pub fn apportion(weights: &[u64], capacity: u64) -> Vec<u64> {
    let streams = weights.len();
    if streams == 0 {
        return Vec::new();
    }
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    if total == 0 {
        return apportion(&vec![1; streams], capacity);
    }
    let c = capacity as u128;
    let mut pages: Vec<u64> = weights
        .iter()
        .map(|&w| (w as u128 * c / total) as u64)
        .collect();
    let left = capacity - pages.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..streams).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(weights[i] as u128 * c % total), i));
    for &i in order.iter().take(left as usize) {
        pages[i] += 1;
    }
    pages
}

/// Shares (fractions of the capacity, one per stream) as pages. The paper's constraint check:
/// a share vector with a non-finite or negative entry, or summing to zero, falls back to an
/// even split; otherwise shares are normalised to sum 1 (the whole cache is used).
/// Returns (pages, whether the shares were valid).
pub fn pages_of_shares(shares: &[f64], capacity: u64) -> (Vec<u64>, bool) {
    let streams = shares.len();
    let sum: f64 = shares.iter().sum();
    let valid = shares.iter().all(|s| s.is_finite() && *s >= 0.0) && sum > 0.0 && sum.is_finite();
    if !valid {
        return (apportion(&vec![1; streams], capacity), false);
    }
    let scale = (1u64 << 40) as f64 / sum;
    let w: Vec<u64> = shares.iter().map(|s| (s * scale).round() as u64).collect();
    (apportion(&w, capacity), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apportion_sums_and_rounds() {
        assert_eq!(apportion(&[1, 1, 1], 10), vec![4, 3, 3]);
        assert_eq!(apportion(&[3, 7], 10), vec![3, 7]);
        assert_eq!(apportion(&[1, 2], 10), vec![3, 7]); // 3.33, 6.67
        assert_eq!(apportion(&[0, 0], 5), vec![3, 2]);
        assert_eq!(apportion(&[0, 5], 5), vec![0, 5]);
        let (p, ok) = pages_of_shares(&[0.5, f64::NAN], 8);
        assert_eq!((p, ok), (vec![4, 4], false));
        let (p, ok) = pages_of_shares(&[-0.1, 1.1], 8);
        assert_eq!((p, ok), (vec![4, 4], false));
        assert_eq!(pages_of_shares(&[2.0, 6.0], 8), (vec![2, 6], true));
    }
}
