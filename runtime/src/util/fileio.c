/* fileio.c: the err/errlen convention (frt_seterr) and atomic file output. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/internal.h"

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

FILE *frt_fopen_input(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) {
        frt_seterr(err, errlen, "%s: refused: it is %s, not a regular file (an input is read from a file; nothing waits on a FIFO)", path,
                   S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : S_ISCHR(st.st_mode) ? "a character device"
                   : S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "r");
    if (!f) {
        frt_seterr(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}
