//! The distinct rows of a matrix's columns: rows equal in those columns' bytes are one input
//! to a model that reads only them, so the training loop scores each distinct row once and
//! copies its score to the rest (the range features of 10 M region1-like accesses: 0.96 M
//! distinct rows). A hash of each row's bits into a map, with a chain per hash so that rows
//! whose hashes collide are still told apart by their bits: exact, in one pass (NumPy's
//! `unique` over the rows as bytes sorts them, 9.4 s at 10 M rows of 6 columns).

use super::hash::{new_map, splitmix64, FastMap};

/// Most columns a row is compared on.
pub const MAX_COLUMNS: usize = 16;

/// Rows of `x` (row-major, `width` columns) compared on `cols`: the index of each distinct
/// row's first row, in the order they first appear, and for every row the index of its
/// distinct row in that list. Rows are equal when their values in `cols` have the same
/// bits (so 0.0 and -0.0 differ, and a NaN equals a NaN of the same bits).
pub fn distinct_rows(
    x: &[f64],
    width: usize,
    cols: &[usize],
) -> Result<(Vec<i64>, Vec<i64>), String> {
    if width == 0 || !x.len().is_multiple_of(width) {
        return Err(format!(
            "{} values are not rows of {width} columns",
            x.len()
        ));
    }
    if cols.is_empty() || cols.len() > MAX_COLUMNS {
        return Err(format!(
            "compare rows on 1 to {MAX_COLUMNS} columns, got {}",
            cols.len()
        ));
    }
    if let Some(&c) = cols.iter().find(|&&c| c >= width) {
        return Err(format!("column {c} of rows with {width} columns"));
    }
    let rows = x.len() / width;
    let k = cols.len();
    // the distinct rows' bits, and for each distinct row the next one of the same hash
    let mut seen: Vec<u64> = Vec::new();
    let mut next: Vec<u32> = Vec::new();
    let mut first: Vec<i64> = Vec::new();
    let mut head: FastMap<u64, u32> = new_map();
    let mut inverse = Vec::with_capacity(rows);
    let mut bits = [0u64; MAX_COLUMNS];
    for r in 0..rows {
        let row = &x[r * width..(r + 1) * width];
        let mut h = 0u64;
        for (j, &c) in cols.iter().enumerate() {
            bits[j] = row[c].to_bits();
            h = splitmix64(h ^ bits[j]);
        }
        let key = &bits[..k];
        let start = head.get(&h).copied();
        let mut at = start;
        let mut found = None;
        while let Some(id) = at {
            let i = id as usize;
            if &seen[i * k..(i + 1) * k] == key {
                found = Some(id);
                break;
            }
            at = (next[i] != u32::MAX).then_some(next[i]);
        }
        let id = match found {
            Some(id) => id,
            None => {
                let id = u32::try_from(first.len())
                    .map_err(|_| format!("more than {} distinct rows", u32::MAX))?;
                seen.extend_from_slice(key);
                next.push(start.unwrap_or(u32::MAX));
                first.push(r as i64);
                head.insert(h, id);
                id
            }
        };
        inverse.push(id as i64);
    }
    Ok((first, inverse))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slow obvious way: each row against every distinct row before it.
    fn by_scan(x: &[f64], width: usize, cols: &[usize]) -> (Vec<i64>, Vec<i64>) {
        let key = |r: usize| {
            cols.iter()
                .map(|&c| x[r * width + c].to_bits())
                .collect::<Vec<_>>()
        };
        let (mut first, mut inverse) = (Vec::<i64>::new(), Vec::new());
        for r in 0..x.len() / width {
            match first.iter().position(|&f| key(f as usize) == key(r)) {
                Some(i) => inverse.push(i as i64),
                None => {
                    inverse.push(first.len() as i64);
                    first.push(r as i64);
                }
            }
        }
        (first, inverse)
    }

    #[test]
    fn equals_the_scan_with_repeats_zeros_and_nans() {
        let mut next = crate::core::hash::lcg(11);
        let width = 4;
        let mut x = Vec::new();
        for _ in 0..3000 {
            for c in 0..width {
                let v = match next() % 9 {
                    0 => f64::NAN,
                    1 => -0.0,
                    2 => 0.0,
                    n => (n % 4) as f64 + c as f64,
                };
                x.push(v);
            }
        }
        for cols in [vec![0, 1, 2], vec![3], vec![2, 0], vec![0, 1, 2, 3]] {
            let got = distinct_rows(&x, width, &cols).unwrap();
            assert_eq!(got, by_scan(&x, width, &cols), "cols {cols:?}");
            // every row's distinct row has its bits
            for (r, &i) in got.1.iter().enumerate() {
                let f = got.0[i as usize] as usize;
                for &c in &cols {
                    assert_eq!(x[r * width + c].to_bits(), x[f * width + c].to_bits());
                }
            }
        }
    }

    #[test]
    fn bad_shapes_and_columns() {
        assert!(distinct_rows(&[1.0, 2.0, 3.0], 2, &[0]).is_err());
        assert!(distinct_rows(&[1.0, 2.0], 2, &[2]).is_err());
        assert!(distinct_rows(&[1.0, 2.0], 2, &[]).is_err());
        assert_eq!(distinct_rows(&[], 2, &[0]).unwrap(), (vec![], vec![]));
    }
}
