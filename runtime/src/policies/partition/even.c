/* even.c: the partition slot's even split (engine/policy_slots.h; the simulator's `even`,
 * flashml.systems.mlcache.flash_partition): every stream the same share of the regions, the remainder to the
 * lower streams (sim/src/mlcache/partition.rs apportion); each holds its quota - 1 (frt_partition_holds). */
#include "engine/policy_slots.h"

static int even_quotas(const struct frt_partition_setup *s, uint64_t *quota, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    uint64_t ones[FLASHRT_PART_MAX_STREAMS];
    for (unsigned i = 0; i < s->streams; i++) ones[i] = 1;
    flashrt_part_apportion(ones, (int)s->streams, s->regions, quota);
    frt_partition_holds(quota, s->streams);
    return 0;
}

const struct frt_partition_ops frt_partition_even = {
    .name = "even",
    .quotas = even_quotas,
};
