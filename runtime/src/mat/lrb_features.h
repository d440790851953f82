/* lrb_features.h: LRB's 44 eviction features (the eviction contract,
 * flashml/features/eviction.toml), kept per object while requests stream, for MAT
 * (mat.c). The same definitions as sim/src/mat/lrb_features.rs (every convention is written in
 * the TOML); tests/runtime/test_runtime_mat.py compares this code's vectors with the simulator's.
 *
 * One definition: the layout (count, indices, 31 distances, 10 counters, the memory window)
 * comes from the generated flashml_policy.h and is checked below at compile time; the one
 * constant the header does not carry, the first counter's window, is FRT_EVICT_EDC_BASE_LOG2,
 * which tests/runtime/test_runtime_mat.py checks against eviction.toml. A policy .so is refused
 * unless its flashml_evict_contract_hash() is the header's (policy_bind.c). Not public. */
#ifndef FLASHRT_LRB_FEATURES_H
#define FLASHRT_LRB_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "flashml_policy.h"

/* log2 of the first EDC window, logical requests (eviction.toml `edc_base_log2`). */
#define FRT_EVICT_EDC_BASE_LOG2 10
#define FRT_EVICT_NF FLASHML_EVICT_NUM_FEATURES
#define FRT_EVICT_MAXD FLASHML_EVICT_MAX_PAST_DISTANCES
#define FRT_EVICT_NEDC FLASHML_EVICT_NUM_EDCS

/* The layout this code writes is the generated contract's. */
_Static_assert(FLASHML_EVICT_F_AGE == 0, "age first");
_Static_assert(FLASHML_EVICT_F_DELTA_1 == FLASHML_EVICT_F_AGE + 1, "delta_1 after age");
_Static_assert(FLASHML_EVICT_F_DELTA_31 == FLASHML_EVICT_F_DELTA_1 + FRT_EVICT_MAXD - 1, "31 distances");
_Static_assert(FLASHML_EVICT_F_SIZE == FLASHML_EVICT_F_DELTA_1 + FRT_EVICT_MAXD, "size after the distances");
_Static_assert(FLASHML_EVICT_F_N_WITHIN == FLASHML_EVICT_F_SIZE + 1, "n_within after size");
_Static_assert(FLASHML_EVICT_F_EDC_0 == FLASHML_EVICT_F_N_WITHIN + 1, "edc_0 after n_within");
_Static_assert(FLASHML_EVICT_F_EDC_9 == FLASHML_EVICT_F_EDC_0 + FRT_EVICT_NEDC - 1, "10 counters");
_Static_assert(FLASHML_EVICT_F_EDC_0 + FRT_EVICT_NEDC == FRT_EVICT_NF, "the counters last");
_Static_assert(FRT_EVICT_MAXD < 256, "the ring's indices are bytes");
_Static_assert((FLASHML_EVICT_CONTRACT_MEMORY_WINDOW >> FRT_EVICT_EDC_BASE_LOG2) >= 1,
               "the window holds the first counter's");

/* The history beyond the first access (LRB's MetaExtra): 208 bytes. */
struct frt_lrb_extra {
    uint32_t dist[FRT_EVICT_MAXD]; /* ring; dist[head] is the most recent distance */
    uint8_t len, head;
    double edc[FRT_EVICT_NEDC];    /* as of the last access, before decaying by the age */
};

struct frt_lrb_meta {
    uint64_t last; /* logical time of the last access; FRT_LRB_NEVER if none */
    uint64_t size; /* bytes, of the request that started the history */
    struct frt_lrb_extra *extra;
};

#define FRT_LRB_NEVER UINT64_MAX

struct frt_lrb {
    struct frt_lrb_meta *m;
    size_t n, cap;
    uint64_t window, max_decay;
};

/* An empty store; `window` in logical requests, 1024..2^32-1 (as the simulator's
 * check_memory_window). -1 with a message otherwise. */
int frt_lrb_init(struct frt_lrb *s, uint64_t window, char *err, size_t errlen);
/* Appends a never-seen object; its id is the previous count. -1 when out of memory. */
int frt_lrb_add(struct frt_lrb *s);
/* Records an access of object `id` (a request of `size` bytes) at logical time t, later than
 * every earlier one. -1 when out of memory. */
int frt_lrb_access(struct frt_lrb *s, uint32_t id, uint64_t t, uint64_t size);
/* The features of `id` (accessed before, at a time <= now) at logical time `now`. */
void frt_lrb_features(const struct frt_lrb *s, uint32_t id, uint64_t now, double out[FRT_EVICT_NF]);
void frt_lrb_free(struct frt_lrb *s);

/* Prefetches what frt_lrb_features(s, id, ...) reads (one load: the entry's history pointer). */
static inline void frt_lrb_prefetch(const struct frt_lrb *s, uint32_t id) {
    const struct frt_lrb_meta *m = &s->m[id];
    const char *x = (const char *)m->extra;
    if (!x) return;
    for (size_t i = 0; i < sizeof *m->extra; i += 64) __builtin_prefetch(x + i);
}

#endif
