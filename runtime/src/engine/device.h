/* device.h: the flash device (Navy's Device): a file or block device opened with O_DIRECT when
 * asked/possible, read and written at segment-aligned offsets from aligned buffers, with
 * fault injection and error counting; and the raw fd helpers the backing device and
 * probe-disk share. Not public. */
#ifndef FLASHRT_DEVICE_H
#define FLASHRT_DEVICE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

/* ---- raw fd helpers ---- */

/* Opens a device or file for IO with O_DIRECT when asked/possible. *direct gets the result.
 * mode: FLASHRT_DIRECT_*; flags: O_RDONLY / O_RDWR (| O_CREAT). */
int frt_open_dev(const char *path, int flags, int mode, int *direct, char *err, size_t errlen);
/* Size of a regular file or block device; -1 on error. */
int frt_dev_size(int fd, uint64_t *size, int *is_blockdev);
/* pread/pwrite until done (EINTR, short transfers); returns 0 or -1 with errno set. A read
 * past the end of the file reads zeros. */
int frt_pread_full(int fd, void *buf, size_t n, uint64_t off);
int frt_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
/* pread until n bytes or the end of the file; *got (unless NULL) the bytes read. */
int frt_pread_upto(int fd, void *buf, size_t n, uint64_t off, size_t *got);
/* write(2) until done: an append to an O_APPEND log. */
int frt_write_full(int fd, const void *buf, size_t n);

/* ---- the flash device ---- */

struct frt_device {
    int fd, direct;      /* fd is -1 when closed */
    uint64_t size;       /* bytes of the file or block device when opened */
    int is_blockdev;
    /* fault injection (tests): every Nth read / write fails with EIO; 0 = never */
    uint64_t fail_read_every, fail_write_every;
    uint64_t nreads, nwrites;           /* IOs issued (raw reads not counted) */
    uint64_t read_errors, write_errors; /* of those, failed */
};

/* Opens PATH read-write: a missing file is created, a missing /dev/ path refused. `direct`:
 * an enum flashrt_direct. Set d->fd = -1 before, so that a failed open closes cleanly. */
int frt_device_open(struct frt_device *d, const char *path, int direct, char *err,
                    size_t errlen);
/* A regular file shorter than `bytes` is extended to `bytes` (sparse); a device is left as is. */
int frt_device_reserve(struct frt_device *d, const char *path, uint64_t bytes, char *err,
                       size_t errlen);
void frt_device_close(struct frt_device *d);

/* Counts an IO of one kind; 1 (errno = EIO) when fault injection fails it: every Nth. */
static inline int frt_device_fault(uint64_t *count, uint64_t every) {
    (*count)++;
    if (every && *count % every == 0) {
        errno = EIO;
        return 1;
    }
    return 0;
}

/* The hit path reads through these: inline, so the split adds no call. 0, or -1 with errno
 * set and the error counted. */
static inline int frt_device_read(struct frt_device *d, void *buf, size_t n, uint64_t off) {
    if (frt_device_fault(&d->nreads, d->fail_read_every) || frt_pread_full(d->fd, buf, n, off) != 0) {
        d->read_errors++;
        return -1;
    }
    return 0;
}

static inline int frt_device_write(struct frt_device *d, const void *buf, size_t n,
                                   uint64_t off) {
    if (frt_device_fault(&d->nwrites, d->fail_write_every) || frt_pwrite_full(d->fd, buf, n, off) != 0) {
        d->write_errors++;
        return -1;
    }
    return 0;
}

/* A read that bypasses fault injection and counting (--measure-raw's reference read). */
static inline int frt_device_read_raw(const struct frt_device *d, void *buf, size_t n,
                                      uint64_t off) {
    return frt_pread_full(d->fd, buf, n, off);
}

#endif
