/* sketch.h: the small counting structures of Pannier (sim/src/pannier/blocks.rs), shared by its
 * container cache (pannier/pannier.c) and the engine's packing placement
 * (policies/placement/packing.c):
 * - frt_ghost: the ghost count-min sketch of recent accesses (4 rows of 8-bit counters,
 *   conservative update, every counter halved after `cap` touches; cap 0: off, counts 0);
 * - frt_sampler: a percentile of the last `cap` values pushed (nearest rank), recomputed every
 *   `every` pushes (and first at 32 values);
 * - frt_nearest_rank: the nearest-rank percentile (sorts xs). Not public. */
#ifndef FLASHRT_SKETCH_H
#define FLASHRT_SKETCH_H

#include <stddef.h>
#include <stdint.h>

uint64_t frt_nearest_rank(uint64_t *xs, size_t n, double pct);

struct frt_sampler {
    uint64_t *ring, *scratch;
    size_t len, cap, next, fresh, every;
    double pct;
    int has;        /* a value has been computed */
    uint64_t value; /* the percentile */
};
int frt_sampler_init(struct frt_sampler *s, double pct, size_t cap, size_t every);
void frt_sampler_push(struct frt_sampler *s, uint64_t x);
void frt_sampler_free(struct frt_sampler *s);

struct frt_ghost {
    size_t cap, mask;
    uint8_t *rows;
    size_t since;
};
int frt_ghost_init(struct frt_ghost *g, size_t cap);
/* Counts an access of key: the count before it. */
uint32_t frt_ghost_touch(struct frt_ghost *g, uint64_t key);
uint32_t frt_ghost_count(const struct frt_ghost *g, uint64_t key);
void frt_ghost_free(struct frt_ghost *g);

#endif
