/* policy_slots.h: the policy interfaces the flash cache (engine.c) calls at fixed points, each
 * a small struct of function pointers (CacheLib Navy's AdmissionPolicy / EvictionPolicy,
 * libCacheSim's cache_t hooks). A slot holds one policy; built-ins and a bundle's
 * capabilities are both policies. runtime/README.md, "Policy slots", has the worked example.
 *
 * Slots so far:
 * - admission (struct frt_admission_ops below; admission.h): on a miss, admit or not and the
 *   prefetch range; the policy is a bundle's admission capability or a built-in (policy.c),
 *   with the feature tracker.
 * - eviction (this header): which sealed region to evict when no region is clean. Built-ins
 *   in runtime/src/policies/eviction/: lru.c, fifo.c, mru.c (the worked example) and mat_tail.c
 *   (MAT's Algorithm 1 over the block LRU tail, the bundle's eviction capability).
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

/* The admission slot. `st` is the policy's state. The engine calls:
 *   arrive    a GET arrives, before its lookup (let the decision's data load meanwhile)
 *   decide    on a miss whose IO would cover segments *lo..*hi: 1 to admit, and then *lo..*hi
 *             widened by the prefetch range (a rejected miss never prefetches)
 *   observe   a GET was served (after any decision on it)
 *   idle      between accesses
 * The one policy so far is frt_admission_policy (admission.c): a flashrt_policy (a bundle's
 * admission + prefetch capabilities, or builtin:rejectx / builtin:admitall) with the count-min
 * feature tracker; its state is a struct frt_admission. The write-rate limiter beside it
 * (frt_ratelimit_take) still refuses an admitted miss's bytes when the budget is spent. */
struct frt_admission_ops {
    const char *name;
    void (*arrive)(void *st, uint64_t key);
    int (*decide)(void *st, const struct flashrt_access *a, unsigned *lo, unsigned *hi);
    void (*observe)(void *st, const struct flashrt_access *a);
    void (*idle)(void *st);
};
extern const struct frt_admission_ops frt_admission_policy;

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
};

/* The built-in eviction policies (runtime/src/policies/eviction/), by enum flashrt_eviction. */
extern const struct frt_eviction_ops frt_eviction_lru, frt_eviction_fifo, frt_eviction_mat,
    frt_eviction_mru;

/* The policy of `which` (an enum flashrt_eviction), NULL if there is none. */
const struct frt_eviction_ops *frt_eviction_policy(int which);

#endif
