/* pannier.c: Pannier's container flash cache with real bytes (pannier.h). The decisions are a
 * line-by-line port of sim/src/pannier/{store,policy,container}.rs (Store, LruPlus, Queues, PannierPolicy,
 * ContainerCache), sim/src/pannier/blocks.rs (Ghost, Sampler, nearest_rank, BlockConfig::sampled),
 * sim/src/pannier/tire.rs (Gate: tire.c, shared with the engine's budget slot) and
 * sim/src/core/list.rs (DList); the comments name the Rust they mirror. The configuration,
 * the files and their bytes, open, recovery and close are pannier_store.c's; the state both
 * share is pannier_internal.h. */
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

/* blocks.rs: nearest_rank, Sampler and Ghost are util/sketch.h's */

/* tire.rs's Gate is tire.h (`gate` below). What it is asked about: a client
 * write, a read miss, FRT_BUDGET_OVERWRITE (a client write of a block cached in flash, gated
 * like a reinsertion: TIRE's first interval refuses only writes of blocks the cache does not
 * hold) and a reinsertion (copy-forward). */

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
void frt_pn_pol_on_seal(struct frt_pn *c, uint32_t id) {
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

/* ---------- ContainerCache ---------- */
int frt_pn_ensure_ids(struct frt_pn *c, uint32_t n) {
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
uint32_t frt_pn_alloc_container(struct frt_pn *c, int reinsertion, int hot) {
    uint32_t id;
    if (c->nfree) id = c->free_ids[--c->nfree];
    else {
        if (frt_pn_ensure_ids(c, c->ncs + 1) != 0) abort();
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
        id = frt_pn_alloc_container(c, reinsertion, hot);
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
    if (c->data) frt_pn_write_container(c, id);
    frt_pn_pol_on_seal(c, id);
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
                    frt_pn_verify(c, c->blk, key, ver);
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
                frt_pn_fetch_backing(c, page);
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
            if (k->state == ST_OPEN) frt_pn_verify(c, k->buf + (size_t)slot * c->pb, page, k->vers[slot]);
            else {
                size_t got = 0;
                errno = 0;
                c->c.flash_reads++;
                if (frt_pread_upto(c->flash_fd, c->blk, c->pb, data_off(c, k->flash_slot) + (uint64_t)slot * c->pb, &got) != 0 || got != c->pb)
                    fail(c, "cannot read a container", c->cfg.flash_path);
                frt_pn_verify(c, c->blk, page, k->vers[slot]);
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
