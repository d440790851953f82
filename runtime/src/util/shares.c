/* shares.c: a capacity split across streams (flashrt.h, "MLCache": flashrt_part_apportion,
 * flashrt_part_pages_of_shares; sim/src/core/shares.rs apportion, pages_of_shares): MLCache's
 * page cache and the engine's partition policies size their quotas with these rules. */
#include <math.h>
#include <stdint.h>

#include "flashml_policy.h"
#include "flashrt.h"

#define K_MAX FLASHML_PARTITION_MAX_STREAMS

void flashrt_part_apportion(const uint64_t *weights, int streams, uint64_t capacity, uint64_t *pages) {
    unsigned __int128 total = 0, c = capacity;
    for (int i = 0; i < streams; i++) total += weights[i];
    if (total == 0) {
        uint64_t ones[K_MAX];
        for (int i = 0; i < streams; i++) ones[i] = 1;
        flashrt_part_apportion(ones, streams, capacity, pages);
        return;
    }
    uint64_t sum = 0;
    unsigned __int128 rem[K_MAX];
    for (int i = 0; i < streams; i++) {
        pages[i] = (uint64_t)(weights[i] * c / total);
        rem[i] = weights[i] * c % total;
        sum += pages[i];
    }
    /* the largest remainders get one page each; ties to the lower index */
    for (uint64_t left = capacity - sum; left > 0; left--) {
        int best = -1;
        for (int i = 0; i < streams; i++)
            if (rem[i] != (unsigned __int128)-1 && (best < 0 || rem[i] > rem[best])) best = i;
        pages[best]++;
        rem[best] = (unsigned __int128)-1; /* taken */
    }
}

int flashrt_part_pages_of_shares(const double *shares, int streams, uint64_t capacity, uint64_t *pages) {
    double sum = 0.0;
    int valid = 1;
    for (int i = 0; i < streams; i++) {
        sum += shares[i];
        if (!(isfinite(shares[i]) && shares[i] >= 0.0)) valid = 0;
    }
    uint64_t w[K_MAX];
    if (!valid || !(sum > 0.0) || !isfinite(sum)) {
        for (int i = 0; i < streams; i++) w[i] = 1;
        flashrt_part_apportion(w, streams, capacity, pages);
        return 1;
    }
    double scale = (double)(1ull << 40) / sum;
    for (int i = 0; i < streams; i++) w[i] = (uint64_t)round(shares[i] * scale);
    flashrt_part_apportion(w, streams, capacity, pages);
    return 0;
}
