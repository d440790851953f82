/* map_tmpl.h: the one open-addressing hash map of the runtime (u64 keys, linear probing,
 * backward-shift deletion, grown at 3/4 load), written once and instantiated per value type.
 * Before including, define MAP_NAME (the struct's name and the functions' prefix: the struct
 * must have `uint64_t *keys; MAP_VAL *vals; uint8_t *used; size_t cap, len;`), MAP_VAL (the
 * value type) and MAP_SCOPE (the public functions' linkage: empty, or `static inline`).
 * Instances: map.c (frt_map, u64 -> u32, and frt_map64, u64 -> u64, declared in map.h) and
 * pannier_internal.h (u64 -> u64, inlined into pannier.c's hot path and pannier_store.c). */
#include <stdlib.h>
#include <string.h>

#include "util/internal.h"

#define MAP_CAT2_(a, b) a##_##b
#define MAP_CAT_(a, b) MAP_CAT2_(a, b)
#define MAP_FN(x) MAP_CAT_(MAP_NAME, x)

MAP_SCOPE int MAP_FN(init)(struct MAP_NAME *m, size_t expected);
MAP_SCOPE void MAP_FN(free)(struct MAP_NAME *m);
MAP_SCOPE int MAP_FN(put_old)(struct MAP_NAME *m, uint64_t key, MAP_VAL val, MAP_VAL *old);

static inline size_t MAP_FN(home_)(const struct MAP_NAME *m, uint64_t key) {
    return (size_t)frt_mix64(key) & (m->cap - 1);
}

/* Room for `expected` keys at under 1/2 load; -1 (and nothing allocated) on OOM. */
MAP_SCOPE int MAP_FN(init)(struct MAP_NAME *m, size_t expected) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < expected * 2 + 1) cap <<= 1;
    m->cap = cap;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->used = calloc(cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        MAP_FN(free)(m);
        return -1;
    }
    return 0;
}

MAP_SCOPE void MAP_FN(free)(struct MAP_NAME *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* A pointer to the value of `key`, or NULL. */
MAP_SCOPE MAP_VAL *MAP_FN(get)(const struct MAP_NAME *m, uint64_t key) {
    size_t i = MAP_FN(home_)(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) return &m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static int MAP_FN(grow_)(struct MAP_NAME *m) {
    struct MAP_NAME n;
    if (MAP_FN(init)(&n, m->cap) != 0) return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i] && MAP_FN(put_old)(&n, m->keys[i], m->vals[i], NULL) < 0) {
            MAP_FN(free)(&n);
            return -1;
        }
    MAP_FN(free)(m);
    *m = n;
    return 0;
}

/* Inserts or overwrites: 1 if `key` was there (its value into *old unless NULL), 0 if new,
 * -1 on allocation failure. */
MAP_SCOPE int MAP_FN(put_old)(struct MAP_NAME *m, uint64_t key, MAP_VAL val, MAP_VAL *old) {
    if ((m->len + 1) * 4 > m->cap * 3 && MAP_FN(grow_)(m) != 0) return -1;
    size_t i = MAP_FN(home_)(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) {
            if (old) *old = m->vals[i];
            m->vals[i] = val;
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->used[i] = 1;
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return 0;
}

/* Inserts or overwrites; -1 on allocation failure. */
MAP_SCOPE int MAP_FN(put)(struct MAP_NAME *m, uint64_t key, MAP_VAL val) {
    return MAP_FN(put_old)(m, key, val, NULL) < 0 ? -1 : 0;
}

/* Removes `key`: 0, or -1 if it was not there. Backward-shift deletion keeps the probe
 * sequences intact without tombstones. */
MAP_SCOPE int MAP_FN(del)(struct MAP_NAME *m, uint64_t key) {
    size_t mask = m->cap - 1, i = MAP_FN(home_)(m, key);
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
    if (!m->used[i]) return -1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j]) break;
        size_t home = MAP_FN(home_)(m, m->keys[j]);
        /* move j into the hole i if its home is not cyclically in (i, j] */
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

#undef MAP_FN
#undef MAP_CAT_
#undef MAP_CAT2_
