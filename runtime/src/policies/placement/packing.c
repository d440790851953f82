/* packing.c: Pannier's hot/cold packing as the engine's placement (engine/policy_slots.h,
 * sim/src/pannier/store.rs, packed_hot): two open regions, cold (0) and hot (1). Every GET
 * counts its block in the ghost sketch (util/sketch.h, the container cache's: 2 x capacity
 * counters' worth of accesses before they halve); an admitted miss's segments go to the hot
 * region iff the block's count before this GET exceeds the median count of the blocks placed
 * before it (0 until 32 were placed), so blocks read again soon share regions and leave
 * together. */
#include <stdlib.h>

#include "engine/policy_slots.h"
#include "util/internal.h"
#include "util/sketch.h"

#define GHOST_FACTOR 2.0 /* Pannier's default ghost_factor */

struct packing {
    struct frt_ghost ghost;
    struct frt_sampler counts;
    uint32_t count; /* the current GET's block count before it */
    uint64_t hot;
};

static void packing_free(void *st) {
    struct packing *p = st;
    if (!p) return;
    frt_ghost_free(&p->ghost);
    frt_sampler_free(&p->counts);
    free(p);
}

static int packing_init(void **st, const struct frt_placement_setup *s, char *err, size_t errlen) {
    struct packing *p = calloc(1, sizeof *p);
    if (!p) return frt_seterr(err, errlen, "out of memory");
    *st = p;
    if (frt_ghost_init(&p->ghost, (size_t)(GHOST_FACTOR * (double)s->capacity_segments)) != 0 ||
        frt_sampler_init(&p->counts, 50.0, 1 << 12, 256) != 0)
        return frt_seterr(err, errlen, "out of memory");
    return 0;
}

static void packing_access(void *st, const struct flashrt_access *a) {
    struct packing *p = st;
    p->count = frt_ghost_touch(&p->ghost, a->key);
}

static unsigned packing_place(void *st, const struct flashrt_access *a) {
    (void)a;
    struct packing *p = st;
    unsigned hot = (uint64_t)p->count > (p->counts.has ? p->counts.value : 0);
    frt_sampler_push(&p->counts, p->count);
    p->hot += hot;
    return hot;
}

static void packing_stats(void *st, struct frt_placement_stats *out) {
    const struct packing *p = st;
    out->hot_misses = p->hot;
}

const struct frt_placement_ops frt_placement_packing = {
    .name = "packing",
    .streams = 2,
    .init = packing_init,
    .free = packing_free,
    .access = packing_access,
    .place = packing_place,
    .stats = packing_stats,
};
