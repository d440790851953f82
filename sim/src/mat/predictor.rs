//! What MAT asks about a tail candidate, and the predictors of the simulator.

use crate::mat::lrb_features::EvictFeatures;
use crate::mat::NO_NEXT;

/// What MAT asks about a tail candidate.
pub trait Predictor {
    /// Whether it predicts at all: `false` evicts the tail unpredicted (the base heuristic).
    const ACTIVE: bool = true;
    /// Whether [`Predictor::distance`] reads the features (else they are not computed).
    const NEEDS_FEATURES: bool;
    /// Whether the cache keeps a [`Predictor::note`] of each cached object's last access.
    const NOTES: bool = false;
    /// What to remember about the access at logical time `t` (request index) until the
    /// object is a candidate: e.g. a precomputed per-access value, read in trace order
    /// instead of at random when the candidate comes up.
    #[inline]
    fn note(&self, _t: u64) -> u64 {
        0
    }
    /// The predicted logical distance from the candidate's last access (request index
    /// `last`, whose note is `note`) to its next access; +inf for "never". `features`: the
    /// candidate's eviction features now (all zero when not `NEEDS_FEATURES` and no samples
    /// are collected).
    fn distance(&mut self, last: u64, note: u64, features: &EvictFeatures) -> f64;
}

/// No model: MAT evicts the LRU tail, with zero predictions (the paper's fallback).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPredictor;

impl Predictor for NoPredictor {
    const ACTIVE: bool = false;
    const NEEDS_FEATURES: bool = false;
    fn distance(&mut self, _last: u64, _note: u64, _features: &EvictFeatures) -> f64 {
        f64::NAN
    }
}

/// The true distance, read from the trace ahead of time ([`DenseTrace::next`]); the next
/// access is noted at each access (in trace order), not looked up per candidate.
///
/// [`DenseTrace::next`]: crate::mat::DenseTrace::next
#[derive(Debug, Clone, Copy)]
pub struct Oracle<'a> {
    pub next: &'a [u32],
}

impl Predictor for Oracle<'_> {
    const NEEDS_FEATURES: bool = false;
    const NOTES: bool = true;
    #[inline]
    fn note(&self, t: u64) -> u64 {
        self.next[t as usize] as u64
    }
    #[inline]
    fn distance(&mut self, last: u64, note: u64, _features: &EvictFeatures) -> f64 {
        match note as u32 {
            NO_NEXT => f64::INFINITY,
            n => (n as u64 - last) as f64,
        }
    }
}

/// A function of (last access, features) as the predictor (tests, experiments).
pub struct FnPredictor<F: FnMut(u64, &EvictFeatures) -> f64>(pub F);

impl<F: FnMut(u64, &EvictFeatures) -> f64> Predictor for FnPredictor<F> {
    const NEEDS_FEATURES: bool = true;
    fn distance(&mut self, last: u64, _note: u64, features: &EvictFeatures) -> f64 {
        (self.0)(last, features)
    }
}
