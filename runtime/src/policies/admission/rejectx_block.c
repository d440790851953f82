/* rejectx_block.c: the admission slot's policy "rejectx_block" (engine/policy_slots.h; the
 * simulator's RejectXBlock, sim/src/flash/admission.rs): the history holds the block keys of the
 * last `history` misses (this one included), and a miss is admitted iff its key occurs more
 * than X times in it. The window factor x capacity is a real number: history = max(1,
 * floor(window)), and its fractional part `frac` dithers it (each query looks back history + 1
 * keys with probability frac, a deterministic draw of key and access index). */
#include <math.h>
#include <stdlib.h>

#include "engine/policy_slots.h"
#include "util/internal.h"

/* the simulator's REJECTX_DITHER_SEED */
#define DITHER_SEED 0x0052454a45435458ull

struct rejectx_block {
    unsigned x;
    double frac;
    uint64_t *ring;
    size_t cap, pos, len; /* cap = history (+ 1 when dithered) */
    struct frt_map counts;
};

static void rxb_free(void *st) {
    struct rejectx_block *r = st;
    if (!r) return;
    free(r->ring);
    if (r->counts.cap) frt_map_free(&r->counts);
    free(r);
}

static int rxb_init(void **st, const struct frt_admission_setup *s, char *err, size_t errlen) {
    double window;
    if (frt_rejectx_window(s, "rejectx_block", &window, err, errlen) != 0) return -1;
    struct rejectx_block *r = calloc(1, sizeof *r);
    if (!r) return frt_seterr(err, errlen, "out of memory");
    *st = r;
    size_t history = window < 1.0 ? 1 : (size_t)floor(window);
    double frac = window < 1.0 ? 0.0 : window - floor(window);
    r->frac = frac > 0.0 && frac < 1.0 ? frac : 0.0;
    r->x = s->cfg->rejectx_x;
    r->cap = history + (r->frac > 0.0);
    r->ring = malloc(r->cap * sizeof *r->ring);
    if (!r->ring || frt_map_init(&r->counts, r->cap < 1024 ? r->cap : 1024) != 0)
        return frt_seterr(err, errlen, "out of memory");
    return 0;
}

static int rxb_decide(void *st, const struct flashrt_access *a, uint64_t index, unsigned *lo, unsigned *hi) {
    (void)lo, (void)hi;
    struct rejectx_block *r = st;
    uint64_t key = a->key;
    if (r->len < r->cap) {
        r->ring[r->len++] = key;
    } else {
        uint64_t old = r->ring[r->pos];
        r->ring[r->pos] = key;
        if (++r->pos == r->cap) r->pos = 0;
        uint32_t *c = frt_map_get(&r->counts, old);
        if (c && --*c == 0) frt_map_del(&r->counts, old);
    }
    uint32_t *c = frt_map_get(&r->counts, key);
    uint32_t seen = c ? *c + 1 : 1;
    frt_map_put(&r->counts, key, seen);
    /* a `history`-key window leaves out the oldest of the ring's history + 1 keys */
    if (r->frac > 0.0 && r->len == r->cap && r->ring[r->pos] == key &&
        frt_unit_interval(frt_mix64(key ^ frt_mix64(index ^ DITHER_SEED))) >= r->frac)
        seen--;
    return seen > r->x;
}

const struct frt_admission_ops frt_admission_rejectx_block = {
    .name = "rejectx_block",
    .init = rxb_init,
    .free = rxb_free,
    .decide = rxb_decide,
};
