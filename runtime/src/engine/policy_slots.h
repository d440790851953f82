/* policy_slots.h: the policy interfaces the flash cache (engine.c) calls at fixed points, each
 * a small struct of function pointers (CacheLib Navy's AdmissionPolicy / EvictionPolicy,
 * libCacheSim's cache_t hooks). A slot holds one policy; built-ins and a bundle's
 * capabilities are both policies. runtime/README.md, "Policy slots", has the worked example.
 *
 * Slots so far (the plain policies in runtime/src/policies/<slot>/, a system's in its folder,
 * runtime/src/<system>/; this header declares them all and policy_slots.c lists them by name,
 * so the engine includes no system's header: ARCHITECTURE.md, "The C runtime's folders"):
 * - admission (struct frt_admission_ops below): on a miss, admit or not and the prefetch
 *   range. policies/admission/: admitall.c, rejectx.c, rejectx_block.c, coinflip.c (the
 *   simulator's built-ins, sim/src/flash/admission.rs); baleen/bundle.c (a bundle's admission
 *   capability with the count-min feature tracker).
 * - eviction (struct frt_eviction_ops): which sealed region to evict when no region is clean.
 *   policies/eviction/: lru.c, fifo.c, mru.c (the worked example); mat/mat_tail.c (MAT's
 *   Algorithm 1 over the block LRU tail, the bundle's eviction capability).
 * - placement (struct frt_placement_ops): which open region an admitted miss's segments join.
 *   policies/placement/: single.c (one open region), packing.c (Pannier's hot/cold packing by
 *   the ghost sketch's counts).
 * - partition (struct frt_partition_ops): each stream's quota of regions.
 *   policies/partition/: even.c, static.c (the command line's shares); mlcache/mlcache.c
 *   (MLCache's network each interval, the bundle's partition capability).
 * - budget (struct frt_budget_ops): whether an admitted miss's bytes may be written now.
 *   policies/budget/: bucket.c (the write-rate token bucket); pannier/tire.c (Pannier's TIRE
 *   over the erasures of each quantum; Pannier's cache uses it too).
 *
 * The region store (region.h) keeps the sealed regions on a list (head = most recently
 * sealed); what an eviction policy does with it is its own business: LRU moves a block's
 * regions to the head when the block is read, FIFO leaves the list alone, MAT keeps its own
 * order of blocks and answers with the region of its victim block's lowest segment. Not
 * public. */
#ifndef FLASHRT_POLICY_SLOTS_H
#define FLASHRT_POLICY_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "flashrt.h"

struct frt_regions;
struct frt_blk;

/* What an admission policy is built from. */
struct frt_admission_setup {
    const struct flashrt_config *cfg; /* the knobs (rejectx_*, coinflip_*, tracker, hint) */
    flashrt_policy *bundle;           /* the slot's bundle (needs FRT_CAP_ADMISSION), else NULL */
    uint64_t capacity_segments;       /* the cache's (RejectX's history) */
};

/* What an admission policy reports (flashrt_metrics): the parts of its decision. */
struct frt_admission_stats {
    double features_ns_p50, policy_ns_p50, hint_ns_p50;
};

/* The admission slot. Every hook but `init` and one of `decide` / `admit_segment` may be
 * NULL. The engine calls:
 *   init       once, at open
 *   arrive     a GET arrives, before its lookup (let the decision's data load meanwhile)
 *   decide     on a miss whose IO would cover segments *lo..*hi: 1 to admit, and then *lo..*hi
 *              widened by the prefetch range (a rejected miss never prefetches); `index`
 *              counts every access (GETs and PUTs) from 0, as the simulator's row index
 *   admit_segment  instead of `decide` (a policy keyed by (block, segment), the artifact's
 *              RejectX): asked once per uncached segment of the miss's IO, ascending; the
 *              admitted ones are written, the others not; never prefetches
 *   observe    a GET was served (after any decision on it)
 *   idle       between accesses
 *   stats      the figures above (may be NULL: NaN)
 *   free       once, at close.
 * The engine times each miss's decision (decision_ns_p50). */
struct frt_admission_ops {
    const char *name;
    unsigned needs; /* FRT_CAP_ADMISSION: the slot needs a bundle with that capability */
    int (*init)(void **st, const struct frt_admission_setup *s, char *err, size_t errlen);
    void (*free)(void *st);
    void (*arrive)(void *st, uint64_t key);
    int (*decide)(void *st, const struct flashrt_access *a, uint64_t index, unsigned *lo, unsigned *hi);
    int (*admit_segment)(void *st, const struct flashrt_access *a, uint64_t index, unsigned seg);
    void (*observe)(void *st, const struct flashrt_access *a);
    void (*idle)(void *st);
    void (*stats)(void *st, struct frt_admission_stats *out);
};

/* The admission slot's policies (policies/admission/, baleen/bundle.c), by enum flashrt_admission. */
extern const struct frt_admission_ops frt_admission_bundle, frt_admission_admitall, frt_admission_rejectx,
    frt_admission_rejectx_block, frt_admission_coinflip;
const struct frt_admission_ops *frt_admission_policy(int which);
/* RejectX's window (rejectx, rejectx_block): factor x capacity keys, a real number; -1 with a
 * message naming `name` when X is 0 or the window is outside (0, 2^31]. */
int frt_rejectx_window(const struct frt_admission_setup *s, const char *name, double *window, char *err,
                       size_t errlen);
/* Why the simulator's admission `name` cannot fill the runtime's slot (it reads per-access
 * arrays the runtime has none of), or NULL. */
const char *frt_admission_unsupported(const char *name);

/* What an eviction policy reports (flashrt_metrics): decisions and their cost. */
struct frt_eviction_stats {
    uint64_t decisions;   /* victims chosen by the policy itself (MAT: condemned blocks) */
    uint64_t predictions; /* model calls */
    uint64_t reinsertions;
    double threshold;     /* MAT's T after the run (NaN: none) */
    double decision_ns_p50;
};

/* The eviction slot. Every hook but `victim` may be NULL (nothing to do). The engine calls:
 *   init      once, after the store is built (bundle: the one loaded for the slot, or NULL)
 *   get       when a GET starts, before its lookup: `index` counts every access (GETs and
 *             PUTs) from 0, `blk` is the block's entry in the store if it is cached, else
 *             FRT_NONE; -1 with a message fails the access (out of memory)
 *   refresh   a GET refreshed block b (a hit; a miss on a cached block, before its segments
 *             are read and inserted)
 *   inserted  a GET miss's segments were inserted (or refused) and its block is cached:
 *             the simulator's deferred refresh (BCacheSim touches the block after inserting)
 *   added     block entry `blk` entered the index (its first segment was written, during
 *             the current GET)
 *   removed   block entry `blk` left the index (its last segment was dropped or evicted)
 *   victim    no region is clean: the sealed region to evict whole (every region is sealed
 *             then; the answer must be on the store's list)
 *   stats     the figures above (may be NULL: zeros)
 *   victim_of a partitioned store's partition at its quota: its sealed region to evict
 *   free      once, at close. */
struct frt_eviction_ops {
    const char *name;
    unsigned needs; /* FRT_CAP_EVICTION: the slot needs a bundle with that capability */
    int (*init)(void **st, struct frt_regions *m, flashrt_policy *bundle, char *err, size_t errlen);
    void (*free)(void *st);
    int (*get)(void *st, const struct flashrt_access *a, uint64_t index, uint32_t blk, char *err, size_t errlen);
    void (*refresh)(void *st, struct frt_regions *m, const struct frt_blk *b);
    void (*inserted)(void *st, struct frt_regions *m, const struct frt_blk *b);
    void (*added)(void *st, uint32_t blk);
    void (*removed)(void *st, uint32_t blk);
    uint32_t (*victim)(void *st, struct frt_regions *m);
    void (*stats)(void *st, struct frt_eviction_stats *out);
    /* a partitioned store: partition part holds its quota and must give up one of its sealed
     * regions (NULL: the policy cannot run partitioned) */
    uint32_t (*victim_of)(void *st, struct frt_regions *m, uint32_t part);
};

/* The built-in eviction policies (policies/eviction/, mat/mat_tail.c), by enum flashrt_eviction. */
extern const struct frt_eviction_ops frt_eviction_lru, frt_eviction_fifo, frt_eviction_mat,
    frt_eviction_mru;

/* The policy of `which` (an enum flashrt_eviction), NULL if there is none. */
const struct frt_eviction_ops *frt_eviction_policy(int which);

/* What the budget gate is asked about: a miss's segments (the engine), or Pannier's kinds of
 * insertion (TIRE's Table 1 tells them apart). */
enum frt_budget_kind { FRT_BUDGET_CLIENT_WRITE = 0, FRT_BUDGET_READ_MISS = 1, FRT_BUDGET_OVERWRITE = 2,
                       FRT_BUDGET_REINSERTION = 3 };

/* What a budget policy is built from: the knobs, and the erase units the store has. */
struct frt_budget_setup {
    const struct flashrt_config *cfg;
    uint64_t erase_units;
};

/* What a budget policy reports (flashrt_metrics). */
struct frt_budget_stats {
    uint64_t refused;         /* writes refused */
    double quota, credit;     /* TIRE: erasures per quantum, the credit (NaN: none) */
    uint64_t quanta, blocked; /* TIRE: closed quanta, those that started blocked */
};

/* The budget slot. The engine calls:
 *   init    once, at open
 *   tick    every access, first (trace time t, erasures so far; may be NULL)
 *   admit   an admitted miss is about to write `bytes` (kind FRT_BUDGET_READ_MISS, `count`
 *           the block's earlier accesses the gate may weigh, 0 in the engine): 1 to write
 *           them all, 0 to write none
 *   stats, free. */
struct frt_budget_ops {
    const char *name;
    int (*init)(void **st, const struct frt_budget_setup *s, char *err, size_t errlen);
    void (*free)(void *st);
    void (*tick)(void *st, double t, uint64_t erasures);
    int (*admit)(void *st, double t, uint64_t bytes, enum frt_budget_kind kind, uint32_t count,
                 uint64_t erasures);
    void (*stats)(void *st, struct frt_budget_stats *out);
};
/* The budget slot's policies (policies/budget/bucket.c, pannier/tire.c), by enum flashrt_budget
 * (none: NULL, no gate). */
extern const struct frt_budget_ops frt_budget_bucket, frt_budget_tire;
const struct frt_budget_ops *frt_budget_policy(int which);
/* TIRE's knobs by default (pannier/tire.c: flashml/systems/pannier/settings.toml's), set by
 * flashrt_config_default: tire_slack, tire_steps, tire_quantum_s. */
void frt_tire_config_default(struct flashrt_config *c);

/* What a placement policy is built from. */
struct frt_placement_setup {
    const struct flashrt_config *cfg;
    uint64_t capacity_segments;
};

/* What a placement policy reports (flashrt_metrics). */
struct frt_placement_stats {
    uint64_t hot_misses; /* admitted misses placed in the hot region (packing) */
};

/* The placement slot: which open region a miss's segments join. The store keeps one open
 * region per stream of the policy (`streams`, 1..FRT_OPEN_MAX); a region that fills is sealed
 * and the stream opens another. Every hook may be NULL (`place` NULL: stream 0). The engine
 * calls:
 *   init    once, at open
 *   access  a GET arrives, before its lookup
 *   place   an admitted miss is about to write its segments: their stream (< streams)
 *   stats, free. */
struct frt_placement_ops {
    const char *name;
    unsigned streams;
    int (*init)(void **st, const struct frt_placement_setup *s, char *err, size_t errlen);
    void (*free)(void *st);
    void (*access)(void *st, const struct flashrt_access *a);
    unsigned (*place)(void *st, const struct flashrt_access *a);
    void (*stats)(void *st, struct frt_placement_stats *out);
};
/* The placement slot's policies (policies/placement/), by enum flashrt_placement. */
extern const struct frt_placement_ops frt_placement_single, frt_placement_packing;
const struct frt_placement_ops *frt_placement_policy(int which);
/* What a partition policy is built from: the knobs, the streams (partitions) and the regions
 * to share among them. */
struct frt_partition_setup {
    const struct flashrt_config *cfg;
    unsigned streams;
    uint64_t regions;
    uint64_t capacity_segments; /* the monitor's capacity (bundle) */
    flashrt_policy *bundle;     /* the slot's bundle (needs FRT_CAP_PARTITION), else NULL */
};

/* A partition's quota, the one definition the engine and the simulator share (sim/src/flash/mod.rs,
 * "Partitioned mode"): the shares split the cache's capacity (the engine's regions, the
 * simulator's segments) into quotas by pages_of_shares (largest remainder), and a stream of
 * quota q holds at most q - 1 units: the artifact's capacity rule (a cache of capacity C holds
 * C - 1) applied to each partition as to a cache of its own; a quota of 0 or 1 caches nothing.
 * So k partitions of R regions hold R - k together (the unpartitioned engine holds R). In
 * place: each quota becomes the regions its stream may hold. */
void frt_partition_holds(uint64_t *quota, unsigned k);

/* The partition slot: each stream (the access's namespace, flashrt_config.partition_ns) owns
 * the regions it opens and may hold `quota` of them (frt_partition_holds: its share's quota
 * - 1); a stream at its quota evicts one of its own (the eviction policy's victim_of) to open
 * another; a stream of quota 0 caches nothing.
 *   quotas   once, at open: the regions each stream may hold (frt_partition_holds of the
 *            shares' quotas, which sum to `regions`)
 * An interval policy (MLCache's) also has (else NULL):
 *   init     once, at open; free at close
 *   observe  every page request: each segment a GET covers, page = (block, segment)
 *   next     at each boundary of partition_interval page requests (before the access whose
 *            segment crosses it): the new quotas (frt_partition_holds); a stream above its quota evicts its own
 *            regions down to it (resize evictions). */
struct frt_partition_ops {
    const char *name;
    unsigned needs; /* FRT_CAP_PARTITION: the slot needs a bundle with that capability */
    int (*quotas)(const struct frt_partition_setup *s, uint64_t *quota, char *err, size_t errlen);
    int (*init)(void **st, const struct frt_partition_setup *s, char *err, size_t errlen);
    void (*free)(void *st);
    int (*observe)(void *st, uint32_t stream, uint64_t page);
    int (*next)(void *st, uint64_t *quota, char *err, size_t errlen);
};
/* The partition slot's policies (policies/partition/, mlcache/mlcache.c), by enum
 * flashrt_partition (shared: NULL, no partition). */
extern const struct frt_partition_ops frt_partition_even, frt_partition_static, frt_partition_bundle;
const struct frt_partition_ops *frt_partition_policy(int which);
/* Why the simulator's partition policy `name` cannot fill the runtime's slot (its shares come
 * from the monitor's curves or a bundle's network each interval, which the engine has not), or
 * NULL. */
const char *frt_partition_unsupported(const char *name);

#endif
