/* pannier.c: Pannier's container flash cache with real bytes (pannier.h). The decisions are a
 * line-by-line port of sim/src/pannier/{store,policy,container}.rs (Store, LruPlus, Queues, PannierPolicy,
 * ContainerCache), sim/src/pannier/blocks.rs (Ghost, Sampler, nearest_rank, BlockConfig::sampled),
 * sim/src/pannier/tire.rs (Gate: policies/budget/tire.c, shared with the engine's budget slot) and
 * sim/src/core/list.rs (DList); the comments name the Rust they mirror.
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
#include "systems/pannier.h"

#define NIL UINT32_MAX
#define OPEN 4
#define HDR_MAGIC 0x314E4150u /* "PAN1": a container header (engine/journal.h) */

/* ---------- u64 -> u64 hash map: map_tmpl.h's, with this file's linkage ---------- */
struct pn_map {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t cap, len;
};
#define MAP_NAME pn_map
#define MAP_VAL uint64_t
#define MAP_SCOPE static inline
#include "util/map_tmpl.h"

/* blocks.rs: nearest_rank, Sampler and Ghost are util/sketch.h's */

/* tire.rs's Gate is policies/budget/tire.h (`gate` below). What it is asked about: a client
 * write, a read miss, FRT_BUDGET_OVERWRITE (a client write of a block cached in flash, gated
 * like a reinsertion: TIRE's first interval refuses only writes of blocks the cache does not
 * hold) and a reinsertion (copy-forward). */

/* ---------- list.rs: DList over container ids ---------- */
struct dlist {
    uint32_t *prev, *next;
    size_t n, len;
    uint32_t head, tail;
};

static void dl_init(struct dlist *l) {
    memset(l, 0, sizeof *l);
    l->head = l->tail = NIL;
}

static int dl_ensure(struct dlist *l, size_t need) {
    if (need <= l->n) return 0;
    size_t n = need > l->n * 2 ? need : l->n * 2;
    if (n < 16) n = 16;
    uint32_t *p = realloc(l->prev, n * sizeof *p);
    if (!p) return -1;
    l->prev = p;
    uint32_t *q = realloc(l->next, n * sizeof *q);
    if (!q) return -1;
    l->next = q;
    for (size_t i = l->n; i < n; i++) l->prev[i] = l->next[i] = NIL;
    l->n = n;
    return 0;
}

static void dl_push_front(struct dlist *l, uint32_t id) {
    l->prev[id] = NIL;
    l->next[id] = l->head;
    if (l->head != NIL) l->prev[l->head] = id;
    else l->tail = id;
    l->head = id;
    l->len++;
}

static void dl_unlink(struct dlist *l, uint32_t id) {
    uint32_t p = l->prev[id], n = l->next[id];
    if (p != NIL) l->next[p] = n;
    else l->head = n;
    if (n != NIL) l->prev[n] = p;
    else l->tail = p;
    l->prev[id] = l->next[id] = NIL;
    l->len--;
}

static void dl_move_to_front(struct dlist *l, uint32_t id) {
    if (l->head != id) {
        dl_unlink(l, id);
        dl_push_front(l, id);
    }
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

static void fail(struct frt_pn *c, const char *what, const char *path) {
    if (!c->failed) snprintf(c->err, sizeof c->err, "%s: %s: %s", path, what, strerror(errno ? errno : EIO));
    c->failed = 1;
}

static inline int sampled(const struct frt_pn *c, uint64_t key) {
    return (double)(frt_mix64(key ^ 0x5A3D17C0ull) % 10000) <= c->cfg.sample_pct * 100.0 - 1.0;
}

static uint64_t lifetime(const struct frt_pn *c) {
    uint64_t l = c->cfg.fixed_lifetime ? c->cfg.fixed_lifetime
                 : c->reuse.has       ? c->reuse.value
                                      : (uint64_t)c->slots * c->ppc;
    return l ? l : 1;
}

static uint64_t access_threshold(const struct frt_pn *c) { return c->access_pct.has ? c->access_pct.value : 1001; }

static uint64_t access_permille(const struct frt_pn *c, uint32_t id) {
    return (uint64_t)c->cs[id].n_accessed * 1000 / c->ppc;
}

static uint64_t survival_from_now(const struct frt_pn *c, uint32_t id) {
    uint32_t inv = c->cs[id].n_invalid < c->ppc ? c->cs[id].n_invalid : c->ppc;
    return c->now + lifetime(c) * (uint64_t)(c->ppc - inv) / c->ppc;
}

void frt_pn_age(frt_pn *c, uint32_t id) {
    uint64_t life = lifetime(c), now = c->now;
    struct container *k = &c->cs[id];
    if (k->decay_point >= now) return;
    uint64_t d = now - k->decay_point, step = d / life + (d % life != 0);
    uint8_t s = step > 255 ? 255 : (uint8_t)step;
    uint32_t acc = 0;
    for (uint32_t i = 0; i < k->len; i++) {
        k->freq[i] = k->freq[i] > s ? (uint8_t)(k->freq[i] - s) : 0;
        acc += k->valid[i] && k->freq[i] > 0;
    }
    k->n_accessed = acc;
    k->decay_point = now + life;
}

static int is_hot_count(const struct frt_pn *c, uint32_t count) {
    return c->packing && (uint64_t)count > (c->counts.has ? c->counts.value : 0);
}

/* ---- the survival queue: an indexed min-heap on (survival, id) == BTreeSet::first ---- */
static inline int h_less(const struct frt_pn *c, uint32_t a, uint32_t b) {
    uint64_t sa = c->cs[a].survival, sb = c->cs[b].survival;
    return sa < sb || (sa == sb && a < b);
}

static void h_swap(struct frt_pn *c, size_t i, size_t j) {
    uint32_t t = c->heap[i];
    c->heap[i] = c->heap[j];
    c->heap[j] = t;
    c->hpos[c->heap[i]] = (uint32_t)i;
    c->hpos[c->heap[j]] = (uint32_t)j;
}

static void h_up(struct frt_pn *c, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!h_less(c, c->heap[i], c->heap[p])) break;
        h_swap(c, i, p);
        i = p;
    }
}

static void h_down(struct frt_pn *c, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->hlen && h_less(c, c->heap[l], c->heap[m])) m = l;
        if (r < c->hlen && h_less(c, c->heap[r], c->heap[m])) m = r;
        if (m == i) return;
        h_swap(c, i, m);
        i = m;
    }
}

static void h_insert(struct frt_pn *c, uint32_t id) {
    c->heap[c->hlen] = id;
    c->hpos[id] = (uint32_t)c->hlen;
    c->hlen++;
    h_up(c, c->hlen - 1);
}

static void h_remove(struct frt_pn *c, uint32_t id) {
    uint32_t i = c->hpos[id];
    if (i == NIL) return;
    c->hpos[id] = NIL;
    c->hlen--;
    if (i == c->hlen) return;
    uint32_t moved = c->heap[c->hlen];
    c->heap[i] = moved;
    c->hpos[moved] = i;
    h_up(c, i);
    h_down(c, c->hpos[moved]);
}

/* ---- Queues (pannier.rs) ---- */
static void q_push_cold(struct frt_pn *c, uint32_t id) {
    dl_push_front(&c->cold, id);
    c->in_hot[id] = 0;
    c->cs[id].hits = 0;
}

static void q_push_hot(struct frt_pn *c, uint32_t id) {
    dl_push_front(&c->hot, id);
    c->in_hot[id] = 1;
    c->cs[id].hits = 0;
    if (c->hot.len > c->hot_max) {
        uint32_t d = c->hot.tail;
        dl_unlink(&c->hot, d);
        q_push_cold(c, d);
    }
}

static void q_hit(struct frt_pn *c, uint32_t id) {
    if (c->in_hot[id]) {
        dl_move_to_front(&c->hot, id);
        return;
    }
    if (++c->cs[id].hits >= c->promote_at) {
        dl_unlink(&c->cold, id);
        q_push_hot(c, id);
    } else dl_move_to_front(&c->cold, id);
}

static void q_remove(struct frt_pn *c, uint32_t id) {
    if (c->in_hot[id]) dl_unlink(&c->hot, id);
    else dl_unlink(&c->cold, id);
}

static void set_survival(struct frt_pn *c, uint32_t id, uint64_t t) {
    if (c->cfg.survival) {
        h_remove(c, id);
        c->cs[id].survival = t;
        h_insert(c, id);
    } else c->cs[id].survival = t;
}

static void take(struct frt_pn *c, uint32_t id) {
    q_remove(c, id);
    h_remove(c, id);
}

/* ContainerPolicy::on_seal / on_hit / on_invalidate / victim */
static void pol_on_seal(struct frt_pn *c, uint32_t id) {
    if (!c->pannier) {
        dl_push_front(&c->lru, id);
        return;
    }
    uint64_t life = lifetime(c);
    struct container *k = &c->cs[id];
    k->decay_point = k->seal_time + life;
    k->survival = k->seal_time + life;
    if (c->cfg.survival) h_insert(c, id);
    if (k->hot) q_push_hot(c, id);
    else q_push_cold(c, id);
}

static void pol_on_hit(struct frt_pn *c, uint32_t id, uint32_t before) {
    if (!c->pannier) {
        dl_move_to_front(&c->lru, id);
        return;
    }
    q_hit(c, id);
    if (c->cfg.aging) frt_pn_age(c, id);
    int refill = access_permille(c, id) > access_threshold(c);
    if (c->cs[id].n_accessed > before || refill) set_survival(c, id, survival_from_now(c, id));
}

static void pol_on_invalidate(struct frt_pn *c, uint32_t id) {
    if (c->pannier && c->cfg.invalidation_aware) set_survival(c, id, survival_from_now(c, id));
}

/* copy_frees_space: the victim's accessed blocks (valid, frequency > 0: what the copy-forward
 * takes) do not fill a whole container */
static int copy_frees_space(const struct frt_pn *c, uint32_t id) { return c->cs[id].n_accessed < c->ppc; }

static uint32_t pol_victim(struct frt_pn *c, int *copy) {
    *copy = 0;
    if (!c->pannier) {
        uint32_t v = c->lru.tail;
        dl_unlink(&c->lru, v);
        return v;
    }
    if (c->cfg.survival && c->hlen > 0) {
        uint32_t top = c->heap[0];
        if (c->cfg.aging) frt_pn_age(c, top);
        if (c->cs[top].survival <= c->now) {
            if (copy_frees_space(c, top)) {
                take(c, top);
                *copy = 1;
                return top;
            }
            set_survival(c, top, c->now + lifetime(c));
        }
    }
    /* the cold LRU: its accessed blocks are copied forward too (the paper's Reinsertion
     * paragraph), unless they fill a whole container (copying would free nothing: dropped
     * whole); the copies pass TIRE's gate as reinsertions (evict_one). pannier.rs explains. */
    uint32_t v = c->cold.tail != NIL ? c->cold.tail : c->hot.tail;
    take(c, v);
    *copy = copy_frees_space(c, v);
    return v;
}

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

static uint32_t version_of(const struct frt_pn *c, uint64_t b) {
    const uint64_t *v = pn_map_get(&c->versions, b);
    return v ? (uint32_t)*v : 0;
}

/* Checks buf against block b's current version (and the version the cache believes it holds). */
static void verify(struct frt_pn *c, const unsigned char *buf, uint64_t b, uint32_t held) {
    uint32_t v = version_of(c, b);
    frt_pn_fill(c->expect, c->pb, b, v);
    c->c.verified_blocks++;
    if (held != v || memcmp(buf, c->expect, c->pb) != 0) c->c.verify_failures++;
}

static uint64_t data_off(const struct frt_pn *c, uint32_t slot) { return (uint64_t)slot * c->cfg.container_bytes; }
static uint64_t hdr_off(const struct frt_pn *c, uint32_t slot) {
    return (uint64_t)c->slots * c->cfg.container_bytes + (uint64_t)slot * c->header_bytes;
}

/* the block fetched from the backing for a read miss, into c->blk */
static void fetch_backing(struct frt_pn *c, uint64_t b) {
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
    verify(c, c->blk, b, v);
}

/* ---------- ContainerCache ---------- */
static int ensure_ids(struct frt_pn *c, uint32_t n) {
    if (n <= c->capcs) return 0;
    uint32_t cap = c->capcs ? c->capcs * 2 : 64;
    while (cap < n) cap *= 2;
    struct container *cs = realloc(c->cs, cap * sizeof *cs);
    if (!cs) return -1;
    c->cs = cs;
    memset(c->cs + c->capcs, 0, (cap - c->capcs) * sizeof *cs);
    uint32_t *f = realloc(c->free_ids, cap * sizeof *f);
    if (!f) return -1;
    c->free_ids = f;
    uint32_t *p = realloc(c->pending, cap * sizeof *p);
    if (!p) return -1;
    c->pending = p;
    uint8_t *h = realloc(c->in_hot, cap);
    if (!h) return -1;
    c->in_hot = h;
    memset(c->in_hot + c->capcs, 0, cap - c->capcs);
    uint32_t *hp = realloc(c->heap, cap * sizeof *hp);
    if (!hp) return -1;
    c->heap = hp;
    uint32_t *pos = realloc(c->hpos, cap * sizeof *pos);
    if (!pos) return -1;
    c->hpos = pos;
    for (uint32_t i = c->capcs; i < cap; i++) c->hpos[i] = NIL;
    unsigned char **pool = realloc(c->pool, cap * sizeof *pool);
    if (!pool) return -1;
    c->pool = pool;
    if (dl_ensure(&c->lru, cap) || dl_ensure(&c->hot, cap) || dl_ensure(&c->cold, cap)) return -1;
    c->capcs = cap;
    return 0;
}

static unsigned char *buf_get(struct frt_pn *c) {
    if (c->npool) return c->pool[--c->npool];
    return malloc(c->cfg.container_bytes);
}

/* Store::alloc */
static uint32_t alloc_container(struct frt_pn *c, int reinsertion, int hot) {
    uint32_t id;
    if (c->nfree) id = c->free_ids[--c->nfree];
    else {
        if (ensure_ids(c, c->ncs + 1) != 0) abort();
        id = c->ncs++;
        struct container *k = &c->cs[id];
        k->keys = malloc(c->ppc * sizeof *k->keys);
        k->valid = malloc(c->ppc);
        k->freq = malloc(c->ppc);
        k->vers = malloc(c->ppc * sizeof *k->vers);
        if (!k->keys || !k->valid || !k->freq || !k->vers) abort();
    }
    struct container *k = &c->cs[id];
    k->state = ST_OPEN;
    k->reinsertion = reinsertion;
    k->hot = hot;
    k->recovered = 0;
    k->flash_slot = NIL;
    if (c->data && !(k->buf = buf_get(c))) abort();
    return id;
}

static void seal(struct frt_pn *c, uint32_t id);

/* ContainerCache::add */
static void add(struct frt_pn *c, uint64_t page, int reinsertion, int hot, uint8_t freq,
                const unsigned char *bytes, uint32_t ver) {
    int kind = reinsertion * 2 + hot;
    uint32_t id = c->open[kind];
    if (id == NIL) {
        id = alloc_container(c, reinsertion, hot);
        c->open[kind] = id;
    }
    struct container *k = &c->cs[id];
    uint32_t slot = k->len;
    k->keys[slot] = page;
    k->valid[slot] = 1;
    k->freq[slot] = freq;
    k->vers[slot] = ver;
    if (c->data) memcpy(k->buf + (size_t)slot * c->pb, bytes, c->pb);
    k->len++;
    k->n_valid++;
    k->n_accessed += freq > 0;
    int full = k->len == c->ppc;
    if (pn_map_put(&c->index, page, (uint64_t)id << 32 | slot) != 0) abort();
    if (full) {
        c->open[kind] = NIL;
        seal(c, id);
    }
}

/* ContainerCache::insert */
static void insert(struct frt_pn *c, uint64_t page, enum frt_budget_kind kind, uint32_t count,
                   const unsigned char *bytes, uint32_t ver) {
    if (!frt_tire_admit(&c->gate, kind, count, c->c.erasures)) {
        c->c.rejected_pages++;
        return;
    }
    c->c.inserted_pages++;
    if (c->packing && sampled(c, page)) frt_sampler_push(&c->counts, count);
    add(c, page, 0, is_hot_count(c, count), 0, bytes, ver);
}

static void write_container(struct frt_pn *c, uint32_t id) {
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

/* ContainerCache::write_sealed */
static void write_sealed(struct frt_pn *c, uint32_t id) {
    c->seal_seq++;
    struct container *k = &c->cs[id];
    k->state = ST_SEALED;
    k->seal_time = c->now;
    k->seal_seq = c->seal_seq;
    c->sealed++;
    if (k->reinsertion) c->c.internal_write_pages += c->ppc;
    else c->c.host_write_pages += c->ppc;
    if (c->data) write_container(c, id);
    pol_on_seal(c, id);
}

/* ContainerCache::evict_one */
static void evict_one(struct frt_pn *c) {
    int copy;
    uint32_t v = pol_victim(c, &copy);
    if (sampled(c, c->cs[v].seal_seq)) frt_sampler_push(&c->access_pct, access_permille(c, v));
    if (c->data) { /* the header goes first: the slot's data will be overwritten */
        static const unsigned char zero[FRT_RHDR_FIXED];
        errno = 0;
        if (frt_pwrite_full(c->flash_fd, zero, sizeof zero, hdr_off(c, c->cs[v].flash_slot)) != 0)
            fail(c, "cannot write a header", c->cfg.flash_path);
    }
    for (uint32_t i = 0; i < c->cs[v].len; i++) {
        if (!c->cs[v].valid[i]) continue;
        uint64_t key = c->cs[v].keys[i];
        (void)pn_map_del(&c->index, key);
        uint8_t f = c->cs[v].freq[i];
        if (copy && c->copy_forward && f > 0) {
            uint32_t count = frt_ghost_count(&c->ghost, key);
            if (frt_tire_admit(&c->gate, FRT_BUDGET_REINSERTION, count, c->c.erasures)) {
                c->c.copied_forward_pages++;
                uint32_t ver = c->cs[v].vers[i];
                if (c->data) {
                    size_t got = 0;
                    errno = 0;
                    c->c.flash_reads++;
                    if (frt_pread_upto(c->flash_fd, c->blk, c->pb, data_off(c, c->cs[v].flash_slot) + (uint64_t)i * c->pb, &got) != 0 || got != c->pb)
                        fail(c, "cannot read a container", c->cfg.flash_path);
                    verify(c, c->blk, key, ver);
                }
                add(c, key, 1, is_hot_count(c, count), f, c->blk, ver);
            } else c->c.rejected_pages++;
        }
    }
    struct container *k = &c->cs[v];
    k->len = k->n_valid = k->n_accessed = k->n_invalid = k->hits = 0;
    k->state = ST_FREE;
    c->free_ids[c->nfree++] = v;
    if (c->data) c->free_slots[c->nfree_slots++] = k->flash_slot;
    k->flash_slot = NIL;
    c->sealed--;
    c->c.erasures += c->ebpc;
    c->c.evictions++;
}

/* Store::open_in_use: open containers holding blocks */
static uint32_t open_in_use(const struct frt_pn *c) {
    uint32_t n = 0;
    for (int i = 0; i < OPEN; i++) n += c->open[i] != NIL;
    return n;
}

/* ContainerCache::seal */
static void seal(struct frt_pn *c, uint32_t id) {
    c->pending[c->npending++] = id;
    if (c->sealing) return;
    c->sealing = 1;
    while (c->npending) {
        uint32_t k = c->pending[--c->npending];
        /* open_in_cache: the cache size covers the RAM open containers too (sealed + open <= slots) */
        while (c->sealed > 0 && c->sealed + (c->cfg.open_in_cache ? open_in_use(c) : 0) >= c->slots)
            evict_one(c);
        write_sealed(c, k);
    }
    c->sealing = 0;
}

/* BlockCache::access for ContainerCache: 1 if the block was cached */
static int access_block(struct frt_pn *c, uint64_t page, int write) {
    uint32_t count = frt_ghost_touch(&c->ghost, page);
    uint64_t *lp = pn_map_get(&c->index, page);
    int found = lp != NULL;
    uint64_t l = found ? *lp : 0;
    if (c->pannier && sampled(c, page)) {
        uint64_t last;
        int had = pn_map_put_old(&c->last_access, page, c->now, &last);
        if (had < 0) abort();
        if (had == 1 && found) frt_sampler_push(&c->reuse, c->now - last);
    }
    if (!write) {
        c->c.page_reads++;
        if (!found) {
            c->now++;
            uint32_t ver = 0;
            if (c->data) {
                fetch_backing(c, page);
                ver = version_of(c, page);
            }
            insert(c, page, FRT_BUDGET_READ_MISS, count, c->blk, ver);
            return 0;
        }
        uint32_t id = (uint32_t)(l >> 32), slot = (uint32_t)l;
        c->c.page_read_hits++;
        struct container *k = &c->cs[id];
        uint32_t before = k->n_accessed;
        if (k->freq[slot] == 0) k->n_accessed++;
        if (k->freq[slot] < 255) k->freq[slot]++;
        if (k->recovered) c->c.recovered_hits++;
        if (c->data) {
            if (k->state == ST_OPEN) verify(c, k->buf + (size_t)slot * c->pb, page, k->vers[slot]);
            else {
                size_t got = 0;
                errno = 0;
                c->c.flash_reads++;
                if (frt_pread_upto(c->flash_fd, c->blk, c->pb, data_off(c, k->flash_slot) + (uint64_t)slot * c->pb, &got) != 0 || got != c->pb)
                    fail(c, "cannot read a container", c->cfg.flash_path);
                verify(c, c->blk, page, k->vers[slot]);
            }
        }
        if (k->state == ST_SEALED) {
            c->c.flash_read_pages++;
            pol_on_hit(c, id, before);
        }
        return 1;
    }
    c->c.page_writes++;
    c->now++;
    uint32_t ver = 0;
    if (c->data) { /* the version log first (a redo record), then the backing */
        ver = version_of(c, page) + 1;
        unsigned char rec[12];
        memcpy(rec, &page, 8);
        memcpy(rec + 8, &ver, 4);
        errno = 0;
        if (frt_write_full(c->versions_fd, rec, sizeof rec) != 0 || (c->cfg.sync && fdatasync(c->versions_fd) != 0))
            fail(c, "cannot append", "the version log");
        if (pn_map_put(&c->versions, page, ver) != 0) abort();
        frt_pn_fill(c->blk, c->pb, page, ver);
        if (frt_pwrite_full(c->backing_fd, c->blk, c->pb, page * c->pb) != 0 || (c->cfg.sync && fdatasync(c->backing_fd) != 0))
            fail(c, "cannot write", c->cfg.backing_path);
    }
    if (!found) {
        insert(c, page, FRT_BUDGET_CLIENT_WRITE, count, c->blk, ver);
        return 0;
    }
    uint32_t id = (uint32_t)(l >> 32), slot = (uint32_t)l;
    struct container *k = &c->cs[id];
    if (k->state == ST_OPEN) { /* updated in place in RAM */
        if (c->data) {
            memcpy(k->buf + (size_t)slot * c->pb, c->blk, c->pb);
            k->vers[slot] = ver;
        }
        return 1;
    }
    k->valid[slot] = 0;
    k->n_valid--;
    k->n_invalid++;
    if (k->freq[slot] > 0) k->n_accessed--;
    k->freq[slot] = 0;
    (void)pn_map_del(&c->index, page);
    if (c->data) {
        errno = 0;
        if (frt_journal_append(c->journal_fd, page, c->seal_seq, c->cfg.sync) != 0)
            fail(c, "cannot append", "the invalidation journal");
    }
    pol_on_invalidate(c, id);
    insert(c, page, FRT_BUDGET_OVERWRITE, count, c->blk, ver);
    return 1;
}

int frt_pn_request(frt_pn *c, double t, uint64_t block, uint32_t blocks, int write) {
    frt_tire_tick(&c->gate, t, c->c.erasures);
    int all = 1;
    for (uint64_t p = block; p < block + blocks; p++) all &= access_block(c, p, write);
    c->c.requests++;
    if (write) {
        c->c.writes++;
        c->c.write_hits += (uint64_t)all;
    } else {
        c->c.reads++;
        c->c.read_hits += (uint64_t)all;
    }
    return c->failed ? -1 : all;
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
        uint32_t id = alloc_container(c, flags >> 1 & 1, flags & 1);
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
        pol_on_seal(c, id);
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
              ensure_ids(c, c->slots + 2 * OPEN);
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

void frt_pn_finish(frt_pn *c) {
    if (frt_tire_finish(&c->gate, c->c.erasures) != 0 && !c->failed) {
        snprintf(c->err, sizeof c->err, "out of memory");
        c->failed = 1;
    }
}

const char *frt_pn_error(const frt_pn *c) { return c->err; }
const struct frt_pn_counters *frt_pn_counters(const frt_pn *c) { return &c->c; }
const struct frt_tire_quantum *frt_pn_quanta(const frt_pn *c, size_t *n) {
    *n = c->gate.n;
    return c->gate.series;
}
double frt_pn_quota(const frt_pn *c) { return c->gate.on ? c->gate.quota : 0.0; }
double frt_pn_credit(const frt_pn *c) { return c->gate.on ? c->gate.credit : 0.0; }
uint64_t frt_pn_lifetime(const frt_pn *c) { return c->pannier ? lifetime(c) : 0; }
uint32_t frt_pn_slots(const frt_pn *c) { return c->slots; }
uint32_t frt_pn_erase_blocks(const frt_pn *c) { return c->slots * (uint32_t)c->ebpc; }
uint32_t frt_pn_tire_level(const frt_pn *c, uint64_t erasures) { return frt_tire_level(&c->gate, erasures); }
void frt_pn_tick(frt_pn *c, double t) { frt_tire_tick(&c->gate, t, c->c.erasures); }
uint64_t frt_pn_now(const frt_pn *c) { return c->now; }
void frt_pn_set_now(frt_pn *c, uint64_t now) { c->now = now; }
int64_t frt_pn_container_of(const frt_pn *c, uint64_t block) {
    const uint64_t *l = pn_map_get(&c->index, block);
    return l ? (int64_t)(*l >> 32) : -1;
}
int frt_pn_container_state(const frt_pn *c, uint32_t id) { return id < c->ncs ? c->cs[id].state : ST_FREE; }
int frt_pn_container_freq(const frt_pn *c, uint32_t id, uint32_t i) { return c->cs[id].freq[i]; }
uint32_t frt_pn_container_accessed(const frt_pn *c, uint32_t id) { return c->cs[id].n_accessed; }
uint64_t frt_pn_container_decay(const frt_pn *c, uint32_t id) { return c->cs[id].decay_point; }
uint64_t frt_pn_container_survival(const frt_pn *c, uint32_t id) { return c->cs[id].survival; }
uint32_t frt_pn_promote_at(const frt_pn *c) { return c->promote_at; }
