/* test_mat.c: C unit tests of the MAT object cache (src/mat/mat.c), LRB's features
 * (src/mat/lrb_features.c) and the object-trace reader (src/trace/objects.c), under ASan+UBSan
 * (`make test`) and valgrind (`make valgrind`). Usage: test_mat POLICY_BUILD_DIR. The
 * decisions against the simulator's on real bundles: tests/runtime/test_runtime_mat.py. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "mat/lrb_features.h"
#include "mat/mat_alg.h"
#include "mat/mat_settings.h"

#include "check.h"


/* ---- features: sim/src/mat/lrb_features.rs's hand examples ---- */

static void test_features(void) {
    char err[FLASHRT_ERR_LEN];
    struct frt_lrb s;
    double f[FRT_EVICT_NF];
    CHECK(frt_lrb_init(&s, 1000, err, sizeof err) != 0 && strstr(err, "1024"), "%s", err);
    /* accesses at 0, 5, 7 (sizes 100, 1, 1); features at 10 */
    CHECK(frt_lrb_init(&s, FLASHML_EVICT_CONTRACT_MEMORY_WINDOW, err, sizeof err) == 0, "%s", err);
    CHECK(frt_lrb_add(&s) == 0, "add");
    frt_lrb_access(&s, 0, 0, 100);
    frt_lrb_access(&s, 0, 5, 1);
    frt_lrb_access(&s, 0, 7, 1);
    frt_lrb_features(&s, 0, 10, f);
    CHECK(f[FLASHML_EVICT_F_AGE] == 3.0, "%g", f[0]);
    CHECK(f[FLASHML_EVICT_F_DELTA_1] == 2.0 && f[FLASHML_EVICT_F_DELTA_2] == 5.0, "%g %g", f[1], f[2]);
    CHECK(isnan(f[FLASHML_EVICT_F_DELTA_3]) && isnan(f[FLASHML_EVICT_F_DELTA_31]), "missing distances are NaN");
    CHECK(f[FLASHML_EVICT_F_SIZE] == 100.0 && f[FLASHML_EVICT_F_N_WITHIN] == 2.0, "%g %g", f[32], f[33]);
    for (int i = 0; i < FRT_EVICT_NEDC; i++) CHECK(f[FLASHML_EVICT_F_EDC_0 + i] == 3.0, "edc %d %g", i, f[34 + i]);
    frt_lrb_free(&s);
    /* window 4096, 40 accesses 1024 apart: the ring keeps 31, n_within 3, edc_0 halves once
     * per access and twice for the age; a gap of the window forgets the history */
    const uint64_t w = 4096;
    CHECK(frt_lrb_init(&s, w, err, sizeof err) == 0 && frt_lrb_add(&s) == 0, "%s", err);
    uint64_t t = 0;
    for (int i = 0; i < 40; i++, t += 1024) frt_lrb_access(&s, 0, t, 8);
    frt_lrb_features(&s, 0, t - 1024 + 2048, f);
    CHECK(f[FLASHML_EVICT_F_AGE] == 2048.0, "%g", f[0]);
    for (int j = 0; j < FRT_EVICT_MAXD; j++) CHECK(f[FLASHML_EVICT_F_DELTA_1 + j] == 1024.0, "delta_%d %g", j + 1, f[1 + j]);
    CHECK(f[FLASHML_EVICT_F_N_WITHIN] == 3.0, "%g", f[33]);
    double e = 1.0;
    for (int i = 1; i < 40; i++) e = e * 0.5 + 1.0;
    CHECK(f[FLASHML_EVICT_F_EDC_0] == e * 0.25, "%.17g vs %.17g", f[34], e * 0.25);
    frt_lrb_access(&s, 0, t - 1024 + w, 9);
    frt_lrb_features(&s, 0, t - 1024 + w + 1, f);
    CHECK(f[FLASHML_EVICT_F_SIZE] == 9.0 && isnan(f[FLASHML_EVICT_F_DELTA_1]), "forgotten: %g %g", f[32], f[1]);
    CHECK(f[FLASHML_EVICT_F_N_WITHIN] == 0.0 && f[FLASHML_EVICT_F_EDC_0] == 1.0, "%g %g", f[33], f[34]);
    frt_lrb_free(&s);
}

/* ---- the object trace reader ---- */

static void test_objects(void) {
    char p[400], err[FLASHRT_ERR_LEN];
    struct flashrt_objects o;
    snprintf(p, sizeof p, "%s/o.csv", TMP);
    write_text(p, "size,extra,key,time\r\n10,x,7,0.5\r\n20,y,18446744073709551615,0.5\n\n\n");
    CHECK(flashrt_objects_read(p, "objects-csv", &o, err, sizeof err) == 0, "%s", err);
    CHECK(o.n == 2 && o.key[0] == 7 && o.size[0] == 10 && o.key[1] == UINT64_MAX && o.size[1] == 20, "n %zu", o.n);
    flashrt_objects_free(&o);
    struct { const char *text, *format, *want; } bad[] = {
        {"time,key,size\n0,1,10\n1,2,x\n", "csv", ":3: field 'size': expected an integer"},
        {"time,key,size\n0,1,10\n1,2,0\n", "csv", ":3: field 'size': size must be >= 1"},
        {"time,key,size\n0,-1,10\n", "csv", ":2: field 'key': negative key"},
        {"time,key,size\n0,18446744073709551616,10\n", "csv", ":2: field 'key': key 18446744073709551616 does not fit"},
        {"time,key,size\n2,1,10\n1,2,10\n", "csv", ":3: field 'time': time goes backwards"},
        {"time,key,size\nnan,1,10\n", "csv", ":2: field 'time': time must be a finite number"},
        {"time,key,size\n0,1\n", "csv", ":2: field 'size': expected 3 fields"},
        {"time,key,size\n0,1,10\n\n1,2,3\n", "csv", ":3: field 'time': blank line"},
        {"time,key\n0,1\n", "csv", ":1: field 'size': missing column"},
        {"time,key,key,size\n", "csv", ":1: field 'key': column named twice"},
        {"time,key,size\n", "csv", ":2: no requests"},
        {"", "csv", ":1: empty file"},
        {"version,time,op,size,lbn\n1,0,r,5,x\n", "cloudphysics", ":2: field 'lbn': expected an integer"},
        {"time,key,size\n0,1,1\n", "parquet", "field 'format'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(p, bad[i].text);
        err[0] = 0;
        int r = flashrt_objects_read(p, bad[i].format, &o, err, sizeof err);
        CHECK(r != 0 && strstr(err, p) && strstr(err, bad[i].want), "case %zu: %s (want %s)", i, err, bad[i].want);
        CHECK(o.n == 0 && o.key == NULL, "case %zu leaves nothing", i);
    }
    write_text(p, "version,time,op,size,lbn\n1,0,r,5,42\n");
    CHECK(flashrt_objects_read(p, "cloudphysics", &o, err, sizeof err) == 0 && o.n == 1 && o.key[0] == 42 && o.size[0] == 5, "%s", err);
    flashrt_objects_free(&o);
}

/* ---- the cache ---- */

/* A cache with config `c` over policy `p`; exits on an error (the set-up of a test). */
static flashrt_mat *open_or_exit(const struct flashrt_mat_config *c, flashrt_policy *p) {
    char err[FLASHRT_ERR_LEN];
    flashrt_mat *m = flashrt_mat_open(c, p, err, sizeof err);
    if (!m) { fprintf(stderr, "open: %s\n", err); exit(2); }
    return m;
}

static flashrt_mat *open_cache(uint64_t cap, enum flashrt_mat_unit unit, const char *file, flashrt_policy *p) {
    struct flashrt_mat_config c;
    flashrt_mat_config_default(&c);
    c.capacity = cap;
    c.unit = unit;
    c.cache_path = file;
    c.direct = FLASHRT_DIRECT_OFF;
    return open_or_exit(&c, p);
}

static void get(flashrt_mat *m, uint64_t key, uint64_t size, struct flashrt_mat_result *r) {
    if (flashrt_mat_get(m, key, size, r) != 0) { fprintf(stderr, "get: %s\n", flashrt_mat_error(m)); exit(2); }
}

/* No model: exactly LRU (a b a c b a at 2 objects: c evicts b, b evicts a, a evicts c), bytes
 * verified. */
static void test_lru(void) {
    char file[400];
    snprintf(file, sizeof file, "%s/lru.cache", TMP);
    flashrt_mat *m = open_cache(2, FLASHRT_MAT_OBJECTS, file, NULL);
    struct flashrt_mat_result r;
    uint64_t keys[] = {1, 2, 1, 3, 2, 1};
    int hit[] = {0, 0, 1, 0, 0, 0};
    uint64_t victim[] = {0, 0, 0, 2, 1, 3};
    for (int i = 0; i < 6; i++) {
        get(m, keys[i], 5000 + keys[i], &r);
        CHECK(r.hit == hit[i], "request %d hit %d", i, r.hit);
        CHECK(r.nvictims == (victim[i] != 0) && (!r.nvictims || r.victims[0].key == victim[i]), "request %d", i);
        CHECK(r.len == 5000 + keys[i] && flashrt_verify(keys[i], 0, r.data, r.len) < 0, "request %d bytes", i);
    }
    struct flashrt_mat_metrics mt;
    flashrt_mat_metrics(m, &mt);
    CHECK(mt.requests == 6 && mt.hits == 1 && mt.evictions == 3 && mt.predictions == 0, "hits %llu evictions %llu",
          (unsigned long long)mt.hits, (unsigned long long)mt.evictions);
    CHECK(isnan(mt.final_threshold) && mt.integrity_errors == 0 && mt.verified_bytes == 5001, "T %g", mt.final_threshold);
    /* two objects of 2 pages each at most: the freed pages are reused */
    CHECK(mt.file_bytes <= 4 * 4096, "file %llu", (unsigned long long)mt.file_bytes);
    flashrt_mat_close(m);
}

static void test_integrity(void) {
    char file[400];
    snprintf(file, sizeof file, "%s/bad.cache", TMP);
    flashrt_mat *m = open_cache(1 << 20, FLASHRT_MAT_BYTES, file, NULL);
    struct flashrt_mat_result r;
    get(m, 77, 10000, &r);
    /* the bytes really are in the file: damage them behind the cache's back */
    FILE *f = fopen(file, "r+b");
    CHECK(f != NULL, "open %s", file);
    if (f) { fseek(f, 4100, SEEK_SET); fputc(0x5a ^ 0xff, f); fputc(0x11, f); fclose(f); }
    get(m, 77, 10000, &r);
    CHECK(r.hit && flashrt_verify(77, 0, r.data, r.len) == 4100, "the damage is read back at %lld", (long long)flashrt_verify(77, 0, r.data, r.len));
    struct flashrt_mat_metrics mt;
    flashrt_mat_metrics(m, &mt);
    CHECK(mt.integrity_errors == 1 && mt.bytes_written == 10000 && mt.bytes_read == 10000, "errors %llu", (unsigned long long)mt.integrity_errors);
    /* an object larger than the cache is served uncached */
    get(m, 78, 2 << 20, &r);
    CHECK(r.bypassed && !r.hit && r.nvictims == 0 && flashrt_verify(78, 0, r.data, r.len) < 0, "bypassed");
    flashrt_mat_close(m);
}

/* A bundle TMP/name of the eviction .so `src` (its manifest written here), loaded for
 * eviction: NULL with the loader's message in err when refused. */
static flashrt_policy *evict_bundle(const char *name, const char *src, char *err, size_t errlen) {
    char dir[400], so[600], man[1200], hex[65];
    snprintf(dir, sizeof dir, "%s/%s", TMP, name);
    snprintf(so, sizeof so, "%s/policy.so", dir);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s'", dir, src, so);
    if (system(cmd) != 0) { fprintf(stderr, "%s failed\n", cmd); exit(2); }
    if (frt_sha256_file(so, hex, err, errlen) != 0) { fprintf(stderr, "%s\n", err); exit(2); }
    snprintf(man, sizeof man, MANIFEST_HEAD "\"abi_version\": %d, \"sha256\": \"%s\", \"evict_contract_hash\": \"%s\", \"capabilities\": [\"eviction\"]}\n", file_size(so),
             FLASHML_POLICY_ABI_VERSION, hex, FLASHML_EVICT_CONTRACT_HASH);
    snprintf(cmd, sizeof cmd, "%s/manifest.json", dir);
    write_text(cmd, man);
    return flashrt_policy_load_eviction(dir, err, errlen);
}

static flashrt_policy *evict_policy(const char *poldir) {
    char src[600], err[FLASHRT_ERR_LEN];
    snprintf(src, sizeof src, "%s/evict.so", poldir);
    flashrt_policy *p = evict_bundle("evict-bundle", src, err, sizeof err);
    if (!p) { fprintf(stderr, "load: %s\n", err); exit(2); }
    return p;
}

static int ncand;
static void count_candidates(void *ctx, const struct flashrt_mat_candidate *c) {
    (void)ctx;
    (void)c;
    ncand++;
}

/* sim/src/mat/chooser.rs threshold_controller_by_hand, through the cache: L = 3, k = 2, T0 = 10,
 * delta = 0.5 (the test policy's exports); the predicted distance is the size. */
static void test_controller(const char *poldir) {
    flashrt_policy *p = evict_policy(poldir);
    struct flashrt_mat_config c;
    flashrt_mat_config_default(&c);
    c.capacity = 4;
    c.unit = FLASHRT_MAT_OBJECTS;
    c.on_candidate = count_candidates;
    char err[FLASHRT_ERR_LEN];
    flashrt_mat *m = flashrt_mat_open(&c, p, err, sizeof err);
    CHECK(m != NULL, "%s", err);
    if (!m) { flashrt_policy_free(p); return; }
    struct flashrt_mat_result r;
    /* t = 0..3: objects 0..3 with d = 6, 3, 10, 100 */
    uint64_t d[] = {6, 3, 10, 100};
    for (int i = 0; i < 4; i++) get(m, (uint64_t)i, d[i], &r);
    /* t = 4: ages 4, 3, 2, 1; TTAs 2, 0, 8 < 10: exhausted, the largest (object 2) goes */
    get(m, 4, 1, &r);
    CHECK(r.nvictims == 1 && r.victims[0].key == 2 && r.victims[0].tries == 4 && r.victims[0].threshold == 5.0,
          "victim %llu tries %u T %g", (unsigned long long)r.victims[0].key, r.victims[0].tries, r.victims[0].threshold);
    /* t = 5: tail object 3, TTA 96 >= 5 at the first try: T *= 1.5 */
    get(m, 5, 1, &r);
    CHECK(r.nvictims == 1 && r.victims[0].key == 3 && r.victims[0].tries == 1 && r.victims[0].threshold == 7.5, "victim %llu",
          (unsigned long long)r.victims[0].key);
    /* t = 6: objects 0 (TTA 0), 1 (2), 4 (1): exhausted, object 1 goes */
    get(m, 6, 1, &r);
    CHECK(r.nvictims == 1 && r.victims[0].key == 1 && r.victims[0].tries == 4 && r.victims[0].threshold == 3.75, "victim %llu",
          (unsigned long long)r.victims[0].key);
    struct flashrt_mat_metrics mt;
    flashrt_mat_metrics(m, &mt);
    CHECK(mt.predictions == 7 && ncand == 7 && mt.reinsertions == 4 && mt.evictions == 3, "predictions %llu reinsertions %llu",
          (unsigned long long)mt.predictions, (unsigned long long)mt.reinsertions);
    CHECK(mt.k == 2.0 && mt.max_candidates == 3 && mt.delta == 0.5 && mt.memory_window == 4096, "the bundle's knobs");
    /* the test policy has no flashml_evict_controller (a bundle built before it): sign */
    CHECK(mt.controller == 0, "controller %d", mt.controller);
    CHECK(mt.decision_ns_p50 > 0 && mt.decision_ns_p50 <= mt.decision_ns_p99, "timing %g %g", mt.decision_ns_p50, mt.decision_ns_p99);
    double f[FLASHML_EVICT_NUM_FEATURES];
    CHECK(flashrt_mat_features(m, 0, f) == 0 && f[FLASHML_EVICT_F_AGE] == 7.0 && f[FLASHML_EVICT_F_SIZE] == 6.0, "age %g", f[0]);
    CHECK(flashrt_mat_features(m, 99, f) != 0, "an unseen key has no features");
    flashrt_mat_close(m);
    /* the caller's knobs win; a bad one is refused */
    c.k = 0.0;
    CHECK(flashrt_mat_open(&c, p, err, sizeof err) == NULL && strstr(err, "k must be"), "%s", err);
    c.k = NAN;
    c.capacity = 0;
    CHECK(flashrt_mat_open(&c, p, err, sizeof err) == NULL && strstr(err, "capacity"), "%s", err);
    flashrt_policy_free(p);
}

/* sim/src/mat/params.rs mean_controller_steps_by_hand, through the cache: test_controller's requests
 * with k = 1.5 and delta = 0.25 given (L = 3, T0 = 10 the policy's). The mean controller:
 * T *= 1 + delta (k - p), p = the predictions made, L (not L + 1) on exhaustion; the sign
 * controller on the same requests for contrast. */
static void test_mean_controller(const char *poldir) {
    flashrt_policy *p = evict_policy(poldir);
    struct flashrt_mat_config c;
    flashrt_mat_config_default(&c);
    CHECK(c.controller == -1, "the default takes the policy's: %d", c.controller);
    c.capacity = 4;
    c.unit = FLASHRT_MAT_OBJECTS;
    c.k = 1.5;
    c.delta = 0.25;
    char err[FLASHRT_ERR_LEN];
    /* the thresholds after t = 4 (exhausted), 5 (first try), 6 (exhausted), as test_controller */
    const double want[2][3] = {
        {10.0 * 0.75, 10.0 * 0.75 * 1.25, 10.0 * 0.75 * 1.25 * 0.75},       /* sign: r = 4, 1, 4 */
        {10.0 * 0.625, 10.0 * 0.625 * 1.125, 10.0 * 0.625 * 1.125 * 0.625}, /* mean: p = 3, 1, 3 */
    };
    for (int ctl = 0; ctl <= 1; ctl++) {
        c.controller = ctl;
        flashrt_mat *m = flashrt_mat_open(&c, p, err, sizeof err);
        CHECK(m != NULL, "%s", err);
        if (!m) continue;
        struct flashrt_mat_result r;
        uint64_t d[] = {6, 3, 10, 100};
        for (int i = 0; i < 4; i++) get(m, (uint64_t)i, d[i], &r);
        const uint64_t victim[] = {2, 3, 1};
        const uint32_t tries[] = {4, 1, 4};
        for (int i = 0; i < 3; i++) {
            get(m, (uint64_t)(4 + i), 1, &r);
            CHECK(r.nvictims == 1 && r.victims[0].key == victim[i] && r.victims[0].tries == tries[i] && r.victims[0].threshold == want[ctl][i],
                  "controller %d, t = %d: victim %llu tries %u T %.17g (want %.17g)", ctl, 4 + i, (unsigned long long)r.victims[0].key,
                  r.victims[0].tries, r.victims[0].threshold, want[ctl][i]);
        }
        struct flashrt_mat_metrics mt;
        flashrt_mat_metrics(m, &mt);
        CHECK(mt.controller == ctl && mt.k == 1.5 && mt.delta == 0.25 && mt.max_candidates == 3, "controller %d: metrics %d", ctl,
              mt.controller);
        CHECK(mt.final_threshold == want[ctl][2] && mt.predictions == 7, "controller %d: T %g", ctl, mt.final_threshold);
        flashrt_mat_close(m);
    }
    /* found at the second try (p = 2 > k): T *= 1 + 0.25 (1.5 - 2) = 0.875 */
    c.capacity = 2;
    c.controller = 1;
    flashrt_mat *m = flashrt_mat_open(&c, p, err, sizeof err);
    CHECK(m != NULL, "%s", err);
    if (m) {
        struct flashrt_mat_result r;
        get(m, 0, 1, &r);  /* d = 1: TTA 1 at t = 2 */
        get(m, 1, 20, &r); /* d = 20: TTA 19 at t = 2 */
        get(m, 2, 1, &r);
        CHECK(r.nvictims == 1 && r.victims[0].key == 1 && r.victims[0].tries == 2 && r.victims[0].threshold == 8.75,
              "victim %llu tries %u T %.17g", (unsigned long long)r.victims[0].key, r.victims[0].tries, r.victims[0].threshold);
        flashrt_mat_close(m);
    }
    /* a step that could turn T negative is refused (delta (L - k) = 0.5 * 8 >= 1), only for
     * the mean controller; an unknown controller is refused */
    c.capacity = 4;
    c.k = NAN;
    c.delta = NAN;
    c.max_candidates = 10;
    err[0] = 0;
    CHECK(flashrt_mat_open(&c, p, err, sizeof err) == NULL && strstr(err, "the mean controller needs delta * (max_candidates - k) < 1") &&
              strstr(err, "got delta 0.5 and max_candidates - k 8"), "%s", err);
    c.controller = 0;
    m = flashrt_mat_open(&c, p, err, sizeof err);
    CHECK(m != NULL, "sign with the same knobs: %s", err);
    flashrt_mat_close(m);
    c.controller = 1;
    c.delta = 0.124; /* 0.124 * 8 < 1 */
    m = flashrt_mat_open(&c, p, err, sizeof err);
    CHECK(m != NULL, "mean, delta (L - k) = 0.992: %s", err);
    flashrt_mat_close(m);
    c.delta = 0.125; /* = 1: refused */
    CHECK(flashrt_mat_open(&c, p, err, sizeof err) == NULL && strstr(err, "mean controller"), "%s", err);
    c.delta = NAN;
    c.max_candidates = 0;
    c.controller = 2;
    err[0] = 0;
    CHECK(flashrt_mat_open(&c, p, err, sizeof err) == NULL && strstr(err, "controller must be 0 (sign) or 1 (mean), got 2"), "%s", err);
    /* without a policy the controller never runs (no predictions), but it is still checked */
    c.controller = 1;
    m = flashrt_mat_open(&c, NULL, err, sizeof err);
    CHECK(m != NULL, "%s", err);
    if (m) {
        struct flashrt_mat_metrics mt;
        flashrt_mat_metrics(m, &mt);
        CHECK(mt.controller == 1 && mt.max_candidates == 10 && mt.k == 2.0, "no policy: controller %d", mt.controller);
        flashrt_mat_close(m);
    }
    flashrt_policy_free(p);
}

/* ---- reused predictions (sim/src/mat/params.rs MatParams::reuse_predictions, slots.rs Slots::kept) ---- */

/* The candidates examined, as on_candidate reports them. */
struct cand_log {
    size_t n;
    struct { uint64_t time, key, last; double prediction, tta, threshold; } c[64];
};
static void log_candidate(void *ctx, const struct flashrt_mat_candidate *c) {
    struct cand_log *l = ctx;
    if (l->n < sizeof l->c / sizeof l->c[0]) {
        l->c[l->n].time = c->time;
        l->c[l->n].key = c->key;
        l->c[l->n].last = c->last;
        l->c[l->n].prediction = c->prediction;
        l->c[l->n].tta = c->tta;
        l->c[l->n].threshold = c->threshold;
    }
    l->n++;
}

static flashrt_mat *open_reuse(flashrt_policy *p, uint64_t cap, int reuse, struct cand_log *log) {
    struct flashrt_mat_config c;
    flashrt_mat_config_default(&c);
    c.capacity = cap;
    c.unit = FLASHRT_MAT_OBJECTS;
    c.reuse_predictions = reuse;
    if (log) {
        memset(log, 0, sizeof *log);
        c.on_candidate = log_candidate;
        c.ctx = log;
    }
    return open_or_exit(&c, p);
}

/* (a) test_controller's requests with reuse on (L = 3, k = 2, T0 = 10, delta = 0.5; the
 * prediction is the size): at t = 6 objects 0 and 1, kept at t = 4 and not accessed since,
 * are judged by their kept predictions (no new prediction, `reused` +1 each) with TTA =
 * |d - their age at t = 6|; object 4 is predicted. The predictor reads only the size, so the
 * victims and thresholds are those of a prediction per candidate. With and without the
 * candidates traced (kept ones then skip their features), the same. */
static void test_reuse_kept(const char *poldir) {
    flashrt_policy *p = evict_policy(poldir);
    static struct cand_log log;
    for (int traced = 1; traced >= 0; traced--) {
        flashrt_mat *m = open_reuse(p, 4, 1, traced ? &log : NULL);
        struct flashrt_mat_result r;
        uint64_t d[] = {6, 3, 10, 100};
        for (int i = 0; i < 4; i++) get(m, (uint64_t)i, d[i], &r);
        const uint64_t victim[] = {2, 3, 1}, preds[] = {3, 4, 5}, reused[] = {0, 0, 2};
        const uint32_t tries[] = {4, 1, 4};
        const double thr[] = {5.0, 7.5, 3.75};
        struct flashrt_mat_metrics mt;
        for (int i = 0; i < 3; i++) {
            get(m, (uint64_t)(4 + i), 1, &r);
            flashrt_mat_metrics(m, &mt);
            CHECK(r.nvictims == 1 && r.victims[0].key == victim[i] && r.victims[0].tries == tries[i] && r.victims[0].threshold == thr[i],
                  "traced %d, t = %d: victim %llu tries %u T %g", traced, 4 + i, (unsigned long long)r.victims[0].key, r.victims[0].tries,
                  r.victims[0].threshold);
            CHECK(mt.predictions == preds[i] && mt.reused == reused[i], "traced %d, t = %d: predictions %llu reused %llu", traced, 4 + i,
                  (unsigned long long)mt.predictions, (unsigned long long)mt.reused);
        }
        CHECK(mt.reuse_predictions == 1 && mt.reinsertions == 4 && mt.evictions == 3, "reuse %d reinsertions %llu", mt.reuse_predictions,
              (unsigned long long)mt.reinsertions);
        CHECK(mt.candidates_per_eviction == 7.0 / 3.0 && mt.predictions_per_eviction == 5.0 / 3.0, "candidates/eviction %g",
              mt.candidates_per_eviction);
        flashrt_mat_close(m);
    }
    /* the trace: every candidate (7), kept ones with their kept prediction and the age now */
    CHECK(log.n == 7, "%zu candidates traced", log.n);
    if (log.n == 7) {
        const uint64_t key[] = {0, 1, 2, 3, 0, 1, 4}, time[] = {4, 4, 4, 5, 6, 6, 6};
        for (int i = 0; i < 7; i++) {
            CHECK(log.c[i].key == key[i] && log.c[i].time == time[i] && log.c[i].last == key[i], "candidate %d: key %llu at %llu", i,
                  (unsigned long long)log.c[i].key, (unsigned long long)log.c[i].time);
            CHECK(log.c[i].tta == fabs(expm1(log.c[i].prediction) - (double)(log.c[i].time - log.c[i].last)), "candidate %d: tta %.17g", i,
                  log.c[i].tta);
        }
        /* objects 0 and 1 at t = 6: the t = 4 predictions, TTA with the new age (6, 5) */
        CHECK(log.c[4].prediction == log.c[0].prediction && log.c[5].prediction == log.c[1].prediction, "kept predictions");
        CHECK(fabs(log.c[0].tta - 2.0) < 1e-9 && fabs(log.c[4].tta - 0.0) < 1e-9, "object 0: tta %g at age 4, %g at age 6", log.c[0].tta,
              log.c[4].tta);
        CHECK(fabs(log.c[1].tta - 0.0) < 1e-9 && fabs(log.c[5].tta - 2.0) < 1e-9, "object 1: tta %g at age 3, %g at age 5", log.c[1].tta,
              log.c[5].tta);
        CHECK(log.c[4].threshold == 7.5 && log.c[6].threshold == 7.5, "T during t = 6: %g", log.c[4].threshold);
    }
    /* reuse off: the same victims with a prediction per candidate */
    flashrt_mat *m = open_reuse(p, 4, 0, NULL);
    struct flashrt_mat_result r;
    uint64_t d[] = {6, 3, 10, 100};
    for (int i = 0; i < 7; i++) get(m, (uint64_t)i, i < 4 ? d[i] : 1, &r);
    struct flashrt_mat_metrics mt;
    flashrt_mat_metrics(m, &mt);
    CHECK(mt.reuse_predictions == 0 && mt.predictions == 7 && mt.reused == 0 && mt.final_threshold == 3.75, "off: predictions %llu reused %llu",
          (unsigned long long)mt.predictions, (unsigned long long)mt.reused);
    CHECK(mt.candidates_per_eviction == mt.predictions_per_eviction, "off: %g vs %g", mt.candidates_per_eviction, mt.predictions_per_eviction);
    flashrt_mat_close(m);
    flashrt_policy_free(p);
}

/* (b) A kept prediction is not used after the object's access: capacity 3, A (d 9), B (3),
 * C (100) at t = 0..2. t = 3 (D): A (TTA 6) and B (1) kept with their predictions, C (99 >= 10)
 * goes at r = 3, T = 5. t = 4: A is accessed. t = 5 (E): B is judged by its kept prediction
 * (TTA |3 - 4| = 1), D predicted (1), A predicted again (last 4: TTA |9 - 1| = 8 >= 5) and
 * evicted at r = 3, T = 2.5. */
static void test_reuse_after_access(const char *poldir) {
    flashrt_policy *p = evict_policy(poldir);
    static struct cand_log log;
    flashrt_mat *m = open_reuse(p, 3, 1, &log);
    struct flashrt_mat_result r;
    const uint64_t A = 10, B = 11, C = 12, D = 13, E = 14;
    get(m, A, 9, &r);
    get(m, B, 3, &r);
    get(m, C, 100, &r);
    get(m, D, 1, &r);
    CHECK(r.nvictims == 1 && r.victims[0].key == C && r.victims[0].tries == 3 && r.victims[0].threshold == 5.0, "t = 3: victim %llu",
          (unsigned long long)r.victims[0].key);
    get(m, A, 9, &r);
    CHECK(r.hit, "t = 4: A hits");
    get(m, E, 1, &r);
    CHECK(r.nvictims == 1 && r.victims[0].key == A && r.victims[0].tries == 3 && r.victims[0].threshold == 2.5, "t = 5: victim %llu tries %u T %g",
          (unsigned long long)r.victims[0].key, r.victims[0].tries, r.victims[0].threshold);
    struct flashrt_mat_metrics mt;
    flashrt_mat_metrics(m, &mt);
    CHECK(mt.predictions == 5 && mt.reused == 1 && mt.reinsertions == 4, "predictions %llu reused %llu reinsertions %llu",
          (unsigned long long)mt.predictions, (unsigned long long)mt.reused, (unsigned long long)mt.reinsertions);
    CHECK(log.n == 6, "%zu candidates", log.n);
    if (log.n == 6) {
        const uint64_t key[] = {A, B, C, B, D, A}, last[] = {0, 1, 2, 1, 3, 4};
        for (int i = 0; i < 6; i++)
            CHECK(log.c[i].key == key[i] && log.c[i].last == last[i], "candidate %d: key %llu last %llu", i, (unsigned long long)log.c[i].key,
                  (unsigned long long)log.c[i].last);
        CHECK(log.c[3].prediction == log.c[1].prediction && fabs(log.c[3].tta - 1.0) < 1e-9, "B kept: tta %g", log.c[3].tta);
        CHECK(fabs(log.c[5].tta - 8.0) < 1e-9 && fabs(log.c[0].tta - 6.0) < 1e-9, "A: tta %g then %g", log.c[0].tta, log.c[5].tta);
    }
    /* t = 6, 7: A again (a miss: a new slot) and F: B and D (kept at t = 5, not accessed
     * since) are judged by their kept predictions again; every candidate is counted once,
     * predicted or reused */
    get(m, A, 9, &r);
    get(m, 15, 1, &r);
    flashrt_mat_metrics(m, &mt);
    CHECK(mt.reused >= 2 && mt.predictions + mt.reused == (uint64_t)log.n, "predictions %llu + reused %llu vs %zu candidates",
          (unsigned long long)mt.predictions, (unsigned long long)mt.reused, log.n);
    flashrt_mat_close(m);
    flashrt_policy_free(p);
}

/* With a prediction that depends on the object only (here its fixed size), a kept prediction
 * is what a new one would be: reuse on a skewed trace gives the same victims (key, try, T)
 * and hits with fewer predictions, predictions(off) = predictions(on) + reused(on) (sim:
 * reused_predictions_are_exact_for_a_prediction_of_the_last_access). */
static void test_reuse_exact(const char *poldir) {
    flashrt_policy *p = evict_policy(poldir);
    struct flashrt_mat_config c;
    flashrt_mat_config_default(&c);
    c.capacity = 30;
    c.unit = FLASHRT_MAT_OBJECTS;
    c.k = 3.0;
    c.delta = 1e-3;
    c.max_candidates = 10;
    c.initial_threshold = 0.0;
    c.time_decisions = 0;
    char err[FLASHRT_ERR_LEN];
    flashrt_mat *m[2];
    for (int i = 0; i < 2; i++) {
        c.reuse_predictions = i;
        m[i] = flashrt_mat_open(&c, p, err, sizeof err);
        if (!m[i]) { fprintf(stderr, "open: %s\n", err); exit(2); }
    }
    uint64_t x = 88172645463325252ull;
    int same = 1;
    for (int t = 0; t < 20000 && same; t++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint64_t a = x % 300;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint64_t b = x % 300, key = a < b ? a : b, size = 1 + key * 7919 % 120;
        struct flashrt_mat_result r[2];
        for (int i = 0; i < 2; i++) get(m[i], key, size, &r[i]);
        same = r[0].hit == r[1].hit && r[0].nvictims == r[1].nvictims;
        for (size_t j = 0; same && j < r[0].nvictims; j++)
            same = r[0].victims[j].key == r[1].victims[j].key && r[0].victims[j].tries == r[1].victims[j].tries &&
                   r[0].victims[j].threshold == r[1].victims[j].threshold;
        CHECK(same, "t = %d: the decisions differ", t);
    }
    struct flashrt_mat_metrics off, on;
    flashrt_mat_metrics(m[0], &off);
    flashrt_mat_metrics(m[1], &on);
    CHECK(off.hits == on.hits && off.evictions == on.evictions && off.final_threshold == on.final_threshold, "hits %llu vs %llu",
          (unsigned long long)off.hits, (unsigned long long)on.hits);
    CHECK(off.reused == 0 && on.reused > on.evictions / 2 && off.predictions == on.predictions + on.reused,
          "off %llu predictions; on %llu + %llu reused, %llu evictions", (unsigned long long)off.predictions,
          (unsigned long long)on.predictions, (unsigned long long)on.reused, (unsigned long long)on.evictions);
    CHECK(off.candidates_per_eviction == on.candidates_per_eviction && on.predictions_per_eviction < on.candidates_per_eviction,
          "candidates/eviction %g vs %g", off.candidates_per_eviction, on.candidates_per_eviction);
    for (int i = 0; i < 2; i++) flashrt_mat_close(m[i]);
    flashrt_policy_free(p);
}

/* An eviction .so like tests/policies/evict_policy.c exporting flashml_evict_reuse_predictions
 * = `reuse`, compiled here (the test policies have none): its path in `so`. */
static void reuse_policy_so(int reuse, char *so, size_t n) {
    char src[400], text[4096], cmd[1400];
    snprintf(src, sizeof src, "%s/reuse%d.c", TMP, reuse);
    snprintf(so, n, "%s/reuse%d.so", TMP, reuse);
    snprintf(text, sizeof text,
             "#include <math.h>\n#include <stdint.h>\n"
             "int flashml_policy_abi_version(void) { return %d; }\n"
             "int flashml_evict_num_features(void) { return %d; }\n"
             "const char *flashml_evict_contract_hash(void) { return \"%s\"; }\n"
             "double flashml_evict_predict(const double *f) { return log1p(f[%d]); }\n"
             "void flashml_evict_predict_batch(const double *f, int n, double *out) {\n"
             "    for (int i = 0; i < n; i++) out[i] = flashml_evict_predict(f + (long)i * %d);\n}\n"
             "double flashml_evict_k(void) { return 2.0; }\n"
             "int flashml_evict_max_candidates(void) { return 3; }\n"
             "double flashml_evict_delta(void) { return 0.5; }\n"
             "double flashml_evict_initial_threshold(void) { return 10.0; }\n"
             "int64_t flashml_evict_memory_window(void) { return 4096; }\n"
             "int flashml_evict_reuse_predictions(void) { return %d; }\n",
             FLASHML_POLICY_ABI_VERSION, FLASHML_EVICT_NUM_FEATURES, FLASHML_EVICT_CONTRACT_HASH, FLASHML_EVICT_F_SIZE,
             FLASHML_EVICT_NUM_FEATURES, reuse);
    write_text(src, text);
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    snprintf(cmd, sizeof cmd, "%s -std=c11 -O1 -fPIC -shared '%s' -lm -o '%s'", cc, src, so);
    if (system(cmd) != 0) { fprintf(stderr, "%s failed\n", cmd); exit(2); }
}

/* (c) flashrt_mat_config.reuse_predictions -1 (the default) takes the policy's export: 0 (the
 * declared legacy) for a bundle without it (evict.so), 1 (the declared default) without a
 * policy, 1 for one exporting 1; 0/1 given win;
 * other values are refused, the config's at open and the export's at load. */
static void test_reuse_config(const char *poldir) {
    struct flashrt_mat_config c;
    flashrt_mat_config_default(&c);
    CHECK(c.reuse_predictions == -1, "the default takes the policy's: %d", c.reuse_predictions);
    c.capacity = 4;
    c.unit = FLASHRT_MAT_OBJECTS;
    char err[FLASHRT_ERR_LEN], so[600];
    struct flashrt_mat_metrics mt;
    flashrt_policy *old = evict_policy(poldir), *p1;
    reuse_policy_so(1, so, sizeof so);
    p1 = evict_bundle("reuse1-bundle", so, err, sizeof err);
    CHECK(p1 != NULL, "%s", err);
    if (!p1) { flashrt_policy_free(old); return; }
    struct { flashrt_policy *p; int cfg, want; } cases[] = {
        {old, -1, 0}, {old, 1, 1}, {old, 0, 0}, {p1, -1, 1}, {p1, 0, 0}, {p1, 1, 1}, {NULL, -1, FRT_MAT_REUSE_PREDICTIONS_DEFAULT}, {NULL, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.reuse_predictions = cases[i].cfg;
        flashrt_mat *m = flashrt_mat_open(&c, cases[i].p, err, sizeof err);
        CHECK(m != NULL, "case %zu: %s", i, err);
        if (!m) continue;
        flashrt_mat_metrics(m, &mt);
        CHECK(mt.reuse_predictions == cases[i].want && mt.reused == 0 && isnan(mt.candidates_per_eviction), "case %zu: reuse %d (want %d)", i,
              mt.reuse_predictions, cases[i].want);
        flashrt_mat_close(m);
    }
    /* the bundle's 1 in use: test_reuse_kept's t = 6 reuses two predictions */
    c.reuse_predictions = -1;
    flashrt_mat *m = flashrt_mat_open(&c, p1, err, sizeof err);
    CHECK(m != NULL, "%s", err);
    if (m) {
        struct flashrt_mat_result r;
        uint64_t d[] = {6, 3, 10, 100};
        for (int i = 0; i < 7; i++) get(m, (uint64_t)i, i < 4 ? d[i] : 1, &r);
        flashrt_mat_metrics(m, &mt);
        CHECK(mt.predictions == 5 && mt.reused == 2 && mt.final_threshold == 3.75, "the bundle's reuse: predictions %llu reused %llu",
              (unsigned long long)mt.predictions, (unsigned long long)mt.reused);
        flashrt_mat_close(m);
    }
    for (int bad = -2; bad <= 2; bad += 4) {
        c.reuse_predictions = bad;
        err[0] = 0;
        CHECK(flashrt_mat_open(&c, old, err, sizeof err) == NULL && strstr(err, "reuse_predictions must be 0 (off) or 1 (on)"), "%d: %s", bad, err);
    }
    reuse_policy_so(2, so, sizeof so);
    err[0] = 0;
    flashrt_policy *p2 = evict_bundle("reuse2-bundle", so, err, sizeof err);
    CHECK(p2 == NULL && strstr(err, "refused: bad flashml_evict_reuse_predictions 2"), "%s", err);
    flashrt_policy_free(p2);
    flashrt_policy_free(p1);
    flashrt_policy_free(old);
}

static void test_refusals(const char *poldir) {
    /* an admission-only bundle: no eviction capability */
    char dir[400], so[600], man[1200], hex[65], err[FLASHRT_ERR_LEN], cmd[2400];
    snprintf(dir, sizeof dir, "%s/adm-bundle", TMP);
    snprintf(so, sizeof so, "%s/policy.so", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/admitall.so' '%s'", dir, poldir, so);
    if (system(cmd) != 0) exit(2);
    frt_sha256_file(so, hex, err, sizeof err);
    snprintf(man, sizeof man, MANIFEST_HEAD "\"abi_version\": %d, \"contract_hash\": \"%s\", \"sha256\": \"%s\"}\n", file_size(so), FLASHML_POLICY_ABI_VERSION,
             FLASHML_POLICY_CONTRACT_HASH, hex);
    snprintf(cmd, sizeof cmd, "%s/manifest.json", dir);
    write_text(cmd, man);
    flashrt_policy *p = flashrt_policy_load_eviction(dir, err, sizeof err);
    CHECK(p == NULL && strstr(err, dir) && strstr(err, "no eviction capability"), "%s", err);
    flashrt_policy_free(p);
    /* a policy loaded for admission is not an eviction policy */
    p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
    CHECK(p != NULL, "%s", err);
    struct flashrt_mat_config c;
    flashrt_mat_config_default(&c);
    c.capacity = 10;
    CHECK(flashrt_mat_open(&c, p, err, sizeof err) == NULL && strstr(err, "not loaded for eviction"), "%s", err);
    flashrt_policy_free(p);
}

/* frt_mat_surely_far never says "far" where libm's TTA test says "near": predictions over
 * the whole range (random, integers, and expm1's boundary at log1p(age + T) and
 * log1p(age - T), each +- a few ulps), ages and thresholds; and it does decide most. */
static void test_surely_far(void) {
    uint64_t s = 43;
    long decided = 0, n = 0, wrong = 0;
    for (int i = 0; i < 400000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(s >> 11) / 9007199254740992.0;
        const double age = (double)((s >> 7) % (1u << ((s >> 3) % 30)));
        const double T = 1.0 + (double)((s >> 17) % 100000) * u;
        double pred;
        switch (i % 5) {
        case 0: pred = -800.0 + 1600.0 * u; break;
        case 1: pred = -2.0 + 40.0 * u; break;
        case 2: pred = log1p(age + T); break;
        case 3: pred = age > T ? log1p(age - T) : log(T); break;
        default: pred = (double)(int)(30.0 * u); break;
        }
        for (int ulps = -3; ulps <= 3; ulps++) {
            const double x = ulps < 0 ? nextafter(pred, -INFINITY) : ulps > 0 ? nextafter(pred, INFINITY) : pred;
            pred = x;
            const int exact = fabs(expm1(x) - age) >= T;
            const int far = frt_mat_surely_far(x, age, T);
            n++;
            decided += far;
            if (far && !exact) wrong++;
        }
    }
    CHECK(wrong == 0, "%ld of %ld predictions surely far where the TTA test says near", wrong, n);
    CHECK(decided > n / 3, "only %ld of %ld decided without expm1", decided, n);
    CHECK(!frt_mat_surely_far(NAN, 1.0, 1.0) && !frt_mat_surely_far(INFINITY, 1.0, 1.0) &&
              !frt_mat_surely_far(701.0, 1.0, 1.0),
          "NaN, inf and beyond the bracket's range go to expm1");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_mat POLICY_BUILD_DIR\n");
        return 2;
    }
    test_scratch("flashrt-mat");
    test_features();
    test_surely_far();
    test_objects();
    test_lru();
    test_integrity();
    test_controller(argv[1]);
    test_mean_controller(argv[1]);
    test_reuse_kept(argv[1]);
    test_reuse_after_access(argv[1]);
    test_reuse_exact(argv[1]);
    test_reuse_config(argv[1]);
    test_refusals(argv[1]);
    return test_done("test_mat");
}
