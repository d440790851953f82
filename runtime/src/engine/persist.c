/* persist.c: the region store across a crash (persist.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/journal.h"
#include "engine/persist.h"
#include "engine/region.h"
#include "util/internal.h"

#define MAGIC 0x31455246u /* "FRE1" */
#define SPB FRT_SEGMENTS_PER_BLOCK

uint64_t frt_persist_regions(uint64_t want, uint64_t region_bytes, uint64_t spr, int is_blockdev, uint64_t dev_size) {
    uint64_t n = want / region_bytes;
    if (is_blockdev) {
        uint64_t fit = dev_size / (region_bytes + frt_rhdr_bytes((uint32_t)spr));
        if (fit < n) n = fit;
    }
    return n;
}

static int write_hdr(struct frt_persist *p, uint32_t r) {
    if (frt_pwrite_full(p->dev->fd, p->hdr, p->hb, p->hdr_off + (uint64_t)r * p->hb) != 0) return -1;
    return p->sync ? fdatasync(p->dev->fd) : 0;
}

static int zero_hdr(struct frt_persist *p, uint32_t r) {
    memset(p->hdr, 0, p->hb);
    if (write_hdr(p, r) != 0) return -1;
    p->seq[r] = 0;
    return 0;
}

int frt_persist_open(struct frt_persist *p, struct frt_device *dev, const char *path, const char *journal_path,
                     uint64_t nregions, uint64_t region_bytes, uint64_t spr, int recover, int sync, char *err,
                     size_t errlen) {
    memset(p, 0, sizeof *p);
    p->journal_fd = -1;
    p->dev = dev;
    p->path = path;
    p->sync = sync;
    p->hdr_off = nregions * region_bytes;
    p->hb = frt_rhdr_bytes((uint32_t)spr);
    uint64_t total = p->hdr_off + nregions * p->hb;
    void *buf = NULL;
    if (posix_memalign(&buf, FRT_ALIGN, p->hb) != 0 || !(p->seq = calloc(nregions, sizeof *p->seq))) {
        free(buf);
        return frt_seterr(err, errlen, "out of memory");
    }
    p->hdr = buf;
    if (!dev->is_blockdev) {
        struct stat st;
        if (fstat(dev->fd, &st) != 0) return frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
        if (recover && (uint64_t)st.st_size != total)
            return frt_seterr(err, errlen, "%s: %llu bytes, not the %llu of %llu regions of %llu bytes and their headers "
                              "(recover with the --flash-bytes and --region-bytes it was written with)", path,
                              (unsigned long long)st.st_size, (unsigned long long)total, (unsigned long long)nregions,
                              (unsigned long long)region_bytes);
        /* a fresh start: the headers' bytes dropped (zeros), the data kept (sparse growth) */
        if (!recover && (ftruncate(dev->fd, (off_t)p->hdr_off) != 0 || ftruncate(dev->fd, (off_t)total) != 0))
            return frt_seterr(err, errlen, "%s: cannot size it to %llu bytes: %s", path, (unsigned long long)total,
                              strerror(errno));
    } else if (!recover) {
        for (uint64_t r = 0; r < nregions; r++)
            if (zero_hdr(p, (uint32_t)r) != 0)
                return frt_seterr(err, errlen, "%s: cannot clear the region headers: %s", path, strerror(errno));
    }
    if (frt_map64_init(&p->latest, 64) != 0) return frt_seterr(err, errlen, "out of memory");
    if (journal_path && (p->journal_fd = frt_journal_open(journal_path, recover, &p->latest, &p->seal_seq, err, errlen)) < 0)
        return -1;
    return 0;
}

void frt_persist_close(struct frt_persist *p) {
    if (p->journal_fd >= 0) close(p->journal_fd);
    p->journal_fd = -1;
    if (p->latest.cap) frt_map64_free(&p->latest);
    free(p->hdr);
    free(p->seq);
    p->hdr = NULL;
    p->seq = NULL;
}

int frt_persist_opening(struct frt_persist *p, uint32_t r) { return zero_hdr(p, r); }

void frt_persist_sealed(struct frt_persist *p, const struct frt_regions *m, uint32_t r) {
    uint64_t seq = ++p->seal_seq;
    frt_rhdr_begin(p->hdr, p->hb, MAGIC, (uint16_t)m->reg[r].part, (uint32_t)m->spr, seq);
    for (uint64_t i = 0; i < m->spr; i++) {
        const struct frt_slotref *sr = &m->slot[r * m->spr + i];
        if (sr->valid) frt_rhdr_set(p->hdr, (uint32_t)i, m->blks[sr->blk].key, sr->seg);
        else frt_rhdr_set(p->hdr, (uint32_t)i, 0, FRT_RHDR_NONE);
    }
    frt_rhdr_finish(p->hdr);
    if (write_hdr(p, r) != 0) {
        p->header_errors++;
        p->seq[r] = 0;
        return;
    }
    p->seq[r] = seq;
}

int frt_persist_dropping(struct frt_persist *p, const struct frt_regions *m, uint32_t slot) {
    uint32_t r = (uint32_t)(slot / m->spr);
    const struct frt_slotref *sr = &m->slot[slot];
    if (!sr->valid || p->seq[r] == 0) return 0; /* not on the device's headers */
    p->journalled++;
    if (p->journal_fd >= 0) return frt_journal_append(p->journal_fd, m->blks[sr->blk].key, p->seal_seq, p->sync);
    return zero_hdr(p, r);
}

int frt_persist_recover(struct frt_persist *p, struct frt_regions *m, char *err, size_t errlen) {
    unsigned char *all = NULL;
    struct frt_rhdr_rec *rs = NULL;
    uint32_t nrec = 0;
    uint8_t *keep = NULL, *used = calloc(m->nregions, 1);
    struct frt_map64 claimed; /* block -> the segments a newer region holds */
    memset(&claimed, 0, sizeof claimed);
    int rc = -1;
    if (!used || frt_map64_init(&claimed, 1024) != 0) {
        frt_seterr(err, errlen, "out of memory recovering %s", p->path);
        goto out;
    }
    if (frt_rhdr_scan(p->dev->fd, p->path, p->hdr_off, (uint32_t)m->nregions, p->hb, MAGIC, (uint32_t)m->spr, &all, &rs,
                      &nrec, err, errlen) != 0)
        goto out;
    if (!(keep = calloc((size_t)nrec * m->spr + 1, 1))) {
        frt_seterr(err, errlen, "out of memory recovering %s", p->path);
        goto out;
    }
    /* newest seal first: a copy is current iff the journal has not invalidated it since its
     * seal and no newer region holds it */
    for (uint32_t r = nrec; r-- > 0;) {
        const unsigned char *h = all + (size_t)rs[r].region * p->hb;
        if (rs[r].seq > p->seal_seq) p->seal_seq = rs[r].seq;
        for (uint32_t i = 0; i < m->spr; i++) {
            uint64_t key, *have;
            uint32_t seg;
            frt_rhdr_get(h, i, &key, &seg);
            if (seg == FRT_RHDR_NONE || seg >= SPB) continue;
            have = frt_map64_get(&claimed, key);
            uint64_t mask = have ? *have : 0, bit = 1ull << seg;
            if (!frt_journal_current(&p->latest, key, rs[r].seq) || (mask & bit)) {
                p->recovery_dropped++;
                continue;
            }
            if (frt_map64_put(&claimed, key, mask | bit) != 0) {
                frt_seterr(err, errlen, "out of memory recovering %s", p->path);
                goto out;
            }
            keep[(size_t)r * m->spr + i] = 1;
        }
    }
    /* oldest seal first: the store's list (head = most recent seal) in seal order; a block new
     * to the index is a GET at index 0 to the eviction policy (MAT: the block's first access) */
    for (uint32_t r = 0; r < nrec; r++) {
        const unsigned char *h = all + (size_t)rs[r].region * p->hb;
        uint32_t reg = rs[r].region, nv = 0, part = frt_rhdr_flags(h);
        if (m->nparts && part >= m->nparts) { /* a partition this run does not have */
            for (uint32_t i = 0; i < m->spr; i++) p->recovery_dropped += keep[(size_t)r * m->spr + i];
            continue;
        }
        for (uint32_t i = 0; i < m->spr; i++) {
            if (!keep[(size_t)r * m->spr + i]) continue;
            uint64_t key;
            uint32_t seg;
            frt_rhdr_get(h, i, &key, &seg);
            if (!frt_regions_find(m, key) && m->ev->get) {
                struct flashrt_access a = {.key = key, .offset = 0, .size = FRT_SEGMENT_BYTES, .op = 2};
                if (m->ev->get(m->ev_st, &a, 0, FRT_NONE, err, errlen) != 0) goto out;
            }
            frt_regions_add(m, key, seg, (uint32_t)(reg * m->spr + i), 0.0);
            frt_regions_find(m, key)->recovered = 1;
            nv++;
        }
        if (nv == 0) continue;
        m->reg[reg].fill = (uint32_t)m->spr;
        m->reg[reg].part = m->nparts ? part : 0;
        if (m->nparts) m->held[part]++;
        frt_regions_push_head(m, reg);
        used[reg] = 1;
        p->seq[reg] = rs[r].seq;
        p->recovered_regions++;
        p->recovered_segments += nv;
    }
    /* the clean regions, the lowest taken first (as a cold store) */
    m->nclean = 0;
    for (uint64_t r = m->nregions; r-- > 0;)
        if (!used[r]) m->clean[m->nclean++] = (uint32_t)r;
    rc = 0;
out:
    if (claimed.cap) frt_map64_free(&claimed);
    frt_map64_free(&p->latest);
    free(all);
    free(rs);
    free(keep);
    free(used);
    return rc;
}
