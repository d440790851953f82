/* admitall.c: the admission slot's policy "admitall" (engine/policy_slots.h; the simulator's
 * AdmitAll, sim/src/flash/admission.rs): every miss is admitted, nothing prefetched. */
#include <stdlib.h>

#include "engine/policy_slots.h"

static int admitall_init(void **st, const struct frt_admission_setup *s, char *err, size_t errlen) {
    (void)s, (void)err, (void)errlen;
    *st = NULL;
    return 0;
}

static int admitall_decide(void *st, const struct flashrt_access *a, uint64_t index, unsigned *lo, unsigned *hi) {
    (void)st, (void)a, (void)index, (void)lo, (void)hi;
    return 1;
}

const struct frt_admission_ops frt_admission_admitall = {
    .name = "admitall",
    .init = admitall_init,
    .decide = admitall_decide,
};
