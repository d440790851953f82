/* util.c: errors, hash map, timing arrays, files. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flashrt.h"
#include "internal.h"

int frt_seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- map ---- */

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

int frt_map_init(struct frt_map *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expected * 2 + 1);
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->vals = malloc(m->cap * sizeof *m->vals);
    m->used = calloc(m->cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        frt_map_free(m);
        return -1;
    }
    return 0;
}

void frt_map_free(struct frt_map *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static inline size_t slot_of(const struct frt_map *m, uint64_t key) {
    return (size_t)frt_mix64(key) & (m->cap - 1);
}

uint32_t *frt_map_get(const struct frt_map *m, uint64_t key) {
    size_t i = slot_of(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) return &m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static int grow(struct frt_map *m) {
    struct frt_map n;
    if (frt_map_init(&n, m->cap) != 0) return -1; /* doubles the capacity */
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i] && frt_map_put(&n, m->keys[i], m->vals[i]) != 0) {
            frt_map_free(&n);
            return -1;
        }
    frt_map_free(m);
    *m = n;
    return 0;
}

int frt_map_put(struct frt_map *m, uint64_t key, uint32_t val) {
    if ((m->len + 1) * 4 > m->cap * 3 && grow(m) != 0) return -1;
    size_t i = slot_of(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->used[i] = 1;
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return 0;
}

int frt_map_del(struct frt_map *m, uint64_t key) {
    size_t mask = m->cap - 1, i = slot_of(m, key);
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
    if (!m->used[i]) return -1;
    /* backward-shift deletion keeps probe sequences intact without tombstones */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j]) break;
        size_t home = slot_of(m, m->keys[j]);
        /* move j into the hole i if home is not cyclically in (i, j] */
        int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->used[i] = 0;
    m->len--;
    return 0;
}

/* ---- timing arrays ---- */

void frt_vec_push(struct frt_vec *a, double x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 1024;
        double *v = realloc(a->v, nc * sizeof *v);
        if (!v) return; /* a lost sample only loses precision of a percentile */
        a->v = v;
        a->cap = nc;
    }
    a->v[a->n++] = x;
}

void frt_vec_free(struct frt_vec *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

double frt_percentile_sorted(const double *s, size_t n, double q) {
    if (n == 0) return NAN;
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < n ? lo + 1 : n - 1;
    double frac = pos - (double)lo;
    return s[lo] + (s[hi] - s[lo]) * frac;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double frt_percentile(struct frt_vec *a, double q) {
    if (a->n == 0) return NAN;
    qsort(a->v, a->n, sizeof(double), cmp_double);
    return frt_percentile_sorted(a->v, a->n, q);
}

/* ---- files ---- */

int frt_write_file_atomic(const char *path, const char *text, size_t n, char *err,
                          size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return frt_seterr(err, errlen, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return frt_seterr(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
    size_t w = fwrite(text, 1, n, f);
    int bad = (w != n) | (fflush(f) != 0) | (fsync(fileno(f)) != 0);
    int e = errno;
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        if (!bad) e = errno;
        unlink(tmp);
        return frt_seterr(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    return 0;
}

int frt_open_dev(const char *path, int flags, int mode, int *direct, char *err,
                 size_t errlen) {
    int fd = -1;
    *direct = 0;
    if (mode != FLASHRT_DIRECT_OFF) {
        fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            /* some file systems accept O_DIRECT at open and fail the first IO: probe */
            void *buf = NULL;
            if (posix_memalign(&buf, FRT_ALIGN, FRT_ALIGN) == 0) {
                ssize_t r = pread(fd, buf, FRT_ALIGN, 0);
                free(buf);
                if (r < 0 && errno == EINVAL) {
                    close(fd);
                    fd = -1;
                }
            }
            if (fd >= 0) *direct = 1;
        } else if (errno != EINVAL) {
            return frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
        }
        if (fd < 0 && mode == FLASHRT_DIRECT_ON)
            return frt_seterr(err, errlen, "%s: O_DIRECT is not supported here", path);
    }
    if (fd < 0) {
        fd = open(path, flags | O_CLOEXEC, 0644);
        if (fd < 0) return frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
    }
    return fd;
}

int frt_dev_size(int fd, uint64_t *size, int *is_blockdev) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    *is_blockdev = S_ISBLK(st.st_mode);
    if (S_ISBLK(st.st_mode)) {
        uint64_t b = 0;
        if (ioctl(fd, BLKGETSIZE64, &b) != 0) return -1;
        *size = b;
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        errno = ENODEV;
        return -1;
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

int frt_pread_full(int fd, void *buf, size_t n, uint64_t off) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) { /* past the end: a sparse or short file reads as zeros */
            memset(p, 0, n);
            return 0;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int frt_pwrite_full(int fd, const void *buf, size_t n, uint64_t off) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}
