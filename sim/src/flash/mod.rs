//! Flash-cache mode (Baleen's model): segments of blocks, backend IOs charged in disk-head
//! time (DT), admission and prefetch policies behind traits.
//!
//! Semantics, per access `i` at time `t` on block `key` covering segments `s0..=s1`:
//! * PUT (op in `put_ops`): one backend IO of `s1-s0+1` segments is charged; the cache is
//!   not touched.
//! * GET: the access hits iff all covered segments are cached. Recency: with block-level
//!   recency every cached segment of the block is refreshed (LRU: the block moves to the
//!   front; its last-access time becomes `t`), otherwise only the cached covered segments,
//!   in ascending order. On a hit this happens at once; on a miss with block-level recency
//!   it happens after the requested segments are inserted, as in the artifact (BCacheSim
//!   refreshes the covered segments, inserts the missed ones, then touches the whole block):
//!   while they are inserted, the block's cached segments outside the request keep their old
//!   place in the LRU order (and may be evicted from it), those inside are at the front.
//! * On a miss, the admission policy is asked once (a per-segment policy, the artifact's
//!   RejectX: once per uncached segment). The admitted requested segments are inserted in
//!   ascending order, then the block is refreshed; then, if the miss is admitted (per
//!   segment: any segment) and the prefetch policy gives a range (clipped to the block),
//!   its segments that are neither cached now nor missing requested ones are prefetched
//!   and inserted in ascending order (the artifact's order and set; a rejected miss never
//!   prefetches: nothing read beyond the request would be kept). One backend IO spans the
//!   first to the last segment read (missing requested or prefetched):
//!   `DT = t_seek + segments * segment_bytes / bandwidth`.
//! * Capacity: as the artifact's cache (BCacheSim's `QueueCache.admit`), an insertion that
//!   brings the cache to its capacity evicts one segment, so at most `capacity - 1`
//!   segments stay cached between insertions (a capacity of 1 still holds one segment; the
//!   artifact would evict it at once). One more corner where the two differ: a cache of at
//!   most one block (capacity <= segments per block) in which the accessed block is the only
//!   one left; flashml then evicts that block's lowest segment, the artifact its requested
//!   hits before the segments it just inserted.
//! * DT is kept per window for GETs and PUTs apart: `peak_dt_util` and its percentiles are
//!   GET disk-head time only (the artifact's PeakServiceTimeUtil1), the `_with_puts` metrics
//!   add PUT time (its PeakServiceTimeUsedWithPutUtil1).
//! * Eviction units: with LRU and block-level recency the unit is the block (its segments
//!   are contiguous in recency order) and a victim block loses its lowest-index cached segment;
//!   otherwise the unit is the segment. Eviction age = eviction time - last access time
//!   (of the block under block-level recency, else of the segment).
//!
//! MAT (learned eviction at the tail of the block LRU) is another eviction of this mode, in
//! `crate::compose::flash_mat` (LRU with block-level recency only; same loop, its own `Orders`).
//!
//! Partitioned mode (optional, [`StreamPartition`]; MLCache in flash mode): the
//! cache is divided among `k` streams (e.g. namespaces), each with its own eviction order (of
//! the same kind and units as above) and its own quota of segments; the quotas change at
//! given interval boundaries. Every metric stays whole-cache; `Info::streams` adds per-stream
//! counts and the quotas applied.
//! * A block belongs to the partition of the stream whose access inserted it while it was
//!   not cached (stored per block). An access of stream `s` to a block owned by another
//!   stream is treated as that owner's: its recency and its insertions (the missing and the
//!   prefetched segments) go to the owner's order and quota. Keys normally belong to one
//!   namespace; the access is still counted as a GET (and hit) of `s`, while the admitted
//!   segments and the evictions are counted under the partition (the owner).
//! * Capacity per partition: the global rule applied to the quota; inserting into partition
//!   `p` evicts from `p`'s own order while `used[p] > 0 && used[p] + 1 >= quota[p]`, so `p`
//!   holds at most `quota[p] - 1` segments. A partition whose quota is 0 or 1 caches
//!   nothing: its misses are asked to the admission policy as usual, then treated as
//!   rejected (nothing inserted, nothing prefetched, not counted as admitted). This differs
//!   from the unpartitioned cache at capacity 1, which holds one segment. This is the one
//!   definition of a quota: the runtime's engine holds q - 1 regions per quota of q
//!   (`frt_partition_holds`, runtime/src/engine/policy_slots.h).
//! * Interval `j` starts before access `bounds[j]`: the quotas become
//!   `core::shares::pages_of_shares(shares[j], capacity)` (an invalid row: an even split,
//!   counted in `fallbacks`), and every partition holding at least its new quota evicts from
//!   its own order (LRU end) until it holds at most `quota - 1` (none when the quota is <= 1).
//!   These count as evictions (their age is taken at the time of access `bounds[j]`) and
//!   also as `resize_evictions`. Equal bounds make an empty interval: its quotas are applied,
//!   then at once the next interval's.
//!
//! The files: [`Trace`], [`PolicyArrays`], [`StreamPartition`] and their validation in
//! `input.rs`; the entry points ([`simulate`], [`simulate_partitioned`], [`simulate_with`]) in
//! `simulate.rs`; the eviction orders (whole cache or per stream) in `orders.rs`; the cache
//! state and its operations (`FlashSim`) in `cache.rs`, its per-access loop in `run.rs`; the
//! metrics and per-window series in `metrics.rs`; the compiled policy .so as admission +
//! prefetch in [`so_policy`].

pub mod admission;
pub mod episodes;
pub mod online_features;
pub mod prefetch;
pub mod so_policy;

mod cache;
mod input;
mod metrics;
mod orders;
mod run;
mod simulate;
#[cfg(test)]
pub(crate) mod testing;

pub(crate) use cache::FlashSim;
pub use input::{validate, validate_partition, PolicyArrays, StreamPartition, Trace};
pub use metrics::{percentile, FlashMetrics, FlashResult, Info, Series, StreamInfo};
pub(crate) use orders::Orders;
pub(crate) use simulate::policies;
pub use simulate::{simulate, simulate_partitioned, simulate_with};
