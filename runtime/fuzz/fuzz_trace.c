/* fuzz_trace.c: libFuzzer target for the runtime's Tectonic trace reader (src/trace/trace.c).
 * The input is a whole trace file: opened through a memfd, read to the end (or to the first
 * error) with flashrt_trace_next. Any sanitizer report or crash is a bug; an error return is
 * the reader doing its job. A cap on accesses per input bounds op_count repeats. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flashrt.h"

#define MAX_ACCESSES 200000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz-trace", 0);
    if (fd < 0) return 0;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char err[512];
    flashrt_trace *t = flashrt_trace_open(path, err, sizeof err);
    if (t) {
        struct flashrt_access a;
        for (int n = 0; n < MAX_ACCESSES; n++) {
            int r = flashrt_trace_next(t, &a, err, sizeof err);
            if (r <= 0) break;
            /* what the reader promises about every access it returns */
            if (a.size == 0 || a.offset >= 8u * 1024 * 1024 || a.size > 8u * 1024 * 1024 - a.offset ||
                a.time != a.time)
                __builtin_trap();
        }
        (void)flashrt_trace_sample_ratio(t);
        flashrt_trace_close(t);
    }
    close(fd);
    return 0;
}
