/* readahead.h: KML's readahead tuner, the library part (readahead.c): the
 * contract's features of a window of page-cache events (features/readahead.toml), the parser
 * of the kernel's mm_filemap_add_to_page_cache trace lines, and loading a bundle's readahead
 * functions. `flashrt tune-readahead` (cli_readahead.c) runs them against a live device or a
 * replayed event file. Not public: no global state, nothing here touches a device. */
#ifndef FLASHRT_READAHEAD_H
#define FLASHRT_READAHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "kml/kml_settings.h"
#include "policies/policy_internal.h"

/* The features of flashml.features.readahead.window_features, computed the same way (same
 * operations in the same order, so the doubles are equal, not just close): Welford's running
 * mean and M2 over the window's events, its event count and its sum of |p_i - p_{i-1}| over
 * consecutive events (all reset by frt_ra_window). */
struct frt_ra_acc {
    double mean, m2; /* Welford over the window's page offsets */
    uint64_t count;  /* events in the current window */
    double absdiff;  /* sum of |p_i - p_{i-1}| within the window (a double, as Python's) */
    uint64_t last;   /* the window's last page offset */
};

void frt_ra_init(struct frt_ra_acc *a);
/* One event: the page offset (byte offset / FLASHML_READAHEAD_PAGE_BYTES). */
void frt_ra_add(struct frt_ra_acc *a, uint64_t page);
/* Events in the current window: a window with none is not classified (the contract). */
static inline uint64_t frt_ra_count(const struct frt_ra_acc *a) { return a->count; }
/* The current window's features in the contract's order (flashml_readahead_feature), with
 * `readahead_kib` the device's readahead during the window; then starts the next window. */
void frt_ra_window(struct frt_ra_acc *a, double out[FLASHML_READAHEAD_NUM_FEATURES], double readahead_kib);

/* A model's readahead (flashml_readahead_kib) as a tuner sets it: clamped to the declared
 * range (kml_settings.h: readahead_kib's FRT_KML_READAHEAD_KIB_MIN..MAX KiB). */
static inline uint64_t frt_ra_clamp_kib(int model) {
    if (model < FRT_KML_READAHEAD_KIB_MIN) return FRT_KML_READAHEAD_KIB_MIN;
    if ((uint64_t)model > FRT_KML_READAHEAD_KIB_MAX) return FRT_KML_READAHEAD_KIB_MAX;
    return (uint64_t)model;
}

/* One mm_filemap_add_to_page_cache line of trace_pipe, e.g.
 *   "  dd-29088 [001] ..... 20327.259977: mm_filemap_add_to_page_cache: dev 0:3 ino 700000
 *    pfn=0x129bae ofs=4096 order=0"
 * (the kernel's print fmt "dev %d:%d ino %lx pfn=0x%lx ofs=%lu order=%u"; older kernels end at
 * ofs, newer ones may add fields: anything after ofs's digits and a space is ignored). */
struct frt_ra_event {
    double t;            /* the trace clock's timestamp, s */
    unsigned major, minor; /* the dev field (the filesystem's, or 0:N for a raw device's pages) */
    uint64_t ino;        /* the inode (hex in the line) */
    uint64_t ofs;        /* byte offset in the file: the page offset is ofs / 4096 */
    int order;           /* the folio's order (2^order pages), -1 when the line has none */
};
/* 0 and *ev filled, or -1 when the line is not such an event (other events, "[LOST n EVENTS]"
 * lines, malformed or overflowing fields). */
int frt_ra_parse_line(const char *line, struct frt_ra_event *ev);

/* Loads a bundle for readahead tuning: capability "readahead" in its manifest, sha256, ABI,
 * the .so's four readahead functions, its feature count and contract hash against this
 * runtime's and the manifest's readahead_contract_hash; refused with a message naming the
 * bundle and what differs otherwise. */
flashrt_policy *frt_readahead_load(const char *dir, char *err, size_t errlen);

#endif
