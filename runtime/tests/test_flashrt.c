/* test_flashrt.c: C unit tests of libflashrt (run under ASan+UBSan by `make test` and under
 * valgrind by `make valgrind`). Usage: test_flashrt POLICY_BUILD_DIR [--quick] */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"

#include "check.h"

static const char *POLDIR;
static int QUICK;


static void path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", TMP, name); }

static void copy_file(const char *src, const char *dst) {
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    if (!a || !b) { perror(src); exit(2); }
    char buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, r, b);
    fclose(a);
    fclose(b);
}

/* ---- sha256, json, map ---- */

static void test_sha256(void) {
    uint8_t d[32];
    char hex[65];
    frt_sha256("abc", 3, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "%s", hex);
    frt_sha256("", 0, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "%s", hex);
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    frt_sha256(m, strlen(m), d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "%s", hex);
}

static void test_json(void) {
    struct frt_json_object o;
    char err[256];
    const char *t = "{\"abi_version\": 1, \"sha256\": \"ab\\u0063\", \"metrics\": {\"a\": [1, 2.5e3, null]},"
                    " \"x\": true, \"neg\": -0.25}";
    CHECK(frt_json_parse_object(t, strlen(t), &o, err, sizeof err) == 0, "%s", err);
    const struct frt_json_member *m = frt_json_get(&o, "sha256");
    CHECK(m && m->type == FRT_JSON_STRING && !strcmp(m->str, "abc"), "sha256");
    m = frt_json_get(&o, "neg");
    CHECK(m && m->type == FRT_JSON_NUMBER && m->num == -0.25, "neg");
    m = frt_json_get(&o, "metrics");
    CHECK(m && m->type == FRT_JSON_NESTED, "nested");
    const char *bad[] = {"", "[1]", "{\"a\": }", "{\"a\": 1,}", "{\"a\": 1} x", "{\"a\": \"unterminated}", "{\"a\" 1}", "{\"a\": 01}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(frt_json_parse_object(bad[i], strlen(bad[i]), &o, err, sizeof err) != 0, "accepted %s", bad[i]);
}

static void test_map(void) {
    struct frt_map m;
    CHECK(frt_map_init(&m, 4) == 0, "init");
    enum { N = 5000 };
    static uint32_t ref[N];
    static uint8_t has[N];
    memset(has, 0, sizeof has);
    uint64_t rng = 1;
    for (int step = 0; step < 50000; step++) {
        rng = frt_mix64(rng);
        uint64_t k = rng % N;
        if ((rng >> 20) % 3 == 0) {
            int r = frt_map_del(&m, k * 7919);
            CHECK((r == 0) == has[k], "del %llu", (unsigned long long)k);
            has[k] = 0;
        } else {
            frt_map_put(&m, k * 7919, (uint32_t)step);
            ref[k] = (uint32_t)step;
            has[k] = 1;
        }
    }
    size_t live = 0;
    for (uint64_t k = 0; k < N; k++) {
        uint32_t *v = frt_map_get(&m, k * 7919);
        live += has[k];
        CHECK((v != NULL) == has[k] && (!v || *v == ref[k]), "key %llu", (unsigned long long)k);
    }
    CHECK(live == m.len, "len %zu vs %zu", live, m.len);
    frt_map_free(&m);
}

/* ---- tracker vs exact counts ---- */

static void test_tracker(void) {
    enum { KEYS = 300, HOURS_SPAN = 12 };
    int n = QUICK ? 3000 : 20000;
    char err[256];
    /* exact: counts[key][hour] of GETs and segments, built as we go */
    static uint32_t cnt[KEYS][HOURS_SPAN + 1], seg[KEYS][HOURS_SPAN + 1];
    memset(cnt, 0, sizeof cnt);
    memset(seg, 0, sizeof seg);
    for (int wl = 8; wl <= 16; wl += 8) {
        memset(cnt, 0, sizeof cnt);
        memset(seg, 0, sizeof seg);
        flashrt_tracker *t = flashrt_tracker_new((unsigned)wl, 4, err, sizeof err);
        CHECK(t != NULL, "%s", err);
        if (!t) return;
        uint64_t rng = 42, over = 0, exact_n = 0, total = 0, maxerr = 0;
        for (int i = 0; i < n; i++) {
            rng = frt_mix64(rng);
            struct flashrt_access a = {0};
            uint64_t k = (rng % KEYS) * (rng % 7 == 0 ? 1 : 1);
            a.key = 1000003ull * k + 17;
            a.offset = (rng >> 20) % 64 * FRT_SEGMENT_BYTES;
            a.size = 1 + (rng >> 30) % (3 * FRT_SEGMENT_BYTES);
            if (a.offset + a.size > FRT_BLOCK_BYTES) a.size = FRT_BLOCK_BYTES - a.offset;
            a.time = 3600.0 * HOURS_SPAN * i / n;
            a.op = (rng >> 40) % 5 == 0 ? 3 : 1;
            double f[FLASHRT_NUM_FEATURES];
            flashrt_tracker_features(t, &a, f);
            int hour = (int)floor(a.time / 3600);
            for (int h = 0; h < 6; h++) {
                uint32_t ec = hour - h >= 0 ? cnt[k][hour - h] : 0, es = hour - h >= 0 ? seg[k][hour - h] : 0;
                double gc = f[FLASHML_F_BLOCK_COUNT_H1 + h], gs = f[FLASHML_F_SEGMENT_COUNT_H1 + h];
                CHECK(gc >= ec && gs >= es, "tracker undercounts: %g < %u or %g < %u", gc, ec, gs, es);
                over += (uint64_t)(gc - ec);
                if (gc - ec > maxerr) maxerr = (uint64_t)(gc - ec);
                exact_n += gc == ec && gs == es;
                total++;
            }
            CHECK(f[FLASHML_F_START] == (double)(a.offset / FRT_SEGMENT_BYTES) && f[FLASHML_F_SIZE] == (double)a.size, "base features");
            flashrt_tracker_add(t, &a);
            if (flashrt_is_get(a.op)) {
                cnt[k][hour]++;
                seg[k][hour] += (uint32_t)((a.offset + a.size - 1) / FRT_SEGMENT_BYTES - a.offset / FRT_SEGMENT_BYTES + 1);
            }
        }
        if (wl == 16) CHECK(exact_n == total, "wide sketch should be exact here: %llu of %llu", (unsigned long long)exact_n, (unsigned long long)total);
        else CHECK(exact_n * 10 >= total * 5, "narrow sketch too inexact: %llu of %llu", (unsigned long long)exact_n, (unsigned long long)total);
        flashrt_tracker_free(t);
    }
}

/* ---- trace parser ---- */

static int parse_all(const char *text, char *err, size_t errlen, int *count) {
    char p[512];
    path(p, sizeof p, "t.trace");
    write_text(p, text);
    flashrt_trace *t = flashrt_trace_open(p, err, errlen);
    if (!t) return -1;
    struct flashrt_access a;
    int r;
    *count = 0;
    while ((r = flashrt_trace_next(t, &a, err, errlen)) == 1) (*count)++;
    flashrt_trace_close(t);
    return r;
}

static void test_trace(void) {
    char err[512];
    int n;
    const char *hdr = "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n"
                      "# flashml: preset=x sample_ratio=0.5 accesses=3\n";
    char buf[2048];
    snprintf(buf, sizeof buf, "%s310 262144 4325376 1572074461.57806 1 24 3 5\n311 0 0 1572074462 1 24 3 5\n312 0 10 1572074462 3 1 1 1\n", hdr);
    CHECK(parse_all(buf, err, sizeof err, &n) == 0 && n == 2, "good trace: %d %s", n, err);
    snprintf(buf, sizeof buf, "%s310 262144 4325376 1572074461.5 1 24 3 5\n311 0 4096", hdr);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && strstr(err, "t.trace:4") && strstr(err, "op_time") && strstr(err, "truncated"), "truncated: %s", err);
    snprintf(buf, sizeof buf, "%s310 26x144 4325376 1572074461.5 1 24 3 5\n", hdr);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && strstr(err, ":3: field 'io_offset'"), "bad offset: %s", err);
    snprintf(buf, sizeof buf, "%s310 0 4096 20 1 24 3 5\n310 0 4096 10 1 24 3 5\n", hdr);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && strstr(err, ":4: field 'op_time'") && strstr(err, "sorted"), "unsorted: %s", err);
    snprintf(buf, sizeof buf, "%s310 8388608 1 20 1 24 3 5\n", hdr);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && strstr(err, "field 'io_size'") && strstr(err, "block size"), "overflow: %s", err);
    snprintf(buf, sizeof buf, "%s310 0 1 nan 1 24 3 5\n", hdr);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && strstr(err, "field 'op_time'"), "nan: %s", err);
    snprintf(buf, sizeof buf, "#block_id io_offset io_size op_time op_name user_namespace user_name host_name op_count\n"
                              "1 0 4096 10 1 2 3 hostA 3\n1 0 4096 11 1 2 3 hostB 1\n");
    CHECK(parse_all(buf, err, sizeof err, &n) == 0 && n == 4, "202110 schema with op_count: %d %s", n, err);
    /* op_count 0 is refused (it was read as 1), as flashml's ingest does: naming file, line,
     * field; a zero-size line's op_count is checked too (ingest checks every line) */
    const char *h202110 = "#block_id io_offset io_size op_time op_name user_namespace user_name host_name op_count\n";
    snprintf(buf, sizeof buf, "%s1 0 4096 10 1 2 3 hostA 1\n1 0 4096 11 1 2 3 hostB 0\n", h202110);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && n == 1 && strstr(err, "t.trace:3: field 'op_count'") && strstr(err, "op_count 0 < 1"),
          "op_count 0: %d %s", n, err);
    snprintf(buf, sizeof buf, "%s1 0 0 10 1 2 3 hostA 0\n", h202110);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && strstr(err, "t.trace:2: field 'op_count'") && strstr(err, "op_count 0 < 1"),
          "op_count 0 of a zero-size IO: %s", err);
    snprintf(buf, sizeof buf, "%s1 0 0 10 1 2 3 hostA 2000000\n", h202110);
    CHECK(parse_all(buf, err, sizeof err, &n) < 0 && strstr(err, "t.trace:2: field 'op_count'") && strstr(err, "repeats"),
          "op_count too large on a zero-size IO: %s", err);
    snprintf(buf, sizeof buf, "%s1 0 0 10 1 2 3 hostA 5\n1 0 1 11 1 2 3 hostA 2\n", h202110);
    CHECK(parse_all(buf, err, sizeof err, &n) == 0 && n == 2, "zero-size line dropped whatever its op_count: %d %s", n, err);
    CHECK(flashrt_trace_open("/nonexistent/x.trace", err, sizeof err) == NULL && strstr(err, "No such file"), "missing: %s", err);
}

/* ---- policy loader ---- */

static void make_bundle(const char *dir, const char *so, const char *sha_override, int abi,
                        const char *hash) {
    mkdir(dir, 0755);
    char p[600], hex[65], err[256], man[1024];
    snprintf(p, sizeof p, "%s/policy.so", dir);
    if (so) copy_file(so, p);
    else write_text(p, "this is not an ELF file\n");
    frt_sha256_file(p, hex, err, sizeof err);
    snprintf(man, sizeof man,
             MANIFEST_HEAD "\"abi_version\": %d, \"contract_hash\": \"%s\", \"sha256\": \"%s\", \"mlflow_run_id\": null,"
             " \"eviction_age_s\": 7200, \"target_write_rate_mbps\": 35.599, \"admit_threshold\": 0.5,"
             " \"when_threshold\": 0.5, \"metrics\": {\"auc\": 0.9}, \"versions\": {\"treelite\": \"4\"}}\n", file_size(p),
             abi, hash, sha_override ? sha_override : hex);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    write_text(p, man);
}

static void test_policy(void) {
    char so[512], dir[512], err[FLASHRT_ERR_LEN];
    const char *H = FLASHML_POLICY_CONTRACT_HASH;
    struct { const char *name, *so; const char *sha; int abi; const char *hash; const char *expect; } cases[] = {
        {"ok", "admitall.so", NULL, 1, H, NULL},
        {"badsha", "admitall.so", "00", 1, H, "sha256"},
        {"mabi", "admitall.so", NULL, 2, H, "abi_version"},
        {"mhash", "admitall.so", NULL, 1, "feedface", "contract_hash"},
        {"soabi", "wrongabi.so", NULL, 1, H, "ABI 2"},
        {"sohash", "wronghash.so", NULL, 1, H, "contract hash"},
        {"foreign", "foreign.so", NULL, 1, H, "no symbol"},
        {"corrupt", NULL, NULL, 1, H, "cannot load"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(dir, sizeof dir, "%s/pol_%s", TMP, cases[i].name);
        if (cases[i].so) snprintf(so, sizeof so, "%s/%s", POLDIR, cases[i].so);
        make_bundle(dir, cases[i].so ? so : NULL, cases[i].sha, cases[i].abi, cases[i].hash);
        err[0] = 0;
        flashrt_policy *p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
        if (!cases[i].expect) {
            CHECK(p != NULL, "%s: %s", cases[i].name, err);
            if (p) CHECK(flashrt_policy_target_write_rate_mbps(p) == 35.599, "target rate");
        } else {
            CHECK(p == NULL && strstr(err, cases[i].expect), "%s: expected '%s' in: %s", cases[i].name, cases[i].expect, err);
            flashrt_policy_free(p);
            err[0] = 0;
            p = flashrt_policy_load(dir, FLASHRT_FALLBACK_REJECTX, err, sizeof err);
            CHECK(p && !strcmp(flashrt_policy_name(p), "rejectx") && strstr(err, cases[i].expect), "%s fallback: %s", cases[i].name, err);
        }
        flashrt_policy_free(p);
    }
    /* A truncated or damaged .so under a manifest whose sha256 vouches for it: refused before
     * dlopen (which a truncated ELF can kill with SIGBUS), naming the .so, as flashml's loader */
    snprintf(so, sizeof so, "%s/admitall.so", POLDIR);
    FILE *g = fopen(so, "rb");
    CHECK(g != NULL, "%s", so);
    static unsigned char good[1 << 22];
    size_t glen = g ? fread(good, 1, sizeof good, g) : 0;
    if (g) fclose(g);
    CHECK(glen > 4096 && glen < sizeof good, "admitall.so: %zu bytes", glen);
    unsigned char *mod = malloc(glen);
    struct { const char *name; size_t len; int patch; const char *expect; } bad[] = {
        {"empty", 0, 0, "field 'size_bytes': expected a positive integer"}, /* the manifest refuses it first */
        {"63", 63, 0, "not a 64-bit ELF shared object"},
        {"64", 64, 0, "truncated ELF file (64 bytes)"},
        {"half", 0, 1, "truncated ELF file"},
        {"lastbyte", 0, 2, "truncated ELF file"},
        {"exec", 0, 3, "not a shared object"},
        {"phoff", 0, 4, "truncated ELF file"},
        {"segment", 0, 5, "a segment of"},
    };
    for (size_t i = 0; mod && i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = bad[i].len;
        memcpy(mod, good, glen);
        if (bad[i].patch == 1) len = glen / 2;
        if (bad[i].patch == 2) len = glen - 1;
        if (bad[i].patch >= 3) len = glen;
        if (bad[i].patch == 3) mod[16] = 2; /* ET_EXEC */
        if (bad[i].patch == 4) memset(mod + 32, 0xff, 8); /* e_phoff near 2^64: no wrap-around */
        if (bad[i].patch == 5) { /* the first PT_LOAD's p_filesz past the end of the file */
            uint64_t phoff = 0, phent = (uint64_t)mod[54] | (uint64_t)mod[55] << 8;
            for (int b = 7; b >= 0; b--) phoff = phoff << 8 | mod[32 + b];
            unsigned char *e = mod + phoff;
            while (e[0] != 1) e += phent;
            memset(e + 32, 0x7f, 8);
        }
        char src[600];
        snprintf(src, sizeof src, "%s/bad_%s.so", TMP, bad[i].name);
        FILE *w = fopen(src, "wb");
        if (!w) { perror(src); exit(2); }
        if (len) fwrite(mod, 1, len, w);
        fclose(w);
        snprintf(dir, sizeof dir, "%s/pol_elf_%s", TMP, bad[i].name);
        make_bundle(dir, src, NULL, 1, H); /* the manifest's sha256 is this file's */
        err[0] = 0;
        flashrt_policy *p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
        char want[700];
        snprintf(want, sizeof want, "%s/policy.so: refused: cannot load it: ", dir);
        CHECK(p == NULL && (strstr(err, want) == err || !strcmp(bad[i].name, "empty")) && strstr(err, bad[i].expect), "%s: expected '%s' in: %s", bad[i].name, bad[i].expect, err);
        flashrt_policy_free(p);
        err[0] = 0;
        p = flashrt_policy_load(dir, FLASHRT_FALLBACK_REJECTX, err, sizeof err);
        CHECK(p && !strcmp(flashrt_policy_name(p), "rejectx") && strstr(err, bad[i].expect), "%s fallback: %s", bad[i].name, err);
        flashrt_policy_free(p);
    }
    free(mod);
    snprintf(dir, sizeof dir, "%s/pol_none", TMP);
    CHECK(flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err) == NULL && strstr(err, "pol_none"), "%s", err);
    CHECK(flashrt_policy_builtin("nope", err, sizeof err) == NULL && strstr(err, "nope"), "%s", err);
}

/* ---- the cache end to end ---- */

static void gen_trace(const char *p, int n, int keys, uint64_t seed) {
    FILE *f = fopen(p, "w");
    fprintf(f, "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n");
    fprintf(f, "# flashml: preset=test sample_ratio=1 accesses=%d\n", n);
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) {
        rng = frt_mix64(rng);
        uint64_t k = (rng % keys) * (rng % keys) / keys; /* skewed popularity */
        uint64_t off = ((rng >> 16) % 20) * 65536 + ((rng >> 40) % 3) * 1000;
        uint64_t size = 1 + (rng >> 24) % 400000;
        int op = (rng >> 50) % 10 == 0 ? 3 : ((rng >> 50) % 10 == 1 ? 2 : 1);
        fprintf(f, "%llu %llu %llu %.3f %d 1 %d %d\n", (unsigned long long)(1000 + k * 13),
                (unsigned long long)off, (unsigned long long)size, 5.0 * i, op, (int)(k % 3), (int)(k % 5));
    }
    fclose(f);
}

struct run {
    struct flashrt_metrics m;
    uint64_t integrity, served;
    int ok;
};

static struct run replay(const char *trace, const char *backing, flashrt_policy *pol,
                         struct flashrt_config *cfg) {
    struct run out;
    memset(&out, 0, sizeof out);
    char err[FLASHRT_ERR_LEN];
    flashrt_backing *bk = flashrt_backing_open(backing, NULL, cfg->direct, err, sizeof err);
    CHECK(bk != NULL, "%s", err);
    if (!bk) return out;
    flashrt *rt = flashrt_open(cfg, pol, bk, err, sizeof err);
    CHECK(rt != NULL, "%s", err);
    if (!rt) { flashrt_backing_close(bk); return out; }
    flashrt_trace *tr = flashrt_trace_open(trace, err, sizeof err);
    struct flashrt_access a;
    int r;
    while ((r = flashrt_trace_next(tr, &a, err, sizeof err)) == 1) {
        struct flashrt_result res;
        int rc = flashrt_access(rt, &a, &res);
        CHECK(rc == 0, "access: %s", flashrt_error(rt));
        if (rc) break;
        if (res.data) {
            out.served++;
            if (flashrt_verify(a.key, a.offset, res.data, res.len) >= 0) out.integrity++;
            CHECK(res.len == a.size, "length");
        }
    }
    CHECK(r == 0, "%s", err);
    flashrt_metrics(rt, &out.m);
    out.ok = 1;
    flashrt_trace_close(tr);
    flashrt_close(rt);
    flashrt_backing_close(bk);
    return out;
}

static void test_content(void) {
    uint8_t a[100], b[100];
    flashrt_content(7, 13, a, sizeof a);
    CHECK(flashrt_verify(7, 13, a, sizeof a) == -1, "verify own content");
    flashrt_content(7, 14, b, sizeof b);
    CHECK(flashrt_verify(7, 13, b, sizeof b) >= 0, "shifted content must differ");
    flashrt_content(8, 13, b, sizeof b);
    CHECK(flashrt_verify(7, 13, b, sizeof b) >= 0, "other key must differ");
    a[57] ^= 1;
    CHECK(flashrt_verify(7, 13, a, sizeof a) == 57, "first bad byte");
}

static void test_cache(void) {
    char trace[512], backing[512], flash[512], err[FLASHRT_ERR_LEN];
    path(trace, sizeof trace, "cache.trace");
    path(backing, sizeof backing, "backing.img");
    path(flash, sizeof flash, "flash.img");
    int n = QUICK ? 600 : 4000;
    gen_trace(trace, n, 60, 99);
    struct flashrt_prepare_stats st;
    CHECK(flashrt_prepare_backing(backing, NULL, trace, &st, err, sizeof err) == 0, "%s", err);
    CHECK(st.blocks > 10 && st.segments > 0, "prepare stats");
    char polso[512], poldir[512];
    snprintf(polso, sizeof polso, "%s/count.so", POLDIR);
    snprintf(poldir, sizeof poldir, "%s/pol_count", TMP);
    make_bundle(poldir, polso, NULL, 1, FLASHML_POLICY_CONTRACT_HASH);
    const char *pols[] = {"admitall", "rejectx", poldir};
    for (int e = 0; e < 2; e++)
        for (size_t pi = 0; pi < 3; pi++) {
            flashrt_policy *pol = pi < 2 ? flashrt_policy_builtin(pols[pi], err, sizeof err)
                                         : flashrt_policy_load(pols[pi], FLASHRT_FALLBACK_NONE, err, sizeof err);
            CHECK(pol != NULL, "%s", err);
            if (!pol) continue;
            struct flashrt_config cfg;
            flashrt_config_default(&cfg);
            cfg.flash_path = flash;
            cfg.flash_bytes = 4u << 20;
            cfg.region_bytes = 256u << 10;
            cfg.eviction = e ? FLASHRT_FIFO : FLASHRT_LRU;
            cfg.warmup_s = 0;
            cfg.measure_raw = 1;
            /* O_DIRECT (where the file system has it) on one run; the page cache elsewhere */
            cfg.direct = (e == 0 && pi == 0) ? FLASHRT_DIRECT_AUTO : FLASHRT_DIRECT_OFF;
            struct run r = replay(trace, backing, pol, &cfg);
            CHECK(r.ok && r.integrity == 0 && r.served > 0, "policy %s: %llu integrity errors", pols[pi], (unsigned long long)r.integrity);
            CHECK(r.m.hits > 0 && r.m.evicted_regions > 0, "policy %s: hits %llu evictions %llu", pols[pi],
                  (unsigned long long)r.m.hits, (unsigned long long)r.m.evicted_regions);
            CHECK(r.m.io_hit_ratio > 0 && r.m.io_hit_ratio < 1 && r.m.device_errors == 0, "hit ratio %g", r.m.io_hit_ratio);
            if (pi == 2) CHECK(r.m.prefetched_segments > 0, "count policy prefetches");
            if (pi == 0) CHECK(r.m.prefetched_segments == 0 && r.m.admitted_segments > 0, "admitall");
            flashrt_policy_free(pol);
        }
    /* faults: every 7th flash read and every 5th write fail; never a wrong byte */
    flashrt_policy *pol = flashrt_policy_builtin("admitall", err, sizeof err);
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    cfg.flash_path = flash;
    cfg.flash_bytes = 4u << 20;
    cfg.region_bytes = 256u << 10;
    cfg.warmup_s = 0;
    cfg.direct = FLASHRT_DIRECT_OFF;
    cfg.fail_read_every = 7;
    cfg.fail_write_every = 5;
    struct run r = replay(trace, backing, pol, &cfg);
    CHECK(r.ok && r.integrity == 0, "faults: %llu integrity errors", (unsigned long long)r.integrity);
    CHECK(r.m.flash_read_errors > 0 && r.m.flash_write_errors > 0 && r.m.device_errors == r.m.flash_read_errors + r.m.flash_write_errors,
          "faults counted: %llu %llu", (unsigned long long)r.m.flash_read_errors, (unsigned long long)r.m.flash_write_errors);
    /* the write-rate limiter: a tiny budget admits less */
    cfg.fail_read_every = cfg.fail_write_every = 0;
    struct run full = replay(trace, backing, pol, &cfg);
    cfg.write_rate_mbps = 0.5 * full.m.flash_write_rate_mbps;
    cfg.write_burst_s = 10;
    struct run lim = replay(trace, backing, pol, &cfg);
    CHECK(lim.ok && lim.integrity == 0 && lim.m.rate_limited > 0, "limiter engaged");
    CHECK(lim.m.flash_write_rate_mbps <= cfg.write_rate_mbps * 1.02, "limited rate %g > %g", lim.m.flash_write_rate_mbps, cfg.write_rate_mbps);
    /* bad configurations */
    cfg.write_rate_mbps = 0;
    flashrt_backing *bk = flashrt_backing_open(backing, NULL, FLASHRT_DIRECT_OFF, err, sizeof err);
    cfg.flash_bytes = 100000;
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "too small for one region"), "%s", err);
    cfg.flash_bytes = 4u << 20;
    cfg.flash_path = "/dev/flashrt-no-such-device";
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "no such device"), "%s", err);
    cfg.flash_path = "/nonexistent-dir/flash.img";
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "No such file"), "%s", err);
    cfg.flash_path = flash;
    cfg.region_bytes = 1000;
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "multiple of the segment"), "%s", err);
    flashrt_backing_close(bk);
    CHECK(flashrt_backing_open(flash, NULL, FLASHRT_DIRECT_OFF, err, sizeof err) == NULL && strstr(err, "prepare-backing"), "%s", err);
    flashrt_policy_free(pol);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_flashrt POLICY_BUILD_DIR [--quick]\n");
        return 2;
    }
    POLDIR = argv[1];
    QUICK = argc > 2 && !strcmp(argv[2], "--quick");
    test_scratch("flashrt-test");
    test_sha256();
    test_json();
    test_map();
    test_content();
    test_tracker();
    test_trace();
    test_policy();
    test_cache();
    return test_done("test_flashrt");
}
