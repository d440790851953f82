/* map.h: u64 -> u32 open-addressing hash map (linear probing, backward-shift deletion). Used by
 * the region manager's index, the backing map and RejectX's history. Not public. */
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
int frt_map_del(struct frt_map *m, uint64_t key);

#endif
