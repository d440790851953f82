/* policy_slots.c: the built-in policies of each slot by name (engine/policy_slots.h). */
#include <string.h>

#include "engine/policy_slots.h"

static const struct frt_eviction_ops *const EVICTION[] = {
    [FLASHRT_LRU] = &frt_eviction_lru,
    [FLASHRT_FIFO] = &frt_eviction_fifo,
    [FLASHRT_MAT] = &frt_eviction_mat,
    [FLASHRT_MRU] = &frt_eviction_mru,
};
#define NEVICTION ((int)(sizeof EVICTION / sizeof EVICTION[0]))

const struct frt_eviction_ops *frt_eviction_policy(int which) {
    return which >= 0 && which < NEVICTION ? EVICTION[which] : NULL;
}

int flashrt_eviction_from_name(const char *name) {
    for (int i = 0; i < NEVICTION; i++)
        if (EVICTION[i] && !strcmp(EVICTION[i]->name, name)) return i;
    return -1;
}

const char *flashrt_eviction_name(int which) {
    const struct frt_eviction_ops *ops = frt_eviction_policy(which);
    return ops ? ops->name : NULL;
}
