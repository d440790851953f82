/* lru.c: LRU over regions (the eviction slot, engine/policy_slots.h): a GET of a cached block
 * moves every sealed region holding one of its segments to the head of the store's list;
 * the tail goes. Navy's LruPolicy at region granularity; the default. */
#include "engine/region.h"

static void lru_refresh(void *st, struct frt_regions *m, const struct frt_blk *b) {
    (void)st;
    frt_regions_touch_block(m, b);
}

static uint32_t lru_victim(void *st, struct frt_regions *m) {
    (void)st;
    return m->tail;
}

const struct frt_eviction_ops frt_eviction_lru = {
    .name = "lru",
    .refresh = lru_refresh,
    .victim = lru_victim,
    .victim_of = frt_victim_tail_of,
};
