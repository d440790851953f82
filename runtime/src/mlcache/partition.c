/* partition.c: MLCache's partitioned page cache (flashrt.h, "MLCache"): one LRU list per
 * stream with a quota of pages, re-divided at each interval boundary by the policy's
 * flashml_partition from the monitor's features of the interval before. Every step is the
 * simulator's (sim/src/mlcache/partition.rs Partitions::access/resize; the shares as pages,
 * util/shares.c: sim/src/core/shares.rs pages_of_shares, apportion;
 * sim/src/mlcache/reuse.rs interval_histograms), so the quotas and hits are the same on the same
 * requests (tests/runtime/test_runtime_partition.py).
 *
 * The monitor (monitor.h, the engine's bundle partition's too, mlcache.c): exact
 * per-stream LRU stack distances with a Fenwick tree over each stream's request positions.
 * The trees grow with the stream's requests (a replay's length); a long-running server would
 * renumber positions, which changes no distance. Storage: slot i of the cache file holds one page
 * (page_bytes); capacity pages in all. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device.h"
#include "mlcache/mlcache_settings.h"
#include "mlcache/monitor.h"
#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "policies/policy_internal.h"

#define NIL UINT32_MAX
#define MAX_STREAMS FLASHML_PARTITION_MAX_STREAMS

struct flashrt_part {
    struct flashrt_part_config cfg;
    frt_partition_fn partition; /* NULL: even */
    int streams;
    /* per stream: page -> slot, LRU list (head = most recent), quota, used */
    struct frt_map index[MAX_STREAMS];
    uint32_t head[MAX_STREAMS], tail[MAX_STREAMS];
    uint64_t quota[MAX_STREAMS], used[MAX_STREAMS];
    uint32_t *prev, *next, *free_slots;
    uint64_t *page_of;
    size_t nfree;
    struct frt_mon mon;
    uint64_t seen; /* cached requests so far */
    uint64_t *alloc;
    size_t nalloc, alloccap;
    /* data */
    struct frt_device dev;
    uint8_t *buf, *want;
    /* counters */
    uint64_t requests, hits, reads, read_hits, writes, write_hits, evictions, resize_evictions;
    uint64_t fallbacks, bytes_written, bytes_read, verified, integrity_errors;
    double started;
    char err[FLASHRT_ERR_LEN];
};

flashrt_policy *flashrt_policy_load_partition(const char *dir, char *err, size_t errlen) {
    return frt_policy_load_for(dir, FRT_CAP_PARTITION, err, errlen);
}

static int fail(flashrt_part *p, const char *fmt, ...) FRT_PRINTF(2, 3);
static int fail(flashrt_part *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- the partitions ---- */

static void lru_unlink(flashrt_part *p, int s, uint32_t v) {
    if (p->prev[v] != NIL) p->next[p->prev[v]] = p->next[v];
    else p->head[s] = p->next[v];
    if (p->next[v] != NIL) p->prev[p->next[v]] = p->prev[v];
    else p->tail[s] = p->prev[v];
}

static void lru_push(flashrt_part *p, int s, uint32_t v) {
    p->prev[v] = NIL;
    p->next[v] = p->head[s];
    if (p->head[s] != NIL) p->prev[p->head[s]] = v;
    p->head[s] = v;
    if (p->tail[s] == NIL) p->tail[s] = v;
}

static void evict_from(flashrt_part *p, int s) {
    uint32_t v = p->tail[s];
    lru_unlink(p, s, v);
    frt_map_del(&p->index[s], p->page_of[v]);
    p->used[s]--;
    p->free_slots[p->nfree++] = v;
}

/* The quotas of the interval that starts now, and the evictions of the shrinking ones. */
static int start_interval(flashrt_part *p) {
    double shares[MAX_STREAMS];
    uint64_t pages[MAX_STREAMS];
    if (frt_mon_shares(&p->mon, p->partition, shares) != 0) return fail(p, "flashml_partition refused %d streams", p->streams);
    p->fallbacks += (uint64_t)flashrt_part_pages_of_shares(shares, p->streams, p->cfg.capacity, pages);
    if (p->nalloc + (size_t)p->streams > p->alloccap) {
        size_t cap = p->alloccap ? p->alloccap * 2 : (size_t)p->streams * 64;
        uint64_t *a = realloc(p->alloc, cap * sizeof *a);
        if (!a) return fail(p, "out of memory");
        p->alloc = a;
        p->alloccap = cap;
    }
    for (int s = 0; s < p->streams; s++) {
        p->alloc[p->nalloc++] = pages[s];
        p->quota[s] = pages[s];
        while (p->used[s] > p->quota[s]) {
            evict_from(p, s);
            p->resize_evictions++;
        }
    }
    return 0;
}

static uint64_t content_key(int s, uint64_t page) { return page ^ ((uint64_t)s << 56); }

flashrt_part *flashrt_part_open(const struct flashrt_part_config *cfg, flashrt_policy *policy,
                                char *err, size_t errlen) {
    const char *why;
    if ((why = frt_mlc_capacity_problem(cfg->capacity > INT64_MAX ? INT64_MAX : (int64_t)cfg->capacity))) {
        frt_seterr(err, errlen, "capacity must be %s, got %llu", why, (unsigned long long)cfg->capacity);
        return NULL;
    }
    if ((why = frt_mlc_interval_problem(cfg->interval > INT64_MAX ? INT64_MAX : (int64_t)cfg->interval))) {
        frt_seterr(err, errlen, "interval must be %s, got %llu", why, (unsigned long long)cfg->interval);
        return NULL;
    }
    if (cfg->streams < 1 || cfg->streams > MAX_STREAMS) {
        frt_seterr(err, errlen, "%d streams; the partition contract has 1..%d", cfg->streams, MAX_STREAMS);
        return NULL;
    }
    if (cfg->capacity >= NIL) {
        frt_seterr(err, errlen, "capacity %llu pages: at most %u", (unsigned long long)cfg->capacity, NIL - 1);
        return NULL;
    }
    if (cfg->cache_path && (cfg->page_bytes == 0 || cfg->page_bytes % 4096)) {
        frt_seterr(err, errlen, "page size %u: a positive multiple of 4096 bytes", cfg->page_bytes);
        return NULL;
    }
    frt_partition_fn fn = NULL;
    if (policy && !(fn = frt_policy_partition(policy))) {
        frt_seterr(err, errlen, "%s: not loaded for partitioning (flashrt_policy_load_partition)", flashrt_policy_name(policy));
        return NULL;
    }
    flashrt_part *p = calloc(1, sizeof *p);
    if (!p) {
        frt_seterr(err, errlen, "out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    p->partition = fn;
    p->streams = cfg->streams;
    p->dev.fd = -1;
    size_t c = (size_t)cfg->capacity;
    p->prev = malloc(c * sizeof *p->prev);
    p->next = malloc(c * sizeof *p->next);
    p->free_slots = malloc(c * sizeof *p->free_slots);
    p->page_of = malloc(c * sizeof *p->page_of);
    int bad = !p->prev || !p->next || !p->free_slots || !p->page_of;
    for (int s = 0; s < p->streams && !bad; s++) {
        p->head[s] = p->tail[s] = NIL;
        bad = frt_map_init(&p->index[s], 64) != 0;
    }
    bad = bad || frt_mon_init(&p->mon, p->streams, cfg->capacity) != 0;
    if (bad) {
        frt_seterr(err, errlen, "out of memory");
        flashrt_part_close(p);
        return NULL;
    }
    for (size_t i = 0; i < c; i++) p->free_slots[i] = (uint32_t)(c - 1 - i);
    p->nfree = c;
    if (cfg->cache_path) {
        if (frt_device_open(&p->dev, cfg->cache_path, cfg->direct, err, errlen) != 0 ||
            frt_device_reserve(&p->dev, cfg->cache_path, (uint64_t)c * cfg->page_bytes, err, errlen) != 0) {
            flashrt_part_close(p);
            return NULL;
        }
        if (posix_memalign((void **)&p->buf, 4096, cfg->page_bytes) != 0 ||
            !(p->want = malloc(cfg->page_bytes))) {
            frt_seterr(err, errlen, "out of memory");
            flashrt_part_close(p);
            return NULL;
        }
    }
    p->started = frt_now();
    return p;
}

int flashrt_part_get(flashrt_part *p, int s, uint64_t page, int write) {
    if (s < 0 || s >= p->streams) return fail(p, "stream %d: expected 0..%d", s, p->streams - 1);
    p->requests++;
    if (write) p->writes++;
    else p->reads++;
    if (p->cfg.writes_only && !write) return 0; /* around the cache, unmonitored */
    if (p->seen % p->cfg.interval == 0 && start_interval(p) != 0) return -1;
    p->seen++;
    if (frt_mon_observe(&p->mon, s, page) != 0) return fail(p, "out of memory");
    uint32_t *hit = frt_map_get(&p->index[s], page);
    if (hit) {
        uint32_t v = *hit;
        lru_unlink(p, s, v);
        lru_push(p, s, v);
        p->hits++;
        if (write) p->write_hits++;
        else p->read_hits++;
        if (p->dev.fd >= 0) {
            size_t n = p->cfg.page_bytes;
            if (frt_device_read(&p->dev, p->buf, n, (uint64_t)v * n) != 0)
                return fail(p, "%s: read of page %llu: %s", p->cfg.cache_path, (unsigned long long)page, strerror(errno));
            p->bytes_read += n;
            flashrt_content(content_key(s, page), 0, p->want, n);
            if (memcmp(p->buf, p->want, n) != 0) p->integrity_errors++;
            else p->verified += n;
        }
        return 1;
    }
    if (p->quota[s] == 0) return 0;
    while (p->used[s] >= p->quota[s]) {
        evict_from(p, s);
        p->evictions++;
    }
    uint32_t v = p->free_slots[--p->nfree];
    p->page_of[v] = page;
    if (frt_map_put(&p->index[s], page, v) != 0) return fail(p, "out of memory");
    lru_push(p, s, v);
    p->used[s]++;
    if (p->dev.fd >= 0) {
        size_t n = p->cfg.page_bytes;
        flashrt_content(content_key(s, page), 0, p->buf, n);
        if (frt_device_write(&p->dev, p->buf, n, (uint64_t)v * n) != 0)
            return fail(p, "%s: write of page %llu: %s", p->cfg.cache_path, (unsigned long long)page, strerror(errno));
        p->bytes_written += n;
    }
    return 0;
}

const char *flashrt_part_error(const flashrt_part *p) { return p->err; }

const uint64_t *flashrt_part_allocations(const flashrt_part *p, size_t *intervals) {
    *intervals = p->nalloc / (size_t)p->streams;
    return p->alloc;
}

void flashrt_part_metrics(const flashrt_part *p, struct flashrt_part_metrics *o) {
    memset(o, 0, sizeof *o);
    o->requests = p->requests;
    o->hits = p->hits;
    o->reads = p->reads;
    o->read_hits = p->read_hits;
    o->writes = p->writes;
    o->write_hits = p->write_hits;
    o->cached_requests = p->seen;
    o->intervals = p->nalloc / (size_t)p->streams;
    o->evictions = p->evictions;
    o->resize_evictions = p->resize_evictions;
    o->fallbacks = p->fallbacks;
    o->partition_calls = p->mon.calls;
    o->hit_ratio = p->requests ? (double)p->hits / (double)p->requests : NAN;
    o->read_hit_ratio = p->reads ? (double)p->read_hits / (double)p->reads : NAN;
    o->write_hit_ratio = p->writes ? (double)p->write_hits / (double)p->writes : NAN;
    o->partition_ns_mean = p->mon.calls ? (double)p->mon.call_ns / (double)p->mon.calls : NAN;
    o->wall_s = frt_now() - p->started;
    o->bytes_written = p->bytes_written;
    o->bytes_read = p->bytes_read;
    o->verified_bytes = p->verified;
    o->integrity_errors = p->integrity_errors;
    o->file_bytes = p->cfg.cache_path ? p->cfg.capacity * p->cfg.page_bytes : 0;
    o->direct_io = p->dev.fd >= 0 ? p->dev.direct : 0;
}

void flashrt_part_close(flashrt_part *p) {
    if (!p) return;
    for (int s = 0; s < p->streams; s++) {
        if (p->index[s].cap) frt_map_free(&p->index[s]);
    }
    frt_mon_free(&p->mon);
    frt_device_close(&p->dev);
    free(p->prev);
    free(p->next);
    free(p->free_slots);
    free(p->page_of);
    free(p->alloc);
    free(p->buf);
    free(p->want);
    free(p);
}
