//! The partitioned cache's knobs: the policy by name, the objective and the configuration.

use crate::core::config::{err, SimError};
use crate::mlcache::settings;

/// The partition policies by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKind {
    Shared,
    Even,
    StaticOptimal,
    DiscreteOptimal,
    MlCache,
}

pub const PARTITION_POLICIES: [&str; 5] = [
    "shared",
    "even",
    "static_optimal",
    "discrete_optimal",
    "mlcache",
];

impl PartitionKind {
    pub fn parse(s: &str) -> Result<Self, SimError> {
        match s.to_ascii_lowercase().as_str() {
            "shared" => Ok(PartitionKind::Shared),
            "even" => Ok(PartitionKind::Even),
            "static_optimal" => Ok(PartitionKind::StaticOptimal),
            "discrete_optimal" => Ok(PartitionKind::DiscreteOptimal),
            "mlcache" => Ok(PartitionKind::MlCache),
            _ => err(format!(
                "unknown partition policy {s:?}; expected one of {}",
                PARTITION_POLICIES.join(", ")
            )),
        }
    }
}

/// What hits are counted for the optima (and the result's `objective_hits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// Every request the cache sees.
    Hits,
    /// Writes only (the paper's headline).
    WriteHits,
}

impl Objective {
    pub fn parse(s: &str) -> Result<Self, SimError> {
        match s.to_ascii_lowercase().as_str() {
            "hits" => Ok(Objective::Hits),
            "write_hits" => Ok(Objective::WriteHits),
            _ => err(format!(
                "unknown objective {s:?}; expected hits or write_hits"
            )),
        }
    }
}

/// No default: the capacity and the interval are the caller's (the job derives them from the
/// trace and the cache, `flashrt partition-replay` requires them).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionConfig {
    /// Cache capacity in pages.
    pub capacity: u64,
    /// Requests (of those the cache sees) per interval.
    pub interval: usize,
    /// Equal steps of the capacity for the optima's search and the monitor's histograms
    /// (the paper's t).
    pub steps: usize,
    /// Reads go around the cache (the paper's setting).
    pub writes_only: bool,
    pub objective: Objective,
}

impl PartitionConfig {
    pub fn validate(&self) -> Result<(), SimError> {
        let capacity = i64::try_from(self.capacity).unwrap_or(i64::MAX);
        if let Some(why) = settings::capacity_problem(capacity) {
            return err(format!("capacity must be {why}, got {}", self.capacity));
        }
        let interval = i64::try_from(self.interval).unwrap_or(i64::MAX);
        if let Some(why) = settings::interval_problem(interval) {
            return err(format!("interval must be {why}, got {}", self.interval));
        }
        if self.steps == 0 || self.steps > 100_000 {
            return err(format!("steps must be in 1..=100000, got {}", self.steps));
        }
        Ok(())
    }
}
