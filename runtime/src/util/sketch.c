/* sketch.c: Pannier's ghost sketch and percentile sampler (sketch.h; sim/src/pannier/blocks.rs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/internal.h"
#include "util/sketch.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint64_t frt_nearest_rank(uint64_t *xs, size_t n, double pct) {
    double r = ceil(pct / 100.0 * (double)n);
    size_t rank = r < 1.0 ? 1 : r >= (double)n ? n : (size_t)r;
    qsort(xs, n, sizeof *xs, cmp_u64);
    return xs[rank - 1];
}

int frt_sampler_init(struct frt_sampler *s, double pct, size_t cap, size_t every) {
    memset(s, 0, sizeof *s);
    s->pct = pct;
    s->cap = cap;
    s->every = every;
    s->ring = malloc(cap * sizeof *s->ring);
    s->scratch = malloc(cap * sizeof *s->scratch);
    return s->ring && s->scratch ? 0 : -1;
}

void frt_sampler_push(struct frt_sampler *s, uint64_t x) {
    if (s->len < s->cap) s->ring[s->len++] = x;
    else {
        s->ring[s->next] = x;
        s->next = (s->next + 1) % s->cap;
    }
    s->fresh++;
    if (s->fresh >= s->every || (!s->has && s->len >= 32)) {
        s->fresh = 0;
        memcpy(s->scratch, s->ring, s->len * sizeof *s->ring);
        s->value = frt_nearest_rank(s->scratch, s->len, s->pct);
        s->has = 1;
    }
}

#define GHOST_ROWS 4

int frt_ghost_init(struct frt_ghost *g, size_t cap) {
    memset(g, 0, sizeof *g);
    g->cap = cap;
    if (cap == 0) return 0;
    size_t w = 1;
    while (w < cap) w <<= 1;
    if (w < 64) w = 64;
    g->mask = w - 1;
    g->rows = calloc(w * GHOST_ROWS, 1);
    return g->rows ? 0 : -1;
}

static inline void ghost_slots(const struct frt_ghost *g, uint64_t key, size_t out[GHOST_ROWS]) {
    uint64_t h1 = frt_mix64(key), h2 = frt_mix64(key ^ 0x6A09E667F3BCC909ull) | 1;
    size_t w = g->mask + 1;
    for (size_t i = 0; i < GHOST_ROWS; i++) out[i] = i * w + ((size_t)(h1 + (uint64_t)i * h2) & g->mask);
}

/* Ghost::min_of: a key's count, the smallest of its counters */
static inline uint8_t ghost_min(const struct frt_ghost *g, const size_t idx[GHOST_ROWS]) {
    uint8_t m = 255;
    for (int i = 0; i < GHOST_ROWS; i++)
        if (g->rows[idx[i]] < m) m = g->rows[idx[i]];
    return m;
}

uint32_t frt_ghost_touch(struct frt_ghost *g, uint64_t key) {
    if (g->cap == 0) return 0;
    size_t idx[GHOST_ROWS];
    ghost_slots(g, key, idx);
    uint8_t prev = ghost_min(g, idx);
    if (prev < 255)
        for (int i = 0; i < GHOST_ROWS; i++)
            if (g->rows[idx[i]] == prev) g->rows[idx[i]] = (uint8_t)(prev + 1);
    if (++g->since >= g->cap) {
        g->since = 0;
        for (size_t i = 0; i < (g->mask + 1) * GHOST_ROWS; i++) g->rows[i] >>= 1;
    }
    return prev;
}

uint32_t frt_ghost_count(const struct frt_ghost *g, uint64_t key) {
    if (g->cap == 0) return 0;
    size_t idx[GHOST_ROWS];
    ghost_slots(g, key, idx);
    return ghost_min(g, idx);
}

void frt_sampler_free(struct frt_sampler *s) {
    free(s->ring);
    free(s->scratch);
    s->ring = s->scratch = NULL;
}

void frt_ghost_free(struct frt_ghost *g) {
    free(g->rows);
    g->rows = NULL;
}
