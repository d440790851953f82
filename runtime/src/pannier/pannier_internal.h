/* pannier_internal.h: what Pannier's container cache shares between its files (pannier.c: the
 * policies and the cache loop; pannier_store.c: the configuration, the files and their bytes,
 * open, recovery and close): the cache's state (struct frt_pn) and the helpers both use. Not
 * public (pannier.h). */
#ifndef FLASHRT_PANNIER_INTERNAL_H
#define FLASHRT_PANNIER_INTERNAL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/internal.h"
#include "util/sketch.h"
#include "pannier/pannier.h"

#define NIL UINT32_MAX
#define OPEN 4
#define HDR_MAGIC 0x314E4150u /* "PAN1": a container header (engine/journal.h) */

/* ---------- u64 -> u64 hash map: map_tmpl.h's, static inline ---------- */
struct pn_map {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t cap, len;
};
#define MAP_NAME pn_map
#define MAP_VAL uint64_t
#define MAP_SCOPE static inline
#include "util/map_tmpl.h"

/* ---------- list.rs: DList over container ids ---------- */
struct dlist {
    uint32_t *prev, *next;
    size_t n, len;
    uint32_t head, tail;
};

static inline void dl_init(struct dlist *l) {
    memset(l, 0, sizeof *l);
    l->head = l->tail = NIL;
}

/* ---------- the store ---------- */
enum state { ST_FREE = 0, ST_OPEN = 1, ST_SEALED = 2 };

struct container {
    uint64_t *keys;
    uint8_t *valid, *freq;
    uint32_t *vers;
    uint32_t len, n_valid, n_accessed, n_invalid, hits;
    uint64_t seal_time, seal_seq, decay_point, survival;
    int state, hot, reinsertion, recovered;
    uint32_t flash_slot;
    unsigned char *buf; /* an open container's data (RAM) */
};

struct frt_pn {
    struct frt_pn_config cfg;
    uint32_t ppc, slots, promote_at;
    uint64_t ebpc, pb;
    int pannier, packing, copy_forward;
    struct container *cs;
    uint32_t ncs, capcs;
    uint32_t *free_ids;
    uint32_t nfree;
    uint32_t sealed;
    struct pn_map index, last_access;
    uint32_t open[OPEN];
    uint64_t now, seal_seq;
    struct frt_ghost ghost;
    struct frt_tire gate;
    struct frt_sampler reuse, access_pct, counts;
    uint32_t *pending;
    uint32_t npending;
    int sealing;
    /* policies: LRU+'s list; Pannier's queues (hot, cold) and survival heap */
    struct dlist lru, hot, cold;
    uint8_t *in_hot;
    size_t hot_max;
    uint32_t *heap, *hpos;
    size_t hlen;
    struct frt_pn_counters c;
    /* bytes */
    int data;
    int flash_fd, backing_fd, journal_fd, versions_fd;
    uint32_t *free_slots;
    uint32_t nfree_slots;
    uint64_t header_bytes;
    struct pn_map versions;
    unsigned char *blk, *expect, *hdr;
    unsigned char **pool;
    uint32_t npool;
    int failed;
    char err[512];
};

static inline void fail(struct frt_pn *c, const char *what, const char *path) {
    if (!c->failed) snprintf(c->err, sizeof c->err, "%s: %s: %s", path, what, strerror(errno ? errno : EIO));
    c->failed = 1;
}

static inline uint32_t version_of(const struct frt_pn *c, uint64_t b) {
    const uint64_t *v = pn_map_get(&c->versions, b);
    return v ? (uint32_t)*v : 0;
}

static inline uint64_t data_off(const struct frt_pn *c, uint32_t slot) { return (uint64_t)slot * c->cfg.container_bytes; }
static inline uint64_t hdr_off(const struct frt_pn *c, uint32_t slot) {
    return (uint64_t)c->slots * c->cfg.container_bytes + (uint64_t)slot * c->header_bytes;
}

/* pannier_store.c: the bytes */
void frt_pn_verify(struct frt_pn *c, const unsigned char *buf, uint64_t b, uint32_t held);
void frt_pn_fetch_backing(struct frt_pn *c, uint64_t b);
/* a sealed container's data, then its header, into a free flash slot */
void frt_pn_write_container(struct frt_pn *c, uint32_t id);
/* pannier.c: the store and the policy */
int frt_pn_ensure_ids(struct frt_pn *c, uint32_t n);
uint32_t frt_pn_alloc_container(struct frt_pn *c, int reinsertion, int hot);
void frt_pn_pol_on_seal(struct frt_pn *c, uint32_t id);

#endif
