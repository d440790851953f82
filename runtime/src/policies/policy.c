/* policy.c: loading a policy .so against its manifest; the built-in admission policies by
 * name (their code is the admission slot's, policies/admission/).
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
#include "policies/eviction/mat_alg.h"
#include "policies/eviction/mat_settings.h"
#include "policies/readahead/readahead.h"

enum kind { K_SO, K_BUILTIN };

struct flashrt_policy {
    enum kind kind;
    char name[4200];
    void *dl;
    int memfd; /* the sealed copy of the verified .so that dl maps (-1: none) */
    unsigned listed; /* the capabilities the manifest lists */
    char cap_names[128];
    char sha256[65];
    uint64_t size_bytes;
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
};

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

/* Upper bounds on a bundle's files (a manifest is a few KiB; a compiled policy.so a few MiB). */
#define MANIFEST_MAX (1u << 20)
#define SO_MAX (512ull << 20)

static const char *const SYSTEMS[] = {"baleen", "mat", "pannier", "mlcache", "kml"};
static const char *const CAP_NAMES[] = {"admission", "prefetch", "eviction", "partition", "readahead"};

const char *frt_file_kind(unsigned mode) {
    return S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISDIR(mode) ? "a directory" : S_ISLNK(mode) ? "a symbolic link"
         : S_ISREG(mode) ? "a regular file" : "not a regular file";
}

/* `name` inside the bundle directory dfd (shown as `path`): opened once, without following a
 * link and without blocking (a FIFO), and only a regular file of at most `max` bytes. */
static int open_member(int dfd, const char *path, const char *name, uint64_t max, uint64_t *size,
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
static int read_member(int fd, const char *path, unsigned char *buf, uint64_t n, char *err, size_t errlen) {
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

/* ---- the manifest's schema (flashml/compiler/manifest.schema.json: the rules of the fields
 * this runtime reads) ---- */

/* The value of member m for a message: "evil/9" in quotes, a number, true/false/null, or a
 * nested value. */
static const char *shown(const struct frt_json_member *m, char buf[300]) {
    if (!m) return "nothing";
    switch (m->type) {
    case FRT_JSON_STRING: snprintf(buf, 300, "\"%.200s\"", m->str); return buf;
    case FRT_JSON_NUMBER: snprintf(buf, 300, "%.17g", m->num); return buf;
    case FRT_JSON_BOOL: return m->num != 0 ? "true" : "false";
    case FRT_JSON_NULL: return "null";
    default: return "a list or an object";
    }
}

/* The top-level "capabilities" array of a manifest (already parsed as valid JSON) as FRT_CAP_*
 * bits and their names; an unknown or repeated name is refused. Without the field: admission
 * and prefetch (*listed = 0). */
static int manifest_caps(const char *t, size_t n, unsigned *caps, int *listed, char *names, size_t names_len,
                         const char *mf, char *err, size_t errlen) {
    static const char KEY[] = "\"capabilities\"";
    int depth = 0;
    *caps = 0;
    *listed = 0;
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
                return frt_seterr(err, errlen, "%s: field 'capabilities': expected a list of names", mf);
            *listed = 1;
            for (j++; j < n && t[j] != ']'; j++) {
                if (t[j] == ' ' || t[j] == ',' || t[j] == '\t' || t[j] == '\n' || t[j] == '\r') continue;
                if (t[j] != '"')
                    return frt_seterr(err, errlen, "%s: field 'capabilities': expected a list of names", mf);
                size_t a = ++j;
                while (j < n && t[j] != '"') j++;
                size_t len = j - a;
                unsigned bit = 0;
                for (unsigned k = 0; k < sizeof CAP_NAMES / sizeof CAP_NAMES[0]; k++)
                    if (len == strlen(CAP_NAMES[k]) && !memcmp(t + a, CAP_NAMES[k], len)) bit = 1u << k;
                if (!bit)
                    return frt_seterr(err, errlen, "%s: field 'capabilities': unknown capability \"%.*s\" (known: admission, prefetch, eviction, partition, readahead)",
                                      mf, (int)(len > 64 ? 64 : len), t + a);
                if (*caps & bit)
                    return frt_seterr(err, errlen, "%s: field 'capabilities': \"%.*s\" listed twice", mf, (int)len, t + a);
                *caps |= bit;
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

static int is_hex64(const char *s) {
    size_t i = 0;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return i == 64;
}

/* One optional field of object o (shown as `prefix` + key): absent is fine; else of `kind`:
 * 'n' a finite number in [lo, hi] ((lo, hi] with lo_open), 'i' an integer in [lo, hi],
 * 's' a string, 'S' a string or null, 'b' a boolean, 'h' a contract hash, 'e' one
 * of the strings in `options` (space-separated). `expected` is the schema's phrase. */
static int check_field(const struct frt_json_object *o, const char *mf, const char *prefix, const char *key, char kind,
                       double lo, int lo_open, double hi, const char *options, const char *expected, char *err, size_t errlen) {
    const struct frt_json_member *m = frt_json_get(o, key);
    if (!m) return 0;
    int ok;
    switch (kind) {
    case 'n': ok = m->type == FRT_JSON_NUMBER && isfinite(m->num) && (lo_open ? m->num > lo : m->num >= lo) && m->num <= hi; break;
    case 'i': ok = m->type == FRT_JSON_NUMBER && m->num == floor(m->num) && m->num >= lo && m->num <= hi; break;
    case 's': ok = m->type == FRT_JSON_STRING; break;
    case 'S': ok = m->type == FRT_JSON_STRING || m->type == FRT_JSON_NULL; break;
    case 'b': ok = m->type == FRT_JSON_BOOL; break;
    case 'h': ok = m->type == FRT_JSON_STRING && is_hex64(m->str); break;
    default: { /* 'e' */
        ok = 0;
        size_t len = m->type == FRT_JSON_STRING ? strlen(m->str) : 0;
        for (const char *q = options; len && *q;) {
            size_t w = strcspn(q, " ");
            if (w == len && !memcmp(q, m->str, len)) ok = 1;
            q += w + (q[w] == ' ');
        }
    }
    }
    char b[300];
    if (!ok) return frt_seterr(err, errlen, "%s: field '%s%s': expected %s, got %s", mf, prefix, key, expected, shown(m, b));
    return 0;
}

/* The text of member m's value begins with c (a nested value: '{' an object, '[' a list). */
static int starts(const char *text, const struct frt_json_member *m, char c) {
    return m->type == FRT_JSON_NESTED && m->len && text[m->off] == c;
}

/* The values directly inside the object or list at text[0, n) (valid JSON): calls
 * each(ctx, value text, its length) for each; stops at the first non-zero return. */
static int each_value(const char *t, size_t n, int (*each)(void *ctx, const char *v, size_t len), void *ctx) {
    int depth = 0, in_str = 0, obj = n && t[0] == '{';
    size_t start = 0;
    int want = !obj; /* a list's first value starts after '[' */
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') {
            if (depth == 1 && want == 1) { start = i; want = 2; }
            in_str = 1;
            continue;
        }
        if (c == '{' || c == '[') {
            if (depth == 1 && want == 1) { start = i; want = 2; }
            depth++;
            continue;
        }
        if (c == '}' || c == ']' || (c == ',' && depth == 1)) {
            if (depth == 1 && want == 2) {
                size_t end = i;
                while (end > start && (t[end - 1] == ' ' || t[end - 1] == '\n' || t[end - 1] == '\t' || t[end - 1] == '\r')) end--;
                int r = each(ctx, t + start, end - start);
                if (r) return r;
            }
            if (c == ',') want = obj ? 0 : 1;
            else depth--;
            continue;
        }
        if (depth == 1 && obj && c == ':') { want = 1; continue; }
        if (depth == 1 && want == 1 && c != ' ' && c != '\n' && c != '\t' && c != '\r') { start = i; want = 2; }
    }
    return 0;
}

/* metrics: each value a finite number or null */
static int metric_value(void *ctx, const char *v, size_t len) {
    (void)ctx;
    if (len == 4 && !memcmp(v, "null", 4)) return 0;
    if (!len || !(v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))) return 1;
    return 0;
}

/* peak_hours: distinct integers 0..23 */
static int peak_hour(void *ctx, const char *v, size_t len) {
    unsigned *seen = ctx;
    unsigned h = 0;
    if (!len || len > 2) return 1;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9') return 1;
        h = h * 10 + (unsigned)(v[i] - '0');
    }
    if (h > 23 || (*seen >> h & 1u)) return 1;
    *seen |= 1u << h;
    return 0;
}

/* a list of positive integers (partition.hidden) */
static int positive_int(void *ctx, const char *v, size_t len) {
    (void)ctx;
    if (!len || len > 9 || v[0] == '0') return 1;
    for (size_t i = 0; i < len; i++)
        if (v[i] < '0' || v[i] > '9') return 1;
    return 0;
}

/* A nested object's fields (eviction, partition, readahead): each `kind` as check_field. */
static int check_nested(const char *text, const struct frt_json_object *o, const char *mf, const char *key,
                        struct frt_json_object *sub, char *err, size_t errlen) {
    const struct frt_json_member *m = frt_json_get(o, key);
    char b[300], jerr[256], prefix[80];
    if (!m) return 0;
    if (!starts(text, m, '{')) return frt_seterr(err, errlen, "%s: field '%s': expected an object, got %s", mf, key, shown(m, b));
    if (frt_json_parse_object(text + m->off, m->len, sub, jerr, sizeof jerr) != 0)
        return frt_seterr(err, errlen, "%s: field '%s': %s", mf, key, jerr);
    snprintf(prefix, sizeof prefix, "%s.", key);
    const struct frt_json_member *x;
    if (!strcmp(key, "eviction")) {
        return check_field(sub, mf, prefix, "k", 'n', 1, 0, 4294967295.0, NULL, "a finite number >= 1 (predictions per eviction)", err, errlen) ||
               check_field(sub, mf, prefix, "max_candidates", 'i', 1, 0, 4294967295.0, NULL, "a positive integer (candidates)", err, errlen) ||
               check_field(sub, mf, prefix, "delta", 'n', 0, 1, nextafter(1.0, 0.0), NULL, "a finite number in (0, 1)", err, errlen) ||
               check_field(sub, mf, prefix, "initial_threshold", 'n', 0, 0, 1e300, NULL, "a finite number >= 0 (logical requests)", err, errlen) ||
               check_field(sub, mf, prefix, "memory_window", 'i', 1, 0, 4611686018427387904.0, NULL, "a positive integer (logical requests)", err, errlen) ||
               check_field(sub, mf, prefix, "controller", 'e', 0, 0, 0, "sign mean", "one of sign, mean", err, errlen) ||
               check_field(sub, mf, prefix, "reuse_predictions", 'b', 0, 0, 0, NULL, "true or false", err, errlen)
                   ? -1 : 0;
    }
    if (!strcmp(key, "partition")) {
        if (check_field(sub, mf, prefix, "contract_hash", 'h', 0, 0, 0, NULL, "a contract hash (64 lowercase hex digits)", err, errlen) ||
            check_field(sub, mf, prefix, "sharpness", 'n', 0, 1, 16, NULL, "a finite number in (0, 16]", err, errlen) ||
            check_field(sub, mf, prefix, "capacity", 'i', 1, 0, 9007199254740992.0, NULL, "a positive integer (pages)", err, errlen) ||
            check_field(sub, mf, prefix, "interval", 'i', 1, 0, 9007199254740992.0, NULL, "a positive integer (requests)", err, errlen))
            return -1;
        if ((x = frt_json_get(sub, "hidden")) &&
            (!starts(text + m->off, x, '[') || each_value(text + m->off + x->off, x->len, positive_int, NULL)))
            return frt_seterr(err, errlen, "%s: field 'partition.hidden': expected a list of layer widths (positive integers)", mf);
        return 0;
    }
    return check_field(sub, mf, prefix, "contract_hash", 'h', 0, 0, 0, NULL, "a contract hash (64 lowercase hex digits)", err, errlen) ||
           check_field(sub, mf, prefix, "kind", 'e', 0, 0, 0, "mlp tree", "one of mlp, tree", err, errlen)
               ? -1 : 0;
}

int frt_manifest_parse(const char *text, size_t n, const char *mf, const char *system,
                       struct frt_manifest *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char jerr[256], b[300];
    if (frt_json_parse_object(text, n, &out->obj, jerr, sizeof jerr) != 0)
        return frt_seterr(err, errlen, "%s: not valid JSON: %s", mf, jerr);
    const struct frt_json_object *o = &out->obj;
    for (int i = 0; i < o->n; i++) /* one meaning per field: JSON readers differ on which twin counts */
        for (int j = i + 1; j < o->n; j++)
            if (!strcmp(o->members[i].key, o->members[j].key))
                return frt_seterr(err, errlen, "%s: field '%s': given twice", mf, o->members[i].key);
    if (o->nonfinite[0])
        return frt_seterr(err, errlen, "%s: field '%s': a number that is not finite (every number of a manifest is)", mf, o->nonfinite);
    const struct frt_json_member *m = frt_json_get(o, "format");
    if (!m || m->type != FRT_JSON_STRING || strcmp(m->str, FRT_BUNDLE_FORMAT) != 0)
        return frt_seterr(err, errlen, "%s: field 'format': expected \"%s\", got %s", mf, FRT_BUNDLE_FORMAT, shown(m, b));
    if ((m = frt_json_get(o, "system"))) {
        int known = 0;
        for (size_t i = 0; m->type == FRT_JSON_STRING && i < sizeof SYSTEMS / sizeof SYSTEMS[0]; i++)
            known |= strcmp(m->str, SYSTEMS[i]) == 0;
        if (!known)
            return frt_seterr(err, errlen, "%s: field 'system': expected one of baleen, mat, pannier, mlcache, kml, got %s", mf, shown(m, b));
        if (system && strcmp(m->str, system) != 0)
            return frt_seterr(err, errlen, "%s: field 'system': expected \"%s\" (this command serves %s bundles), got %s", mf,
                              system, system, shown(m, b));
        snprintf(out->system, sizeof out->system, "%.15s", m->str);
    }
    if (manifest_caps(text, n, &out->caps, &out->listed, out->cap_names, sizeof out->cap_names, mf, err, errlen) != 0) return -1;
    if (!out->listed && frt_json_get(o, "capabilities"))
        return frt_seterr(err, errlen, "%s: field 'capabilities': expected a list of names", mf);
    /* a knobs-only bundle (Pannier's: capabilities [] and a system) has no .so */
    out->has_so = !out->listed || out->caps != 0;
    if (!out->has_so && !out->system[0])
        return frt_seterr(err, errlen, "%s: field 'system': missing (a bundle without capabilities is a knobs-only bundle of a system: pannier)", mf);
    if (!out->has_so && frt_json_get(o, "policy_so"))
        return frt_seterr(err, errlen, "%s: field 'policy_so': a bundle without capabilities has no .so", mf);
    /* what each system's bundle must be able to do */
    static const struct { const char *system; unsigned cap; const char *name; } NEEDS[] = {
        {"baleen", FRT_CAP_ADMISSION, "admission"}, {"mat", FRT_CAP_EVICTION, "eviction"},
        {"mlcache", FRT_CAP_PARTITION, "partition"}, {"kml", FRT_CAP_READAHEAD, "readahead"}};
    if (!strcmp(out->system, "pannier") && out->has_so)
        return frt_seterr(err, errlen, "%s: field 'capabilities': expected [] for system pannier (a knobs-only bundle), got %s", mf,
                          out->cap_names[0] ? out->cap_names : "none");
    for (size_t i = 0; i < sizeof NEEDS / sizeof NEEDS[0]; i++)
        if (!strcmp(out->system, NEEDS[i].system) && !(out->caps & NEEDS[i].cap))
            return frt_seterr(err, errlen, "%s: field 'capabilities': expected a list holding %s for system %s, got [%s]", mf,
                              NEEDS[i].name, NEEDS[i].system, out->cap_names);
    if (out->has_so) {
        m = frt_json_get(o, "abi_version");
        if (!m || m->type != FRT_JSON_NUMBER) return frt_seterr(err, errlen, "%s: field 'abi_version': missing or not a number, got %s", mf, shown(m, b));
        m = frt_json_get(o, "sha256");
        if (!m || m->type != FRT_JSON_STRING) return frt_seterr(err, errlen, "%s: field 'sha256': missing or not a string, got %s", mf, shown(m, b));
        if (!is_hex64(m->str))
            return frt_seterr(err, errlen, "%s: field 'sha256': expected 64 lowercase hex digits, got %s", mf, shown(m, b));
        memcpy(out->sha256, m->str, 65);
        m = frt_json_get(o, "size_bytes");
        if (!m) return frt_seterr(err, errlen, "%s: field 'size_bytes': missing (the .so's size in bytes)", mf);
        if (check_field(o, mf, "", "size_bytes", 'i', 1, 0, (double)SO_MAX, NULL, "a positive integer (bytes, at most 512 MiB)", err, errlen))
            return -1;
        out->size_bytes = (uint64_t)m->num;
        m = frt_json_get(o, "policy_so");
        if (m) {
            if (m->type != FRT_JSON_STRING || !m->str[0] || strchr(m->str, '/') || !strcmp(m->str, ".") || !strcmp(m->str, "..") ||
                strlen(m->str) >= sizeof out->so_name)
                return frt_seterr(err, errlen, "%s: field 'policy_so': expected the file name of the policy .so inside the bundle (no '/', not '.' or '..'), got %s",
                                  mf, shown(m, b));
            snprintf(out->so_name, sizeof out->so_name, "%s", m->str);
        } else {
            snprintf(out->so_name, sizeof out->so_name, "policy.so");
        }
    }
    static const char *const HASHES[] = {"contract_hash", "evict_contract_hash", "partition_contract_hash", "readahead_contract_hash"};
    for (size_t i = 0; i < sizeof HASHES / sizeof HASHES[0]; i++)
        if (check_field(o, mf, "", HASHES[i], 'h', 0, 0, 0, NULL, "a contract hash (64 lowercase hex digits)", err, errlen)) return -1;
    if (check_field(o, mf, "", "abi_version", 'i', 1, 0, 2147483647.0, NULL, "a positive integer", err, errlen) ||
        check_field(o, mf, "", "eviction_age_s", 'n', 0, 1, 1e12, NULL, "a finite number > 0 (seconds)", err, errlen) ||
        check_field(o, mf, "", "target_write_rate_mbps", 'n', 0, 1, 1e12, NULL, "a finite number > 0 (MB/s)", err, errlen) ||
        check_field(o, mf, "", "admit_threshold", 'n', 0, 0, 1, NULL, "a finite number in [0, 1]", err, errlen) ||
        check_field(o, mf, "", "when_threshold", 'n', 0, 0, 1, NULL, "a finite number in [0, 1]", err, errlen) ||
        check_field(o, mf, "", "peak_bonus", 'n', 0, 0, 1, NULL, "a finite number in [0, 1]", err, errlen) ||
        check_field(o, mf, "", "segments_per_block", 'i', 1, 0, 1048576, NULL, "a positive integer (segments)", err, errlen) ||
        check_field(o, mf, "", "header", 's', 0, 0, 0, NULL, "a file name", err, errlen) ||
        check_field(o, mf, "", "source", 's', 0, 0, 0, NULL, "a string", err, errlen) ||
        check_field(o, mf, "", "mlflow_run_id", 'S', 0, 0, 0, NULL, "a string or null", err, errlen))
        return -1;
    if ((m = frt_json_get(o, "peak_hours"))) {
        unsigned seen = 0;
        if (!starts(text, m, '[') || each_value(text + m->off, m->len, peak_hour, &seen))
            return frt_seterr(err, errlen, "%s: field 'peak_hours': expected a list of distinct hours 0..23, got %.80s", mf,
                              m->type == FRT_JSON_NESTED ? "a list with other values" : shown(m, b));
    }
    if ((m = frt_json_get(o, "metrics")) && (!starts(text, m, '{') || each_value(text + m->off, m->len, metric_value, NULL)))
        return frt_seterr(err, errlen, "%s: field 'metrics': expected an object of numbers or nulls", mf);
    if ((m = frt_json_get(o, "knobs")) && !starts(text, m, '{'))
        return frt_seterr(err, errlen, "%s: field 'knobs': expected an object, got %s", mf, shown(m, b));
    struct frt_json_object *sub = malloc(sizeof *sub);
    if (!sub) return frt_seterr(err, errlen, "out of memory");
    int rc = check_nested(text, o, mf, "eviction", sub, err, errlen) || check_nested(text, o, mf, "partition", sub, err, errlen) ||
             check_nested(text, o, mf, "readahead", sub, err, errlen) ? -1 : 0;
    free(sub);
    return rc;
}

int frt_manifest_read(int dfd, const char *dir, const char *system, struct frt_manifest *out, char **text_out,
                      size_t *n_out, char *err, size_t errlen) {
    char mf[4200];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    uint64_t size = 0;
    int fd = open_member(dfd, mf, "manifest.json", MANIFEST_MAX, &size, err, errlen);
    if (fd < 0) return -1;
    char *text = malloc((size_t)size + 1);
    int rc = text ? read_member(fd, mf, (unsigned char *)text, size, err, errlen) : frt_seterr(err, errlen, "out of memory");
    close(fd);
    if (rc == 0) {
        text[size] = 0;
        rc = frt_manifest_parse(text, (size_t)size, mf, system, out, err, errlen);
    }
    if (rc == 0 && text_out) {
        *text_out = text;
        *n_out = (size_t)size;
    } else {
        free(text);
    }
    return rc;
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
    if ((sofd = open_member(dfd, so, man->so_name, SO_MAX, &size, err, errlen)) < 0) goto fail;
    if (size != man->size_bytes) {
        frt_seterr(err, errlen, "%s: refused: it has %llu bytes but %s field 'size_bytes' says %llu", so, (unsigned long long)size, mf,
                   (unsigned long long)man->size_bytes);
        goto fail;
    }
    if (!(bytes = malloc(size ? (size_t)size : 1))) { frt_seterr(err, errlen, "out of memory"); goto fail; }
    if (read_member(sofd, so, bytes, size, err, errlen) != 0) goto fail;
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
    int (*abi_fn)(void) = (int (*)(void))sym(p, so, "flashml_policy_abi_version", err, errlen);
    if (!abi_fn) goto fail;
    if (abi_fn() != FLASHML_POLICY_ABI_VERSION) {
        frt_seterr(err, errlen, "%s: refused: it speaks ABI %d but this runtime speaks ABI %d", so, abi_fn(), FLASHML_POLICY_ABI_VERSION);
        goto fail;
    }
    {   /* the .so exports the functions of every capability its manifest lists (not only the
         * ones this command uses) */
        static const char *const REQUIRED[][10] = {
            {"flashml_policy_num_features", "flashml_policy_contract_hash", "flashml_admit_score", "flashml_admit_threshold",
             "flashml_target_write_rate_mbps", "flashml_eviction_age_s"},
            {"flashml_prefetch_range", "flashml_prefetch_when_score", "flashml_prefetch_when_threshold"},
            {"flashml_evict_num_features", "flashml_evict_contract_hash", "flashml_evict_predict", "flashml_evict_predict_batch",
             FRT_MAT_K_ABI, FRT_MAT_MAX_CANDIDATES_ABI, FRT_MAT_DELTA_ABI, FRT_MAT_INITIAL_THRESHOLD_ABI,
             FRT_MAT_MEMORY_WINDOW_ABI},
            {"flashml_partition_num_features", "flashml_partition_contract_hash", "flashml_partition_max_streams",
             "flashml_partition_steps", "flashml_partition"},
            {"flashml_readahead_num_features", "flashml_readahead_contract_hash", "flashml_readahead_window_ms",
             "flashml_readahead_kib"}};
        for (unsigned k = 0; k < 5; k++) {
            if (!(have & (1u << k))) continue;
            for (unsigned j = 0; j < 10 && REQUIRED[k][j]; j++)
                if (!dlsym(p->dl, REQUIRED[k][j])) {
                    frt_seterr(err, errlen, "%s: refused: %s lists the %s capability but the .so has no symbol %s", so, mf, CAP_NAMES[k],
                               REQUIRED[k][j]);
                    goto fail;
                }
        }
    }
    if ((need & FRT_CAP_EVICTION) && bind_eviction(p, so, mf, ehash->str, err, errlen) != 0) goto fail;
    if ((need & FRT_CAP_PARTITION) && bind_partition(p, so, mf, phash->str, err, errlen) != 0) goto fail;
    if ((need & FRT_CAP_READAHEAD) && bind_readahead(p, so, mf, rhash->str, err, errlen) != 0) goto fail;
    if (!adm) {
        p->target_wr = p->eviction_age = NAN;
        goto done;
    }
    int (*nf_fn)(void) = (int (*)(void))sym(p, so, "flashml_policy_num_features", err, errlen);
    const char *(*hash_fn)(void) = nf_fn ? (const char *(*)(void))sym(p, so, "flashml_policy_contract_hash", err, errlen) : NULL;
    double (*at)(void) = hash_fn ? (double (*)(void))sym(p, so, "flashml_admit_threshold", err, errlen) : NULL;
    double (*wt)(void) = at ? (double (*)(void))sym(p, so, "flashml_prefetch_when_threshold", err, errlen) : NULL;
    double (*wr)(void) = wt ? (double (*)(void))sym(p, so, "flashml_target_write_rate_mbps", err, errlen) : NULL;
    double (*ea)(void) = wr ? (double (*)(void))sym(p, so, "flashml_eviction_age_s", err, errlen) : NULL;
    if (ea) p->admit_score = (double (*)(const double *))sym(p, so, "flashml_admit_score", err, errlen);
    if (p->admit_score) p->prefetch_range = (void (*)(const double *, int32_t *, int32_t *))sym(p, so, "flashml_prefetch_range", err, errlen);
    if (p->prefetch_range) p->when_score = (double (*)(const double *))sym(p, so, "flashml_prefetch_when_score", err, errlen);
    if (!p->when_score) goto fail;
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
    if (check_value(so, "flashml_admit_threshold", p->admit_threshold, 0.0, 0, 1.0, "", err, errlen) ||
        check_value(so, "flashml_prefetch_when_threshold", p->when_threshold, 0.0, 0, 1.0, "", err, errlen) ||
        check_value(so, "flashml_target_write_rate_mbps", p->target_wr, 0.0, 1, DBL_MAX, "MB/s", err, errlen) ||
        check_value(so, "flashml_eviction_age_s", p->eviction_age, 0.0, 1, DBL_MAX, "s", err, errlen))
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
static int bind_eviction(flashrt_policy *p, const char *so, const char *mf,
                         const char *manifest_hash, char *err, size_t errlen) {
    static const char *const NAMES[] = {
        "flashml_evict_num_features", "flashml_evict_contract_hash", "flashml_evict_predict",
        "flashml_evict_predict_batch", FRT_MAT_K_ABI, FRT_MAT_MAX_CANDIDATES_ABI,
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
    void *hint = dlsym(p->dl, "flashml_evict_prefetch"); /* optional: older bundles lack it */
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
