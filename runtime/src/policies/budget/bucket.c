/* bucket.c: the budget slot's policy "bucket" (engine/policy_slots.h): the write-rate limiter,
 * a token bucket of `rate` bytes/s (the limit at full-node scale times the sample ratio) and
 * depth rate x burst seconds, full at the start, on trace or wall time. An admitted miss's
 * bytes are written iff the bucket holds as many tokens; they are then taken. */
#include <math.h>
#include <stdlib.h>

#include "engine/policy_slots.h"
#include "util/internal.h"

struct bucket {
    int wall_clock;
    double rate, cap, tokens, tokens_t;
    uint64_t refused;
};

static int bucket_init(void **st, const struct frt_budget_setup *s, char *err, size_t errlen) {
    const struct flashrt_config *cfg = s->cfg;
    if (!(cfg->write_rate_mbps > 0 && isfinite(cfg->write_rate_mbps)) || !(cfg->write_burst_s > 0))
        return frt_seterr(err, errlen, "budget bucket: needs a write rate > 0 MB/s and a burst > 0 s, got %g MB/s, %g s",
                          cfg->write_rate_mbps, cfg->write_burst_s);
    struct bucket *b = calloc(1, sizeof *b);
    if (!b) return frt_seterr(err, errlen, "out of memory");
    b->wall_clock = cfg->rate_clock == FLASHRT_CLOCK_WALL;
    b->rate = cfg->write_rate_mbps * FRT_MB * cfg->sample_ratio / 100.0;
    b->cap = b->rate * cfg->write_burst_s;
    b->tokens = b->cap;
    *st = b;
    return 0;
}

static int bucket_admit(void *st, double t, uint64_t bytes, enum frt_budget_kind kind, uint32_t count,
                        uint64_t erasures) {
    (void)kind, (void)count, (void)erasures;
    struct bucket *b = st;
    double now = b->wall_clock ? frt_now() : t;
    if (b->tokens_t != 0) b->tokens += (now - b->tokens_t) * b->rate;
    b->tokens_t = now;
    if (b->tokens > b->cap) b->tokens = b->cap;
    if (b->tokens < (double)bytes) {
        b->refused++;
        return 0;
    }
    b->tokens -= (double)bytes;
    return 1;
}

static void bucket_stats(void *st, struct frt_budget_stats *out) {
    const struct bucket *b = st;
    out->refused = b->refused;
}

const struct frt_budget_ops frt_budget_bucket = {
    .name = "bucket",
    .init = bucket_init,
    .free = free,
    .admit = bucket_admit,
    .stats = bucket_stats,
};
