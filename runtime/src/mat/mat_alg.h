/* mat_alg.h: MAT's Algorithm 1 (sim/src/mat/chooser.rs Mat::evict, params.rs MatParams::step) and its threshold controller, over
 * an LRU list of handles the caller numbers: shared by the MAT object cache (mat.c, handles
 * = its slots) and the flash cache's MAT eviction policy (mat_tail.c, handles =
 * the region store's block entries). Also the list itself and MAT's knobs (the caller's,
 * else the bundle's, else the simulator's defaults; MatParams::validate). Not public. */
#ifndef FLASHRT_MAT_ALG_H
#define FLASHRT_MAT_ALG_H

#include <stddef.h>
#include <stdint.h>

#include "mat/lrb_features.h"
#include "policies/policy_internal.h"

#define FRT_MAT_NIL UINT32_MAX

/* A doubly linked list over handles (sim: eviction::Lru over list::DList): head = most
 * recently used. prev/next are the caller's arrays (grown by it), indexed by handle. */
struct frt_dlist {
    uint32_t *prev, *next;
    uint32_t head, tail;
    size_t len;
};

static inline void frt_dlist_init(struct frt_dlist *l) {
    l->head = l->tail = FRT_MAT_NIL;
    l->len = 0;
}

static inline void frt_dlist_push_front(struct frt_dlist *l, uint32_t s) {
    l->prev[s] = FRT_MAT_NIL;
    l->next[s] = l->head;
    if (l->head != FRT_MAT_NIL) l->prev[l->head] = s;
    else l->tail = s;
    l->head = s;
    l->len++;
}

static inline void frt_dlist_unlink(struct frt_dlist *l, uint32_t s) {
    uint32_t p = l->prev[s], n = l->next[s];
    if (p != FRT_MAT_NIL) l->next[p] = n;
    else l->head = n;
    if (n != FRT_MAT_NIL) l->prev[n] = p;
    else l->tail = p;
    l->len--;
}

static inline uint32_t frt_dlist_pop_tail(struct frt_dlist *l) {
    uint32_t s = l->tail;
    frt_dlist_unlink(l, s);
    return s;
}

/* MAT's knobs (sim: MatParams). */
struct frt_mat_params {
    double k, delta, t0; /* t0 0: the number of handles listed at the first predicted eviction */
    uint32_t L;          /* candidates per decision at most */
    int controller;      /* 0 sign, 1 mean (sim: Controller) */
    int reuse;           /* reuse predictions (sim: MatParams::reuse_predictions) */
    uint64_t window;     /* the feature history's memory window, logical requests */
};

/* Each knob: the given one (NaN, 0 or -1: unset), else the bundle's (ev, may be NULL), else
 * the simulator's default; then checked as MatParams::validate (-1 with a message). */
int frt_mat_params_resolve(struct frt_mat_params *out, double k, double delta, double t0, uint32_t L,
                           int controller, int reuse, uint64_t window, const struct frt_evict_fns *ev,
                           char *err, size_t errlen);

/* Algorithm 1's state and counters. */
struct frt_mat_alg {
    struct frt_mat_params p;
    double (*predict)(const double *features); /* NULL: no model, the tail goes (LRU) */
    void (*hint)(void); /* the model's prefetch hint (flashml_evict_prefetch), NULL: none */
    double threshold;                          /* T; NaN until the first predicted eviction */
    uint64_t evictions, predictions, reused, reinsertions;
    double feat[FRT_EVICT_NF];
};

/* A candidate examined (tests and tracing): handle, its last access, features, the model's
 * output, TTA and T at that moment. */
typedef void (*frt_mat_candidate_fn)(void *ctx, uint32_t handle, uint64_t now, uint64_t last,
                                     const double *features, double pred, double tta, double threshold);

/* The caller's per-handle state, read (and the kept predictions written) by a decision. */
struct frt_mat_view {
    const uint32_t *obj;  /* the object in the handle: its id in `meta` */
    const uint64_t *last; /* logical time of the handle's last access */
    /* with reuse: the prediction kept for a handle (sim: Mat::kept), valid while the handle
     * holds the same object at the same access; the caller sets kobj[h] = FRT_MAT_NIL when h
     * takes a new object */
    uint32_t *kobj;
    uint64_t *klast;
    double *kpred;
    const struct frt_lrb *meta;
    frt_mat_candidate_fn on_candidate; /* NULL: none; else features even for kept candidates */
    void *ctx;
};

/* `hint` (may be NULL) is called when a decision that asks the model starts, beside
 * prefetches of the tail candidate's state, so that their misses overlap. */
void frt_mat_alg_init(struct frt_mat_alg *a, const struct frt_mat_params *p,
                      double (*predict)(const double *), void (*hint)(void));
/* 1 when |expm1(pred) - age| >= threshold (the TTA test, with libm's expm1 and IEEE double
 * arithmetic) holds for certain, found without libm: expm1 bracketed to about 1e-11
 * relative by a polynomial, and the subtraction's rounding being monotone; 0 when not
 * certain (then the caller computes the TTA). libm's code is cold when an eviction decision
 * starts; most decisions take their first candidate, whose TTA is then not needed. */
int frt_mat_surely_far(double pred, double age, double threshold);
/* Chooses and unlinks the victim among the list's handles at logical time `now` (Algorithm
 * 1: tail candidates popped one at a time, kept by re-insertion at the head while TTA < T, at
 * most L, then the largest TTA; T moved by the controller); its try in *tries (L + 1 on
 * exhaustion). The list must not be empty. */
uint32_t frt_mat_choose(struct frt_mat_alg *a, struct frt_dlist *l, const struct frt_mat_view *v,
                        uint64_t now, uint32_t *tries);

#endif
