/* tracker.h: what the count-min feature tracker (tracker.c; flashrt.h, "feature tracker": the
 * public part) gives the admission slot's bundle policy (bundle.c) beyond the public API. Not
 * public. */
#ifndef FLASHRT_TRACKER_H
#define FLASHRT_TRACKER_H

#include <stdint.h>

#include "flashrt.h"

/* Starts loading the tracker's cells of `key` into the CPU cache (the decision needs them). */
void frt_tracker_prefetch(const flashrt_tracker *t, uint64_t key);

#endif
