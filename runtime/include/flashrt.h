/*
 * flashrt.h: the public API of libflashrt, flashml's reference flash-cache runtime.
 *
 * A cache (`flashrt`) serves GETs of byte ranges of 8 MiB blocks from a flash device (a file
 * or a block device) in front of a backing device, with admission and prefetch decided by a
 * policy shared object (compiler/flashml_policy.h) or a built-in baseline. Modelled on
 * CacheLib's Navy block cache: the flash is cut into regions written sequentially, eviction
 * frees a whole region (the one the eviction policy names: LRU or FIFO over regions, or MAT's
 * choice of a block), and an in-memory index maps
 * (block, segment) to a flash location. The index lives in memory; each region's header on
 * the flash (and a journal of segments dropped after read errors) lets a cache opened with
 * `recover` rebuild it after a crash, never serving a stale byte.
 *
 * Every object is a context passed explicitly; the library keeps no global mutable state.
 * Functions that can fail take `char *err, size_t errlen` (or keep the message in the
 * context, see flashrt_error) and return NULL or -1.
 */
#ifndef FLASHRT_H
#define FLASHRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHRT_ERR_LEN 512
#define FLASHRT_NUM_FEATURES 18

/* ---- trace (Tectonic text) ------------------------------------------------------------ */

struct flashrt_access {
    uint64_t key;    /* cache key: the block id */
    uint64_t offset; /* byte offset in the block */
    uint64_t size;   /* bytes, > 0 */
    double time;     /* trace seconds */
    int op;          /* Tectonic op code: GET 1, 2, 5; PUT 3, 4, 6 */
    int32_t ns;      /* user_namespace */
    int32_t user;    /* user_name */
    uint64_t line;   /* line number in the trace file (1-based) */
};

typedef struct flashrt_trace flashrt_trace;

/* Opens a Tectonic text trace (schemas 201910, 202110, 2023, told apart by the header line;
 * 201910 is assumed when there is none). A `# flashml: ... sample_ratio=X` comment sets the
 * sample ratio. */
flashrt_trace *flashrt_trace_open(const char *path, char *err, size_t errlen);
/* 1: an access was read; 0: end of file; -1: malformed input (message names file:line and
 * the field). Zero-size IOs are skipped, as the artifact and `flashml trace ingest` do. */
int flashrt_trace_next(flashrt_trace *t, struct flashrt_access *a, char *err, size_t errlen);
/* The sample ratio in percent from the trace's flashml comment, or 0 if it has none. */
double flashrt_trace_sample_ratio(const flashrt_trace *t);
void flashrt_trace_close(flashrt_trace *t);
int flashrt_is_put(int op);
int flashrt_is_get(int op); /* FLASHML_POLICY_GET_OPS of flashml_policy.h (1, 2, 5) */

/* ---- feature tracker -------------------------------------------------------------------- */

typedef struct flashrt_tracker flashrt_tracker;

/* Count-min sketches (depth rows of 2^width_log2 cells, conservative update) for the per-block
 * GET counts and segment counts of the last 6 fixed hour buckets. */
flashrt_tracker *flashrt_tracker_new(unsigned width_log2, unsigned depth, char *err,
                                     size_t errlen);
/* The 18 contract features of access `a` (counts of strictly earlier GETs). */
void flashrt_tracker_features(flashrt_tracker *tr, const struct flashrt_access *a,
                              double features[FLASHRT_NUM_FEATURES]);
/* Counts a GET access (call after flashrt_tracker_features). */
void flashrt_tracker_add(flashrt_tracker *tr, const struct flashrt_access *a);
size_t flashrt_tracker_bytes(const flashrt_tracker *tr);
void flashrt_tracker_free(flashrt_tracker *tr);

/* ---- policy ----------------------------------------------------------------------------- */

typedef struct flashrt_policy flashrt_policy;

enum flashrt_fallback { FLASHRT_FALLBACK_NONE = 0, FLASHRT_FALLBACK_REJECTX = 1 };

/* Loads DIR/policy.so after checking it against DIR/manifest.json: sha256 of the file, ABI
 * version, feature count and contract hash must all match this runtime. On a mismatch it
 * returns NULL with the reason in `err`, or with FLASHRT_FALLBACK_REJECTX it returns the
 * built-in RejectX policy and leaves the reason in `err` as a warning. */
flashrt_policy *flashrt_policy_load(const char *dir, enum flashrt_fallback fallback, char *err,
                                    size_t errlen);
/* A built-in admission policy by name (enum flashrt_admission's names but "bundle":
 * "admitall", "rejectx", "rejectx_block", "coinflip"), with flashrt_config's knobs: given to
 * flashrt_open it fills the admission slot as FLASHRT_ADMIT_BUNDLE. */
flashrt_policy *flashrt_policy_builtin(const char *name, char *err, size_t errlen);
const char *flashrt_policy_name(const flashrt_policy *p);
/* What the manifest says (NaN when absent or for built-ins). */
double flashrt_policy_target_write_rate_mbps(const flashrt_policy *p);
void flashrt_policy_free(flashrt_policy *p);

/* ---- backing store ---------------------------------------------------------------------- */

typedef struct flashrt_backing flashrt_backing;

/* The deterministic content of block `key` at byte position `pos` (any alignment). */
void flashrt_content(uint64_t key, uint64_t pos, uint8_t *out, size_t n);
/* Index of the first byte of `data` that differs from flashrt_content, or -1 if all match. */
int64_t flashrt_verify(uint64_t key, uint64_t pos, const uint8_t *data, size_t n);

struct flashrt_prepare_stats {
    uint64_t blocks, segments, bytes_written;
    double seconds;
};

/* Writes the content of every segment the trace touches to PATH (a sparse file, or a block
 * device), block i of the sorted distinct keys at byte i x 8 MiB, and the key list to
 * MAP_PATH (NULL: PATH.map). A regular file is written under a temporary name and renamed. */
int flashrt_prepare_backing(const char *path, const char *map_path, const char *trace_path,
                            struct flashrt_prepare_stats *st, char *err, size_t errlen);
/* `direct`: an enum flashrt_direct (O_DIRECT on the backing device). */
flashrt_backing *flashrt_backing_open(const char *path, const char *map_path, int direct,
                                      char *err, size_t errlen);
/* A backing whose reads are the caller's (`flashrt mount`: the blocks of a directory's files):
 * read(ctx, key, pos, buf, n) fills buf with n bytes of block `key` from byte `pos` (bytes past
 * the end of what backs the block read as zeros) and returns 0, or -1 with errno set. `name`
 * names it in messages. */
typedef int (*flashrt_backing_read_fn)(void *ctx, uint64_t key, uint64_t pos, uint8_t *buf, size_t n);
flashrt_backing *flashrt_backing_open_fn(flashrt_backing_read_fn read, void *ctx, const char *name, char *err,
                                         size_t errlen);
uint64_t flashrt_backing_blocks(const flashrt_backing *b);
/* Where block `key` lives on a prepared backing (its slot x 8 MiB): 0, or -1 when the map has
 * no such block (or the backing's reads are the caller's). */
int flashrt_backing_offset(const flashrt_backing *b, uint64_t key, uint64_t *off);
void flashrt_backing_close(flashrt_backing *b);

/* ---- the cache -------------------------------------------------------------------------- */

/* The eviction slot's built-in policies (runtime/README.md, "Policy slots"): LRU or FIFO over
 * regions, MAT (Algorithm 1 over the block LRU tail, asking the eviction capability of
 * `flashrt_config.eviction_policy`) and MRU (the worked example). */
enum flashrt_eviction { FLASHRT_LRU = 0, FLASHRT_FIFO = 1, FLASHRT_MAT = 2, FLASHRT_MRU = 3 };
/* The policy named "lru", "fifo", "mat" or "mru"; -1 for another name. */
int flashrt_eviction_from_name(const char *name);
/* Its name, NULL when `which` is none. */
const char *flashrt_eviction_name(int which);
/* The admission slot's policies, by the simulator's names (`flashml sim run --admission`):
 * "bundle" (the `policy` given to flashrt_open: a bundle's admission + prefetch capabilities,
 * or a built-in from flashrt_policy_builtin), "admitall", "rejectx" (the artifact's, keyed by
 * (block, segment), asked per missed segment), "rejectx_block" (keyed by block, asked once
 * per miss) and "coinflip". */
enum flashrt_admission { FLASHRT_ADMIT_BUNDLE = 0, FLASHRT_ADMIT_ALL = 1, FLASHRT_ADMIT_REJECTX = 2,
                         FLASHRT_ADMIT_REJECTX_BLOCK = 3, FLASHRT_ADMIT_COINFLIP = 4 };
/* The policy of that name; -1 for another name. */
int flashrt_admission_from_name(const char *name);
/* Its name, NULL when `which` is none. */
const char *flashrt_admission_name(int which);
/* The budget gate's policies: "none", "bucket" (the write-rate token bucket of
 * write_rate_mbps / write_burst_s / rate_clock) and "tire" (Pannier's TIRE over the regions'
 * erasures, tire_*). FLASHRT_BUDGET_NONE with write_rate_mbps > 0 is the bucket. */
enum flashrt_budget { FLASHRT_BUDGET_NONE = 0, FLASHRT_BUDGET_BUCKET = 1, FLASHRT_BUDGET_TIRE = 2 };
/* The budget policy named "none", "bucket" or "tire"; -1 for another name. */
int flashrt_budget_from_name(const char *name);
/* Its name, NULL when `which` is none of them. */
const char *flashrt_budget_name(int which);
/* The placement slot's policies: "single" (one open region) and "packing" (Pannier's hot/cold
 * packing: a hot and a cold open region, a miss's block hot when the ghost sketch has counted
 * it more often than the median block placed). */
enum flashrt_placement { FLASHRT_PLACE_SINGLE = 0, FLASHRT_PLACE_PACKING = 1 };
/* The placement policy of that name; -1 for another name. */
int flashrt_placement_from_name(const char *name);
/* Its name, NULL when `which` is none. */
const char *flashrt_placement_name(int which);
/* The partition slot's policies: "shared" (no partition), "even" (the simulator's: equal
 * shares), "static" (partition_shares) and "bundle" (MLCache: partition_policy's
 * flashml_partition over the monitor's features every partition_interval page requests). A
 * stream is an access's namespace. */
enum flashrt_partition { FLASHRT_PART_SHARED = 0, FLASHRT_PART_EVEN = 1, FLASHRT_PART_STATIC = 2,
                         FLASHRT_PART_BUNDLE = 3 };
#define FLASHRT_PART_MAX_STREAMS 16
int flashrt_partition_from_name(const char *name);
const char *flashrt_partition_name(int which);
enum flashrt_direct { FLASHRT_DIRECT_AUTO = 0, FLASHRT_DIRECT_OFF = 1, FLASHRT_DIRECT_ON = 2 };
enum flashrt_rate_clock { FLASHRT_CLOCK_TRACE = 0, FLASHRT_CLOCK_WALL = 1 };

struct flashrt_config {
    const char *flash_path;
    uint64_t flash_bytes;       /* bytes of the flash device to use */
    uint64_t region_bytes;      /* region size, a multiple of the segment (default 1 MiB) */
    enum flashrt_eviction eviction;
    enum flashrt_direct direct; /* O_DIRECT on flash and backing */
    double sample_ratio;        /* percent; scales rates to a full node (default 100) */
    double write_rate_mbps;     /* write-rate limit at full-node scale; 0 = none */
    double write_burst_s;       /* token-bucket depth in seconds of the rate (default 60) */
    enum flashrt_rate_clock rate_clock;
    unsigned tracker_width_log2, tracker_depth; /* count-min sketch geometry (14, 4) */
    int measure_raw;            /* on hits, also time a raw read of the same bytes */
    int no_policy_prefetch;     /* do not call the policy's prefetch hint on each GET */
    /* Fault injection (tests): every Nth flash read / write fails with EIO; 0 = never. */
    uint64_t fail_read_every, fail_write_every;
    /* Model: DT constants and the windows of the utilisation series. */
    double t_seek_s, bandwidth_bytes_per_s, window_s, warmup_s;
    unsigned disks;
    /* FLASHRT_MAT: the bundle whose eviction capability the policy asks (loaded with
     * flashrt_policy_load_eviction, owned by the caller, outliving the cache). */
    flashrt_policy *eviction_policy;
    /* The admission slot (default FLASHRT_ADMIT_BUNDLE: the `policy` of flashrt_open) and the
     * built-ins' knobs, the simulator's: rejectx / rejectx_block admit a key seen at least
     * rejectx_x times before (1) in a history of rejectx_factor x capacity keys (2);
     * coinflip admits with probability coinflip_p (0.5), drawn from (key, access index,
     * coinflip_seed). */
    enum flashrt_admission admission;
    unsigned rejectx_x;
    double rejectx_factor, coinflip_p;
    uint64_t coinflip_seed;
    /* The budget gate (default none; the bucket when write_rate_mbps > 0) and TIRE's knobs:
     * lifespan_epbpd erasures per erase unit (region) per day, in quanta of tire_quantum_s
     * (300 s), slack K (4) and steps (3), as Pannier's (sim/src/pannier/tire.rs). */
    enum flashrt_budget budget;
    double lifespan_epbpd, tire_slack, tire_quantum_s;
    unsigned tire_steps;
    /* Crash safety (runtime/README.md, "Crash safety"): each region's header follows the
     * regions' data on the flash device, and segments dropped after a read error are
     * journalled at journal_path (NULL: FLASH.journal beside a regular file; a block device
     * without one zeroes the region's header instead). recover: rebuild the index from the
     * headers and the journal instead of starting cold; sync: fdatasync after each header
     * and journal record (power loss; kill -9 needs none). */
    int recover, sync;
    const char *journal_path;
    /* The placement slot (default FLASHRT_PLACE_SINGLE). */
    enum flashrt_placement placement;
    /* The partition slot (default FLASHRT_PART_SHARED): partition_streams namespaces, sorted
     * ascending in partition_ns (stream i is the accesses of namespace partition_ns[i], as the
     * simulator ranks them; another namespace fails the access), 1..FLASHRT_PART_MAX_STREAMS;
     * static: partition_nshares == streams shares (any scale). */
    enum flashrt_partition partition;
    unsigned partition_streams, partition_nshares;
    const int32_t *partition_ns;
    const double *partition_shares;
    /* bundle: the bundle (flashrt_policy_load_partition; owned by the caller) and the interval
     * in page requests (segments of GETs) */
    flashrt_policy *partition_policy;
    uint64_t partition_interval;
};

void flashrt_config_default(struct flashrt_config *c);

typedef struct flashrt flashrt;

/* Opens the cache cold, or with cfg->recover from the regions' headers and the journal.
 * `policy` and `backing` stay owned by the caller and must outlive it. */
flashrt *flashrt_open(const struct flashrt_config *cfg, flashrt_policy *policy,
                      flashrt_backing *backing, char *err, size_t errlen);

struct flashrt_result {
    const uint8_t *data; /* the requested bytes (GET), valid until the next call */
    uint64_t len;
    int hit;             /* served from flash entirely */
};

/* Serves one access. GET: returns the bytes; PUT: charged DT only, the cache is not touched.
 * Flash errors fall back to the backing device (counted); -1 only when the backing device
 * fails or the access is outside the backing's blocks (message: flashrt_error). */
int flashrt_access(flashrt *rt, const struct flashrt_access *a, struct flashrt_result *res);
const char *flashrt_error(const flashrt *rt);
/* Drops the cached segments of block `key` that bytes offset..offset+size-1 touch (a write to
 * the backing changed them), journalled as a segment dropped after a read error, so --recover
 * never brings them back. The number of segments dropped, or -1 when the journal cannot say so
 * (message: flashrt_error). */
int flashrt_invalidate(flashrt *rt, uint64_t key, uint64_t offset, uint64_t size);
/* Optional, between accesses (where a server would wait for the next request): brings the
 * policy's code and tables back into the CPU caches that serving the last access's bytes
 * evicted, so the next miss decides warm. Never changes a decision. */
void flashrt_idle(flashrt *rt);

struct flashrt_metrics {
    /* the simulator's metric keys (sim/src/flash/mod.rs) */
    double peak_dt_util, mean_dt_util, p50_dt_util, p90_dt_util, p99_dt_util;
    double flash_write_rate_mbps, dwpd, io_hit_ratio, byte_hit_ratio, segment_hit_ratio;
    double avg_eviction_age_s;
    uint64_t backend_ios, backend_bytes, admitted_segments, prefetched_segments, accesses;
    double wall_s;
    /* runtime-only */
    uint64_t device_errors, flash_read_errors, flash_write_errors, rate_limited;
    uint64_t gets, puts, hits, evicted_regions, evicted_segments, capacity_segments;
    uint64_t region_bytes, regions;
    /* decision = features + admission + prefetch decision, on each miss; its parts: */
    double decision_ns_p50, decision_ns_p99, features_ns_p50;
    double policy_ns_p50; /* admission + prefetch decision: flashml_policy_decide_at, or its calls */
    double policy_prefetch_ns_p50; /* the prefetch hint's own cost per call (GETs, idle) */
    double hit_path_us_p50, hit_path_us_p99;
    double miss_path_us_p50, miss_path_us_p99, raw_read_us_p50, hit_overhead_us_p50;
    double backend_wall_ms_p50, backend_dt_ms_p50, backend_wall_s, backend_dt_s;
    double trace_seconds, throughput_accesses_per_s, throughput_mb_per_s;
    int direct_io;
    /* the eviction policy's own figures (MAT: condemned blocks, model calls, candidates put
     * back at the head, T after the run, ns per decision; zeros and NaN for LRU/FIFO) */
    uint64_t eviction_decisions, eviction_predictions, eviction_reinsertions;
    double eviction_threshold, eviction_decision_ns_p50;
    /* the budget gate's (rate_limited above: the admitted misses it refused): TIRE's quota
     * and credit in erasures (NaN otherwise), its quanta so far and those that started
     * blocked */
    double budget_quota, budget_credit;
    uint64_t budget_quanta, budget_blocked_quanta;
    /* crash safety: regions and segments --recover rebuilt, copies it did not take (a newer
     * region had them, or the journal named them), hits on blocks it rebuilt; region headers
     * that could not be written; segments journalled */
    uint64_t recovered_regions, recovered_segments, recovery_dropped, recovered_hits;
    uint64_t header_errors, journalled;
    /* the placement's: admitted misses placed in the hot region (packing) */
    uint64_t placement_hot_misses;
    /* the partition's: streams (0: shared), each stream's quota and regions held at the end,
     * its GETs and hits */
    unsigned partitions;
    uint64_t partition_quota[FLASHRT_PART_MAX_STREAMS], partition_regions[FLASHRT_PART_MAX_STREAMS];
    uint64_t partition_gets[FLASHRT_PART_MAX_STREAMS], partition_hits[FLASHRT_PART_MAX_STREAMS];
    /* interval policies: intervals started, regions evicted by shrinking quotas */
    uint64_t partition_intervals, partition_resize_evictions;
};

/* Computes the metrics of everything served so far. */
void flashrt_metrics(flashrt *rt, struct flashrt_metrics *m);
void flashrt_close(flashrt *rt);

/* ---- MAT: an object cache with learned eviction at the LRU tail ------------------------ */
/*
 * Whole objects (key, size) cached in a file, evicted by MAT (ML at the tail of LRU):
 * an LRU list whose tail candidates are asked, one at a time, for their time to next access
 * (TTA = |expm1(flashml_evict_predict(features)) - age|, LRB's 44 features of the eviction
 * contract); the first with TTA >= T goes, else it is re-inserted at the head, at most L
 * candidates, then the largest TTA goes. The threshold controller then moves T: "sign"
 * (Algorithm 1's rule) T *= 1 + delta when the victim came at a try r < k, *= 1 - delta at
 * r > k (r = L + 1 on exhaustion); "mean" T *= 1 + delta (k - p), p = min(r, L) the
 * candidates taken, which holds their mean at k. With reuse_predictions a candidate's
 * predicted distance is kept until the object's next access (or eviction), so one kept and
 * seen at the tail again is judged by |kept distance - its age now| without a new prediction
 * (counted in `reused`, not in `predictions`; r still counts every candidate taken). The
 * same decisions as the simulator's `simulate_mat` (sim/src/mat/object.rs) on the same
 * requests and capacity.
 */

/* An object trace read whole: request i is (key[i], size[i]); its line is i + 2. */
struct flashrt_objects {
    uint64_t *key, *size;
    size_t n;
};
/* Reads `format` "objects-csv" (alias "csv"; a header naming time, key and size in any
 * order, other columns ignored; time finite and non-decreasing) or "cloudphysics"
 * (version,time,op,size,lbn: key = lbn); sizes >= 1. 0, or -1 with a message naming the file,
 * the line and the field of the first bad row. */
int flashrt_objects_read(const char *path, const char *format, struct flashrt_objects *out,
                         char *err, size_t errlen);
void flashrt_objects_free(struct flashrt_objects *o);

/* Loads a bundle for eviction (capability "eviction": flashml_evict_* checked against this
 * runtime's eviction contract, flashml_policy.h); refused with a message otherwise. */
flashrt_policy *flashrt_policy_load_eviction(const char *dir, char *err, size_t errlen);

/* ---- MLCache: a page cache partitioned by stream -----------------------------------------
 *
 * A cache of `capacity` pages shared by `streams` streams, one LRU partition per stream,
 * re-divided every `interval` requests the cache sees (writes only with writes_only: reads
 * go around it). At the start of each interval the policy's flashml_partition is asked
 * with the monitor's features of the interval before (features/partition.toml: per-stream
 * LRU stack distances bucketed in `steps` equal parts of the capacity, and request shares);
 * the first interval, or no policy, splits evenly. Shares become pages as the simulator
 * does (pages_of_shares: scaled to 2^40, rounded, largest remainder); a partition that
 * shrinks evicts its LRU pages. The same quotas, hits and evictions as the simulator's
 * `simulate_partitioned(..., "mlcache", shares)` with the shares of the same .so
 * (flashml.models.mlcache). Each cached page's bytes live in the cache file (page_bytes
 * each): a miss writes its deterministic content, a hit reads it back and verifies it.
 */
struct flashrt_part_config {
    uint64_t capacity;          /* pages, > 0 */
    uint64_t interval;          /* requests the cache sees per interval, > 0 */
    int streams;                /* 1..FLASHML_PARTITION_MAX_STREAMS */
    int writes_only;            /* cache (and monitor) writes only, the paper's setting */
    uint32_t page_bytes;        /* bytes per page in the cache file (a multiple of 4096) */
    const char *cache_path;     /* NULL: keep no bytes */
    enum flashrt_direct direct; /* O_DIRECT on the cache file */
};
typedef struct flashrt_part flashrt_part;

/* Loads a bundle for partitioning (capability "partition": flashml_partition_* checked
 * against this runtime's partition contract); refused with a message otherwise. */
flashrt_policy *flashrt_policy_load_partition(const char *dir, char *err, size_t errlen);
/* Opens the cache cold; `policy` (loaded for partitioning, owned by the caller, outliving
 * the cache) or NULL: an even split in every interval. NULL with a message on bad input. */
flashrt_part *flashrt_part_open(const struct flashrt_part_config *cfg, flashrt_policy *policy,
                                char *err, size_t errlen);
/* One request of `stream` (0..streams-1) for `page`: 1 on a hit, 0 on a miss, -1 on an IO
 * error or a bad stream (message: flashrt_part_error). */
int flashrt_part_get(flashrt_part *p, int stream, uint64_t page, int write);
const char *flashrt_part_error(const flashrt_part *p);
struct flashrt_part_metrics {
    uint64_t requests, hits, reads, read_hits, writes, write_hits, cached_requests;
    uint64_t intervals, evictions, resize_evictions, fallbacks, partition_calls;
    double hit_ratio, read_hit_ratio, write_hit_ratio, partition_ns_mean, wall_s;
    uint64_t bytes_written, bytes_read, verified_bytes, integrity_errors, file_bytes;
    int direct_io;
};
void flashrt_part_metrics(const flashrt_part *p, struct flashrt_part_metrics *out);
/* The quotas (pages) of every interval so far, row-major intervals x streams. */
const uint64_t *flashrt_part_allocations(const flashrt_part *p, size_t *intervals);
void flashrt_part_close(flashrt_part *p);

/* The simulator's share-to-page rules (sim/src/mlcache/partition.rs), exposed for tests:
 * apportion: `capacity` pages in proportion to weights[0..streams-1] (floor, then the largest
 * remainders, ties to the lower index; all-zero weights: equal); pages_of_shares: shares
 * scaled to sum 2^40 and rounded, then apportioned; an invalid share vector (a non-finite or
 * negative entry, or no positive sum) gives the even split and returns 1. */
void flashrt_part_apportion(const uint64_t *weights, int streams, uint64_t capacity, uint64_t *pages);
int flashrt_part_pages_of_shares(const double *shares, int streams, uint64_t capacity, uint64_t *pages);

enum flashrt_mat_unit { FLASHRT_MAT_BYTES = 0, FLASHRT_MAT_OBJECTS = 1 };

/* One tail candidate examined (for tracing: flashrt_mat_config.on_candidate). */
struct flashrt_mat_candidate {
    uint64_t time;           /* logical time of the miss (request index) */
    uint64_t key, last;      /* the candidate and its last access */
    const double *features;  /* FLASHML_EVICT_NUM_FEATURES doubles, valid during the call */
    double prediction, tta, threshold;
};

struct flashrt_mat_config {
    uint64_t capacity;           /* in `unit`, > 0 */
    enum flashrt_mat_unit unit;
    const char *cache_path;      /* the file holding the cached objects' bytes; NULL: none */
    enum flashrt_direct direct;  /* O_DIRECT on the cache file */
    /* Algorithm 1's knobs: NaN (k, delta, initial_threshold) or 0 (max_candidates,
     * memory_window) takes the policy's value; initial_threshold 0: the number of cached
     * objects at the first eviction. */
    double k, delta, initial_threshold;
    uint32_t max_candidates;
    uint64_t memory_window;
    /* the threshold controller: 0 sign, 1 mean (the header comment above); -1 (what
     * flashrt_mat_config_default sets) takes the policy's (flashml_evict_controller; sign
     * for bundles without it; mean, the declared default, without a policy) */
    int controller;
    /* reuse predictions (the header comment above): 0 off, 1 on; -1 (what
     * flashrt_mat_config_default sets) takes the policy's (flashml_evict_reuse_predictions;
     * off for bundles without it; on, the declared default, without a policy) */
    int reuse_predictions;
    int time_decisions;          /* keep each decision's time for percentiles (default 1) */
    void (*on_candidate)(void *ctx, const struct flashrt_mat_candidate *c);
    void *ctx;
};
void flashrt_mat_config_default(struct flashrt_mat_config *c);

typedef struct flashrt_mat flashrt_mat;

/* Opens the cache cold. `policy` (loaded for eviction) stays owned by the caller and must
 * outlive it; NULL: no model, the LRU tail is evicted unpredicted (exactly LRU). */
flashrt_mat *flashrt_mat_open(const struct flashrt_mat_config *cfg, flashrt_policy *policy,
                              char *err, size_t errlen);

struct flashrt_mat_victim {
    uint64_t key, size;  /* size in bytes */
    uint32_t tries;      /* r: the try that found it, L + 1 on exhaustion, 1 without a model */
    double threshold;    /* T after the decision (NaN without a model) */
};

struct flashrt_mat_result {
    const uint8_t *data; /* the object's bytes (NULL without a cache file), valid until the next call */
    uint64_t len;
    int hit;
    int bypassed;        /* larger than the whole cache: served uncached */
    size_t nvictims;     /* the evictions this request made, in order */
    const struct flashrt_mat_victim *victims;
};

/* Serves one request of object `key` of `size` bytes (>= 1): a hit reads its bytes from the
 * cache file (and refreshes recency; the recorded size never changes); a miss evicts until it
 * fits, then writes its bytes (deterministic content, flashrt_content(key, 0, ...)) to the
 * file. -1 on an IO error (message: flashrt_mat_error). */
int flashrt_mat_get(flashrt_mat *m, uint64_t key, uint64_t size, struct flashrt_mat_result *res);
const char *flashrt_mat_error(const flashrt_mat *m);
/* The eviction features of `key` now (after the requests served so far): 0, or -1 if the key
 * was never requested. out: FLASHML_EVICT_NUM_FEATURES doubles. */
int flashrt_mat_features(const flashrt_mat *m, uint64_t key, double *out);

struct flashrt_mat_metrics {
    uint64_t requests, hits, misses, bypassed, evictions, predictions, reinsertions;
    uint64_t request_bytes, miss_bytes, cached_objects, used, capacity;
    double miss_ratio, byte_miss_ratio, predictions_per_eviction, final_threshold;
    double k, delta, initial_threshold;
    uint32_t max_candidates;
    uint64_t memory_window;
    int controller;      /* the one used: 0 sign, 1 mean */
    int reuse_predictions; /* the one used: 0 off, 1 on */
    uint64_t reused;     /* candidates judged by a kept prediction (not in `predictions`) */
    double candidates_per_eviction; /* (predictions + reused) / evictions; NaN without evictions */
    /* one eviction decision = taking the tail candidates, their features and predictions and
     * the list moves (flashrt_mat_get's evictions, each timed alone) */
    double decision_ns_mean, decision_ns_p50, decision_ns_p99;
    uint64_t bytes_written, bytes_read, verified_bytes, integrity_errors, file_bytes;
    int direct_io;
    double wall_s;
};
void flashrt_mat_metrics(flashrt_mat *m, struct flashrt_mat_metrics *out);
void flashrt_mat_close(flashrt_mat *m);

/* ---- probe ------------------------------------------------------------------------------ */

struct flashrt_probe {
    double t_seek_s, bandwidth_bytes_per_s;
    double read_latency_s_p50;
    uint64_t random_reads, sequential_bytes, device_bytes;
    int direct_io;
};

/* Times `reads` random 4 KiB reads (t_seek) and sequential 1 MiB reads of up to `seq_bytes`
 * (bandwidth) on a device or file. */
int flashrt_probe_disk(const char *path, unsigned reads, uint64_t seq_bytes,
                       struct flashrt_probe *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* FLASHRT_H */
