#ifndef FLASHRT_BACKING_INTERNAL_H
#define FLASHRT_BACKING_INTERNAL_H
#include "flashrt.h"
/* Reads segments lo..hi of block `key` into buf (aligned); -1 with a message on error. */
int frt_backing_read(flashrt_backing *b, uint64_t key, unsigned lo, unsigned hi, uint8_t *buf,
                     char *err, size_t errlen);
int frt_backing_direct(const flashrt_backing *b);
#endif
