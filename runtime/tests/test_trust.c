/* test_trust.c: the verified loader (policy.c, policy_manifest.c, policy_bind.c) against
 * hostile bundles: a .so swapped under a manifest that vouches for another, lying manifests
 * (the schema's rules), symbolic links,
 * FIFOs and directories in place of the bundle's files, values a .so reports that are not
 * finite or in range, and a race that flips policy.so between a good and an evil .so while
 * the bundle loads. The evil .so's constructor leaves a marker file: it must never appear.
 * Run under ASan+UBSan by `make test` and under valgrind by `make valgrind`.
 * Usage: test_trust POLICY_BUILD_DIR [--quick] */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "policies/policy_internal.h"

#include "check.h"

static const char *POLDIR;
static int QUICK;
static char MARKER[400];

static void copy_file(const char *src, const char *dst) {
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    if (!a || !b) { perror(src); exit(2); }
    char buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, r, b);
    fclose(a);
    fclose(b);
}

static void so_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", POLDIR, name); }

/* TMP/name holding `so` (a test policy's file name; NULL: none) as policy.so and a manifest
 * that vouches for `vouch` (its sha256 and size): the fields of a compiled admission bundle,
 * where `extra` (", \"k\": v, ...") replaces those it names and adds the others. */
static void bundle(char *dir, size_t n, const char *name, const char *so, const char *vouch, const char *extra) {
    char p[600], v[600], hex[65], err[256], man[4096], val[3][128];
    snprintf(dir, n, "%s/%s", TMP, name);
    mkdir(dir, 0755);
    if (so) {
        so_path(v, sizeof v, so);
        snprintf(p, sizeof p, "%s/policy.so", dir);
        copy_file(v, p);
    }
    so_path(v, sizeof v, vouch);
    if (frt_sha256_file(v, hex, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); exit(2); }
    snprintf(val[0], sizeof val[0], "%d", FLASHML_POLICY_ABI_VERSION);
    snprintf(val[1], sizeof val[1], "\"%s\"", hex);
    snprintf(val[2], sizeof val[2], "%lld", file_size(v));
    char hash[80];
    snprintf(hash, sizeof hash, "\"%s\"", FLASHML_POLICY_CONTRACT_HASH);
    const char *fields[][2] = {
        {"format", "\"flashml-policy-bundle/1\""}, {"abi_version", val[0]}, {"capabilities", "[\"admission\", \"prefetch\"]"},
        {"contract_hash", hash}, {"policy_so", "\"policy.so\""}, {"sha256", val[1]}, {"size_bytes", val[2]},
        {"eviction_age_s", "7200"}, {"target_write_rate_mbps", "35.599"}, {"admit_threshold", "0.5"},
        {"when_threshold", "0.5"}, {"peak_hours", "[]"}, {"peak_bonus", "0.0"}, {"segments_per_block", "64"},
        {"metrics", "{\"auc\": null}"}};
    size_t used = (size_t)snprintf(man, sizeof man, "{\"mlflow_run_id\": null");
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char key[80];
        snprintf(key, sizeof key, "\"%s\":", fields[i][0]);
        if (extra && strstr(extra, key)) continue;
        used += (size_t)snprintf(man + used, sizeof man - used, ", \"%s\": %s", fields[i][0], fields[i][1]);
    }
    snprintf(man + used, sizeof man - used, "%s}\n", extra ? extra : "");
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    write_text(p, man);
}

static int marker(void) { return access(MARKER, F_OK) == 0; }

/* Loads dir for admission: NULL and the message in err when refused. A policy that loads must
 * be admitall.so's (target rate 35.599), never evil.so's (66.6). */
static int refused(const char *dir, const char *expect, const char *what) {
    char err[FLASHRT_ERR_LEN] = "";
    flashrt_policy *p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
    int ok = p == NULL && (!expect || strstr(err, expect));
    CHECK(ok, "%s: expected a refusal with '%s', got: %s", what, expect ? expect : "", p ? "loaded" : err);
    CHECK(!marker(), "%s: the evil constructor ran", what);
    flashrt_policy_free(p);
    return ok;
}

static void loads(const char *dir, const char *what) {
    char err[FLASHRT_ERR_LEN] = "";
    flashrt_policy *p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
    CHECK(p && flashrt_policy_target_write_rate_mbps(p) == 35.599, "%s: %s", what, err);
    flashrt_policy_free(p);
}

static void test_tampered(void) {
    char dir[400], p[600], evil[600];
    so_path(evil, sizeof evil, "evil.so");
    bundle(dir, sizeof dir, "good", "admitall.so", "admitall.so", NULL);
    loads(dir, "the good bundle");
    /* the .so swapped, the manifest vouching for the original */
    bundle(dir, sizeof dir, "swapped", "evil.so", "admitall.so", NULL);
    refused(dir, "refused: it has", "swapped .so (another size)");
    /* the same size, another sha256 (evil.so's bytes, padded or cut to admitall.so's size) */
    bundle(dir, sizeof dir, "swapped2", "evil.so", "admitall.so", NULL);
    char so[600], src[600];
    snprintf(so, sizeof so, "%s/policy.so", dir);
    so_path(src, sizeof src, "admitall.so");
    CHECK(truncate(so, file_size(src)) == 0, "truncate");
    refused(dir, "sha256", "swapped .so (the same size)");
    /* the same size and another sha256 */
    bundle(dir, sizeof dir, "size", "admitall.so", "admitall.so", ", \"size_bytes\": 1234");
    refused(dir, "field 'size_bytes' says 1234", "size_bytes lies");
    /* policy.so a symbolic link, even to a .so the manifest vouches for */
    bundle(dir, sizeof dir, "link", NULL, "evil.so", NULL);
    snprintf(p, sizeof p, "%s/policy.so", dir);
    CHECK(symlink(evil, p) == 0, "symlink");
    refused(dir, "symbolic link", "policy.so a symbolic link");
    /* manifest.json a symbolic link */
    bundle(dir, sizeof dir, "mlink", "admitall.so", "admitall.so", NULL);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    char real[600];
    snprintf(real, sizeof real, "%s/real.json", dir);
    CHECK(rename(p, real) == 0 && symlink(real, p) == 0, "symlink manifest");
    refused(dir, "manifest.json: refused: it is a symbolic link", "manifest.json a symbolic link");
    /* FIFOs and a directory in their places: refused at once (alarm() turns a hang into a
     * failure) */
    alarm(60);
    bundle(dir, sizeof dir, "fifo", NULL, "admitall.so", NULL);
    snprintf(p, sizeof p, "%s/policy.so", dir);
    CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    refused(dir, "policy.so: refused: it is a FIFO", "policy.so a FIFO");
    bundle(dir, sizeof dir, "mfifo", "admitall.so", "admitall.so", NULL);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    CHECK(unlink(p) == 0 && mkfifo(p, 0644) == 0, "mkfifo manifest");
    refused(dir, "manifest.json: refused: it is a FIFO", "manifest.json a FIFO");
    alarm(0);
    bundle(dir, sizeof dir, "sodir", NULL, "admitall.so", NULL);
    snprintf(p, sizeof p, "%s/policy.so", dir);
    CHECK(mkdir(p, 0755) == 0, "mkdir");
    refused(dir, "a directory", "policy.so a directory");
    /* policy_so naming a file outside the bundle */
    bundle(dir, sizeof dir, "escape", "admitall.so", "admitall.so", ", \"policy_so\": \"../good/policy.so\"");
    refused(dir, "field 'policy_so'", "policy_so outside the bundle");
    /* the .so the manifest names (policy_so), not policy.so */
    bundle(dir, sizeof dir, "named", "evil.so", "admitall.so", ", \"policy_so\": \"real.so\"");
    snprintf(p, sizeof p, "%s/real.so", dir);
    so_path(real, sizeof real, "admitall.so");
    copy_file(real, p);
    loads(dir, "policy_so names real.so");
    CHECK(!marker(), "policy.so (evil) was mapped");
}

/* Values the .so reports, refused after mapping and naming the function. */
static void test_values(void) {
    static const struct { const char *so, *fn; } CASES[] = {
        {"nan_threshold.so", "flashml_admit_threshold() returned nan"},
        {"inf_when.so", "flashml_prefetch_when_threshold() returned inf"},
        {"zero_rate.so", "flashml_target_write_rate_mbps() returned 0"},
        {"negative_age.so", "flashml_eviction_age_s() returned -1"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char dir[400];
        bundle(dir, sizeof dir, CASES[i].so, CASES[i].so, CASES[i].so, NULL);
        refused(dir, CASES[i].fn, CASES[i].so);
    }
}

/* The manifest's schema: each case overrides one field of a good manifest. */
static void test_schema(void) {
    static const struct { const char *extra, *expect; } CASES[] = {
        {", \"format\": \"evil/9\"", "field 'format': expected \"flashml-policy-bundle/1\", got \"evil/9\""},
        {", \"format\": 1", "field 'format'"},
        {", \"format\": null", "field 'format'"},
        {", \"system\": \"mat\"", "field 'system': expected \"baleen\""},
        {", \"system\": \"evil\"", "field 'system': expected one of"},
        {", \"system\": 3", "field 'system'"},
        {", \"system\": \"pannier\"", "field 'system'"},
        {", \"size_bytes\": \"16000\"", "field 'size_bytes': expected a positive integer"},
        {", \"size_bytes\": true", "field 'size_bytes'"},
        {", \"size_bytes\": 0", "field 'size_bytes'"},
        {", \"size_bytes\": -8", "field 'size_bytes'"},
        {", \"size_bytes\": 1.5", "field 'size_bytes'"},
        {", \"size_bytes\": 1e300", "field 'size_bytes'"},
        {", \"sha256\": \"abc\"", "field 'sha256': expected 64 lowercase"},
        {", \"sha256\": \"ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789\"", "field 'sha256'"},
        {", \"sha256\": 5", "field 'sha256'"},
        {", \"capabilities\": [\"admission\", \"admission\"]", "listed twice"},
        {", \"capabilities\": [\"admission\", \"teleport\"]", "unknown capability \"teleport\""},
        {", \"capabilities\": \"admission\"", "field 'capabilities'"},
        {", \"capabilities\": [1]", "field 'capabilities'"},
        {", \"eviction_age_s\": -1", "field 'eviction_age_s': expected a finite number > 0 (seconds), got -1"},
        {", \"eviction_age_s\": 0", "field 'eviction_age_s'"},
        {", \"target_write_rate_mbps\": 0", "field 'target_write_rate_mbps': expected a finite number > 0 (MB/s)"},
        {", \"target_write_rate_mbps\": 1e999", "field 'target_write_rate_mbps': a number that is not finite"},
        {", \"admit_threshold\": 1.5", "field 'admit_threshold'"},
        {", \"metrics\": {\"auc\": -1e999}", "field 'metrics': a number that is not finite"},
        {", \"metrics\": {\"auc\": \"high\"}", "field 'metrics'"},
        {", \"peak_hours\": [3, 3]", "field 'peak_hours'"},
        {", \"peak_hours\": [24]", "field 'peak_hours'"},
        {", \"peak_hours\": \"3\"", "field 'peak_hours'"},
        {", \"peak_hours\": [0, 23], \"peak_bonus\": 0.1", NULL},
        {", \"eviction\": {\"k\": 0.5}", "field 'eviction.k'"},
        {", \"eviction\": {\"k\": 2, \"delta\": 1}", "field 'eviction.delta'"},
        {", \"eviction\": {\"controller\": \"fast\"}", "field 'eviction.controller'"},
        {", \"partition\": {\"sharpness\": -1}", "field 'partition.sharpness'"},
        {", \"partition\": {\"hidden\": [8, 0]}", "field 'partition.hidden'"},
        {", \"readahead\": {\"kind\": \"oracle\"}", "field 'readahead.kind'"},
        {", \"mlflow_run_id\": 5", "field 'mlflow_run_id'"},
        {", \"system\": \"mat\", \"capabilities\": [\"admission\"]", "field 'system'"},
        {", \"admit_threshold\": \"0.5\"", "field 'admit_threshold': expected a finite number in [0, 1], got \"0.5\""},
        {", \"admit_threshold\": true", "field 'admit_threshold': expected a finite number in [0, 1], got true"},
        {", \"when_threshold\": null", "field 'when_threshold'"},
        {", \"peak_bonus\": 2", "field 'peak_bonus'"},
        {", \"segments_per_block\": 0", "field 'segments_per_block'"},
        {", \"abi_version\": 1.5", "field 'abi_version'"},
        {", \"contract_hash\": \"feedface\"", "field 'contract_hash'"},
        {", \"policy_so\": \"\"", "field 'policy_so'"},
        {", \"system\": \"baleen\"", NULL},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char dir[400], name[32];
        snprintf(name, sizeof name, "schema%zu", i);
        bundle(dir, sizeof dir, name, "admitall.so", "admitall.so", CASES[i].extra);
        if (CASES[i].expect) refused(dir, CASES[i].expect, CASES[i].extra);
        else loads(dir, CASES[i].extra);
    }
    /* no format at all; a manifest that is not JSON */
    char dir[400], p[600];
    bundle(dir, sizeof dir, "noformat", "admitall.so", "admitall.so", NULL);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    write_text(p, "{\"abi_version\": 1, \"sha256\": \"00\"}");
    refused(dir, "field 'format': expected \"flashml-policy-bundle/1\", got nothing", "no format");
    write_text(p, "{\"format\": \"flashml-policy-bundle/1\",");
    refused(dir, "not valid JSON", "not JSON");
    /* Pannier's knobs-only bundle: valid as a manifest (system pannier, capabilities []), and
     * no policy to load */
    struct frt_manifest *m = malloc(sizeof *m);
    char err[FLASHRT_ERR_LEN] = "";
    const char *knobs = "{\"format\": \"flashml-policy-bundle/1\", \"system\": \"pannier\", \"capabilities\": [], \"knobs\": {\"promotion_pct\": 3}}";
    CHECK(frt_manifest_parse(knobs, strlen(knobs), "k.json", "pannier", m, err, sizeof err) == 0 && !m->has_so &&
          !strcmp(m->system, "pannier"), "%s", err);
    CHECK(frt_manifest_parse(knobs, strlen(knobs), "k.json", "mat", m, err, sizeof err) != 0 && strstr(err, "k.json: field 'system'"), "%s", err);
    const char *adm = "{\"format\": \"flashml-policy-bundle/1\", \"system\": \"pannier\", \"capabilities\": [\"admission\"]}";
    CHECK(frt_manifest_parse(adm, strlen(adm), "k.json", "pannier", m, err, sizeof err) != 0 && strstr(err, "a knobs-only bundle"), "%s", err);
    free(m);
    write_text(p, knobs);
    refused(dir, "field 'system'", "a pannier bundle loaded for admission");
    write_text(p, "{\"format\": \"flashml-policy-bundle/1\", \"capabilities\": []}");
    refused(dir, "field 'system': missing", "capabilities [] without a system");
    /* a field given twice (JSON readers disagree on which one counts) */
    write_text(p, "{\"format\": \"flashml-policy-bundle/1\", \"capabilities\": [], \"capabilities\": [\"admission\"]}");
    refused(dir, "field 'capabilities': given twice", "a field twice");
}

/* A process flips DIR/policy.so between the good .so (a hard link of good.so, renamed in), the
 * evil one (the same way) and a symbolic link to the evil one, while this one loads the bundle
 * again and again: every load is refused or serves the good policy, and the evil constructor
 * never runs. */
static void test_race(void) {
    char dir[400], good[600], evil[600], tmp[600], so[600], src[600];
    bundle(dir, sizeof dir, "race", "admitall.so", "admitall.so", NULL);
    snprintf(good, sizeof good, "%s/good.so", dir);
    snprintf(evil, sizeof evil, "%s/evil.so", dir);
    snprintf(tmp, sizeof tmp, "%s/.flip", dir);
    snprintf(so, sizeof so, "%s/policy.so", dir);
    so_path(src, sizeof src, "admitall.so");
    copy_file(src, good);
    so_path(src, sizeof src, "evil.so");
    copy_file(src, evil);
    int ready[2];
    if (pipe(ready) != 0) { perror("pipe"); exit(2); }
    pid_t child = fork();
    if (child == 0) {
        close(ready[0]);
        for (unsigned long i = 0;; i++) {
            unlink(tmp);
            int r = i % 3 == 2 ? symlink(evil, tmp) : link(i % 3 ? evil : good, tmp);
            if (r == 0) rename(tmp, so);
            if (i == 3) { (void)!write(ready[1], "x", 1); close(ready[1]); }
        }
    }
    close(ready[1]);
    char c;
    CHECK(read(ready[0], &c, 1) == 1, "the flipper started");
    close(ready[0]);
    const int n = QUICK ? 200 : 2000;
    int good_loads = 0, refusals = 0, wrong = 0;
    for (int i = 0; i < n; i++) {
        char err[FLASHRT_ERR_LEN] = "";
        flashrt_policy *p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
        if (!p) refusals++;
        else if (flashrt_policy_target_write_rate_mbps(p) == 35.599) good_loads++;
        else wrong++;
        flashrt_policy_free(p);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(wrong == 0, "%d loads served by the evil .so", wrong);
    CHECK(good_loads + refusals == n, "%d + %d of %d", good_loads, refusals, n);
    CHECK(!marker(), "the evil constructor ran during the race");
    printf("test_trust: race: %d loads, %d served by the good .so, %d refused, 0 evil\n", n, good_loads, refusals);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_trust POLICY_BUILD_DIR [--quick]\n");
        return 2;
    }
    POLDIR = argv[1];
    QUICK = argc > 2 && !strcmp(argv[2], "--quick");
    test_scratch("flashrt-trust");
    snprintf(MARKER, sizeof MARKER, "%s/evil-ran", TMP);
    setenv("FLASHRT_EVIL_MARKER", MARKER, 1);
    /* the marker works: the evil .so, loaded under a manifest that vouches for it, runs its
     * constructor (the one load of it this test allows) */
    char dir[400];
    bundle(dir, sizeof dir, "evil-vouched", "evil.so", "evil.so", NULL);
    char err[FLASHRT_ERR_LEN] = "";
    flashrt_policy *p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
    CHECK(p && flashrt_policy_target_write_rate_mbps(p) == 66.6 && marker(), "the marker: %s", err);
    flashrt_policy_free(p);
    unlink(MARKER);
    test_tampered();
    test_values();
    test_schema();
    test_race();
    return test_done("test_trust");
}
