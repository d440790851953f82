/* mru.c: MRU over regions, the worked example of the eviction slot (engine/policy_slots.h,
 * runtime/README.md "Policy slots"): a GET of a cached block moves its regions to the head,
 * as LRU does, and the head goes: the region read or sealed most recently. A toy (it suits a
 * cyclic scan larger than the cache, little else); the whole policy is this file plus its
 * line in engine/policy_slots.c and its name in flashrt.h. */
#include "engine/region.h"

static void mru_refresh(void *st, struct frt_regions *m, const struct frt_blk *b) {
    (void)st;
    frt_regions_touch_block(m, b);
}

static uint32_t mru_victim(void *st, struct frt_regions *m) {
    (void)st;
    return m->head;
}

const struct frt_eviction_ops frt_eviction_mru = {
    .name = "mru",
    .refresh = mru_refresh,
    .victim = mru_victim,
    .victim_of = frt_victim_head_of,
};
