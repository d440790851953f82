/* stats.c: timing arrays and percentiles (stats.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/stats.h"

void frt_vec_push(struct frt_vec *a, double x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 1024;
        double *v = realloc(a->v, nc * sizeof *v);
        if (!v) return; /* a lost sample only loses precision of a percentile */
        a->v = v;
        a->cap = nc;
    }
    a->v[a->n++] = x;
}

void frt_vec_free(struct frt_vec *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

double frt_percentile_sorted(const double *s, size_t n, double q) {
    if (n == 0) return NAN;
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < n ? lo + 1 : n - 1;
    double frac = pos - (double)lo;
    return s[lo] + (s[hi] - s[lo]) * frac;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double frt_percentile(struct frt_vec *a, double q) {
    if (a->n == 0) return NAN;
    qsort(a->v, a->n, sizeof(double), cmp_double);
    return frt_percentile_sorted(a->v, a->n, q);
}
