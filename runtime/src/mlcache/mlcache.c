/* mlcache.c: the partition slot's learned policy (engine/policy_slots.h): MLCache's network,
 * the bundle's partition capability (flashml_partition), asked at each interval boundary with
 * the monitor's features of the interval before (monitor.h, the partitioned page cache's very
 * code; pages are the GETs' segments, the capacity the flash's segments, as
 * flashml.systems.mlcache.flash_partition's monitor view); its shares become regions by the simulator's rule
 * (pages_of_shares; an invalid vector: the even split; each holds its quota - 1,
 * frt_partition_holds). The first interval is even. */
#include <stdlib.h>

#include "engine/policy_slots.h"
#include "mlcache/monitor.h"
#include "util/internal.h"

struct bpart {
    struct frt_mon mon;
    frt_partition_fn fn;
    unsigned streams;
    uint64_t regions;
};

static int bundle_first(const struct frt_partition_setup *s, uint64_t *quota, char *err, size_t errlen) {
    return frt_partition_even.quotas(s, quota, err, errlen);
}

static void bundle_free(void *st) {
    struct bpart *b = st;
    if (!b) return;
    frt_mon_free(&b->mon);
    free(b);
}

static int bundle_init(void **st, const struct frt_partition_setup *s, char *err, size_t errlen) {
    frt_partition_fn fn = s->bundle ? frt_policy_partition(s->bundle) : NULL;
    if (!fn)
        return frt_seterr(err, errlen, "partition bundle: %s has no partition capability (flashrt_policy_load_partition)",
                          s->bundle ? flashrt_policy_name(s->bundle) : "no bundle");
    if (s->streams > FLASHML_PARTITION_MAX_STREAMS)
        return frt_seterr(err, errlen, "partition bundle: %u streams; the network has %d", s->streams,
                          FLASHML_PARTITION_MAX_STREAMS);
    struct bpart *b = calloc(1, sizeof *b);
    if (!b) return frt_seterr(err, errlen, "out of memory");
    *st = b;
    b->fn = fn;
    b->streams = s->streams;
    b->regions = s->regions;
    if (frt_mon_init(&b->mon, (int)s->streams, s->capacity_segments) != 0) return frt_seterr(err, errlen, "out of memory");
    return 0;
}

static int bundle_observe(void *st, uint32_t stream, uint64_t page) {
    struct bpart *b = st;
    return frt_mon_observe(&b->mon, (int)stream, page);
}

static int bundle_next(void *st, uint64_t *quota, char *err, size_t errlen) {
    struct bpart *b = st;
    double shares[FLASHML_PARTITION_MAX_STREAMS];
    if (frt_mon_shares(&b->mon, b->fn, shares) != 0)
        return frt_seterr(err, errlen, "flashml_partition refused %u streams", b->streams);
    flashrt_part_pages_of_shares(shares, (int)b->streams, b->regions, quota);
    frt_partition_holds(quota, b->streams);
    return 0;
}

const struct frt_partition_ops frt_partition_bundle = {
    .name = "bundle",
    .needs = FRT_CAP_PARTITION,
    .quotas = bundle_first,
    .init = bundle_init,
    .free = bundle_free,
    .observe = bundle_observe,
    .next = bundle_next,
};
