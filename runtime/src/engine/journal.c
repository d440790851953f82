/* journal.c: region headers and the invalidation journal (journal.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/device.h"
#include "engine/journal.h"
#include "util/internal.h"

#define FORMAT 1u

uint64_t frt_rhdr_bytes(uint32_t entries) {
    return (FRT_RHDR_FIXED + (uint64_t)FRT_RHDR_ENTRY * entries + 4095) / 4096 * 4096;
}

void frt_rhdr_begin(unsigned char *h, uint64_t hb, uint32_t magic, uint16_t flags, uint32_t count, uint64_t seq) {
    uint16_t fmt = FORMAT;
    memset(h, 0, hb);
    memcpy(h, &magic, 4);
    memcpy(h + 4, &fmt, 2);
    memcpy(h + 6, &flags, 2);
    memcpy(h + 8, &count, 4);
    memcpy(h + 16, &seq, 8);
}

void frt_rhdr_set(unsigned char *h, uint32_t i, uint64_t key, uint32_t aux) {
    memcpy(h + FRT_RHDR_FIXED + FRT_RHDR_ENTRY * i, &key, 8);
    memcpy(h + FRT_RHDR_FIXED + FRT_RHDR_ENTRY * i + 8, &aux, 4);
}

void frt_rhdr_get(const unsigned char *h, uint32_t i, uint64_t *key, uint32_t *aux) {
    memcpy(key, h + FRT_RHDR_FIXED + FRT_RHDR_ENTRY * i, 8);
    memcpy(aux, h + FRT_RHDR_FIXED + FRT_RHDR_ENTRY * i + 8, 4);
}

uint16_t frt_rhdr_flags(const unsigned char *h) {
    uint16_t f;
    memcpy(&f, h + 6, 2);
    return f;
}

static uint32_t checksum(const unsigned char *h, uint32_t count) {
    uint64_t x = 0;
    memcpy(&x, h + 16, 8); /* seal_seq */
    x = frt_mix64(x ^ count);
    for (uint32_t i = 0; i < count; i++) {
        uint64_t k;
        uint32_t v;
        frt_rhdr_get(h, i, &k, &v);
        x = frt_mix64(x ^ k) + v;
    }
    return (uint32_t)(x ^ (x >> 32));
}

void frt_rhdr_finish(unsigned char *h) {
    uint32_t count, sum;
    memcpy(&count, h + 8, 4);
    sum = checksum(h, count);
    memcpy(h + 12, &sum, 4);
}

static int cmp_rec(const void *a, const void *b) {
    const struct frt_rhdr_rec *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq ? 1 : (x->region > y->region) - (x->region < y->region);
}

int frt_rhdr_scan(int fd, const char *path, uint64_t off, uint32_t n, uint64_t hb, uint32_t magic, uint32_t count,
                  unsigned char **all, struct frt_rhdr_rec **recs, uint32_t *nrec, char *err, size_t errlen) {
    *all = NULL;
    *recs = NULL;
    *nrec = 0;
    size_t bytes = (size_t)n * hb;
    /* aligned: the device may be open with O_DIRECT */
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, bytes ? bytes : 4096) != 0 || !(*recs = malloc((n ? n : 1) * sizeof **recs))) {
        free(buf);
        return frt_seterr(err, errlen, "out of memory recovering %s", path);
    }
    *all = buf;
    size_t got = 0;
    if (frt_pread_upto(fd, *all, bytes, off, &got) != 0 || got != bytes)
        return frt_seterr(err, errlen, "%s: cannot read the region headers: %s", path,
                          strerror(got != bytes && errno == 0 ? EIO : errno));
    for (uint32_t s = 0; s < n; s++) {
        const unsigned char *h = *all + (size_t)s * hb;
        uint32_t mg, cnt, sum;
        uint16_t fmt;
        uint64_t seq;
        memcpy(&mg, h, 4);
        memcpy(&fmt, h + 4, 2);
        memcpy(&cnt, h + 8, 4);
        memcpy(&sum, h + 12, 4);
        memcpy(&seq, h + 16, 8);
        if (mg != magic || fmt != FORMAT || cnt != count || seq == 0 || checksum(h, cnt) != sum) continue;
        (*recs)[(*nrec)++] = (struct frt_rhdr_rec){seq, s};
    }
    qsort(*recs, *nrec, sizeof **recs, cmp_rec);
    return 0;
}

int frt_journal_open(const char *path, int recover, struct frt_map64 *latest, uint64_t *max_seq, char *err,
                     size_t errlen) {
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | (recover ? 0 : O_TRUNC), 0644);
    if (fd < 0) return frt_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    if (!recover) return fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    uint64_t n = (uint64_t)st.st_size / FRT_JOURNAL_REC;
    if ((uint64_t)st.st_size != n * FRT_JOURNAL_REC && ftruncate(fd, (off_t)(n * FRT_JOURNAL_REC)) != 0) {
        frt_seterr(err, errlen, "%s: cannot truncate a torn record: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    unsigned char rec[FRT_JOURNAL_REC * 768];
    for (uint64_t i = 0; i < n;) {
        uint64_t m = n - i < 768 ? n - i : 768;
        size_t got = 0;
        errno = 0;
        if (frt_pread_upto(fd, rec, m * FRT_JOURNAL_REC, i * FRT_JOURNAL_REC, &got) != 0 || got != m * FRT_JOURNAL_REC) {
            frt_seterr(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
            close(fd);
            return -1;
        }
        for (uint64_t j = 0; j < m; j++) {
            uint64_t k, s;
            memcpy(&k, rec + FRT_JOURNAL_REC * j, 8);
            memcpy(&s, rec + FRT_JOURNAL_REC * j + 8, 8);
            uint64_t *old = frt_map64_get(latest, k);
            if ((!old || *old < s) && frt_map64_put(latest, k, s) != 0) {
                frt_seterr(err, errlen, "out of memory");
                close(fd);
                return -1;
            }
            if (s > *max_seq) *max_seq = s;
        }
        i += m;
    }
    return fd;
}

int frt_journal_append(int fd, uint64_t key, uint64_t seq, int sync) {
    unsigned char rec[FRT_JOURNAL_REC];
    memcpy(rec, &key, 8);
    memcpy(rec + 8, &seq, 8);
    if (frt_write_full(fd, rec, sizeof rec) != 0) return -1;
    return sync ? fdatasync(fd) : 0;
}
