/* tracker.c: the contract's hourly block and segment counts in count-min sketches.
 *
 * Six buckets, one per fixed hour (floor(time / 3600), FLASHML_POLICY_HOUR_SECONDS), as ring
 * slots of `depth` rows of 2^width_log2 cells of (GET count, segment count). A slot is cleared
 * when a GET of a newer hour lands in it (rotation); a query of hour h reads the slot only if
 * its tag is that hour, so stale slots read as 0. Updates are conservative
 * (a row's cell is raised only up to the new minimum), so estimates never undercount and
 * overcount only by hash collisions: <= e/width x the bucket's total with high probability. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "baleen/tracker.h"

#define HOURS FLASHML_POLICY_HOURS

/* One sketch cell holds all six hour slots of a counter (one cache line), so an access
 * touches `depth` lines, not 6 x depth: the decision stays well under a microsecond even when
 * a large IO has just flushed the CPU caches. */
struct cell {
    uint32_t n[HOURS], s[HOURS];
    uint32_t pad[16 - 2 * HOURS];
};

struct flashrt_tracker {
    unsigned depth;
    uint64_t mask;
    size_t cells; /* depth x width */
    int64_t tag[HOURS]; /* the hour each ring slot holds */
    struct cell *c;
};

flashrt_tracker *flashrt_tracker_new(unsigned width_log2, unsigned depth, char *err,
                                     size_t errlen) {
    if (width_log2 < 4 || width_log2 > 24 || depth < 1 || depth > 8) {
        frt_seterr(err, errlen, "tracker: width_log2 must be in [4, 24] and depth in [1, 8]");
        return NULL;
    }
    flashrt_tracker *t = calloc(1, sizeof *t);
    if (!t) { frt_seterr(err, errlen, "out of memory"); return NULL; }
    t->depth = depth;
    t->mask = (1ull << width_log2) - 1;
    t->cells = (size_t)depth << width_log2;
    for (int h = 0; h < HOURS; h++) t->tag[h] = INT64_MIN;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, t->cells * sizeof(struct cell)) != 0) {
        free(t);
        frt_seterr(err, errlen, "out of memory");
        return NULL;
    }
    memset(mem, 0, t->cells * sizeof(struct cell));
    t->c = mem;
    return t;
}

void flashrt_tracker_free(flashrt_tracker *t) {
    if (!t) return;
    free(t->c);
    free(t);
}

size_t flashrt_tracker_bytes(const flashrt_tracker *t) {
    return sizeof *t + t->cells * sizeof(struct cell);
}

static inline int64_t hour_of(double time) {
    return (int64_t)floor(time / (double)FLASHML_POLICY_HOUR_SECONDS);
}

static inline int ring(int64_t hour) {
    int64_t r = hour % HOURS;
    return (int)(r < 0 ? r + HOURS : r);
}

/* row r's cell index: double hashing from one 64-bit mix */
static inline void indexes(const flashrt_tracker *t, uint64_t key, size_t *idx) {
    uint64_t h = frt_mix64(key);
    uint64_t h1 = h, h2 = (h >> 32 | h << 32) | 1;
    size_t w = (size_t)t->mask + 1;
    for (unsigned r = 0; r < t->depth; r++) idx[r] = r * w + (size_t)((h1 + r * h2) & t->mask);
}

void frt_tracker_prefetch(const flashrt_tracker *t, uint64_t key) {
    size_t idx[8];
    indexes(t, key, idx);
    for (unsigned r = 0; r < t->depth; r++) __builtin_prefetch(&t->c[idx[r]], 1, 3);
}

void flashrt_tracker_features(flashrt_tracker *t, const struct flashrt_access *a,
                              double f[FLASHRT_NUM_FEATURES]) {
    uint64_t s0 = a->offset / FRT_SEGMENT_BYTES, s1 = (a->offset + a->size - 1) / FRT_SEGMENT_BYTES;
    f[FLASHML_F_OP] = a->op;
    f[FLASHML_F_NAMESPACE] = a->ns;
    f[FLASHML_F_USER] = a->user;
    f[FLASHML_F_START] = (double)s0;
    f[FLASHML_F_END] = (double)s1;
    f[FLASHML_F_SIZE] = (double)a->size;
    size_t idx[8];
    indexes(t, a->key, idx);
    int64_t now = hour_of(a->time);
    for (int h = 0; h < HOURS; h++) {
        int64_t hour = now - h;
        int slot = ring(hour);
        uint32_t n = 0, s = 0;
        if (t->tag[slot] == hour) {
            n = s = UINT32_MAX;
            for (unsigned r = 0; r < t->depth; r++) {
                const struct cell *c = &t->c[idx[r]];
                if (c->n[slot] < n) n = c->n[slot];
                if (c->s[slot] < s) s = c->s[slot];
            }
        }
        f[FLASHML_F_BLOCK_COUNT_H1 + h] = n;
        f[FLASHML_F_SEGMENT_COUNT_H1 + h] = s;
    }
}

void flashrt_tracker_add(flashrt_tracker *t, const struct flashrt_access *a) {
    if (!flashrt_is_get(a->op)) return;
    int64_t hour = hour_of(a->time);
    int slot = ring(hour);
    if (t->tag[slot] != hour) { /* rotation: the slot's hour is over, clear it */
        if (t->tag[slot] > hour) return; /* time went backwards past 6 h: ignore */
        for (size_t i = 0; i < t->cells; i++) t->c[i].n[slot] = t->c[i].s[slot] = 0;
        t->tag[slot] = hour;
    }
    uint32_t nseg = (uint32_t)((a->offset + a->size - 1) / FRT_SEGMENT_BYTES - a->offset / FRT_SEGMENT_BYTES + 1);
    size_t idx[8];
    indexes(t, a->key, idx);
    uint32_t n = UINT32_MAX, s = UINT32_MAX;
    for (unsigned r = 0; r < t->depth; r++) {
        struct cell *c = &t->c[idx[r]];
        if (c->n[slot] < n) n = c->n[slot];
        if (c->s[slot] < s) s = c->s[slot];
    }
    uint32_t nn = n == UINT32_MAX ? n : n + 1;
    uint32_t ns = s > UINT32_MAX - nseg ? UINT32_MAX : s + nseg;
    for (unsigned r = 0; r < t->depth; r++) {
        struct cell *c = &t->c[idx[r]];
        if (c->n[slot] < nn) c->n[slot] = nn;
        if (c->s[slot] < ns) c->s[slot] = ns;
    }
}
