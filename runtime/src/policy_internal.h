/* policy_internal.h: how the cache asks a policy (not public). */
#ifndef FLASHRT_POLICY_INTERNAL_H
#define FLASHRT_POLICY_INTERNAL_H

#include <stdint.h>

#include "flashrt.h"

/* Capabilities of a policy bundle (flashml_policy.h, manifest.json `capabilities`). */
enum { FRT_CAP_ADMISSION = 1u, FRT_CAP_PREFETCH = 2u, FRT_CAP_EVICTION = 4u, FRT_CAP_PARTITION = 8u,
       FRT_CAP_READAHEAD = 16u /* readahead.h: frt_readahead_load, frt_policy_readahead */ };

/* Loads a policy bundle for the capabilities in `need` (FRT_CAP_* bits): refused, with a
 * message naming the bundle and the capability, when its manifest lacks one (a manifest
 * without `capabilities` has admission and prefetch); then the manifest's sha256, ABI version
 * and the contract hash of each needed capability, and the .so's functions for them. Only
 * the functions of `need` are used. flashrt_policy_load(dir, ...) asks for
 * FRT_CAP_ADMISSION | FRT_CAP_PREFETCH. */
flashrt_policy *frt_policy_load_for(const char *dir, unsigned need, char *err, size_t errlen);
/* The capabilities a policy was loaded for (0 for a built-in one). One loaded without
 * FRT_CAP_ADMISSION admits every miss (frt_policy_decide) and reads no features. */
unsigned frt_policy_caps(const flashrt_policy *p);

/* MAT's eviction functions and parameters of a policy loaded for FRT_CAP_EVICTION (NULL
 * otherwise); flashml_policy.h documents each. */
struct frt_evict_fns {
    double (*predict)(const double *features);
    void (*predict_batch)(const double *features, int n, double *out);
    double k, delta, initial_threshold;
    int max_candidates;
    int64_t memory_window;
    int controller; /* flashml_evict_controller (optional, absent: 0): 0 sign, 1 mean */
    int reuse_predictions; /* flashml_evict_reuse_predictions (optional, absent: 0): 0 or 1 */
};
const struct frt_evict_fns *frt_policy_evict(const flashrt_policy *p);

/* MLCache's partition function of a policy loaded for FRT_CAP_PARTITION (NULL otherwise):
 * flashml_partition (flashml_policy.h). */
typedef int (*frt_partition_fn)(const double *features, int streams, double *shares);
frt_partition_fn frt_policy_partition(const flashrt_policy *p);

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
