/* readahead.c: KML's readahead tuner, the library part (readahead.h): the window features,
 * the trace line parser and the bundle loader's entry point. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/internal.h"
#include "policies/policy_internal.h"
#include "kml/readahead.h"

void frt_ra_init(struct frt_ra_acc *a) { memset(a, 0, sizeof *a); }

/* window_features' loop body, operation for operation: its page is a Python int, so
 * `page - mean` converts the page to a double first and `abs(page - last)` is exact before it
 * is added to the (double) sum; (double) of a uint64_t rounds to nearest even as Python's
 * int -> float does. */
void frt_ra_add(struct frt_ra_acc *a, uint64_t page) {
    if (a->count) a->absdiff += (double)(page > a->last ? page - a->last : a->last - page);
    a->last = page;
    a->count++;
    const double p = (double)page, d = p - a->mean;
    a->mean += d / (double)a->count;
    a->m2 += d * (p - a->mean);
}

void frt_ra_window(struct frt_ra_acc *a, double out[FLASHML_READAHEAD_NUM_FEATURES], double readahead_kib) {
    out[FLASHML_RA_F_TRACEPOINTS] = (double)a->count;
    out[FLASHML_RA_F_OFFSET_MEAN] = a->mean;
    out[FLASHML_RA_F_OFFSET_STD] = a->count > 1 ? sqrt(a->m2 / (double)a->count) : 0.0;
    out[FLASHML_RA_F_OFFSET_ABSDIFF_MEAN] = a->count > 1 ? a->absdiff / (double)(a->count - 1) : 0.0;
    out[FLASHML_RA_F_READAHEAD_KIB] = readahead_kib;
    a->count = 0;
    a->absdiff = 0.0;
    a->mean = 0.0;
    a->m2 = 0.0;
}

/* ---- the trace line ---- */

/* Digits of base 10 or 16 at *s into *out; advances *s. -1 without a digit or on overflow. */
static int digits(const char **s, int base, uint64_t *out) {
    const char *p = *s;
    uint64_t v = 0;
    for (;; p++) {
        unsigned d;
        if (*p >= '0' && *p <= '9') d = (unsigned)(*p - '0');
        else if (base == 16 && *p >= 'a' && *p <= 'f') d = (unsigned)(*p - 'a' + 10);
        else break;
        if (v > (UINT64_MAX - d) / (uint64_t)base) return -1;
        v = v * (uint64_t)base + d;
    }
    if (p == *s) return -1;
    *s = p;
    *out = v;
    return 0;
}

static int lit(const char **s, const char *text) {
    size_t n = strlen(text);
    if (strncmp(*s, text, n) != 0) return -1;
    *s += n;
    return 0;
}

int frt_ra_parse_line(const char *line, struct frt_ra_event *ev) {
    static const char MARK[] = ": mm_filemap_add_to_page_cache: ";
    const char *m = strstr(line, MARK);
    if (!m) return -1;
    /* the timestamp "<digits>.<digits>" right before the mark, after white space (the
     * collector's regex: \s(\d+\.\d+): ) */
    const char *b = m;
    while (b > line && b[-1] >= '0' && b[-1] <= '9') b--;
    if (b == m || b == line || b[-1] != '.') return -1;
    b--;
    const char *frac = b + 1;
    while (b > line && b[-1] >= '0' && b[-1] <= '9') b--;
    if (b == frac - 1 || b == line || (b[-1] != ' ' && b[-1] != '\t')) return -1;
    char ts[64];
    if ((size_t)(m - b) >= sizeof ts) return -1;
    memcpy(ts, b, (size_t)(m - b));
    ts[m - b] = 0;
    ev->t = strtod(ts, NULL);
    if (!isfinite(ev->t)) return -1;
    const char *s = m + sizeof MARK - 1;
    uint64_t major, minor, pfn;
    if (lit(&s, "dev ") || digits(&s, 10, &major) || lit(&s, ":") || digits(&s, 10, &minor) ||
        lit(&s, " ino ") || digits(&s, 16, &ev->ino) || lit(&s, " pfn=0x") || digits(&s, 16, &pfn) ||
        lit(&s, " ofs=") || digits(&s, 10, &ev->ofs))
        return -1;
    if (major > 0xfff || minor > 0xfffff) return -1; /* the kernel's dev_t: 12 + 20 bits */
    ev->major = (unsigned)major;
    ev->minor = (unsigned)minor;
    ev->order = -1;
    if (*s == ' ' && strncmp(s, " order=", 7) == 0) {
        s += 7;
        uint64_t o;
        if (digits(&s, 10, &o) || o > 63) return -1;
        ev->order = (int)o;
    }
    return *s == 0 || *s == ' ' || *s == '\n' || *s == '\r' ? 0 : -1;
}

flashrt_policy *frt_readahead_load(const char *dir, char *err, size_t errlen) {
    return frt_policy_load_for(dir, FRT_CAP_READAHEAD, err, errlen);
}
