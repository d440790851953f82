/* A hand-written TEST policy implementing compiler/flashml_policy.h, built several ways:
 *   -DKIND=0  admit-all, no prefetch
 *   -DKIND=1  admit iff block_count_h1 >= 1 (seen earlier this hour), prefetch start..end+2
 *             when the access starts in the first half of the block
 *   -DKIND=2  KIND 1's admission, no prefetch (Baleen's admission alone beside another
 *             eviction: its decisions compared with the simulator's exactly)
 *   -DABI=N, -DHASH="..."  deliberately wrong identities (the loader must refuse them)
 *   -DBAD_VALUE=N  a value the loader must refuse: 1 NaN admission threshold, 2 infinite
 *             when threshold, 3 target write rate 0, 4 negative eviction age */
#include "flashml_policy.h"

#ifndef KIND
#define KIND 0
#endif
#ifndef ABI
#define ABI FLASHML_POLICY_ABI_VERSION
#endif
#ifndef HASH
#define HASH FLASHML_POLICY_CONTRACT_HASH
#endif

int flashml_policy_abi_version(void) { return ABI; }
int flashml_policy_num_features(void) { return FLASHML_POLICY_NUM_FEATURES; }
const char *flashml_policy_contract_hash(void) { return HASH; }

double flashml_admit_score(const double *f) {
#if KIND == 1 || KIND == 2
    return f[FLASHML_F_BLOCK_COUNT_H1];
#else
    (void)f;
    return 1.0;
#endif
}

#ifndef BAD_VALUE
#define BAD_VALUE 0
#endif

double flashml_admit_threshold(void) {
#if BAD_VALUE == 1
    return __builtin_nan("");
#elif KIND == 1 || KIND == 2
    return 1.0;
#else
    return 0.5;
#endif
}

void flashml_prefetch_range(const double *f, int32_t *first, int32_t *last) {
    *first = (int32_t)f[FLASHML_F_START];
    *last = (int32_t)f[FLASHML_F_END] + 2;
}

double flashml_prefetch_when_score(const double *f) {
#if KIND == 1
    return f[FLASHML_F_START] < 32 ? 1.0 : 0.0;
#else
    (void)f;
    return 0.0;
#endif
}

double flashml_prefetch_when_threshold(void) { return BAD_VALUE == 2 ? __builtin_inf() : 0.5; }
double flashml_target_write_rate_mbps(void) { return BAD_VALUE == 3 ? 0.0 : 35.599; }
double flashml_eviction_age_s(void) { return BAD_VALUE == 4 ? -1.0 : 7200.0; }
