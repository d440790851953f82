//! flashml_sim: the trace-driven flash-cache simulator.
//!
//! * [`flash`]: Baleen's flash-cache model (segments of blocks, DT, admission, prefetch).
//! * [`objects`]: libCacheSim's object-cache model (key, size; byte or count capacity).
//! * [`contract`]: the feature contract's constants (generated from features/contract.toml).
//! * Policies live behind traits: [`eviction::Eviction`], [`admission::Admission`],
//!   [`prefetch::Prefetch`].
//! * [`mat`]: MAT (learned eviction at the tail of LRU) and Belady in object mode, with LRB's
//!   eviction features ([`lrb_features`]) and the compiled eviction .so ([`so_evict`]);
//!   [`flash_mat`]: MAT as the eviction of flash-cache mode (block units); [`lrb`]: LRB's
//!   decision (64 sampled candidates, the farthest predicted next access) on MAT's parts.
//! * [`so_policy`]: the compiled policy .so (compiler/) as admission + prefetch, with the
//!   features computed online ([`online_features`]).
//! * [`reuse`]: exact per-stream LRU stack distances and hit/miss-ratio curves (Fenwick tree,
//!   O(n log n)); [`partition`]: MLCache's partitioned page cache across streams (shared,
//!   even, static and discrete optimal, predicted shares) and the DP partition search.
//! * [`blocks`]: block mode (Pannier's setting: 4 KiB blocks, reads and writes, flash writes
//!   and erasures): per-block LRU, S2LRU, MQ and Belady over a page-mapped FTL ([`ftl`]) and
//!   the container caches LRU+, S2LRU+ and Pannier ([`pannier`]), each optionally gated by
//!   the TIRE erasure-budget controller ([`tire`]).
//! * [`readahead`]: KML's offline twin: a closed-loop page cache with Linux-like
//!   mmap readahead over a throttled device, run per feature window.
//! * With the `python` feature, a thin PyO3 layer exposes `flashml_sim.simulate`,
//!   `flashml_sim.simulate_objects` and `flashml_sim.default_config`.

pub mod admission;
pub mod blocks;
pub mod config;
pub mod contract;
pub mod eviction;
pub mod flash;
pub mod flash_mat;
pub mod forest;
pub mod ftl;
pub mod hash;
mod hugepages;
pub mod list;
pub mod lrb;
pub mod lrb_features;
pub mod mat;
pub mod objects;
pub mod online_features;
pub mod pannier;
pub mod partition;
pub mod prefetch;
pub mod readahead;
pub mod reuse;
pub mod ripq;
pub mod so_evict;
pub mod so_policy;
pub mod tire;

#[cfg(feature = "python")]
mod python;
