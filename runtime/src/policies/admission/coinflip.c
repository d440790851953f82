/* coinflip.c: the admission slot's policy "coinflip" (engine/policy_slots.h; the simulator's
 * CoinFlip, sim/src/flash/admission.rs): admit with probability p, decided by a deterministic draw
 * of the block key and the access index, unit(splitmix64(key ^ splitmix64(index ^ seed))) < p
 * (unit: the top 53 bits as a double in [0, 1)). */
#include <stdlib.h>

#include "engine/policy_slots.h"
#include "util/internal.h"

struct coinflip {
    double p;
    uint64_t seed;
};

static int coinflip_init(void **st, const struct frt_admission_setup *s, char *err, size_t errlen) {
    double p = s->cfg->coinflip_p;
    if (!(p >= 0.0 && p <= 1.0)) return frt_seterr(err, errlen, "coinflip p must be in [0, 1], got %g", p);
    struct coinflip *c = malloc(sizeof *c);
    if (!c) return frt_seterr(err, errlen, "out of memory");
    c->p = p;
    c->seed = s->cfg->coinflip_seed;
    *st = c;
    return 0;
}

static int coinflip_decide(void *st, const struct flashrt_access *a, uint64_t index, unsigned *lo, unsigned *hi) {
    (void)lo, (void)hi;
    const struct coinflip *c = st;
    return frt_unit_interval(frt_mix64(a->key ^ frt_mix64(index ^ c->seed))) < c->p;
}

const struct frt_admission_ops frt_admission_coinflip = {
    .name = "coinflip",
    .init = coinflip_init,
    .free = free,
    .decide = coinflip_decide,
};
