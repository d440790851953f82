/* policy_manifest.c: a policy bundle's manifest.json, read once from the bundle directory
 * and checked against the schema's rules for the fields this runtime reads
 * (frt_manifest_parse, frt_manifest_read: policy_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/internal.h"
#include "policies/policy_internal.h"
#include "policies/policy_loader.h"

static const char *const SYSTEMS[] = {"baleen", "mat", "pannier", "mlcache", "kml"};
const char *const frt_policy_cap_names[5] = {"admission", "prefetch", "eviction", "partition", "readahead"};

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
                for (unsigned k = 0; k < sizeof frt_policy_cap_names / sizeof frt_policy_cap_names[0]; k++)
                    if (len == strlen(frt_policy_cap_names[k]) && !memcmp(t + a, frt_policy_cap_names[k], len)) bit = 1u << k;
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
    int fd = frt_bundle_open_member(dfd, mf, "manifest.json", MANIFEST_MAX, &size, err, errlen);
    if (fd < 0) return -1;
    char *text = malloc((size_t)size + 1);
    int rc = text ? frt_bundle_read_member(fd, mf, (unsigned char *)text, size, err, errlen) : frt_seterr(err, errlen, "out of memory");
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
