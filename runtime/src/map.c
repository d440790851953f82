/* map.c: the u64 -> u32 hash map of map.h. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "map.h"

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

int frt_map_init(struct frt_map *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expected * 2 + 1);
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->vals = malloc(m->cap * sizeof *m->vals);
    m->used = calloc(m->cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        frt_map_free(m);
        return -1;
    }
    return 0;
}

void frt_map_free(struct frt_map *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static inline size_t slot_of(const struct frt_map *m, uint64_t key) {
    return (size_t)frt_mix64(key) & (m->cap - 1);
}

uint32_t *frt_map_get(const struct frt_map *m, uint64_t key) {
    size_t i = slot_of(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) return &m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static int grow(struct frt_map *m) {
    struct frt_map n;
    if (frt_map_init(&n, m->cap) != 0) return -1; /* doubles the capacity */
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i] && frt_map_put(&n, m->keys[i], m->vals[i]) != 0) {
            frt_map_free(&n);
            return -1;
        }
    frt_map_free(m);
    *m = n;
    return 0;
}

int frt_map_put(struct frt_map *m, uint64_t key, uint32_t val) {
    if ((m->len + 1) * 4 > m->cap * 3 && grow(m) != 0) return -1;
    size_t i = slot_of(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->used[i] = 1;
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return 0;
}

int frt_map_del(struct frt_map *m, uint64_t key) {
    size_t mask = m->cap - 1, i = slot_of(m, key);
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
    if (!m->used[i]) return -1;
    /* backward-shift deletion keeps probe sequences intact without tombstones */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j]) break;
        size_t home = slot_of(m, m->keys[j]);
        /* move j into the hole i if home is not cyclically in (i, j] */
        int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->used[i] = 0;
    m->len--;
    return 0;
}
