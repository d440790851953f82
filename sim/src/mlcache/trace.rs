//! The multi-stream page trace, and the requests the cache sees with their per-stream stack
//! distances.

use crate::core::config::{err, SimError};
use crate::mlcache::config::{Objective, PartitionConfig};
use crate::mlcache::reuse::{interval_histograms, interval_hit_curves, stream_stack_distances};

/// A multi-stream page trace: request `i` is page `keys[i]` of stream `streams[i]`
/// (`< n_streams`), a write iff `writes[i]`.
#[derive(Debug, Clone, Copy)]
pub struct StreamTrace<'a> {
    pub keys: &'a [u64],
    pub streams: &'a [u32],
    pub writes: &'a [bool],
    pub n_streams: usize,
}

impl StreamTrace<'_> {
    pub fn validate(&self) -> Result<(), SimError> {
        let n = self.keys.len();
        if self.streams.len() != n || self.writes.len() != n {
            return err(format!(
                "keys, streams and writes must have one element per request: {n}, {}, {}",
                self.streams.len(),
                self.writes.len()
            ));
        }
        if self.n_streams == 0 {
            return err("n_streams must be >= 1");
        }
        if let Some(i) = self
            .streams
            .iter()
            .position(|&s| s as usize >= self.n_streams)
        {
            return err(format!(
                "request {i}: stream {} is not below n_streams = {}",
                self.streams[i], self.n_streams
            ));
        }
        Ok(())
    }
}

/// The requests the cache sees (all, or writes only) as their own dense sequence, with each
/// request's per-stream stack distance and whether the objective counts it.
pub struct CachedRequests {
    /// Index into the full trace of each cached request.
    pub index: Vec<usize>,
    pub keys: Vec<u64>,
    pub streams: Vec<u32>,
    pub counted: Vec<bool>,
    pub distances: Vec<u64>,
}

impl CachedRequests {
    pub fn new(trace: &StreamTrace<'_>, cfg: &PartitionConfig) -> Self {
        let index: Vec<usize> = (0..trace.keys.len())
            .filter(|&i| !cfg.writes_only || trace.writes[i])
            .collect();
        let keys: Vec<u64> = index.iter().map(|&i| trace.keys[i]).collect();
        let streams: Vec<u32> = index.iter().map(|&i| trace.streams[i]).collect();
        let counted = index
            .iter()
            .map(|&i| cfg.objective == Objective::Hits || trace.writes[i])
            .collect();
        let distances = stream_stack_distances(&keys, &streams, trace.n_streams);
        CachedRequests {
            index,
            keys,
            streams,
            counted,
            distances,
        }
    }

    pub fn n_intervals(&self, cfg: &PartitionConfig) -> usize {
        self.keys.len().div_ceil(cfg.interval)
    }

    /// Per-interval, per-stream hit curves of the objective on the `steps + 1` grid
    /// ([`interval_hit_curves`]).
    pub fn curves(&self, n_streams: usize, cfg: &PartitionConfig) -> Vec<u64> {
        interval_hit_curves(
            &self.distances,
            &self.streams,
            Some(&self.counted),
            n_streams,
            cfg.interval,
            cfg.steps,
            cfg.capacity,
        )
        .0
    }

    /// The monitor's histograms (the paper's `A_i`) of every interval over the requests the
    /// cache sees ([`interval_histograms`]).
    pub fn histograms(&self, n_streams: usize, cfg: &PartitionConfig) -> Vec<u64> {
        interval_histograms(
            &self.distances,
            &self.streams,
            None,
            n_streams,
            cfg.interval,
            cfg.steps,
            cfg.capacity,
        )
        .0
    }
}
