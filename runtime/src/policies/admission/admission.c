/* admission.c: setting up the admission side (admission.h), the admission slot's policy
 * (engine/policy_slots.h) and the write-rate limiter. */
#include "policies/admission/admission.h"
#include "engine/policy_slots.h"

static void adm_arrive(void *st, uint64_t key) { frt_admission_arrive(st, key); }
static int adm_decide(void *st, const struct flashrt_access *a, unsigned *lo, unsigned *hi) {
    return frt_admission_decide(st, a, lo, hi);
}
static void adm_observe(void *st, const struct flashrt_access *a) { frt_admission_observe(st, a); }
static void adm_idle(void *st) { frt_admission_warm(st); }

const struct frt_admission_ops frt_admission_policy = {
    .name = "policy",
    .arrive = adm_arrive,
    .decide = adm_decide,
    .observe = adm_observe,
    .idle = adm_idle,
};

int frt_admission_init(struct frt_admission *a, const struct flashrt_config *cfg,
                       flashrt_policy *policy, uint64_t capacity_segments, char *err,
                       size_t errlen) {
    a->policy = policy;
    a->hint = !cfg->no_policy_prefetch;
    a->tracker = flashrt_tracker_new(cfg->tracker_width_log2, cfg->tracker_depth, err, errlen);
    if (!a->tracker) return -1;
    if (frt_policy_prepare(policy, capacity_segments, err, errlen) != 0) return -1;
    struct frt_ratelimit *l = &a->limit;
    l->on = cfg->write_rate_mbps > 0;
    l->wall_clock = cfg->rate_clock == FLASHRT_CLOCK_WALL;
    l->rate = cfg->write_rate_mbps * FRT_MB * cfg->sample_ratio / 100.0;
    l->cap = l->rate * cfg->write_burst_s;
    l->tokens = l->cap;
    return 0;
}

void frt_admission_free(struct frt_admission *a) {
    flashrt_tracker_free(a->tracker);
    a->tracker = NULL;
    frt_vec_free(&a->decision_ns);
    frt_vec_free(&a->features_ns);
    frt_vec_free(&a->policy_ns);
    frt_vec_free(&a->hint_ns);
}

int frt_ratelimit_take(struct frt_ratelimit *l, double t, uint64_t bytes) {
    if (!l->on) return 1;
    double now = l->wall_clock ? frt_now() : t;
    if (l->tokens_t != 0) l->tokens += (now - l->tokens_t) * l->rate;
    l->tokens_t = now;
    if (l->tokens > l->cap) l->tokens = l->cap;
    if (l->tokens < (double)bytes) {
        l->limited++;
        return 0;
    }
    l->tokens -= (double)bytes;
    return 1;
}
