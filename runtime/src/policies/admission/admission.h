/* admission.h: the admission side of the cache (Navy's AdmissionPolicy): the count-min feature
 * tracker, the policy's decision on a miss (admit, and the prefetch range when the when-score
 * passes), the policy's prefetch hint, and the write-rate limiter (token bucket) that can
 * still refuse an admitted miss's bytes. The policy itself (a .so or a built-in) is policy.c.
 * Not public. */
#ifndef FLASHRT_ADMISSION_H
#define FLASHRT_ADMISSION_H

#include <stdint.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "policies/policy_internal.h"

/* Token bucket of `rate` bytes/s (the limit at full-node scale times the sample ratio) and
 * depth `cap` = rate x burst seconds, full at the start; on trace or wall time. */
struct frt_ratelimit {
    int on, wall_clock;
    double rate, cap, tokens, tokens_t;
    uint64_t limited; /* admissions refused */
};

struct frt_admission {
    flashrt_policy *policy; /* owned by the caller */
    flashrt_tracker *tracker;
    int hint; /* call the policy's prefetch hint (flashml_policy_prefetch) */
    struct frt_ratelimit limit;
    /* per miss: features + decision, and its two parts; per hint call */
    struct frt_vec decision_ns, features_ns, policy_ns, hint_ns;
};

/* The tracker, the policy sized to the cache (RejectX's history) and the limiter of cfg. */
int frt_admission_init(struct frt_admission *a, const struct flashrt_config *cfg,
                       flashrt_policy *policy, uint64_t capacity_segments, char *err,
                       size_t errlen);
void frt_admission_free(struct frt_admission *a);

/* 1 if `bytes` may be written now (trace time t, or the wall clock), taking their tokens;
 * 0 (counted in `limited`) if not. Always 1 without a limit. */
int frt_ratelimit_take(struct frt_ratelimit *l, double t, uint64_t bytes);

/* ---- hot path (every GET, every miss): inline, so the split adds no call ---- */

/* The policy's prefetch hint, timed (when a GET arrives and between accesses). */
static inline void frt_admission_warm(struct frt_admission *a) {
    if (!a->hint) return;
    uint64_t h0 = frt_now_ns();
    if (frt_policy_warm(a->policy)) frt_vec_push(&a->hint_ns, (double)(frt_now_ns() - h0));
}

/* A GET arrives: the decision on a miss comes soon, let its tracker cells, code and tables
 * load meanwhile. */
static inline void frt_admission_arrive(struct frt_admission *a, uint64_t key) {
    frt_tracker_prefetch(a->tracker, key);
    frt_admission_warm(a);
}

/* Counts a served GET in the tracker (after any decision on it). */
static inline void frt_admission_observe(struct frt_admission *a, const struct flashrt_access *acc) {
    flashrt_tracker_add(a->tracker, acc);
}

/* The decision on a miss whose IO would cover segments *lo..*hi: returns 1 to admit, and
 * then widens *lo..*hi by the policy's prefetch range (as the simulator: prefetch extends
 * only an admitted miss's IO). Times the features and the policy's part. */
static inline int frt_admission_decide(struct frt_admission *a, const struct flashrt_access *acc,
                                       unsigned *lo, unsigned *hi) {
    uint64_t d0 = frt_now_ns();
    double f[FLASHRT_NUM_FEATURES];
    int wants = frt_policy_wants_features(a->policy);
    if (wants) flashrt_tracker_features(a->tracker, acc, f);
    uint64_t d1 = frt_now_ns();
    int32_t p0 = 0, p1 = -1;
    int dec = frt_policy_decide(a->policy, acc->key, acc->time, wants ? f : NULL, &p0, &p1);
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
    frt_vec_push(&a->decision_ns, (double)(d2 - d0));
    frt_vec_push(&a->features_ns, (double)(d1 - d0));
    frt_vec_push(&a->policy_ns, (double)(d2 - d1));
    return admit != 0;
}

#endif
