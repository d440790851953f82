/* region.c: the region manager (region.h): slot allocation in the open region, whole-region
 * eviction of the region the eviction slot names, and the (block, segment) -> slot index. */
#include <stdlib.h>

#include "engine/persist.h"
#include "engine/region.h"

#define SPB FRT_SEGMENTS_PER_BLOCK

int frt_regions_init(struct frt_regions *m, uint64_t nregions, uint64_t spr) {
    m->nregions = nregions;
    m->spr = spr;
    m->nslots = nregions * spr;
    m->reg = calloc(m->nregions, sizeof *m->reg);
    m->slot = calloc(m->nslots, sizeof *m->slot);
    m->clean = malloc(m->nregions * sizeof *m->clean);
    m->blks = malloc(m->nslots * sizeof *m->blks);
    if (!m->reg || !m->slot || !m->clean || !m->blks || frt_map_init(&m->index, 1024) != 0)
        return -1;
    for (uint64_t i = 0; i < m->nregions; i++) m->clean[i] = (uint32_t)(m->nregions - 1 - i);
    m->nclean = m->nregions;
    for (uint64_t i = 0; i < m->nslots; i++)
        m->blks[i].next_free = i + 1 < m->nslots ? (uint32_t)(i + 1) : FRT_NONE;
    m->free_blk = 0;
    m->head = m->tail = FRT_NONE;
    for (int i = 0; i < FRT_OPEN_MAX; i++) m->open[i] = FRT_NONE;
    m->ev = NULL;
    m->ev_st = NULL;
    return 0;
}

void frt_regions_free(struct frt_regions *m) {
    free(m->reg);
    free(m->slot);
    free(m->clean);
    free(m->blks);
    if (m->index.cap) frt_map_free(&m->index);
    m->reg = NULL;
    m->slot = NULL;
    m->clean = NULL;
    m->blks = NULL;
}

void frt_regions_drop(struct frt_regions *m, uint32_t slot_id) {
    struct frt_slotref *sr = &m->slot[slot_id];
    if (!sr->valid) return;
    struct frt_blk *b = &m->blks[sr->blk];
    b->mask &= ~(1ull << sr->seg);
    b->loc[sr->seg] = FRT_NONE;
    b->count--;
    sr->valid = 0;
    m->reg[slot_id / m->spr].live--;
    if (b->count == 0) {
        if (m->ev && m->ev->removed) m->ev->removed(m->ev_st, sr->blk);
        frt_map_del(&m->index, b->key);
        b->next_free = m->free_blk;
        m->free_blk = sr->blk;
    }
}

static void evict_region(struct frt_regions *m, uint32_t r, double t) {
    for (uint64_t i = 0; i < m->spr; i++) {
        uint32_t id = (uint32_t)(r * m->spr + i);
        struct frt_slotref *sr = &m->slot[id];
        if (!sr->valid) continue;
        m->age_sum += t - m->blks[sr->blk].last;
        m->evicted_segments++;
        frt_regions_drop(m, id);
    }
    m->reg[r].fill = m->reg[r].live = 0;
    m->evicted_regions++;
    if (m->nparts) m->held[m->reg[r].part]--;
}

static uint32_t victim_of(struct frt_regions *m, uint32_t part, int from_tail) {
    for (uint32_t r = from_tail ? m->tail : m->head; r != FRT_NONE; r = from_tail ? m->reg[r].prev : m->reg[r].next)
        if (m->reg[r].part == part) return r;
    return FRT_NONE;
}
uint32_t frt_victim_tail_of(void *st, struct frt_regions *m, uint32_t part) {
    (void)st;
    return victim_of(m, part, 1);
}
uint32_t frt_victim_head_of(void *st, struct frt_regions *m, uint32_t part) {
    (void)st;
    return victim_of(m, part, 0);
}

uint64_t frt_regions_shrink(struct frt_regions *m, double t, uint32_t part, unsigned per) {
    if (m->held[part] <= m->quota[part]) return 0;
    for (unsigned i = 0; i < per; i++) {
        uint32_t *open = &m->open[part * per + i];
        if (*open != FRT_NONE) frt_regions_push_head(m, *open);
        *open = FRT_NONE;
    }
    uint64_t n = 0;
    while (m->held[part] > m->quota[part]) {
        uint32_t r = m->ev->victim_of(m->ev_st, m, part);
        if (r == FRT_NONE) break;
        frt_regions_unlink(m, r);
        evict_region(m, r, t);
        m->clean[m->nclean++] = r;
        n++;
    }
    return n;
}

uint32_t frt_regions_alloc_in(struct frt_regions *m, double t, unsigned stream, uint32_t part) {
    uint32_t *open = &m->open[stream];
    if (*open == FRT_NONE || m->reg[*open].fill == m->spr) {
        if (*open != FRT_NONE) frt_regions_push_head(m, *open); /* seal */
        *open = FRT_NONE;
        if (m->nclean == 0 && m->head == FRT_NONE) /* every region is another stream's open one */
            for (int i = 0; i < FRT_OPEN_MAX && m->head == FRT_NONE; i++)
                if (m->open[i] != FRT_NONE) {
                    frt_regions_push_head(m, m->open[i]);
                    m->open[i] = FRT_NONE;
                }
        uint32_t own = FRT_NONE; /* a partition at its quota evicts its own region */
        if (m->nparts && m->held[part] >= m->quota[part]) own = m->ev->victim_of(m->ev_st, m, part);
        if (own != FRT_NONE) {
            frt_regions_unlink(m, own);
            evict_region(m, own, t);
            m->clean[m->nclean++] = own;
        } else if (m->nclean == 0) {
            uint32_t victim = m->ev->victim(m->ev_st, m);
            frt_regions_unlink(m, victim);
            evict_region(m, victim, t);
            m->clean[m->nclean++] = victim;
        }
        uint32_t r = m->clean[--m->nclean];
        if (m->log && frt_persist_opening(m->log, r) != 0) {
            m->clean[m->nclean++] = r;
            return FRT_NONE;
        }
        *open = r;
        m->reg[r].fill = m->reg[r].live = 0;
        m->reg[r].part = part;
        if (m->nparts) m->held[part]++;
    }
    struct frt_region *g = &m->reg[*open];
    return (uint32_t)(*open * m->spr + g->fill++);
}

void frt_regions_add(struct frt_regions *m, uint64_t key, unsigned s, uint32_t id, double t) {
    struct frt_blk *b = frt_regions_find(m, key);
    if (!b) {
        uint32_t bi = m->free_blk; /* never FRT_NONE: blocks in use <= valid slots < nslots */
        b = &m->blks[bi];
        m->free_blk = b->next_free;
        b->key = key;
        b->mask = 0;
        b->count = 0;
        b->recovered = 0;
        b->last = t;
        for (unsigned k = 0; k < SPB; k++) b->loc[k] = FRT_NONE;
        frt_map_put(&m->index, key, bi);
        if (m->ev && m->ev->added) m->ev->added(m->ev_st, bi);
    }
    b->mask |= 1ull << s;
    b->loc[s] = id;
    b->count++;
    m->slot[id].blk = (uint32_t)(b - m->blks);
    m->slot[id].seg = (uint8_t)s;
    m->slot[id].valid = 1;
    m->reg[id / m->spr].live++;
}
