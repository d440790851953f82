#ifndef FLASHRT_BACKING_INTERNAL_H
#define FLASHRT_BACKING_INTERNAL_H
#include <stdint.h>

#include "flashrt.h"

/* A readahead hook (KML's per-stream controller: kml/ra_hook.h builds it), which the backing
 * calls on each of its reads when one is attached. One backing read of `stream` at trace
 * time t: bytes [off, off+len) of the block that starts at block_base (offsets within the
 * block; the block is block_bytes long) were read from fd. Updates the stream (and decides
 * when a window closed), then hints. Returns the stream's size in KiB used for the hint. */
typedef struct frt_ra_hook frt_ra_hook;
uint64_t frt_ra_hook_read(frt_ra_hook *h, uint64_t stream, double t, int fd, uint64_t block_base,
                          uint64_t block_bytes, uint64_t off, uint64_t len);

/* Reads segments lo..hi of block `key` into buf (aligned) for an access at trace time t; -1
 * with a message on error. With a readahead hook attached, the read is then one event of the
 * stream named by the block key (kml/ra_hook.h) and the next bytes of the block are hinted. */
int frt_backing_read(flashrt_backing *b, uint64_t key, unsigned lo, unsigned hi, uint8_t *buf,
                     double t, char *err, size_t errlen);
int frt_backing_direct(const flashrt_backing *b);
/* Attaches a readahead hook (owned by the caller, outliving the backing's reads; NULL
 * detaches): every later frt_backing_read feeds it. */
void frt_backing_set_readahead(flashrt_backing *b, frt_ra_hook *h);
#endif
