/* pannier.h: Pannier's container flash cache (Middleware '15) with real bytes: a port of the
 * simulator's ContainerCache (sim/src/pannier/container.rs: LRU+ and Pannier's S2LRU* + survival queue,
 * sim/src/pannier/blocks.rs: the ghost count-min sketch, Sampler/nearest_rank (util/sketch.h), BlockConfig::sampled,
 * sim/src/pannier/tire.rs: TIRE's Gate) making the same decisions on the same trace and knobs, over a
 * flash file of containers, a backing file and two append-only logs (runtime/README.md,
 * "Pannier's container cache"). Not part of the public API; `flashrt pannier-replay` and the
 * C tests use it. Everything lives in the frt_pn the caller opens and closes. */
#ifndef FLASHRT_PANNIER_H
#define FLASHRT_PANNIER_H

#include <stddef.h>
#include <stdint.h>

#include "pannier/tire.h"

enum frt_pn_policy { FRT_PN_LRU_PLUS = 0, FRT_PN_PANNIER = 1 };

/* The knobs (BlockConfig's, same defaults: frt_pn_config_default) and the files. */
struct frt_pn_config {
    enum frt_pn_policy policy;
    uint64_t cache_bytes;     /* the flash: cache_bytes / container_bytes container slots */
    uint64_t page_bytes;      /* 4096 */
    uint64_t container_bytes; /* 2 MiB */
    uint64_t erase_bytes;     /* 0: the container size */
    int has_tire;             /* TIRE on (lifespan_epbpd > 0) */
    double lifespan_epbpd, tire_slack, quantum_s, promotion_pct, sample_pct, lifetime_pct,
        ghost_factor;
    uint32_t tire_steps;
    int survival, aging, invalidation_aware, packing;
    uint64_t fixed_lifetime; /* 0: the sampled percentile */
    int open_in_cache;       /* charge the RAM open containers to cache_bytes (BlockConfig) */
    /* Files: NULL flash_path = decisions only (no bytes, no files). */
    const char *flash_path;   /* containers; FLASH.journal: the invalidation journal */
    const char *backing_path; /* BACKING.versions: the version log */
    int recover;              /* rebuild the cache from FLASH instead of starting empty */
    int sync;                 /* fdatasync after every container and log record */
};

void frt_pn_config_default(struct frt_pn_config *c);
/* BlockConfig::validate's checks (same messages where they exist); -1 + err. */
int frt_pn_config_check(const struct frt_pn_config *c, char *err, size_t errlen);

/* The counts (the simulator's FlashCounters and BlockResult names). */
struct frt_pn_counters {
    uint64_t requests, reads, read_hits, writes, write_hits;
    uint64_t page_reads, page_read_hits, page_writes, flash_read_pages, inserted_pages,
        rejected_pages, evictions, copied_forward_pages, host_write_pages,
        internal_write_pages, erasures;
    /* bytes: blocks read from the flash file (hits and copy-forward), blocks fetched from
     * the backing (misses), blocks whose bytes were wrong */
    uint64_t flash_reads, backing_reads, verify_failures, verified_blocks;
    /* recovery: containers and blocks rebuilt from the flash file, copies dropped as stale */
    uint64_t recovered_containers, recovered_blocks, recovered_stale;
    /* read hits on blocks that came from a recovered container */
    uint64_t recovered_hits;
};


typedef struct frt_pn frt_pn;

frt_pn *frt_pn_open(const struct frt_pn_config *cfg, char *err, size_t errlen);
void frt_pn_close(frt_pn *c);
/* One request at time t (seconds) covering blocks block .. block+blocks-1: TIRE's clock
 * ticks, then every block is accessed. 1: every block was cached (a hit), 0: not, -1: an IO
 * error (frt_pn_error). A verification failure is counted, not an error. */
int frt_pn_request(frt_pn *c, double t, uint64_t block, uint32_t blocks, int write);
/* Closes the last TIRE quantum (the end of the trace). */
void frt_pn_finish(frt_pn *c);
const char *frt_pn_error(const frt_pn *c);
const struct frt_pn_counters *frt_pn_counters(const frt_pn *c);
const struct frt_tire_quantum *frt_pn_quanta(const frt_pn *c, size_t *n);
double frt_pn_quota(const frt_pn *c);  /* TIRE's erasures per quantum; 0 without TIRE */
double frt_pn_credit(const frt_pn *c); /* the erasure credit; 0 without TIRE */
uint64_t frt_pn_lifetime(const frt_pn *c); /* Pannier's lifetime in insertions; 0 for LRU+ */
uint32_t frt_pn_slots(const frt_pn *c);
uint32_t frt_pn_erase_blocks(const frt_pn *c);

/* The deterministic content of a block: 64-bit word w of block b at version v is
 * frt_pn_word(b, v, w) (little-endian), see frt_pn_fill. */
uint64_t frt_pn_word(uint64_t block, uint32_t version, uint64_t w);
void frt_pn_fill(void *buf, size_t bytes, uint64_t block, uint32_t version);

/* ---- pieces exposed for the C tests ---- */
/* TIRE's level with `erasures` so far (tire.rs Gate::level); after frt_pn_tick. */
uint32_t frt_pn_tire_level(const frt_pn *c, uint64_t erasures);
void frt_pn_tick(frt_pn *c, double t);

/* Test hooks: the clock, a container's state; -1 when the block is not cached. */
uint64_t frt_pn_now(const frt_pn *c);
void frt_pn_set_now(frt_pn *c, uint64_t now);
int64_t frt_pn_container_of(const frt_pn *c, uint64_t block);
/* 0 free, 1 open, 2 sealed; the frequency of its slot i; its decay point and survival */
int frt_pn_container_state(const frt_pn *c, uint32_t id);
int frt_pn_container_freq(const frt_pn *c, uint32_t id, uint32_t i);
uint32_t frt_pn_container_accessed(const frt_pn *c, uint32_t id);
uint64_t frt_pn_container_decay(const frt_pn *c, uint32_t id);
uint64_t frt_pn_container_survival(const frt_pn *c, uint32_t id);
void frt_pn_age(frt_pn *c, uint32_t id);
uint32_t frt_pn_promote_at(const frt_pn *c);

#endif
