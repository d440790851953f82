//! MAT (machine learning at the tail, Yang et al., arXiv 2301.11886) in object mode,
//! and Belady's MIN on the same loop.
//!
//! The base heuristic is LRU ([`Reinsert`] for [`Lru`]). On each eviction [`Mat`] runs
//! Algorithm 1, following the prose where its pseudo-code contradicts it:
//! * take the tail candidate off (`pop_tail`), predict the distance d from its last access to
//!   its next access, TTA = |d - age| (age = logical requests since its last access, §4.5);
//! * TTA >= T: evict it; else keep it (re-insert at the MRU head) and try the next tail
//!   candidate, at most L (`max_candidates`) in all;
//! * none of the L reaches T: evict the one with the largest TTA (the first of equal ones),
//!   taking it back out of the head where it was just re-inserted;
//! * threshold controller ([`Controller::Sign`], the paper's): r = the try that found the
//!   victim, L + 1 on exhaustion; T *= 1 + delta if r < k, T *= 1 - delta if r > k (unchanged
//!   if r == k); or ([`Controller::Mean`]) T *= 1 + delta (k - p), p = the candidates taken
//!   (L on exhaustion), which holds the mean of p at k;
//! * with `reuse_predictions` (the paper's recorded predictions, §4.6: "the predicted TTAs are
//!   recorded in the metadata ... the ML model can directly use the recorded TTA"): a
//!   candidate's predicted distance d is kept with its slot until the object's next access,
//!   so a candidate kept and seen at the tail again is judged by TTA = |d - its age now|
//!   without a new prediction (nor its features, unless samples are collected); only
//!   predictions made count as predictions, every candidate taken as a try (r);
//! * T0 (when not given): the number of cached objects at the first eviction, i.e. the
//!   capacity in objects with `unit = objects`, capacity / mean cached object size in bytes.
//!
//! Predictors ([`Predictor`]): none ([`NoPredictor`]: the tail is evicted unpredicted, so MAT
//! is exactly LRU and T never moves), the oracle ([`Oracle`]: the true next access from the
//! trace), a function ([`FnPredictor`]: tests), a compiled .so (`crate::mat::so_evict`).
//! Predictions are counted one per candidate (the paper's batches of B = 64 are not
//! simulated: a batch only changes when the predictions are made, not their values).
//!
//! Training samples (`collect_samples`): every candidate that leaves the tail is tagged, once
//! per time it leaves (so a candidate kept and examined again gives a second sample). A sample
//! is the candidate's 44 features at tag time (the ones the predictor saw) and, at the
//! object's next request, the label log1p(d), d = that request - the candidate's last access;
//! d >= memory_window (or never again, once the window has passed within the trace):
//! log1p(2 * memory_window), LRB's convention. The metadata of evicted objects is kept (the
//! ghost store: every object's history lives as long as the run, forgotten after a gap of the
//! window), so returning ones yield their labels. Samples still open at the end of the trace
//! (their window reaches past it) get the not-returned label and `censored = true`.
//!
//! The loop is libCacheSim's object model, as `crate::core::objects`: a hit refreshes recency and
//! never changes the recorded size; a miss evicts until the object fits, then inserts it; an
//! object larger than the whole cache is never inserted (a miss, no eviction). Objects get
//! dense ids first ([`DenseTrace`]); the cache is kept by dense slots ([`Slots`]).
//!
//! Cost: 4 bytes per distinct object (its slot handle) and ~40 per cached object; with a
//! predictor that reads features, or with samples, the feature history of every object
//! (`lrb_features`: 24 bytes, +208 for objects seen twice within the window); 377 bytes
//! per training sample; the oracle and Belady read a 4-byte next-request index per request.
//! `ns_per_eviction` is the wall time of the decisions (TSC-timed, `DecisionClock`).
//!
//! [`Reinsert`]: crate::core::eviction::Reinsert
//! [`Lru`]: crate::core::eviction::Lru

mod belady;
mod chooser;
mod clock;
mod dense;
mod hugepages;
pub mod lrb;
pub mod lrb_features;
mod object;
mod params;
mod predictor;
mod samples;
pub mod settings;
mod slots;
pub mod so_evict;
#[cfg(test)]
mod testing;

pub use belady::simulate_belady;
pub use chooser::{Mat, MatStats};
pub(crate) use clock::DecisionClock;
pub use dense::{DenseTrace, NO_NEXT};
pub use object::{simulate_mat, MatResult};
pub use params::{Controller, MatParams};
pub use predictor::{FnPredictor, NoPredictor, Oracle, Predictor};
pub use samples::{SampleBuf, Samples};
pub use slots::Slots;

/// No slot, no sample: the empty index.
const NIL: u32 = u32::MAX;
