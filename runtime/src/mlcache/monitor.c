/* monitor.c: MLCache's monitor (monitor.h). */
#include <stdlib.h>
#include <string.h>

#include "mlcache/monitor.h"
#include "util/internal.h"

#define STEPS FLASHML_PARTITION_STEPS

int frt_mon_init(struct frt_mon *m, int streams, uint64_t capacity) {
    memset(m, 0, sizeof *m);
    m->streams = streams;
    m->capacity = capacity;
    for (int s = 0; s < streams; s++)
        if (frt_map_init(&m->s[s].last, 64) != 0) return -1;
    return 0;
}

void frt_mon_free(struct frt_mon *m) {
    for (int s = 0; s < m->streams; s++) {
        if (m->s[s].last.cap) frt_map_free(&m->s[s].last);
        free(m->s[s].tree);
        free(m->s[s].mark);
        m->s[s].tree = NULL;
        m->s[s].mark = NULL;
    }
}

static int grow(struct frt_mon_stream *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint32_t *tree = calloc(cap + 1, sizeof *tree);
    uint8_t *mark = realloc(m->mark, cap + 1);
    if (!tree || !mark) {
        free(tree);
        if (mark) m->mark = mark;
        return -1;
    }
    memset(mark + m->cap + 1, 0, cap - m->cap);
    /* rebuild the tree of the marks so far, O(cap) */
    for (size_t i = 1; i <= cap; i++) {
        tree[i] += mark[i];
        size_t j = i + (i & (~i + 1));
        if (j <= cap) tree[j] += tree[i];
    }
    free(m->tree);
    m->tree = tree;
    m->mark = mark;
    m->cap = cap;
    return 0;
}

static void fen_add(struct frt_mon_stream *m, size_t i, int d) {
    for (; i <= m->cap; i += i & (~i + 1)) m->tree[i] += (uint32_t)d;
}

static uint64_t fen_sum(const struct frt_mon_stream *m, size_t i) {
    uint64_t s = 0;
    for (; i > 0; i -= i & (~i + 1)) s += m->tree[i];
    return s;
}

/* The request's stack distance within its stream (0: a first request). -1: no memory. */
static int64_t distance(struct frt_mon_stream *m, uint64_t page) {
    if (m->n + 1 > m->cap && grow(m) != 0) return -1;
    size_t pos = ++m->n;
    uint32_t *last = frt_map_get(&m->last, page);
    int64_t d = 0;
    if (last) {
        d = (int64_t)(fen_sum(m, pos - 1) - fen_sum(m, *last)) + 1;
        m->mark[*last] = 0;
        fen_add(m, *last, -1);
        *last = (uint32_t)pos;
    } else if (frt_map_put(&m->last, page, (uint32_t)pos) != 0) {
        return -1;
    }
    m->mark[pos] = 1;
    fen_add(m, pos, 1);
    return d;
}

int frt_mon_observe(struct frt_mon *m, int s, uint64_t page) {
    int64_t d = distance(&m->s[s], page);
    if (d < 0) return -1;
    m->seen++;
    m->count[s]++;
    if (d > 0 && (uint64_t)d <= m->capacity) m->hist[s][(uint64_t)(d - 1) * STEPS / m->capacity]++;
    return 0;
}

int frt_mon_shares(struct frt_mon *m, frt_partition_fn fn, double *shares) {
    for (int s = 0; s < m->streams; s++) shares[s] = 1.0 / m->streams;
    int rc = 0;
    if (m->seen > 0 && fn) {
        double x[FLASHML_PARTITION_NUM_FEATURES] = {0};
        uint64_t total = 0;
        for (int s = 0; s < m->streams; s++) total += m->count[s];
        double t = total ? (double)total : 1.0;
        for (int s = 0; s < m->streams; s++) {
            double *slot = x + s * (STEPS + 1);
            for (int b = 0; b < STEPS; b++) slot[b] = (double)m->hist[s][b] / t;
            slot[STEPS] = (double)m->count[s] / t;
        }
        uint64_t t0 = frt_now_ns();
        rc = fn(x, m->streams, shares) < 0 ? -1 : 0;
        m->call_ns += frt_now_ns() - t0;
        m->calls++;
    }
    for (int s = 0; s < m->streams; s++) {
        memset(m->hist[s], 0, sizeof m->hist[s]);
        m->count[s] = 0;
    }
    return rc;
}
