/* policy_internal.h: how the cache asks a policy (not public). */
#ifndef FLASHRT_POLICY_INTERNAL_H
#define FLASHRT_POLICY_INTERNAL_H

#include "flashrt.h"

/* Called by flashrt_open: sizes RejectX's history from the cache capacity. */
int frt_policy_prepare(flashrt_policy *p, uint64_t capacity_segments, char *err, size_t errlen);
/* 1 if the policy reads the feature vector (a policy .so). */
int frt_policy_wants_features(const flashrt_policy *p);
/* Calls the policy's prefetch hint (flashml_policy_prefetch); 0 if it has none. */
int frt_policy_warm(const flashrt_policy *p);
/* The decision on a miss at trace time t, as flashml_policy_decide_at (one call when the .so
 * has it, else its separate calls with the threshold of t's hour; a built-in policy only
 * admits): FLASHML_DECIDE_ADMIT, and with FLASHML_DECIDE_PREFETCH the inclusive segment range
 * *lo..*hi to fetch. */
int frt_policy_decide(flashrt_policy *p, uint64_t key, double t, const double *features,
                      int32_t *lo, int32_t *hi);

#endif
