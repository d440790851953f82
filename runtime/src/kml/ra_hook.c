/* ra_hook.c: the per-stream readahead controller of the runtime's backing reads (ra_hook.h). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/internal.h"
#include "kml/ra_hook.h"

#define NSETS (FRT_RA_HOOK_STREAMS / FRT_RA_HOOK_WAYS)
_Static_assert(FRT_RA_HOOK_STREAMS % FRT_RA_HOOK_WAYS == 0 && (NSETS & (NSETS - 1)) == 0,
               "the table is a power-of-two number of sets of FRT_RA_HOOK_WAYS ways");

struct stream {
    uint64_t id;
    uint64_t used;   /* the hook's tick at its last read; 0: a free slot */
    int64_t window;  /* the window of its last read */
    uint64_t kib;    /* its size now */
    struct frt_ra_acc acc;
};

struct frt_ra_hook {
    const struct frt_readahead_fns *fns;
    double window_s, t0;
    int window_ms, hint, started;
    uint64_t tick;
    struct frt_ra_hook_stats st;
    struct stream slot[FRT_RA_HOOK_STREAMS];
};

frt_ra_hook *frt_ra_hook_new(const struct frt_readahead_fns *fns, int window_ms, int hint, char *err,
                             size_t errlen) {
    if (!fns || !fns->kib) { frt_seterr(err, errlen, "the readahead hook needs a policy loaded for readahead"); return NULL; }
    if (window_ms <= 0) { frt_seterr(err, errlen, "readahead window must be > 0 ms, got %d", window_ms); return NULL; }
    frt_ra_hook *h = calloc(1, sizeof *h);
    if (!h) { frt_seterr(err, errlen, "out of memory"); return NULL; }
    h->fns = fns;
    h->window_ms = window_ms;
    h->window_s = (double)window_ms / 1000.0;
    h->hint = hint;
    return h;
}

void frt_ra_hook_free(frt_ra_hook *h) { free(h); }

/* The first slot of the id's set. */
static inline size_t set_of(uint64_t id) { return (size_t)(frt_mix64(id) & (NSETS - 1)) * FRT_RA_HOOK_WAYS; }

/* The id's slot, or FRT_RA_HOOK_STREAMS when it is not in the table. */
static size_t lookup(const frt_ra_hook *h, uint64_t id) {
    size_t i = set_of(id);
    for (unsigned w = 0; w < FRT_RA_HOOK_WAYS; w++)
        if (h->slot[i + w].used && h->slot[i + w].id == id) return i + w;
    return FRT_RA_HOOK_STREAMS;
}

/* A slot for a new stream: a free way, else the least recently read one (dropped). */
static struct stream *take(frt_ra_hook *h, uint64_t id, int64_t window) {
    struct stream *set = &h->slot[set_of(id)], *s = &set[0];
    for (unsigned w = 0; w < FRT_RA_HOOK_WAYS; w++) {
        if (!set[w].used) { s = &set[w]; break; }
        if (set[w].used < s->used) s = &set[w];
    }
    if (s->used) h->st.stream_evictions++;
    else h->st.live_streams++;
    h->st.streams++;
    s->id = id;
    s->window = window;
    s->kib = FRT_KML_READAHEAD_KIB_DEFAULT;
    frt_ra_init(&s->acc);
    return s;
}

static void count_decision(struct frt_ra_hook_stats *st, uint64_t kib) {
    for (size_t i = 0; i < st->nsizes; i++)
        if (st->decisions[i].kib == kib) { st->decisions[i].n++; return; }
    if (st->nsizes == FRT_RA_HOOK_MAX_SIZES) { st->decisions_other++; return; }
    st->decisions[st->nsizes].kib = kib;
    st->decisions[st->nsizes++].n = 1;
}

/* The stream's closed window -> the model -> its size from now on. */
static void decide(frt_ra_hook *h, struct stream *s) {
    double f[FLASHML_READAHEAD_NUM_FEATURES];
    frt_ra_window(&s->acc, f, (double)s->kib);
    uint64_t a = frt_now_ns();
    int model = h->fns->kib(f);
    h->st.infer_ns += frt_now_ns() - a;
    uint64_t kib = frt_ra_clamp_kib(model);
    h->st.clamped += (int64_t)kib != (int64_t)model;
    h->st.windows++;
    count_decision(&h->st, kib);
    s->kib = kib;
}

uint64_t frt_ra_hook_read(frt_ra_hook *h, uint64_t stream, double t, int fd, uint64_t block_base,
                          uint64_t block_bytes, uint64_t off, uint64_t len) {
    if (!h->started) {
        h->started = 1;
        h->t0 = t;
    }
    /* the window of t; a time before the first read's (only a caller's misuse: the trace is
     * sorted) or a non-finite one counts in the first */
    double k = (t - h->t0) / h->window_s;
    int64_t window = k > 0.0 && k < 9e18 ? (int64_t)floor(k) : 0;
    size_t i = lookup(h, stream);
    struct stream *s = i < FRT_RA_HOOK_STREAMS ? &h->slot[i] : NULL;
    if (!s) s = take(h, stream, window);
    else if (window > s->window) {
        /* its window closed (it has events: a stream's window opens with a read) */
        if (frt_ra_count(&s->acc) > 0) decide(h, s);
        s->window = window;
    }
    s->used = ++h->tick;
    frt_ra_add(&s->acc, off / FLASHML_READAHEAD_PAGE_BYTES);
    h->st.reads++;
    uint64_t kib = s->kib;
    if (h->hint && fd >= 0 && off + len < block_bytes) {
        uint64_t n = kib * 1024, room = block_bytes - (off + len);
        if (n > room) n = room;
        if (posix_fadvise(fd, (off_t)(block_base + off + len), (off_t)n, POSIX_FADV_WILLNEED) == 0) {
            h->st.hints++;
            h->st.hinted_bytes += n;
        } else {
            h->st.hint_errors++;
        }
    }
    return kib;
}

uint64_t frt_ra_hook_stream_kib(const frt_ra_hook *h, uint64_t stream) {
    size_t i = lookup(h, stream);
    return i < FRT_RA_HOOK_STREAMS ? h->slot[i].kib : 0;
}

int frt_ra_hook_hinting(const frt_ra_hook *h) { return h->hint; }
int frt_ra_hook_window_ms(const frt_ra_hook *h) { return h->window_ms; }
const struct frt_ra_hook_stats *frt_ra_hook_stats(const frt_ra_hook *h) { return &h->st; }
