//! MLCache: a page cache partitioned across streams. [`reuse`]: exact per-stream LRU stack
//! distances and hit/miss-ratio curves (Fenwick tree, O(n log n)); [`partition`]: the
//! partitioned cache (shared, even, static and discrete optimal, predicted shares) and the DP
//! partition search.

mod config;
mod optimal;
pub mod partition;
mod policy;
pub mod reuse;
pub mod settings;
mod trace;
