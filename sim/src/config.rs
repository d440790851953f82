//! Simulator configuration. The built-in defaults equal `flashml/config.py` (a Python test
//! checks it); Python passes every value explicitly anyway.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

pub fn err<T>(msg: impl Into<String>) -> Result<T, SimError> {
    Err(SimError(msg.into()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionKind {
    Lru,
    Fifo,
}

impl EvictionKind {
    pub fn parse(s: &str) -> Result<Self, SimError> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Ok(EvictionKind::Lru),
            "fifo" => Ok(EvictionKind::Fifo),
            _ => err(format!(
                "unknown eviction policy {s:?}; expected one of lru, fifo"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdmissionKind {
    AdmitAll,
    CoinFlip {
        p: f64,
        seed: u64,
    },
    RejectX {
        x: u32,
        factor: f64,
    },
    /// Per-access admit flags.
    Opt,
    /// Per-access scores; admit iff score >= the threshold at the access's hour
    /// (`PeakSchedule::threshold_at`).
    Threshold {
        threshold: f64,
        peak: PeakSchedule,
    },
}

/// Peak-aware admission (Baleen §3.1 leaves "optimising for peak" to future work): in the
/// listed hours of the day (UTC, of the trace's clock) the admission threshold is lowered by
/// `bonus`, so more of the write budget is spent while the disks are busiest. The empty
/// schedule (`hours == 0`) is a flat threshold. The same rule is compiled into the policy .so
/// (`flashml_policy_decide_at`) and used by the C runtime.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PeakSchedule {
    /// Bit h set: hour h (0..24) of the day is a peak hour.
    pub hours: u32,
    /// How much lower the threshold is in peak hours, in [0, 1].
    pub bonus: f64,
}

impl PeakSchedule {
    /// Hour of the day (0..24, UTC) of a trace time in seconds.
    #[inline]
    pub fn hour_of_day(t: f64) -> u32 {
        (t.rem_euclid(86_400.0) / 3_600.0) as u32
    }

    /// The admission threshold at time `t`: `threshold - bonus` in a peak hour, else
    /// `threshold` (the same expression, in the same doubles, everywhere it is used).
    #[inline]
    pub fn threshold_at(&self, threshold: f64, t: f64) -> f64 {
        let h = Self::hour_of_day(t);
        if h < 24 && (self.hours >> h) & 1 == 1 {
            threshold - self.bonus
        } else {
            threshold
        }
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if self.hours >> 24 != 0 {
            return err(format!(
                "peak hours must be in 0..24, got mask {:#x}",
                self.hours
            ));
        }
        in_unit("peak bonus", self.bonus)
    }
}

pub const ADMISSION_NAMES: &str = "admitall, coinflip, rejectx, opt, threshold";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefetchKind {
    None,
    Block,
    /// Per-access ranges (start, end), inclusive segment indices.
    Range,
}

impl PrefetchKind {
    pub fn parse(s: &str) -> Result<Self, SimError> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(PrefetchKind::None),
            "block" => Ok(PrefetchKind::Block),
            "range" => Ok(PrefetchKind::Range),
            _ => err(format!(
                "unknown prefetch policy {s:?}; expected one of none, block, range"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WhenKind {
    Miss,
    PartialHit,
    /// Per-access "when" scores; prefetch iff score >= threshold.
    Score {
        threshold: f64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct FlashConfig {
    pub segment_bytes: u64,
    pub block_bytes: u64,
    pub t_seek_s: f64,
    pub bandwidth_bytes_per_s: f64,
    pub disks: u32,
    pub window_s: f64,
    pub warmup_s: f64,
    /// Percent of the full node's traffic in the trace (0, 100].
    pub sample_ratio: f64,
    /// Full-node cache size in GB (2^30 bytes, as the artifact computes it).
    pub cache_gb: f64,
    /// If non-zero, the cache capacity in segments at trace scale (overrides `cache_gb`).
    pub capacity_segments: u64,
    pub eviction: EvictionKind,
    /// Every GET refreshes the recency of all cached segments of its block.
    pub block_level_recency: bool,
    pub admission: AdmissionKind,
    pub prefetch: PrefetchKind,
    pub prefetch_when: WhenKind,
    /// Op codes that are PUTs (charged DT, never admitted); all other ops are GETs.
    pub put_ops: Vec<u8>,
}

pub const GIB: f64 = 1_073_741_824.0;

impl Default for FlashConfig {
    fn default() -> Self {
        FlashConfig {
            segment_bytes: 128 * 1024,
            block_bytes: 8 * 1024 * 1024,
            t_seek_s: 11.5e-3,
            bandwidth_bytes_per_s: 143.0 * 1024.0 * 1024.0,
            disks: 36,
            window_s: 600.0,
            warmup_s: 86_400.0,
            sample_ratio: 100.0,
            cache_gb: 366.475,
            capacity_segments: 0,
            eviction: EvictionKind::Lru,
            block_level_recency: true,
            admission: AdmissionKind::AdmitAll,
            prefetch: PrefetchKind::None,
            prefetch_when: WhenKind::Miss,
            put_ops: vec![3, 4, 6],
        }
    }
}

fn in_unit(name: &str, v: f64) -> Result<(), SimError> {
    if !(0.0..=1.0).contains(&v) {
        return err(format!("{name} must be in [0, 1], got {v}"));
    }
    Ok(())
}

impl FlashConfig {
    pub fn segments_per_block(&self) -> u32 {
        (self.block_bytes / self.segment_bytes) as u32
    }

    /// Cache capacity in segments at trace scale:
    /// floor(cache_gb * 2^30 * sample_ratio/100 / segment_bytes), unless given directly.
    pub fn capacity(&self) -> u64 {
        if self.capacity_segments > 0 {
            return self.capacity_segments;
        }
        let c = self.cache_gb * GIB * (self.sample_ratio / 100.0) / self.segment_bytes as f64;
        if c.is_finite() && c >= 1.0 {
            c.floor() as u64
        } else {
            0
        }
    }

    /// Segment-time: seconds to transfer one segment.
    pub fn segment_time(&self) -> f64 {
        self.segment_bytes as f64 / self.bandwidth_bytes_per_s
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if self.segment_bytes == 0 {
            return err("segment_bytes must be > 0");
        }
        if self.block_bytes == 0 || !self.block_bytes.is_multiple_of(self.segment_bytes) {
            return err(format!(
                "block_bytes ({}) must be a positive multiple of segment_bytes ({})",
                self.block_bytes, self.segment_bytes
            ));
        }
        if self.block_bytes / self.segment_bytes > 1 << 20 {
            return err("block_bytes / segment_bytes must be at most 2^20 segments per block");
        }
        if !(self.t_seek_s.is_finite() && self.t_seek_s >= 0.0) {
            return err(format!("t_seek_s must be >= 0, got {}", self.t_seek_s));
        }
        if !(self.bandwidth_bytes_per_s.is_finite() && self.bandwidth_bytes_per_s > 0.0) {
            return err(format!(
                "bandwidth must be > 0, got {}",
                self.bandwidth_bytes_per_s
            ));
        }
        if self.disks == 0 {
            return err("disks must be > 0");
        }
        if !(self.window_s.is_finite() && self.window_s > 0.0) {
            return err(format!("window_s must be > 0, got {}", self.window_s));
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0) {
            return err(format!("warmup_s must be >= 0, got {}", self.warmup_s));
        }
        if !(self.sample_ratio > 0.0 && self.sample_ratio <= 100.0) {
            return err(format!(
                "sample_ratio must be in (0, 100] percent, got {}",
                self.sample_ratio
            ));
        }
        if self.capacity_segments == 0 && !(self.cache_gb.is_finite() && self.cache_gb > 0.0) {
            return err(format!("cache size must be > 0 GB, got {}", self.cache_gb));
        }
        let cap = self.capacity();
        if cap == 0 {
            return err(format!(
                "cache of {} GB at sample ratio {}% holds less than one {}-byte segment",
                self.cache_gb, self.sample_ratio, self.segment_bytes
            ));
        }
        let units = if self.eviction == EvictionKind::Lru && self.block_level_recency {
            cap
        } else {
            cap.saturating_mul(self.segments_per_block() as u64)
        };
        if units >= u32::MAX as u64 {
            return err(format!(
                "cache capacity of {cap} segments is too large for one simulator"
            ));
        }
        match self.admission {
            AdmissionKind::CoinFlip { p, .. } => in_unit("coinflip p", p)?,
            AdmissionKind::RejectX { factor, .. } => {
                if !(factor.is_finite() && factor > 0.0) {
                    return err(format!("rejectx history factor must be > 0, got {factor}"));
                }
                if (factor * cap as f64) > 1e10 {
                    return err("rejectx history (factor x capacity) is too large");
                }
            }
            AdmissionKind::Threshold { threshold, peak } => {
                in_unit("admission threshold", threshold)?;
                peak.validate()?;
            }
            AdmissionKind::AdmitAll | AdmissionKind::Opt => {}
        }
        if let WhenKind::Score { threshold } = self.prefetch_when {
            in_unit("prefetch-when threshold", threshold)?;
        }
        Ok(())
    }

    /// RejectX history length in keys: max(1, floor(factor * capacity)).
    pub fn rejectx_history(&self) -> usize {
        match self.admission {
            AdmissionKind::RejectX { factor, .. } => {
                ((factor * self.capacity() as f64).floor() as usize).max(1)
            }
            _ => 0,
        }
    }

    /// The fractional part of factor * capacity (0 below one key): the share of RejectX
    /// queries that look one key further back (see `admission::RejectX`).
    pub fn rejectx_fraction(&self) -> f64 {
        match self.admission {
            AdmissionKind::RejectX { factor, .. } => {
                let h = factor * self.capacity() as f64;
                if h < 1.0 {
                    0.0
                } else {
                    h - h.floor()
                }
            }
            _ => 0.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityUnit {
    Bytes,
    Objects,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectConfig {
    pub eviction: EvictionKind,
    pub capacity: u64,
    pub unit: CapacityUnit,
}

impl ObjectConfig {
    pub fn validate(&self) -> Result<(), SimError> {
        if self.capacity == 0 {
            return err("capacity must be > 0");
        }
        if self.unit == CapacityUnit::Objects && self.capacity >= u32::MAX as u64 {
            return err("object-count capacity must be < 2^32");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_capacity() {
        let c = FlashConfig {
            sample_ratio: 0.1,
            ..Default::default()
        };
        assert_eq!(c.capacity(), 3002);
        assert_eq!(c.segments_per_block(), 64);
        c.validate().unwrap();
    }

    #[test]
    fn bad_configs() {
        let bad = [
            FlashConfig {
                cache_gb: 0.0,
                ..Default::default()
            },
            FlashConfig {
                cache_gb: -1.0,
                ..Default::default()
            },
            FlashConfig {
                cache_gb: 1e-9,
                ..Default::default()
            },
            FlashConfig {
                sample_ratio: 0.0,
                ..Default::default()
            },
            FlashConfig {
                block_bytes: 1000,
                ..Default::default()
            },
            FlashConfig {
                window_s: 0.0,
                ..Default::default()
            },
            FlashConfig {
                admission: AdmissionKind::Threshold {
                    threshold: 1.5,
                    peak: PeakSchedule::default(),
                },
                ..Default::default()
            },
            FlashConfig {
                admission: AdmissionKind::CoinFlip {
                    p: f64::NAN,
                    seed: 0,
                },
                ..Default::default()
            },
            FlashConfig {
                admission: AdmissionKind::RejectX { x: 1, factor: 0.0 },
                ..Default::default()
            },
            FlashConfig {
                prefetch_when: WhenKind::Score { threshold: -0.1 },
                ..Default::default()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
        assert!(EvictionKind::parse("lfu").is_err());
        assert!(PrefetchKind::parse("x").is_err());
    }
}
