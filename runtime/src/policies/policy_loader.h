/* policy_loader.h: what the verified loader's files share (policy.c: loading, verifying and
 * mapping a bundle, the public accessors; policy_manifest.c: reading and checking its
 * manifest.json; policy_bind.c: binding the partition and readahead functions of its .so;
 * the eviction ones, MAT's, mat/mat_bind.c). Not public; the cache asks a policy through
 * policy_internal.h. */
#ifndef FLASHRT_POLICY_LOADER_H
#define FLASHRT_POLICY_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "flashrt.h"
#include "policies/policy_internal.h"

enum kind { K_SO, K_BUILTIN };

struct flashrt_policy {
    enum kind kind;
    char name[4200];
    void *dl;
    int memfd; /* the sealed copy of the verified .so that dl maps (-1: none) */
    unsigned listed; /* the capabilities the manifest lists */
    char cap_names[128];
    char sha256[65];
    uint64_t size_bytes;
    double (*admit_score)(const double *);
    void (*prefetch_range)(const double *, int32_t *, int32_t *);
    double (*when_score)(const double *);
    void (*prefetch_hint)(void); /* optional: flashml_policy_prefetch */
    int (*decide)(const double *, int32_t *, int32_t *); /* optional: flashml_policy_decide */
    /* optional: flashml_policy_decide_at, and the peak schedule it applies */
    int (*decide_at)(const double *, double, int32_t *, int32_t *);
    uint32_t peak_hours;
    double peak_bonus;
    double admit_threshold, when_threshold, target_wr, eviction_age;
    unsigned caps; /* FRT_CAP_*: what the policy was loaded for */
    struct frt_evict_fns evict;
    frt_partition_fn partition; /* capability "partition" */
    struct frt_readahead_fns readahead; /* capability "readahead" */
};

/* Upper bounds on a bundle's files (a manifest is a few KiB; a compiled policy.so a few MiB). */
#define MANIFEST_MAX (1u << 20)
#define SO_MAX (512ull << 20)

/* The capabilities' names, FRT_CAP_* bit k at index k (manifest.json `capabilities`). */
extern const char *const frt_policy_cap_names[5];

/* `name` inside the bundle directory dfd (shown as `path`): opened once, without following a
 * link and without blocking (a FIFO), and only a regular file of at most `max` bytes. */
int frt_bundle_open_member(int dfd, const char *path, const char *name, uint64_t max, uint64_t *size,
                           char *err, size_t errlen);
/* Exactly n bytes from the start of fd; refused when the file shrank or grew meanwhile. */
int frt_bundle_read_member(int fd, const char *path, unsigned char *buf, uint64_t n, char *err, size_t errlen);

/* The functions a .so with the eviction capability must export, NULL-terminated
 * (mat/mat_bind.c: MAT's knobs among them, mat_settings.h). */
extern const char *const frt_policy_eviction_functions[];

/* The functions of one capability of the mapped .so p->dl (shown as `so`), checked against
 * this runtime's contract for it and the manifest `mf`'s contract hash (policy_bind.c; the
 * eviction capability's, MAT's model and knobs, mat/mat_bind.c). */
int frt_policy_bind_eviction(flashrt_policy *p, const char *so, const char *mf,
                             const char *manifest_hash, char *err, size_t errlen);
int frt_policy_bind_partition(flashrt_policy *p, const char *so, const char *mf,
                              const char *manifest_hash, char *err, size_t errlen);
int frt_policy_bind_readahead(flashrt_policy *p, const char *so, const char *mf,
                              const char *manifest_hash, char *err, size_t errlen);

#endif
