/* mat_alg.c: MAT's Algorithm 1 and its knobs (mat_alg.h). Every comparison is the
 * simulator's (sim/src/mat/chooser.rs Mat::evict, params.rs MatParams::validate). */
#include <math.h>
#include <string.h>

#include "mat/mat_alg.h"
#include "mat/mat_settings.h"

/* "<name> must be <why>, got <v>" when the declared bounds (mat_settings.h) refuse v. */
static int out_of_range(const char *name, const char *why, double v, char *err, size_t errlen) {
    return frt_seterr(err, errlen, "%s must be %s, got %.17g", name, why, v);
}

int frt_mat_params_resolve(struct frt_mat_params *o, double k, double delta, double t0, uint32_t L,
                           int controller, int reuse, uint64_t window, const struct frt_evict_fns *ev,
                           char *err, size_t errlen) {
    o->k = !isnan(k) ? k : ev ? ev->k : FRT_MAT_K_DEFAULT;
    o->delta = !isnan(delta) ? delta : ev ? ev->delta : FRT_MAT_DELTA_DEFAULT;
    o->L = L ? L : ev ? (uint32_t)ev->max_candidates : (uint32_t)FRT_MAT_MAX_CANDIDATES_DEFAULT;
    o->controller = controller != -1 ? controller : ev ? ev->controller : FRT_MAT_CONTROLLER_DEFAULT;
    o->reuse = reuse != -1 ? reuse : ev ? ev->reuse_predictions : FRT_MAT_REUSE_PREDICTIONS_DEFAULT;
    o->t0 = !isnan(t0) ? t0 : ev ? ev->initial_threshold : FRT_MAT_INITIAL_THRESHOLD_DEFAULT;
    o->window = window ? window : ev ? (uint64_t)ev->memory_window : FRT_MAT_MEMORY_WINDOW_DEFAULT;
    const char *why;
    if ((why = frt_mat_k_problem(o->k))) return out_of_range("k", why, o->k, err, errlen);
    if ((why = frt_mat_max_candidates_problem(o->L))) return out_of_range("max_candidates", why, o->L, err, errlen);
    if ((why = frt_mat_delta_problem(o->delta))) return out_of_range("delta", why, o->delta, err, errlen);
    if ((why = frt_mat_initial_threshold_problem(o->t0)))
        return out_of_range("initial_threshold", why, o->t0, err, errlen);
    if ((why = frt_mat_memory_window_problem(o->window > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)o->window)))
        return out_of_range("memory_window", why, (double)o->window, err, errlen);
    if (o->controller != FRT_MAT_CONTROLLER_SIGN && o->controller != FRT_MAT_CONTROLLER_MEAN)
        return frt_seterr(err, errlen, "controller must be 0 (sign) or 1 (mean), got %d", o->controller);
    if (o->reuse != 0 && o->reuse != 1)
        return frt_seterr(err, errlen, "reuse_predictions must be 0 (off) or 1 (on) (-1: the policy's), got %d", o->reuse);
    /* the rules between knobs (settings.toml [rules]) */
    if (o->k > (double)o->L)
        return frt_seterr(err, errlen, "k must be at most max_candidates, got k %g and max_candidates %u", o->k, o->L);
    const double worst = (double)o->L - o->k; /* the largest step down */
    if (o->controller == FRT_MAT_CONTROLLER_MEAN && o->delta * worst >= 1.0)
        return frt_seterr(err, errlen, "the mean controller needs delta * (max_candidates - k) < 1 (T stays > 0), got delta %g and max_candidates - k %g", o->delta, worst);
    return 0;
}

/* lo <= expm1(x) <= hi for libm's expm1 (within 1 ulp of the exact value) when |x| <= 700:
 * e^x = 2^k e^r, |r| <= ln2 / 2, by Taylor to degree 13 (remainder < 1e-17 relative; r's
 * error from k ln2 < 1e-13), the bracket 1e-11 (e^x + 1) wide each side. 0 outside. */
static int expm1_bracket(double x, double *lo, double *hi) {
    if (!(x >= -700.0 && x <= 700.0)) return 0; /* NaN too */
    const double kd = (double)(int64_t)(x * 1.4426950408889634 + (x >= 0.0 ? 0.5 : -0.5));
    const double r = x - kd * 0.6931471805599453;
    double p = 1.0 / 6227020800.0; /* 1/13! */
    static const double INV_FACT[13] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040,
                                        1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600};
    for (int i = 12; i >= 0; i--) p = p * r + INV_FACT[i];
    const uint64_t bits = (uint64_t)((int64_t)kd + 1023) << 52; /* 2^k, k in -1010..1010 */
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    const double ex = p * scale;
    const double w = 1e-11 * (ex + 1.0);
    *lo = (ex - 1.0) - w;
    *hi = (ex - 1.0) + w;
    return 1;
}

int frt_mat_surely_far(double pred, double age, double threshold) {
    double lo, hi;
    if (!expm1_bracket(pred, &lo, &hi)) return 0;
    /* lo <= e <= hi gives fl(lo - age) <= fl(e - age) <= fl(hi - age) */
    return lo - age >= threshold || hi - age <= -threshold;
}

void frt_mat_alg_init(struct frt_mat_alg *a, const struct frt_mat_params *p, double (*predict)(const double *),
                      void (*hint)(void)) {
    a->p = *p;
    a->predict = predict;
    a->hint = hint;
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
    {   /* the first candidate's state and the model's tables at once (prefetches: no effect on
         * the decision) */
        const uint32_t c = l->tail;
        __builtin_prefetch(&v->last[c]);
        __builtin_prefetch(&l->prev[c]);
        frt_lrb_prefetch(v->meta, v->obj[c]);
        for (size_t i = 0; i < FRT_EVICT_NF; i += 8) __builtin_prefetch(&a->feat[i], 1);
        if (a->hint) a->hint();
    }
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
        if (!v->on_candidate && frt_mat_surely_far(pred, (double)(now - last), a->threshold)) {
            found = c; /* its TTA reaches T: no need of its value */
            break;
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
