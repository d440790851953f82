/* fuzz_manifest.c: libFuzzer target for the runtime's manifest parsing: the JSON reader
 * (src/util/json.c: frt_json_parse_object, frt_json_get) on the raw input, then the policy loader
 * (src/policies/policy.c: flashrt_policy_load; policy_manifest.c: the manifest's checks) on a
 * bundle folder whose manifest.json is the input and
 * whose policy.so is a real test policy (FLASHRT_FUZZ_POLICY_SO, default
 * build/policies/admitall.so), so a manifest that passes every check reaches dlopen. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashrt.h"
#include "util/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    if (!in || !out) {
        if (in) fclose(in);
        return -1;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out);
}

static void cleanup(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/policy.so", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    unlink(p);
    rmdir(dir);
}

static void setup(void) {
    const char *so = getenv("FLASHRT_FUZZ_POLICY_SO");
    if (!so) so = "build/policies/admitall.so";
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/flashrt-fuzz-manifest-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); abort(); }
    char dst[512];
    snprintf(dst, sizeof dst, "%s/policy.so", dir);
    if (copy_file(so, dst) != 0) {
        fprintf(stderr, "fuzz_manifest: cannot copy %s (set FLASHRT_FUZZ_POLICY_SO)\n", so);
        abort();
    }
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    /* the JSON reader on exactly the input's bytes (no terminator: overreads show) */
    struct frt_json_object *o = malloc(sizeof *o);
    char err[1024];
    if (o) {
        if (frt_json_parse_object((const char *)data, size, o, err, sizeof err) == 0) {
            static const char *const keys[] = {"abi_version", "contract_hash", "sha256",
                                               "capabilities", "evict_contract_hash", ""};
            for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
                const struct frt_json_member *m = frt_json_get(o, keys[i]);
                if (m && m->type == FRT_JSON_STRING && strlen(m->str) >= sizeof m->str) __builtin_trap();
            }
        }
        free(o);
    }
    /* the loader on a bundle with this manifest */
    char mf[512];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    FILE *f = fopen(mf, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    flashrt_policy *p = flashrt_policy_load(dir, FLASHRT_FALLBACK_NONE, err, sizeof err);
    if (p) flashrt_policy_free(p);
    return 0;
}
