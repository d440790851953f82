//! Prefetch policies: on a GET miss, an extra segment range to fetch in the same backend IO.
//! A range is split into *what* to fetch ([`PrefetchRange`]) and *when* ([`When`]).

use crate::flash::admission::MissCtx;

pub trait Prefetch {
    /// The inclusive segment range to fetch in addition to the missing span, if any. The
    /// cache clips it to the block and merges it with the missing span into one IO.
    fn range(&mut self, miss: &MissCtx) -> Option<(i64, i64)>;
}

pub struct NoPrefetch;

impl Prefetch for NoPrefetch {
    #[inline]
    fn range(&mut self, _miss: &MissCtx) -> Option<(i64, i64)> {
        None
    }
}

/// Whole block: segments 0 .. segments_per_block-1.
pub struct WholeBlock {
    pub segments_per_block: u32,
}

impl Prefetch for WholeBlock {
    #[inline]
    fn range(&mut self, _miss: &MissCtx) -> Option<(i64, i64)> {
        Some((0, self.segments_per_block as i64 - 1))
    }
}

/// A given range per access (OPT-Range or ML-Range), inclusive segment indices.
pub struct GivenRange<'a> {
    pub start: &'a [i16],
    pub end: &'a [i16],
}

impl Prefetch for GivenRange<'_> {
    #[inline]
    fn range(&mut self, miss: &MissCtx) -> Option<(i64, i64)> {
        Some((
            i64::from(self.start[miss.index]),
            i64::from(self.end[miss.index]),
        ))
    }
}

/// When a prefetch range applies.
pub enum When<'a> {
    /// On every miss.
    Miss,
    /// Only on partial hits (some covered segment was cached).
    PartialHit,
    /// When the per-access "when" score is >= threshold.
    Score { scores: &'a [f64], threshold: f64 },
}

/// Applies `inner` only when the trigger fires.
pub struct Triggered<'a, P: Prefetch> {
    pub inner: P,
    pub when: When<'a>,
}

impl<P: Prefetch> Prefetch for Triggered<'_, P> {
    #[inline]
    fn range(&mut self, miss: &MissCtx) -> Option<(i64, i64)> {
        let fire = match &self.when {
            When::Miss => true,
            When::PartialHit => miss.partial_hit,
            When::Score { scores, threshold } => scores[miss.index] >= *threshold,
        };
        if fire {
            self.inner.range(miss)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers() {
        let mut m = MissCtx {
            index: 1,
            key: 0,
            time: 0.0,
            first_seg: 2,
            last_seg: 2,
            first_missing: 2,
            last_missing: 2,
            partial_hit: false,
        };
        let st = [0i16, 1];
        let en = [3i16, 5];
        let mut a = Triggered {
            inner: GivenRange {
                start: &st,
                end: &en,
            },
            when: When::Miss,
        };
        assert_eq!(a.range(&m), Some((1, 5)));
        let mut b = Triggered {
            inner: WholeBlock {
                segments_per_block: 8,
            },
            when: When::PartialHit,
        };
        assert_eq!(b.range(&m), None);
        m.partial_hit = true;
        assert_eq!(b.range(&m), Some((0, 7)));
        let ws = [0.9, 0.1];
        let mut c = Triggered {
            inner: NoPrefetch,
            when: When::Score {
                scores: &ws,
                threshold: 0.5,
            },
        };
        assert_eq!(c.range(&m), None);
    }
}
