/* mat_tail.c: MAT as the flash cache's eviction (the eviction slot, engine/policy_slots.h): the
 * simulator's flash-mode MAT (sim/src/compose/flash_mat.rs) over the region store. Blocks sit on an
 * LRU order of their own (a GET that refreshes a block moves it to the head; a new block
 * enters at the head); when a region must go and no block is condemned, Algorithm 1
 * (mat_alg.c, the object cache's very code) examines the order's tail, asking the bundle's
 * eviction capability (flashml_evict_predict over LRB's 44 features, lrb_features.c) for each
 * candidate's distance to its next access, and condemns one block: it leaves the order, and
 * the evictions that follow take the region of its lowest cached segment until it is empty
 * (or a GET refreshes it: back to the head). A GET miss refreshes its block at its start and
 * again once its segments are in (the simulator's deferred refresh: the candidates a decision
 * put back at the head meanwhile stay behind it). Logical time is the access index (GETs and
 * PUTs); a block's feature history is recorded at the start of each of its GETs with that
 * access's size, its last access set then too.
 *
 * With regions of one segment this is the simulator's flash MAT segment for segment on a
 * trace where each GET covers all the cached segments of its block (tests/runtime/
 * test_runtime_engine.py). Elsewhere it differs as the engine differs from the simulator:
 * a region of several segments leaves whole (the other blocks' segments in it too); a miss
 * refreshes its block before inserting, where the simulator keeps the block's cached
 * segments outside the request at their old place until the deferred refresh; and the
 * engine inserts the prefetched segments with the requested ones, in one ascending pass,
 * where the simulator inserts them after the deferred refresh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mat/mat_alg.h"
#include "engine/region.h"

struct mat_ev {
    struct frt_mat_alg alg;
    struct frt_lrb meta;
    struct frt_map ids; /* block key -> object id (first GET) */
    uint32_t nobj;
    /* per block entry of the store: its object, last GET, the kept prediction; the order */
    uint32_t *obj, *kobj;
    uint64_t *last, *klast;
    double *kpred;
    struct frt_dlist lst;
    uint32_t condemned; /* FRT_MAT_NIL: none */
    uint64_t now;       /* the current GET's index */
    uint32_t cur;       /* its object */
    struct frt_vec dec_ns;
};

static void mat_free(void *st) {
    struct mat_ev *e = st;
    if (!e) return;
    frt_lrb_free(&e->meta);
    if (e->ids.cap) frt_map_free(&e->ids);
    free(e->obj);
    free(e->kobj);
    free(e->last);
    free(e->klast);
    free(e->kpred);
    free(e->lst.prev);
    free(e->lst.next);
    frt_vec_free(&e->dec_ns);
    free(e);
}

static int mat_init(void **st, struct frt_regions *m, flashrt_policy *bundle, char *err, size_t errlen) {
    const struct frt_evict_fns *ev = bundle ? frt_policy_evict(bundle) : NULL;
    if (!ev)
        return frt_seterr(err, errlen, "eviction mat: %s has no eviction capability (flashrt_policy_load_eviction)",
                          bundle ? flashrt_policy_name(bundle) : "no bundle");
    struct mat_ev *e = calloc(1, sizeof *e);
    if (!e) return frt_seterr(err, errlen, "out of memory");
    *st = e;
    struct frt_mat_params p;
    if (frt_mat_params_resolve(&p, NAN, NAN, NAN, 0, -1, -1, 0, ev, err, errlen) != 0) return -1;
    frt_mat_alg_init(&e->alg, &p, ev->predict, ev->prefetch);
    if (frt_lrb_init(&e->meta, p.window, err, errlen) != 0) return -1;
    size_t n = m->nslots; /* block entries */
    e->obj = malloc(n * sizeof *e->obj);
    e->kobj = malloc(n * sizeof *e->kobj);
    e->last = malloc(n * sizeof *e->last);
    e->klast = malloc(n * sizeof *e->klast);
    e->kpred = malloc(n * sizeof *e->kpred);
    e->lst.prev = malloc(n * sizeof *e->lst.prev);
    e->lst.next = malloc(n * sizeof *e->lst.next);
    if (!e->obj || !e->kobj || !e->last || !e->klast || !e->kpred || !e->lst.prev || !e->lst.next ||
        frt_map_init(&e->ids, 1 << 12) != 0)
        return frt_seterr(err, errlen, "out of memory");
    frt_dlist_init(&e->lst);
    e->condemned = FRT_MAT_NIL;
    return 0;
}

static int mat_get(void *st, const struct flashrt_access *a, uint64_t index, uint32_t blk, char *err, size_t errlen) {
    struct mat_ev *e = st;
    e->now = index;
    uint32_t *idp = frt_map_get(&e->ids, a->key);
    if (idp) e->cur = *idp;
    else {
        if (e->nobj >= FRT_MAT_NIL - 1) return frt_seterr(err, errlen, "more than 2^32 - 2 distinct blocks");
        if (frt_lrb_add(&e->meta) != 0 || frt_map_put(&e->ids, a->key, e->nobj) != 0)
            return frt_seterr(err, errlen, "out of memory");
        e->cur = e->nobj++;
    }
    if (frt_lrb_access(&e->meta, e->cur, index, a->size) != 0) return frt_seterr(err, errlen, "out of memory");
    if (blk != FRT_NONE) e->last[blk] = index;
    return 0;
}

static void mat_added(void *st, uint32_t blk) {
    struct mat_ev *e = st;
    e->obj[blk] = e->cur;
    e->last[blk] = e->now;
    e->kobj[blk] = FRT_MAT_NIL;
    frt_dlist_push_front(&e->lst, blk);
}

static void mat_refresh(void *st, struct frt_regions *m, const struct frt_blk *b) {
    struct mat_ev *e = st;
    uint32_t blk = (uint32_t)(b - m->blks);
    if (e->condemned == blk) e->condemned = FRT_MAT_NIL;
    else frt_dlist_unlink(&e->lst, blk);
    frt_dlist_push_front(&e->lst, blk);
}

static void mat_removed(void *st, uint32_t blk) {
    struct mat_ev *e = st;
    if (e->condemned == blk) e->condemned = FRT_MAT_NIL;
    else frt_dlist_unlink(&e->lst, blk);
}

static uint32_t mat_victim(void *st, struct frt_regions *m) {
    struct mat_ev *e = st;
    if (e->condemned == FRT_MAT_NIL) {
        if (e->lst.len == 0) return m->tail; /* full regions without a block (write errors) */
        const struct frt_mat_view v = {e->obj, e->last, e->kobj, e->klast, e->kpred, &e->meta, NULL, NULL};
        uint32_t tries;
        uint64_t t0 = frt_now_ns();
        e->condemned = frt_mat_choose(&e->alg, &e->lst, &v, e->now, &tries);
        frt_vec_push(&e->dec_ns, (double)(frt_now_ns() - t0));
    }
    const struct frt_blk *b = &m->blks[e->condemned];
    uint32_t r = (uint32_t)(b->loc[__builtin_ctzll(b->mask)] / m->spr);
    return m->reg[r].in_list ? r : m->tail; /* every region is sealed when one must go */
}

static void mat_stats(void *st, struct frt_eviction_stats *o) {
    struct mat_ev *e = st;
    o->decisions = e->alg.evictions;
    o->predictions = e->alg.predictions;
    o->reinsertions = e->alg.reinsertions;
    o->threshold = e->alg.threshold;
    o->decision_ns_p50 = frt_percentile(&e->dec_ns, 0.5);
}

const struct frt_eviction_ops frt_eviction_mat = {
    .name = "mat",
    .needs = FRT_CAP_EVICTION,
    .init = mat_init,
    .free = mat_free,
    .get = mat_get,
    .refresh = mat_refresh,
    .inserted = mat_refresh,
    .added = mat_added,
    .removed = mat_removed,
    .victim = mat_victim,
    .stats = mat_stats,
};
