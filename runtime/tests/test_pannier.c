/* test_pannier.c: C unit tests of Pannier's container cache (src/pannier/pannier.c,
 * pannier_store.c) under ASan+UBSan (`make test`) and valgrind (`make valgrind`): the hand
 * examples of sim/src/pannier/policy.rs and
 * sim/src/pannier/tire.rs (a fully invalidated container goes first, aging by elapsed lifetimes,
 * copy-forward from an expired survival top and from the cold LRU, promotion after ceil(5%) of
 * the blocks, TIRE's levels at q, 2q, 3q, 4q, overwrites of cached blocks in interval 1, the
 * ladder scaled to a credit below q), nearest-rank, the bytes, and recovery (the index
 * rebuilt, an overwritten block never served). The decisions on whole traces against the
 * simulator's: tests/runtime/test_runtime_pannier.py. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pannier/pannier.h"
#include "util/sketch.h"

#include "check.h"

/* A cache of `containers` containers of `ppc` 4 KiB blocks; decisions only. */
static frt_pn *cache_with(uint64_t containers, uint64_t ppc, enum frt_pn_policy pol, uint64_t life,
                          int open_in_cache) {
    struct frt_pn_config c;
    frt_pn_config_default(&c);
    c.open_in_cache = open_in_cache;
    c.policy = pol;
    c.cache_bytes = containers * ppc * 4096;
    c.container_bytes = ppc * 4096;
    c.fixed_lifetime = life;
    c.packing = 0;
    char err[256];
    frt_pn *p = frt_pn_open(&c, err, sizeof err);
    CHECK(p != NULL, "%s", err);
    return p;
}

static frt_pn *cache(uint64_t containers, uint64_t ppc, enum frt_pn_policy pol, uint64_t life) {
    return cache_with(containers, ppc, pol, life, 0);
}

static int rd(frt_pn *c, uint64_t b) { return frt_pn_request(c, 0.0, b, 1, 0); }
static int wr(frt_pn *c, uint64_t b) { return frt_pn_request(c, 0.0, b, 1, 1); }

static void test_lru_plus(void) {
    frt_pn *c = cache(2, 4, FRT_PN_LRU_PLUS, 0);
    if (!c) return;
    for (uint64_t p = 0; p < 4; p++) CHECK(rd(c, p) == 0, "cold miss");
    CHECK(frt_pn_counters(c)->host_write_pages == 4, "sealed");
    CHECK(rd(c, 0) == 1, "hit");
    for (uint64_t p = 4; p < 8; p++) rd(c, p);
    CHECK(rd(c, 1) == 1, "hit keeps the first container");
    for (uint64_t p = 8; p < 12; p++) rd(c, p);
    CHECK(frt_pn_counters(c)->erasures == 1, "one eviction");
    CHECK(rd(c, 2) == 1, "the first container stayed");
    CHECK(rd(c, 5) == 0, "the second went");
    frt_pn_close(c);
}

static void test_fully_invalidated_first(void) {
    frt_pn *c = cache(3, 2, FRT_PN_PANNIER, 1000);
    if (!c) return;
    for (uint64_t p = 0; p < 6; p++) rd(c, p);
    int64_t second = frt_pn_container_of(c, 2);
    CHECK(second >= 0, "cached");
    wr(c, 2);
    CHECK(frt_pn_container_survival(c, (uint32_t)second) == frt_pn_now(c) + 500, "half valid: now + 1000/2");
    wr(c, 3);
    CHECK(frt_pn_container_survival(c, (uint32_t)second) == frt_pn_now(c), "0%% valid: now");
    CHECK(frt_pn_counters(c)->erasures == 1, "the overwrites' container evicted one");
    CHECK(frt_pn_container_state(c, (uint32_t)second) == 0, "the invalid one is free");
    CHECK(rd(c, 0) == 1, "the LRU container stayed");
    CHECK(rd(c, 2) == 1, "the new copy");
    int64_t fresh = frt_pn_container_of(c, 3);
    CHECK(fresh >= 0 && frt_pn_container_state(c, (uint32_t)fresh) == 2, "sealed");
    CHECK(frt_pn_container_of(c, 2) == fresh, "2 and 3 together");
    frt_pn_close(c);
}

static void test_aging(void) {
    frt_pn *c = cache(8, 4, FRT_PN_PANNIER, 10);
    if (!c) return;
    for (uint64_t p = 0; p < 4; p++) rd(c, p);
    uint32_t id = (uint32_t)frt_pn_container_of(c, 0);
    for (int i = 0; i < 5; i++) rd(c, 0);
    rd(c, 1);
    rd(c, 1);
    CHECK(frt_pn_container_freq(c, id, 0) == 5 && frt_pn_container_freq(c, id, 1) == 2, "freq 5 2");
    /* decay point 4 + 10 = 14; at 35: ceil(21 / 10) = 3 steps */
    CHECK(frt_pn_container_decay(c, id) == 14, "%llu", (unsigned long long)frt_pn_container_decay(c, id));
    frt_pn_set_now(c, 35);
    frt_pn_age(c, id);
    CHECK(frt_pn_container_freq(c, id, 0) == 2 && frt_pn_container_freq(c, id, 1) == 0, "aged by 3");
    CHECK(frt_pn_container_accessed(c, id) == 1, "one accessed block");
    CHECK(frt_pn_container_decay(c, id) == 45, "next decay point");
    frt_pn_set_now(c, 45);
    frt_pn_age(c, id);
    CHECK(frt_pn_container_freq(c, id, 0) == 2, "not yet");
    frt_pn_close(c);
}

static void test_copy_forward(void) {
    frt_pn *c = cache_with(3, 4, FRT_PN_PANNIER, 8, 1);
    if (!c) return;
    for (uint64_t p = 0; p < 4; p++) rd(c, p);
    rd(c, 1);
    rd(c, 1);
    for (uint64_t p = 4; p < 16; p++) rd(c, p);
    CHECK(frt_pn_counters(c)->copied_forward_pages == 1, "%llu", (unsigned long long)frt_pn_counters(c)->copied_forward_pages);
    /* the copy opens a reinsertion container in RAM, which counts against the cache: the next
     * survival top (the second container, expired, nothing hot) goes too (pannier.rs's test) */
    CHECK(frt_pn_counters(c)->erasures == 2, "two erasures");
    CHECK(frt_pn_container_of(c, 1) >= 0 && frt_pn_container_of(c, 0) < 0, "1 copied, 0 dropped");
    CHECK(frt_pn_container_of(c, 4) < 0 && frt_pn_container_of(c, 8) >= 0, "4 dropped, 8 kept");
    CHECK(rd(c, 1) == 1, "hit");
    frt_pn_close(c);
}

/* pannier.rs's cold_lru_victim_copies_its_accessed_blocks_forward_unless_all_are: 3 containers
 * of 4 blocks, lifetime 1000 (no survival time expires), promotion after ceil(100% x 4) = 4
 * hits (all stay cold). The cold LRU victim A = {0..3} with block 1 accessed: 1 is copied
 * forward, 0, 2, 3 dropped; then B = {4..7}, all accessed: copying would free nothing, dropped
 * whole. */
static void test_cold_lru_copy_forward(void) {
    struct frt_pn_config k;
    frt_pn_config_default(&k);
    k.policy = FRT_PN_PANNIER;
    k.cache_bytes = 3 * 4 * 4096;
    k.container_bytes = 4 * 4096;
    k.fixed_lifetime = 1000;
    k.packing = 0;
    k.promotion_pct = 100.0;
    char err[256];
    frt_pn *c = frt_pn_open(&k, err, sizeof err);
    CHECK(c != NULL, "%s", err);
    if (!c) return;
    CHECK(frt_pn_promote_at(c) == 4, "promote at %u", frt_pn_promote_at(c));
    for (uint64_t p = 0; p < 4; p++) rd(c, p); /* A, sealed at clock 4 */
    CHECK(rd(c, 1) == 1, "a hit on block 1");
    for (uint64_t p = 4; p < 7; p++) {
        CHECK(rd(c, p) == 0, "miss %llu", (unsigned long long)p);
        CHECK(rd(c, p) == 1, "RAM hit %llu", (unsigned long long)p);
    }
    CHECK(rd(c, 7) == 0, "B sealed at clock 8");
    CHECK(rd(c, 7) == 1, "a hit on block 7");
    int64_t b = frt_pn_container_of(c, 4);
    CHECK(b >= 0 && frt_pn_container_accessed(c, (uint32_t)b) == 4, "B all accessed");
    for (uint64_t p = 8; p < 12; p++) rd(c, p);  /* C */
    for (uint64_t p = 12; p < 16; p++) rd(c, p); /* D: evicts the cold LRU, A */
    CHECK(frt_pn_counters(c)->erasures == 1, "%llu erasures", (unsigned long long)frt_pn_counters(c)->erasures);
    CHECK(frt_pn_counters(c)->copied_forward_pages == 1, "%llu copied", (unsigned long long)frt_pn_counters(c)->copied_forward_pages);
    CHECK(frt_pn_container_of(c, 1) >= 0, "1 copied forward");
    CHECK(frt_pn_container_of(c, 0) < 0 && frt_pn_container_of(c, 2) < 0 && frt_pn_container_of(c, 3) < 0, "0, 2, 3 dropped");
    for (uint64_t p = 16; p < 20; p++) rd(c, p); /* E: evicts the cold LRU, B, whole */
    CHECK(frt_pn_counters(c)->erasures == 2, "%llu erasures", (unsigned long long)frt_pn_counters(c)->erasures);
    CHECK(frt_pn_counters(c)->copied_forward_pages == 1, "%llu copied", (unsigned long long)frt_pn_counters(c)->copied_forward_pages);
    for (uint64_t p = 4; p < 8; p++) CHECK(frt_pn_container_of(c, p) < 0, "%llu dropped", (unsigned long long)p);
    CHECK(rd(c, 1) == 1, "1 hit (RAM)");
    CHECK(rd(c, 0) == 0, "0 miss");
    CHECK(rd(c, 4) == 0, "4 miss");
    frt_pn_close(c);
}

static void test_promotion(void) {
    frt_pn *c = cache(8, 512, FRT_PN_PANNIER, 0);
    if (!c) return;
    CHECK(frt_pn_promote_at(c) == 26, "ceil(0.05 x 512) = %u", frt_pn_promote_at(c));
    frt_pn_close(c);
    struct frt_pn_config k;
    frt_pn_config_default(&k);
    k.cache_bytes = 8 * 512 * 4096;
    k.promotion_pct = 1.0;
    char err[256];
    c = frt_pn_open(&k, err, sizeof err);
    CHECK(c && frt_pn_promote_at(c) == 6, "ceil(5.12) = 6");
    frt_pn_close(c);
}

/* 288 one-block containers under TIRE at 10 EPBPD: q = 10 * 288 * 300 / 86400 = 10 erasures
 * per quantum. `k` keeps the configuration (for variants). */
static frt_pn *tire_cache(struct frt_pn_config *k, int policy) {
    frt_pn_config_default(k);
    k->policy = policy;
    k->container_bytes = 4096;
    k->cache_bytes = 288 * 4096;
    k->has_tire = 1;
    k->lifespan_epbpd = 10.0;
    char err[256];
    frt_pn *c = frt_pn_open(k, err, sizeof err);
    CHECK(c != NULL, "%s", err);
    return c;
}

static void test_tire_levels(void) {
    struct frt_pn_config k;
    frt_pn *c = tire_cache(&k, FRT_PN_PANNIER);
    if (!c) return;
    char err[256];
    CHECK(fabs(frt_pn_quota(c) - 10.0) < 1e-12, "quota %g", frt_pn_quota(c));
    frt_pn_tick(c, 0.0);
    const uint64_t e[] = {0, 10, 11, 20, 21, 30, 31, 40, 41};
    const uint32_t lv[] = {0, 0, 1, 1, 2, 2, 3, 3, 4};
    for (int i = 0; i < 9; i++) CHECK(frt_pn_tire_level(c, e[i]) == lv[i], "erasures %llu: level %u", (unsigned long long)e[i], frt_pn_tire_level(c, e[i]));
    frt_pn_close(c);
    k.lifespan_epbpd = 0.0;
    CHECK(frt_pn_open(&k, err, sizeof err) == NULL && strstr(err, "lifespan target must be > 0"), "%s", err);
    k.has_tire = 0;
    k.container_bytes = 1024;
    CHECK(frt_pn_open(&k, err, sizeof err) == NULL && strstr(err, "larger than the container"), "%s", err);
}

static void test_tire_overwrites_and_low_credit(void) {
    /* q = 10 (288 one-block containers), LRU+. Quantum 0: 288 read misses fill the cache, 16
     * more evict 16 (erasure 11..16 are interval 1 (10, 20]: read misses still go in). In
     * interval 1 an overwrite of a cached block is admitted (one more seal, erasure 17), a
     * write of a block not in the cache is refused. Quantum 1 starts with credit
     * 10 + (10 - 17) = 3 < q: the ladder is (3, 12] in intervals of 3 (tire.rs). */
    struct frt_pn_config k;
    frt_pn *c = tire_cache(&k, FRT_PN_LRU_PLUS);
    if (!c) return;
    frt_pn_tick(c, 0.0);
    for (uint64_t p = 0; p < 304; p++) CHECK(rd(c, p) == 0, "cold miss %llu", (unsigned long long)p);
    CHECK(frt_pn_counters(c)->erasures == 16, "%llu erasures", (unsigned long long)frt_pn_counters(c)->erasures);
    CHECK(frt_pn_tire_level(c, 16) == 1, "interval 1");
    CHECK(wr(c, 303) == 1, "an overwrite of a cached block");
    CHECK(frt_pn_counters(c)->rejected_pages == 0 && frt_pn_counters(c)->erasures == 17, "admitted");
    CHECK(wr(c, 5000) == 0, "a new write");
    CHECK(frt_pn_counters(c)->rejected_pages == 1, "refused");
    CHECK(rd(c, 303) == 1, "303 still cached");
    frt_pn_tick(c, 300.0);
    CHECK(fabs(frt_pn_credit(c) - 3.0) < 1e-12, "credit %g", frt_pn_credit(c));
    const uint64_t e[] = {0, 3, 4, 6, 7, 9, 10, 12, 13};
    const uint32_t lv[] = {0, 0, 1, 1, 2, 2, 3, 3, 4};
    for (int i = 0; i < 9; i++) CHECK(frt_pn_tire_level(c, 17 + e[i]) == lv[i], "17 + %llu erasures: level %u", (unsigned long long)e[i], frt_pn_tire_level(c, 17 + e[i]));
    frt_pn_close(c);
}

static void test_nearest_rank(void) {
    uint64_t xs[100];
    for (int i = 0; i < 100; i++) xs[i] = (uint64_t)(100 - i);
    CHECK(frt_nearest_rank(xs, 100, 99.0) == 99, "p99");
    CHECK(frt_nearest_rank(xs, 100, 50.0) == 50, "p50");
    CHECK(frt_nearest_rank(xs, 100, 100.0) == 100, "p100");
    uint64_t one = 5;
    CHECK(frt_nearest_rank(&one, 1, 1.0) == 5, "one");
}

static frt_pn *data_cache(const char *dir, int recover, int journal) {
    static char flash[512], backing[512];
    snprintf(flash, sizeof flash, "%s/pn.flash", dir);
    snprintf(backing, sizeof backing, "%s/pn.backing", dir);
    if (!journal) {
        char j[600];
        snprintf(j, sizeof j, "%s.journal", flash);
        unlink(j);
    }
    struct frt_pn_config k;
    frt_pn_config_default(&k);
    k.policy = FRT_PN_LRU_PLUS;
    k.cache_bytes = 4 * 4 * 4096;
    k.container_bytes = 4 * 4096;
    k.flash_path = flash;
    k.backing_path = backing;
    k.recover = recover;
    char err[512];
    frt_pn *c = frt_pn_open(&k, err, sizeof err);
    CHECK(c != NULL, "%s", err);
    return c;
}

static void test_bytes_and_recovery(const char *dir, int journal) {
    char path[600];
    const char *names[] = {"pn.flash", "pn.flash.journal", "pn.backing", "pn.backing.versions"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    frt_pn *c = data_cache(dir, 0, 1);
    if (!c) return;
    for (uint64_t p = 0; p < 12; p++) rd(c, p); /* 3 sealed containers */
    CHECK(rd(c, 0) == 1 && rd(c, 4) == 1, "hits");
    wr(c, 1); /* invalidates 1 in a sealed container; the new version is in RAM only */
    CHECK(rd(c, 1) == 1, "the new version from RAM");
    wr(c, 13); /* not cached: version 1 in RAM */
    wr(c, 13); /* updated in place in RAM: version 2 */
    CHECK(rd(c, 13) == 1, "hit in RAM");
    const struct frt_pn_counters *k = frt_pn_counters(c);
    CHECK(k->verify_failures == 0 && k->verified_blocks > 0, "%llu failures", (unsigned long long)k->verify_failures);
    CHECK(k->flash_reads == 2, "%llu flash reads", (unsigned long long)k->flash_reads);
    frt_pn_close(c); /* no flush of anything: as kill -9 leaves it */

    c = data_cache(dir, 1, journal);
    if (!c) return;
    k = frt_pn_counters(c);
    CHECK(k->recovered_containers == 3 && k->recovered_blocks == 11, "%llu containers %llu blocks",
          (unsigned long long)k->recovered_containers, (unsigned long long)k->recovered_blocks);
    CHECK(frt_pn_container_of(c, 1) < 0, "the overwritten block is not in the index");
    CHECK(rd(c, 0) == 1 && rd(c, 11) == 1, "recovered hits");
    CHECK(rd(c, 1) == 0, "the overwritten block: a miss (its new version was in RAM)");
    CHECK(rd(c, 13) == 0, "13 was only in RAM");
    CHECK(k->recovered_hits == 2, "%llu", (unsigned long long)k->recovered_hits);
    CHECK(k->verify_failures == 0, "%llu failures after recovery", (unsigned long long)k->verify_failures);
    frt_pn_close(c);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    test_lru_plus();
    test_fully_invalidated_first();
    test_aging();
    test_copy_forward();
    test_cold_lru_copy_forward();
    test_promotion();
    test_tire_levels();
    test_tire_overwrites_and_low_credit();
    test_nearest_rank();
    test_bytes_and_recovery(dir, 1);
    test_bytes_and_recovery(dir, 0); /* without the journal: the version log alone */
    char path[600];
    const char *names[] = {"pn.flash", "pn.flash.journal", "pn.backing", "pn.backing.versions"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    return test_done("test_pannier");
}
