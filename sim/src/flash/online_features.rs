//! The admission features of the feature contract (features/contract.toml), computed online
//! while streaming the trace, exactly as features/online.py computes them in one vectorised
//! pass:
//! * op, namespace, user, start/end (inclusive segment indices in the block), size (bytes);
//! * per block, the GET IOs and the GET segments (sum over IOs of segments covered) in each
//!   of the last HOURS fixed hour buckets (`floor(time / HOUR_SECONDS)`; hour 1 = the
//!   current bucket), counting only GETs strictly before the current access.
//!
//! Memory: one small ring of HOURS buckets per block seen.

use crate::core::contract::{
    F_BLOCK_COUNT_H1, F_END, F_NAMESPACE, F_OP, F_SEGMENT_COUNT_H1, F_SIZE, F_START, F_USER, HOURS,
    HOUR_SECONDS, NUM_FEATURES,
};
use crate::core::hash::{new_map, FastMap};
use crate::flash::Trace;

/// Tectonic GET op codes: the accesses counted (generated from flashml.config.GET_OPS).
pub use crate::core::contract::GET_OPS;

/// The columns beyond the simulator's [`Trace`] that the features read.
#[derive(Debug, Clone, Copy)]
pub struct FeatureColumns<'a> {
    pub namespace: &'a [u32],
    pub user: &'a [u32],
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    hour: i64,
    ios: u64,
    segments: u64,
}

/// Streaming tracker of the hourly counts of every block.
pub struct OnlineFeatures<'a> {
    trace: Trace<'a>,
    cols: FeatureColumns<'a>,
    segment_bytes: u64,
    is_get: [bool; 256],
    blocks: FastMap<u64, [Bucket; HOURS]>,
    /// Accesses `0..next` have been observed.
    next: usize,
}

#[inline]
fn hour_of(t: f64) -> i64 {
    (t / HOUR_SECONDS).floor() as i64
}

impl<'a> OnlineFeatures<'a> {
    pub fn new(
        trace: Trace<'a>,
        cols: FeatureColumns<'a>,
        segment_bytes: u64,
        get_ops: &[u8],
    ) -> Self {
        let mut is_get = [false; 256];
        for &o in get_ops {
            is_get[o as usize] = true;
        }
        OnlineFeatures {
            trace,
            cols,
            segment_bytes,
            is_get,
            blocks: new_map(),
            next: 0,
        }
    }

    /// Number of accesses observed so far.
    pub fn position(&self) -> usize {
        self.next
    }

    fn observe(&mut self, i: usize) {
        if !self.is_get[self.trace.op[i] as usize] {
            return;
        }
        let (s0, s1) = self.segments(i);
        let hour = hour_of(self.trace.time[i]);
        let ring = self.blocks.entry(self.trace.key[i]).or_insert(
            [Bucket {
                hour: i64::MIN,
                ios: 0,
                segments: 0,
            }; HOURS],
        );
        let b = &mut ring[hour.rem_euclid(HOURS as i64) as usize];
        if b.hour != hour {
            *b = Bucket {
                hour,
                ios: 0,
                segments: 0,
            };
        }
        b.ios += 1;
        b.segments += s1 - s0 + 1;
    }

    #[inline]
    fn segments(&self, i: usize) -> (u64, u64) {
        let off = self.trace.offset[i];
        let size = self.trace.size[i];
        (
            off / self.segment_bytes,
            (off + size).saturating_sub(1) / self.segment_bytes,
        )
    }

    /// Observe every access before `i` (accesses must be asked for in increasing order).
    pub fn advance_to(&mut self, i: usize) {
        debug_assert!(i >= self.next, "online features go forward only");
        while self.next < i {
            self.observe(self.next);
            self.next += 1;
        }
    }

    /// The features of access `i` (observing every earlier access first) into `out`.
    pub fn features(&mut self, i: usize, out: &mut [f64; NUM_FEATURES]) {
        self.advance_to(i);
        let (s0, s1) = self.segments(i);
        out[F_OP] = self.trace.op[i] as f64;
        out[F_NAMESPACE] = self.cols.namespace[i] as f64;
        out[F_USER] = self.cols.user[i] as f64;
        out[F_START] = s0 as f64;
        out[F_END] = s1 as f64;
        out[F_SIZE] = self.trace.size[i] as f64;
        let hour = hour_of(self.trace.time[i]);
        let ring = self.blocks.get(&self.trace.key[i]);
        for h in 0..HOURS {
            let want = hour - h as i64;
            let (ios, segs) = match ring {
                Some(r) => {
                    let b = &r[want.rem_euclid(HOURS as i64) as usize];
                    if b.hour == want {
                        (b.ios, b.segments)
                    } else {
                        (0, 0)
                    }
                }
                None => (0, 0),
            };
            out[F_BLOCK_COUNT_H1 + h] = ios as f64;
            out[F_SEGMENT_COUNT_H1 + h] = segs as f64;
        }
    }
}

/// The feature matrix (rows x NUM_FEATURES, row-major) of every access, computed online.
pub fn feature_matrix(
    trace: Trace,
    cols: FeatureColumns,
    segment_bytes: u64,
    get_ops: &[u8],
) -> Vec<f64> {
    let n = trace.time.len();
    let mut out = vec![0.0; n * NUM_FEATURES];
    let mut f = OnlineFeatures::new(trace, cols, segment_bytes, get_ops);
    let mut row = [0.0; NUM_FEATURES];
    for i in 0..n {
        f.features(i, &mut row);
        out[i * NUM_FEATURES..(i + 1) * NUM_FEATURES].copy_from_slice(&row);
    }
    out
}

/// Why [`count_columns`] refused: a feature index outside the contract, or a count that
/// does not fit a u32 (the access and the value).
#[derive(Debug, Clone, PartialEq)]
pub enum CountsError {
    Column(usize),
    Overflow {
        access: usize,
        feature: usize,
        value: f64,
    },
}

/// The features `cols` (contract indices: the count features, in the caller's order) of
/// every access as u32, one row per feature (`cols.len() x rows`, row-major): what
/// [`feature_matrix`] holds in those columns, without the float64 matrix of every feature
/// (at 10 M accesses 1.44 GB, this is 0.48 GB). Every value must be an integer in u32's
/// range (counts are).
pub fn count_columns(
    trace: Trace,
    cols: FeatureColumns,
    segment_bytes: u64,
    get_ops: &[u8],
    features: &[usize],
) -> Result<Vec<u32>, CountsError> {
    let mut out = vec![0u32; trace.time.len() * features.len()];
    count_columns_into(trace, cols, segment_bytes, get_ops, features, &mut out)?;
    Ok(out)
}

/// `count_columns` written into `out` (`features.len()` x accesses, row-major: e.g. a
/// memory-mapped file's pages, so the counts of a large trace are never the process's own
/// memory). Panics if `out` has another length.
pub fn count_columns_into(
    trace: Trace,
    cols: FeatureColumns,
    segment_bytes: u64,
    get_ops: &[u8],
    features: &[usize],
    out: &mut [u32],
) -> Result<(), CountsError> {
    if let Some(&j) = features.iter().find(|&&j| j >= NUM_FEATURES) {
        return Err(CountsError::Column(j));
    }
    let n = trace.time.len();
    assert_eq!(
        out.len(),
        n * features.len(),
        "out must hold features x accesses"
    );
    let mut f = OnlineFeatures::new(trace, cols, segment_bytes, get_ops);
    let mut row = [0.0; NUM_FEATURES];
    for i in 0..n {
        f.features(i, &mut row);
        for (c, &j) in features.iter().enumerate() {
            let v = row[j];
            if !(v >= 0.0 && v <= u32::MAX as f64 && v.fract() == 0.0) {
                return Err(CountsError::Overflow {
                    access: i,
                    feature: j,
                    value: v,
                });
            }
            out[c * n + i] = v as u32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        let seg = 128 * 1024u64;
        let time = [10.0, 20.0, 30.0, 3700.0, 3.0 * 3600.0 + 5.0, 8.0 * 3600.0];
        let key = [1u64, 1, 1, 1, 1, 1];
        let offset = [0u64, 0, 0, seg, 0, 0];
        let size = [seg, 3 * seg, seg, seg, 2 * seg, seg];
        let op = [2u8, 1, 4, 2, 5, 2];
        let ns = [3u32; 6];
        let user = [7u32; 6];
        let trace = Trace {
            time: &time,
            key: &key,
            offset: &offset,
            size: &size,
            op: &op,
        };
        let cols = FeatureColumns {
            namespace: &ns,
            user: &user,
        };
        let m = feature_matrix(trace, cols, seg, &GET_OPS);
        let row = |i: usize| &m[i * NUM_FEATURES..(i + 1) * NUM_FEATURES];
        // access 0: nothing before
        assert_eq!(&row(0)[..6], &[2.0, 3.0, 7.0, 0.0, 0.0, seg as f64]);
        assert!(row(0)[6..].iter().all(|&x| x == 0.0));
        // access 1: one GET of 1 segment earlier this hour
        assert_eq!(row(1)[F_BLOCK_COUNT_H1], 1.0);
        assert_eq!(row(1)[F_SEGMENT_COUNT_H1], 1.0);
        assert_eq!(row(1)[F_END], 2.0);
        // access 2 (a PUT) sees 2 GETs, 4 segments; it is not counted itself
        assert_eq!(row(2)[F_BLOCK_COUNT_H1], 2.0);
        assert_eq!(row(2)[F_SEGMENT_COUNT_H1], 4.0);
        // access 3, next hour: hour 2 holds the 2 GETs
        assert_eq!(row(3)[F_BLOCK_COUNT_H1], 0.0);
        assert_eq!(row(3)[F_BLOCK_COUNT_H1 + 1], 2.0);
        assert_eq!(row(3)[F_SEGMENT_COUNT_H1 + 1], 4.0);
        // access 4 at hour 3: hour 2 = bucket 2 (access 3), hour 4 = bucket 0
        assert_eq!(row(4)[F_BLOCK_COUNT_H1 + 1], 0.0);
        assert_eq!(row(4)[F_BLOCK_COUNT_H1 + 2], 1.0);
        assert_eq!(row(4)[F_BLOCK_COUNT_H1 + 3], 2.0);
        // access 5 at hour 8: bucket 0 is 9 hours old (gone), bucket 1 is 7 hours old (gone),
        // bucket 3 is hour 6
        assert_eq!(row(5)[F_BLOCK_COUNT_H1 + 5], 1.0);
        assert_eq!(row(5)[F_SEGMENT_COUNT_H1 + 5], 2.0);
        assert_eq!(row(5)[6..12].iter().sum::<f64>(), 1.0);
        // the count columns alone, as u32 rows: the matrix's columns
        let picked = [F_SEGMENT_COUNT_H1 + 1, F_BLOCK_COUNT_H1];
        let counts = count_columns(trace, cols, seg, &GET_OPS, &picked).unwrap();
        for (c, &j) in picked.iter().enumerate() {
            for i in 0..time.len() {
                assert_eq!(counts[c * time.len() + i] as f64, row(i)[j]);
            }
        }
        assert_eq!(
            count_columns(trace, cols, seg, &GET_OPS, &[NUM_FEATURES]),
            Err(CountsError::Column(NUM_FEATURES))
        );
        // the size is no u32 count past 4 GiB
        let big = [u64::from(u32::MAX) + 1; 6];
        let wide = Trace {
            size: &big,
            ..trace
        };
        assert!(matches!(
            count_columns(wide, cols, seg, &GET_OPS, &[F_SIZE]),
            Err(CountsError::Overflow {
                access: 0,
                feature: F_SIZE,
                ..
            })
        ));
    }
}
