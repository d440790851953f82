/* probe.c: Baleen's "small benchmark" for the disk model's constants.
 * t_seek: mean latency of random 4 KiB reads at 4 KiB-aligned offsets over the whole device,
 * minus their transfer time; bandwidth: sequential 1 MiB reads. O_DIRECT when the device
 * allows it (otherwise the page cache makes both numbers optimistic; direct_io says which). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/device.h"
#include "flashrt.h"
#include "util/internal.h"

int flashrt_probe_disk(const char *path, unsigned reads, uint64_t seq_bytes,
                       struct flashrt_probe *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int direct;
    int fd = frt_open_dev(path, O_RDONLY, FLASHRT_DIRECT_AUTO, &direct, err, errlen);
    if (fd < 0) return -1;
    uint64_t size;
    int bd;
    if (frt_dev_size(fd, &size, &bd) != 0) {
        close(fd);
        return frt_seterr(err, errlen, "%s: not a file or block device", path);
    }
    if (size < 2 * FRT_ALIGN) {
        close(fd);
        return frt_seterr(err, errlen, "%s: too small to probe (%llu bytes)", path, (unsigned long long)size);
    }
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    const size_t chunk = 1u << 20;
    void *buf = NULL;
    if (posix_memalign(&buf, FRT_ALIGN, chunk) != 0) {
        close(fd);
        return frt_seterr(err, errlen, "out of memory");
    }
    uint64_t blocks = size / FRT_ALIGN, rng = 0x243F6A8885A308D3ull;
    struct frt_vec lat = {0};
    double total = 0;
    for (unsigned i = 0; i < reads; i++) {
        rng = frt_mix64(rng);
        uint64_t off = (rng % blocks) * FRT_ALIGN;
        double t0 = frt_now();
        if (frt_pread_full(fd, buf, FRT_ALIGN, off) != 0) {
            free(buf);
            frt_vec_free(&lat);
            close(fd);
            return frt_seterr(err, errlen, "%s: read failed: %s", path, strerror(errno));
        }
        double dt = frt_now() - t0;
        total += dt;
        frt_vec_push(&lat, dt);
    }
    uint64_t want = seq_bytes < size ? seq_bytes : size;
    want -= want % chunk;
    if (want == 0) want = (size / FRT_ALIGN) * FRT_ALIGN < chunk ? (size / FRT_ALIGN) * FRT_ALIGN : chunk;
    double t0 = frt_now();
    uint64_t done = 0;
    while (done < want) {
        size_t n = want - done < chunk ? (size_t)(want - done) : chunk;
        if (frt_pread_full(fd, buf, n, done) != 0) break;
        done += n;
    }
    double secs = frt_now() - t0;
    free(buf);
    close(fd);
    out->bandwidth_bytes_per_s = secs > 0 ? (double)done / secs : 0;
    double mean = reads ? total / reads : 0;
    double xfer = out->bandwidth_bytes_per_s > 0 ? FRT_ALIGN / out->bandwidth_bytes_per_s : 0;
    out->t_seek_s = mean > xfer ? mean - xfer : 0;
    out->read_latency_s_p50 = frt_percentile(&lat, 0.5);
    frt_vec_free(&lat);
    out->random_reads = reads;
    out->sequential_bytes = done;
    out->device_bytes = size;
    out->direct_io = direct;
    if (!(out->bandwidth_bytes_per_s > 0)) return frt_seterr(err, errlen, "%s: sequential reads failed", path);
    return 0;
}
