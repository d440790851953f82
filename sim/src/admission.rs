//! Admission policies: asked once per GET miss whether the backend IO's uncached segments
//! (requested and prefetched alike) are written to flash.

use crate::config::PeakSchedule;
use crate::hash::{new_map, splitmix64, unit_interval, FastMap};

/// What an admission policy may look at for one miss.
#[derive(Debug, Clone, Copy)]
pub struct MissCtx {
    /// Row index of the access in the trace.
    pub index: usize,
    pub key: u64,
    pub time: f64,
    /// Segments the access covers (inclusive).
    pub first_seg: u32,
    pub last_seg: u32,
    /// First and last covered segment that is not cached (inclusive).
    pub first_missing: u32,
    pub last_missing: u32,
    /// Some covered segment was cached.
    pub partial_hit: bool,
}

pub trait Admission {
    fn admit(&mut self, miss: &MissCtx) -> bool;
}

pub struct AdmitAll;

impl Admission for AdmitAll {
    #[inline]
    fn admit(&mut self, _miss: &MissCtx) -> bool {
        true
    }
}

/// Admit with probability `p`, decided by a deterministic hash of the block key and the
/// access index: `unit_interval(splitmix64(key ^ splitmix64(index ^ seed))) < p`.
pub struct CoinFlip {
    pub p: f64,
    pub seed: u64,
}

impl CoinFlip {
    #[inline]
    pub fn draw(key: u64, index: u64, seed: u64) -> f64 {
        unit_interval(splitmix64(key ^ splitmix64(index ^ seed)))
    }
}

impl Admission for CoinFlip {
    #[inline]
    fn admit(&mut self, miss: &MissCtx) -> bool {
        Self::draw(miss.key, miss.index as u64, self.seed) < self.p
    }
}

/// RejectX: the history holds the keys of the last `history` admission queries (this one
/// included); admit iff the key occurs more than `x` times in it, i.e. it was seen at least
/// `x` times before within the window. Memory: O(history).
///
/// The window is `factor x capacity` keys, a real number; at small sample ratios its integer
/// part alone moves the write rate in big steps (2 keys vs 3 can be 27 vs 43 MB/s). A
/// fractional part `frac` dithers it: each query looks back `history + 1` keys with
/// probability `frac` (a deterministic draw of key and query index, as CoinFlip), else
/// `history` keys, so the admitted share moves smoothly with the factor.
pub struct RejectX {
    x: u32,
    history: usize,
    frac: f64,
    ring: Vec<u64>,
    pos: usize,
    counts: FastMap<u64, u32>,
}

/// Seed of RejectX's dithering draws (fixed: the policy has no seed knob).
pub const REJECTX_DITHER_SEED: u64 = 0x0052_454a_4543_5458;

impl RejectX {
    pub fn new(x: u32, history: usize, frac: f64) -> Self {
        let history = history.max(1);
        RejectX {
            x,
            history,
            frac: if frac > 0.0 && frac < 1.0 { frac } else { 0.0 },
            ring: Vec::new(),
            pos: 0,
            counts: new_map(),
        }
    }
}

impl Admission for RejectX {
    #[inline]
    fn admit(&mut self, miss: &MissCtx) -> bool {
        let key = miss.key;
        let cap = self.history + usize::from(self.frac > 0.0);
        if self.ring.len() < cap {
            self.ring.push(key);
        } else {
            let old = std::mem::replace(&mut self.ring[self.pos], key);
            self.pos += 1;
            if self.pos == cap {
                self.pos = 0;
            }
            if let Some(c) = self.counts.get_mut(&old) {
                *c -= 1;
                if *c == 0 {
                    self.counts.remove(&old);
                }
            }
        }
        let c = self.counts.entry(key).or_insert(0);
        *c += 1;
        let mut seen = *c;
        // a `history`-key window leaves out the oldest of the ring's `history + 1` keys
        if self.frac > 0.0
            && self.ring.len() == cap
            && self.ring[self.pos] == key
            && CoinFlip::draw(key, miss.index as u64, REJECTX_DITHER_SEED) >= self.frac
        {
            seen -= 1;
        }
        seen > self.x
    }
}

/// OPT: per-access admit flags computed offline (the episode job).
pub struct Opt<'a> {
    pub flags: &'a [u8],
}

impl Admission for Opt<'_> {
    #[inline]
    fn admit(&mut self, miss: &MissCtx) -> bool {
        self.flags[miss.index] != 0
    }
}

/// Threshold: per-access model scores computed in one vectorised pass; admit iff
/// `score >= peak.threshold_at(threshold, time)`.
pub struct Threshold<'a> {
    pub scores: &'a [f64],
    pub threshold: f64,
    pub peak: PeakSchedule,
}

impl Admission for Threshold<'_> {
    #[inline]
    fn admit(&mut self, miss: &MissCtx) -> bool {
        self.scores[miss.index] >= self.peak.threshold_at(self.threshold, miss.time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(index: usize, key: u64) -> MissCtx {
        MissCtx {
            index,
            key,
            time: 0.0,
            first_seg: 0,
            last_seg: 0,
            first_missing: 0,
            last_missing: 0,
            partial_hit: false,
        }
    }

    #[test]
    fn rejectx_window() {
        let mut r = RejectX::new(1, 3, 0.0);
        assert!(!r.admit(&ctx(0, 7))); // [7]
        assert!(r.admit(&ctx(1, 7))); // [7,7]
        assert!(!r.admit(&ctx(2, 8))); // [7,7,8]
        assert!(!r.admit(&ctx(3, 9))); // [7,8,9]
        assert!(!r.admit(&ctx(4, 1))); // [8,9,1]
        assert!(!r.admit(&ctx(5, 7))); // [9,1,7]: 7 fell out of the window
        assert!(r.admit(&ctx(6, 7)));
    }

    /// Dithered RejectX against the obvious definition: query i looks back over the last
    /// w keys (this one included), w = history + 1 when the draw is below frac.
    #[test]
    fn rejectx_dithered_window_equals_slow_definition() {
        for &(history, frac) in &[(1usize, 0.5f64), (2, 0.3), (3, 0.9), (5, 0.01), (4, 0.0)] {
            let mut r = RejectX::new(1, history, frac);
            let keys: Vec<u64> = (0..5_000u64)
                .map(|i| crate::hash::splitmix64(i ^ 0x77) % 9)
                .collect();
            let mut admitted = 0;
            for (i, &k) in keys.iter().enumerate() {
                let w = if CoinFlip::draw(k, i as u64, REJECTX_DITHER_SEED) < frac {
                    history + 1
                } else {
                    history
                };
                let lo = (i + 1).saturating_sub(w);
                let seen = keys[lo..=i].iter().filter(|&&x| x == k).count();
                let want = seen > 1;
                assert_eq!(r.admit(&ctx(i, k)), want, "h={history} f={frac} i={i}");
                admitted += usize::from(want);
            }
            assert!(admitted > 0);
        }
    }

    #[test]
    fn coinflip_extremes_and_rate() {
        let mut never = CoinFlip { p: 0.0, seed: 0 };
        let mut always = CoinFlip { p: 1.0, seed: 0 };
        let mut half = CoinFlip { p: 0.5, seed: 0 };
        let mut n = 0;
        for i in 0..10_000 {
            assert!(!never.admit(&ctx(i, 3)));
            assert!(always.admit(&ctx(i, 3)));
            n += half.admit(&ctx(i, i as u64 / 7)) as usize;
        }
        assert!((4_700..5_300).contains(&n), "{n}");
    }

    #[test]
    fn opt_and_threshold() {
        let flags = [0u8, 1];
        let mut o = Opt { flags: &flags };
        assert!(!o.admit(&ctx(0, 1)));
        assert!(o.admit(&ctx(1, 1)));
        let scores = [0.2, 0.5];
        let mut t = Threshold {
            scores: &scores,
            threshold: 0.5,
            peak: PeakSchedule::default(),
        };
        assert!(!t.admit(&ctx(0, 1)));
        assert!(t.admit(&ctx(1, 1)));
    }

    #[test]
    fn peak_hours_lower_the_threshold() {
        // Peak hours 14 and 15 UTC: 0.2 below the threshold there, nowhere else.
        let peak = PeakSchedule {
            hours: (1 << 14) | (1 << 15),
            bonus: 0.2,
        };
        let day = 86_400.0 * 18_000.0; // midnight UTC
        let at = |h: f64| day + h * 3_600.0;
        assert_eq!(peak.threshold_at(0.5, at(13.999)), 0.5);
        assert_eq!(peak.threshold_at(0.5, at(14.0)), 0.5 - 0.2);
        assert_eq!(peak.threshold_at(0.5, at(15.999)), 0.5 - 0.2);
        assert_eq!(peak.threshold_at(0.5, at(16.0)), 0.5);
        assert_eq!(peak.threshold_at(0.5, at(14.5 - 24.0)), 0.5 - 0.2); // the day before
        assert_eq!(PeakSchedule::hour_of_day(-1.0), 23);
        let scores = [0.35, 0.35];
        let mut t = Threshold {
            scores: &scores,
            threshold: 0.5,
            peak,
        };
        let mut c = ctx(0, 1);
        c.time = at(3.0);
        assert!(!t.admit(&c));
        c.index = 1;
        c.time = at(14.2);
        assert!(t.admit(&c));
        assert!(peak.validate().is_ok());
        assert!(PeakSchedule {
            hours: 1 << 24,
            bonus: 0.1
        }
        .validate()
        .is_err());
        assert!(PeakSchedule {
            hours: 1,
            bonus: 1.5
        }
        .validate()
        .is_err());
    }
}
