/* engine.c: the flash cache (Navy's BlockCache/Driver): flashrt_open/access/idle/metrics/close
 * over the flash device (device.h), the region store (region.h) and the policies in its
 * slots (engine/policy_slots.h: admission, eviction, budget), plus the DT and latency
 * accounting.
 *
 * Model (the simulator's, sim/src/flash/mod.rs, with Navy's storage layout):
 * - GET covering segments s0..s1 of block `key`: a hit iff every covered segment is indexed.
 *   Block-level recency: a GET of a cached block refreshes every region holding one of its
 *   segments (LRU) and sets the block's last-access time.
 * - Miss: one backend IO from the first to the last missing covered segment, extended by the
 *   policy's prefetch range when the miss is admitted and the when-score passes (a rejected
 *   miss never prefetches), less the range's cached edge segments; DT = t_seek + bytes / bandwidth. The admission policy is
 *   asked once (or, keyed by segment, once per uncached segment of the IO); if it admits
 *   (and the budget gate lets the bytes be written), every uncached (admitted) segment of
 *   the IO is appended to the open region.
 * - PUT: one backend IO over its segments is charged; the cache is not touched.
 * - Flash: regions of `region_bytes` written sequentially; when no region is clean the region
 *   the eviction slot names (engine/policy_slots.h: LRU or FIFO over regions, MAT's block, ...)
 *   is evicted whole. Eviction age = eviction time - last access of the block.
 * - A flash read error drops the block's covered segments from the index and serves the
 *   access as a miss from the backing device; a write error leaves the segment uncached. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backing_internal.h"
#include "engine/device.h"
#include "engine/persist.h"
#include "flashrt.h"
#include "util/internal.h"
#include "engine/region.h"
#include "policies/policy_internal.h"

#define SEG ((uint64_t)FRT_SEGMENT_BYTES)

struct flashrt {
    struct flashrt_config cfg;
    flashrt_backing *backing;
    struct frt_device dev;
    struct frt_regions rm;
    struct frt_persist persist; /* the regions' headers and the journal */
    int persist_open;
    uint64_t recovered_hits;
    const struct frt_admission_ops *admit; /* the admission slot and its policy's state */
    void *adm_st;
    const struct frt_budget_ops *budget; /* the budget slot (NULL: none) and its state */
    void *bud_st;
    const struct frt_placement_ops *place; /* the placement slot and its state */
    void *place_st;
    const struct frt_partition_ops *part; /* the partition slot (NULL: shared) and its state */
    void *part_st;
    uint64_t part_pages, part_intervals, part_resized; /* interval policies: page requests so far */
    uint64_t part_gets[FLASHRT_PART_MAX_STREAMS], part_hits[FLASHRT_PART_MAX_STREAMS];
    uint8_t *fbuf, *bbuf, *rawbuf;
    void *ev_st; /* the eviction policy's state (rm.ev is the policy) */
    /* accounting */
    int started;
    double t0, tlast, wall0;
    double *win_dt;
    size_t nwin;
    uint64_t gets, puts, hits, get_bytes, hit_bytes, get_segs, hit_segs;
    uint64_t backend_ios, backend_bytes, admitted, prefetched;
    uint64_t served_bytes;
    int raw_flip;
    struct frt_vec decision_ns; /* the admission policy's decision on each miss */
    struct frt_vec hit_us, miss_us, raw_us, over_us, backend_wall_ms, backend_dt_ms;
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
    c->rejectx_x = 1;
    c->rejectx_factor = 2.0;
    c->coinflip_p = 0.5;
    frt_tire_config_default(c);
}

const char *flashrt_error(const flashrt *rt) { return rt->err; }

/* ---- open / close ---- */

static void *aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, FRT_ALIGN, n) != 0) return NULL;
    return p;
}

/* The admission slot: cfg->admission's policy; "bundle" is `policy`, a bundle's admission
 * capability, or the built-in flashrt_policy_builtin named. */
static int open_admission(flashrt *rt, flashrt_policy *policy, char *err, size_t errlen) {
    const struct flashrt_config *cfg = &rt->cfg;
    const struct frt_admission_ops *ad = frt_admission_policy((int)cfg->admission);
    if (!ad) return frt_seterr(err, errlen, "unknown admission policy %d", (int)cfg->admission);
    flashrt_policy *bundle = NULL;
    if (cfg->admission == FLASHRT_ADMIT_BUNDLE) {
        if (!policy) return frt_seterr(err, errlen, "admission bundle: no policy given");
        const char *builtin = frt_policy_builtin_name(policy);
        if (builtin) ad = frt_admission_policy(flashrt_admission_from_name(builtin));
        else bundle = policy;
        if (!ad) return frt_seterr(err, errlen, "unknown built-in policy '%s'", builtin);
    }
    if ((ad->needs & FRT_CAP_ADMISSION) && !(bundle && (frt_policy_caps(bundle) & FRT_CAP_ADMISSION)))
        return frt_seterr(err, errlen, "admission %s: the policy was not loaded with the admission capability", ad->name);
    struct frt_admission_setup s = {cfg, bundle, rt->rm.nslots};
    rt->admit = ad;
    return ad->init(&rt->adm_st, &s, err, errlen);
}

/* The budget slot: cfg->budget's policy; none with a write rate is the bucket. */
static int open_budget(flashrt *rt, char *err, size_t errlen) {
    const struct flashrt_config *cfg = &rt->cfg;
    int which = (int)cfg->budget;
    if (which == FLASHRT_BUDGET_NONE && cfg->write_rate_mbps > 0) which = FLASHRT_BUDGET_BUCKET;
    if (which == FLASHRT_BUDGET_NONE) return 0;
    const struct frt_budget_ops *b = frt_budget_policy(which);
    if (!b) return frt_seterr(err, errlen, "unknown budget policy %d", which);
    struct frt_budget_setup s = {cfg, rt->rm.nregions};
    rt->budget = b;
    return b->init(&rt->bud_st, &s, err, errlen);
}

/* The placement slot: cfg->placement's policy, its streams' open regions. */
static int open_placement(flashrt *rt, char *err, size_t errlen) {
    const struct frt_placement_ops *p = frt_placement_policy((int)rt->cfg.placement);
    if (!p) return frt_seterr(err, errlen, "unknown placement policy %d", (int)rt->cfg.placement);
    if (p->streams > rt->rm.nregions)
        return frt_seterr(err, errlen, "placement %s writes %u open regions; the flash has %llu", p->name, p->streams,
                          (unsigned long long)rt->rm.nregions);
    struct frt_placement_setup s = {&rt->cfg, rt->rm.nslots};
    rt->place = p;
    return p->init ? p->init(&rt->place_st, &s, err, errlen) : 0;
}

/* The partition slot: cfg->partition's quotas of regions per stream (after the placement and
 * eviction slots: a stream's open regions are its placement's, its victims the eviction's). */
static int open_partition(flashrt *rt, char *err, size_t errlen) {
    const struct flashrt_config *c = &rt->cfg;
    if (c->partition == FLASHRT_PART_SHARED) return 0;
    const struct frt_partition_ops *p = frt_partition_policy((int)c->partition);
    if (!p) return frt_seterr(err, errlen, "unknown partition policy %d", (int)c->partition);
    unsigned k = c->partition_streams;
    if (k < 1 || k > FLASHRT_PART_MAX_STREAMS || !c->partition_ns)
        return frt_seterr(err, errlen, "partition %s: %u streams (1 to %d namespaces)", p->name, k, FLASHRT_PART_MAX_STREAMS);
    for (unsigned i = 1; i < k; i++)
        if (c->partition_ns[i] <= c->partition_ns[i - 1])
            return frt_seterr(err, errlen, "partition %s: the streams' namespaces are not ascending", p->name);
    if (!rt->rm.ev->victim_of)
        return frt_seterr(err, errlen, "partition %s: eviction %s cannot run partitioned (it chooses blocks across "
                          "the whole cache); use lru, fifo or mru", p->name, rt->rm.ev->name);
    if ((uint64_t)k * rt->place->streams > FRT_OPEN_MAX || (uint64_t)k * rt->place->streams > rt->rm.nregions)
        return frt_seterr(err, errlen, "partition %s: %u streams x %u open regions of placement %s do not fit %llu regions",
                          p->name, k, rt->place->streams, rt->place->name, (unsigned long long)rt->rm.nregions);
    if ((p->needs & FRT_CAP_PARTITION) && !(c->partition_policy && (frt_policy_caps(c->partition_policy) & FRT_CAP_PARTITION)))
        return frt_seterr(err, errlen, "partition %s needs a bundle with the partition capability "
                          "(flashrt_config.partition_policy)", p->name);
    if (p->next && c->partition_interval == 0)
        return frt_seterr(err, errlen, "partition %s: an interval of 0 page requests", p->name);
    struct frt_partition_setup s = {c, k, rt->rm.nregions, rt->rm.nslots, c->partition_policy};
    rt->part = p;
    if (p->init && p->init(&rt->part_st, &s, err, errlen) != 0) return -1;
    if (p->quotas(&s, rt->rm.quota, err, errlen) != 0) return -1;
    rt->rm.nparts = k;
    return 0;
}

/* The stream of namespace ns (binary search of partition_ns); -1 when it has none. */
static int stream_of(const flashrt *rt, int32_t ns) {
    const int32_t *v = rt->cfg.partition_ns;
    unsigned lo = 0, hi = rt->cfg.partition_streams;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (v[mid] < ns) lo = mid + 1;
        else hi = mid;
    }
    return lo < rt->cfg.partition_streams && v[lo] == ns ? (int)lo : -1;
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
    rt->backing = backing;
    rt->dev.fd = -1;
    rt->dev.fail_read_every = cfg->fail_read_every;
    rt->dev.fail_write_every = cfg->fail_write_every;
    if (frt_device_open(&rt->dev, cfg->flash_path, cfg->direct, err, errlen) != 0) goto fail;
    uint64_t size = rt->dev.size;
    uint64_t want = cfg->flash_bytes ? cfg->flash_bytes : size;
    if (rt->dev.is_blockdev && want > size) {
        frt_seterr(err, errlen, "%s: the device has %llu bytes, less than --flash-bytes %llu", cfg->flash_path,
                   (unsigned long long)size, (unsigned long long)want);
        goto fail;
    }
    uint64_t spr = cfg->region_bytes / SEG;
    uint64_t nregions = frt_persist_regions(want, cfg->region_bytes, spr, rt->dev.is_blockdev, size);
    if (nregions == 0) {
        frt_seterr(err, errlen, "%s: flash of %llu bytes (--flash-bytes; 0 = the file's size) is too small for one "
                   "region of %llu bytes (--region-bytes)",
                   cfg->flash_path, (unsigned long long)want, (unsigned long long)cfg->region_bytes);
        goto fail;
    }
    if (nregions * spr >= FRT_NONE) {
        frt_seterr(err, errlen, "%s: --flash-bytes %llu: more segments (%llu bytes each) than the index holds (%llu)",
                   cfg->flash_path, (unsigned long long)want, (unsigned long long)SEG, (unsigned long long)FRT_NONE - 1);
        goto fail;
    }
    /* the regions' headers after their data; the journal beside a regular file */
    char journal[4200];
    const char *jpath = cfg->journal_path;
    if (!jpath && !rt->dev.is_blockdev) {
        snprintf(journal, sizeof journal, "%s.journal", cfg->flash_path);
        jpath = journal;
    }
    rt->persist_open = 1;
    if (frt_persist_open(&rt->persist, &rt->dev, cfg->flash_path, jpath, nregions, cfg->region_bytes, spr, cfg->recover,
                         cfg->sync, err, errlen) != 0)
        goto fail;
    rt->fbuf = aligned(FRT_BLOCK_BYTES);
    rt->bbuf = aligned(FRT_BLOCK_BYTES);
    rt->rawbuf = cfg->measure_raw ? aligned(FRT_BLOCK_BYTES) : NULL;
    if (frt_regions_init(&rt->rm, nregions, spr) != 0 || !rt->fbuf || !rt->bbuf ||
        (cfg->measure_raw && !rt->rawbuf)) {
        frt_seterr(err, errlen, "out of memory");
        goto fail;
    }
    if (open_admission(rt, policy, err, errlen) != 0 || open_budget(rt, err, errlen) != 0 ||
        open_placement(rt, err, errlen) != 0)
        goto fail;
    const struct frt_eviction_ops *ev = frt_eviction_policy((int)cfg->eviction);
    if (!ev) { frt_seterr(err, errlen, "unknown eviction policy %d", (int)cfg->eviction); goto fail; }
    if ((ev->needs & FRT_CAP_EVICTION) && !cfg->eviction_policy) {
        frt_seterr(err, errlen, "eviction %s needs a bundle with the eviction capability (flashrt_config.eviction_policy)", ev->name);
        goto fail;
    }
    rt->rm.ev = ev;
    if (ev->init && ev->init(&rt->ev_st, &rt->rm, cfg->eviction_policy, err, errlen) != 0) goto fail;
    rt->rm.ev_st = rt->ev_st;
    if (open_partition(rt, err, errlen) != 0) goto fail;
    rt->rm.log = &rt->persist;
    if (cfg->recover && frt_persist_recover(&rt->persist, &rt->rm, err, errlen) != 0) goto fail;
    return rt;
fail:
    flashrt_close(rt);
    return NULL;
}

void flashrt_close(flashrt *rt) {
    if (!rt) return;
    if (rt->rm.ev && rt->rm.ev->free) rt->rm.ev->free(rt->ev_st);
    if (rt->admit && rt->admit->free) rt->admit->free(rt->adm_st);
    if (rt->budget && rt->budget->free) rt->budget->free(rt->bud_st);
    if (rt->place && rt->place->free) rt->place->free(rt->place_st);
    if (rt->part && rt->part->free) rt->part->free(rt->part_st);
    if (rt->persist_open) frt_persist_close(&rt->persist);
    frt_device_close(&rt->dev);
    frt_regions_free(&rt->rm);
    frt_vec_free(&rt->decision_ns);
    free(rt->fbuf);
    free(rt->bbuf);
    free(rt->rawbuf);
    free(rt->win_dt);
    frt_vec_free(&rt->hit_us);
    frt_vec_free(&rt->miss_us);
    frt_vec_free(&rt->raw_us);
    frt_vec_free(&rt->over_us);
    frt_vec_free(&rt->backend_wall_ms);
    frt_vec_free(&rt->backend_dt_ms);
    free(rt);
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

/* ---- serving ---- */

/* The mask of segments s0..s0+nseg-1. */
static inline uint64_t span_of(unsigned s0, unsigned nseg) {
    return (nseg == 64 ? ~0ull : ((1ull << nseg) - 1)) << s0;
}

static inline int holds(const struct frt_blk *b, unsigned s) { return b && ((b->mask >> s) & 1); }

/* Reads cached segments s0..s1 of b (all indexed) into buf, coalescing adjacent slots; `raw`:
 * without fault injection and counting (the --measure-raw reference). */
static int read_cached(flashrt *rt, const struct frt_blk *b, unsigned s0, unsigned s1, uint8_t *buf, int raw) {
    unsigned s = s0;
    while (s <= s1) {
        unsigned e = s;
        while (e + 1 <= s1 && b->loc[e + 1] == b->loc[e] + 1) e++;
        size_t n = (size_t)(e - s + 1) * SEG;
        uint64_t off = (uint64_t)b->loc[s] * SEG;
        int r = raw ? frt_device_read_raw(&rt->dev, buf + (size_t)(s - s0) * SEG, n, off)
                    : frt_device_read(&rt->dev, buf + (size_t)(s - s0) * SEG, n, off);
        if (r != 0) return -1;
        s = e + 1;
    }
    return 0;
}

/* Writes segment s of `key` (data) to a fresh slot of placement stream `stream` in partition
 * `part` and indexes it; a write error leaves it
 * uncached (the slot stays invalid). A region whose last slot is written gets its header.
 * -1 (message in rt->err) when the device cannot take a region header. */
static int insert_segment(flashrt *rt, uint64_t key, unsigned s, const uint8_t *data, double t, unsigned stream,
                          uint32_t part) {
    uint32_t id = frt_regions_alloc_in(&rt->rm, t, stream, part); /* may evict this very block */
    if (id == FRT_NONE)
        return frt_seterr(rt->err, sizeof rt->err, "%s: cannot clear a region header: %s", rt->cfg.flash_path,
                          strerror(errno));
    if (frt_device_write(&rt->dev, data, SEG, (uint64_t)id * SEG) == 0) frt_regions_add(&rt->rm, key, s, id, t);
    uint32_t r = (uint32_t)(id / rt->rm.spr);
    if (rt->rm.reg[r].fill == rt->rm.spr) frt_persist_sealed(&rt->persist, &rt->rm, r);
    return 0;
}

/* A cached segment whose flash read failed leaves the index (and, journalled, the device's
 * view of it: it never comes back with --recover). -1 when neither the journal nor the
 * region's header can say so. */
static int drop_bad(flashrt *rt, uint32_t slot) {
    if (frt_persist_dropping(&rt->persist, &rt->rm, slot) != 0)
        return frt_seterr(rt->err, sizeof rt->err, "%s: cannot record a bad segment: %s", rt->cfg.flash_path,
                          strerror(errno));
    frt_regions_drop(&rt->rm, slot);
    return 0;
}

/* An interval partition policy's page requests: the GET's segments, each (block, segment); at
 * each boundary of partition_interval requests (before the request that starts an interval)
 * the new quotas, and the streams above theirs shrink. */
static int observe_pages(flashrt *rt, const struct flashrt_access *a, uint32_t part, unsigned s0, unsigned s1, double t) {
    for (unsigned s = s0; s <= s1; s++, rt->part_pages++) {
        if (rt->part_pages > 0 && rt->part_pages % rt->cfg.partition_interval == 0) {
            if (rt->part->next(rt->part_st, rt->rm.quota, rt->err, sizeof rt->err) != 0) return -1;
            rt->part_intervals++;
            for (uint32_t p = 0; p < rt->rm.nparts; p++)
                rt->part_resized += frt_regions_shrink(&rt->rm, t, p, rt->place->streams);
        }
        if (rt->part->observe(rt->part_st, part, a->key * FRT_SEGMENTS_PER_BLOCK + s) != 0)
            return frt_seterr(rt->err, sizeof rt->err, "out of memory");
    }
    return 0;
}

/* The recovered blocks' last access: the first access's time. */
static void recovered_start(flashrt *rt, double t) {
    for (uint64_t i = 0; i < rt->rm.nslots; i++) {
        const struct frt_slotref *sr = &rt->rm.slot[i];
        if (sr->valid && rt->rm.blks[sr->blk].recovered) rt->rm.blks[sr->blk].last = t;
    }
}

/* The block's access at t: its last-access time, and what the eviction policy makes of it
 * (LRU: its regions to the head). */
static inline void refresh(flashrt *rt, struct frt_blk *b, double t) {
    b->last = t;
    if (rt->rm.ev->refresh) rt->rm.ev->refresh(rt->ev_st, &rt->rm, b);
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
        if (rt->persist.recovered_regions) recovered_start(rt, t);
    }
    rt->tlast = t;
    const uint64_t index = rt->gets + rt->puts; /* this access's, from 0 */
    if (rt->budget && rt->budget->tick) rt->budget->tick(rt->bud_st, t, rt->rm.evicted_regions);
    if (flashrt_is_put(a->op)) {
        rt->puts++;
        rt->backend_ios++;
        rt->backend_bytes += nseg * SEG;
        charge(rt, t, io_dt(rt, nseg));
        return 0;
    }
    if (rt->admit->arrive) rt->admit->arrive(rt->adm_st, a->key);
    if (rt->place->access) rt->place->access(rt->place_st, a);
    uint32_t part = 0;
    if (rt->part) {
        int p = stream_of(rt, a->ns);
        if (p < 0)
            return frt_seterr(rt->err, sizeof rt->err, "namespace %d is not one of the %u streams of --partition %s",
                              (int)a->ns, rt->cfg.partition_streams, rt->part->name);
        part = (uint32_t)p;
        rt->part_gets[part]++;
        if (rt->part->observe && observe_pages(rt, a, part, s0, s1, t) != 0) return -1;
    }
    uint64_t w0 = frt_now_ns();
    if (rt->rm.ev->get) { /* inside the hit and miss paths' time */
        const struct frt_blk *g = frt_regions_find(&rt->rm, a->key);
        if (rt->rm.ev->get(rt->ev_st, a, index, g ? (uint32_t)(g - rt->rm.blks) : FRT_NONE, rt->err, sizeof rt->err) != 0)
            return -1;
    }
    rt->gets++;
    rt->get_bytes += a->size;
    rt->get_segs += nseg;
    const uint64_t span = span_of(s0, nseg);
    struct frt_blk *b;
    unsigned cached, m0, m1;
    double raw = -1;
    int raw_first = 0;
    if (rt->cfg.measure_raw && (rt->raw_flip ^= 1)) {
        /* half of the hits time the raw read first, half after: neither order gets the
         * warmer caches every time */
        b = frt_regions_find(&rt->rm, a->key);
        if (holds(b, s0) && (b->mask & span) == span) {
            uint64_t r0 = frt_now_ns();
            if (read_cached(rt, b, s0, s1, rt->rawbuf, 1) == 0) raw = (double)(frt_now_ns() - r0);
            raw_first = 1;
            w0 = frt_now_ns();
        }
    }
    for (;;) {
        b = frt_regions_find(&rt->rm, a->key);
        cached = 0;
        m0 = s0;
        m1 = s1;
        if (b) {
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
            /* flash read error (counted by the device): drop what we hold of this range,
             * serve it as a miss */
            for (unsigned s = s0; s <= s1; s++)
                if (holds(b, s) && drop_bad(rt, b->loc[s]) != 0) return -1;
            continue;
        }
        refresh(rt, b, t);
        if (rt->admit->observe) rt->admit->observe(rt->adm_st, a);
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
        rt->part_hits[part] += rt->part != NULL;
        rt->recovered_hits += b->recovered;
        rt->hit_bytes += a->size;
        rt->hit_segs += nseg;
        rt->served_bytes += a->size;
        res->data = rt->fbuf + (a->offset - (uint64_t)s0 * SEG);
        res->len = a->size;
        res->hit = 1;
        return 0;
    }
    /* miss: refresh recency of what the block has, then decide */
    if (b) refresh(rt, b, t);
    rt->hit_segs += cached;
    unsigned lo = m0, hi = m1;
    uint64_t want; /* the segments of lo..hi the policy admits */
    int admit;
    uint64_t d0 = frt_now_ns();
    if (rt->admit->admit_segment) {
        want = 0;
        for (unsigned s = m0; s <= m1; s++)
            if (!holds(b, s) && rt->admit->admit_segment(rt->adm_st, a, index, s)) want |= 1ull << s;
        admit = want != 0;
    } else {
        admit = rt->admit->decide(rt->adm_st, a, index, &lo, &hi);
        want = span_of(lo, hi - lo + 1);
    }
    frt_vec_push(&rt->decision_ns, (double)(frt_now_ns() - d0));
    if (rt->admit->observe) rt->admit->observe(rt->adm_st, a);
    /* as the simulator (and the artifact): cached segments at the edges of the prefetch
     * range are not read again */
    if (b) {
        while (lo < m0 && holds(b, lo)) lo++;
        while (hi > m1 && holds(b, hi)) hi--;
    }
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
    if (frt_backing_read(rt->backing, a->key, lo, hi, buf + (size_t)(lo - u0) * SEG, t, rt->err, sizeof rt->err) != 0) return -1;
    double wall = (double)(frt_now_ns() - r0) / 1e9;
    frt_vec_push(&rt->backend_wall_ms, wall * 1e3);
    frt_vec_push(&rt->backend_dt_ms, dt * 1e3);
    rt->backend_wall_s += wall;
    rt->backend_dt_s += dt;
    if (s0 < lo || s1 > hi) {
        b = frt_regions_find(&rt->rm, a->key);
        for (unsigned s = s0; s <= s1; s++) {
            if (s >= lo && s <= hi) continue;
            uint8_t *dst = buf + (size_t)(s - u0) * SEG;
            if (holds(b, s) && frt_device_read(&rt->dev, dst, SEG, (uint64_t)b->loc[s] * SEG) == 0) continue;
            /* flash error (counted by the device; or, defensively, not cached): this
             * segment from the backing */
            if (holds(b, s)) {
                if (drop_bad(rt, b->loc[s]) != 0) return -1;
                b = frt_regions_find(&rt->rm, a->key);
            }
            if (frt_backing_read(rt->backing, a->key, s, s, dst, t, rt->err, sizeof rt->err) != 0) return -1;
        }
    }
    if (admit && rt->part && rt->rm.quota[part] == 0) admit = 0; /* its stream caches nothing */
    if (admit) {
        b = frt_regions_find(&rt->rm, a->key);
        unsigned need = 0;
        for (unsigned s = lo; s <= hi; s++)
            if (((want >> s) & 1) && !holds(b, s)) need++;
        if (!need || !rt->budget ||
            rt->budget->admit(rt->bud_st, t, need * SEG, FRT_BUDGET_READ_MISS, 0, rt->rm.evicted_regions)) {
            unsigned stream = need && rt->place->place ? rt->place->place(rt->place_st, a) : 0;
            if (rt->part) { /* the stream's own open regions; a quota below them: the first only */
                if (rt->rm.quota[part] < rt->place->streams) stream = 0;
                stream += part * rt->place->streams;
            }
            for (unsigned s = lo; s <= hi; s++) {
                if (!((want >> s) & 1)) continue;
                b = frt_regions_find(&rt->rm, a->key); /* an eviction may have freed it */
                if (holds(b, s)) continue;
                if (insert_segment(rt, a->key, s, buf + (size_t)(s - u0) * SEG, t, stream, part) != 0) return -1;
                rt->admitted++;
                if (s < s0 || s > s1) rt->prefetched++;
            }
        }
    }
    if (rt->rm.ev->inserted && (b = frt_regions_find(&rt->rm, a->key)) != NULL) rt->rm.ev->inserted(rt->ev_st, &rt->rm, b);
    frt_vec_push(&rt->miss_us, (double)(frt_now_ns() - w0) / 1e3);
    rt->served_bytes += a->size;
    res->data = buf + (a->offset - (uint64_t)u0 * SEG);
    res->len = a->size;
    res->hit = 0;
    return 0;
}

int flashrt_invalidate(flashrt *rt, uint64_t key, uint64_t offset, uint64_t size) {
    if (!size || offset >= FRT_BLOCK_BYTES) return 0;
    uint64_t end = size - 1 < FRT_BLOCK_BYTES - offset ? offset + size - 1 : FRT_BLOCK_BYTES - 1;
    int dropped = 0;
    for (unsigned s = (unsigned)(offset / SEG); s <= (unsigned)(end / SEG); s++) {
        struct frt_blk *b = frt_regions_find(&rt->rm, key); /* gone once its last segment is */
        if (!holds(b, s)) continue;
        if (drop_bad(rt, b->loc[s]) != 0) return -1;
        dropped++;
    }
    return dropped;
}

void flashrt_idle(flashrt *rt) {
    if (rt->admit->idle) rt->admit->idle(rt->adm_st);
}

/* ---- metrics ---- */

/* The utilisation series: DT per window after the warm-up, at full-node scale per disk. */
static void dt_util(const flashrt *rt, struct flashrt_metrics *m) {
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
}

void flashrt_metrics(flashrt *rt, struct flashrt_metrics *m) {
    memset(m, 0, sizeof *m);
    const struct flashrt_config *c = &rt->cfg;
    const struct frt_regions *rm = &rt->rm;
    double span = rt->started ? rt->tlast - rt->t0 : 0;
    dt_util(rt, m);
    double scale = 100.0 / c->sample_ratio;
    m->flash_write_rate_mbps = span > 0 ? (double)rt->admitted * (double)SEG / span * scale / FRT_MB : NAN;
    double cache_full = (double)rm->nslots * (double)SEG * scale;
    m->dwpd = m->flash_write_rate_mbps * FRT_MB * 86400.0 / cache_full;
    m->io_hit_ratio = rt->gets ? (double)rt->hits / (double)rt->gets : NAN;
    m->byte_hit_ratio = rt->get_bytes ? (double)rt->hit_bytes / (double)rt->get_bytes : NAN;
    m->segment_hit_ratio = rt->get_segs ? (double)rt->hit_segs / (double)rt->get_segs : NAN;
    m->avg_eviction_age_s = rm->evicted_segments ? rm->age_sum / (double)rm->evicted_segments : NAN;
    m->backend_ios = rt->backend_ios;
    m->backend_bytes = rt->backend_bytes;
    m->admitted_segments = rt->admitted;
    m->prefetched_segments = rt->prefetched;
    m->accesses = rt->gets + rt->puts;
    m->wall_s = rt->started ? frt_now() - rt->wall0 : 0;
    m->flash_read_errors = rt->dev.read_errors;
    m->flash_write_errors = rt->dev.write_errors;
    m->device_errors = rt->dev.read_errors + rt->dev.write_errors;
    struct frt_budget_stats bs = {0, NAN, NAN, 0, 0};
    if (rt->budget && rt->budget->stats) rt->budget->stats(rt->bud_st, &bs);
    m->rate_limited = bs.refused;
    m->budget_quota = bs.quota;
    m->budget_credit = bs.credit;
    m->budget_quanta = bs.quanta;
    m->budget_blocked_quanta = bs.blocked;
    m->gets = rt->gets;
    m->puts = rt->puts;
    m->hits = rt->hits;
    m->evicted_regions = rm->evicted_regions;
    m->evicted_segments = rm->evicted_segments;
    m->capacity_segments = rm->nslots;
    m->region_bytes = c->region_bytes;
    m->regions = rm->nregions;
    /* latency percentiles (each call sorts its samples) */
    m->decision_ns_p50 = frt_percentile(&rt->decision_ns, 0.5);
    m->decision_ns_p99 = frt_percentile(&rt->decision_ns, 0.99);
    /* a built-in reads no features: its decision is all policy */
    struct frt_admission_stats as = {0.0, m->decision_ns_p50, NAN};
    if (rt->admit->stats) rt->admit->stats(rt->adm_st, &as);
    m->features_ns_p50 = as.features_ns_p50;
    m->policy_ns_p50 = as.policy_ns_p50;
    m->policy_prefetch_ns_p50 = as.hint_ns_p50;
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
    m->direct_io = rt->dev.direct;
    struct frt_eviction_stats es = {0, 0, 0, NAN, NAN};
    if (rt->rm.ev->stats) rt->rm.ev->stats(rt->ev_st, &es);
    m->eviction_decisions = es.decisions;
    m->eviction_predictions = es.predictions;
    m->eviction_reinsertions = es.reinsertions;
    m->eviction_threshold = es.threshold;
    m->eviction_decision_ns_p50 = es.decision_ns_p50;
    struct frt_placement_stats ps = {0};
    if (rt->place->stats) rt->place->stats(rt->place_st, &ps);
    m->placement_hot_misses = ps.hot_misses;
    m->partitions = rt->rm.nparts;
    m->partition_intervals = rt->part ? rt->part_intervals + 1 : 0;
    m->partition_resize_evictions = rt->part_resized;
    for (uint32_t p = 0; p < rt->rm.nparts; p++) {
        m->partition_quota[p] = rt->rm.quota[p];
        m->partition_regions[p] = rt->rm.held[p];
        m->partition_gets[p] = rt->part_gets[p];
        m->partition_hits[p] = rt->part_hits[p];
    }
    m->recovered_regions = rt->persist.recovered_regions;
    m->recovered_segments = rt->persist.recovered_segments;
    m->recovery_dropped = rt->persist.recovery_dropped;
    m->recovered_hits = rt->recovered_hits;
    m->header_errors = rt->persist.header_errors;
    m->journalled = rt->persist.journalled;
}
