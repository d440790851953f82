/* journal.h: what a flash cache needs to come back after a crash (kill -9; power loss with
 * `sync`), shared by the engine's region store (engine/persist.c) and Pannier's containers
 * (pannier/pannier.c, pannier/pannier_store.c):
 * - a region header per erase unit (a region, a container slot): magic u32, format u16 (1),
 *   flags u16, entry count u32, checksum u32, seal sequence u64, then per entry key u64 and
 *   aux u32 (the engine: the segment, FRT_RHDR_NONE for a slot holding nothing; Pannier: the
 *   block's version). Written after the region's data when it is sealed; zeroed before the
 *   region's data is written again, so a valid header never describes bytes being replaced.
 * - an append-only invalidation journal of (key u64, seal_seq u64) records: key's copies in
 *   regions sealed at or before seal_seq are no longer current.
 * Recovery reads the headers, keeps the valid ones (magic, format, count, checksum) and takes
 * a key's copy from the newest region whose seal is after the key's last journal record. */
#ifndef FLASHRT_JOURNAL_H
#define FLASHRT_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "util/map.h"

#define FRT_RHDR_FIXED 24u
#define FRT_RHDR_ENTRY 12u
#define FRT_RHDR_NONE UINT32_MAX
#define FRT_JOURNAL_REC 16u

/* Bytes of a header of `entries` entries: a multiple of 4096 (O_DIRECT). */
uint64_t frt_rhdr_bytes(uint32_t entries);
/* Fills h (hb bytes) with a header of `count` entries whose keys/aux come from frt_rhdr_set,
 * then frt_rhdr_finish computes its checksum. */
void frt_rhdr_begin(unsigned char *h, uint64_t hb, uint32_t magic, uint16_t flags, uint32_t count, uint64_t seq);
void frt_rhdr_set(unsigned char *h, uint32_t i, uint64_t key, uint32_t aux);
void frt_rhdr_finish(unsigned char *h);
void frt_rhdr_get(const unsigned char *h, uint32_t i, uint64_t *key, uint32_t *aux);
uint16_t frt_rhdr_flags(const unsigned char *h);

/* A valid header found by frt_rhdr_scan: its seal sequence and its region. */
struct frt_rhdr_rec {
    uint64_t seq;
    uint32_t region;
};

/* Reads the n headers of hb bytes at `off` of fd into *all (malloc'd, n x hb) and lists the
 * valid ones (magic, format 1, `count` entries, checksum, seq > 0), oldest seal first, in
 * *recs (malloc'd) and *nrec. 0, or -1 with a message naming `path`. */
int frt_rhdr_scan(int fd, const char *path, uint64_t off, uint32_t n, uint64_t hb, uint32_t magic, uint32_t count,
                  unsigned char **all, struct frt_rhdr_rec **recs, uint32_t *nrec, char *err, size_t errlen);

/* Opens the journal at `path` (O_APPEND): emptied, or with `recover` read into *latest (key
 * -> the newest seal_seq invalidating it; a torn last record is cut) and *max_seq raised to
 * the newest seal_seq recorded. The fd, or -1 with a message. */
int frt_journal_open(const char *path, int recover, struct frt_map64 *latest, uint64_t *max_seq, char *err,
                     size_t errlen);
/* Appends (key, seq); fdatasync with `sync`. 0, or -1 with errno. */
int frt_journal_append(int fd, uint64_t key, uint64_t seq, int sync);
/* Whether a copy of `key` in a region sealed at `seq` survives the journal. */
static inline int frt_journal_current(const struct frt_map64 *latest, uint64_t key, uint64_t seq) {
    const uint64_t *j = frt_map64_get(latest, key);
    return !(j && *j >= seq);
}

#endif
