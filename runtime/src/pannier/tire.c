/* tire.c: TIRE (tire.h), and the budget slot's policy "tire" over it (engine/policy_slots.h):
 * the engine's erasures are its evicted regions (a region is the erase unit), an admitted
 * miss is a read miss of a block with no earlier accesses counted (the engine keeps no
 * ghost), so past the ladder's first step TIRE refuses every miss. */
#include <math.h>
#include <stdlib.h>

#include "pannier/tire.h"
#include "util/internal.h"

int frt_tire_check(double epbpd, double slack, unsigned steps, double quantum_s, char *err, size_t errlen) {
    const char *why; /* the declared bounds (pannier_settings.h) */
    if ((why = frt_pn_lifespan_epbpd_problem(epbpd)))
        return frt_seterr(err, errlen, "lifespan target must be %s, got %g%s", why, epbpd,
                          epbpd > 0.0 ? "" : ": with no erasures allowed nothing could ever be cached");
    if ((why = frt_pn_tire_slack_problem(slack))) return frt_seterr(err, errlen, "TIRE slack K must be %s, got %g", why, slack);
    if ((why = frt_pn_tire_steps_problem(steps))) return frt_seterr(err, errlen, "TIRE steps must be %s, got %u", why, steps);
    if ((why = frt_pn_quantum_s_problem(quantum_s)))
        return frt_seterr(err, errlen, "TIRE quantum must be %s, got %g", why, quantum_s);
    return 0;
}

void frt_tire_init(struct frt_tire *g, int on, double epbpd, uint64_t erase_units, double slack, unsigned steps,
                   double quantum_s) {
    *g = (struct frt_tire){0};
    g->on = on;
    g->quantum_s = quantum_s;
    if (on) {
        g->quota = epbpd * (double)erase_units * quantum_s / 86400.0;
        g->slack = slack;
        g->steps = steps;
        g->credit = g->quota;
    }
}

void frt_tire_free(struct frt_tire *g) {
    free(g->series);
    g->series = NULL;
    g->n = g->cap = 0;
}

static int push(struct frt_tire *g, uint64_t used) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        struct frt_tire_quantum *s = realloc(g->series, cap * sizeof *s);
        if (!s) return -1;
        g->series = s;
        g->cap = cap;
    }
    g->series[g->n++] = (struct frt_tire_quantum){g->start_s, g->credit, used, g->blocked};
    return 0;
}

int frt_tire_tick(struct frt_tire *g, double now, uint64_t erasures) {
    if (!g->started) {
        g->started = 1;
        g->start_s = now;
        g->blocked = g->credit <= 0.0 && g->on;
        return 0;
    }
    if (now < g->start_s + g->quantum_s) return 0;
    double q = g->on ? g->quota : 0.0;
    uint64_t used = erasures - g->e0;
    int rc = push(g, used);
    g->credit += q - (double)used;
    double elapsed = floor((now - g->start_s) / g->quantum_s);
    uint64_t el = elapsed >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)elapsed;
    uint64_t idle = el ? el - 1 : 0;
    g->credit += q * (double)idle;
    g->start_s = g->start_s + elapsed * g->quantum_s;
    g->e0 = erasures;
    g->blocked = g->on && g->credit <= 0.0;
    return rc;
}

int frt_tire_finish(struct frt_tire *g, uint64_t erasures) {
    if (!g->started) return 0;
    uint64_t used = erasures - g->e0;
    int rc = push(g, used);
    g->credit += (g->on ? g->quota : 0.0) - (double)used;
    g->started = 0;
    return rc;
}

/* The quantum's allowance b = min(q, credit at its start): a credit below q scales the ladder
 * (b, K b] down to it (tire.rs). */
static double allowance(const struct frt_tire *g) { return g->on ? fmin(g->quota, g->credit) : 0.0; }

uint32_t frt_tire_level(const struct frt_tire *g, uint64_t erasures) {
    if (!g->on) return 0;
    if (g->blocked) return g->steps + 1;
    double b = allowance(g);
    double e = (double)(erasures - g->e0);
    if (e <= b) return 0;
    if (e > g->slack * b) return g->steps + 1;
    double width = (g->slack - 1.0) * b / (double)g->steps;
    double x = ceil((e - b) / width); /* Rust's `as u32` saturates (NaN -> 0) */
    uint32_t i = x != x || x < 0 ? 0 : x >= 4294967295.0 ? UINT32_MAX : (uint32_t)x;
    return i < 1 ? 1 : i > g->steps ? g->steps : i;
}

int frt_tire_admit(const struct frt_tire *g, enum frt_budget_kind kind, uint32_t count, uint64_t erasures) {
    if (!g->on) return 1;
    uint32_t l = frt_tire_level(g, erasures);
    if (l == 0) return 1;
    if (l > g->steps) return 0;
    return kind != FRT_BUDGET_CLIENT_WRITE && count + 1 >= l;
}

/* ---- the budget slot's policy ---- */

struct tire_budget {
    struct frt_tire g;
    uint64_t refused;
};

static int tire_init(void **st, const struct frt_budget_setup *s, char *err, size_t errlen) {
    const struct flashrt_config *c = s->cfg;
    if (frt_tire_check(c->lifespan_epbpd, c->tire_slack, c->tire_steps, c->tire_quantum_s, err, errlen) != 0) return -1;
    struct tire_budget *b = calloc(1, sizeof *b);
    if (!b) return frt_seterr(err, errlen, "out of memory");
    frt_tire_init(&b->g, 1, c->lifespan_epbpd, s->erase_units, c->tire_slack, c->tire_steps, c->tire_quantum_s);
    *st = b;
    return 0;
}

static void tire_free(void *st) {
    struct tire_budget *b = st;
    if (!b) return;
    frt_tire_free(&b->g);
    free(b);
}

static void tire_tick(void *st, double t, uint64_t erasures) {
    frt_tire_tick(&((struct tire_budget *)st)->g, t, erasures); /* out of memory: the series is short */
}

static int tire_admit(void *st, double t, uint64_t bytes, enum frt_budget_kind kind, uint32_t count, uint64_t erasures) {
    (void)t, (void)bytes;
    struct tire_budget *b = st;
    if (frt_tire_admit(&b->g, kind, count, erasures)) return 1;
    b->refused++;
    return 0;
}

static void tire_stats(void *st, struct frt_budget_stats *out) {
    const struct tire_budget *b = st;
    out->refused = b->refused;
    out->quota = b->g.quota;
    out->credit = b->g.credit;
    out->quanta = b->g.n;
    out->blocked = 0;
    for (size_t i = 0; i < b->g.n; i++) out->blocked += b->g.series[i].blocked != 0;
}

const struct frt_budget_ops frt_budget_tire = {
    .name = "tire",
    .init = tire_init,
    .free = tire_free,
    .tick = tire_tick,
    .admit = tire_admit,
    .stats = tire_stats,
};

/* flashrt_config_default's TIRE knobs (engine/policy_slots.h). */
void frt_tire_config_default(struct flashrt_config *c) {
    c->tire_slack = FRT_TIRE_SLACK;
    c->tire_steps = FRT_TIRE_STEPS;
    c->tire_quantum_s = FRT_TIRE_QUANTUM_S;
}
