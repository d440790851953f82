//! What a run reports: the metrics, the per-window series and the extra counts, and the
//! statistics over the measured windows.

/// The metrics, with the names the Python API and CLI report (README "Metrics" maps each to
/// BCacheSim's name). DT utilisations are over the measured windows (after the warm-up);
/// `peak/mean/p50/p90/p99_dt_util` count GET disk-head time, the `_with_puts` ones add PUTs.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashMetrics {
    pub peak_dt_util: f64,
    pub mean_dt_util: f64,
    pub p50_dt_util: f64,
    pub p90_dt_util: f64,
    pub p99_dt_util: f64,
    pub peak_dt_util_with_puts: f64,
    pub mean_dt_util_with_puts: f64,
    pub p50_dt_util_with_puts: f64,
    pub p90_dt_util_with_puts: f64,
    pub p99_dt_util_with_puts: f64,
    /// Segments written x segment bytes / trace seconds x 100/sample ratio, in 10^6 B/s.
    pub flash_write_rate_mbps: f64,
    /// The same in 2^20 B/s (the artifact's FlashWriteRate).
    pub flash_write_rate_mibps: f64,
    pub dwpd: f64,
    pub io_hit_ratio: f64,
    pub byte_hit_ratio: f64,
    pub segment_hit_ratio: f64,
    /// 1 - GET disk-head time / GET disk-head time with no cache, whole trace (the
    /// artifact's ServiceTimeSavedRatio1).
    pub service_time_saved_ratio: f64,
    /// GETs that were hits / GETs, whole trace (the artifact's IOPSSavedRatio; equal to
    /// `io_hit_ratio`, kept under both names).
    pub iops_saved_ratio: f64,
    pub avg_eviction_age_s: f64,
    pub backend_ios: u64,
    pub backend_bytes: u64,
    pub admitted_segments: u64,
    pub prefetched_segments: u64,
    pub accesses: u64,
    pub wall_s: f64,
}

/// Per-window series (all windows, warm-up included and flagged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Window start (trace seconds, same clock as the trace's `time`).
    pub time: Vec<f64>,
    /// GET disk-head time utilisation.
    pub dt_util: Vec<f64>,
    /// GET + PUT disk-head time utilisation.
    pub dt_util_with_puts: Vec<f64>,
    pub write_rate_mbps: Vec<f64>,
    pub warmup: Vec<bool>,
}

/// Extra counts that are useful but not part of the fixed metric set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    pub capacity_segments: u64,
    pub segments_per_block: u32,
    pub get_accesses: u64,
    pub put_accesses: u64,
    pub hits: u64,
    pub evictions: u64,
    pub trace_seconds: f64,
    pub windows: u64,
    pub measured_windows: u64,
    pub rejectx_history: u64,
    pub peak_cached_blocks: u64,
    /// Partitioned mode's per-stream counts (None without partitions).
    pub streams: Option<StreamInfo>,
}

/// Per-stream counts of a partitioned run (vectors of length k, indexed by stream).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamInfo {
    pub streams: u32,
    /// GETs of each stream (by the access's own stream).
    pub gets: Vec<u64>,
    /// GET hits of each stream (by the access's own stream).
    pub hits: Vec<u64>,
    /// Segments inserted into each stream's partition (requested and prefetched).
    pub admitted_segments: Vec<u64>,
    /// Segments evicted from each stream's partition (on insertion and on resize).
    pub evictions: Vec<u64>,
    /// The quotas applied, in segments: one row of k per interval (`intervals x k`).
    pub quotas: Vec<u64>,
    /// Evictions because a partition's quota shrank at an interval boundary (also counted
    /// in `evictions` and `Info::evictions`).
    pub resize_evictions: u64,
    /// Share rows that were invalid and replaced by an even split.
    pub fallbacks: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FlashResult {
    pub metrics: FlashMetrics,
    pub series: Series,
    pub info: Info,
}

/// (peak, mean, p50, p90, p99) of the measured windows' utilisations (sorts them).
pub(super) fn window_stats(measured: &mut [f64]) -> (f64, f64, f64, f64, f64) {
    let mean = measured.iter().sum::<f64>() / measured.len() as f64;
    measured.sort_by(f64::total_cmp);
    (
        *measured.last().unwrap(),
        mean,
        percentile(measured, 0.5),
        percentile(measured, 0.9),
        percentile(measured, 0.99),
    )
}

/// Linear interpolation between closest ranks (numpy's default): `sorted` ascending, non-empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let pos = q * (n - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash::testing::close;

    #[test]
    fn percentile_matches_numpy_linear() {
        let v = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert!(close(percentile(&v, 0.9), 4.0 + 4.0 * 0.7));
        assert_eq!(percentile(&[5.0], 0.99), 5.0);
    }
}
