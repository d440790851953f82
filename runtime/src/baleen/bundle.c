/* bundle.c: the admission slot's policy "bundle" (engine/policy_slots.h): a bundle's admission
 * and prefetch capabilities (policies/policy.c) asked on each miss with the features of the
 * count-min tracker (tracker.c); the policy's prefetch hint when a GET arrives and between
 * accesses (flashml_policy_prefetch: the decision's code and tables wait in the CPU caches). */
#include <math.h>
#include <stdlib.h>

#include "engine/policy_slots.h"
#include "flashml_policy.h"
#include "policies/policy_internal.h"
#include "baleen/tracker.h"
#include "util/internal.h"

struct bundle {
    flashrt_policy *policy; /* owned by the caller */
    flashrt_tracker *tracker;
    int hint; /* call the policy's prefetch hint */
    /* per miss: the decision's two parts; per hint call */
    struct frt_vec features_ns, policy_ns, hint_ns;
};

static void bundle_free(void *st) {
    struct bundle *a = st;
    if (!a) return;
    flashrt_tracker_free(a->tracker);
    frt_vec_free(&a->features_ns);
    frt_vec_free(&a->policy_ns);
    frt_vec_free(&a->hint_ns);
    free(a);
}

static int bundle_init(void **st, const struct frt_admission_setup *s, char *err, size_t errlen) {
    struct bundle *a = calloc(1, sizeof *a);
    if (!a) return frt_seterr(err, errlen, "out of memory");
    *st = a;
    a->policy = s->bundle;
    a->hint = !s->cfg->no_policy_prefetch;
    a->tracker = flashrt_tracker_new(s->cfg->tracker_width_log2, s->cfg->tracker_depth, err, errlen);
    return a->tracker ? 0 : -1;
}

/* The policy's prefetch hint, timed. */
static void bundle_idle(void *st) {
    struct bundle *a = st;
    if (!a->hint) return;
    uint64_t h0 = frt_now_ns();
    if (frt_policy_warm(a->policy)) frt_vec_push(&a->hint_ns, (double)(frt_now_ns() - h0));
}

/* A GET arrives: the decision on a miss comes soon, let its tracker cells, code and tables
 * load meanwhile. */
static void bundle_arrive(void *st, uint64_t key) {
    struct bundle *a = st;
    frt_tracker_prefetch(a->tracker, key);
    bundle_idle(a);
}

/* Counts a served GET in the tracker (after any decision on it). */
static void bundle_observe(void *st, const struct flashrt_access *acc) {
    flashrt_tracker_add(((struct bundle *)st)->tracker, acc);
}

/* Admit, and then widen *lo..*hi by the policy's prefetch range (as the simulator: prefetch
 * extends only an admitted miss's IO). Times the features and the policy's part. */
static int bundle_decide(void *st, const struct flashrt_access *acc, uint64_t index, unsigned *lo, unsigned *hi) {
    (void)index;
    struct bundle *a = st;
    uint64_t d0 = frt_now_ns();
    double f[FLASHRT_NUM_FEATURES];
    int wants = frt_policy_wants_features(a->policy);
    if (wants) flashrt_tracker_features(a->tracker, acc, f);
    uint64_t d1 = frt_now_ns();
    int32_t p0 = 0, p1 = -1;
    int dec = frt_policy_decide(a->policy, acc->time, wants ? f : NULL, &p0, &p1);
    uint64_t d2 = frt_now_ns();
    int admit = dec & FLASHML_DECIDE_ADMIT;
    if (admit && (dec & FLASHML_DECIDE_PREFETCH)) {
        if (p0 < 0) p0 = 0;
        if (p1 > (int32_t)FRT_SEGMENTS_PER_BLOCK - 1) p1 = (int32_t)FRT_SEGMENTS_PER_BLOCK - 1;
        if (p0 <= p1) {
            if ((unsigned)p0 < *lo) *lo = (unsigned)p0;
            if ((unsigned)p1 > *hi) *hi = (unsigned)p1;
        }
    }
    frt_vec_push(&a->features_ns, (double)(d1 - d0));
    frt_vec_push(&a->policy_ns, (double)(d2 - d1));
    return admit != 0;
}

static void bundle_stats(void *st, struct frt_admission_stats *out) {
    struct bundle *a = st;
    out->features_ns_p50 = frt_percentile(&a->features_ns, 0.5);
    out->policy_ns_p50 = frt_percentile(&a->policy_ns, 0.5);
    out->hint_ns_p50 = frt_percentile(&a->hint_ns, 0.5);
}

const struct frt_admission_ops frt_admission_bundle = {
    .name = "bundle",
    .needs = FRT_CAP_ADMISSION,
    .init = bundle_init,
    .free = bundle_free,
    .arrive = bundle_arrive,
    .decide = bundle_decide,
    .observe = bundle_observe,
    .idle = bundle_idle,
    .stats = bundle_stats,
};
