/* region.h: the region manager (Navy's RegionManager + the index of its BlockCache): the flash
 * is cut into regions of `spr` segment slots, written sequentially (one open region at a
 * time); sealed regions sit on a list (head = most recently sealed) that the eviction policy
 * may reorder (LRU moves a block's regions to the head when it is read; FIFO leaves it);
 * when no region is clean the policy in the eviction slot (engine/policy_slots.h) names the
 * region to evict whole. The index maps (block, segment) -> slot: a block entry per cached
 * block with the slot of each cached segment; the policy hears when an entry comes and
 * goes. In memory only. Not public. */
#ifndef FLASHRT_REGION_H
#define FLASHRT_REGION_H

#include <stdint.h>

#include "engine/policy_slots.h"
#include "util/map.h"
#include "util/units.h"

#define FRT_NONE UINT32_MAX
#define FRT_OPEN_MAX 32 /* open regions at once (placement streams x partitions) */
#define FRT_PARTS_MAX 16 /* partitions of the flash (FLASHML_PARTITION_MAX_STREAMS) */

struct frt_persist;

/* A cached block: which segments are on flash, where, and its last access (trace time). */
struct frt_blk {
    uint64_t key, mask;
    double last;
    uint32_t count, next_free;
    uint32_t recovered; /* indexed by --recover (engine/persist.h) */
    uint32_t loc[FRT_SEGMENTS_PER_BLOCK]; /* flash slot of each cached segment */
};

struct frt_region {
    uint32_t prev, next; /* eviction list (head = most recent) */
    uint32_t fill, live;
    int in_list;
    uint32_t part; /* the partition owning it (partitioned stores) */
};

struct frt_slotref {
    uint32_t blk;
    uint8_t seg, valid;
};

struct frt_regions {
    uint64_t nregions, spr, nslots; /* spr: segment slots per region */
    struct frt_region *reg;
    struct frt_slotref *slot;
    uint32_t head, tail; /* the list of sealed regions: head = most recent */
    uint32_t open[FRT_OPEN_MAX]; /* each placement stream's open region (FRT_NONE: none) */
    uint32_t *clean; /* stack of clean regions */
    uint64_t nclean;
    struct frt_blk *blks; /* nslots entries: a cached block holds >= 1 segment */
    uint32_t free_blk;
    struct frt_map index; /* block key -> entry of blks */
    /* partitions (nparts 0: none): each region belongs to the partition that opened it; a
     * partition holding its quota of regions evicts one of its own (the eviction policy's
     * victim_of) before it opens another */
    uint32_t nparts;
    uint64_t quota[FRT_PARTS_MAX], held[FRT_PARTS_MAX];
    /* the device's headers (engine/persist.h; NULL: none): told when a region opens */
    struct frt_persist *log;
    /* the eviction slot (set by the engine after init) */
    const struct frt_eviction_ops *ev;
    void *ev_st;
    /* eviction accounting: age = eviction time - the block's last access */
    uint64_t evicted_regions, evicted_segments;
    double age_sum;
};

/* All regions clean, nothing indexed; -1 when out of memory (frt_regions_free cleans up).
 * nregions * spr must be < FRT_NONE. */
int frt_regions_init(struct frt_regions *m, uint64_t nregions, uint64_t spr);
void frt_regions_free(struct frt_regions *m);

/* The next flash slot of placement stream `stream` (< FRT_OPEN_MAX) in partition `part` (0
 * when the store is not partitioned), sealing its open region
 * and evicting a whole region (at trace time t, the one the eviction policy names) as needed;
 * the eviction may drop the very block the caller is inserting. When no region is clean and
 * none is sealed, another stream's open region is sealed as it is. FRT_NONE when the new open
 * region's header cannot be cleared (the device fails: nothing may be written). */
uint32_t frt_regions_alloc_in(struct frt_regions *m, double t, unsigned stream, uint32_t part);
static inline uint32_t frt_regions_alloc_slot(struct frt_regions *m, double t) { return frt_regions_alloc_in(m, t, 0, 0); }
/* Partition `part`'s quota shrank: its open regions (streams part x per .. + per - 1) are
 * sealed and its regions evicted (victim_of) until it holds at most its quota; the count. */
uint64_t frt_regions_shrink(struct frt_regions *m, double t, uint32_t part, unsigned per);
/* The eviction slot's victim_of for list-ordered policies: partition part's sealed region
 * nearest the list's tail (LRU, FIFO) or head (MRU); FRT_NONE if it has none. */
uint32_t frt_victim_tail_of(void *st, struct frt_regions *m, uint32_t part);
uint32_t frt_victim_head_of(void *st, struct frt_regions *m, uint32_t part);
/* Indexes segment s of block `key` at `slot` (just written); t: the block's access time when
 * the block is new to the index (the eviction policy's `added`). */
void frt_regions_add(struct frt_regions *m, uint64_t key, unsigned s, uint32_t slot, double t);
/* Forgets what slot holds (if anything); the block leaves the index with its last segment
 * (the eviction policy's `removed`). */
void frt_regions_drop(struct frt_regions *m, uint32_t slot);

/* ---- hot path (every GET): inline ---- */

static inline struct frt_blk *frt_regions_find(const struct frt_regions *m, uint64_t key) {
    uint32_t *v = frt_map_get(&m->index, key);
    return v ? &m->blks[*v] : NULL;
}

static inline void frt_regions_unlink(struct frt_regions *m, uint32_t r) {
    struct frt_region *g = &m->reg[r];
    if (g->prev != FRT_NONE) m->reg[g->prev].next = g->next; else m->head = g->next;
    if (g->next != FRT_NONE) m->reg[g->next].prev = g->prev; else m->tail = g->prev;
    g->in_list = 0;
}

static inline void frt_regions_push_head(struct frt_regions *m, uint32_t r) {
    struct frt_region *g = &m->reg[r];
    g->prev = FRT_NONE;
    g->next = m->head;
    if (m->head != FRT_NONE) m->reg[m->head].prev = r; else m->tail = r;
    m->head = r;
    g->in_list = 1;
}

/* LRU: moves every sealed region holding a segment of b to the head (the open region is not
 * on the list). Touching a region twice in a row is a no-op, so consecutive slots of one
 * region are touched once. */
static inline void frt_regions_touch_block(struct frt_regions *m, const struct frt_blk *b) {
    uint64_t mask = b->mask;
    uint32_t prev = FRT_NONE;
    while (mask) {
        unsigned s = (unsigned)__builtin_ctzll(mask);
        mask &= mask - 1;
        uint32_t r = (uint32_t)(b->loc[s] / m->spr);
        if (r != prev && m->reg[r].in_list && m->head != r) {
            frt_regions_unlink(m, r);
            frt_regions_push_head(m, r);
        }
        prev = r;
    }
}

#endif
