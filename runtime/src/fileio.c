/* fileio.c: the err/errlen convention (frt_seterr) and atomic file output. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
