/* device.c: the flash device (device.h) and the raw fd helpers (O_DIRECT probing, sizes,
 * full preads/pwrites) it shares with the backing device and probe-disk. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/device.h"
#include "flashrt.h"
#include "util/internal.h"

/* ---- raw fd helpers ---- */

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

int frt_pread_upto(int fd, void *buf, size_t n, uint64_t off, size_t *got) {
    uint8_t *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break; /* the end of the file */
        done += (size_t)r;
    }
    if (got) *got = done;
    return 0;
}

int frt_pread_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    if (frt_pread_upto(fd, buf, n, off, &got) != 0) return -1;
    if (got < n) memset((uint8_t *)buf + got, 0, n - got); /* a sparse or short file reads as zeros */
    return 0;
}

/* pwrite (off >= 0) or write (an O_APPEND log: off < 0) until done */
static int write_loop(int fd, const void *buf, size_t n, int64_t off) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t r = off >= 0 ? pwrite(fd, p, n, (off_t)off) : write(fd, p, n);
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
        if (off >= 0) off += r;
    }
    return 0;
}

int frt_pwrite_full(int fd, const void *buf, size_t n, uint64_t off) { return write_loop(fd, buf, n, (int64_t)off); }
int frt_write_full(int fd, const void *buf, size_t n) { return write_loop(fd, buf, n, -1); }

/* ---- the flash device ---- */

int frt_device_open(struct frt_device *d, const char *path, int direct, char *err,
                    size_t errlen) {
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (!exists && strncmp(path, "/dev/", 5) == 0)
        return frt_seterr(err, errlen, "%s: no such device", path);
    d->fd = frt_open_dev(path, O_RDWR | (exists ? 0 : O_CREAT), direct, &d->direct, err, errlen);
    if (d->fd < 0) return -1;
    if (frt_dev_size(d->fd, &d->size, &d->is_blockdev) != 0)
        return frt_seterr(err, errlen, "%s: not a file or block device (%s)", path, strerror(errno));
    return 0;
}

int frt_device_reserve(struct frt_device *d, const char *path, uint64_t bytes, char *err,
                       size_t errlen) {
    if (d->is_blockdev || d->size >= bytes) return 0;
    if (ftruncate(d->fd, (off_t)bytes) != 0)
        return frt_seterr(err, errlen, "%s: cannot size it to %llu bytes: %s", path,
                          (unsigned long long)bytes, strerror(errno));
    return 0;
}

void frt_device_close(struct frt_device *d) {
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
}
