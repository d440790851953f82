/* policy_slots.c: the built-in policies of each slot by name (engine/policy_slots.h). */
#include <string.h>

#include "engine/policy_slots.h"

/* A slot's table of policies: index = the public enum, entries may be NULL (no policy). */
struct table {
    const void *const *ops; /* each starts with `const char *name` */
    int n;
};

static const char *name_of(const void *ops) { return *(const char *const *)ops; }

static int from_name(struct table t, const char *name) {
    for (int i = 0; i < t.n; i++)
        if (t.ops[i] && !strcmp(name_of(t.ops[i]), name)) return i;
    return -1;
}

static const void *policy(struct table t, int which) { return which >= 0 && which < t.n ? t.ops[which] : NULL; }

#define TABLE(arr) ((struct table){(const void *const *)(arr), (int)(sizeof(arr) / sizeof(arr)[0])})

static const void *const EVICTION[] = {
    [FLASHRT_LRU] = &frt_eviction_lru,
    [FLASHRT_FIFO] = &frt_eviction_fifo,
    [FLASHRT_MAT] = &frt_eviction_mat,
    [FLASHRT_MRU] = &frt_eviction_mru,
};

static const void *const ADMISSION[] = {
    [FLASHRT_ADMIT_BUNDLE] = &frt_admission_bundle,
    [FLASHRT_ADMIT_ALL] = &frt_admission_admitall,
    [FLASHRT_ADMIT_REJECTX] = &frt_admission_rejectx,
    [FLASHRT_ADMIT_REJECTX_BLOCK] = &frt_admission_rejectx_block,
    [FLASHRT_ADMIT_COINFLIP] = &frt_admission_coinflip,
};

static const void *const PLACEMENT[] = {
    [FLASHRT_PLACE_SINGLE] = &frt_placement_single,
    [FLASHRT_PLACE_PACKING] = &frt_placement_packing,
};

/* shared has no policy (no partition); its name is still a name */
static const void *const PARTITION[] = {
    [FLASHRT_PART_EVEN] = &frt_partition_even,
    [FLASHRT_PART_STATIC] = &frt_partition_static,
    [FLASHRT_PART_BUNDLE] = &frt_partition_bundle,
};

/* none has no policy (no gate); its name is still a name */
static const void *const BUDGET[] = {
    [FLASHRT_BUDGET_BUCKET] = &frt_budget_bucket,
    [FLASHRT_BUDGET_TIRE] = &frt_budget_tire,
};

/* A slot's three accessors: its policy by enum, the enum by name, the name by enum. */
#define SLOT_NAMES(kind, TBL)                                                                              \
    const struct frt_##kind##_ops *frt_##kind##_policy(int which) { return policy(TABLE(TBL), which); } \
    int flashrt_##kind##_from_name(const char *name) { return from_name(TABLE(TBL), name); }           \
    const char *flashrt_##kind##_name(int which) {                                                      \
        const void *ops = policy(TABLE(TBL), which);                                                    \
        return ops ? name_of(ops) : NULL;                                                               \
    }

SLOT_NAMES(eviction, EVICTION)
SLOT_NAMES(admission, ADMISSION)
SLOT_NAMES(placement, PLACEMENT)

const char *frt_admission_unsupported(const char *name) {
    if (!strcmp(name, "opt")) return "it reads each access's admit flag from an episodes run (flashml sim run --arrays)";
    if (!strcmp(name, "threshold")) return "it reads each access's score from an arrays file (flashml sim run --arrays)";
    return NULL;
}

/* A slot whose index 0 is no policy (its name still a name): the accessors as SLOT_NAMES's. */
#define SLOT_NAMES_WITH_NONE(kind, TBL, NONE, none)                                                     \
    const struct frt_##kind##_ops *frt_##kind##_policy(int which) { return policy(TABLE(TBL), which); } \
    int flashrt_##kind##_from_name(const char *name) {                                                  \
        return !strcmp(name, none) ? NONE : from_name(TABLE(TBL), name);                                \
    }                                                                                                   \
    const char *flashrt_##kind##_name(int which) {                                                      \
        if (which == NONE) return none;                                                                 \
        const void *ops = policy(TABLE(TBL), which);                                                    \
        return ops ? name_of(ops) : NULL;                                                               \
    }

SLOT_NAMES_WITH_NONE(budget, BUDGET, FLASHRT_BUDGET_NONE, "none")
SLOT_NAMES_WITH_NONE(partition, PARTITION, FLASHRT_PART_SHARED, "shared")

void frt_partition_holds(uint64_t *quota, unsigned k) {
    for (unsigned i = 0; i < k; i++) quota[i] = quota[i] ? quota[i] - 1 : 0;
}

const char *frt_partition_unsupported(const char *name) {
    static const char *const SIM[] = {"static_optimal", "discrete_optimal", "previous_optimal"};
    if (!strcmp(name, "mlcache")) return "the engine's name for MLCache's network each interval is bundle";
    for (size_t i = 0; i < sizeof SIM / sizeof SIM[0]; i++)
        if (!strcmp(name, SIM[i]))
            return "its shares come from the monitor's hit curves in hindsight (flashml.systems.mlcache.flash_partition); a bundle "
                   "compiled with that rule is --partition bundle";
    return NULL;
}
