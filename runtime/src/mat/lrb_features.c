/* lrb_features.c: LRB's eviction features (lrb_features.h), line for line the simulator's
 * sim/src/mat/lrb_features.rs. */
#include "mat/lrb_features.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/internal.h"

/* 0.5^k exactly (a power of two, subnormal below 2^-1022, 0 below 2^-1074): half_pow. */
static inline double half_pow(uint64_t k) {
    uint64_t bits;
    if (k < 1023) bits = (1023 - k) << 52;
    else if (k <= 1074) bits = 1ull << (1074 - k);
    else return 0.0;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* LRB's quantised decay of counter i over d logical requests. */
static inline double decay(const struct frt_lrb *s, unsigned i, uint64_t d) {
    uint64_t q = d >> (FRT_EVICT_EDC_BASE_LOG2 + i);
    return half_pow(q < s->max_decay ? q : s->max_decay);
}

int frt_lrb_init(struct frt_lrb *s, uint64_t window, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (window < 1024 || window > UINT32_MAX)
        return frt_seterr(err, errlen, "memory window must be in 1024..=4294967295 logical requests, got %llu",
                          (unsigned long long)window);
    s->window = window;
    uint64_t q = window >> FRT_EVICT_EDC_BASE_LOG2;
    s->max_decay = q ? q - 1 : 0;
    return 0;
}

int frt_lrb_add(struct frt_lrb *s) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        struct frt_lrb_meta *m = realloc(s->m, cap * sizeof *m);
        if (!m) return -1;
        s->m = m;
        s->cap = cap;
    }
    s->m[s->n++] = (struct frt_lrb_meta){FRT_LRB_NEVER, 0, NULL};
    return 0;
}

int frt_lrb_access(struct frt_lrb *s, uint32_t id, uint64_t t, uint64_t size) {
    struct frt_lrb_meta *m = &s->m[id];
    uint64_t last = m->last;
    if (last == FRT_LRB_NEVER || t - last >= s->window) {
        m->last = t;
        m->size = size;
        free(m->extra);
        m->extra = NULL;
        return 0;
    }
    uint64_t d = t - last; /* in 1..window, and window < 2^32 */
    double decays[FRT_EVICT_NEDC];
    for (unsigned i = 0; i < FRT_EVICT_NEDC; i++) decays[i] = decay(s, i, d);
    m->last = t;
    struct frt_lrb_extra *e = m->extra;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) return -1;
        e->dist[0] = (uint32_t)d;
        e->len = 1;
        e->head = 0;
        for (unsigned i = 0; i < FRT_EVICT_NEDC; i++) e->edc[i] = 1.0 * decays[i] + 1.0;
        m->extra = e;
        return 0;
    }
    e->head = (uint8_t)((e->head + 1u) % FRT_EVICT_MAXD);
    e->dist[e->head] = (uint32_t)d;
    if (e->len < FRT_EVICT_MAXD) e->len++;
    for (unsigned i = 0; i < FRT_EVICT_NEDC; i++) e->edc[i] = e->edc[i] * decays[i] + 1.0;
    return 0;
}

void frt_lrb_features(const struct frt_lrb *s, uint32_t id, uint64_t now, double out[FRT_EVICT_NF]) {
    const struct frt_lrb_meta *m = &s->m[id];
    uint64_t age = now - m->last;
    out[FLASHML_EVICT_F_AGE] = (double)age;
    out[FLASHML_EVICT_F_SIZE] = (double)m->size;
    unsigned within = 0;
    const struct frt_lrb_extra *e = m->extra;
    if (!e) {
        for (unsigned j = 0; j < FRT_EVICT_MAXD; j++) out[FLASHML_EVICT_F_DELTA_1 + j] = NAN;
        for (unsigned i = 0; i < FRT_EVICT_NEDC; i++) out[FLASHML_EVICT_F_EDC_0 + i] = decay(s, i, age);
    } else {
        unsigned n = e->len;
        uint64_t total = 0;
        for (unsigned j = 0; j < n; j++) {
            uint32_t d = e->dist[(e->head + FRT_EVICT_MAXD - j) % FRT_EVICT_MAXD];
            out[FLASHML_EVICT_F_DELTA_1 + j] = (double)d;
            total += d;
            if (total < s->window) within++;
        }
        for (unsigned j = n; j < FRT_EVICT_MAXD; j++) out[FLASHML_EVICT_F_DELTA_1 + j] = NAN;
        for (unsigned i = 0; i < FRT_EVICT_NEDC; i++)
            out[FLASHML_EVICT_F_EDC_0 + i] = e->edc[i] * decay(s, i, age);
    }
    out[FLASHML_EVICT_F_N_WITHIN] = (double)within;
}

void frt_lrb_free(struct frt_lrb *s) {
    for (size_t i = 0; i < s->n; i++) free(s->m[i].extra);
    free(s->m);
    memset(s, 0, sizeof *s);
}
