/* map.h: u64-keyed open-addressing hash maps (linear probing, backward-shift deletion; the code
 * is map_tmpl.h's): frt_map (u64 -> u32: the region manager's index, the backing map, RejectX's
 * history) and frt_map64 (u64 -> u64: the journal's latest records, recovery's claimed
 * segments). Not public. */
#ifndef FLASHRT_MAP_H
#define FLASHRT_MAP_H

#include <stddef.h>
#include <stdint.h>

/* One instance's struct and functions (map.c instantiates map_tmpl.h for each):
 *   init     room for `expected` keys; -1 on allocation failure
 *   get      a pointer to the value or NULL
 *   put      inserts or overwrites; -1 on allocation failure
 *   put_old  inserts or overwrites: 1 if the key was there (its value into *old unless NULL),
 *            0 if new, -1 on allocation failure
 *   del      0, or -1 if the key was not there */
#define FRT_MAP_DECLARE(NAME, VAL)                                                \
    struct NAME {                                                                 \
        uint64_t *keys;                                                           \
        VAL *vals;                                                                \
        uint8_t *used;                                                            \
        size_t cap, len; /* cap is a power of two */                              \
    };                                                                            \
    int NAME##_init(struct NAME *m, size_t expected);                             \
    void NAME##_free(struct NAME *m);                                             \
    VAL *NAME##_get(const struct NAME *m, uint64_t key);                          \
    int NAME##_put(struct NAME *m, uint64_t key, VAL val);                        \
    int NAME##_put_old(struct NAME *m, uint64_t key, VAL val, VAL *old);          \
    int NAME##_del(struct NAME *m, uint64_t key);

FRT_MAP_DECLARE(frt_map, uint32_t)
FRT_MAP_DECLARE(frt_map64, uint64_t)

#endif
