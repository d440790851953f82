/* mat.c: the MAT object cache (flashrt.h, "MAT"): whole objects in a cache file, an LRU list,
 * LRB's feature history (lrb_features.c) and Algorithm 1 with its threshold controller
 * (mat_alg.c, shared with the flash cache's MAT eviction, mat_tail.c), the predictor
 * being the bundle's flashml_evict_predict. The loop, the list moves and every
 * comparison are those of the simulator's sim/src/mat/{chooser,object}.rs (Mat::evict, simulate_mat), so the
 * decisions are the same on the same requests and capacity (tests/runtime/test_runtime_mat.py),
 * with reused predictions (Mat::kept: by slot, valid while the slot holds the same object at
 * the same access) as without.
 *
 * Storage: the cache file is cut into 4 KiB pages; an object owns a chain of ceil(size /
 * 4 KiB) pages (consecutive where the free list allows, read and written as runs), freed on
 * eviction. The cache's capacity is what the simulator counts (bytes or objects), the pages
 * only hold them: the file grows to the largest number of pages in use (at most the capacity
 * in pages plus one page per cached object). IO goes through device.h (O_DIRECT when asked
 * or possible, aligned buffers). The index is in memory only: a new cache starts cold.
 * A miss writes the object's deterministic content (flashrt_content, the backing store's);
 * a hit reads it back and verifies every byte. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device.h"
#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "mat/lrb_features.h"
#include "policies/policy_internal.h"
#include "mat/mat_alg.h"

#define NIL UINT32_MAX
#define PAGE 4096u

struct flashrt_mat {
    struct flashrt_mat_config cfg;
    struct frt_mat_alg alg; /* Algorithm 1: knobs, T, counters (predict NULL: LRU) */
    /* objects: key -> dense id (first appearance), their slot and history */
    struct frt_map ids;
    uint64_t *obj_key;
    uint32_t *obj_slot;
    size_t nobj, objcap;
    struct frt_lrb meta;
    /* cached objects by slot: object, last access, size charged, bytes, first data page, and
     * the LRU list (head = most recently used); with reuse, the last prediction made for the
     * slot (sim: Mat::kept): object, its last access then, model output, valid while both
     * are still the slot's (set to NIL when the slot takes a new object) */
    uint32_t *s_obj, *s_page, *s_kobj;
    uint64_t *s_last, *s_size, *s_bytes, *s_klast;
    double *s_kpred;
    uint32_t *s_free;
    size_t nslots, slotcap, nfree;
    struct frt_dlist lst; /* its prev/next grow with the slots */
    uint64_t used, now;
    /* counters */
    uint64_t hits, misses, bypassed, req_bytes, miss_bytes;
    struct frt_vec dec_ns;
    uint64_t dec_ns_total;
    double feat[FRT_EVICT_NF];
    struct flashrt_mat_victim *vic;
    size_t nvic, viccap;
    /* the cache file */
    int have_file;
    struct frt_device dev;
    uint32_t *page_next, *page_free;
    size_t npages, pagecap, npfree, pfreecap;
    uint8_t *buf;
    size_t bufcap;
    uint64_t bytes_written, bytes_read, verified_bytes, integrity_errors;
    double t_open;
    char err[FLASHRT_ERR_LEN];
};

void flashrt_mat_config_default(struct flashrt_mat_config *c) {
    memset(c, 0, sizeof *c);
    c->unit = FLASHRT_MAT_BYTES;
    c->direct = FLASHRT_DIRECT_AUTO;
    c->k = c->delta = c->initial_threshold = NAN;
    c->controller = -1; /* the policy's */
    c->reuse_predictions = -1; /* the policy's */
    c->time_decisions = 1;
}

flashrt_policy *flashrt_policy_load_eviction(const char *dir, char *err, size_t errlen) {
    return frt_policy_load_for(dir, FRT_CAP_EVICTION, err, errlen);
}

const char *flashrt_mat_error(const flashrt_mat *m) { return m->err; }

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

flashrt_mat *flashrt_mat_open(const struct flashrt_mat_config *cfg, flashrt_policy *policy,
                              char *err, size_t errlen) {
    if (cfg->capacity == 0) { frt_seterr(err, errlen, "capacity must be > 0"); return NULL; }
    if (cfg->unit != FLASHRT_MAT_BYTES && cfg->unit != FLASHRT_MAT_OBJECTS) { frt_seterr(err, errlen, "unknown capacity unit %d", (int)cfg->unit); return NULL; }
    const struct frt_evict_fns *ev = NULL;
    if (policy) {
        ev = frt_policy_evict(policy);
        if (!ev) {
            frt_seterr(err, errlen, "%s: not loaded for eviction (flashrt_policy_load_eviction)", flashrt_policy_name(policy));
            return NULL;
        }
    }
    flashrt_mat *m = calloc(1, sizeof *m);
    if (!m) { frt_seterr(err, errlen, "out of memory"); return NULL; }
    m->cfg = *cfg;
    m->dev.fd = -1;
    frt_dlist_init(&m->lst);
    /* the knobs: the caller's, else the policy's, else the simulator's defaults */
    struct frt_mat_params prm;
    if (frt_mat_params_resolve(&prm, cfg->k, cfg->delta, cfg->initial_threshold, cfg->max_candidates, cfg->controller,
                               cfg->reuse_predictions, cfg->memory_window, ev, err, errlen) != 0)
        goto fail;
    frt_mat_alg_init(&m->alg, &prm, ev ? ev->predict : NULL, ev ? ev->prefetch : NULL);
    if (frt_lrb_init(&m->meta, prm.window, err, errlen) != 0) goto fail;
    if (frt_map_init(&m->ids, 1 << 16) != 0) { frt_seterr(err, errlen, "out of memory"); goto fail; }
    if (cfg->cache_path) {
        if (frt_device_open(&m->dev, cfg->cache_path, (int)cfg->direct, err, errlen) != 0) goto fail;
        m->have_file = 1;
    }
    m->t_open = frt_now();
    return m;
fail:
    flashrt_mat_close(m);
    return NULL;
}

/* ---- Algorithm 1 over the slots (mat_alg.h) ---- */

static void trace_candidate(void *ctx, uint32_t c, uint64_t now, uint64_t last, const double *feat, double pred,
                            double tta, double threshold) {
    flashrt_mat *m = ctx;
    struct flashrt_mat_candidate cd = {now, m->obj_key[m->s_obj[c]], last, feat, pred, tta, threshold};
    m->cfg.on_candidate(m->cfg.ctx, &cd);
}

/* Chooses and removes the victim (a slot) at logical time `now` (the request being served);
 * its try in *tries. */
static uint32_t evict(flashrt_mat *m, uint64_t now, uint32_t *tries) {
    const struct frt_mat_view v = {m->s_obj, m->s_last, m->s_kobj, m->s_klast, m->s_kpred, &m->meta,
                                   m->cfg.on_candidate ? trace_candidate : NULL, m};
    return frt_mat_choose(&m->alg, &m->lst, &v, now, tries);
}

/* ---- the cache file ---- */

static int set_err(flashrt_mat *m, const char *fmt, ...) FRT_PRINTF(2, 3);
static int set_err(flashrt_mat *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return -1;
}

static int ensure_buf(flashrt_mat *m, uint64_t bytes) {
    size_t need = (size_t)((bytes + PAGE - 1) / PAGE * PAGE);
    if (need <= m->bufcap) return 0;
    free(m->buf);
    m->buf = NULL;
    m->bufcap = 0;
    void *p;
    if (posix_memalign(&p, PAGE, need) != 0) return set_err(m, "out of memory (a buffer of %llu bytes)", (unsigned long long)bytes);
    m->buf = p;
    m->bufcap = need;
    return 0;
}

/* IO over an object's page chain, a run of consecutive pages at a time. */
static int chain_io(flashrt_mat *m, uint32_t first, uint64_t bytes, int write) {
    uint64_t npg = (bytes + PAGE - 1) / PAGE, done = 0;
    uint32_t p = first;
    while (done < npg) {
        uint32_t start = p;
        uint64_t run = 1;
        while (done + run < npg && m->page_next[p] == p + 1) {
            p = m->page_next[p];
            run++;
        }
        uint8_t *b = m->buf + done * PAGE;
        uint64_t off = (uint64_t)start * PAGE;
        int r = write ? frt_device_write(&m->dev, b, (size_t)(run * PAGE), off) : frt_device_read(&m->dev, b, (size_t)(run * PAGE), off);
        if (r != 0) return set_err(m, "%s: %s of %llu bytes at %llu failed: %s", m->cfg.cache_path, write ? "write" : "read",
                                   (unsigned long long)(run * PAGE), (unsigned long long)off, strerror(errno));
        done += run;
        p = m->page_next[p];
    }
    return 0;
}

/* Stores slot s's object (pages from the free list, else new ones at the end of the file). */
static int data_store(flashrt_mat *m, uint32_t s, uint64_t key, uint64_t bytes) {
    uint64_t npg = (bytes + PAGE - 1) / PAGE;
    if (ensure_buf(m, bytes) != 0) return -1;
    uint32_t first = NIL, prev = NIL;
    for (uint64_t i = 0; i < npg; i++) {
        uint32_t p;
        if (m->npfree) {
            p = m->page_free[--m->npfree];
        } else {
            if (m->npages >= NIL - 1) return set_err(m, "%s: more than 2^32 pages", m->cfg.cache_path);
            if (grow((void **)&m->page_next, &m->pagecap, m->npages + 1, sizeof *m->page_next) != 0) return set_err(m, "out of memory");
            p = (uint32_t)m->npages++;
            if (m->dev.is_blockdev && (uint64_t)m->npages * PAGE > m->dev.size)
                return set_err(m, "%s: the device (%llu bytes) is too small for the cached objects", m->cfg.cache_path, (unsigned long long)m->dev.size);
        }
        m->page_next[p] = NIL;
        if (prev == NIL) first = p;
        else m->page_next[prev] = p;
        prev = p;
    }
    /* every page can be free at once */
    if (grow((void **)&m->page_free, &m->pfreecap, m->npages, sizeof *m->page_free) != 0) return set_err(m, "out of memory");
    m->s_page[s] = first;
    flashrt_content(key, 0, m->buf, (size_t)bytes);
    memset(m->buf + bytes, 0, (size_t)(npg * PAGE - bytes));
    if (chain_io(m, first, bytes, 1) != 0) return -1;
    m->bytes_written += bytes;
    return 0;
}

static void data_free(flashrt_mat *m, uint32_t s) {
    uint64_t npg = (m->s_bytes[s] + PAGE - 1) / PAGE;
    /* pushed last page first, so that the next allocation pops them in order (consecutive
     * pages stay one run) */
    uint32_t stack_top = (uint32_t)(m->npfree + npg);
    uint32_t p = m->s_page[s];
    for (uint64_t i = 0; i < npg; i++) {
        m->page_free[stack_top - 1 - i] = p;
        p = m->page_next[p];
    }
    m->npfree += npg;
}

/* ---- serving ---- */

static int new_object(flashrt_mat *m, uint64_t key, uint32_t *id) {
    if (m->nobj >= NIL - 1) return set_err(m, "more than 2^32 - 2 distinct objects");
    if (grow((void **)&m->obj_key, &m->objcap, m->nobj + 1, sizeof *m->obj_key) != 0) return set_err(m, "out of memory");
    size_t cap = m->objcap;
    uint32_t *os = realloc(m->obj_slot, cap * sizeof *os);
    if (!os) return set_err(m, "out of memory");
    m->obj_slot = os;
    if (frt_lrb_add(&m->meta) != 0) return set_err(m, "out of memory");
    *id = (uint32_t)m->nobj++;
    m->obj_key[*id] = key;
    m->obj_slot[*id] = NIL;
    if (frt_map_put(&m->ids, key, *id) != 0) return set_err(m, "out of memory");
    return 0;
}

static int alloc_slot(flashrt_mat *m, uint32_t *s) {
    if (m->nfree) {
        *s = m->s_free[--m->nfree];
        return 0;
    }
    size_t n = m->nslots + 1, cap = m->slotcap;
    if (n > cap) {
        size_t c = cap ? 2 * cap : 1024;
#define G(a) do { void *q = realloc(a, c * sizeof *(a)); if (!q) return set_err(m, "out of memory"); (a) = q; } while (0)
        G(m->s_obj); G(m->lst.prev); G(m->lst.next); G(m->s_page); G(m->s_last); G(m->s_size); G(m->s_bytes); G(m->s_free);
        G(m->s_kobj); G(m->s_klast); G(m->s_kpred);
#undef G
        m->slotcap = c;
    }
    *s = (uint32_t)m->nslots++;
    return 0;
}

static int push_victim(flashrt_mat *m, uint64_t key, uint64_t size, uint32_t tries) {
    if (grow((void **)&m->vic, &m->viccap, m->nvic + 1, sizeof *m->vic) != 0) return set_err(m, "out of memory");
    m->vic[m->nvic++] = (struct flashrt_mat_victim){key, size, tries, m->alg.threshold};
    return 0;
}

int flashrt_mat_get(flashrt_mat *m, uint64_t key, uint64_t size, struct flashrt_mat_result *res) {
    memset(res, 0, sizeof *res);
    m->nvic = 0;
    if (size == 0) return set_err(m, "key %llu: size is 0", (unsigned long long)key);
    const uint64_t now = m->now;
    m->req_bytes += size;
    uint32_t *idp = frt_map_get(&m->ids, key), id = 0;
    if (idp) id = *idp;
    else if (new_object(m, key, &id) != 0) return -1;
    if (frt_lrb_access(&m->meta, id, now, size) != 0) return set_err(m, "out of memory");
    m->now = now + 1;
    uint32_t slot = m->obj_slot[id];
    if (slot != NIL) {
        m->hits++;
        m->s_last[slot] = now;
        frt_dlist_unlink(&m->lst, slot); /* touch: to the front */
        frt_dlist_push_front(&m->lst, slot);
        res->hit = 1;
        if (m->have_file) {
            uint64_t bytes = m->s_bytes[slot];
            if (ensure_buf(m, bytes) != 0 || chain_io(m, m->s_page[slot], bytes, 0) != 0) return -1;
            m->bytes_read += bytes;
            if (flashrt_verify(key, 0, m->buf, (size_t)bytes) >= 0) m->integrity_errors++;
            m->verified_bytes += bytes;
            res->data = m->buf;
            res->len = bytes;
        }
        return 0;
    }
    m->misses++;
    m->miss_bytes += size;
    uint64_t charge = m->cfg.unit == FLASHRT_MAT_OBJECTS ? 1 : size;
    if (charge > m->cfg.capacity) {
        /* larger than the whole cache: served from the backing content, never inserted */
        m->bypassed++;
        res->bypassed = 1;
        if (m->have_file) {
            if (ensure_buf(m, size) != 0) return -1;
            flashrt_content(key, 0, m->buf, (size_t)size);
            res->data = m->buf;
            res->len = size;
        }
        return 0;
    }
    while (m->used + charge > m->cfg.capacity) {
        uint32_t tries;
        uint64_t t0 = frt_now_ns();
        uint32_t v = evict(m, now, &tries);
        uint64_t ns = frt_now_ns() - t0;
        m->dec_ns_total += ns;
        if (m->cfg.time_decisions) frt_vec_push(&m->dec_ns, (double)ns);
        uint32_t vo = m->s_obj[v];
        if (push_victim(m, m->obj_key[vo], m->s_bytes[v], tries) != 0) return -1;
        m->obj_slot[vo] = NIL;
        m->used -= m->s_size[v];
        if (m->have_file) data_free(m, v);
        m->s_free[m->nfree++] = v;
    }
    uint32_t s = 0;
    if (alloc_slot(m, &s) != 0) return -1;
    m->s_obj[s] = id;
    m->s_last[s] = now;
    m->s_kobj[s] = NIL; /* no prediction kept for the new object */
    m->s_size[s] = charge;
    m->s_bytes[s] = size;
    m->obj_slot[id] = s;
    frt_dlist_push_front(&m->lst, s);
    m->used += charge;
    res->nvictims = m->nvic;
    res->victims = m->vic;
    if (m->have_file) {
        if (data_store(m, s, key, size) != 0) return -1;
        res->data = m->buf;
        res->len = size;
    }
    return 0;
}

int flashrt_mat_features(const flashrt_mat *m, uint64_t key, double *out) {
    uint32_t *id = frt_map_get(&m->ids, key);
    if (!id || m->meta.m[*id].last == FRT_LRB_NEVER) return -1;
    frt_lrb_features(&m->meta, *id, m->now, out);
    return 0;
}

void flashrt_mat_metrics(flashrt_mat *m, struct flashrt_mat_metrics *o) {
    memset(o, 0, sizeof *o);
    o->requests = m->now;
    o->hits = m->hits;
    o->misses = m->misses;
    o->bypassed = m->bypassed;
    const struct frt_mat_alg *a = &m->alg;
    o->evictions = a->evictions;
    o->predictions = a->predictions;
    o->reused = a->reused;
    o->reinsertions = a->reinsertions;
    o->request_bytes = m->req_bytes;
    o->miss_bytes = m->miss_bytes;
    o->cached_objects = m->lst.len;
    o->used = m->used;
    o->capacity = m->cfg.capacity;
    o->miss_ratio = m->now ? (double)m->misses / (double)m->now : NAN;
    o->byte_miss_ratio = m->req_bytes ? (double)m->miss_bytes / (double)m->req_bytes : NAN;
    o->predictions_per_eviction = a->evictions ? (double)a->predictions / (double)a->evictions : NAN;
    o->candidates_per_eviction = a->evictions ? (double)(a->predictions + a->reused) / (double)a->evictions : NAN;
    o->final_threshold = a->threshold;
    o->k = a->p.k;
    o->delta = a->p.delta;
    o->initial_threshold = a->p.t0;
    o->max_candidates = a->p.L;
    o->controller = a->p.controller;
    o->reuse_predictions = a->p.reuse;
    o->memory_window = m->meta.window;
    o->decision_ns_mean = a->evictions ? (double)m->dec_ns_total / (double)a->evictions : NAN;
    o->decision_ns_p50 = frt_percentile(&m->dec_ns, 0.5);
    o->decision_ns_p99 = frt_percentile(&m->dec_ns, 0.99);
    o->bytes_written = m->bytes_written;
    o->bytes_read = m->bytes_read;
    o->verified_bytes = m->verified_bytes;
    o->integrity_errors = m->integrity_errors;
    o->file_bytes = (uint64_t)m->npages * PAGE;
    o->direct_io = m->have_file ? m->dev.direct : 0;
    o->wall_s = frt_now() - m->t_open;
}

void flashrt_mat_close(flashrt_mat *m) {
    if (!m) return;
    frt_device_close(&m->dev);
    if (m->ids.cap) frt_map_free(&m->ids);
    frt_lrb_free(&m->meta);
    free(m->obj_key); free(m->obj_slot);
    free(m->s_obj); free(m->lst.prev); free(m->lst.next); free(m->s_page);
    free(m->s_last); free(m->s_size); free(m->s_bytes); free(m->s_free);
    free(m->s_kobj); free(m->s_klast); free(m->s_kpred);
    frt_vec_free(&m->dec_ns);
    free(m->vic);
    free(m->page_next); free(m->page_free);
    free(m->buf);
    free(m);
}
