/* monitor.h: MLCache's monitor (sim/src/mlcache/reuse.rs interval_histograms, features/partition.toml),
 * shared by the partitioned page cache (partition.c) and the engine's bundle partition
 * (mlcache.c): each stream's exact LRU stack distances over its requests (a
 * Fenwick tree over request positions: a position is marked while it is its page's last
 * access; a request's distance is 1 + the marks after its page's last position), counted in
 * STEPS equal buckets of the capacity per interval, and the interval's features and shares.
 * Not public. */
#ifndef FLASHRT_MONITOR_H
#define FLASHRT_MONITOR_H

#include <stdint.h>

#include "flashml_policy.h"
#include "policies/policy_internal.h"
#include "util/map.h"

struct frt_mon_stream {
    struct frt_map last; /* page -> its last position */
    uint32_t *tree;
    uint8_t *mark;
    size_t n, cap;
};

struct frt_mon {
    int streams;
    uint64_t capacity;
    struct frt_mon_stream s[FLASHML_PARTITION_MAX_STREAMS];
    uint64_t hist[FLASHML_PARTITION_MAX_STREAMS][FLASHML_PARTITION_STEPS];
    uint64_t count[FLASHML_PARTITION_MAX_STREAMS];
    uint64_t seen; /* requests observed */
    uint64_t calls, call_ns;
};

/* `streams` streams (1..FLASHML_PARTITION_MAX_STREAMS) of a cache of `capacity` units; -1 OOM. */
int frt_mon_init(struct frt_mon *m, int streams, uint64_t capacity);
void frt_mon_free(struct frt_mon *m);
/* A request of stream s for page: counted in the interval's histogram. -1 out of memory. */
int frt_mon_observe(struct frt_mon *m, int s, uint64_t page);
/* The shares of the interval starting now: flashml_partition (fn) over the features of the
 * interval just ended, or an even split (no fn, or nothing observed yet); the interval's
 * counts start afresh. -1 when fn refuses the streams. */
int frt_mon_shares(struct frt_mon *m, frt_partition_fn fn, double *shares);

#endif
