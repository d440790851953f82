/* A TEST policy an attacker would swap in: a valid admission policy (so a loader that maps it
 * would serve with it) whose constructor writes the file named by FLASHRT_EVIL_MARKER, and
 * whose target write rate (66.6) and thresholds tell it apart from test_policy.c's. The
 * loader must never map it under a manifest that vouches for another .so. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "flashml_policy.h"

__attribute__((constructor)) static void mark(void) {
    const char *p = getenv("FLASHRT_EVIL_MARKER");
    if (!p || !*p) return;
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        (void)!write(fd, "evil\n", 5);
        close(fd);
    }
}

int flashml_policy_abi_version(void) { return FLASHML_POLICY_ABI_VERSION; }
int flashml_policy_num_features(void) { return FLASHML_POLICY_NUM_FEATURES; }
const char *flashml_policy_contract_hash(void) { return FLASHML_POLICY_CONTRACT_HASH; }
double flashml_admit_score(const double *f) { (void)f; return 0.0; }
double flashml_admit_threshold(void) { return 0.25; }
void flashml_prefetch_range(const double *f, int32_t *first, int32_t *last) {
    (void)f;
    *first = 0;
    *last = 0;
}
double flashml_prefetch_when_score(const double *f) { (void)f; return 0.0; }
double flashml_prefetch_when_threshold(void) { return 0.5; }
double flashml_target_write_rate_mbps(void) { return 66.6; }
double flashml_eviction_age_s(void) { return 7200.0; }
