/* rejectx.c: the admission slot's policy "rejectx" (engine/policy_slots.h; the simulator's
 * RejectX, the Baleen artifact's, sim/src/flash/admission.rs), asked once per uncached segment of a
 * miss: the history is a FIFO of distinct (block, segment) keys, each with a count of the
 * queries since it entered. A query first drops the oldest key if the history holds `window`
 * or more keys (window = factor x capacity in segments, a real number), then counts its key:
 * a key not in the history enters with count 1 and is refused; else its count goes up and it
 * is admitted iff count > X. A re-queried key keeps its place.
 *
 * Keys are exact: a block gets a small id while it has keys in the history (`ids`), and a
 * (block, segment) key is id x 64 + segment in `counts`. */
#include <math.h>
#include <stdlib.h>

#include "engine/policy_slots.h"
#include "util/internal.h"

_Static_assert(FRT_SEGMENTS_PER_BLOCK <= 64, "a segment index takes 6 bits of a key");

struct rejectx {
    unsigned x;
    double window;
    uint64_t *fifo; /* id << 6 | segment, oldest at head */
    size_t cap, head, len;
    struct frt_map counts; /* id << 6 | segment -> queries */
    struct frt_map ids;    /* block -> id */
    uint64_t *id_block;    /* id -> block */
    uint32_t *id_keys;     /* id -> its keys in the FIFO */
    uint32_t *free_ids;
    size_t nfree, nids;
};

static void rx_free(void *st) {
    struct rejectx *r = st;
    if (!r) return;
    free(r->fifo);
    free(r->id_block);
    free(r->id_keys);
    free(r->free_ids);
    if (r->counts.cap) frt_map_free(&r->counts);
    if (r->ids.cap) frt_map_free(&r->ids);
    free(r);
}

int frt_rejectx_window(const struct frt_admission_setup *s, const char *name, double *window, char *err,
                       size_t errlen) {
    *window = s->cfg->rejectx_factor * (double)s->capacity_segments;
    if (!(*window > 0 && *window <= 2147483648.0) || s->cfg->rejectx_x == 0)
        return frt_seterr(err, errlen, "%s: X must be >= 1 and factor x capacity in (0, 2^31] keys, got X %u, window %g",
                          name, s->cfg->rejectx_x, *window);
    return 0;
}

static int rx_init(void **st, const struct frt_admission_setup *s, char *err, size_t errlen) {
    double window;
    if (frt_rejectx_window(s, "rejectx", &window, err, errlen) != 0) return -1;
    struct rejectx *r = calloc(1, sizeof *r);
    if (!r) return frt_seterr(err, errlen, "out of memory");
    *st = r;
    r->x = s->cfg->rejectx_x;
    r->window = window;
    r->cap = (size_t)ceil(window); /* the most keys it holds */
    size_t expect = r->cap < 1024 ? r->cap : 1024;
    r->fifo = malloc(r->cap * sizeof *r->fifo);
    r->id_block = malloc(r->cap * sizeof *r->id_block);
    r->id_keys = malloc(r->cap * sizeof *r->id_keys);
    r->free_ids = malloc(r->cap * sizeof *r->free_ids);
    if (!r->fifo || !r->id_block || !r->id_keys || !r->free_ids || frt_map_init(&r->counts, expect) != 0 ||
        frt_map_init(&r->ids, expect) != 0)
        return frt_seterr(err, errlen, "out of memory");
    return 0;
}

static int rx_admit_segment(void *st, const struct flashrt_access *a, uint64_t index, unsigned seg) {
    (void)index;
    struct rejectx *r = st;
    if (r->len > 0 && (double)r->len >= r->window) {
        uint64_t old = r->fifo[r->head];
        if (++r->head == r->cap) r->head = 0;
        r->len--;
        frt_map_del(&r->counts, old);
        uint32_t id = (uint32_t)(old >> 6);
        if (--r->id_keys[id] == 0) {
            frt_map_del(&r->ids, r->id_block[id]);
            r->free_ids[r->nfree++] = id;
        }
    }
    uint32_t *idp = frt_map_get(&r->ids, a->key);
    if (idp) {
        uint32_t *c = frt_map_get(&r->counts, (uint64_t)*idp << 6 | seg);
        if (c) return ++*c > r->x;
    }
    uint32_t id;
    if (idp) {
        id = *idp;
    } else {
        id = r->nfree ? r->free_ids[--r->nfree] : (uint32_t)r->nids++;
        r->id_block[id] = a->key;
        r->id_keys[id] = 0;
        frt_map_put(&r->ids, a->key, id);
    }
    uint64_t k = (uint64_t)id << 6 | seg;
    r->id_keys[id]++;
    frt_map_put(&r->counts, k, 1);
    size_t tail = r->head + r->len;
    r->fifo[tail >= r->cap ? tail - r->cap : tail] = k;
    r->len++;
    return 0;
}

const struct frt_admission_ops frt_admission_rejectx = {
    .name = "rejectx",
    .init = rx_init,
    .free = rx_free,
    .admit_segment = rx_admit_segment,
};
