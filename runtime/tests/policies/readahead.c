/* A hand-written TEST readahead policy (capability "readahead" of compiler/flashml_policy.h):
 * a long readahead (1024 KiB) for a window whose consecutive pages lie close together
 * (offset_absdiff_mean < 64 pages), a short one (16 KiB) otherwise. Built several ways:
 *   -DHASH="..."  a deliberately wrong readahead contract hash (the loader must refuse it)
 *   -DRA_HUGE     always 2000000000 KiB (the tuner must clamp it to 1 GiB) */
#include "flashml_policy.h"

#ifndef HASH
#define HASH FLASHML_READAHEAD_CONTRACT_HASH
#endif

int flashml_policy_abi_version(void) { return FLASHML_POLICY_ABI_VERSION; }
int flashml_readahead_num_features(void) { return FLASHML_READAHEAD_NUM_FEATURES; }
const char *flashml_readahead_contract_hash(void) { return HASH; }
int flashml_readahead_window_ms(void) { return FLASHML_READAHEAD_WINDOW_MS; }

int flashml_readahead_kib(const double *f) {
#ifdef RA_HUGE
    (void)f;
    return 2000000000;
#else
    return f[FLASHML_RA_F_OFFSET_ABSDIFF_MEAN] < 64.0 ? 1024 : 16;
#endif
}
