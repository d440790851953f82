/* policy_bind.c: a loaded bundle's eviction, partition and readahead functions, looked up in
 * its mapped .so and checked against this runtime's contracts, the manifest and the declared
 * bounds of their values (policy.c calls them for the capabilities it loads). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "flashml_policy.h"
#include "util/internal.h"
#include "policies/policy_internal.h"
#include "policies/policy_loader.h"
#include "policies/eviction/mat_alg.h"
#include "policies/eviction/mat_settings.h"
#include "policies/readahead/readahead.h"

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

/* `*out` = the value of the optional `int name(void)` the .so exports, 0 without it; -1 when
 * the value is neither 0 nor 1. */
/* An optional 0/1 function: its value, or `absent` when the .so lacks it (-1: neither). */
static int optional_flag(void *dl, const char *name, int absent, int *out) {
    *out = absent;
    void *sym = dlsym(dl, name);
    if (!sym) return 0;
    int (*fn)(void);
    memcpy(&fn, &sym, sizeof fn);
    *out = fn();
    return *out == 0 || *out == 1 ? 0 : -1;
}

/* The eviction functions (capability "eviction"), checked against this runtime's eviction
 * contract, the manifest and the knobs' declared bounds (mat_settings.h). */
int frt_policy_bind_eviction(flashrt_policy *p, const char *so, const char *mf,
                             const char *manifest_hash, char *err, size_t errlen) {
    static const char *const NAMES[] = {
        FLASHML_SYM_EVICT_NUM_FEATURES, FLASHML_SYM_EVICT_CONTRACT_HASH, FLASHML_SYM_EVICT_PREDICT,
        FLASHML_SYM_EVICT_PREDICT_BATCH, FRT_MAT_K_ABI, FRT_MAT_MAX_CANDIDATES_ABI,
        FRT_MAT_DELTA_ABI, FRT_MAT_INITIAL_THRESHOLD_ABI, FRT_MAT_MEMORY_WINDOW_ABI};
    void *s[sizeof NAMES / sizeof NAMES[0]];
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        s[i] = dlsym(p->dl, NAMES[i]);
        if (!s[i])
            return frt_seterr(err, errlen, "%s: refused: %s lists the eviction capability but the .so has no symbol %s", so, mf, NAMES[i]);
    }
    int (*nf)(void);
    const char *(*hash)(void);
    double (*k)(void), (*delta)(void), (*t0)(void);
    int (*maxc)(void);
    int64_t (*window)(void);
    memcpy(&nf, &s[0], sizeof nf);
    memcpy(&hash, &s[1], sizeof hash);
    memcpy(&p->evict.predict, &s[2], sizeof p->evict.predict);
    memcpy(&p->evict.predict_batch, &s[3], sizeof p->evict.predict_batch);
    void *hint = dlsym(p->dl, FLASHML_SYM_EVICT_PREFETCH); /* optional: older bundles lack it */
    if (hint) memcpy(&p->evict.prefetch, &hint, sizeof p->evict.prefetch);
    memcpy(&k, &s[4], sizeof k);
    memcpy(&maxc, &s[5], sizeof maxc);
    memcpy(&delta, &s[6], sizeof delta);
    memcpy(&t0, &s[7], sizeof t0);
    memcpy(&window, &s[8], sizeof window);
    if (nf() != FLASHML_EVICT_NUM_FEATURES)
        return frt_seterr(err, errlen, "%s: refused: it reads %d eviction features but the eviction contract has %d", so, nf(), FLASHML_EVICT_NUM_FEATURES);
    const char *h = hash();
    if (!h || strcasecmp(h, FLASHML_EVICT_CONTRACT_HASH) != 0)
        return frt_seterr(err, errlen, "%s: refused: its eviction contract hash is %.80s but this runtime's is %s", so, h ? h : "(null)", FLASHML_EVICT_CONTRACT_HASH);
    if (strcasecmp(h, manifest_hash) != 0)
        return frt_seterr(err, errlen, "%s: refused: its eviction contract hash differs from %s", so, mf);
    p->evict.k = k();
    p->evict.max_candidates = maxc();
    p->evict.delta = delta();
    p->evict.initial_threshold = t0();
    p->evict.memory_window = window();
    /* optional (bundles built before them lack them: the declared legacy values, the paper's
     * sign controller and a prediction per candidate) */
    if (optional_flag(p->dl, FRT_MAT_CONTROLLER_ABI, FRT_MAT_CONTROLLER_LEGACY, &p->evict.controller) != 0)
        return frt_seterr(err, errlen, "%s: refused: bad eviction controller %d (0 sign, 1 mean)", so, p->evict.controller);
    if (optional_flag(p->dl, FRT_MAT_REUSE_PREDICTIONS_ABI, FRT_MAT_REUSE_PREDICTIONS_LEGACY, &p->evict.reuse_predictions) != 0)
        return frt_seterr(err, errlen, "%s: refused: bad %s %d (0 off, 1 on)", so, FRT_MAT_REUSE_PREDICTIONS_ABI, p->evict.reuse_predictions);
    /* every knob within its declared bounds and rules: what the simulator accepts */
    struct frt_mat_params checked;
    char why[256];
    if (frt_mat_params_resolve(&checked, NAN, NAN, NAN, 0, -1, -1, 0, &p->evict, why, sizeof why) != 0)
        return frt_seterr(err, errlen, "%s: refused: bad eviction parameters: %s", so, why);
    return 0;
}
