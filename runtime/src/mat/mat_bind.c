/* mat_bind.c: a loaded bundle's eviction functions (capability "eviction": MAT's model and
 * knobs), looked up in its mapped .so and checked against this runtime's eviction contract,
 * the manifest and the knobs' declared bounds (mat_settings.h); the verified loader
 * (policies/policy.c) calls frt_policy_bind_eviction (policies/policy_loader.h) when it loads
 * a bundle for eviction. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "flashml_policy.h"
#include "util/internal.h"
#include "policies/policy_internal.h"
#include "policies/policy_loader.h"
#include "mat/mat_alg.h"
#include "mat/mat_settings.h"

const char *const frt_policy_eviction_functions[] = {
    FLASHML_SYM_EVICT_NUM_FEATURES, FLASHML_SYM_EVICT_CONTRACT_HASH, FLASHML_SYM_EVICT_PREDICT,
    FLASHML_SYM_EVICT_PREDICT_BATCH, FRT_MAT_K_ABI, FRT_MAT_MAX_CANDIDATES_ABI,
    FRT_MAT_DELTA_ABI, FRT_MAT_INITIAL_THRESHOLD_ABI, FRT_MAT_MEMORY_WINDOW_ABI, NULL};
#define N_EVICTION_FUNCTIONS (sizeof frt_policy_eviction_functions / sizeof frt_policy_eviction_functions[0] - 1)

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
    const char *const *NAMES = frt_policy_eviction_functions;
    void *s[N_EVICTION_FUNCTIONS];
    for (size_t i = 0; i < N_EVICTION_FUNCTIONS; i++) {
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
