/* policy_internal.h: how the cache asks a policy (not public). */
#ifndef FLASHRT_POLICY_INTERNAL_H
#define FLASHRT_POLICY_INTERNAL_H

#include <stdint.h>

#include "flashrt.h"
#include "util/internal.h"

/* Capabilities of a policy bundle (flashml_policy.h, manifest.json `capabilities`). */
enum { FRT_CAP_ADMISSION = 1u, FRT_CAP_PREFETCH = 2u, FRT_CAP_EVICTION = 4u, FRT_CAP_PARTITION = 8u,
       FRT_CAP_READAHEAD = 16u /* kml/readahead.h: frt_readahead_load; frt_policy_readahead */,
       /* frt_policy_load_for: the capabilities the manifest lists (flashrt verify) */
       FRT_CAP_AS_LISTED = 256u };

/* The compiled bundle's manifest format (flashml/compiler/build.py MANIFEST_FORMAT). */
#define FRT_BUNDLE_FORMAT "flashml-policy-bundle/1"

/* A bundle's manifest.json, checked against the schema's rules for the fields this runtime
 * reads (flashml/compiler/manifest.schema.json): `format` is FRT_BUNDLE_FORMAT; `system`, when
 * present, one of baleen/mat/pannier/mlcache/kml and the one the command serves; the
 * capabilities known and listed once; a bundle with a .so (any capability, or no
 * `capabilities` field) has an integer `abi_version`, `sha256` of 64 lowercase hex digits, a
 * positive integer `size_bytes` and an optional plain file name `policy_so`; the contract
 * hashes 64 hex digits; eviction_age_s and target_write_rate_mbps finite and > 0, the
 * thresholds finite numbers, peak_bonus in [0, 1]. A knobs-only bundle (capabilities [],
 * Pannier's) has no .so. Every refusal names the manifest and the field. */
struct frt_manifest {
    struct frt_json_object obj;
    unsigned caps; /* FRT_CAP_* listed (admission and prefetch without the field) */
    int listed; /* the manifest has `capabilities` */
    char cap_names[128];
    char system[16]; /* "" without the field */
    int has_so;
    char so_name[256]; /* policy_so, default policy.so */
    char sha256[65];
    uint64_t size_bytes;
};
/* `system` NULL: any. The text need not be NUL-terminated. */
int frt_manifest_parse(const char *text, size_t n, const char *mf, const char *system,
                       struct frt_manifest *out, char *err, size_t errlen);
/* DIR/manifest.json read once through the open directory dfd (no link followed, a FIFO or
 * device refused without blocking, at most 1 MiB), then frt_manifest_parse; text_out (may be
 * NULL): its text (NUL-terminated, the caller frees it) and length. */
int frt_manifest_read(int dfd, const char *dir, const char *system, struct frt_manifest *out,
                      char **text_out, size_t *n_out, char *err, size_t errlen);
/* "a FIFO", "a symbolic link", ... for a message (st_mode). */
const char *frt_file_kind(unsigned mode);

/* Loads a policy bundle for the capabilities in `need` (FRT_CAP_* bits, or FRT_CAP_AS_LISTED:
 * the manifest's), verified (runtime/README.md, "Verified loading"): the directory opened
 * once; manifest.json and the .so it names opened through it (no link followed, FIFOs and
 * devices refused without blocking), the manifest checked by frt_manifest_parse (its `system`
 * must be the one of `need`: mat, mlcache, kml, else baleen); refused, with a message naming
 * the bundle and the capability, when its manifest lacks one; the ABI version and contract
 * hashes; then the .so's bytes read once from its descriptor, their size, sha256 and ELF
 * headers checked in memory, and exactly those bytes mapped from a sealed memfd. Nothing is
 * mapped before that. After mapping, the .so's functions for `need` and the values it reports
 * (finite, in range). flashrt_policy_load(dir, ...) asks for
 * FRT_CAP_ADMISSION | FRT_CAP_PREFETCH. */
flashrt_policy *frt_policy_load_for(const char *dir, unsigned need, char *err, size_t errlen);
/* The capabilities a policy was loaded for (0 for a built-in one). One loaded without
 * FRT_CAP_ADMISSION admits every miss (frt_policy_decide) and reads no features. */
unsigned frt_policy_caps(const flashrt_policy *p);
/* A loaded bundle's manifest: its capability names ("admission, prefetch"), the verified
 * .so's sha256 and size ("" and 0 for a built-in policy). */
const char *frt_policy_listed(const flashrt_policy *p);
const char *frt_policy_sha256(const flashrt_policy *p);
uint64_t frt_policy_size_bytes(const flashrt_policy *p);

/* MAT's eviction functions and parameters of a policy loaded for FRT_CAP_EVICTION (NULL
 * otherwise); flashml_policy.h documents each. */
struct frt_evict_fns {
    double (*predict)(const double *features);
    void (*predict_batch)(const double *features, int n, double *out);
    void (*prefetch)(void); /* flashml_evict_prefetch (optional, absent: NULL): the model's hint */
    double k, delta, initial_threshold;
    int max_candidates;
    int64_t memory_window;
    int controller; /* flashml_evict_controller (optional, absent: FRT_MAT_CONTROLLER_LEGACY): 0 sign, 1 mean */
    int reuse_predictions; /* flashml_evict_reuse_predictions (optional, absent: FRT_MAT_REUSE_PREDICTIONS_LEGACY): 0 or 1 */
};
const struct frt_evict_fns *frt_policy_evict(const flashrt_policy *p);

/* MLCache's partition function of a policy loaded for FRT_CAP_PARTITION (NULL otherwise):
 * flashml_partition (flashml_policy.h). */
typedef int (*frt_partition_fn)(const double *features, int streams, double *shares);
frt_partition_fn frt_policy_partition(const flashrt_policy *p);

/* KML's readahead functions of a policy loaded for FRT_CAP_READAHEAD (NULL otherwise;
 * kml/readahead.h: frt_readahead_load). */
struct frt_readahead_fns {
    int (*kib)(const double *features); /* flashml_readahead_kib */
    int window_ms;                      /* flashml_readahead_window_ms() */
};
const struct frt_readahead_fns *frt_policy_readahead(const flashrt_policy *p);

/* The name of a built-in admission policy (flashrt_policy_builtin, the RejectX fallback),
 * NULL for a bundle: the engine fills the admission slot with that policy. */
const char *frt_policy_builtin_name(const flashrt_policy *p);
/* 1 if the policy reads the feature vector (a policy .so). */
int frt_policy_wants_features(const flashrt_policy *p);
/* Calls the policy's prefetch hint (flashml_policy_prefetch); 0 if it has none. */
int frt_policy_warm(const flashrt_policy *p);
/* The decision on a miss at trace time t, as flashml_policy_decide_at (one call when the .so
 * has it, else its separate calls with the threshold of t's hour; a built-in policy only
 * admits): FLASHML_DECIDE_ADMIT, and with FLASHML_DECIDE_PREFETCH the inclusive segment range
 * *lo..*hi to fetch. */
int frt_policy_decide(flashrt_policy *p, double t, const double *features, int32_t *lo, int32_t *hi);

#endif
