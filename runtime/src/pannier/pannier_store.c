/* pannier_store.c: Pannier's container cache on real files (pannier.h, pannier_internal.h):
 * the configuration and its checks, the bytes of blocks and containers, the logs, opening
 * (and recovering from the flash file) and closing; the decisions are pannier.c's.
 * The bytes (runtime/README.md, "Pannier's container cache"):
 *   FLASH           `slots` data areas of container_bytes (container slot s at s x
 *                   container_bytes), then `slots` headers of header_bytes each;
 *   FLASH.journal   (key u64, seal_seq u64): a client write invalidated key's copy in a sealed
 *                   container while the newest container sealed was seal_seq;
 *   BACKING         block b at b x page_bytes (sparse; a hole is version 0's content);
 *   BACKING.versions (block u64, version u32): every client write's new version, appended
 *                   before the block is written to BACKING (a redo log).
 * Open containers live in RAM; a sealed container's data is written, then its header; an
 * evicted container's header is zeroed before its slot is reused. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/device.h"
#include "engine/journal.h"
#include "util/internal.h"
#include "util/sketch.h"
#include "pannier/pannier.h"
#include "pannier/pannier_internal.h"

/* ---------- bytes ---------- */
uint64_t frt_pn_word(uint64_t block, uint32_t version, uint64_t w) {
    uint64_t seed = frt_mix64(block) ^ frt_mix64((uint64_t)version + 0x50414E4E49455221ull);
    return frt_mix64(seed + w);
}

void frt_pn_fill(void *buf, size_t bytes, uint64_t block, uint32_t version) {
    uint64_t seed = frt_mix64(block) ^ frt_mix64((uint64_t)version + 0x50414E4E49455221ull);
    unsigned char *p = buf;
    for (size_t w = 0; w < bytes / 8; w++) {
        uint64_t x = frt_mix64(seed + w);
        memcpy(p + 8 * w, &x, 8);
    }
}

/* Checks buf against block b's current version (and the version the cache believes it holds). */
void frt_pn_verify(struct frt_pn *c, const unsigned char *buf, uint64_t b, uint32_t held) {
    uint32_t v = version_of(c, b);
    frt_pn_fill(c->expect, c->pb, b, v);
    c->c.verified_blocks++;
    if (held != v || memcmp(buf, c->expect, c->pb) != 0) c->c.verify_failures++;
}

/* the block fetched from the backing for a read miss, into c->blk */
void frt_pn_fetch_backing(struct frt_pn *c, uint64_t b) {
    uint32_t v = version_of(c, b);
    size_t got = 0;
    c->c.backing_reads++;
    if (frt_pread_upto(c->backing_fd, c->blk, c->pb, b * c->pb, &got) != 0) {
        fail(c, "cannot read", c->cfg.backing_path);
        frt_pn_fill(c->blk, c->pb, b, v);
        return;
    }
    if (v == 0) {
        int zero = 1;
        for (size_t i = 0; i < got && zero; i++) zero = c->blk[i] == 0;
        if (zero) { /* a hole: version 0's content was never written */
            frt_pn_fill(c->blk, c->pb, b, 0);
            return;
        }
    }
    if (got < c->pb) memset(c->blk + got, 0, c->pb - got);
    frt_pn_verify(c, c->blk, b, v);
}

void frt_pn_write_container(struct frt_pn *c, uint32_t id) {
    struct container *k = &c->cs[id];
    k->flash_slot = c->free_slots[--c->nfree_slots];
    frt_rhdr_begin(c->hdr, c->header_bytes, HDR_MAGIC, (uint16_t)(k->hot | k->reinsertion << 1), k->len, k->seal_seq);
    for (uint32_t i = 0; i < k->len; i++) frt_rhdr_set(c->hdr, i, k->keys[i], k->vers[i]);
    frt_rhdr_finish(c->hdr);
    errno = 0;
    if (frt_pwrite_full(c->flash_fd, k->buf, c->cfg.container_bytes, data_off(c, k->flash_slot)) != 0 ||
        frt_pwrite_full(c->flash_fd, c->hdr, c->header_bytes, hdr_off(c, k->flash_slot)) != 0 ||
        (c->cfg.sync && fdatasync(c->flash_fd) != 0))
        fail(c, "cannot write a container", c->cfg.flash_path);
    c->pool[c->npool++] = k->buf;
    k->buf = NULL;
}

/* ---------- configuration ---------- */
void frt_pn_config_default(struct frt_pn_config *c) {
    memset(c, 0, sizeof *c);
    c->policy = FRT_PN_PANNIER;
    c->cache_bytes = 1ull << 30;
    c->page_bytes = 4096;
    c->container_bytes = 2ull << 20;
    c->tire_slack = FRT_TIRE_SLACK;
    c->tire_steps = FRT_TIRE_STEPS;
    c->quantum_s = FRT_TIRE_QUANTUM_S;
    c->promotion_pct = FRT_PN_PROMOTION_PCT_DEFAULT;
    c->sample_pct = FRT_PN_SAMPLE_PCT_DEFAULT;
    c->lifetime_pct = FRT_PN_LIFETIME_PCT_DEFAULT;
    c->ghost_factor = FRT_PN_GHOST_FACTOR_DEFAULT;
    c->survival = c->aging = c->invalidation_aware = c->packing = 1;
}

int frt_pn_config_check(const struct frt_pn_config *c, char *err, size_t errlen) {
    uint64_t pb = c->page_bytes, cb = c->container_bytes, eb = c->erase_bytes ? c->erase_bytes : cb;
    if (pb == 0) return frt_seterr(err, errlen, "block size must be > 0 bytes");
    if (cb < pb)
        return frt_seterr(err, errlen, "block of %llu bytes is larger than the container (%llu bytes)",
                          (unsigned long long)pb, (unsigned long long)cb);
    if (cb % pb)
        return frt_seterr(err, errlen, "container size %llu bytes is not a whole number of %llu-byte blocks",
                          (unsigned long long)cb, (unsigned long long)pb);
    if (eb < pb || eb % pb)
        return frt_seterr(err, errlen, "erase block %llu bytes is not a whole number of %llu-byte blocks",
                          (unsigned long long)eb, (unsigned long long)pb);
    if (cb % eb)
        return frt_seterr(err, errlen, "erase blocks of %llu bytes do not divide the container (%llu bytes)",
                          (unsigned long long)eb, (unsigned long long)cb);
    if (cb / pb > (1u << 20)) return frt_seterr(err, errlen, "more than 2^20 blocks per container");
    if (c->cache_bytes < 2 * cb)
        return frt_seterr(err, errlen, "cache size %llu bytes holds fewer than 2 containers of %llu bytes",
                          (unsigned long long)c->cache_bytes, (unsigned long long)cb);
    if (c->cache_bytes / pb >= UINT32_MAX / 2) return frt_seterr(err, errlen, "the cache has more than 2^31 blocks; use larger blocks");
    const char *why; /* the declared bounds (pannier_settings.h) */
    if ((why = frt_pn_promotion_pct_problem(c->promotion_pct)))
        return frt_seterr(err, errlen, "promotion threshold must be %s, got %g", why, c->promotion_pct);
    if ((why = frt_pn_sample_pct_problem(c->sample_pct)))
        return frt_seterr(err, errlen, "sample share must be %s, got %g", why, c->sample_pct);
    if ((why = frt_pn_lifetime_pct_problem(c->lifetime_pct)))
        return frt_seterr(err, errlen, "lifetime percentile must be %s, got %g", why, c->lifetime_pct);
    if ((why = frt_pn_ghost_factor_problem(c->ghost_factor)))
        return frt_seterr(err, errlen, "ghost factor must be %s, got %g", why, c->ghost_factor);
    if (c->has_tire && frt_tire_check(c->lifespan_epbpd, c->tire_slack, c->tire_steps, c->quantum_s, err, errlen) != 0)
        return -1;
    if (c->flash_path && !c->backing_path) return frt_seterr(err, errlen, "a flash file needs a backing file");
    return 0;
}

/* ---------- open, recovery, close ---------- */
static int open_logs(struct frt_pn *c, char *err, size_t errlen, struct frt_map64 *journal) {
    char path[4200];
    /* the version log: read (a torn last record is cut), then redo the last record */
    snprintf(path, sizeof path, "%s.versions", c->cfg.backing_path);
    c->versions_fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (c->versions_fd < 0) return frt_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(c->versions_fd, &st) != 0) return frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
    uint64_t n = (uint64_t)st.st_size / 12;
    if ((uint64_t)st.st_size != n * 12 && ftruncate(c->versions_fd, (off_t)(n * 12)) != 0)
        return frt_seterr(err, errlen, "%s: cannot truncate a torn record: %s", path, strerror(errno));
    unsigned char rec[12 * 1024];
    uint64_t last_b = 0;
    uint32_t last_v = 0;
    for (uint64_t i = 0; i < n;) {
        uint64_t m = n - i < 1024 ? n - i : 1024;
        size_t got = 0;
        if (frt_pread_upto(c->versions_fd, rec, m * 12, i * 12, &got) != 0 || got != m * 12)
            return frt_seterr(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
        for (uint64_t j = 0; j < m; j++) {
            memcpy(&last_b, rec + 12 * j, 8);
            memcpy(&last_v, rec + 12 * j + 8, 4);
            if (pn_map_put(&c->versions, last_b, last_v) != 0) return frt_seterr(err, errlen, "out of memory");
        }
        i += m;
    }
    if (n > 0) { /* the block of the last record may not have reached the backing */
        frt_pn_fill(c->blk, c->pb, last_b, last_v);
        if (frt_pwrite_full(c->backing_fd, c->blk, c->pb, last_b * c->pb) != 0)
            return frt_seterr(err, errlen, "%s: cannot write: %s", c->cfg.backing_path, strerror(errno));
    }
    /* the journal: kept (and read) when recovering, else emptied */
    snprintf(path, sizeof path, "%s.journal", c->cfg.flash_path);
    c->journal_fd = frt_journal_open(path, c->cfg.recover, journal, &c->seal_seq, err, errlen);
    return c->journal_fd < 0 ? -1 : 0;
}

/* Rebuilds the cache from the headers (newest seal first decides which copy is current). */
static int recover(struct frt_pn *c, const struct frt_map64 *journal, char *err, size_t errlen) {
    size_t hb = c->header_bytes;
    unsigned char *all = NULL;
    struct frt_rhdr_rec *rs = NULL;
    uint32_t nrec = 0;
    uint8_t *keep = malloc((size_t)c->slots * c->ppc);
    struct pn_map claimed;
    int rc = -1;
    memset(&claimed, 0, sizeof claimed);
    if (!keep || pn_map_init(&claimed, (size_t)c->slots * c->ppc) != 0) {
        frt_seterr(err, errlen, "out of memory recovering %s", c->cfg.flash_path);
        goto out;
    }
    if (frt_rhdr_scan(c->flash_fd, c->cfg.flash_path, hdr_off(c, 0), c->slots, hb, HDR_MAGIC, c->ppc, &all, &rs, &nrec,
                      err, errlen) != 0)
        goto out;
    /* newest first: a copy is current iff its version is the block's, no journal record at or
     * after its seal invalidates it, and no newer container holds the block */
    for (uint32_t r = nrec; r-- > 0;) {
        const unsigned char *h = all + (size_t)rs[r].region * hb;
        for (uint32_t i = 0; i < c->ppc; i++) {
            uint64_t k;
            uint32_t v;
            frt_rhdr_get(h, i, &k, &v);
            int ok = v == version_of(c, k) && frt_journal_current(journal, k, rs[r].seq) && !pn_map_get(&claimed, k);
            if (ok && pn_map_put(&claimed, k, 1) != 0) {
                frt_seterr(err, errlen, "out of memory");
                goto out;
            }
            keep[(size_t)r * c->ppc + i] = (uint8_t)ok;
            if (!ok && v != version_of(c, k)) c->c.recovered_stale++;
        }
    }
    /* oldest first: ids in seal order, LRU+'s list / Pannier's queues in that order */
    int used_slot_any = 0;
    uint8_t *used = calloc(c->slots, 1);
    if (!used) {
        frt_seterr(err, errlen, "out of memory");
        goto out;
    }
    for (uint32_t r = 0; r < nrec; r++) {
        const unsigned char *h = all + (size_t)rs[r].region * hb;
        uint32_t nv = 0;
        for (uint32_t i = 0; i < c->ppc; i++) nv += keep[(size_t)r * c->ppc + i];
        if (rs[r].seq > c->seal_seq) c->seal_seq = rs[r].seq;
        if (nv == 0) continue;
        uint16_t flags = frt_rhdr_flags(h);
        uint32_t id = frt_pn_alloc_container(c, flags >> 1 & 1, flags & 1);
        struct container *k = &c->cs[id];
        free(k->buf);
        k->buf = NULL;
        for (uint32_t i = 0; i < c->ppc; i++) {
            frt_rhdr_get(h, i, &k->keys[i], &k->vers[i]);
            k->valid[i] = keep[(size_t)r * c->ppc + i];
            k->freq[i] = 0;
            if (k->valid[i] && pn_map_put(&c->index, k->keys[i], (uint64_t)id << 32 | i) != 0) abort();
        }
        k->len = c->ppc;
        k->n_valid = nv;
        k->n_invalid = c->ppc - nv;
        k->n_accessed = 0;
        k->state = ST_SEALED;
        k->seal_time = c->now;
        k->seal_seq = rs[r].seq;
        k->flash_slot = rs[r].region;
        k->recovered = 1;
        used[rs[r].region] = 1;
        used_slot_any = 1;
        c->sealed++;
        c->c.recovered_containers++;
        c->c.recovered_blocks += nv;
        frt_pn_pol_on_seal(c, id);
    }
    if (used_slot_any) {
        c->nfree_slots = 0;
        for (uint32_t s = c->slots; s-- > 0;)
            if (!used[s]) c->free_slots[c->nfree_slots++] = s;
    }
    free(used);
    rc = 0;
out:
    pn_map_free(&claimed);
    free(all);
    free(rs);
    free(keep);
    return rc;
}

frt_pn *frt_pn_open(const struct frt_pn_config *cfg, char *err, size_t errlen) {
    if (frt_pn_config_check(cfg, err, errlen) != 0) return NULL;
    frt_pn *c = calloc(1, sizeof *c);
    if (!c) {
        frt_seterr(err, errlen, "out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    c->flash_fd = c->backing_fd = c->journal_fd = c->versions_fd = -1;
    c->pb = cfg->page_bytes;
    c->ppc = (uint32_t)(cfg->container_bytes / cfg->page_bytes);
    c->slots = (uint32_t)(cfg->cache_bytes / cfg->container_bytes);
    c->ebpc = cfg->container_bytes / (cfg->erase_bytes ? cfg->erase_bytes : cfg->container_bytes);
    c->pannier = cfg->policy == FRT_PN_PANNIER;
    c->packing = c->pannier && cfg->packing;
    c->copy_forward = c->pannier;
    for (int i = 0; i < OPEN; i++) c->open[i] = NIL;
    double pa = ceil(cfg->promotion_pct / 100.0 * (double)c->ppc);
    c->promote_at = pa < 1.0 ? 1 : (uint32_t)pa;
    c->hot_max = c->slots / 2 ? c->slots / 2 : 1;
    dl_init(&c->lru);
    dl_init(&c->hot);
    dl_init(&c->cold);
    /* the ghost: off when nothing reads it (BlockConfig::ghost_blocks) */
    uint32_t cache_pages = (uint32_t)(cfg->cache_bytes / cfg->page_bytes);
    size_t gcap = !cfg->has_tire && !(c->packing && cfg->packing) ? 0 : (size_t)(cfg->ghost_factor * (double)cache_pages);
    frt_tire_init(&c->gate, cfg->has_tire, cfg->lifespan_epbpd, (uint64_t)c->slots * (uint64_t)c->ebpc, cfg->tire_slack,
                  cfg->tire_steps, cfg->quantum_s);
    int oom = frt_ghost_init(&c->ghost, gcap) | pn_map_init(&c->index, (size_t)cache_pages) |
              pn_map_init(&c->last_access, 1024) | pn_map_init(&c->versions, 1024) |
              frt_sampler_init(&c->reuse, cfg->lifetime_pct, 1 << 14, 1024) |
              frt_sampler_init(&c->access_pct, 50.0, 1 << 12, 64) | frt_sampler_init(&c->counts, 50.0, 1 << 12, 256) |
              frt_pn_ensure_ids(c, c->slots + 2 * OPEN);
    if (oom) {
        frt_seterr(err, errlen, "out of memory");
        frt_pn_close(c);
        return NULL;
    }
    if (!cfg->flash_path) return c;
    if (cfg->recover && !cfg->flash_path) {
        frt_seterr(err, errlen, "--recover needs a flash file");
        frt_pn_close(c);
        return NULL;
    }
    c->data = 1;
    c->header_bytes = frt_rhdr_bytes(c->ppc);
    c->blk = malloc(c->pb);
    c->expect = malloc(c->pb);
    c->hdr = malloc(c->header_bytes);
    c->free_slots = malloc((size_t)c->slots * sizeof *c->free_slots);
    if (!c->blk || !c->expect || !c->hdr || !c->free_slots) {
        frt_seterr(err, errlen, "out of memory");
        frt_pn_close(c);
        return NULL;
    }
    for (uint32_t s = c->slots; s-- > 0;) c->free_slots[c->nfree_slots++] = s;
    c->backing_fd = open(cfg->backing_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->backing_fd < 0) {
        frt_seterr(err, errlen, "%s: cannot open: %s", cfg->backing_path, strerror(errno));
        frt_pn_close(c);
        return NULL;
    }
    uint64_t fsize = (uint64_t)c->slots * (cfg->container_bytes + c->header_bytes);
    c->flash_fd = open(cfg->flash_path, O_RDWR | O_CLOEXEC | (cfg->recover ? 0 : O_CREAT | O_TRUNC), 0644);
    struct stat st;
    if (c->flash_fd < 0) frt_seterr(err, errlen, "%s: cannot open: %s", cfg->flash_path, strerror(errno));
    else if (!cfg->recover && ftruncate(c->flash_fd, (off_t)fsize) != 0)
        frt_seterr(err, errlen, "%s: cannot size to %llu bytes: %s", cfg->flash_path, (unsigned long long)fsize, strerror(errno));
    else if (cfg->recover && (fstat(c->flash_fd, &st) != 0 || (uint64_t)st.st_size != fsize))
        frt_seterr(err, errlen, "%s: %llu bytes, not the %llu of this flash size and container size (recover with the knobs it was made with)",
                   cfg->flash_path, (unsigned long long)st.st_size, (unsigned long long)fsize);
    else {
        struct frt_map64 journal;
        int rc = frt_map64_init(&journal, 1024) != 0 ? frt_seterr(err, errlen, "out of memory") : open_logs(c, err, errlen, &journal);
        if (rc == 0 && cfg->recover) rc = recover(c, &journal, err, errlen);
        frt_map64_free(&journal);
        if (rc == 0) return c;
    }
    frt_pn_close(c);
    return NULL;
}

void frt_pn_close(frt_pn *c) {
    if (!c) return;
    for (uint32_t i = 0; i < c->ncs; i++) {
        free(c->cs[i].keys);
        free(c->cs[i].valid);
        free(c->cs[i].freq);
        free(c->cs[i].vers);
        free(c->cs[i].buf);
    }
    for (uint32_t i = 0; i < c->npool; i++) free(c->pool[i]);
    free(c->pool);
    free(c->cs);
    free(c->free_ids);
    free(c->pending);
    free(c->in_hot);
    free(c->heap);
    free(c->hpos);
    free(c->lru.prev);
    free(c->lru.next);
    free(c->hot.prev);
    free(c->hot.next);
    free(c->cold.prev);
    free(c->cold.next);
    pn_map_free(&c->index);
    pn_map_free(&c->last_access);
    pn_map_free(&c->versions);
    frt_ghost_free(&c->ghost);
    frt_tire_free(&c->gate);
    frt_sampler_free(&c->reuse);
    frt_sampler_free(&c->access_pct);
    frt_sampler_free(&c->counts);
    free(c->blk);
    free(c->expect);
    free(c->hdr);
    free(c->free_slots);
    if (c->flash_fd >= 0) close(c->flash_fd);
    if (c->backing_fd >= 0) close(c->backing_fd);
    if (c->journal_fd >= 0) close(c->journal_fd);
    if (c->versions_fd >= 0) close(c->versions_fd);
    free(c);
}
