/* A hand-written TEST eviction policy (capability "eviction" of compiler/flashml_policy.h):
 * the predicted distance is the object's size feature, d = expm1(log1p(size)) ~= size, so
 * tests choose each candidate's TTA = |d - age| through the sizes they request. */
#include <math.h>

#include "flashml_policy.h"

int flashml_policy_abi_version(void) { return FLASHML_POLICY_ABI_VERSION; }
int flashml_evict_num_features(void) { return FLASHML_EVICT_NUM_FEATURES; }
const char *flashml_evict_contract_hash(void) { return FLASHML_EVICT_CONTRACT_HASH; }
double flashml_evict_predict(const double *f) { return log1p(f[FLASHML_EVICT_F_SIZE]); }
void flashml_evict_predict_batch(const double *f, int n, double *out) {
    for (int i = 0; i < n; i++) out[i] = flashml_evict_predict(f + (long)i * FLASHML_EVICT_NUM_FEATURES);
}
double flashml_evict_k(void) { return 2.0; }
int flashml_evict_max_candidates(void) { return 3; }
double flashml_evict_delta(void) { return 0.5; }
double flashml_evict_initial_threshold(void) { return 10.0; }
int64_t flashml_evict_memory_window(void) { return 4096; }
