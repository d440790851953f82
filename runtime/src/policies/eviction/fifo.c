/* fifo.c: FIFO over regions (the eviction slot, engine/policy_slots.h): regions leave in the
 * order they were sealed; reads change nothing. Navy's FifoPolicy. */
#include "engine/region.h"

static uint32_t fifo_victim(void *st, struct frt_regions *m) {
    (void)st;
    return m->tail;
}

const struct frt_eviction_ops frt_eviction_fifo = {
    .name = "fifo",
    .victim = fifo_victim,
    .victim_of = frt_victim_tail_of,
};
