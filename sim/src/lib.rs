//! flashml_sim: the trace-driven cache simulator of flashml's five systems.
//!
//! One folder per system over a shared core:
//!
//! * [`core`]: what every system shares: configuration and errors, the feature contract's
//!   constants (generated from flashml/features/contract.toml), hashing, the intrusive list,
//!   the eviction trait and heuristics, the capacity split across streams, tree ensembles,
//!   the verified loader of compiled .so files, and libCacheSim's object-cache loop (key,
//!   size; byte or count capacity).
//! * [`flash`]: Baleen's flash-cache model (segments of blocks, DT), its admission
//!   ([`flash::admission`]) and prefetch ([`flash::prefetch`]) policies and the features the
//!   compiled policy computes online ([`flash::online_features`]).
//! * [`mat`]: MAT (learned eviction at the tail of LRU) and Belady in object mode, with LRB's
//!   eviction features ([`mat::lrb_features`]), LRB's decision ([`mat::lrb`]) and the
//!   compiled eviction .so as MAT's predictor ([`mat::so_evict`]).
//! * [`pannier`]: block mode (Pannier's setting: 4 KiB blocks, reads and writes, flash writes
//!   and erasures): per-block LRU, S2LRU, MQ and Belady over a page-mapped FTL
//!   ([`pannier::ftl`]) and the container caches LRU+, S2LRU+, RIPQ ([`pannier::ripq`]) and
//!   Pannier, each optionally gated by the TIRE erasure-budget controller ([`pannier::tire`]).
//! * [`mlcache`]: MLCache's page cache partitioned across streams and its reuse curves.
//! * [`kml`]: KML's offline twin (a closed-loop page cache with Linux-like mmap readahead).
//! * [`compose`]: compositions of several systems: MAT as the flash cache's eviction, with the
//!   compiled policy .so's admission + prefetch (the .so alone is `flash::so_policy`).
//! * With the `python` feature, a thin PyO3 layer (`python/`, one file per system) exposes
//!   the module `flashml_sim`.
//!
//! The dependency rule (enforced by `tests/module_deps.rs`): `core` uses no other folder; a
//! system folder (`flash`, `mat`, `pannier`, `mlcache`, `kml`) uses only `core` and itself;
//! `compose` uses `core` and the systems; `python` may use everything. So no system depends on
//! another, and the folders form no cycle.

pub mod compose;
pub mod core;
pub mod flash;
pub mod kml;
pub mod mat;
pub mod mlcache;
pub mod pannier;

#[cfg(feature = "python")]
mod python;
