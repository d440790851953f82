//! Container caches (Pannier, Middleware '15): blocks are packed into RAM open containers,
//! sealed when full and written to flash whole (one erase block each), evicted and erased
//! whole. Overwrites invalidate the sealed copy (the new data goes to an open container).
//!
//! The shared machinery is [`Store`] (block index, containers with invalidation/access state
//! and 8-bit block counters, open containers, the ghost cache, the sampled distributions,
//! TIRE); the eviction order is a [`ContainerPolicy`]:
//!
//! * [`LruPlus`]: container LRU (from Nitro): any hit moves the container to the front.
//! * [`S2lruPlus`]: S2LRU at container granularity: a hit in the cold queue promotes.
//! * [`PannierPolicy`]: S2LRU* (promotion after `promotion_pct`% of the container's blocks in
//!   accesses) plus the survival queue (Fig. 5): on seal, decay point = survival time = seal
//!   time + lifetime; on invalidation, survival = now + lifetime x valid share; on access,
//!   aging and survival renewal; on eviction, an expired survival-queue top has its blocks
//!   with frequency > 0 copied forward (through TIRE and the hot/cold packing), otherwise the
//!   cold queue's LRU container goes, its blocks with frequency > 0 copied forward the same
//!   way (the paper's Reinsertion paragraph; see `PannierPolicy::victim`).
//!
//! Choices where the paper is silent (stated once, here):
//! * The clock (`now`) is +1 per client insertion attempt (a read miss or a write), whether
//!   or not admission lets it in; copy-forward does not advance it.
//! * A survival time expires when `survival <= now` (the paper: `<`), so a container
//!   invalidated to 100% is evicted at the very next eviction.
//! * An expired container whose valid blocks are all still accessed (frequency > 0) is not
//!   copied forward whole (that would free nothing): its survival is renewed and the cold LRU
//!   goes instead. A cold-LRU victim whose valid blocks are all accessed is dropped whole.
//! * The lifetime is the percentile of sampled reuse distances *of hits* (re-accesses of
//!   blocks still in the cache): over all re-accesses, a heavy-tailed trace's 99th percentile
//!   is many cache turnovers, and no container would ever outlive its survival time.
//! * The lifetime starts at one cache turnover (the cache's blocks in insertions) until 32
//!   reuse distances are sampled; the access threshold starts above 100% (no refill) until 32
//!   containers are sampled; a block is packed hot when its ghost count exceeds the median of
//!   sampled counts.
//! * Reads served from an open (RAM) container are hits but not flash reads. The open
//!   containers are RAM beside the flash (the paper's prototype), unless `open_in_cache`
//!   charges them to the cache size (sealed + open <= the cache's containers), so that a
//!   policy with more open containers (Pannier's 4, RIPQ+'s 8) gets no more cache than LRU+
//!   (1) or the per-block policies (none).
//! * Open containers: 4 for Pannier (insertion and reinsertion, each hot and cold; the
//!   paper's clean/dirty split is not modelled: writes are write-through), 1 for LRU+/S2LRU+.
//!
//! The files: the shared state ([`Store`], [`Container`]) in `store.rs`; the eviction orders
//! ([`ContainerPolicy`], [`LruPlus`], [`S2lruPlus`], [`PannierPolicy`] and their [`Queues`]) in
//! `policy.rs`, RIPQ+'s in [`ripq`]; the cache over both ([`ContainerCache`]) in
//! `container.rs`. Block mode's loop, the per-block caches, the trace, the configuration, the
//! FTL, the sketches and TIRE have their own modules below.

pub mod blocks;
pub mod config;
pub mod ftl;
pub mod per_block;
pub mod ripq;
pub mod settings;
pub mod sketch;
pub mod tire;
pub mod trace;

mod container;
mod policy;
mod store;

pub use container::{ContainerCache, ContainerKind};
pub use policy::{ContainerPolicy, LruPlus, PannierPolicy, Queues, S2lruPlus};
pub use store::{Container, State, Store};
