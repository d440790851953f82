/* policy_bind.c: a loaded bundle's partition and readahead functions, looked up in its mapped
 * .so and checked against this runtime's contracts, the manifest and the declared bounds of
 * their values (policy.c calls them for the capabilities it loads; the eviction functions,
 * MAT's, are bound by mat/mat_bind.c). */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "flashml_policy.h"
#include "util/internal.h"
#include "policies/policy_internal.h"
#include "policies/policy_loader.h"

/* The partition functions (capability "partition"), checked against this runtime's
 * partition contract and the manifest. */
int frt_policy_bind_partition(flashrt_policy *p, const char *so, const char *mf,
                              const char *manifest_hash, char *err, size_t errlen) {
    static const char *const NAMES[] = {
        FLASHML_SYM_PARTITION_NUM_FEATURES, FLASHML_SYM_PARTITION_CONTRACT_HASH,
        FLASHML_SYM_PARTITION_MAX_STREAMS, FLASHML_SYM_PARTITION_STEPS, FLASHML_SYM_PARTITION};
    void *s[sizeof NAMES / sizeof NAMES[0]];
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        s[i] = dlsym(p->dl, NAMES[i]);
        if (!s[i])
            return frt_seterr(err, errlen, "%s: refused: %s lists the partition capability but the .so has no symbol %s", so, mf, NAMES[i]);
    }
    int (*nf)(void), (*streams)(void), (*steps)(void);
    const char *(*hash)(void);
    memcpy(&nf, &s[0], sizeof nf);
    memcpy(&hash, &s[1], sizeof hash);
    memcpy(&streams, &s[2], sizeof streams);
    memcpy(&steps, &s[3], sizeof steps);
    memcpy(&p->partition, &s[4], sizeof p->partition);
    if (nf() != FLASHML_PARTITION_NUM_FEATURES || streams() != FLASHML_PARTITION_MAX_STREAMS || steps() != FLASHML_PARTITION_STEPS)
        return frt_seterr(err, errlen, "%s: refused: it reads %d partition features for %d streams and %d steps but the partition contract has %d, %d and %d", so,
                          nf(), streams(), steps(), FLASHML_PARTITION_NUM_FEATURES, FLASHML_PARTITION_MAX_STREAMS, FLASHML_PARTITION_STEPS);
    const char *h = hash();
    if (!h || strcasecmp(h, FLASHML_PARTITION_CONTRACT_HASH) != 0)
        return frt_seterr(err, errlen, "%s: refused: its partition contract hash is %.80s but this runtime's is %s", so, h ? h : "(null)", FLASHML_PARTITION_CONTRACT_HASH);
    if (strcasecmp(h, manifest_hash) != 0)
        return frt_seterr(err, errlen, "%s: refused: its partition contract hash differs from %s", so, mf);
    return 0;
}

/* The readahead functions (capability "readahead"), checked against this runtime's readahead
 * contract and the manifest. */
int frt_policy_bind_readahead(flashrt_policy *p, const char *so, const char *mf,
                              const char *manifest_hash, char *err, size_t errlen) {
    static const char *const NAMES[] = {
        FLASHML_SYM_READAHEAD_NUM_FEATURES, FLASHML_SYM_READAHEAD_CONTRACT_HASH,
        FLASHML_SYM_READAHEAD_WINDOW_MS, FLASHML_SYM_READAHEAD_KIB};
    void *s[sizeof NAMES / sizeof NAMES[0]];
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        s[i] = dlsym(p->dl, NAMES[i]);
        if (!s[i])
            return frt_seterr(err, errlen, "%s: refused: %s lists the readahead capability but the .so has no symbol %s", so, mf, NAMES[i]);
    }
    int (*nf)(void), (*window)(void);
    const char *(*hash)(void);
    memcpy(&nf, &s[0], sizeof nf);
    memcpy(&hash, &s[1], sizeof hash);
    memcpy(&window, &s[2], sizeof window);
    memcpy(&p->readahead.kib, &s[3], sizeof p->readahead.kib);
    if (nf() != FLASHML_READAHEAD_NUM_FEATURES)
        return frt_seterr(err, errlen, "%s: refused: it reads %d readahead features but the readahead contract has %d", so, nf(), FLASHML_READAHEAD_NUM_FEATURES);
    const char *h = hash();
    if (!h || strcasecmp(h, FLASHML_READAHEAD_CONTRACT_HASH) != 0)
        return frt_seterr(err, errlen, "%s: refused: its readahead contract hash is %.80s but this runtime's is %s", so, h ? h : "(null)", FLASHML_READAHEAD_CONTRACT_HASH);
    if (strcasecmp(h, manifest_hash) != 0)
        return frt_seterr(err, errlen, "%s: refused: its readahead contract hash differs from %s", so, mf);
    p->readahead.window_ms = window();
    /* the contract's bounds on a window (features/readahead.py load) */
    if (p->readahead.window_ms < 1 || p->readahead.window_ms > 3600000)
        return frt_seterr(err, errlen, "%s: refused: bad readahead window %d ms (expected 1..3600000)", so, p->readahead.window_ms);
    return 0;
}
