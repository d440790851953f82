/* persist.h: the region store across a crash (engine/journal.h's region headers and
 * invalidation journal, as Pannier's containers have them). The device holds `nregions`
 * regions of data, then one header per region (frt_rhdr_bytes(spr) bytes): magic "FRE1",
 * one entry per slot, (block key, segment) or FRT_RHDR_NONE for a slot holding nothing.
 * - a region's header is written when its last slot has been written (sealed on the device;
 *   the store puts it on its eviction list later, as before), and zeroed before the region's
 *   first slot is written again: a valid header never describes bytes being replaced;
 * - a segment of a region whose header is written that leaves the index other than with its
 *   region (a flash read error) is journalled, (block, newest seal), in FLASH.journal; without
 *   a journal (a block device) the region's header is zeroed instead;
 * - recovery reads the headers, newest seal first: a copy of (block, segment) is current iff
 *   no journal record at or after its seal names the block and no newer region holds it;
 *   the regions with a current copy are rebuilt in seal order (the eviction list's order).
 * The data are the backing's (never written by the engine), so a recovered copy is right.
 * Crash model: kill -9 (every write reaches the OS before the access completes); power loss
 * needs `sync` (fdatasync after each header and journal record). Not public. */
#ifndef FLASHRT_PERSIST_H
#define FLASHRT_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "engine/device.h"
#include "util/map.h"

struct frt_regions;

struct frt_persist {
    struct frt_device *dev;
    const char *path;
    uint64_t hdr_off, hb; /* the first header's offset (the data's end), bytes per header */
    unsigned char *hdr;   /* hb bytes, aligned */
    uint64_t *seq;        /* per region: the seal of its header on the device, 0: none */
    uint64_t seal_seq;    /* the newest seal */
    int journal_fd, sync;
    uint64_t header_errors; /* header writes that failed (the region is then not recovered) */
    uint64_t journalled;
    /* what --recover found */
    uint64_t recovered_regions, recovered_segments, recovery_dropped;
    struct frt_map64 latest; /* the journal read at open, until recovery */
};

/* The device's layout for regions of `region_bytes` (spr slots): how many regions fit in
 * `want` bytes of data (a block device of `dev_size` bytes holds their headers too). */
uint64_t frt_persist_regions(uint64_t want, uint64_t region_bytes, uint64_t spr, int is_blockdev, uint64_t dev_size);
/* Sets up the headers after `nregions` regions of data and the journal (`journal_path`, NULL:
 * none); without `recover` the device starts empty (every header zeroed, the journal emptied),
 * with it a regular file must have exactly this layout's size. 0, or -1 with a message. */
int frt_persist_open(struct frt_persist *p, struct frt_device *dev, const char *path, const char *journal_path,
                     uint64_t nregions, uint64_t region_bytes, uint64_t spr, int recover, int sync, char *err,
                     size_t errlen);
void frt_persist_close(struct frt_persist *p);
/* Rebuilds the store `m` (cold, its eviction policy set) from the headers and the journal
 * (recovered blocks are marked `recovered`; their last access is 0 until the caller sets it). */
int frt_persist_recover(struct frt_persist *p, struct frt_regions *m, char *err, size_t errlen);
/* Region r is about to be written from its first slot: its header is zeroed. 0, or -1. */
int frt_persist_opening(struct frt_persist *p, uint32_t r);
/* Region r's last slot has been written: its header goes to the device. */
void frt_persist_sealed(struct frt_persist *p, const struct frt_regions *m, uint32_t r);
/* Slot `slot` of the store is about to leave the index other than with its region. 0, or -1. */
int frt_persist_dropping(struct frt_persist *p, const struct frt_regions *m, uint32_t slot);

#endif
