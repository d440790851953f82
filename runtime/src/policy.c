/* policy.c: loading a policy .so against its manifest, and the built-in baselines.
 *
 * Capabilities (flashml_policy.h): a bundle's policy.so exports the functions of the
 * capabilities its manifest lists (`capabilities`; a manifest without the field has admission
 * and prefetch). A loader asks for the capabilities it uses (frt_policy_load_for) and refuses
 * a bundle that lacks one, before loading its .so; flashrt_policy_load asks for admission and
 * prefetch. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "internal.h"
#include "policy_internal.h"
#include "readahead.h"

enum kind { K_SO, K_REJECTX, K_ADMITALL };

struct flashrt_policy {
    enum kind kind;
    char name[4200];
    void *dl;
    double (*admit_score)(const double *);
    void (*prefetch_range)(const double *, int32_t *, int32_t *);
    double (*when_score)(const double *);
    void (*prefetch_hint)(void); /* optional: flashml_policy_prefetch */
    int (*decide)(const double *, int32_t *, int32_t *); /* optional: flashml_policy_decide */
    /* optional: flashml_policy_decide_at, and the peak schedule it applies */
    int (*decide_at)(const double *, double, int32_t *, int32_t *);
    uint32_t peak_hours;
    double peak_bonus;
    double admit_threshold, when_threshold, target_wr, eviction_age;
    unsigned caps; /* FRT_CAP_*: what the policy was loaded for */
    struct frt_evict_fns evict;
    frt_partition_fn partition; /* capability "partition" */
    struct frt_readahead_fns readahead; /* capability "readahead" */
    /* RejectX: the keys of the last `hist` admission queries and their counts */
    uint64_t *ring;
    size_t hist, pos, len;
    struct frt_map counts;
};

static flashrt_policy *builtin(enum kind k) {
    flashrt_policy *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->kind = k;
    snprintf(p->name, sizeof p->name, "%s", k == K_REJECTX ? "rejectx" : "admitall");
    p->target_wr = p->eviction_age = NAN;
    return p;
}

flashrt_policy *flashrt_policy_builtin(const char *name, char *err, size_t errlen) {
    enum kind k;
    if (strcmp(name, "rejectx") == 0) k = K_REJECTX;
    else if (strcmp(name, "admitall") == 0) k = K_ADMITALL;
    else {
        frt_seterr(err, errlen, "unknown built-in policy '%s'; expected rejectx or admitall", name);
        return NULL;
    }
    flashrt_policy *p = builtin(k);
    if (!p) frt_seterr(err, errlen, "out of memory");
    return p;
}

static int read_small(const char *path, char **out, size_t *n, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
    char *buf = malloc(1 << 20);
    if (!buf) { fclose(f); return frt_seterr(err, errlen, "out of memory"); }
    size_t r = fread(buf, 1, (1 << 20) - 1, f);
    int big = !feof(f) && fgetc(f) != EOF;
    fclose(f);
    if (big) { free(buf); return frt_seterr(err, errlen, "%s: larger than 1 MiB", path); }
    buf[r] = 0;
    *out = buf;
    *n = r;
    return 0;
}

/* The top-level "capabilities" array of a manifest (already parsed as valid JSON) as FRT_CAP_*
 * bits and their names; unknown names are ignored. Without the field: admission + prefetch. */
static int manifest_caps(const char *t, size_t n, unsigned *caps, char *names, size_t names_len,
                         const char *mf, char *err, size_t errlen) {
    static const char KEY[] = "\"capabilities\"";
    int depth = 0;
    *caps = 0;
    names[0] = 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (c == '"') {
            size_t start = i;
            for (i++; i < n && t[i] != '"'; i++)
                if (t[i] == '\\') i++;
            /* a key at the top level: "capabilities" followed by ':' */
            if (depth != 1 || i - start + 1 != sizeof KEY - 1 || memcmp(t + start, KEY, sizeof KEY - 1) != 0)
                continue;
            size_t j = i + 1;
            while (j < n && (t[j] == ' ' || t[j] == '\t' || t[j] == '\n' || t[j] == '\r')) j++;
            if (j >= n || t[j] != ':') continue;
            for (j++; j < n && (t[j] == ' ' || t[j] == '\t' || t[j] == '\n' || t[j] == '\r'); j++) {}
            if (j >= n || t[j] != '[')
                return frt_seterr(err, errlen, "%s: refused: field 'capabilities': expected a list of names", mf);
            for (j++; j < n && t[j] != ']'; j++) {
                if (t[j] == ' ' || t[j] == ',' || t[j] == '\t' || t[j] == '\n' || t[j] == '\r') continue;
                if (t[j] != '"')
                    return frt_seterr(err, errlen, "%s: refused: field 'capabilities': expected a list of names", mf);
                size_t a = ++j;
                while (j < n && t[j] != '"') j++;
                size_t len = j - a;
                if (len == 9 && !memcmp(t + a, "admission", 9)) *caps |= FRT_CAP_ADMISSION;
                else if (len == 8 && !memcmp(t + a, "prefetch", 8)) *caps |= FRT_CAP_PREFETCH;
                else if (len == 8 && !memcmp(t + a, "eviction", 8)) *caps |= FRT_CAP_EVICTION;
                else if (len == 9 && !memcmp(t + a, "partition", 9)) *caps |= FRT_CAP_PARTITION;
                else if (len == 9 && !memcmp(t + a, "readahead", 9)) *caps |= FRT_CAP_READAHEAD;
                size_t used = strlen(names);
                if (used + len + 3 < names_len)
                    snprintf(names + used, names_len - used, "%s%.*s", used ? ", " : "", (int)len, t + a);
            }
            return 0;
        }
        if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
    }
    *caps = FRT_CAP_ADMISSION | FRT_CAP_PREFETCH;
    snprintf(names, names_len, "admission, prefetch");
    return 0;
}

static const char *cap_name(unsigned cap) {
    return cap == FRT_CAP_ADMISSION ? "admission" : cap == FRT_CAP_PREFETCH ? "prefetch" : cap == FRT_CAP_EVICTION ? "eviction"
         : cap == FRT_CAP_PARTITION ? "partition" : "readahead";
}

static void *sym(flashrt_policy *p, const char *so, const char *name, char *err, size_t errlen) {
    void *s = dlsym(p->dl, name);
    if (!s) frt_seterr(err, errlen, "%s: refused: not a flashml policy (no symbol %s)", so, name);
    return s;
}

static int bind_eviction(flashrt_policy *p, const char *so, const char *mf,
                         const char *manifest_hash, char *err, size_t errlen);
static int bind_partition(flashrt_policy *p, const char *so, const char *mf,
                          const char *manifest_hash, char *err, size_t errlen);
static int bind_readahead(flashrt_policy *p, const char *so, const char *mf,
                          const char *manifest_hash, char *err, size_t errlen);

/* Refuse a file that is not a whole 64-bit ELF shared object before it is dlopen()ed: a
 * truncated one can kill the process that maps it (SIGBUS), even when its manifest vouches
 * for its sha256. The checks of flashml's own loader (compiler/loader.py check_elf): the ELF
 * header, a shared object (ET_DYN), the program and section header tables inside the file,
 * every loadable segment (PT_LOAD) inside the file. */
static uint64_t le(const unsigned char *b, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = x << 8 | b[i];
    return x;
}

static int inside(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

static int check_elf(const char *so, char *err, size_t errlen) {
    FILE *f = fopen(so, "rb");
    if (!f) return frt_seterr(err, errlen, "%s: refused: cannot read it: %s", so, strerror(errno));
    struct stat st;
    unsigned char h[64];
    int rc = 0;
    if (fstat(fileno(f), &st) != 0) {
        rc = frt_seterr(err, errlen, "%s: refused: cannot read it: %s", so, strerror(errno));
        goto out;
    }
    const uint64_t size = (uint64_t)st.st_size;
    if (fread(h, 1, sizeof h, f) != sizeof h || memcmp(h, "\x7f" "ELF\x02\x01", 6) != 0) {
        rc = frt_seterr(err, errlen, "%s: refused: cannot load it: not a 64-bit ELF shared object; recompile the policy", so);
        goto out;
    }
    if (le(h + 16, 2) != 3) { /* ET_DYN */
        rc = frt_seterr(err, errlen, "%s: refused: cannot load it: an ELF file but not a shared object; recompile the policy", so);
        goto out;
    }
    const uint64_t phoff = le(h + 32, 8), shoff = le(h + 40, 8), phentsize = le(h + 54, 2),
                   phnum = le(h + 56, 2), shentsize = le(h + 58, 2), shnum = le(h + 60, 2);
    if (phentsize < 56 || !inside(phoff, phnum * phentsize, size) ||
        (shnum && !inside(shoff, shnum * shentsize, size))) {
        rc = frt_seterr(err, errlen, "%s: refused: cannot load it: truncated ELF file (%llu bytes); recompile the policy", so,
                        (unsigned long long)size);
        goto out;
    }
    for (uint64_t i = 0; i < phnum; i++) {
        unsigned char e[56];
        if (fseeko(f, (off_t)(phoff + i * phentsize), SEEK_SET) != 0 || fread(e, 1, sizeof e, f) != sizeof e) {
            rc = frt_seterr(err, errlen, "%s: refused: cannot read it: %s", so, ferror(f) ? strerror(errno) : "short read");
            goto out;
        }
        const uint64_t off = le(e + 8, 8), filesz = le(e + 32, 8);
        if (le(e, 4) == 1 && !inside(off, filesz, size)) { /* PT_LOAD past the end */
            rc = frt_seterr(err, errlen, "%s: refused: cannot load it: truncated ELF file (%llu bytes, a segment of %llu bytes at %llu); recompile the policy",
                            so, (unsigned long long)size, (unsigned long long)filesz, (unsigned long long)off);
            goto out;
        }
    }
out:
    fclose(f);
    return rc;
}

static flashrt_policy *load(const char *dir, unsigned need, char *err, size_t errlen) {
    char so[4096], mf[4096];
    snprintf(so, sizeof so, "%s/policy.so", dir);
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        frt_seterr(err, errlen, "%s: not a policy directory (%s)", dir,
                   errno && stat(dir, &st) != 0 ? strerror(errno) : "not a directory");
        return NULL;
    }
    char *text = NULL;
    size_t n = 0;
    if (read_small(mf, &text, &n, err, errlen) != 0) return NULL;
    struct frt_json_object m;
    char jerr[256], cap_names[256];
    unsigned have = 0;
    int bad = frt_json_parse_object(text, n, &m, jerr, sizeof jerr);
    if (bad) {
        free(text);
        frt_seterr(err, errlen, "%s: not valid JSON: %s", mf, jerr);
        return NULL;
    }
    bad = manifest_caps(text, n, &have, cap_names, sizeof cap_names, mf, err, errlen);
    free(text);
    if (bad) return NULL;
    const int adm = (need & (FRT_CAP_ADMISSION | FRT_CAP_PREFETCH)) != 0;
    const struct frt_json_member *abi = frt_json_get(&m, "abi_version"),
                                 *hash = frt_json_get(&m, "contract_hash"),
                                 *ehash = frt_json_get(&m, "evict_contract_hash"),
                                 *phash = frt_json_get(&m, "partition_contract_hash"),
                                 *rhash = frt_json_get(&m, "readahead_contract_hash"),
                                 *sha = frt_json_get(&m, "sha256");
    if (!abi || abi->type != FRT_JSON_NUMBER) { frt_seterr(err, errlen, "%s: field 'abi_version': missing or not a number", mf); return NULL; }
    if (!sha || sha->type != FRT_JSON_STRING) { frt_seterr(err, errlen, "%s: field 'sha256': missing or not a string", mf); return NULL; }
    for (unsigned cap = FRT_CAP_ADMISSION; cap <= FRT_CAP_READAHEAD; cap <<= 1) {
        if ((need & cap) && !(have & cap)) {
            frt_seterr(err, errlen, "%s: refused: the policy bundle has no %s capability (%s lists: %s); compile a bundle with %s", dir,
                       cap_name(cap), mf, cap_names[0] ? cap_names : "none",
                       cap == FRT_CAP_EVICTION ? "MAT's eviction model (evict.txt)" : cap == FRT_CAP_PARTITION ? "MLCache's partition network (partition.json; flashml mlcache run)"
                       : cap == FRT_CAP_READAHEAD ? "KML's readahead model (features/readahead.toml)" : "the admission models (admission.txt, range_start.txt, range_end.txt, when.txt)");
            return NULL;
        }
    }
    if (adm && (!hash || hash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'contract_hash': missing or not a string", mf); return NULL; }
    if ((need & FRT_CAP_EVICTION) && (!ehash || ehash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'evict_contract_hash': missing or not a string", mf); return NULL; }
    if ((need & FRT_CAP_PARTITION) && (!phash || phash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'partition_contract_hash': missing or not a string", mf); return NULL; }
    if ((need & FRT_CAP_READAHEAD) && (!rhash || rhash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'readahead_contract_hash': missing or not a string", mf); return NULL; }
    char hex[65];
    if (frt_sha256_file(so, hex, err, errlen) != 0) return NULL;
    if (strcasecmp(hex, sha->str) != 0) {
        frt_seterr(err, errlen, "%s: refused: its sha256 is %s but %s says %s", so, hex, mf, sha->str);
        return NULL;
    }
    if (abi->num != FLASHML_POLICY_ABI_VERSION) {
        frt_seterr(err, errlen, "%s: refused: field 'abi_version' is %g but this runtime speaks ABI %d", mf, abi->num, FLASHML_POLICY_ABI_VERSION);
        return NULL;
    }
    if (adm && strcasecmp(hash->str, FLASHML_POLICY_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'contract_hash' is %s but this runtime's feature contract is %s", mf, hash->str, FLASHML_POLICY_CONTRACT_HASH);
        return NULL;
    }
    if ((need & FRT_CAP_EVICTION) && strcasecmp(ehash->str, FLASHML_EVICT_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'evict_contract_hash' is %s but this runtime's eviction contract is %s", mf, ehash->str, FLASHML_EVICT_CONTRACT_HASH);
        return NULL;
    }
    if ((need & FRT_CAP_PARTITION) && strcasecmp(phash->str, FLASHML_PARTITION_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'partition_contract_hash' is %s but this runtime's partition contract is %s", mf, phash->str, FLASHML_PARTITION_CONTRACT_HASH);
        return NULL;
    }
    if ((need & FRT_CAP_READAHEAD) && strcasecmp(rhash->str, FLASHML_READAHEAD_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'readahead_contract_hash' is %s but this runtime's readahead contract is %s", mf, rhash->str, FLASHML_READAHEAD_CONTRACT_HASH);
        return NULL;
    }
    if (check_elf(so, err, errlen) != 0) return NULL;
    flashrt_policy *p = calloc(1, sizeof *p);
    if (!p) { frt_seterr(err, errlen, "out of memory"); return NULL; }
    p->kind = K_SO;
    p->caps = need;
    snprintf(p->name, sizeof p->name, "%s", so);
    p->dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *e = dlerror();
        frt_seterr(err, errlen, "%s: refused: cannot load it: %s", so, e ? e : "unknown error");
        free(p);
        return NULL;
    }
    int (*abi_fn)(void) = (int (*)(void))sym(p, so, "flashml_policy_abi_version", err, errlen);
    if (!abi_fn) goto refuse;
    if (abi_fn() != FLASHML_POLICY_ABI_VERSION) {
        frt_seterr(err, errlen, "%s: refused: it speaks ABI %d but this runtime speaks ABI %d", so, abi_fn(), FLASHML_POLICY_ABI_VERSION);
        goto refuse;
    }
    if ((need & FRT_CAP_EVICTION) && bind_eviction(p, so, mf, ehash->str, err, errlen) != 0) goto refuse;
    if ((need & FRT_CAP_PARTITION) && bind_partition(p, so, mf, phash->str, err, errlen) != 0) goto refuse;
    if ((need & FRT_CAP_READAHEAD) && bind_readahead(p, so, mf, rhash->str, err, errlen) != 0) goto refuse;
    if (!adm) {
        p->target_wr = p->eviction_age = NAN;
        return p;
    }
    int (*nf_fn)(void) = abi_fn ? (int (*)(void))sym(p, so, "flashml_policy_num_features", err, errlen) : NULL;
    const char *(*hash_fn)(void) = nf_fn ? (const char *(*)(void))sym(p, so, "flashml_policy_contract_hash", err, errlen) : NULL;
    double (*at)(void) = hash_fn ? (double (*)(void))sym(p, so, "flashml_admit_threshold", err, errlen) : NULL;
    double (*wt)(void) = at ? (double (*)(void))sym(p, so, "flashml_prefetch_when_threshold", err, errlen) : NULL;
    double (*wr)(void) = wt ? (double (*)(void))sym(p, so, "flashml_target_write_rate_mbps", err, errlen) : NULL;
    double (*ea)(void) = wr ? (double (*)(void))sym(p, so, "flashml_eviction_age_s", err, errlen) : NULL;
    if (ea) p->admit_score = (double (*)(const double *))sym(p, so, "flashml_admit_score", err, errlen);
    if (p->admit_score) p->prefetch_range = (void (*)(const double *, int32_t *, int32_t *))sym(p, so, "flashml_prefetch_range", err, errlen);
    if (p->prefetch_range) p->when_score = (double (*)(const double *))sym(p, so, "flashml_prefetch_when_score", err, errlen);
    if (!p->when_score) goto refuse;
    {   /* optional (bundles built before it existed lack it) */
        void *h = dlsym(p->dl, "flashml_policy_prefetch");
        memcpy(&p->prefetch_hint, &h, sizeof h);
        void *d = dlsym(p->dl, "flashml_policy_decide");
        memcpy(&p->decide, &d, sizeof d);
        void *da = dlsym(p->dl, "flashml_policy_decide_at");
        memcpy(&p->decide_at, &da, sizeof da);
        void *ph = dlsym(p->dl, "flashml_admit_peak_hours");
        void *pb = dlsym(p->dl, "flashml_admit_peak_bonus");
        if (ph && pb) {
            uint32_t (*hours)(void);
            double (*bonus)(void);
            memcpy(&hours, &ph, sizeof ph);
            memcpy(&bonus, &pb, sizeof pb);
            p->peak_hours = hours();
            p->peak_bonus = bonus();
            if (p->peak_hours >> 24 || !(p->peak_bonus >= 0.0 && p->peak_bonus <= 1.0)) {
                frt_seterr(err, errlen, "%s: refused: bad peak schedule (hours %#x, bonus %g)", so,
                           (unsigned)p->peak_hours, p->peak_bonus);
                goto refuse;
            }
        }
    }
    if (nf_fn() != FLASHML_POLICY_NUM_FEATURES) {
        frt_seterr(err, errlen, "%s: refused: it reads %d features but the contract has %d", so, nf_fn(), FLASHML_POLICY_NUM_FEATURES);
        goto refuse;
    }
    const char *h = hash_fn();
    if (!h || strcasecmp(h, FLASHML_POLICY_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: its contract hash is %.80s but this runtime's is %s", so, h ? h : "(null)", FLASHML_POLICY_CONTRACT_HASH);
        goto refuse;
    }
    if (strcasecmp(h, hash->str) != 0) {
        frt_seterr(err, errlen, "%s: refused: its contract hash differs from %s", so, mf);
        goto refuse;
    }
    p->admit_threshold = at();
    p->when_threshold = wt();
    p->target_wr = wr();
    p->eviction_age = ea();
    return p;
refuse:
    dlclose(p->dl);
    free(p);
    return NULL;
}

/* The partition functions (capability "partition"), checked against this runtime's
 * partition contract and the manifest. */
static int bind_partition(flashrt_policy *p, const char *so, const char *mf,
                          const char *manifest_hash, char *err, size_t errlen) {
    static const char *const NAMES[] = {
        "flashml_partition_num_features", "flashml_partition_contract_hash",
        "flashml_partition_max_streams", "flashml_partition_steps", "flashml_partition"};
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

frt_partition_fn frt_policy_partition(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_PARTITION) ? p->partition : NULL;
}

/* The readahead functions (capability "readahead"), checked against this runtime's readahead
 * contract and the manifest. */
static int bind_readahead(flashrt_policy *p, const char *so, const char *mf,
                          const char *manifest_hash, char *err, size_t errlen) {
    static const char *const NAMES[] = {
        "flashml_readahead_num_features", "flashml_readahead_contract_hash",
        "flashml_readahead_window_ms", "flashml_readahead_kib"};
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

const struct frt_readahead_fns *frt_policy_readahead(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_READAHEAD) ? &p->readahead : NULL;
}

/* `*out` = the value of the optional `int name(void)` the .so exports, 0 without it; -1 when
 * the value is neither 0 nor 1. */
static int optional_flag(void *dl, const char *name, int *out) {
    *out = 0;
    void *sym = dlsym(dl, name);
    if (!sym) return 0;
    int (*fn)(void);
    memcpy(&fn, &sym, sizeof fn);
    *out = fn();
    return *out == 0 || *out == 1 ? 0 : -1;
}

/* The eviction functions (capability "eviction"), checked against this runtime's eviction
 * contract and the manifest. */
static int bind_eviction(flashrt_policy *p, const char *so, const char *mf,
                         const char *manifest_hash, char *err, size_t errlen) {
    static const char *const NAMES[] = {
        "flashml_evict_num_features", "flashml_evict_contract_hash", "flashml_evict_predict",
        "flashml_evict_predict_batch", "flashml_evict_k", "flashml_evict_max_candidates",
        "flashml_evict_delta", "flashml_evict_initial_threshold", "flashml_evict_memory_window"};
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
    if (!(p->evict.max_candidates >= 1 && p->evict.k >= 1.0 && p->evict.k <= p->evict.max_candidates &&
          p->evict.delta > 0.0 && p->evict.delta < 1.0 && p->evict.initial_threshold >= 0.0 &&
          p->evict.memory_window >= 1))
        return frt_seterr(err, errlen, "%s: refused: bad eviction parameters (k %g, max candidates %d, delta %g, initial threshold %g, memory window %lld)", so,
                          p->evict.k, p->evict.max_candidates, p->evict.delta, p->evict.initial_threshold, (long long)p->evict.memory_window);
    /* optional (bundles built before them lack them: the paper's sign controller, a
     * prediction per candidate) */
    if (optional_flag(p->dl, "flashml_evict_controller", &p->evict.controller) != 0)
        return frt_seterr(err, errlen, "%s: refused: bad eviction controller %d (0 sign, 1 mean)", so, p->evict.controller);
    if (optional_flag(p->dl, "flashml_evict_reuse_predictions", &p->evict.reuse_predictions) != 0)
        return frt_seterr(err, errlen, "%s: refused: bad flashml_evict_reuse_predictions %d (0 off, 1 on)", so, p->evict.reuse_predictions);
    return 0;
}

flashrt_policy *frt_policy_load_for(const char *dir, unsigned need, char *err, size_t errlen) {
    if (need == 0 || (need & ~(unsigned)(FRT_CAP_ADMISSION | FRT_CAP_PREFETCH | FRT_CAP_EVICTION | FRT_CAP_PARTITION | FRT_CAP_READAHEAD))) {
        frt_seterr(err, errlen, "internal: bad capability set %#x", need);
        return NULL;
    }
    return load(dir, need, err, errlen);
}

unsigned frt_policy_caps(const flashrt_policy *p) { return p->kind == K_SO ? p->caps : 0; }

const struct frt_evict_fns *frt_policy_evict(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_EVICTION) ? &p->evict : NULL;
}

flashrt_policy *flashrt_policy_load(const char *dir, enum flashrt_fallback fallback, char *err,
                                    size_t errlen) {
    flashrt_policy *p = load(dir, FRT_CAP_ADMISSION | FRT_CAP_PREFETCH, err, errlen);
    if (p || fallback != FLASHRT_FALLBACK_REJECTX) return p;
    p = builtin(K_REJECTX);
    if (!p) frt_seterr(err, errlen, "out of memory");
    return p;
}

const char *flashrt_policy_name(const flashrt_policy *p) { return p->name; }
double flashrt_policy_target_write_rate_mbps(const flashrt_policy *p) { return p->target_wr; }

void flashrt_policy_free(flashrt_policy *p) {
    if (!p) return;
    if (p->dl) dlclose(p->dl);
    free(p->ring);
    if (p->counts.cap) frt_map_free(&p->counts);
    free(p);
}

int frt_policy_prepare(flashrt_policy *p, uint64_t capacity_segments, char *err, size_t errlen) {
    if (p->kind != K_REJECTX) return 0;
    size_t hist = (size_t)floor(2.0 * (double)capacity_segments);
    if (hist < 1) hist = 1;
    free(p->ring);
    if (p->counts.cap) frt_map_free(&p->counts);
    p->ring = malloc(hist * sizeof *p->ring);
    if (!p->ring || frt_map_init(&p->counts, hist < 1024 ? hist : 1024) != 0)
        return frt_seterr(err, errlen, "out of memory");
    p->hist = hist;
    p->pos = p->len = 0;
    return 0;
}

int frt_policy_wants_features(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_ADMISSION);
}

/* The admission threshold at trace time t: flashml_policy.h's peak rule (the same
 * expression as sim/src/config.rs PeakSchedule::threshold_at). */
static double threshold_at(const flashrt_policy *p, double t) {
    if (p->peak_hours == 0u) return p->admit_threshold;
    double r = fmod(t, 86400.0);
    if (r < 0.0) r += 86400.0;
    unsigned h = (unsigned)(r / 3600.0);
    return h < 24u && ((p->peak_hours >> h) & 1u) ? p->admit_threshold - p->peak_bonus
                                                   : p->admit_threshold;
}

static int admit(flashrt_policy *p, uint64_t key, double t, const double *f) {
    switch (p->kind) {
    case K_SO: /* a policy loaded for eviction only admits everything */
        return !p->admit_score || p->admit_score(f) >= threshold_at(p, t);
    case K_ADMITALL:
        return 1;
    case K_REJECTX: {
        /* as sim/src/admission.rs: admit iff the key was queried at least X=1 times before
         * within the last `hist` queries */
        if (p->len < p->hist) {
            p->ring[p->len++] = key;
        } else {
            uint64_t old = p->ring[p->pos];
            p->ring[p->pos] = key;
            if (++p->pos == p->hist) p->pos = 0;
            uint32_t *c = frt_map_get(&p->counts, old);
            if (c && --*c == 0) frt_map_del(&p->counts, old);
        }
        uint32_t *c = frt_map_get(&p->counts, key);
        uint32_t v = c ? *c + 1 : 1;
        frt_map_put(&p->counts, key, v);
        return v > 1;
    }
    }
    return 0;
}

int frt_policy_decide(flashrt_policy *p, uint64_t key, double t, const double *f, int32_t *lo,
                      int32_t *hi) {
    if (p->decide_at) return p->decide_at(f, t, lo, hi);
    if (p->decide && p->peak_hours == 0u) return p->decide(f, lo, hi);
    if (!admit(p, key, t, f)) return 0;
    if (p->kind != K_SO || !p->when_score || !(p->when_score(f) >= p->when_threshold)) return FLASHML_DECIDE_ADMIT;
    p->prefetch_range(f, lo, hi);
    return FLASHML_DECIDE_ADMIT | FLASHML_DECIDE_PREFETCH;
}

int frt_policy_warm(const flashrt_policy *p) {
    if (p->kind != K_SO || !p->prefetch_hint) return 0;
    p->prefetch_hint();
    return 1;
}
