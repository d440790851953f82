/* stats.h: growable arrays of timing samples and their percentiles. Not public. */
#ifndef FLASHRT_STATS_H
#define FLASHRT_STATS_H

#include <stddef.h>

struct frt_vec {
    double *v;
    size_t n, cap;
};
void frt_vec_push(struct frt_vec *a, double x);
void frt_vec_free(struct frt_vec *a);
/* numpy's default percentile (linear between closest ranks) of a sorted array; NaN if empty */
double frt_percentile_sorted(const double *sorted, size_t n, double q);
/* sorts in place, then the percentile */
double frt_percentile(struct frt_vec *a, double q);

#endif
