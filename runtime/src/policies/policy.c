/* policy.c: loading a policy .so against its manifest: the bundle's files opened and read
 * once, the manifest's capabilities, ABI and contract hashes against this runtime, the .so's
 * bytes verified (size, sha256, ELF headers) and mapped from a sealed memfd, its admission and
 * prefetch functions and the values it reports; the public accessors of a loaded policy; the
 * built-in admission policies by name (their code is the admission slot's,
 * policies/admission/). Reading and checking manifest.json is policy_manifest.c's; binding
 * the partition and readahead functions policy_bind.c's, the eviction ones (MAT's)
 * mat/mat_bind.c's (policy_loader.h).
 *
 * Capabilities (flashml_policy.h): a bundle's policy.so exports the functions of the
 * capabilities its manifest lists (`capabilities`; a manifest without the field has admission
 * and prefetch). A loader asks for the capabilities it uses (frt_policy_load_for) and refuses
 * a bundle that lacks one, before loading its .so; flashrt_policy_load asks for admission and
 * prefetch. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "policies/policy_internal.h"
#include "policies/policy_loader.h"

/* A built-in admission policy: a name the admission slot's table knows (not "bundle"). */
static flashrt_policy *builtin(const char *name) {
    flashrt_policy *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->kind = K_BUILTIN;
    p->memfd = -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->target_wr = p->eviction_age = NAN;
    return p;
}

flashrt_policy *flashrt_policy_builtin(const char *name, char *err, size_t errlen) {
    int which = flashrt_admission_from_name(name);
    if (which < 0 || which == FLASHRT_ADMIT_BUNDLE) {
        frt_seterr(err, errlen, "unknown built-in policy '%s'; expected admitall, rejectx, rejectx_block or coinflip", name);
        return NULL;
    }
    flashrt_policy *p = builtin(name);
    if (!p) frt_seterr(err, errlen, "out of memory");
    return p;
}

const char *frt_policy_builtin_name(const flashrt_policy *p) { return p->kind == K_BUILTIN ? p->name : NULL; }

/* ---- the bundle's files: opened once, read once, verified, then mapped from memory ---- */

const char *frt_file_kind(unsigned mode) {
    return S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISDIR(mode) ? "a directory" : S_ISLNK(mode) ? "a symbolic link"
         : S_ISREG(mode) ? "a regular file" : "not a regular file";
}

/* `name` inside the bundle directory dfd (shown as `path`): opened once, without following a
 * link and without blocking (a FIFO), and only a regular file of at most `max` bytes. */
int frt_bundle_open_member(int dfd, const char *path, const char *name, uint64_t max, uint64_t *size,
                           char *err, size_t errlen) {
    struct stat st;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP) /* O_NOFOLLOW met a symbolic link */
            return frt_seterr(err, errlen, "%s: refused: it is a symbolic link, not a regular file (a bundle's files are read once, from regular files)", path);
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
            return frt_seterr(err, errlen, "%s: refused: it is %s, not a regular file (a bundle's files are read once, from regular files)",
                              path, frt_file_kind(st.st_mode));
        return frt_seterr(err, errlen, "%s: cannot open: %s", path, strerror(e));
    }
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return frt_seterr(err, errlen, "%s: cannot read it: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return frt_seterr(err, errlen, "%s: refused: it is %s, not a regular file (a bundle's files are read once, from regular files)",
                          path, frt_file_kind(st.st_mode));
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return frt_seterr(err, errlen, "%s: refused: %llu bytes, more than the %llu bytes this file of a bundle may have", path,
                          (unsigned long long)st.st_size, (unsigned long long)max);
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

/* Exactly n bytes from the start of fd; refused when the file shrank or grew meanwhile. */
int frt_bundle_read_member(int fd, const char *path, unsigned char *buf, uint64_t n, char *err, size_t errlen) {
    uint64_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, (size_t)(n - got), (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return frt_seterr(err, errlen, "%s: cannot read it: %s", path, strerror(errno));
        if (r == 0) return frt_seterr(err, errlen, "%s: refused: it changed while being read (%llu of %llu bytes)", path,
                                      (unsigned long long)got, (unsigned long long)n);
        got += (uint64_t)r;
    }
    unsigned char extra;
    ssize_t r = pread(fd, &extra, 1, (off_t)n);
    if (r != 0) return frt_seterr(err, errlen, "%s: refused: it changed while being read (more than %llu bytes)", path, (unsigned long long)n);
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

/* Refuse bytes that are not a whole 64-bit ELF shared object before they are mapped: a
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

static int check_elf(const char *so, const unsigned char *b, uint64_t size, char *err, size_t errlen) {
    if (size < 64 || memcmp(b, "\x7f" "ELF\x02\x01", 6) != 0)
        return frt_seterr(err, errlen, "%s: refused: cannot load it: not a 64-bit ELF shared object; recompile the policy", so);
    if (le(b + 16, 2) != 3) /* ET_DYN */
        return frt_seterr(err, errlen, "%s: refused: cannot load it: an ELF file but not a shared object; recompile the policy", so);
    const uint64_t phoff = le(b + 32, 8), shoff = le(b + 40, 8), phentsize = le(b + 54, 2),
                   phnum = le(b + 56, 2), shentsize = le(b + 58, 2), shnum = le(b + 60, 2);
    if (phentsize < 56 || !inside(phoff, phnum * phentsize, size) || (shnum && !inside(shoff, shnum * shentsize, size)))
        return frt_seterr(err, errlen, "%s: refused: cannot load it: truncated ELF file (%llu bytes); recompile the policy", so,
                          (unsigned long long)size);
    for (uint64_t i = 0; i < phnum; i++) {
        const unsigned char *e = b + phoff + i * phentsize;
        const uint64_t off = le(e + 8, 8), filesz = le(e + 32, 8);
        if (le(e, 4) == 1 && !inside(off, filesz, size)) /* PT_LOAD past the end */
            return frt_seterr(err, errlen, "%s: refused: cannot load it: truncated ELF file (%llu bytes, a segment of %llu bytes at %llu); recompile the policy",
                              so, (unsigned long long)size, (unsigned long long)filesz, (unsigned long long)off);
    }
    return 0;
}

/* The verified bytes in a sealed memfd (no one can change them after the seal), mapped with
 * dlopen("/proc/self/fd/N"). The memfd stays open while the policy is loaded: its number is the
 * name the dynamic loader knows the library by, so no other load can reuse it meanwhile. */
static int map_sealed(flashrt_policy *p, const char *so, const unsigned char *b, uint64_t size, char *err, size_t errlen) {
    int fd = -1;
#ifdef MFD_EXEC /* kernels with vm.memfd_noexec: ask for an executable memfd (older ones: EINVAL) */
    fd = memfd_create("flashml-policy", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
#endif
    if (fd < 0) fd = memfd_create("flashml-policy", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return frt_seterr(err, errlen, "%s: refused: cannot load it: memfd_create: %s", so, strerror(errno));
    uint64_t put = 0;
    while (put < size) {
        ssize_t w = write(fd, b + put, (size_t)(size - put));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            return frt_seterr(err, errlen, "%s: refused: cannot load it: writing its memfd: %s", so, strerror(e));
        }
        put += (uint64_t)w;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(fd);
        return frt_seterr(err, errlen, "%s: refused: cannot load it: sealing its memfd: %s", so, strerror(e));
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *e = dlerror();
        close(fd);
        return frt_seterr(err, errlen, "%s: refused: cannot load it: %s", so, e ? e : "unknown error");
    }
    p->memfd = fd;
    return 0;
}

/* A value the .so reports: finite and within [lo, hi] (lo excluded when open_lo). */
static int check_value(const char *so, const char *fn, double v, double lo, int open_lo, double hi, const char *unit,
                       char *err, size_t errlen) {
    if (isfinite(v) && (open_lo ? v > lo : v >= lo) && v <= hi) return 0;
    if (hi == DBL_MAX && lo == -DBL_MAX)
        return frt_seterr(err, errlen, "%s: refused: %s() returned %g: expected a finite number", so, fn, v);
    if (hi == DBL_MAX)
        return frt_seterr(err, errlen, "%s: refused: %s() returned %g: expected a finite number %s %g%s%s", so, fn, v,
                          open_lo ? ">" : ">=", lo, unit[0] ? " " : "", unit);
    return frt_seterr(err, errlen, "%s: refused: %s() returned %g: expected a number in %s%g, %g]%s%s", so, fn, v,
                      open_lo ? "(" : "[", lo, hi, unit[0] ? " " : "", unit);
}

static flashrt_policy *load(const char *dir, unsigned need, char *err, size_t errlen) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dfd < 0) {
        frt_seterr(err, errlen, "%s: not a policy directory (%s)", dir, strerror(errno));
        return NULL;
    }
    char so[4200], mf[4200];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    const int as_listed = (need & FRT_CAP_AS_LISTED) != 0;
    need &= ~(unsigned)FRT_CAP_AS_LISTED;
    /* the system the command serves: the one a manifest's optional `system` must name */
    const char *system = as_listed ? NULL : (need & FRT_CAP_EVICTION) ? "mat" : (need & FRT_CAP_PARTITION) ? "mlcache"
                       : (need & FRT_CAP_READAHEAD) ? "kml" : "baleen";
    struct frt_manifest *man = malloc(sizeof *man);
    flashrt_policy *p = NULL;
    unsigned char *bytes = NULL;
    int sofd = -1;
    if (!man) { frt_seterr(err, errlen, "out of memory"); goto fail; }
    if (frt_manifest_read(dfd, dir, system, man, NULL, NULL, err, errlen) != 0) goto fail;
    if (as_listed) need = man->caps;
    if (!man->has_so) {
        frt_seterr(err, errlen, "%s: refused: the bundle has no policy .so (capabilities []: a knobs-only bundle)", dir);
        goto fail;
    }
    const unsigned have = man->caps;
    const char *cap_names = man->cap_names;
    const struct frt_json_object *m = &man->obj;
    const int adm = (need & (FRT_CAP_ADMISSION | FRT_CAP_PREFETCH)) != 0;
    const struct frt_json_member *abi = frt_json_get(m, "abi_version"),
                                 *hash = frt_json_get(m, "contract_hash"),
                                 *ehash = frt_json_get(m, "evict_contract_hash"),
                                 *phash = frt_json_get(m, "partition_contract_hash"),
                                 *rhash = frt_json_get(m, "readahead_contract_hash");
    for (unsigned cap = FRT_CAP_ADMISSION; cap <= FRT_CAP_READAHEAD; cap <<= 1) {
        if ((need & cap) && !(have & cap)) {
            frt_seterr(err, errlen, "%s: refused: the policy bundle has no %s capability (%s lists: %s); compile a bundle with %s", dir,
                       cap_name(cap), mf, cap_names[0] ? cap_names : "none",
                       cap == FRT_CAP_EVICTION ? "MAT's eviction model (evict.txt)" : cap == FRT_CAP_PARTITION ? "MLCache's partition network (partition.json; flashml mlcache run)"
                       : cap == FRT_CAP_READAHEAD ? "KML's readahead model (readahead.json; flashml kml run)" : "the admission models");
            goto fail;
        }
    }
    if (adm && (!hash || hash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'contract_hash': missing or not a string", mf); goto fail; }
    if ((need & FRT_CAP_EVICTION) && (!ehash || ehash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'evict_contract_hash': missing or not a string", mf); goto fail; }
    if ((need & FRT_CAP_PARTITION) && (!phash || phash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'partition_contract_hash': missing or not a string", mf); goto fail; }
    if ((need & FRT_CAP_READAHEAD) && (!rhash || rhash->type != FRT_JSON_STRING)) { frt_seterr(err, errlen, "%s: field 'readahead_contract_hash': missing or not a string", mf); goto fail; }
    if (abi->num != FLASHML_POLICY_ABI_VERSION) {
        frt_seterr(err, errlen, "%s: refused: field 'abi_version' is %g but this runtime speaks ABI %d", mf, abi->num, FLASHML_POLICY_ABI_VERSION);
        goto fail;
    }
    if (adm && strcasecmp(hash->str, FLASHML_POLICY_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'contract_hash' is %s but this runtime's feature contract is %s", mf, hash->str, FLASHML_POLICY_CONTRACT_HASH);
        goto fail;
    }
    if ((need & FRT_CAP_EVICTION) && strcasecmp(ehash->str, FLASHML_EVICT_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'evict_contract_hash' is %s but this runtime's eviction contract is %s", mf, ehash->str, FLASHML_EVICT_CONTRACT_HASH);
        goto fail;
    }
    if ((need & FRT_CAP_PARTITION) && strcasecmp(phash->str, FLASHML_PARTITION_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'partition_contract_hash' is %s but this runtime's partition contract is %s", mf, phash->str, FLASHML_PARTITION_CONTRACT_HASH);
        goto fail;
    }
    if ((need & FRT_CAP_READAHEAD) && strcasecmp(rhash->str, FLASHML_READAHEAD_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: field 'readahead_contract_hash' is %s but this runtime's readahead contract is %s", mf, rhash->str, FLASHML_READAHEAD_CONTRACT_HASH);
        goto fail;
    }
    /* the .so: one descriptor, its bytes read once; size, sha256 and ELF checks on those bytes,
     * and exactly those bytes mapped */
    snprintf(so, sizeof so, "%s/%s", dir, man->so_name);
    uint64_t size = 0;
    if ((sofd = frt_bundle_open_member(dfd, so, man->so_name, SO_MAX, &size, err, errlen)) < 0) goto fail;
    if (size != man->size_bytes) {
        frt_seterr(err, errlen, "%s: refused: it has %llu bytes but %s field 'size_bytes' says %llu", so, (unsigned long long)size, mf,
                   (unsigned long long)man->size_bytes);
        goto fail;
    }
    if (!(bytes = malloc(size ? (size_t)size : 1))) { frt_seterr(err, errlen, "out of memory"); goto fail; }
    if (frt_bundle_read_member(sofd, so, bytes, size, err, errlen) != 0) goto fail;
    close(sofd);
    sofd = -1;
    uint8_t digest[32];
    char hex[65];
    frt_sha256(bytes, (size_t)size, digest);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    if (strcmp(hex, man->sha256) != 0) {
        frt_seterr(err, errlen, "%s: refused: its sha256 is %s but %s says %s", so, hex, mf, man->sha256);
        goto fail;
    }
    if (check_elf(so, bytes, size, err, errlen) != 0) goto fail;
    if (!(p = calloc(1, sizeof *p))) { frt_seterr(err, errlen, "out of memory"); goto fail; }
    p->kind = K_SO;
    p->caps = need;
    p->memfd = -1;
    p->listed = have;
    snprintf(p->cap_names, sizeof p->cap_names, "%s", cap_names);
    memcpy(p->sha256, hex, sizeof hex);
    p->size_bytes = size;
    snprintf(p->name, sizeof p->name, "%s", so);
    if (map_sealed(p, so, bytes, size, err, errlen) != 0) goto fail;
    free(bytes);
    bytes = NULL;
    int (*abi_fn)(void) = (int (*)(void))sym(p, so, FLASHML_SYM_POLICY_ABI_VERSION, err, errlen);
    if (!abi_fn) goto fail;
    if (abi_fn() != FLASHML_POLICY_ABI_VERSION) {
        frt_seterr(err, errlen, "%s: refused: it speaks ABI %d but this runtime speaks ABI %d", so, abi_fn(), FLASHML_POLICY_ABI_VERSION);
        goto fail;
    }
    {   /* the .so exports the functions of every capability its manifest lists (not only the
         * ones this command uses) */
        static const char *const ADMISSION[] = {FLASHML_REQUIRED_ADMISSION, NULL};
        static const char *const PREFETCH[] = {FLASHML_REQUIRED_PREFETCH, NULL};
        static const char *const PARTITION[] = {FLASHML_REQUIRED_PARTITION, NULL};
        static const char *const READAHEAD[] = {FLASHML_REQUIRED_READAHEAD, NULL};
        static const char *const *const REQUIRED[] = {ADMISSION, PREFETCH, frt_policy_eviction_functions, PARTITION,
                                                      READAHEAD};
        for (unsigned k = 0; k < 5; k++) {
            if (!(have & (1u << k))) continue;
            for (unsigned j = 0; REQUIRED[k][j]; j++)
                if (!dlsym(p->dl, REQUIRED[k][j])) {
                    frt_seterr(err, errlen, "%s: refused: %s lists the %s capability but the .so has no symbol %s", so, mf, frt_policy_cap_names[k],
                               REQUIRED[k][j]);
                    goto fail;
                }
        }
    }
    if ((need & FRT_CAP_EVICTION) && frt_policy_bind_eviction(p, so, mf, ehash->str, err, errlen) != 0) goto fail;
    if ((need & FRT_CAP_PARTITION) && frt_policy_bind_partition(p, so, mf, phash->str, err, errlen) != 0) goto fail;
    if ((need & FRT_CAP_READAHEAD) && frt_policy_bind_readahead(p, so, mf, rhash->str, err, errlen) != 0) goto fail;
    if (!adm) {
        p->target_wr = p->eviction_age = NAN;
        goto done;
    }
    int (*nf_fn)(void) = (int (*)(void))sym(p, so, FLASHML_SYM_POLICY_NUM_FEATURES, err, errlen);
    const char *(*hash_fn)(void) = nf_fn ? (const char *(*)(void))sym(p, so, FLASHML_SYM_POLICY_CONTRACT_HASH, err, errlen) : NULL;
    double (*at)(void) = hash_fn ? (double (*)(void))sym(p, so, FLASHML_SYM_ADMIT_THRESHOLD, err, errlen) : NULL;
    double (*wt)(void) = at ? (double (*)(void))sym(p, so, FLASHML_SYM_PREFETCH_WHEN_THRESHOLD, err, errlen) : NULL;
    double (*wr)(void) = wt ? (double (*)(void))sym(p, so, FLASHML_SYM_TARGET_WRITE_RATE_MBPS, err, errlen) : NULL;
    double (*ea)(void) = wr ? (double (*)(void))sym(p, so, FLASHML_SYM_EVICTION_AGE_S, err, errlen) : NULL;
    if (ea) p->admit_score = (double (*)(const double *))sym(p, so, FLASHML_SYM_ADMIT_SCORE, err, errlen);
    if (p->admit_score) p->prefetch_range = (void (*)(const double *, int32_t *, int32_t *))sym(p, so, FLASHML_SYM_PREFETCH_RANGE, err, errlen);
    if (p->prefetch_range) p->when_score = (double (*)(const double *))sym(p, so, FLASHML_SYM_PREFETCH_WHEN_SCORE, err, errlen);
    if (!p->when_score) goto fail;
    {   /* optional (bundles built before it existed lack it) */
        void *h = dlsym(p->dl, FLASHML_SYM_POLICY_PREFETCH);
        memcpy(&p->prefetch_hint, &h, sizeof h);
        void *d = dlsym(p->dl, FLASHML_SYM_POLICY_DECIDE);
        memcpy(&p->decide, &d, sizeof d);
        void *da = dlsym(p->dl, FLASHML_SYM_POLICY_DECIDE_AT);
        memcpy(&p->decide_at, &da, sizeof da);
        void *ph = dlsym(p->dl, FLASHML_SYM_ADMIT_PEAK_HOURS);
        void *pb = dlsym(p->dl, FLASHML_SYM_ADMIT_PEAK_BONUS);
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
                goto fail;
            }
        }
    }
    if (nf_fn() != FLASHML_POLICY_NUM_FEATURES) {
        frt_seterr(err, errlen, "%s: refused: it reads %d features but the contract has %d", so, nf_fn(), FLASHML_POLICY_NUM_FEATURES);
        goto fail;
    }
    const char *h = hash_fn();
    if (!h || strcasecmp(h, FLASHML_POLICY_CONTRACT_HASH) != 0) {
        frt_seterr(err, errlen, "%s: refused: its contract hash is %.80s but this runtime's is %s", so, h ? h : "(null)", FLASHML_POLICY_CONTRACT_HASH);
        goto fail;
    }
    if (strcasecmp(h, hash->str) != 0) {
        frt_seterr(err, errlen, "%s: refused: its contract hash differs from %s", so, mf);
        goto fail;
    }
    p->admit_threshold = at();
    p->when_threshold = wt();
    p->target_wr = wr();
    p->eviction_age = ea();
    if (check_value(so, FLASHML_SYM_ADMIT_THRESHOLD, p->admit_threshold, 0.0, 0, 1.0, "", err, errlen) ||
        check_value(so, FLASHML_SYM_PREFETCH_WHEN_THRESHOLD, p->when_threshold, 0.0, 0, 1.0, "", err, errlen) ||
        check_value(so, FLASHML_SYM_TARGET_WRITE_RATE_MBPS, p->target_wr, 0.0, 1, DBL_MAX, "MB/s", err, errlen) ||
        check_value(so, FLASHML_SYM_EVICTION_AGE_S, p->eviction_age, 0.0, 1, DBL_MAX, "s", err, errlen))
        goto fail;
done:
    free(man);
    close(dfd);
    return p;
fail:
    if (sofd >= 0) close(sofd);
    free(bytes);
    free(man);
    close(dfd);
    if (p) {
        if (p->dl) dlclose(p->dl);
        if (p->memfd >= 0) close(p->memfd);
        free(p);
    }
    return NULL;
}

flashrt_policy *frt_policy_load_for(const char *dir, unsigned need, char *err, size_t errlen) {
    if ((need == 0 && need != FRT_CAP_AS_LISTED) ||
        (need & ~(unsigned)(FRT_CAP_ADMISSION | FRT_CAP_PREFETCH | FRT_CAP_EVICTION | FRT_CAP_PARTITION | FRT_CAP_READAHEAD | FRT_CAP_AS_LISTED))) {
        frt_seterr(err, errlen, "internal: bad capability set %#x", need);
        return NULL;
    }
    return load(dir, need, err, errlen);
}

unsigned frt_policy_caps(const flashrt_policy *p) { return p->kind == K_SO ? p->caps : 0; }

const char *frt_policy_listed(const flashrt_policy *p) { return p->kind == K_SO ? p->cap_names : ""; }
const char *frt_policy_sha256(const flashrt_policy *p) { return p->kind == K_SO ? p->sha256 : ""; }
uint64_t frt_policy_size_bytes(const flashrt_policy *p) { return p->kind == K_SO ? p->size_bytes : 0; }

frt_partition_fn frt_policy_partition(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_PARTITION) ? p->partition : NULL;
}

const struct frt_readahead_fns *frt_policy_readahead(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_READAHEAD) ? &p->readahead : NULL;
}

const struct frt_evict_fns *frt_policy_evict(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_EVICTION) ? &p->evict : NULL;
}

flashrt_policy *flashrt_policy_load(const char *dir, enum flashrt_fallback fallback, char *err,
                                    size_t errlen) {
    flashrt_policy *p = load(dir, FRT_CAP_ADMISSION | FRT_CAP_PREFETCH, err, errlen);
    if (p || fallback != FLASHRT_FALLBACK_REJECTX) return p;
    p = builtin("rejectx");
    if (!p) frt_seterr(err, errlen, "out of memory");
    return p;
}

const char *flashrt_policy_name(const flashrt_policy *p) { return p->name; }
double flashrt_policy_target_write_rate_mbps(const flashrt_policy *p) { return p->target_wr; }

void flashrt_policy_free(flashrt_policy *p) {
    if (!p) return;
    if (p->dl) dlclose(p->dl);
    if (p->memfd >= 0) close(p->memfd);
    free(p);
}

int frt_policy_wants_features(const flashrt_policy *p) {
    return p->kind == K_SO && (p->caps & FRT_CAP_ADMISSION);
}

/* The admission threshold at trace time t: flashml_policy.h's peak rule (the same
 * expression as sim/src/core/config.rs PeakSchedule::threshold_at). */
static double threshold_at(const flashrt_policy *p, double t) {
    if (p->peak_hours == 0u) return p->admit_threshold;
    double r = fmod(t, 86400.0);
    if (r < 0.0) r += 86400.0;
    unsigned h = (unsigned)(r / 3600.0);
    return h < 24u && ((p->peak_hours >> h) & 1u) ? p->admit_threshold - p->peak_bonus
                                                   : p->admit_threshold;
}

/* A bundle's admission at trace time t (one loaded for eviction only admits everything). */
static int admit(const flashrt_policy *p, double t, const double *f) {
    return !p->admit_score || p->admit_score(f) >= threshold_at(p, t);
}

int frt_policy_decide(flashrt_policy *p, double t, const double *f, int32_t *lo, int32_t *hi) {
    if (p->decide_at) return p->decide_at(f, t, lo, hi);
    if (p->decide && p->peak_hours == 0u) return p->decide(f, lo, hi);
    if (p->kind != K_SO) return FLASHML_DECIDE_ADMIT;
    if (!admit(p, t, f)) return 0;
    if (!p->when_score || !(p->when_score(f) >= p->when_threshold)) return FLASHML_DECIDE_ADMIT;
    p->prefetch_range(f, lo, hi);
    return FLASHML_DECIDE_ADMIT | FLASHML_DECIDE_PREFETCH;
}

int frt_policy_warm(const flashrt_policy *p) {
    if (p->kind != K_SO || !p->prefetch_hint) return 0;
    p->prefetch_hint();
    return 1;
}
