/* mat_alg.c: MAT's Algorithm 1 and its knobs (mat_alg.h). Every comparison is the
 * simulator's (sim/src/mat.rs Mat::evict, MatParams::validate). */
#include <math.h>

#include "policies/eviction/mat_alg.h"

int frt_mat_params_resolve(struct frt_mat_params *o, double k, double delta, double t0, uint32_t L,
                           int controller, int reuse, uint64_t window, const struct frt_evict_fns *ev,
                           char *err, size_t errlen) {
    o->k = !isnan(k) ? k : ev ? ev->k : 2.0;
    o->delta = !isnan(delta) ? delta : ev ? ev->delta : 1e-4;
    o->L = L ? L : ev ? (uint32_t)ev->max_candidates : 10u;
    o->controller = controller != -1 ? controller : ev ? ev->controller : 0;
    o->reuse = reuse != -1 ? reuse : ev ? ev->reuse_predictions : 0;
    o->t0 = !isnan(t0) ? t0 : ev ? ev->initial_threshold : 0.0;
    o->window = window ? window : ev ? (uint64_t)ev->memory_window : FLASHML_EVICT_CONTRACT_MEMORY_WINDOW;
    if (!(isfinite(o->k) && o->k > 0.0)) return frt_seterr(err, errlen, "k must be a finite number > 0, got %g", o->k);
    if (!(o->delta >= 0.0 && o->delta < 1.0)) return frt_seterr(err, errlen, "delta must be in [0, 1), got %g", o->delta);
    if (o->controller != 0 && o->controller != 1) return frt_seterr(err, errlen, "controller must be 0 (sign) or 1 (mean), got %d", o->controller);
    if (o->reuse != 0 && o->reuse != 1) return frt_seterr(err, errlen, "reuse_predictions must be 0 (off) or 1 (on) (-1: the policy's), got %d", o->reuse);
    const double worst = (double)o->L - o->k; /* the largest step down */
    if (o->controller == 1 && o->delta * worst >= 1.0)
        return frt_seterr(err, errlen, "the mean controller needs delta * (max_candidates - k) < 1 (T stays > 0), got %g * %g", o->delta, worst);
    if (!(isfinite(o->t0) && o->t0 >= 0.0))
        return frt_seterr(err, errlen, "initial_threshold must be a finite number > 0 (0: the cached objects at the first eviction), got %g", o->t0);
    return 0;
}

void frt_mat_alg_init(struct frt_mat_alg *a, const struct frt_mat_params *p, double (*predict)(const double *)) {
    a->p = *p;
    a->predict = predict;
    a->threshold = NAN;
    a->evictions = a->predictions = a->reused = a->reinsertions = 0;
}

uint32_t frt_mat_choose(struct frt_mat_alg *a, struct frt_dlist *l, const struct frt_mat_view *v, uint64_t now,
                        uint32_t *tries) {
    a->evictions++;
    if (!a->predict) {
        *tries = 1;
        return frt_dlist_pop_tail(l);
    }
    if (isnan(a->threshold)) a->threshold = a->p.t0 > 0.0 ? a->p.t0 : (double)l->len;
    const uint32_t L = a->p.L;
    uint32_t best = FRT_MAT_NIL, found = FRT_MAT_NIL, r;
    double best_tta = -INFINITY;
    for (r = 1; r <= L; r++) {
        uint32_t c = frt_dlist_pop_tail(l);
        uint64_t last = v->last[c];
        /* a prediction kept for this object at this access (sim: Mat::kept, Mat::examine): no
         * model call, and no features unless the candidates are traced */
        const int kept = a->p.reuse && v->kobj[c] == v->obj[c] && v->klast[c] == last;
        double pred;
        if (kept) {
            a->reused++;
            pred = v->kpred[c];
            if (v->on_candidate) frt_lrb_features(v->meta, v->obj[c], now, a->feat);
        } else {
            frt_lrb_features(v->meta, v->obj[c], now, a->feat);
            a->predictions++;
            pred = a->predict(a->feat);
            if (a->p.reuse) {
                v->kobj[c] = v->obj[c];
                v->klast[c] = last;
                v->kpred[c] = pred;
            }
        }
        double tta = fabs(expm1(pred) - (double)(now - last));
        if (v->on_candidate) v->on_candidate(v->ctx, c, now, last, a->feat, pred, tta, a->threshold);
        if (tta >= a->threshold) {
            found = c;
            break;
        }
        if (best == FRT_MAT_NIL || tta > best_tta) {
            best = c;
            best_tta = tta;
        }
        frt_dlist_push_front(l, c);
        a->reinsertions++;
    }
    if (found == FRT_MAT_NIL) {
        frt_dlist_unlink(l, best);
        a->reinsertions--;
        found = best;
        r = L + 1;
    }
    if (a->p.controller == 1) { /* mean (sim: Controller::Mean) */
        const double p = (double)(r < L ? r : L); /* the candidates taken */
        a->threshold *= 1.0 + a->p.delta * (a->p.k - p);
    } else if ((double)r < a->p.k) a->threshold *= 1.0 + a->p.delta;
    else if ((double)r > a->p.k) a->threshold *= 1.0 - a->p.delta;
    *tries = r;
    return found;
}
