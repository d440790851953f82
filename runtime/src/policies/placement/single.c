/* single.c: the placement slot's default (engine/policy_slots.h): one open region, every
 * segment written to it in turn (Navy's region manager). */
#include "engine/policy_slots.h"

const struct frt_placement_ops frt_placement_single = {
    .name = "single",
    .streams = 1,
};
