//! Training samples: the candidates tagged as they leave the tail, labelled at their
//! object's next request.

use crate::mat::lrb_features::EvictFeatures;
use crate::mat::NIL;

/// Training samples: row i is `features[i * 44 .. (i + 1) * 44]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    pub features: Vec<f64>,
    /// log1p(distance from the last access to the next access), or log1p(2 * window).
    pub label: Vec<f64>,
    /// Logical time the candidate was tagged (the request whose miss made the decision).
    pub time: Vec<u64>,
    /// The candidate's last access at tag time.
    pub last: Vec<u64>,
    /// The window had not closed by the end of the trace (label: not returned, unverified).
    pub censored: Vec<bool>,
}

impl Samples {
    pub fn len(&self) -> usize {
        self.label.len()
    }
    pub fn is_empty(&self) -> bool {
        self.label.is_empty()
    }
}

/// Tagged candidates awaiting their object's next request.
pub struct SampleBuf {
    s: Samples,
    /// Per object: the newest open sample (a chain through `next_open`).
    open_head: Vec<u32>,
    next_open: Vec<u32>,
    window: u64,
}

impl SampleBuf {
    pub fn new(objects: usize, window: u64) -> Self {
        SampleBuf {
            s: Samples::default(),
            open_head: vec![NIL; objects],
            next_open: Vec::new(),
            window,
        }
    }

    fn label_of(&self, d: u64) -> f64 {
        if d >= self.window {
            (2.0 * self.window as f64).ln_1p()
        } else {
            (d as f64).ln_1p()
        }
    }

    pub(crate) fn tag(&mut self, id: u32, now: u64, last: u64, f: &EvictFeatures) {
        let i = self.s.label.len() as u32;
        self.s.features.extend_from_slice(f);
        self.s.label.push(f64::NAN);
        self.s.time.push(now);
        self.s.last.push(last);
        self.s.censored.push(false);
        self.next_open.push(self.open_head[id as usize]);
        self.open_head[id as usize] = i;
    }

    /// `id` is requested at `t`; `last` is its previous access.
    #[inline]
    pub(crate) fn requested(&mut self, id: u32, t: u64, last: u64) {
        let mut i = self.open_head[id as usize];
        if i == NIL {
            return;
        }
        let label = self.label_of(t - last);
        while i != NIL {
            self.s.label[i as usize] = label;
            i = self.next_open[i as usize];
        }
        self.open_head[id as usize] = NIL;
    }

    /// The trace has `n` requests: close the open samples.
    pub(crate) fn finish(mut self, n: u64) -> Samples {
        let not_back = self.label_of(self.window);
        for i in 0..self.s.label.len() {
            if self.s.label[i].is_nan() {
                self.s.label[i] = not_back;
                self.s.censored[i] = self.s.last[i] + self.window > n;
            }
        }
        self.s
    }
}
#[cfg(test)]
mod tests {
    use crate::core::config::CapacityUnit;
    use crate::mat::testing::cfg;
    use crate::mat::{simulate_mat, DenseTrace, MatParams, NoPredictor};

    #[test]
    fn samples_by_hand() {
        // capacity 1 object: a b a, window 1024
        let keys = [1, 2, 1];
        let sizes = [5, 6, 5];
        let dt = DenseTrace::new(&keys).unwrap();
        let p = MatParams {
            collect_samples: true,
            memory_window: 1024,
            ..MatParams::algorithm1()
        };
        let r = simulate_mat(
            &keys,
            &sizes,
            &cfg(1, CapacityUnit::Objects),
            p,
            NoPredictor,
            &dt,
        )
        .unwrap();
        let s = r.samples.unwrap();
        // t=1: a (last 0) tagged, evicted; t=2: b (last 1) tagged; a returns at 2: d = 2
        assert_eq!(s.time, vec![1, 2]);
        assert_eq!(s.last, vec![0, 1]);
        assert_eq!(s.label[0], 2f64.ln_1p());
        assert_eq!(s.label[1], 2048f64.ln_1p());
        assert_eq!(s.censored, vec![false, true]); // 1 + 1024 > 3
        assert_eq!(s.features[0], 1.0); // age of a at t = 1
        assert_eq!(s.features[32], 5.0); // its size
    }
}
