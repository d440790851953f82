/* test_partition.c: C unit tests of MLCache's partitioned page cache (src/mlcache/partition.c)
 * under ASan+UBSan (`make test`) and valgrind (`make valgrind`): the share-to-page rules by
 * hand (src/util/shares.c: sim/src/core/shares.rs's apportion and pages_of_shares), the cache
 * by hand, its bytes read back, and bad input. The decisions with a real network against the
 * simulator's: tests/runtime/test_runtime_partition.py. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashml_policy.h"
#include "flashrt.h"

#include "check.h"

static void test_apportion(void) {
    uint64_t p[4];
    flashrt_part_apportion((const uint64_t[]){1, 1, 1}, 3, 10, p);
    CHECK(p[0] == 4 && p[1] == 3 && p[2] == 3, "%llu %llu %llu", (unsigned long long)p[0], (unsigned long long)p[1], (unsigned long long)p[2]);
    /* 7.5 and 2.5: equal remainders, the lower index gets the page */
    flashrt_part_apportion((const uint64_t[]){3, 1}, 2, 10, p);
    CHECK(p[0] == 8 && p[1] == 2, "%llu %llu", (unsigned long long)p[0], (unsigned long long)p[1]);
    /* 10 * (1, 2, 7) / 10 exactly */
    flashrt_part_apportion((const uint64_t[]){1, 2, 7}, 3, 10, p);
    CHECK(p[0] == 1 && p[1] == 2 && p[2] == 7, "exact");
    /* the largest remainder first: 5 * (1, 3) / 4 = 1.25, 3.75 -> 1, 4 */
    flashrt_part_apportion((const uint64_t[]){1, 3}, 2, 5, p);
    CHECK(p[0] == 1 && p[1] == 4, "%llu %llu", (unsigned long long)p[0], (unsigned long long)p[1]);
    flashrt_part_apportion((const uint64_t[]){0, 0}, 2, 5, p);
    CHECK(p[0] == 3 && p[1] == 2, "all-zero weights split evenly");
    /* weights near 2^64 do not overflow (128-bit products) */
    flashrt_part_apportion((const uint64_t[]){UINT64_MAX, UINT64_MAX / 3}, 2, 1000, p);
    CHECK(p[0] == 750 && p[1] == 250, "%llu %llu", (unsigned long long)p[0], (unsigned long long)p[1]);
}

static void test_pages_of_shares(void) {
    uint64_t p[4];
    CHECK(flashrt_part_pages_of_shares((const double[]){0.5, 0.5}, 2, 7, p) == 0 && p[0] == 4 && p[1] == 3, "halves");
    CHECK(flashrt_part_pages_of_shares((const double[]){1.0, 0.0, 0.0}, 3, 4, p) == 0 && p[0] == 4 && p[1] == 0 && p[2] == 0, "all to one");
    /* not normalised: scaled to their sum */
    CHECK(flashrt_part_pages_of_shares((const double[]){2.0, 6.0}, 2, 8, p) == 0 && p[0] == 2 && p[1] == 6, "scaled");
    CHECK(flashrt_part_pages_of_shares((const double[]){-1.0, 2.0}, 2, 6, p) == 1 && p[0] == 3 && p[1] == 3, "negative -> even");
    CHECK(flashrt_part_pages_of_shares((const double[]){NAN, 1.0}, 2, 6, p) == 1 && p[0] == 3, "NaN -> even");
    CHECK(flashrt_part_pages_of_shares((const double[]){INFINITY, 1.0}, 2, 6, p) == 1, "inf -> even");
    CHECK(flashrt_part_pages_of_shares((const double[]){0.0, 0.0}, 2, 5, p) == 1 && p[0] == 3 && p[1] == 2, "zero -> even");
}

static void test_cache_by_hand(const char *dir) {
    char err[FLASHRT_ERR_LEN], path[512];
    snprintf(path, sizeof path, "%s/part.cache", dir);
    struct flashrt_part_config cfg = {.capacity = 4, .interval = 100, .streams = 2, .writes_only = 1,
                                      .page_bytes = 4096, .cache_path = path, .direct = FLASHRT_DIRECT_OFF};
    flashrt_part *p = flashrt_part_open(&cfg, NULL, err, sizeof err);
    CHECK(p != NULL, "%s", err);
    if (!p) return;
    /* even: 2 pages each. Stream 0 writes 1, 2, 3 (1 goes), then 2 hits, 1 misses (3 goes) */
    int want[] = {0, 0, 0, 1, 0, 1};
    uint64_t pages[] = {1, 2, 3, 2, 1, 2};
    for (int i = 0; i < 6; i++) CHECK(flashrt_part_get(p, 0, pages[i], 1) == want[i], "request %d", i);
    /* a read goes around the cache (writes only) */
    CHECK(flashrt_part_get(p, 0, 2, 0) == 0, "read bypasses");
    /* stream 1 has its own pages: page 2 of stream 1 is another page */
    CHECK(flashrt_part_get(p, 1, 2, 1) == 0 && flashrt_part_get(p, 1, 2, 1) == 1, "streams apart");
    CHECK(flashrt_part_get(p, 2, 1, 1) == -1 && strstr(flashrt_part_error(p), "stream 2"), "bad stream");
    struct flashrt_part_metrics m;
    flashrt_part_metrics(p, &m);
    CHECK(m.requests == 9 && m.hits == 3 && m.write_hits == 3 && m.reads == 1 && m.read_hits == 0, "counts");
    CHECK(m.evictions == 2 && m.intervals == 1 && m.fallbacks == 0 && m.partition_calls == 0, "evictions %llu", (unsigned long long)m.evictions);
    CHECK(m.verified_bytes == 3 * 4096 && m.integrity_errors == 0 && m.bytes_written == 5 * 4096, "bytes");
    size_t n;
    const uint64_t *al = flashrt_part_allocations(p, &n);
    CHECK(n == 1 && al[0] == 2 && al[1] == 2, "allocations");
    flashrt_part_close(p);
    /* intervals: every 2 cached requests the split is reset (even: no change, no evictions) */
    cfg.interval = 2;
    cfg.cache_path = NULL;
    p = flashrt_part_open(&cfg, NULL, err, sizeof err);
    for (int i = 0; i < 5; i++) flashrt_part_get(p, i % 2, (uint64_t)i, 1);
    flashrt_part_metrics(p, &m);
    CHECK(m.intervals == 3 && m.resize_evictions == 0 && m.cached_requests == 5, "%llu intervals", (unsigned long long)m.intervals);
    flashrt_part_close(p);
    unlink(path);
}

static void test_bad_config(void) {
    char err[FLASHRT_ERR_LEN];
    struct flashrt_part_config ok = {.capacity = 4, .interval = 10, .streams = 2, .page_bytes = 4096};
    struct flashrt_part_config c = ok;
    c.streams = 0;
    CHECK(!flashrt_part_open(&c, NULL, err, sizeof err) && strstr(err, "streams"), "%s", err);
    c = ok;
    c.streams = FLASHML_PARTITION_MAX_STREAMS + 1;
    CHECK(!flashrt_part_open(&c, NULL, err, sizeof err) && strstr(err, "streams"), "%s", err);
    c = ok;
    c.capacity = 0;
    CHECK(!flashrt_part_open(&c, NULL, err, sizeof err) && strstr(err, "capacity"), "%s", err);
    c = ok;
    c.interval = 0;
    CHECK(!flashrt_part_open(&c, NULL, err, sizeof err) && strstr(err, "interval"), "%s", err);
    c = ok;
    c.cache_path = "/nonexistent-dir/x";
    c.page_bytes = 1000;
    CHECK(!flashrt_part_open(&c, NULL, err, sizeof err) && strstr(err, "4096"), "%s", err);
    c.page_bytes = 4096;
    CHECK(!flashrt_part_open(&c, NULL, err, sizeof err) && strstr(err, "/nonexistent-dir/x"), "%s", err);
    /* a bundle directory that is not one */
    CHECK(!flashrt_policy_load_partition("/nonexistent-bundle", err, sizeof err) && strstr(err, "/nonexistent-bundle"), "%s", err);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    test_apportion();
    test_pages_of_shares();
    test_cache_by_hand(dir);
    test_bad_config();
    return test_done("test_partition");
}
