/* static.c: the partition slot's fixed split (engine/policy_slots.h): the shares the command
 * line gives (flashrt_config.partition_shares, one per stream, in the streams' order), made
 * regions by the simulator's rule (sim/src/mlcache/partition.rs pages_of_shares: scaled to 2^40,
 * rounded, largest remainder); each holds its quota - 1 (frt_partition_holds). */
#include <math.h>

#include "engine/policy_slots.h"
#include "util/internal.h"

static int static_quotas(const struct frt_partition_setup *s, uint64_t *quota, char *err, size_t errlen) {
    const struct flashrt_config *c = s->cfg;
    if (!c->partition_shares || c->partition_nshares != s->streams)
        return frt_seterr(err, errlen, "partition static: %u shares for %u streams (one per stream)",
                          c->partition_shares ? c->partition_nshares : 0, s->streams);
    double sum = 0;
    for (unsigned i = 0; i < s->streams; i++) {
        if (!(c->partition_shares[i] >= 0) || !isfinite(c->partition_shares[i]))
            return frt_seterr(err, errlen, "partition static: share %u is %g (a share is a finite number >= 0)", i,
                              c->partition_shares[i]);
        sum += c->partition_shares[i];
    }
    if (!(sum > 0)) return frt_seterr(err, errlen, "partition static: the shares sum to 0");
    flashrt_part_pages_of_shares(c->partition_shares, (int)s->streams, s->regions, quota);
    frt_partition_holds(quota, s->streams);
    return 0;
}

const struct frt_partition_ops frt_partition_static = {
    .name = "static",
    .quotas = static_quotas,
};
