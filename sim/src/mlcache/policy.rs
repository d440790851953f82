//! The partition policies: what sets every stream's quota at the start of an interval.

use crate::core::shares::apportion;

/// What a policy may see when it sets the quotas of an interval.
pub struct IntervalView<'a> {
    pub n_streams: usize,
    pub capacity: u64,
    pub steps: usize,
    /// The monitor's histograms of the previous interval (`n_streams * steps`, the paper's
    /// `A_i`), or None for the first interval.
    pub prev_histograms: Option<&'a [u64]>,
}

/// A partition policy: at the start of each interval, the pages of every stream.
pub trait PartitionPolicy {
    /// Quotas in pages for interval `iv` (one per stream, summing to at most the capacity),
    /// or None: one LRU shared by all streams (no partitions).
    fn allocate(&mut self, iv: usize, view: &IntervalView<'_>) -> Option<Vec<u64>>;
}

/// One LRU over every stream.
pub struct Shared;

impl PartitionPolicy for Shared {
    fn allocate(&mut self, _: usize, _: &IntervalView<'_>) -> Option<Vec<u64>> {
        None
    }
}

/// capacity / k pages each (largest remainder for the rest).
pub struct Even;

impl PartitionPolicy for Even {
    fn allocate(&mut self, _: usize, v: &IntervalView<'_>) -> Option<Vec<u64>> {
        Some(apportion(&vec![1; v.n_streams], v.capacity))
    }
}

/// The same quotas every interval.
pub struct Fixed(pub Vec<u64>);

impl PartitionPolicy for Fixed {
    fn allocate(&mut self, _: usize, _: &IntervalView<'_>) -> Option<Vec<u64>> {
        Some(self.0.clone())
    }
}

/// Quotas given per interval in advance (`pages[iv]`); past the last, the last one.
pub struct PerInterval(pub Vec<Vec<u64>>);

impl PartitionPolicy for PerInterval {
    fn allocate(&mut self, iv: usize, _: &IntervalView<'_>) -> Option<Vec<u64>> {
        self.0.get(iv).or(self.0.last()).cloned()
    }
}
