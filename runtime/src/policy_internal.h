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
int frt_policy_admit(flashrt_policy *p, uint64_t key, const double *features);
/* 1 with an inclusive segment range when the policy prefetches on this miss. */
int frt_policy_prefetch(flashrt_policy *p, const double *features, int64_t *lo, int64_t *hi);

#endif
