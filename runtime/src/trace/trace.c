/* trace.c: streaming reader of Tectonic text traces (Baleen's format, see
 * /work/shared/seeds/baleen-artifact-notes.md). Columns are found by the header's names. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"

enum { C_BLOCK, C_OFFSET, C_SIZE, C_TIME, C_OP, C_NS, C_USER, C_HOST, C_COUNT, C_N };
/* Fields per line the reader keeps (the widest schema has 10); a header naming more columns
 * is refused, so every column index it yields fits the token array. */
enum { MAX_FIELDS = 16 };
/* The most repeats one line's op_count may ask for (as flashml's ingest); more is corrupt. */
#define MAX_OP_COUNT (1ull << 20)
static const char *COLNAMES[C_N] = {"block_id", "io_offset", "io_size", "op_time", "op_name",
                                    "user_namespace", "user_name", "host_name", "op_count"};

struct flashrt_trace {
    FILE *f;
    char *path;
    char *line;
    size_t cap;
    uint64_t lineno;
    int col[C_N];     /* field index of each column, -1 if absent */
    int nfields;      /* fields per data line */
    int have_header;
    double sample_ratio;
    double last_time;
    struct flashrt_access pending; /* op_count repeats still to emit */
    uint64_t pending_left, pending_total;
};

int flashrt_is_put(int op) { return op == 3 || op == 4 || op == 6; }
int flashrt_is_get(int op) {
    static const int get_ops[] = {FLASHML_POLICY_GET_OPS};
    for (size_t i = 0; i < sizeof get_ops / sizeof get_ops[0]; i++) {
        if (op == get_ops[i]) return 1;
    }
    return 0;
}

static void set_201910(flashrt_trace *t) {
    for (int i = 0; i < C_N; i++) t->col[i] = -1;
    /* block_id io_offset io_size op_time op_name pipeline user_namespace user_name */
    t->col[C_BLOCK] = 0; t->col[C_OFFSET] = 1; t->col[C_SIZE] = 2; t->col[C_TIME] = 3;
    t->col[C_OP] = 4; t->col[C_NS] = 6; t->col[C_USER] = 7;
    t->nfields = 8;
}

static int parse_header(flashrt_trace *t, const char *line, char *err, size_t errlen) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", line + 1);
    for (int i = 0; i < C_N; i++) t->col[i] = -1;
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        for (int c = 0; c < C_N; c++)
            if (strcmp(tok, COLNAMES[c]) == 0) t->col[c] = n;
        if (strcmp(tok, "rs_shard_id") == 0) t->col[C_HOST] = n;
        n++;
    }
    for (int c = 0; c <= C_USER; c++)
        if (t->col[c] < 0)
            return frt_seterr(err, errlen, "%s:%llu: header has no column '%s'", t->path,
                              (unsigned long long)t->lineno, COLNAMES[c]);
    if (n > MAX_FIELDS)
        return frt_seterr(err, errlen, "%s:%llu: header has %d columns; a Tectonic trace has at most %d",
                          t->path, (unsigned long long)t->lineno, n, MAX_FIELDS);
    t->nfields = n;
    t->have_header = 1;
    return 0;
}

flashrt_trace *flashrt_trace_open(const char *path, char *err, size_t errlen) {
    flashrt_trace *t = calloc(1, sizeof *t);
    if (!t) { frt_seterr(err, errlen, "out of memory"); return NULL; }
    t->f = frt_fopen_input(path, err, errlen);
    if (!t->f) {
        free(t);
        return NULL;
    }
    t->path = strdup(path);
    t->last_time = -INFINITY;
    set_201910(t);
    return t;
}

double flashrt_trace_sample_ratio(const flashrt_trace *t) { return t->sample_ratio; }

void flashrt_trace_close(flashrt_trace *t) {
    if (!t) return;
    if (t->f) fclose(t->f);
    free(t->line);
    free(t->path);
    free(t);
}

static int field_err(flashrt_trace *t, const char *field, char *err, size_t errlen,
                     const char *fmt, ...) FRT_PRINTF(5, 6);
static int field_err(flashrt_trace *t, const char *field, char *err, size_t errlen,
                     const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return frt_seterr(err, errlen, "%s:%llu: field '%s': %s", t->path,
                      (unsigned long long)t->lineno, field, what);
}

static int parse_u64(flashrt_trace *t, const char *tok, int c, uint64_t *v, char *err,
                     size_t errlen) {
    char *end;
    if (*tok == '-' || *tok == '+') return field_err(t, COLNAMES[c], err, errlen, "expected a non-negative integer, got '%s'", tok);
    errno = 0;
    unsigned long long x = strtoull(tok, &end, 10);
    if (end == tok || *end || errno)
        return field_err(t, COLNAMES[c], err, errlen, "expected a non-negative integer, got '%s'", tok);
    *v = x;
    return 0;
}

static int parse_i32(flashrt_trace *t, const char *tok, int c, int32_t *v, char *err,
                     size_t errlen) {
    char *end;
    errno = 0;
    long x = strtol(tok, &end, 10);
    if (end == tok || *end || errno || x < INT32_MIN || x > INT32_MAX)
        return field_err(t, COLNAMES[c], err, errlen, "expected an integer, got '%s'", tok);
    *v = (int32_t)x;
    return 0;
}

int flashrt_trace_next(flashrt_trace *t, struct flashrt_access *a, char *err, size_t errlen) {
    if (t->pending_left) {
        *a = t->pending;
        /* op_count repeats the access, spread over the next second */
        a->time += (double)(t->pending_total - t->pending_left) / (double)t->pending_total;
        t->pending_left--;
        return 1;
    }
    for (;;) {
        ssize_t len = getline(&t->line, &t->cap, t->f);
        if (len < 0) {
            if (ferror(t->f)) return frt_seterr(err, errlen, "%s: read error", t->path);
            return 0;
        }
        t->lineno++;
        char *line = t->line;
        int complete = len > 0 && line[len - 1] == '\n';
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (line[0] == '#') {
            if (!t->have_header && strstr(line, "block_id")) {
                if (parse_header(t, line, err, errlen) != 0) return -1;
            }
            const char *sr = strstr(line, "sample_ratio=");
            if (strstr(line, "flashml:") && sr) {
                char *end;
                double v = strtod(sr + 13, &end);
                if (end == sr + 13 || !(v > 0 && v <= 100))
                    return frt_seterr(err, errlen, "%s:%llu: field 'sample_ratio': expected a percentage in (0, 100]",
                                      t->path, (unsigned long long)t->lineno);
                t->sample_ratio = v;
            }
            continue;
        }
        if (len == 0) continue;
        char *tok[MAX_FIELDS];
        int n = 0;
        char *save = NULL;
        for (char *p = strtok_r(line, " \t", &save); p; p = strtok_r(NULL, " \t", &save)) {
            if (n < MAX_FIELDS) tok[n] = p;
            n++;
        }
        if (n == 0) continue;
        if (n != t->nfields) {
            const char *missing = "pipeline";
            for (int c = 0; c < C_N; c++)
                if (t->col[c] == n) missing = COLNAMES[c];
            if (n > t->nfields) missing = "(extra)";
            return frt_seterr(err, errlen, "%s:%llu: field '%s': expected %d fields, got %d%s",
                              t->path, (unsigned long long)t->lineno, missing, t->nfields, n,
                              complete ? "" : " (truncated last line)");
        }
        memset(a, 0, sizeof *a);
        a->line = t->lineno;
        if (parse_u64(t, tok[t->col[C_BLOCK]], C_BLOCK, &a->key, err, errlen) ||
            parse_u64(t, tok[t->col[C_OFFSET]], C_OFFSET, &a->offset, err, errlen) ||
            parse_u64(t, tok[t->col[C_SIZE]], C_SIZE, &a->size, err, errlen))
            return -1;
        const char *ts = tok[t->col[C_TIME]];
        char *end;
        a->time = strtod(ts, &end);
        if (end == ts || *end || !isfinite(a->time))
            return field_err(t, "op_time", err, errlen, "expected a finite number, got '%s'", ts);
        int32_t op;
        if (parse_i32(t, tok[t->col[C_OP]], C_OP, &op, err, errlen) ||
            parse_i32(t, tok[t->col[C_NS]], C_NS, &a->ns, err, errlen) ||
            parse_i32(t, tok[t->col[C_USER]], C_USER, &a->user, err, errlen))
            return -1;
        if (op < 0 || op > 255)
            return field_err(t, "op_name", err, errlen, "op code out of range: '%s'", tok[t->col[C_OP]]);
        a->op = op;
        if (a->time < t->last_time) {
            char what[128];
            snprintf(what, sizeof what, "time %.6f is earlier than the previous access (%.6f); the trace must be sorted by time", a->time, t->last_time);
            return frt_seterr(err, errlen, "%s:%llu: field 'op_time': %s", t->path,
                              (unsigned long long)t->lineno, what);
        }
        t->last_time = a->time;
        /* op_count is checked on every line, a zero-size one too (as flashml's ingest) */
        uint64_t cnt = 1;
        if (t->col[C_COUNT] >= 0) {
            if (parse_u64(t, tok[t->col[C_COUNT]], C_COUNT, &cnt, err, errlen)) return -1;
            if (cnt < 1)
                return field_err(t, "op_count", err, errlen, "op_count %llu < 1 (a line is at least one access)",
                                 (unsigned long long)cnt);
            if (cnt > MAX_OP_COUNT)
                return field_err(t, "op_count", err, errlen, "op_count %llu > %llu (repeats of one line)",
                                 (unsigned long long)cnt, MAX_OP_COUNT);
        }
        if (a->size == 0) continue; /* zero-size IOs are dropped */
        if (a->offset >= FRT_BLOCK_BYTES || a->size > FRT_BLOCK_BYTES - a->offset) {
            char what[160];
            snprintf(what, sizeof what, "offset %llu + size %llu exceeds the block size %u",
                     (unsigned long long)a->offset, (unsigned long long)a->size, FRT_BLOCK_BYTES);
            return frt_seterr(err, errlen, "%s:%llu: field 'io_size': %s", t->path,
                              (unsigned long long)t->lineno, what);
        }
        if (t->col[C_HOST] >= 0) { /* newer schemas: key = (block_id, host or shard) */
            uint64_t h = 1469598103934665603ull;
            for (const char *p = tok[t->col[C_HOST]]; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
            a->key = frt_mix64(a->key) ^ h;
        }
        if (cnt > 1) {
            t->pending = *a;
            t->pending_total = cnt;
            t->pending_left = cnt - 1;
        }
        return 1;
    }
}
