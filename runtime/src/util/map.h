/* map.h: u64 -> u32 open-addressing hash map (linear probing, backward-shift deletion; the code
 * is map_tmpl.h's). Used by the region manager's index, the backing map and RejectX's history.
 * Not public. */
#ifndef FLASHRT_MAP_H
#define FLASHRT_MAP_H

#include <stddef.h>
#include <stdint.h>

struct frt_map {
    uint64_t *keys;
    uint32_t *vals;
    uint8_t *used;
    size_t cap, len; /* cap is a power of two */
};
int frt_map_init(struct frt_map *m, size_t expected);
void frt_map_free(struct frt_map *m);
/* Returns a pointer to the value or NULL. */
uint32_t *frt_map_get(const struct frt_map *m, uint64_t key);
/* Inserts or overwrites; -1 on allocation failure. */
int frt_map_put(struct frt_map *m, uint64_t key, uint32_t val);
/* Inserts or overwrites: 1 if the key was there (its value into *old unless NULL), 0 if new,
 * -1 on allocation failure. */
int frt_map_put_old(struct frt_map *m, uint64_t key, uint32_t val, uint32_t *old);
/* 0, or -1 if the key was not there. */
int frt_map_del(struct frt_map *m, uint64_t key);

#endif
