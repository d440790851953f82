/* objects.c: object traces (key, size) read whole, for the MAT object cache: `objects-csv`
 * (flashml trace generate --preset cdn-like) and libCacheSim's CloudPhysics CSV, with the
 * checks and messages of flashml/trace/objects.py (file:line: field 'x': what is wrong). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashrt.h"
#include "util/internal.h"

enum { COL_TIME, COL_KEY, COL_SIZE, NCOL };

static int parse_u64(const char *s, uint64_t *v) {
    if (!*s) return -1;
    uint64_t x = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) return -2;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

static int parse_f64(const char *s, double *v) {
    if (!*s || *s == ' ' || *s == '\t') return -1;
    /* hexadecimal floats are not numbers in a CSV (Python's pattern refuses them) */
    for (const char *p = s; *p; p++)
        if (*p == 'x' || *p == 'X' || *p == 'p' || *p == 'P') return -1;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end) return -1;
    *v = x;
    return 0;
}

static int push(struct flashrt_objects *o, size_t *cap, uint64_t key, uint64_t size) {
    if (o->n == *cap) {
        size_t c = *cap ? 2 * *cap : 4096;
        uint64_t *k = realloc(o->key, c * sizeof *k);
        if (!k) return -1;
        o->key = k;
        uint64_t *s = realloc(o->size, c * sizeof *s);
        if (!s) return -1;
        o->size = s;
        *cap = c;
    }
    o->key[o->n] = key;
    o->size[o->n] = size;
    o->n++;
    return 0;
}

static int blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return 0;
    return 1;
}

int flashrt_objects_read(const char *path, const char *format, struct flashrt_objects *out,
                         char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int cp;
    if (!strcmp(format, "objects-csv") || !strcmp(format, "csv")) cp = 0;
    else if (!strcmp(format, "cloudphysics")) cp = 1;
    else return frt_seterr(err, errlen, "%s: field 'format': unknown object format '%s'; expected objects-csv, csv or cloudphysics", path, format);
    const char *names[NCOL] = {"time", cp ? "lbn" : "key", "size"};
    const char *what = cp ? "CloudPhysics CSV (version,time,op,size,lbn)" : "objects-csv trace (time,key,size)";
    FILE *f = frt_fopen_input(path, err, errlen);
    if (!f) return -1;
    char *line = NULL, *hdr = NULL, *line_hdr = NULL;
    size_t lcap = 0, cap = 0;
    ssize_t len;
    int rc = -1;
    int where[NCOL] = {-1, -1, -1};
    int nfields = 0;
    char *names_at[256]; /* the header's column names (in hdr) */
    uint64_t lineno = 1;
    double prev_time = -INFINITY;
    if ((len = getline(&line, &lcap, f)) <= 0 || blank(line) || (len == 1 && line[0] == '\n')) {
        frt_seterr(err, errlen, "%s:1: empty file: expected a header line naming the columns of a %s", path, what);
        goto done;
    }
    if (line[len - 1] == '\n') line[--len] = 0;
    if (len && line[len - 1] == '\r') line[--len] = 0;
    hdr = strdup(line);
    line_hdr = strdup(line);
    if (!hdr || !line_hdr) { frt_seterr(err, errlen, "out of memory"); goto done; }
    {
        /* the header's columns: their names, duplicates, and where ours are */
        char *tok = hdr;
        for (char *p = hdr;; p++) {
            if (*p == ',' || *p == 0) {
                int end = *p == 0;
                *p = 0;
                if (nfields == 256) { frt_seterr(err, errlen, "%s:1: header has more than 256 columns", path); goto done; }
                names_at[nfields++] = tok;
                if (end) break;
                tok = p + 1;
            }
        }
        for (int i = 0; i < nfields; i++)
            for (int j = 0; j < i; j++)
                if (!strcmp(names_at[i], names_at[j])) {
                    frt_seterr(err, errlen, "%s:1: field '%s': column named twice in the header", path, names_at[i]);
                    goto done;
                }
        for (int c = 0; c < NCOL; c++)
            for (int i = 0; i < nfields; i++)
                if (!strcmp(names_at[i], names[c])) where[c] = i;
        for (int c = 0; c < NCOL; c++)
            if (where[c] < 0 && !(cp && c == COL_TIME)) {
                frt_seterr(err, errlen, "%s:1: field '%s': missing column (header '%s'; a %s needs %s)", path, names[c],
                           line_hdr, what, cp ? "lbn, size" : "time, key, size");
                goto done;
            }
    }
    char **fields = NULL;
    fields = malloc((size_t)nfields * sizeof *fields);
    if (!fields) { frt_seterr(err, errlen, "out of memory"); goto done; }
    while ((len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (line[len - 1] == '\n') line[--len] = 0;
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if ((size_t)len != strlen(line)) {
            frt_seterr(err, errlen, "%s:%llu: field '%s': a NUL byte in the line", path, (unsigned long long)lineno, names[COL_KEY]);
            goto fail;
        }
        int n = 0;
        char *tok = line;
        for (char *p = line;; p++) {
            if (*p == ',' || *p == 0) {
                int end = *p == 0;
                *p = 0;
                if (n < nfields) fields[n] = tok;
                n++;
                if (end) break;
                tok = p + 1;
            }
        }
        if (n != nfields) {
            if (n == 1 && blank(fields[0])) {
                /* blank lines are fine at the end only */
                int more = 0;
                while (!more && (len = getline(&line, &lcap, f)) > 0) more = !blank(line) && !(len == 1 && line[0] == '\n');
                if (!more) break;
                frt_seterr(err, errlen, "%s:%llu: field '%s': blank line (expected %d fields)", path, (unsigned long long)lineno,
                           names[COL_TIME], nfields);
                goto fail;
            }
            int at = n < nfields ? n : nfields - 1;
            frt_seterr(err, errlen, "%s:%llu: field '%s': expected %d fields (%s), found %d", path, (unsigned long long)lineno,
                       names_at[at], nfields, line_hdr, n);
            goto fail;
        }
        uint64_t key = 0, size = 0;
        for (int c = COL_KEY; c <= COL_SIZE; c++) {
            const char *t = fields[where[c]];
            uint64_t v = 0;
            int r = parse_u64(t, &v);
            if (r == -2) { frt_seterr(err, errlen, "%s:%llu: field '%s': %s %.40s does not fit in 64 bits", path, (unsigned long long)lineno, names[c], names[c], t); goto fail; }
            if (r != 0 && t[0] == '-' && parse_u64(t + 1, &v) != -1) { frt_seterr(err, errlen, "%s:%llu: field '%s': negative %s %.40s", path, (unsigned long long)lineno, names[c], names[c], t); goto fail; }
            if (r != 0) { frt_seterr(err, errlen, "%s:%llu: field '%s': expected an integer, found '%.40s'", path, (unsigned long long)lineno, names[c], t); goto fail; }
            if (c == COL_KEY) key = v;
            else size = v;
        }
        if (where[COL_TIME] >= 0) {
            const char *t = fields[where[COL_TIME]];
            double tm;
            if (parse_f64(t, &tm) != 0) { frt_seterr(err, errlen, "%s:%llu: field 'time': expected a number, found '%.40s'", path, (unsigned long long)lineno, t); goto fail; }
            if (!isfinite(tm)) { frt_seterr(err, errlen, "%s:%llu: field 'time': time must be a finite number, found %.40s", path, (unsigned long long)lineno, t); goto fail; }
            if (!cp && tm < prev_time) { frt_seterr(err, errlen, "%s:%llu: field 'time': time goes backwards (%.17g after %.17g)", path, (unsigned long long)lineno, tm, prev_time); goto fail; }
            prev_time = tm;
        }
        if (size == 0) { frt_seterr(err, errlen, "%s:%llu: field 'size': size must be >= 1 byte, found 0", path, (unsigned long long)lineno); goto fail; }
        if (push(out, &cap, key, size) != 0) { frt_seterr(err, errlen, "out of memory"); goto fail; }
    }
    if (ferror(f)) { frt_seterr(err, errlen, "%s: read error: %s", path, strerror(errno)); goto fail; }
    if (out->n == 0) { frt_seterr(err, errlen, "%s:2: no requests (only a header line)", path); goto fail; }
    rc = 0;
fail:
    free(fields);
done:
    free(line);
    free(hdr);
    free(line_hdr);
    fclose(f);
    if (rc != 0) flashrt_objects_free(out);
    return rc;
}

void flashrt_objects_free(struct flashrt_objects *o) {
    free(o->key);
    free(o->size);
    memset(o, 0, sizeof *o);
}
