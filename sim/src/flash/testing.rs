//! Fixtures of the flash tests (and of `compose`'s): traces built from rows, a tiny
//! configuration, and runs of the plain and the partitioned cache.

use crate::core::config::{FlashConfig, SimError};
use crate::flash::{
    simulate, simulate_partitioned, FlashResult, PolicyArrays, StreamPartition, Trace,
};

pub(crate) const SEG: u64 = 131_072;

/// A trace's columns, owned (tests build them; `trace` lends them out).
pub(crate) struct Rows {
    pub time: Vec<f64>,
    pub key: Vec<u64>,
    pub offset: Vec<u64>,
    pub size: Vec<u64>,
    pub op: Vec<u8>,
}

impl Rows {
    pub(crate) fn trace(&self) -> Trace<'_> {
        Trace {
            time: &self.time,
            key: &self.key,
            offset: &self.offset,
            size: &self.size,
            op: &self.op,
        }
    }
}

pub(crate) fn rows(r: &[(f64, u64, u64, u64, u8)]) -> Rows {
    Rows {
        time: r.iter().map(|x| x.0).collect(),
        key: r.iter().map(|x| x.1).collect(),
        offset: r.iter().map(|x| x.2).collect(),
        size: r.iter().map(|x| x.3).collect(),
        op: r.iter().map(|x| x.4).collect(),
    }
}

pub(crate) fn run(
    r: &Rows,
    cfg: &FlashConfig,
    arrays: &PolicyArrays,
) -> Result<FlashResult, SimError> {
    simulate(&r.trace(), arrays, cfg)
}

/// Capacity 5: holds 4 segments (the artifact's rule).
pub(crate) fn tiny() -> FlashConfig {
    FlashConfig {
        capacity_segments: 5,
        t_seek_s: 0.01,
        bandwidth_bytes_per_s: 10.0 * SEG as f64,
        disks: 1,
        window_s: 10.0,
        warmup_s: 0.0,
        ..Default::default()
    }
}

pub(crate) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

/// [`simulate_partitioned`] over `r`'s accesses, partitioned among `streams` streams.
pub(crate) fn run_part(
    r: &Rows,
    cfg: &FlashConfig,
    stream: &[u32],
    bounds: &[u64],
    shares: &[f64],
    streams: u32,
) -> Result<FlashResult, SimError> {
    let t = Trace {
        time: &r.time,
        key: &r.key,
        offset: &r.offset,
        size: &r.size,
        op: &r.op,
    };
    let part = StreamPartition {
        streams,
        stream,
        bounds,
        shares,
    };
    simulate_partitioned(&t, &PolicyArrays::default(), cfg, Some(&part))
}
