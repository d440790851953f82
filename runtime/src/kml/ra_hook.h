/* ra_hook.h: KML's readahead model on the runtime's own backing reads (the C
 * runtime's own backing reads use the same model for their prefetch size on each stream;
 * ra_hook.c). An optional controller the caller creates and attaches to a backing store
 * (frt_backing_set_readahead, engine/backing_internal.h); no global state: everything lives in the
 * frt_ra_hook object.
 *
 * Streams. A stream is a caller's 64-bit id; the backing names it by the block key: a backing
 * block is one contiguous 8 MiB extent, the runtime's analogue of a file (the kernel keeps its
 * readahead state per open file, file_ra_state), and the contract's page offsets are offsets
 * within the file, here within the block. The trace's user_namespace would mix many blocks
 * whose offsets all restart at 0 (the absolute differences and the mean would mean nothing).
 *
 * Per stream: a feature accumulator (readahead.h); every backing read of the stream is one
 * event (as the kernel's tracepoint counts one folio once) at page (offset in the block) /
 * 4096. Windows are cut by the trace's time (deterministic replays), window_ms long, counted
 * from the hook's first read, so window k is [t0 + kW, t0 + (k+1)W) for every stream alike
 * (as `tune-readahead --events` cuts them). When a stream's read falls in a later window than
 * its previous one, that window's features (readahead_kib = the stream's size during it) go
 * to flashml_readahead_kib and the result, clamped (frt_ra_clamp_kib), is the stream's size
 * from this read on. A stream's window is closed only by its next read (no timer): an idle
 * stream keeps its last size, and the window open at the end is never classified. Streams
 * start at FRT_KML_READAHEAD_KIB_DEFAULT (kml_settings.h: the kernel's default read_ahead_kb).
 *
 * The table: FRT_RA_HOOK_STREAMS slots, FRT_RA_HOOK_WAYS-way set associative (set = a hash of
 * the id), LRU within the set by a tick of reads: a new stream takes a free way of its set or
 * the set's least recently read one, whose state is dropped (counted: stream_evictions; the
 * evicted stream starts afresh if it comes back). Fixed memory, no allocation per read.
 *
 * The effect: after each read [off, off+len) of a block at block_base, the next `kib` KiB of
 * the block beyond the read are hinted with posix_fadvise(WILLNEED), bounded by the block's
 * end (nothing when the read ends at it). With `hint` 0 (a backing opened O_DIRECT: the page
 * cache is bypassed, so page-cache hints do not apply) no hint is made, the decisions are
 * still taken and counted. */
#ifndef FLASHRT_RA_HOOK_H
#define FLASHRT_RA_HOOK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backing_internal.h"
#include "kml/readahead.h"

#define FRT_RA_HOOK_STREAMS 1024u
#define FRT_RA_HOOK_WAYS 4u
/* distinct decided sizes kept in the histogram; more go to decisions_other */
#define FRT_RA_HOOK_MAX_SIZES 32u

struct frt_ra_hook_stats {
    uint64_t reads;            /* backing reads seen (events) */
    uint64_t streams;          /* streams started (a slot taken: new, or back after eviction) */
    uint64_t stream_evictions; /* started streams that dropped another's state */
    uint64_t live_streams;     /* slots in use now */
    uint64_t windows;          /* windows classified = model calls = decisions */
    uint64_t clamped;          /* decisions outside the declared range (frt_ra_clamp_kib) */
    uint64_t hints, hinted_bytes, hint_errors; /* posix_fadvise calls that succeeded, their
                                                  bytes, and the ones that failed */
    uint64_t infer_ns;         /* clock_gettime around every flashml_readahead_kib call */
    size_t nsizes;             /* decisions per KiB, in first-seen order */
    struct {
        uint64_t kib, n;
    } decisions[FRT_RA_HOOK_MAX_SIZES];
    uint64_t decisions_other;
};

/* The hook's type, frt_ra_hook, and frt_ra_hook_read (one backing read of a stream: the call
 * the backing makes) are declared where the backing sees them, engine/backing_internal.h. */

/* A controller over the model `fns` (a policy loaded for readahead, owned by the caller and
 * outliving the hook); window_ms > 0 (the bundle's flashml_readahead_window_ms, or another);
 * hint: make posix_fadvise hints (0 for an O_DIRECT backing). NULL with a message. */
frt_ra_hook *frt_ra_hook_new(const struct frt_readahead_fns *fns, int window_ms, int hint, char *err,
                             size_t errlen);
void frt_ra_hook_free(frt_ra_hook *h);
/* The stream's current size in KiB, 0 when it is not in the table. */
uint64_t frt_ra_hook_stream_kib(const frt_ra_hook *h, uint64_t stream);
int frt_ra_hook_hinting(const frt_ra_hook *h);
int frt_ra_hook_window_ms(const frt_ra_hook *h);
const struct frt_ra_hook_stats *frt_ra_hook_stats(const frt_ra_hook *h);

#endif
