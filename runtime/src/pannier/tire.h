/* tire.h: TIRE (Throttle Insertions and Reinsertions for Erasures, Pannier §3.1; the
 * simulator's sim/src/pannier/tire.rs Gate, every rule and rounding as there): a multi-step bang-bang
 * controller keeping flash erasures within a quota per quantum of trace time. The credit
 * carries unused quota over (credit += q - erasures of the quantum, starting at q); within a
 * quantum with e erasures so far and allowance b = min(q, credit at its start): e <= b admits
 * everything; (b, K b] in `steps` equal intervals admits, in the i-th, read misses, overwrites
 * and reinsertions with an access count >= i - 1 (no new client writes); beyond K b, or a
 * quantum that starts with credit <= 0, admits nothing.
 *
 * One implementation, two users: the budget slot's policy "tire" (tire.c, the engine's
 * erasures = evicted regions) and Pannier's container cache (pannier.c, whose
 * erasures are its containers' erase blocks). Not public. */
#ifndef FLASHRT_TIRE_H
#define FLASHRT_TIRE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/policy_slots.h"
#include "pannier/pannier_settings.h"

/* TIRE's knobs by default (flashml/systems/pannier/settings.toml): slack K, steps, quantum of
 * trace time. */
#define FRT_TIRE_SLACK FRT_PN_TIRE_SLACK_DEFAULT
#define FRT_TIRE_STEPS ((unsigned)FRT_PN_TIRE_STEPS_DEFAULT)
#define FRT_TIRE_QUANTUM_S FRT_PN_QUANTUM_S_DEFAULT

/* One quantum (tire.rs Quantum): its start, the credit at its end, its erasures, and whether it
 * started blocked. */
struct frt_tire_quantum {
    double start_s, credit;
    uint64_t erasures;
    int blocked;
};

struct frt_tire {
    int on; /* off: every write passes, the quanta are still recorded */
    double quota, slack, quantum_s;
    uint32_t steps;
    int started, blocked;
    double start_s, credit;
    uint64_t e0; /* erasures when the quantum started */
    struct frt_tire_quantum *series;
    size_t n, cap;
};

/* 0, or -1 naming the knob: epbpd finite and > 0, slack >= 1, steps in 1..16, quantum > 0. */
int frt_tire_check(double epbpd, double slack, unsigned steps, double quantum_s, char *err, size_t errlen);
/* A gate over `erase_units` erase units allowed `epbpd` erasures each per day (quota =
 * epbpd x units x quantum / 86400 per quantum); `on` 0: the quanta only. */
void frt_tire_init(struct frt_tire *g, int on, double epbpd, uint64_t erase_units, double slack, unsigned steps,
                   double quantum_s);
void frt_tire_free(struct frt_tire *g);
/* The clock: a request at trace time `now` with `erasures` so far (closes elapsed quanta);
 * -1 on out of memory. */
int frt_tire_tick(struct frt_tire *g, double now, uint64_t erasures);
/* Closes the last quantum (the end of the trace); -1 on out of memory. */
int frt_tire_finish(struct frt_tire *g, uint64_t erasures);
/* The level with `erasures` so far: 0 admits all, 1..steps the ladder, steps + 1 nothing. */
uint32_t frt_tire_level(const struct frt_tire *g, uint64_t erasures);
/* 1 if a write of this kind, of a block with `count` earlier accesses, may go to flash now. */
int frt_tire_admit(const struct frt_tire *g, enum frt_budget_kind kind, uint32_t count, uint64_t erasures);

#endif
