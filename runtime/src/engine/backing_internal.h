#ifndef FLASHRT_BACKING_INTERNAL_H
#define FLASHRT_BACKING_INTERNAL_H
#include "flashrt.h"
#include "policies/readahead/ra_hook.h"
/* Reads segments lo..hi of block `key` into buf (aligned) for an access at trace time t; -1
 * with a message on error. With a readahead hook attached, the read is then one event of the
 * stream named by the block key (ra_hook.h) and the next bytes of the block are hinted. */
int frt_backing_read(flashrt_backing *b, uint64_t key, unsigned lo, unsigned hi, uint8_t *buf,
                     double t, char *err, size_t errlen);
int frt_backing_direct(const flashrt_backing *b);
/* Attaches a readahead hook (owned by the caller, outliving the backing's reads; NULL
 * detaches): every later frt_backing_read feeds it. */
void frt_backing_set_readahead(flashrt_backing *b, frt_ra_hook *h);
#endif
