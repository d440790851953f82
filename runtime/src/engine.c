/* cache.c: the flash cache (regions, index, eviction, rate limiter) and its metrics.
 *
 * Model (the simulator's, sim/src/flash.rs, with Navy's storage layout):
 * - GET covering segments s0..s1 of block `key`: a hit iff every covered segment is indexed.
 *   Block-level recency: a GET of a cached block refreshes every region holding one of its
 *   segments (LRU) and sets the block's last-access time.
 * - Miss: one backend IO from the first to the last missing covered segment, extended by the
 *   policy's prefetch range when the miss is admitted and the when-score passes (a rejected
 *   miss never prefetches); DT = t_seek + bytes / bandwidth. The policy is asked once; if it
 *   admits (and the write-rate limiter has tokens for the bytes), every uncached segment of
 *   the IO is appended to the open region.
 * - PUT: one backend IO over its segments is charged; the cache is not touched.
 * - Flash: regions of `region_bytes` written sequentially; when no region is clean the LRU (or
 *   FIFO) region is evicted whole. Eviction age = eviction time - last access of the block.
 * - A flash read error drops the block's covered segments from the index and serves the
 *   access as a miss from the backing device; a write error leaves the segment uncached. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backing_internal.h"
#include "flashml_policy.h"
#include "flashrt.h"
#include "internal.h"
#include "policy_internal.h"

#define NONE UINT32_MAX
#define SPB FRT_SEGMENTS_PER_BLOCK
#define SEG ((uint64_t)FRT_SEGMENT_BYTES)

struct blk {
    uint64_t key, mask;
    double last;
    uint32_t count, next_free;
    uint32_t loc[SPB]; /* flash slot of each cached segment */
};

struct region {
    uint32_t prev, next; /* eviction list (head = most recent) */
    uint32_t fill, live;
    int in_list;
};

struct slotref {
    uint32_t blk;
    uint8_t seg, valid;
};

struct flashrt {
    struct flashrt_config cfg;
    flashrt_policy *policy;
    flashrt_backing *backing;
    flashrt_tracker *tracker;
    int fd, direct;
    uint64_t nregions, spr, nslots;
    struct region *reg;
    struct slotref *slot;
    uint32_t head, tail, open_region;
    uint32_t *clean;
    uint64_t nclean;
    struct blk *blks;
    uint32_t free_blk;
    struct frt_map index;
    uint8_t *fbuf, *bbuf, *rawbuf;
    /* accounting */
    int started;
    double t0, tlast, wall0, wall_last;
    double *win_dt;
    size_t nwin;
    uint64_t gets, puts, hits, get_bytes, hit_bytes, get_segs, hit_segs;
    uint64_t backend_ios, backend_bytes, admitted, prefetched;
    uint64_t evicted_regions, evicted_segments;
    double age_sum;
    uint64_t flash_read_errors, flash_write_errors, rate_limited, nreads, nwrites;
    uint64_t served_bytes;
    double tokens, tokens_t;
    int raw_flip;
    struct frt_vec decision_ns, features_ns, policy_ns, hint_ns, hit_us, miss_us, raw_us, over_us, backend_wall_ms, backend_dt_ms;
    double backend_wall_s, backend_dt_s;
    char err[FLASHRT_ERR_LEN];
};

void flashrt_config_default(struct flashrt_config *c) {
    memset(c, 0, sizeof *c);
    c->region_bytes = 1u << 20;
    c->eviction = FLASHRT_LRU;
    c->direct = FLASHRT_DIRECT_AUTO;
    c->sample_ratio = FRT_SAMPLE_RATIO;
    c->write_burst_s = 60.0;
    c->rate_clock = FLASHRT_CLOCK_TRACE;
    c->tracker_width_log2 = 14;
    c->tracker_depth = 4;
    c->t_seek_s = FRT_T_SEEK_S;
    c->bandwidth_bytes_per_s = FRT_BANDWIDTH_BYTES_PER_S;
    c->window_s = FRT_WINDOW_S;
    c->warmup_s = FRT_WARMUP_S;
    c->disks = FRT_DISKS;
}

const char *flashrt_error(const flashrt *rt) { return rt->err; }

/* ---- fault-injecting flash IO ---- */

static int flash_read(flashrt *rt, void *buf, size_t n, uint64_t off) {
    rt->nreads++;
    if (rt->cfg.fail_read_every && rt->nreads % rt->cfg.fail_read_every == 0) {
        errno = EIO;
        return -1;
    }
    return frt_pread_full(rt->fd, buf, n, off);
}

static int flash_write(flashrt *rt, const void *buf, size_t n, uint64_t off) {
    rt->nwrites++;
    if (rt->cfg.fail_write_every && rt->nwrites % rt->cfg.fail_write_every == 0) {
        errno = EIO;
        return -1;
    }
    return frt_pwrite_full(rt->fd, buf, n, off);
}

/* ---- open / close ---- */

static void *aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, FRT_ALIGN, n) != 0) return NULL;
    return p;
}

flashrt *flashrt_open(const struct flashrt_config *cfg, flashrt_policy *policy,
                      flashrt_backing *backing, char *err, size_t errlen) {
    if (!cfg->flash_path) { frt_seterr(err, errlen, "no flash device given"); return NULL; }
    if (cfg->region_bytes < SEG || cfg->region_bytes % SEG) {
        frt_seterr(err, errlen, "region size %llu must be a positive multiple of the segment (%llu bytes)",
                   (unsigned long long)cfg->region_bytes, (unsigned long long)SEG);
        return NULL;
    }
    if (!(cfg->sample_ratio > 0 && cfg->sample_ratio <= 100)) {
        frt_seterr(err, errlen, "sample ratio must be in (0, 100], got %g", cfg->sample_ratio);
        return NULL;
    }
    if (!(cfg->window_s > 0) || !(cfg->bandwidth_bytes_per_s > 0) || !(cfg->t_seek_s >= 0) || cfg->disks == 0 ||
        !(cfg->write_rate_mbps >= 0) || !(cfg->write_burst_s > 0)) {
        frt_seterr(err, errlen, "invalid model or limiter settings");
        return NULL;
    }
    flashrt *rt = calloc(1, sizeof *rt);
    if (!rt) { frt_seterr(err, errlen, "out of memory"); return NULL; }
    rt->cfg = *cfg;
    rt->policy = policy;
    rt->backing = backing;
    rt->fd = -1;
    struct stat st;
    int exists = stat(cfg->flash_path, &st) == 0;
    if (!exists && strncmp(cfg->flash_path, "/dev/", 5) == 0) {
        frt_seterr(err, errlen, "%s: no such device", cfg->flash_path);
        goto fail;
    }
    rt->fd = frt_open_dev(cfg->flash_path, O_RDWR | (exists ? 0 : O_CREAT), cfg->direct, &rt->direct, err, errlen);
    if (rt->fd < 0) goto fail;
    uint64_t size;
    int bd;
    if (frt_dev_size(rt->fd, &size, &bd) != 0) {
        frt_seterr(err, errlen, "%s: not a file or block device (%s)", cfg->flash_path, strerror(errno));
        goto fail;
    }
    uint64_t want = cfg->flash_bytes ? cfg->flash_bytes : size;
    if (bd && want > size) {
        frt_seterr(err, errlen, "%s: the device has %llu bytes, less than --flash-bytes %llu", cfg->flash_path,
                   (unsigned long long)size, (unsigned long long)want);
        goto fail;
    }
    rt->spr = cfg->region_bytes / SEG;
    rt->nregions = want / cfg->region_bytes;
    if (rt->nregions == 0) {
        frt_seterr(err, errlen, "%s: flash of %llu bytes is too small for one region of %llu bytes",
                   cfg->flash_path, (unsigned long long)want, (unsigned long long)cfg->region_bytes);
        goto fail;
    }
    if (rt->nregions * rt->spr >= NONE) { frt_seterr(err, errlen, "flash too large"); goto fail; }
    if (!bd && size < rt->nregions * cfg->region_bytes &&
        ftruncate(rt->fd, (off_t)(rt->nregions * cfg->region_bytes)) != 0) {
        frt_seterr(err, errlen, "%s: cannot size it to %llu bytes: %s", cfg->flash_path,
                   (unsigned long long)(rt->nregions * cfg->region_bytes), strerror(errno));
        goto fail;
    }
    rt->nslots = rt->nregions * rt->spr;
    rt->reg = calloc(rt->nregions, sizeof *rt->reg);
    rt->slot = calloc(rt->nslots, sizeof *rt->slot);
    rt->clean = malloc(rt->nregions * sizeof *rt->clean);
    rt->blks = malloc(rt->nslots * sizeof *rt->blks); /* a cached block holds >= 1 segment */
    rt->fbuf = aligned(FRT_BLOCK_BYTES);
    rt->bbuf = aligned(FRT_BLOCK_BYTES);
    rt->rawbuf = cfg->measure_raw ? aligned(FRT_BLOCK_BYTES) : NULL;
    if (!rt->reg || !rt->slot || !rt->clean || !rt->blks || !rt->fbuf || !rt->bbuf ||
        (cfg->measure_raw && !rt->rawbuf) || frt_map_init(&rt->index, 1024) != 0) {
        frt_seterr(err, errlen, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < rt->nregions; i++) rt->clean[i] = (uint32_t)(rt->nregions - 1 - i);
    rt->nclean = rt->nregions;
    for (uint64_t i = 0; i < rt->nslots; i++) rt->blks[i].next_free = i + 1 < rt->nslots ? (uint32_t)(i + 1) : NONE;
    rt->free_blk = 0;
    rt->head = rt->tail = rt->open_region = NONE;
    rt->tracker = flashrt_tracker_new(cfg->tracker_width_log2, cfg->tracker_depth, err, errlen);
    if (!rt->tracker) goto fail;
    if (frt_policy_prepare(policy, rt->nslots, err, errlen) != 0) goto fail;
    rt->tokens = cfg->write_rate_mbps * FRT_MB * cfg->sample_ratio / 100.0 * cfg->write_burst_s;
    return rt;
fail:
    flashrt_close(rt);
    return NULL;
}

void flashrt_close(flashrt *rt) {
    if (!rt) return;
    if (rt->fd >= 0) close(rt->fd);
    free(rt->reg);
    free(rt->slot);
    free(rt->clean);
    free(rt->blks);
    free(rt->fbuf);
    free(rt->bbuf);
    free(rt->rawbuf);
    free(rt->win_dt);
    if (rt->index.cap) frt_map_free(&rt->index);
    flashrt_tracker_free(rt->tracker);
    frt_vec_free(&rt->decision_ns);
    frt_vec_free(&rt->features_ns);
    frt_vec_free(&rt->policy_ns);
    frt_vec_free(&rt->hint_ns);
    frt_vec_free(&rt->hit_us);
    frt_vec_free(&rt->miss_us);
    frt_vec_free(&rt->raw_us);
    frt_vec_free(&rt->over_us);
    frt_vec_free(&rt->backend_wall_ms);
    frt_vec_free(&rt->backend_dt_ms);
    free(rt);
}

/* ---- region list ---- */

static void list_unlink(flashrt *rt, uint32_t r) {
    struct region *g = &rt->reg[r];
    if (g->prev != NONE) rt->reg[g->prev].next = g->next; else rt->head = g->next;
    if (g->next != NONE) rt->reg[g->next].prev = g->prev; else rt->tail = g->prev;
    g->in_list = 0;
}

static void list_push_head(flashrt *rt, uint32_t r) {
    struct region *g = &rt->reg[r];
    g->prev = NONE;
    g->next = rt->head;
    if (rt->head != NONE) rt->reg[rt->head].prev = r; else rt->tail = r;
    rt->head = r;
    g->in_list = 1;
}

static void touch_region(flashrt *rt, uint32_t r) {
    if (!rt->reg[r].in_list || rt->head == r) return;
    list_unlink(rt, r);
    list_push_head(rt, r);
}

/* ---- index ---- */

static struct blk *find_blk(flashrt *rt, uint64_t key) {
    uint32_t *v = frt_map_get(&rt->index, key);
    return v ? &rt->blks[*v] : NULL;
}

static void drop_segment(flashrt *rt, uint32_t slot_id) {
    struct slotref *sr = &rt->slot[slot_id];
    if (!sr->valid) return;
    struct blk *b = &rt->blks[sr->blk];
    b->mask &= ~(1ull << sr->seg);
    b->loc[sr->seg] = NONE;
    b->count--;
    sr->valid = 0;
    rt->reg[slot_id / rt->spr].live--;
    if (b->count == 0) {
        frt_map_del(&rt->index, b->key);
        b->next_free = rt->free_blk;
        rt->free_blk = sr->blk;
    }
}

static void evict_region(flashrt *rt, uint32_t r, double t) {
    for (uint64_t i = 0; i < rt->spr; i++) {
        uint32_t id = (uint32_t)(r * rt->spr + i);
        struct slotref *sr = &rt->slot[id];
        if (!sr->valid) continue;
        rt->age_sum += t - rt->blks[sr->blk].last;
        rt->evicted_segments++;
        drop_segment(rt, id);
    }
    rt->reg[r].fill = rt->reg[r].live = 0;
    rt->evicted_regions++;
}

/* The next flash slot, sealing the open region and evicting a whole region as needed. */
static uint32_t alloc_slot(flashrt *rt, double t) {
    if (rt->open_region == NONE || rt->reg[rt->open_region].fill == rt->spr) {
        if (rt->open_region != NONE) list_push_head(rt, rt->open_region); /* seal */
        if (rt->nclean == 0) {
            uint32_t victim = rt->tail;
            list_unlink(rt, victim);
            evict_region(rt, victim, t);
            rt->clean[rt->nclean++] = victim;
        }
        rt->open_region = rt->clean[--rt->nclean];
        rt->reg[rt->open_region].fill = rt->reg[rt->open_region].live = 0;
    }
    struct region *g = &rt->reg[rt->open_region];
    return (uint32_t)(rt->open_region * rt->spr + g->fill++);
}

/* Writes segment s of `key` (data) to flash and indexes it. */
static void insert_segment(flashrt *rt, uint64_t key, unsigned s, const uint8_t *data, double t) {
    uint32_t id = alloc_slot(rt, t); /* may evict this very block */
    if (flash_write(rt, data, SEG, (uint64_t)id * SEG) != 0) {
        rt->flash_write_errors++;
        return; /* the slot stays invalid: the segment is simply not cached */
    }
    struct blk *b = find_blk(rt, key);
    if (!b) {
        uint32_t bi = rt->free_blk; /* never NONE: blocks in use <= valid slots < nslots */
        b = &rt->blks[bi];
        rt->free_blk = b->next_free;
        b->key = key;
        b->mask = 0;
        b->count = 0;
        b->last = t;
        for (unsigned k = 0; k < SPB; k++) b->loc[k] = NONE;
        frt_map_put(&rt->index, key, bi);
    }
    b->mask |= 1ull << s;
    b->loc[s] = id;
    b->count++;
    rt->slot[id].blk = (uint32_t)(b - rt->blks);
    rt->slot[id].seg = (uint8_t)s;
    rt->slot[id].valid = 1;
    rt->reg[id / rt->spr].live++;
}

/* ---- accounting ---- */

static void charge(flashrt *rt, double t, double dt) {
    size_t k = (size_t)floor((t - rt->t0) / rt->cfg.window_s);
    if (k >= rt->nwin) {
        size_t n = rt->nwin ? rt->nwin : 64;
        while (n <= k) n *= 2;
        double *w = realloc(rt->win_dt, n * sizeof *w);
        if (!w) return;
        memset(w + rt->nwin, 0, (n - rt->nwin) * sizeof *w);
        rt->win_dt = w;
        rt->nwin = n;
    }
    rt->win_dt[k] += dt;
}

static double io_dt(const flashrt *rt, unsigned segs) {
    return rt->cfg.t_seek_s + (double)segs * (double)SEG / rt->cfg.bandwidth_bytes_per_s;
}

static int rate_ok(flashrt *rt, double t, uint64_t bytes) {
    if (rt->cfg.write_rate_mbps <= 0) return 1;
    double rate = rt->cfg.write_rate_mbps * FRT_MB * rt->cfg.sample_ratio / 100.0;
    double now = rt->cfg.rate_clock == FLASHRT_CLOCK_WALL ? frt_now() : t;
    if (rt->tokens_t != 0) rt->tokens += (now - rt->tokens_t) * rate;
    rt->tokens_t = now;
    double cap = rate * rt->cfg.write_burst_s;
    if (rt->tokens > cap) rt->tokens = cap;
    if (rt->tokens < (double)bytes) return 0;
    rt->tokens -= (double)bytes;
    return 1;
}

/* ---- serving ---- */

/* Reads cached segments s0..s1 of b (all indexed) into buf, coalescing adjacent slots. */
static int read_cached(flashrt *rt, const struct blk *b, unsigned s0, unsigned s1, uint8_t *buf, int raw) {
    unsigned s = s0;
    while (s <= s1) {
        unsigned e = s;
        while (e + 1 <= s1 && b->loc[e + 1] == b->loc[e] + 1) e++;
        size_t n = (size_t)(e - s + 1) * SEG;
        uint64_t off = (uint64_t)b->loc[s] * SEG;
        int r = raw ? frt_pread_full(rt->fd, buf + (size_t)(s - s0) * SEG, n, off)
                    : flash_read(rt, buf + (size_t)(s - s0) * SEG, n, off);
        if (r != 0) return -1;
        s = e + 1;
    }
    return 0;
}

int flashrt_access(flashrt *rt, const struct flashrt_access *a, struct flashrt_result *res) {
    double t = a->time;
    unsigned s0 = (unsigned)(a->offset / SEG), s1 = (unsigned)((a->offset + a->size - 1) / SEG);
    unsigned nseg = s1 - s0 + 1;
    memset(res, 0, sizeof *res);
    if (!rt->started) {
        rt->started = 1;
        rt->t0 = t;
        rt->wall0 = frt_now();
    }
    rt->tlast = t;
    if (flashrt_is_put(a->op)) {
        rt->puts++;
        rt->backend_ios++;
        rt->backend_bytes += nseg * SEG;
        charge(rt, t, io_dt(rt, nseg));
        return 0;
    }
    frt_tracker_prefetch(rt->tracker, a->key);
    if (!rt->cfg.no_policy_prefetch) {
        /* the decision on a miss comes soon: let its code and tables load meanwhile */
        uint64_t h0 = frt_now_ns();
        if (frt_policy_warm(rt->policy)) frt_vec_push(&rt->hint_ns, (double)(frt_now_ns() - h0));
    }
    uint64_t w0 = frt_now_ns();
    rt->gets++;
    rt->get_bytes += a->size;
    rt->get_segs += nseg;
    struct blk *b;
    unsigned cached, m0, m1;
    double raw = -1;
    int raw_first = 0;
    if (rt->cfg.measure_raw && (rt->raw_flip ^= 1)) {
        /* half of the hits time the raw read first, half after: neither order gets the
         * warmer caches every time */
        b = find_blk(rt, a->key);
        if (b && (b->mask >> s0 & 1)) {
            uint64_t span = (nseg == 64 ? ~0ull : ((1ull << nseg) - 1)) << s0;
            if ((b->mask & span) == span) {
                uint64_t r0 = frt_now_ns();
                if (read_cached(rt, b, s0, s1, rt->rawbuf, 1) == 0) raw = (double)(frt_now_ns() - r0);
                raw_first = 1;
                w0 = frt_now_ns();
            }
        }
    }
    for (;;) {
        b = find_blk(rt, a->key);
        cached = 0;
        m0 = s0;
        m1 = s1;
        if (b) {
            uint64_t span = (nseg == 64 ? ~0ull : ((1ull << nseg) - 1)) << s0;
            uint64_t have = b->mask & span, miss = ~b->mask & span;
            cached = (unsigned)__builtin_popcountll(have);
            if (miss) {
                m0 = (unsigned)__builtin_ctzll(miss);
                m1 = 63u - (unsigned)__builtin_clzll(miss);
            }
        }
        if (!b || cached < nseg) break;
        /* hit */
        if (read_cached(rt, b, s0, s1, rt->fbuf, 0) != 0) {
            /* flash read error: drop what we hold of this range, serve it as a miss */
            rt->flash_read_errors++;
            for (unsigned s = s0; s <= s1; s++)
                if ((b->mask >> s) & 1) drop_segment(rt, b->loc[s]);
            continue;
        }
        b->last = t;
        if (rt->cfg.eviction == FLASHRT_LRU) {
            uint64_t m = b->mask;
            uint32_t prev = NONE;
            while (m) {
                unsigned s = (unsigned)__builtin_ctzll(m);
                m &= m - 1;
                uint32_t r = (uint32_t)(b->loc[s] / rt->spr);
                if (r != prev) touch_region(rt, r);
                prev = r;
            }
        }
        flashrt_tracker_add(rt->tracker, a);
        uint64_t w2 = frt_now_ns();
        if (rt->cfg.measure_raw && !raw_first) {
            uint64_t r0 = frt_now_ns();
            if (read_cached(rt, b, s0, s1, rt->rawbuf, 1) == 0) raw = (double)(frt_now_ns() - r0);
        }
        double hit_us = (double)(w2 - w0) / 1e3;
        frt_vec_push(&rt->hit_us, hit_us);
        if (raw >= 0) {
            frt_vec_push(&rt->raw_us, raw / 1e3);
            frt_vec_push(&rt->over_us, hit_us - raw / 1e3);
        }
        rt->hits++;
        rt->hit_bytes += a->size;
        rt->hit_segs += nseg;
        rt->served_bytes += a->size;
        res->data = rt->fbuf + (a->offset - (uint64_t)s0 * SEG);
        res->len = a->size;
        res->hit = 1;
        return 0;
    }
    /* miss: refresh recency of what the block has, then decide */
    if (b) {
        b->last = t;
        if (rt->cfg.eviction == FLASHRT_LRU) {
            uint64_t m = b->mask;
            while (m) {
                unsigned s = (unsigned)__builtin_ctzll(m);
                m &= m - 1;
                touch_region(rt, (uint32_t)(b->loc[s] / rt->spr));
            }
        }
    }
    rt->hit_segs += cached;
    uint64_t d0 = frt_now_ns();
    double f[FLASHRT_NUM_FEATURES];
    int wants = frt_policy_wants_features(rt->policy);
    if (wants) flashrt_tracker_features(rt->tracker, a, f);
    uint64_t d1 = frt_now_ns();
    unsigned lo = m0, hi = m1;
    int32_t p0 = 0, p1 = -1;
    int dec = frt_policy_decide(rt->policy, a->key, a->time, wants ? f : NULL, &p0, &p1);
    uint64_t d2 = frt_now_ns();
    int admit = dec & FLASHML_DECIDE_ADMIT;
    /* as the simulator: prefetch extends only an admitted miss's IO */
    if (admit && (dec & FLASHML_DECIDE_PREFETCH)) {
        if (p0 < 0) p0 = 0;
        if (p1 > (int32_t)SPB - 1) p1 = (int32_t)SPB - 1;
        if (p0 <= p1) {
            if ((unsigned)p0 < lo) lo = (unsigned)p0;
            if ((unsigned)p1 > hi) hi = (unsigned)p1;
        }
    }
    frt_vec_push(&rt->decision_ns, (double)(d2 - d0));
    frt_vec_push(&rt->features_ns, (double)(d1 - d0));
    frt_vec_push(&rt->policy_ns, (double)(d2 - d1));
    flashrt_tracker_add(rt->tracker, a);
    unsigned io_segs = hi - lo + 1;
    rt->backend_ios++;
    rt->backend_bytes += io_segs * SEG;
    double dt = io_dt(rt, io_segs);
    charge(rt, t, dt);
    /* the response covers s0..s1, the IO lo..hi; covered segments outside the IO are cached
     * and come from flash. buf holds segments u0..u1 of the block. */
    unsigned u0 = lo < s0 ? lo : s0;
    uint8_t *buf = rt->bbuf;
    uint64_t r0 = frt_now_ns();
    if (frt_backing_read(rt->backing, a->key, lo, hi, buf + (size_t)(lo - u0) * SEG, rt->err, sizeof rt->err) != 0) return -1;
    double wall = (double)(frt_now_ns() - r0) / 1e9;
    frt_vec_push(&rt->backend_wall_ms, wall * 1e3);
    frt_vec_push(&rt->backend_dt_ms, dt * 1e3);
    rt->backend_wall_s += wall;
    rt->backend_dt_s += dt;
    if (s0 < lo || s1 > hi) {
        b = find_blk(rt, a->key);
        for (unsigned s = s0; s <= s1; s++) {
            if (s >= lo && s <= hi) continue;
            uint8_t *dst = buf + (size_t)(s - u0) * SEG;
            if (b && ((b->mask >> s) & 1) && flash_read(rt, dst, SEG, (uint64_t)b->loc[s] * SEG) == 0) continue;
            /* flash error (or, defensively, not cached): this segment from the backing */
            if (b && ((b->mask >> s) & 1)) {
                rt->flash_read_errors++;
                drop_segment(rt, b->loc[s]);
                b = find_blk(rt, a->key);
            }
            if (frt_backing_read(rt->backing, a->key, s, s, dst, rt->err, sizeof rt->err) != 0) return -1;
        }
    }
    if (admit) {
        b = find_blk(rt, a->key);
        unsigned need = 0;
        for (unsigned s = lo; s <= hi; s++)
            if (!b || !((b->mask >> s) & 1)) need++;
        if (need && !rate_ok(rt, t, need * SEG)) {
            rt->rate_limited++;
        } else {
            for (unsigned s = lo; s <= hi; s++) {
                b = find_blk(rt, a->key); /* an eviction may have freed it */
                if (b && ((b->mask >> s) & 1)) continue;
                insert_segment(rt, a->key, s, buf + (size_t)(s - u0) * SEG, t);
                rt->admitted++;
                if (s < s0 || s > s1) rt->prefetched++;
            }
        }
    }
    frt_vec_push(&rt->miss_us, (double)(frt_now_ns() - w0) / 1e3);
    rt->served_bytes += a->size;
    res->data = buf + (a->offset - (uint64_t)u0 * SEG);
    res->len = a->size;
    res->hit = 0;
    return 0;
}

void flashrt_idle(flashrt *rt) {
    if (rt->cfg.no_policy_prefetch) return;
    uint64_t h0 = frt_now_ns();
    if (frt_policy_warm(rt->policy)) frt_vec_push(&rt->hint_ns, (double)(frt_now_ns() - h0));
}

/* ---- metrics ---- */

void flashrt_metrics(flashrt *rt, struct flashrt_metrics *m) {
    memset(m, 0, sizeof *m);
    const struct flashrt_config *c = &rt->cfg;
    double span = rt->started ? rt->tlast - rt->t0 : 0;
    size_t nw = rt->started ? (size_t)floor(span / c->window_s) + 1 : 0;
    double *meas = nw ? malloc(nw * sizeof *meas) : NULL;
    size_t nm = 0;
    double sum = 0;
    for (size_t k = 0; meas && k < nw; k++) {
        double dt = k < rt->nwin ? rt->win_dt[k] : 0;
        double util = dt / c->disks / (c->sample_ratio / 100.0) / c->window_s;
        if ((double)k * c->window_s >= c->warmup_s) {
            meas[nm++] = util;
            sum += util;
        }
    }
    struct frt_vec v = {meas, nm, nm};
    m->p50_dt_util = frt_percentile(&v, 0.5);
    m->p90_dt_util = frt_percentile_sorted(meas, nm, 0.9);
    m->p99_dt_util = frt_percentile_sorted(meas, nm, 0.99);
    m->peak_dt_util = nm ? meas[nm - 1] : NAN;
    m->mean_dt_util = nm ? sum / (double)nm : NAN;
    free(meas);
    double scale = 100.0 / c->sample_ratio;
    m->flash_write_rate_mbps = span > 0 ? (double)rt->admitted * (double)SEG / span * scale / FRT_MB : NAN;
    double cache_full = (double)rt->nslots * (double)SEG * scale;
    m->dwpd = m->flash_write_rate_mbps * FRT_MB * 86400.0 / cache_full;
    m->io_hit_ratio = rt->gets ? (double)rt->hits / (double)rt->gets : NAN;
    m->byte_hit_ratio = rt->get_bytes ? (double)rt->hit_bytes / (double)rt->get_bytes : NAN;
    m->segment_hit_ratio = rt->get_segs ? (double)rt->hit_segs / (double)rt->get_segs : NAN;
    m->avg_eviction_age_s = rt->evicted_segments ? rt->age_sum / (double)rt->evicted_segments : NAN;
    m->backend_ios = rt->backend_ios;
    m->backend_bytes = rt->backend_bytes;
    m->admitted_segments = rt->admitted;
    m->prefetched_segments = rt->prefetched;
    m->accesses = rt->gets + rt->puts;
    m->wall_s = rt->started ? frt_now() - rt->wall0 : 0;
    m->flash_read_errors = rt->flash_read_errors;
    m->flash_write_errors = rt->flash_write_errors;
    m->device_errors = rt->flash_read_errors + rt->flash_write_errors;
    m->rate_limited = rt->rate_limited;
    m->gets = rt->gets;
    m->puts = rt->puts;
    m->hits = rt->hits;
    m->evicted_regions = rt->evicted_regions;
    m->evicted_segments = rt->evicted_segments;
    m->capacity_segments = rt->nslots;
    m->region_bytes = c->region_bytes;
    m->regions = rt->nregions;
    m->decision_ns_p50 = frt_percentile(&rt->decision_ns, 0.5);
    m->decision_ns_p99 = frt_percentile(&rt->decision_ns, 0.99);
    m->features_ns_p50 = frt_percentile(&rt->features_ns, 0.5);
    m->policy_ns_p50 = frt_percentile(&rt->policy_ns, 0.5);
    m->policy_prefetch_ns_p50 = frt_percentile(&rt->hint_ns, 0.5);
    m->hit_path_us_p50 = frt_percentile(&rt->hit_us, 0.5);
    m->hit_path_us_p99 = frt_percentile(&rt->hit_us, 0.99);
    m->miss_path_us_p50 = frt_percentile(&rt->miss_us, 0.5);
    m->miss_path_us_p99 = frt_percentile(&rt->miss_us, 0.99);
    m->raw_read_us_p50 = frt_percentile(&rt->raw_us, 0.5);
    m->hit_overhead_us_p50 = frt_percentile(&rt->over_us, 0.5);
    m->backend_wall_ms_p50 = frt_percentile(&rt->backend_wall_ms, 0.5);
    m->backend_dt_ms_p50 = frt_percentile(&rt->backend_dt_ms, 0.5);
    m->backend_wall_s = rt->backend_wall_s;
    m->backend_dt_s = rt->backend_dt_s;
    m->trace_seconds = span;
    m->throughput_accesses_per_s = m->wall_s > 0 ? (double)m->accesses / m->wall_s : NAN;
    m->throughput_mb_per_s = m->wall_s > 0 ? (double)rt->served_bytes / m->wall_s / FRT_MB : NAN;
    m->direct_io = rt->direct;
}
