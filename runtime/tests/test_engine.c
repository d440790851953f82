/* test_engine.c: the engine's policy slots (src/engine/policy_slots.h): each built-in eviction
 * policy on the region store by hand, the worked example (MRU, src/policies/eviction/mru.c)
 * through the whole cache on a cyclic scan, the built-in admission policies and both budget
 * policies by hand (src/policies/admission/, src/policies/budget/), and the refusals. Run under ASan+UBSan by `make
 * test` and under valgrind by `make valgrind`. Usage: test_engine POLICY_BUILD_DIR */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "policies/policy_internal.h"
#include "engine/policy_slots.h"
#include "engine/region.h"

#include "check.h"

static const char *POLDIR;

/* Writes one single-segment block `key` through the store at trace time t (the engine's
 * insert_segment without the device). */
static void put_block(struct frt_regions *m, uint64_t key, double t) {
    uint32_t slot = frt_regions_alloc_slot(m, t);
    frt_regions_add(m, key, 0, slot, t);
}

static int cached(const struct frt_regions *m, uint64_t key) { return frt_regions_find(m, key) != NULL; }

/* Three regions of one segment: blocks 1, 2, 3 fill them; block 1 is read; block 4 needs a
 * region (the open one, 3's, is sealed first): LRU evicts 2 (1 was read), FIFO 1 (the first
 * sealed), MRU 3 (sealed last, the most recent). */
static void test_store_by_hand(void) {
    const struct {
        int which;
        uint64_t gone;
    } cases[] = {{FLASHRT_LRU, 2}, {FLASHRT_FIFO, 1}, {FLASHRT_MRU, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct frt_eviction_ops *ev = frt_eviction_policy(cases[i].which);
        CHECK(ev && ev->victim && !ev->init && ev->needs == 0, "built-in %d", cases[i].which);
        if (!ev) continue;
        struct frt_regions m;
        memset(&m, 0, sizeof m);
        CHECK(frt_regions_init(&m, 3, 1) == 0, "init");
        m.ev = ev;
        put_block(&m, 1, 0);
        put_block(&m, 2, 1);
        put_block(&m, 3, 2);
        struct frt_blk *b = frt_regions_find(&m, 1);
        if (ev->refresh) ev->refresh(m.ev_st, &m, b);
        put_block(&m, 4, 3);
        for (uint64_t k = 1; k <= 4; k++)
            CHECK(cached(&m, k) == (k != cases[i].gone), "%s: block %llu cached %d", ev->name, (unsigned long long)k,
                  cached(&m, k));
        CHECK(m.evicted_regions == 1 && m.evicted_segments == 1, "%s: one eviction", ev->name);
        frt_regions_free(&m);
    }
    CHECK(frt_eviction_policy(-1) == NULL && frt_eviction_policy(99) == NULL, "no such policy");
    CHECK(flashrt_eviction_from_name("mru") == FLASHRT_MRU && flashrt_eviction_from_name("lfu") == -1, "names");
    CHECK(!strcmp(flashrt_eviction_name(FLASHRT_MAT), "mat") && flashrt_eviction_name(7) == NULL, "names back");
}

/* Replays `trace` through a cache of `cfg` (admission `pol`) over `backing`; fills `m`, the
 * accesses that returned data (`served`) and those whose bytes were wrong (`bad`). Returns
 * 0, or -1 (counted as a failed check) when the cache does not open. */
static int replay_verified(const struct flashrt_config *cfg, flashrt_policy *pol, const char *backing, const char *trace,
                           struct flashrt_metrics *m, uint64_t *served, uint64_t *bad) {
    char err[FLASHRT_ERR_LEN];
    flashrt_backing *bk = flashrt_backing_open(backing, NULL, cfg->direct, err, sizeof err);
    flashrt *rt = bk ? flashrt_open(cfg, pol, bk, err, sizeof err) : NULL;
    CHECK(rt != NULL, "%s", err);
    if (!rt) { flashrt_backing_close(bk); return -1; }
    flashrt_trace *tr = flashrt_trace_open(trace, err, sizeof err);
    CHECK(tr != NULL, "%s", err);
    struct flashrt_access a;
    *served = *bad = 0;
    while (tr && flashrt_trace_next(tr, &a, err, sizeof err) == 1) {
        struct flashrt_result res;
        CHECK(flashrt_access(rt, &a, &res) == 0, "%s", flashrt_error(rt));
        if (!res.data) continue;
        (*served)++;
        if (flashrt_verify(a.key, a.offset, res.data, res.len) >= 0) (*bad)++;
    }
    flashrt_metrics(rt, m);
    flashrt_trace_close(tr);
    flashrt_close(rt);
    flashrt_backing_close(bk);
    return 0;
}

/* A cyclic scan over 5 single-segment blocks through a cache of 4 regions of one segment: LRU
 * always evicts the block the scan wants next (no hit after the first round), MRU keeps the
 * older ones and hits on most of them; every byte served is verified. */
static void test_mru_on_a_scan(void) {
    char trace[512], backing[512], flash[512], err[FLASHRT_ERR_LEN];
    snprintf(trace, sizeof trace, "%s/scan.trace", TMP);
    snprintf(backing, sizeof backing, "%s/scan.img", TMP);
    snprintf(flash, sizeof flash, "%s/flash.img", TMP);
    FILE *f = fopen(trace, "w");
    fprintf(f, "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n");
    const int rounds = 20, blocks = 5;
    for (int i = 0; i < rounds * blocks; i++) fprintf(f, "%d 0 131072 %d.0 2 1 1 1\n", 100 + i % blocks, i);
    fclose(f);
    struct flashrt_prepare_stats st;
    CHECK(flashrt_prepare_backing(backing, NULL, trace, &st, err, sizeof err) == 0, "%s", err);
    flashrt_policy *pol = flashrt_policy_builtin("admitall", err, sizeof err);
    uint64_t hits[2] = {0, 0};
    for (int e = 0; e < 2; e++) {
        struct flashrt_config cfg;
        flashrt_config_default(&cfg);
        cfg.flash_path = flash;
        cfg.flash_bytes = 4 * 131072;
        cfg.region_bytes = 131072;
        cfg.eviction = e ? FLASHRT_MRU : FLASHRT_LRU;
        cfg.direct = FLASHRT_DIRECT_OFF;
        cfg.warmup_s = 0;
        struct flashrt_metrics m;
        uint64_t served, bad;
        if (replay_verified(&cfg, pol, backing, trace, &m, &served, &bad) != 0) continue;
        hits[e] = m.hits;
        CHECK(served == (uint64_t)(rounds * blocks), "every GET served: %llu", (unsigned long long)served);
        CHECK(bad == 0, "%llu wrong bytes", (unsigned long long)bad);
        CHECK(m.eviction_decisions == 0 && m.eviction_threshold != m.eviction_threshold, "no decisions of its own");
    }
    CHECK(hits[0] == 0, "LRU on a scan larger than the cache: %llu hits", (unsigned long long)hits[0]);
    CHECK(hits[1] >= (uint64_t)(rounds - 1) * 2, "MRU on the scan: %llu hits", (unsigned long long)hits[1]);
    /* MAT needs a bundle with the eviction capability */
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    cfg.flash_path = flash;
    cfg.flash_bytes = 4 * 131072;
    cfg.region_bytes = 131072;
    cfg.eviction = FLASHRT_MAT;
    cfg.direct = FLASHRT_DIRECT_OFF;
    flashrt_backing *bk = flashrt_backing_open(backing, NULL, cfg.direct, err, sizeof err);
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "eviction capability"), "%s", err);
    cfg.eviction_policy = pol; /* a built-in: no eviction functions */
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "no eviction capability"), "%s", err);
    cfg.eviction = (enum flashrt_eviction)42;
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "unknown eviction policy"), "%s", err);
    flashrt_backing_close(bk);
    flashrt_policy_free(pol);
}

/* The placement slot (src/policies/placement/): the store keeps an open region per stream
 * (streams fill their own regions; with every region open, another stream's is sealed to make
 * room), and packing sends a block hot once the ghost sketch has counted it more often than
 * the median block placed. */
static void test_placement_by_hand(void) {
    struct frt_regions m;
    memset(&m, 0, sizeof m);
    CHECK(frt_regions_init(&m, 3, 2) == 0, "init");
    m.ev = &frt_eviction_fifo;
    uint32_t a = frt_regions_alloc_in(&m, 0, 0, 0), b = frt_regions_alloc_in(&m, 0, 1, 0);
    uint32_t a2 = frt_regions_alloc_in(&m, 0, 0, 0), b2 = frt_regions_alloc_in(&m, 0, 1, 0);
    CHECK(a / 2 != b / 2 && a2 == a + 1 && b2 == b + 1, "a region per stream: %u %u %u %u", a, b, a2, b2);
    frt_regions_add(&m, 1, 0, a, 0);
    frt_regions_add(&m, 2, 0, b, 0);
    uint32_t c = frt_regions_alloc_in(&m, 1, 0, 0); /* stream 0's region is full: the third */
    CHECK(c / 2 != a / 2 && c / 2 != b / 2 && m.evicted_regions == 0, "a clean region: %u", c);
    uint32_t d = frt_regions_alloc_in(&m, 2, 1, 0); /* none clean: stream 1's full region is sealed, FIFO evicts stream 0's first */
    CHECK(m.evicted_regions == 1 && d / 2 == a / 2 && !frt_regions_find(&m, 1) && frt_regions_find(&m, 2), "FIFO: %u", d);
    frt_regions_free(&m);
    /* two regions, two streams, a third region wanted: the other stream's open region is sealed */
    memset(&m, 0, sizeof m);
    CHECK(frt_regions_init(&m, 2, 1) == 0, "init");
    m.ev = &frt_eviction_lru;
    a = frt_regions_alloc_in(&m, 0, 0, 0);
    b = frt_regions_alloc_in(&m, 0, 1, 0);
    c = frt_regions_alloc_in(&m, 1, 2, 0);
    CHECK(a != b && m.evicted_regions == 1 && (c == a || c == b) && m.open[2] == c, "sealed and evicted: %u", c);
    frt_regions_free(&m);
    /* packing */
    const struct frt_placement_ops *pk = frt_placement_policy(FLASHRT_PLACE_PACKING);
    CHECK(pk && pk->streams == 2 && frt_placement_policy(FLASHRT_PLACE_SINGLE)->streams == 1, "the policies");
    CHECK(flashrt_placement_from_name("packing") == FLASHRT_PLACE_PACKING && flashrt_placement_from_name("hot") == -1 &&
          !strcmp(flashrt_placement_name(FLASHRT_PLACE_SINGLE), "single") && !flashrt_placement_name(9), "names");
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    struct frt_placement_setup ps = {&cfg, 1000};
    void *st = NULL;
    char err[FLASHRT_ERR_LEN];
    CHECK(pk->init(&st, &ps, err, sizeof err) == 0, "%s", err);
    struct flashrt_access x = {.key = 7, .size = 131072, .op = 2};
    pk->access(st, &x);
    CHECK(pk->place(st, &x) == 0, "first seen: cold");
    pk->access(st, &x);
    CHECK(pk->place(st, &x) == 1, "seen before, no median yet: hot");
    for (uint64_t k = 100; k < 140; k++) { /* 40 blocks placed, each seen 3 times: median 2 */
        x.key = k;
        for (int i = 0; i < 3; i++) pk->access(st, &x);
        pk->place(st, &x);
    }
    x.key = 7;
    pk->access(st, &x); /* its third access: count 2, not above the median */
    CHECK(pk->place(st, &x) == 0, "at the median: cold");
    pk->access(st, &x);
    CHECK(pk->place(st, &x) == 1, "above the median: hot");
    struct frt_placement_stats pst;
    pk->stats(st, &pst);
    CHECK(pst.hot_misses >= 2, "hot misses counted: %llu", (unsigned long long)pst.hot_misses);
    pk->free(st);
}

/* The partition slot (src/policies/partition/): three regions of one segment, quotas 1 and 2;
 * each partition opens regions up to its quota, then evicts its own (LRU's oldest of it). */
static void test_partition_by_hand(void) {
    struct frt_regions m;
    memset(&m, 0, sizeof m);
    CHECK(frt_regions_init(&m, 3, 1) == 0, "init");
    m.ev = &frt_eviction_lru;
    m.nparts = 2;
    m.quota[0] = 1;
    m.quota[1] = 2;
    uint32_t s;
    s = frt_regions_alloc_in(&m, 0, 0, 0);
    frt_regions_add(&m, 10, 0, s, 0);
    s = frt_regions_alloc_in(&m, 1, 1, 1);
    frt_regions_add(&m, 20, 0, s, 1);
    s = frt_regions_alloc_in(&m, 2, 1, 1);
    frt_regions_add(&m, 21, 0, s, 2);
    CHECK(m.held[0] == 1 && m.held[1] == 2 && m.evicted_regions == 0, "each at its quota");
    s = frt_regions_alloc_in(&m, 3, 0, 0); /* partition 0 at its quota: its own region goes */
    frt_regions_add(&m, 11, 0, s, 3);
    CHECK(!frt_regions_find(&m, 10) && frt_regions_find(&m, 20) && frt_regions_find(&m, 21) && m.held[0] == 1,
          "partition 0 evicted its own");
    s = frt_regions_alloc_in(&m, 4, 1, 1); /* partition 1: its oldest (20) goes */
    frt_regions_add(&m, 22, 0, s, 4);
    CHECK(!frt_regions_find(&m, 20) && frt_regions_find(&m, 21) && frt_regions_find(&m, 11) && m.held[1] == 2,
          "partition 1 evicted its oldest");
    CHECK(m.evicted_regions == 2, "two evictions");
    /* partition 1's quota shrinks to 0 (an interval policy's next quotas): its open region is
     * sealed and both its regions go */
    m.quota[1] = 0;
    CHECK(frt_regions_shrink(&m, 5, 1, 1) == 2 && m.held[1] == 0 && m.open[1] == FRT_NONE, "shrunk");
    CHECK(!frt_regions_find(&m, 21) && !frt_regions_find(&m, 22) && frt_regions_find(&m, 11), "partition 0 kept");
    CHECK(frt_regions_shrink(&m, 6, 0, 1) == 0, "at its quota: nothing");
    frt_regions_free(&m);
    uint64_t q[3];
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    char err[FLASHRT_ERR_LEN];
    struct frt_partition_setup ps = {&cfg, 3, 10, 10, NULL};
    /* the quotas of the shares (pages_of_shares of the 10 regions), each holding its quota - 1
     * (frt_partition_holds, the simulator's rule) */
    CHECK(frt_partition_policy(FLASHRT_PART_EVEN)->quotas(&ps, q, err, sizeof err) == 0 && q[0] == 3 && q[1] == 2 &&
          q[2] == 2, "even: quotas 4 3 3 hold 3 2 2");
    double shares[3] = {1, 1, 2};
    cfg.partition_shares = shares;
    cfg.partition_nshares = 3;
    CHECK(frt_partition_policy(FLASHRT_PART_STATIC)->quotas(&ps, q, err, sizeof err) == 0 && q[0] == 2 && q[1] == 1 &&
          q[2] == 4, "static 1:1:2 of 10 (quotas 3 2 5) holds: %llu %llu %llu", (unsigned long long)q[0], (unsigned long long)q[1],
          (unsigned long long)q[2]);
    uint64_t one[3] = {1, 0, 9};
    frt_partition_holds(one, 3);
    CHECK(one[0] == 0 && one[1] == 0 && one[2] == 8, "a quota of 1 or 0 holds nothing");
    cfg.partition_nshares = 2;
    CHECK(frt_partition_policy(FLASHRT_PART_STATIC)->quotas(&ps, q, err, sizeof err) != 0 && strstr(err, "2 shares"),
          "%s", err);
    CHECK(frt_partition_policy(FLASHRT_PART_SHARED) == NULL && flashrt_partition_from_name("shared") == FLASHRT_PART_SHARED &&
          flashrt_partition_from_name("mlcache") == -1 && frt_partition_unsupported("mlcache") &&
          !frt_partition_unsupported("even"), "names");
}

/* One GET of single-segment block `key` at time t: 1 on a hit, 0 on a miss, -1 on an error;
 * the bytes are checked (a wrong byte fails the test). */
static int get_block(flashrt *rt, uint64_t key, double t) {
    struct flashrt_access a = {.key = key, .offset = 0, .size = 131072, .time = t, .op = 2};
    struct flashrt_result res;
    if (flashrt_access(rt, &a, &res) != 0) return -1;
    CHECK(res.data && flashrt_verify(key, 0, res.data, res.len) < 0, "block %llu: wrong bytes", (unsigned long long)key);
    return res.hit;
}

static flashrt *open_flash(struct flashrt_config *cfg, flashrt_policy *pol, flashrt_backing *bk, const char *flash,
                           int recover) {
    char err[FLASHRT_ERR_LEN];
    flashrt_config_default(cfg);
    cfg->flash_path = flash;
    cfg->flash_bytes = 4 * 131072;
    cfg->region_bytes = 131072;
    cfg->direct = FLASHRT_DIRECT_OFF;
    cfg->warmup_s = 0;
    cfg->recover = recover;
    flashrt *rt = flashrt_open(cfg, pol, bk, err, sizeof err);
    CHECK(rt != NULL, "open (recover %d): %s", recover, err);
    return rt;
}

/* Crash safety by hand (src/engine/persist.c): four regions of one segment. What a closed (or
 * killed: the engine writes nothing at close) cache held comes back with `recover`; a region
 * evicted and written again never brings its old block back; a segment whose read failed is
 * journalled and stays out; a torn header is skipped; another layout is refused. */
static void test_recovery_by_hand(void) {
    char trace[512], backing[512], flash[512], journal[600], err[FLASHRT_ERR_LEN];
    snprintf(trace, sizeof trace, "%s/rec.trace", TMP);
    snprintf(backing, sizeof backing, "%s/rec.img", TMP);
    snprintf(flash, sizeof flash, "%s/rec-flash.img", TMP);
    snprintf(journal, sizeof journal, "%s.journal", flash);
    FILE *f = fopen(trace, "w");
    fprintf(f, "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n");
    for (int i = 0; i < 6; i++) fprintf(f, "%d 0 131072 %d.0 2 1 1 1\n", 100 + i, i);
    fclose(f);
    struct flashrt_prepare_stats st;
    CHECK(flashrt_prepare_backing(backing, NULL, trace, &st, err, sizeof err) == 0, "%s", err);
    flashrt_policy *pol = flashrt_policy_builtin("admitall", err, sizeof err);
    flashrt_backing *bk = flashrt_backing_open(backing, NULL, FLASHRT_DIRECT_OFF, err, sizeof err);
    CHECK(pol && bk, "%s", err);
    struct flashrt_config cfg;
    struct flashrt_metrics m;
    unlink(flash);
    /* 1. a cold cache fills its four regions; each gets its header when its slot is written */
    flashrt *rt = open_flash(&cfg, pol, bk, flash, 0);
    if (!rt) goto out;
    for (uint64_t k = 100; k < 104; k++) CHECK(get_block(rt, k, (double)k) == 0, "cold miss %llu", (unsigned long long)k);
    CHECK(get_block(rt, 100, 104) == 1, "a hit");
    flashrt_close(rt);
    /* 2. recovered: all four hit; then block 104 takes LRU's region (block 101's) */
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    flashrt_metrics(rt, &m);
    CHECK(m.recovered_regions == 4 && m.recovered_segments == 4 && m.recovery_dropped == 0, "recovered %llu regions",
          (unsigned long long)m.recovered_regions);
    for (uint64_t k = 100; k < 104; k++) CHECK(get_block(rt, k, 200 + (double)k) == 1, "recovered hit %llu", (unsigned long long)k);
    CHECK(get_block(rt, 104, 300) == 0, "104 misses");
    flashrt_metrics(rt, &m);
    CHECK(m.recovered_hits == 4 && m.evicted_regions == 1, "recovered hits %llu", (unsigned long long)m.recovered_hits);
    flashrt_close(rt);
    /* 3. block 100's region now holds 104: 100 does not come back, 104 does */
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    flashrt_metrics(rt, &m);
    CHECK(m.recovered_regions == 4, "recovered %llu regions", (unsigned long long)m.recovered_regions);
    CHECK(get_block(rt, 104, 400) == 1 && get_block(rt, 101, 401) == 1, "104 and 101 recovered");
    flashrt_close(rt);
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    CHECK(get_block(rt, 100, 402) == 0, "100's old copy (its region rewritten) is not served");
    flashrt_close(rt);
    /* 4. a failed read of block 102 (and no admission, so its region stays): journalled, and
     * not back */
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    flashrt_close(rt);
    cfg.fail_read_every = 1;
    cfg.admission = FLASHRT_ADMIT_COINFLIP;
    cfg.coinflip_p = 0;
    rt = flashrt_open(&cfg, pol, bk, err, sizeof err);
    CHECK(rt != NULL, "%s", err);
    if (!rt) goto out;
    CHECK(get_block(rt, 102, 500) == 0, "the failed read is served from the backing");
    flashrt_metrics(rt, &m);
    CHECK(m.flash_read_errors == 1 && m.journalled == 1, "journalled %llu", (unsigned long long)m.journalled);
    flashrt_close(rt);
    struct stat js;
    CHECK(stat(journal, &js) == 0 && js.st_size == 16, "one journal record: %lld bytes", (long long)js.st_size);
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    flashrt_metrics(rt, &m);
    CHECK(m.recovery_dropped == 1, "the journalled copy dropped: %llu", (unsigned long long)m.recovery_dropped);
    CHECK(get_block(rt, 102, 600) == 0, "102 is not served from flash after its read failed");
    flashrt_close(rt);
    /* 5. a torn header (one byte of an entry changed): its region is skipped */
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    flashrt_metrics(rt, &m);
    uint64_t before = m.recovered_regions;
    flashrt_close(rt);
    int fd = open(flash, O_RDWR);
    unsigned char hdr[64];
    int torn = 0;
    for (int r = 0; r < 4 && !torn; r++) { /* the first region with a header */
        off_t at = (off_t)4 * 131072 + (off_t)r * 4096;
        if (pread(fd, hdr, sizeof hdr, at) != (ssize_t)sizeof hdr || hdr[0] != 'F') continue;
        hdr[25] ^= 1;
        torn = pwrite(fd, hdr, sizeof hdr, at) == (ssize_t)sizeof hdr;
    }
    close(fd);
    CHECK(torn && before > 0, "a header to tear");
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    flashrt_metrics(rt, &m);
    CHECK(m.recovered_regions == before - 1, "torn header skipped: %llu of %llu", (unsigned long long)m.recovered_regions,
          (unsigned long long)before);
    flashrt_close(rt);
    /* 6. another layout: refused */
    cfg.flash_bytes = 5 * 131072;
    CHECK(flashrt_open(&cfg, pol, bk, err, sizeof err) == NULL && strstr(err, "--flash-bytes and --region-bytes"), "%s", err);
    /* 7. without recover the flash starts empty */
    rt = open_flash(&cfg, pol, bk, flash, 0);
    if (!rt) goto out;
    CHECK(get_block(rt, 103, 700) == 0, "cold again");
    flashrt_close(rt);
    rt = open_flash(&cfg, pol, bk, flash, 1);
    if (!rt) goto out;
    flashrt_metrics(rt, &m);
    CHECK(m.recovered_regions == 1, "only what the cold run wrote: %llu", (unsigned long long)m.recovered_regions);
    flashrt_close(rt);
out:
    flashrt_backing_close(bk);
    flashrt_policy_free(pol);
}

/* MAT through the whole cache with the hand-written eviction .so (tests/policies/
 * evict_policy.c: distance = the request's size): decisions are made, predictions asked, and
 * every byte served is right, with regions of one segment and of four. */
static void test_mat_runs(void) {
    char trace[512], backing[512], flash[512], dir[300], so[512], err[FLASHRT_ERR_LEN];
    snprintf(trace, sizeof trace, "%s/mat.trace", TMP);
    snprintf(backing, sizeof backing, "%s/mat.img", TMP);
    snprintf(flash, sizeof flash, "%s/mflash.img", TMP);
    FILE *f = fopen(trace, "w");
    fprintf(f, "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n");
    uint64_t rng = 5;
    for (int i = 0; i < 3000; i++) {
        rng = frt_mix64(rng);
        uint64_t k = (rng % 80) * ((rng >> 20) % 80) / 80;
        fprintf(f, "%llu %llu %llu %d.0 %d 1 1 1\n", (unsigned long long)(500 + k), (unsigned long long)(k % 8) * 131072,
                (unsigned long long)(1 + k % 4) * 131072, i, (rng >> 40) % 10 == 0 ? 3 : 2);
    }
    fclose(f);
    struct flashrt_prepare_stats st;
    CHECK(flashrt_prepare_backing(backing, NULL, trace, &st, err, sizeof err) == 0, "%s", err);
    /* the bundle: evict.so under a manifest listing the eviction capability */
    snprintf(dir, sizeof dir, "%s/evb", TMP);
    mkdir(dir, 0755);
    snprintf(so, sizeof so, "%s/policy.so", dir);
    char src[512], cmd[2048];
    snprintf(src, sizeof src, "%s/evict.so", POLDIR);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, so);
    CHECK(system(cmd) == 0, "copy");
    char hex[65];
    CHECK(frt_sha256_file(so, hex, err, sizeof err) == 0, "%s", err);
    char mf[512];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    f = fopen(mf, "w");
    fprintf(f, MANIFEST_HEAD "\"system\": \"mat\", \"capabilities\": [\"eviction\"], \"abi_version\": %d, \"sha256\": \"%s\", "
            "\"evict_contract_hash\": \"%s\"}", file_size(so), FLASHML_POLICY_ABI_VERSION, hex, FLASHML_EVICT_CONTRACT_HASH);
    fclose(f);
    flashrt_policy *evb = flashrt_policy_load_eviction(dir, err, sizeof err);
    CHECK(evb != NULL, "%s", err);
    flashrt_policy *pol = flashrt_policy_builtin("admitall", err, sizeof err);
    for (int spr = 1; evb && spr <= 4; spr *= 4) {
        struct flashrt_config cfg;
        flashrt_config_default(&cfg);
        cfg.flash_path = flash;
        cfg.flash_bytes = 64 * 131072;
        cfg.region_bytes = (uint64_t)spr * 131072;
        cfg.eviction = FLASHRT_MAT;
        cfg.eviction_policy = evb;
        cfg.direct = FLASHRT_DIRECT_OFF;
        cfg.warmup_s = 0;
        struct flashrt_metrics m;
        uint64_t served, bad;
        if (replay_verified(&cfg, pol, backing, trace, &m, &served, &bad) != 0) continue;
        CHECK(bad == 0, "spr %d: %llu wrong bytes", spr, (unsigned long long)bad);
        CHECK(m.hits > 0 && m.evicted_regions > 0 && m.eviction_decisions > 0, "spr %d: hits %llu decisions %llu", spr,
              (unsigned long long)m.hits, (unsigned long long)m.eviction_decisions);
        CHECK(m.eviction_predictions >= m.eviction_decisions && m.eviction_threshold > 0, "spr %d: predictions", spr);
        CHECK(served > 0, "spr %d: nothing served", spr);
    }
    flashrt_policy_free(pol);
    flashrt_policy_free(evb);
}

/* One admission policy of the slot, built for a cache of `capacity` segments. */
static void *admission(const struct frt_admission_ops *ops, const struct flashrt_config *cfg, uint64_t capacity) {
    char err[256] = "";
    void *st = NULL;
    struct frt_admission_setup s = {cfg, NULL, capacity};
    int rc = ops->init(&st, &s, err, sizeof err);
    CHECK(rc == 0, "%s: %s", ops->name, err);
    return st;
}

static int ask(const struct frt_admission_ops *ops, void *st, uint64_t key, uint64_t index, unsigned seg) {
    struct flashrt_access a = {0};
    a.key = key;
    unsigned lo = seg, hi = seg;
    return ops->admit_segment ? ops->admit_segment(st, &a, index, seg) : ops->decide(st, &a, index, &lo, &hi);
}

/* The built-in admission policies by name, against their definitions (sim/src/flash/admission.rs). */
static void test_admission_by_hand(void) {
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    /* rejectx: keys (block, segment), a window of 2 x 2 = 4 keys; blocks that differ only in
     * their top bits are different keys */
    const struct frt_admission_ops *rx = frt_admission_policy(FLASHRT_ADMIT_REJECTX);
    CHECK(rx && rx->admit_segment && !rx->decide && !strcmp(rx->name, "rejectx"), "rejectx");
    void *st = admission(rx, &cfg, 2);
    const uint64_t big = 1ull << 63 | 7;
    const struct { uint64_t key; unsigned seg; int want; } q[] = {
        {7, 0, 0}, {7, 0, 1},   /* seen once before: admitted */
        {big, 0, 0}, {7, 1, 0}, /* another block with the same low bits; another segment */
        {7, 0, 1}, {9, 0, 0},   /* still there; the history holds 4 keys */
        {9, 1, 0},              /* (7, 0) leaves (the oldest) */
        {7, 0, 0}, {big, 0, 0}, /* re-entered; (big, 0) left too */
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        CHECK(ask(rx, st, q[i].key, i, q[i].seg) == q[i].want, "rejectx query %zu", i);
    rx->free(st);
    /* rejectx_block: keys by block, once per miss, a history of the last 4 misses */
    const struct frt_admission_ops *rb = frt_admission_policy(FLASHRT_ADMIT_REJECTX_BLOCK);
    CHECK(rb && rb->decide && !rb->admit_segment, "rejectx_block");
    st = admission(rb, &cfg, 2);
    const int want_b[] = {0, 1, 0, 0, 0, 0, 0};
    const uint64_t keys_b[] = {7, 7, big, 1, 2, 3, 7}; /* 7's last query left the history */
    for (size_t i = 0; i < sizeof keys_b / sizeof keys_b[0]; i++)
        CHECK(ask(rb, st, keys_b[i], i, 0) == want_b[i], "rejectx_block query %zu", i);
    rb->free(st);
    /* coinflip: p = 0 never, p = 1 always, p = 0.3 about 30%, and the same draws twice */
    const struct frt_admission_ops *cf = frt_admission_policy(FLASHRT_ADMIT_COINFLIP);
    CHECK(cf && cf->decide, "coinflip");
    int n[3] = {0, 0, 0};
    const double ps[3] = {0.0, 1.0, 0.3};
    for (int k = 0; k < 3; k++) {
        cfg.coinflip_p = ps[k];
        st = admission(cf, &cfg, 2);
        void *st2 = admission(cf, &cfg, 2);
        for (uint64_t i = 0; i < 10000; i++) {
            int a = ask(cf, st, i * 31 % 977, i, 0);
            CHECK(a == ask(cf, st2, i * 31 % 977, i, 0), "coinflip is deterministic");
            n[k] += a;
        }
        cf->free(st);
        cf->free(st2);
    }
    CHECK(n[0] == 0 && n[1] == 10000 && n[2] > 2700 && n[2] < 3300, "coinflip %d %d %d", n[0], n[1], n[2]);
    /* names: the simulator's, and the two it has that the runtime cannot run */
    CHECK(flashrt_admission_from_name("rejectx_block") == FLASHRT_ADMIT_REJECTX_BLOCK, "by name");
    CHECK(flashrt_admission_from_name("opt") < 0 && frt_admission_unsupported("opt") &&
          frt_admission_unsupported("threshold") && !frt_admission_unsupported("rejectx"), "unsupported");
    /* the bundle policy needs a bundle with the admission capability */
    const struct frt_admission_ops *bu = frt_admission_policy(FLASHRT_ADMIT_BUNDLE);
    CHECK(bu && (bu->needs & FRT_CAP_ADMISSION), "bundle needs the capability");
}

/* One budget policy of the slot over `units` erase units. */
static void *budget(const struct frt_budget_ops *ops, const struct flashrt_config *cfg, uint64_t units) {
    char err[256] = "";
    void *st = NULL;
    struct frt_budget_setup s = {cfg, units};
    int rc = ops->init(&st, &s, err, sizeof err);
    CHECK(rc == 0, "%s: %s", ops->name, err);
    return st;
}

/* The budget slot's two policies by hand: the token bucket's tokens, TIRE's ladder and credit
 * (sim/src/pannier/tire.rs's rules). */
static void test_budget_by_hand(void) {
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    struct frt_budget_stats bs;
    /* bucket: 1 MB/s at a 100% sample, 2 s deep: full at the start, refilled by trace time */
    const struct frt_budget_ops *bk = frt_budget_policy(FLASHRT_BUDGET_BUCKET);
    CHECK(bk && !strcmp(bk->name, "bucket") && !bk->tick, "bucket");
    cfg.write_rate_mbps = 1.0;
    cfg.sample_ratio = 100.0;
    cfg.write_burst_s = 2.0;
    void *st = budget(bk, &cfg, 8);
    const double mb = FRT_MB;
    CHECK(bk->admit(st, 100.0, (uint64_t)(1.5 * mb), FRT_BUDGET_READ_MISS, 0, 0) == 1, "bucket: 1.5 of 2 MB");
    CHECK(bk->admit(st, 100.0, (uint64_t)mb, FRT_BUDGET_READ_MISS, 0, 0) == 0, "bucket: 0.5 MB left");
    CHECK(bk->admit(st, 101.0, (uint64_t)mb, FRT_BUDGET_READ_MISS, 0, 0) == 1, "bucket: refilled by 1 MB");
    CHECK(bk->admit(st, 1000.0, (uint64_t)(2.5 * mb), FRT_BUDGET_READ_MISS, 0, 0) == 0, "bucket: never over its depth");
    memset(&bs, 0, sizeof bs);
    bk->stats(st, &bs);
    CHECK(bs.refused == 2, "bucket refused %llu", (unsigned long long)bs.refused);
    bk->free(st);
    cfg.write_rate_mbps = 0;
    CHECK(bk->init(&st, &(struct frt_budget_setup){&cfg, 8}, (char[128]){0}, 128) != 0, "bucket without a rate");
    /* tire: 10 units x 8.64 erasures a day = 1 erasure per 1000 s quantum, K = 4, 3 steps:
     * b = 1; the steps are (1, 2], (2, 3], (3, 4] */
    const struct frt_budget_ops *ti = frt_budget_policy(FLASHRT_BUDGET_TIRE);
    CHECK(ti && !strcmp(ti->name, "tire") && ti->tick, "tire");
    cfg.lifespan_epbpd = 8.64;
    cfg.tire_quantum_s = 1000.0;
    st = budget(ti, &cfg, 10);
    ti->tick(st, 0.0, 0);
    const struct { uint64_t e; enum frt_budget_kind k; uint32_t count; int want; } q[] = {
        {0, FRT_BUDGET_CLIENT_WRITE, 0, 1}, {1, FRT_BUDGET_CLIENT_WRITE, 0, 1}, /* e <= b: all */
        {2, FRT_BUDGET_CLIENT_WRITE, 0, 0}, {2, FRT_BUDGET_READ_MISS, 0, 1},    /* step 1 */
        {3, FRT_BUDGET_READ_MISS, 0, 0}, {3, FRT_BUDGET_REINSERTION, 1, 1},     /* step 2 */
        {4, FRT_BUDGET_OVERWRITE, 1, 0}, {4, FRT_BUDGET_OVERWRITE, 2, 1},       /* step 3 */
        {5, FRT_BUDGET_REINSERTION, 9, 0},                                      /* past K b */
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        CHECK(ti->admit(st, 1.0, 1, q[i].k, q[i].count, q[i].e) == q[i].want, "tire case %zu", i);
    /* the quantum closes with 5 erasures: credit 1 + 1 - 5 = -3, the next starts blocked */
    ti->tick(st, 1000.0, 5);
    CHECK(ti->admit(st, 1001.0, 1, FRT_BUDGET_READ_MISS, 9, 5) == 0, "tire: blocked");
    ti->tick(st, 2000.0, 5);
    memset(&bs, 0, sizeof bs);
    ti->stats(st, &bs);
    CHECK(bs.quanta == 2 && bs.blocked == 1 && bs.quota == 1.0 && bs.credit == -2.0 && bs.refused == 5,
          "tire stats: %llu quanta, %llu blocked, quota %g, credit %g, %llu refused", (unsigned long long)bs.quanta,
          (unsigned long long)bs.blocked, bs.quota, bs.credit, (unsigned long long)bs.refused);
    ti->free(st);
    cfg.tire_steps = 0;
    CHECK(ti->init(&st, &(struct frt_budget_setup){&cfg, 10}, (char[128]){0}, 128) != 0, "tire: bad steps");
    CHECK(frt_budget_policy(FLASHRT_BUDGET_NONE) == NULL && flashrt_budget_from_name("none") == FLASHRT_BUDGET_NONE &&
          !strcmp(flashrt_budget_name(FLASHRT_BUDGET_TIRE), "tire"), "budget names");
}

/* A backing whose reads are the caller's (flashrt_backing_open_fn, `flashrt mount`'s): one
 * block of bytes in memory, short of 8 MiB (the rest reads as zeros). */
struct mem_backing {
    uint8_t *bytes;
    size_t n;
    unsigned reads;
    int fail;
};

static int mem_read(void *ctx, uint64_t key, uint64_t pos, uint8_t *buf, size_t n) {
    struct mem_backing *mb = ctx;
    if (mb->fail || key != 5) {
        errno = EIO;
        return -1;
    }
    mb->reads++;
    size_t have = pos < mb->n ? mb->n - pos : 0;
    if (have > n) have = n;
    memcpy(buf, mb->bytes + pos, have);
    memset(buf + have, 0, n - have);
    return 0;
}

/* A miss reads the caller's backing, a second read hits, flashrt_invalidate drops exactly the
 * segments a changed range touches (the next read misses and returns the new bytes), and a
 * failing backing read fails the access with a message. */
static void test_invalidate_by_hand(void) {
    struct mem_backing mb = {malloc(300000), 300000, 0, 0};
    for (size_t i = 0; i < mb.n; i++) mb.bytes[i] = (uint8_t)(i * 7 + 3);
    char err[FLASHRT_ERR_LEN] = "", flash[512];
    snprintf(flash, sizeof flash, "%s/invalidate.img", TMP);
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    cfg.flash_path = flash;
    cfg.flash_bytes = 8u << 20;
    cfg.direct = FLASHRT_DIRECT_OFF;
    cfg.admission = FLASHRT_ADMIT_ALL;
    flashrt_backing *bk = flashrt_backing_open_fn(mem_read, &mb, "mem", err, sizeof err);
    flashrt *rt = bk ? flashrt_open(&cfg, NULL, bk, err, sizeof err) : NULL;
    CHECK(rt != NULL, "open: %s", err);
    if (!rt) { flashrt_backing_close(bk); free(mb.bytes); return; }
    struct flashrt_access a = {5, 131000, 2000, 1.0, 1, 0, 0, 1}; /* segments 0 and 1 */
    struct flashrt_result r;
    CHECK(flashrt_access(rt, &a, &r) == 0 && !r.hit && r.len == 2000 && !memcmp(r.data, mb.bytes + 131000, 2000),
          "the miss serves the backing's bytes");
    CHECK(mb.reads == 1, "one backing read, %u", mb.reads);
    a.time = 2.0;
    CHECK(flashrt_access(rt, &a, &r) == 0 && r.hit && !memcmp(r.data, mb.bytes + 131000, 2000), "then a hit");
    CHECK(flashrt_invalidate(rt, 5, 262144, 100) == 0, "an uncached segment: nothing dropped");
    CHECK(flashrt_invalidate(rt, 6, 0, 100) == 0 && flashrt_invalidate(rt, 5, 8u << 20, 100) == 0, "nothing there");
    memset(mb.bytes + 131072, 0xEE, 100); /* segment 1 changes */
    CHECK(flashrt_invalidate(rt, 5, 131072, 100) == 1, "segment 1 dropped");
    a.time = 3.0;
    CHECK(flashrt_access(rt, &a, &r) == 0 && !r.hit && !memcmp(r.data, mb.bytes + 131000, 2000),
          "after the drop: a miss with the new bytes");
    CHECK(mb.reads == 2, "a second backing read, %u", mb.reads);
    struct flashrt_access tail = {5, 299000, 5000, 4.0, 1, 0, 0, 2}; /* past the backing's end: zeros */
    CHECK(flashrt_access(rt, &tail, &r) == 0 && !memcmp(r.data, mb.bytes + 299000, 1000) && r.data[1000] == 0 &&
              r.data[4999] == 0, "bytes past the end read as zeros");
    CHECK(flashrt_invalidate(rt, 5, 0, (uint64_t)1 << 40) == 3, "a range to the block's end: segments 0, 1, 2");
    mb.fail = 1;
    a.time = 5.0;
    CHECK(flashrt_access(rt, &a, &r) == -1 && strstr(flashrt_error(rt), "mem: read of"), "a failing read: %s",
          flashrt_error(rt));
    struct flashrt_metrics m;
    flashrt_metrics(rt, &m);
    CHECK(m.gets == 5 && m.hits == 1, "gets %llu hits %llu", (unsigned long long)m.gets, (unsigned long long)m.hits);
    flashrt_close(rt);
    flashrt_backing_close(bk);
    free(mb.bytes);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_engine POLICY_BUILD_DIR\n");
        return 2;
    }
    POLDIR = argv[1];
    test_scratch("flashrt-engine");
    test_store_by_hand();
    test_mru_on_a_scan();
    test_mat_runs();
    test_recovery_by_hand();
    test_placement_by_hand();
    test_partition_by_hand();
    test_admission_by_hand();
    test_budget_by_hand();
    test_invalidate_by_hand();
    return test_done("test_engine");
}
