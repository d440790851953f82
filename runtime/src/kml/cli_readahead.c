/* cli_readahead.c: `flashrt tune-readahead`: KML's readahead tuner. Every window
 * the page cache's events of one block device (the kernel's mm_filemap_add_to_page_cache
 * tracepoint, read from trace_pipe in a tracefs instance of our own, as flashml/systems/kml/collect.py
 * reads them) become the contract's five features (readahead.c), the bundle's
 * flashml_readahead_kib picks the readahead for the next window, and it is written to the
 * device's queue/read_ahead_kb. `--events` replays a CSV of events instead (windows cut by
 * its time column, exactly as flashml.features.readahead.window_features cuts them).
 *
 * The device's readahead is a system setting that outlives the process, so once the original
 * value has been read every exit path (the duration over, SIGINT, SIGTERM, an error) writes
 * it back, removes the tracing instance and unmounts a tracefs mounted here: one cleanup at
 * the end of cli_tune_readahead, reached by every path after the read. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kml/cli_readahead.h"
#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "kml/readahead.h"

/* a format: the declared readahead range (kml_settings.h) fills its two %d */
#define RA_HELP \
    "usage: flashrt tune-readahead --device DEV --bundle DIR [options]\n" \
    "       flashrt tune-readahead --events FILE --readahead-file PATH --bundle DIR [options]\n" \
    "\n" \
    "Tunes a block device's readahead with KML's model: every window the pages\n" \
    "the page cache adds from the device (the mm_filemap_add_to_page_cache tracepoint, in a\n" \
    "tracefs instance of its own) give the contract's five features (features/readahead.toml:\n" \
    "tracepoints, offset_mean, offset_std, offset_absdiff_mean, readahead_kib); the bundle's\n" \
    "flashml_readahead_kib picks the readahead, clamped to %d..%d KiB, which is written\n" \
    "to the device's queue/read_ahead_kb and read back. Windows without events are not\n" \
    "classified. On every exit (the duration over, SIGINT, SIGTERM, an error) the original\n" \
    "readahead is written back and the tracing instance removed. Live tuning needs root.\n" \
    "Exit 0, 1 on an error (named), 2 on bad options.\n" \
    "\n" \
    "options:\n" \
    "  --device DEV          the block device (/dev/loop3 or loop3; a partition's readahead\n" \
    "                        is its disk's)\n" \
    "  --bundle DIR          compiled bundle with the readahead capability (checked: sha256,\n" \
    "                        ABI, readahead contract hash)\n" \
    "  --interval-ms N       window length (default: the bundle's flashml_readahead_window_ms)\n" \
    "  --duration S          stop after S seconds (0, the default: at SIGINT or SIGTERM);\n" \
    "                        with --events, S seconds of the file's time column\n" \
    "  --log FILE            JSON lines, one per classified window: window, t (its start, s\n" \
    "                        from the first window), events, the five features, model_kib,\n" \
    "                        kib (set), clamped, set_kib (read back), wall (Unix time set)\n" \
    "  --json                a summary as one JSON object on stdout at the end\n" \
    "  --events FILE         replay: a CSV time_s,inode,page (seconds, non-decreasing) instead\n" \
    "                        of tracing; windows are cut by its time column, no waiting\n" \
    "  --readahead-file PATH the file holding the readahead in KiB instead of the device's\n" \
    "                        /sys/.../queue/read_ahead_kb (then --device may be omitted)\n" \
    "  --no-propagate        leave the files already open on the device alone (by default\n" \
    "                        each change is also given to them: the kernel copies a device's\n" \
    "                        readahead into a file only when it is opened; this resets their\n" \
    "                        readahead with POSIX_FADV_NORMAL through pidfd_getfd(2), which\n" \
    "                        also clears a POSIX_FADV_RANDOM an application set)\n"

#define TRACE_EVENT "events/filemap/mm_filemap_add_to_page_cache"

/* The one piece of global mutable state: a signal handler can reach nothing else. It only
 * records which signal came; the loops look at it (live: at least every 100 ms, the poll
 * timeout; replay: before every event) and leave through the common cleanup, so the readahead
 * is restored by ordinary code, never inside the handler. */
static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

/* ---- the readahead value ---- */

static int read_kib(const char *path, uint64_t *out) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return ERR("%s: cannot read the readahead: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ERR("%s: refused: not a regular file (the readahead is read from sysfs or a regular --readahead-file)", path);
    }
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n < 0) return ERR("%s: cannot read the readahead: %s", path, strerror(e));
    buf[n] = 0;
    size_t len = (size_t)n;
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ' || buf[len - 1] == '\r')) buf[--len] = 0;
    if (cli_parse_u64n(buf, len, out) != 0)
        return ERR("%s: expected the readahead in KiB (an integer), found '%.20s'", path, buf);
    return 0;
}

/* Writes kib and reads it back into *now; the kernel keeps whole pages, so it may read back
 * rounded down to a multiple of the page size. A regular file outside sysfs (--readahead-file)
 * is replaced whole (temporary name, rename), so a reader never finds it truncated and empty;
 * a sysfs attribute (also S_ISREG) takes the value in one write. */
static int write_kib(const char *path, uint64_t kib, uint64_t *now) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)kib);
    struct stat st;
    struct statfs fs;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && statfs(path, &fs) == 0 && fs.f_type != 0x62656572 /* SYSFS_MAGIC */) {
        char err[FLASHRT_ERR_LEN];
        if (frt_write_file_atomic(path, buf, (size_t)n, err, sizeof err) != 0)
            return ERR("cannot set the readahead to %llu KiB: %s", (unsigned long long)kib, err);
    } else {
        int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd < 0) return ERR("%s: cannot set the readahead: %s", path, strerror(errno));
        ssize_t w = write(fd, buf, (size_t)n);
        int e = errno;
        if (close(fd) != 0 && w == n) { w = -1; e = errno; }
        if (w != n) return ERR("%s: cannot set the readahead to %llu KiB: %s", path, (unsigned long long)kib, w < 0 ? strerror(e) : "short write");
    }
    if (read_kib(path, now) != 0) return 1;
    uint64_t page_kib = (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
    if (page_kib == 0) page_kib = 1;
    if (*now > kib || *now + page_kib <= kib)
        return ERR("%s: set the readahead to %llu KiB but it reads back %llu", path, (unsigned long long)kib, (unsigned long long)*now);
    return 0;
}

/* ---- the readahead of the files already open on the device ---- */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* The kernel copies a device's readahead into each file's own readahead state when the file
 * is opened (file_ra_state_init), so a new read_ahead_kb reaches only files opened after it;
 * a database keeps its files open for its life (measured: db_bench readrandom stays at the
 * readahead it started with). So after every change, each process's descriptors of files on
 * the device (or of the device itself) are duplicated with pidfd_getfd(2), which shares the
 * open file description, and POSIX_FADV_NORMAL resets that file's readahead to the device's
 * (mm/fadvise.c: file->f_ra.ra_pages = bdi->ra_pages; mmap faults read the same state). It
 * also clears a POSIX_FADV_RANDOM the application had set: --no-propagate leaves open files
 * alone. Returns the files updated; *errors counts descriptors that could not be. */
static uint64_t propagate(unsigned major, unsigned minor, uint64_t *errors) {
    const dev_t want = makedev(major, minor);
    const pid_t self = getpid();
    uint64_t updated = 0;
    DIR *proc = opendir("/proc");
    if (!proc) {
        (*errors)++;
        return 0;
    }
    struct dirent *pe;
    while ((pe = readdir(proc)) != NULL) {
        char *end;
        long pid = strtol(pe->d_name, &end, 10);
        if (*end || pid <= 0 || pid == self) continue;
        char fddir[64];
        snprintf(fddir, sizeof fddir, "/proc/%ld/fd", pid);
        DIR *fds = opendir(fddir);
        if (!fds) continue; /* gone, or a kernel thread */
        int pidfd = -1;
        struct dirent *fe;
        while ((fe = readdir(fds)) != NULL) {
            long fd = strtol(fe->d_name, &end, 10);
            if (*end || fd < 0) continue;
            char link[96];
            struct stat st;
            snprintf(link, sizeof link, "%s/%ld", fddir, fd);
            if (stat(link, &st) != 0) continue;
            if (st.st_dev != want && !(S_ISBLK(st.st_mode) && st.st_rdev == want)) continue;
            if (pidfd < 0 && (pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0)) < 0) {
                (*errors)++;
                break;
            }
            int dup = (int)syscall(SYS_pidfd_getfd, pidfd, (int)fd, 0);
            if (dup < 0) {
                (*errors)++;
                continue;
            }
            if (posix_fadvise(dup, 0, 0, POSIX_FADV_NORMAL) == 0) updated++;
            else (*errors)++;
            close(dup);
        }
        if (pidfd >= 0) close(pidfd);
        closedir(fds);
    }
    closedir(proc);
    return updated;
}

/* ---- the tuner: windows -> decisions ---- */

struct kib_count {
    uint64_t kib, n;
};

struct tuner {
    const struct frt_readahead_fns *fns;
    const char *ra_path;
    FILE *log;
    struct frt_ra_acc acc;
    uint64_t current_kib;
    uint64_t windows, classified, events, clamped;
    struct kib_count *dec;
    size_t ndec, capdec;
    uint64_t infer_ns;
    /* live mode on a device: the readahead is also given to the files already open on it */
    int propagate;
    unsigned major, minor;
    uint64_t files_updated, propagate_errors, last_files;
};

/* Set the readahead (and, live, hand it to the files already open on the device). */
static int set_readahead(struct tuner *t, uint64_t kib, uint64_t *now) {
    if (write_kib(t->ra_path, kib, now) != 0) return 1;
    t->last_files = t->propagate ? propagate(t->major, t->minor, &t->propagate_errors) : 0;
    t->files_updated += t->last_files;
    return 0;
}

/* The current window's features -> the model's readahead -> the device. `t` is the window's
 * start (s from the first window), for the log. */
static int classify(struct tuner *t, uint64_t window, double start) {
    double f[FLASHML_READAHEAD_NUM_FEATURES];
    frt_ra_window(&t->acc, f, (double)t->current_kib);
    uint64_t a = frt_now_ns();
    int model = t->fns->kib(f);
    t->infer_ns += frt_now_ns() - a;
    t->classified++;
    uint64_t kib = frt_ra_clamp_kib(model);
    int clamped = (int64_t)kib != (int64_t)model;
    t->clamped += (uint64_t)clamped;
    uint64_t now;
    if (set_readahead(t, kib, &now) != 0) return 1;
    t->current_kib = now;
    size_t i = 0;
    while (i < t->ndec && t->dec[i].kib != kib) i++;
    if (i == t->ndec) {
        if (t->ndec == t->capdec) {
            size_t cap = t->capdec ? 2 * t->capdec : 16;
            struct kib_count *d = realloc(t->dec, cap * sizeof *d);
            if (!d) return ERR("out of memory");
            t->dec = d;
            t->capdec = cap;
        }
        t->dec[t->ndec++] = (struct kib_count){kib, 0};
    }
    t->dec[i].n++;
    if (t->log) {
        int first = 1;
        fputc('{', t->log);
        cli_json_int(t->log, "window", window, &first);
        cli_json_num(t->log, "t", start, &first);
        cli_json_int(t->log, "events", (uint64_t)f[FLASHML_RA_F_TRACEPOINTS], &first);
        cli_json_num(t->log, "tracepoints", f[FLASHML_RA_F_TRACEPOINTS], &first);
        cli_json_num(t->log, "offset_mean", f[FLASHML_RA_F_OFFSET_MEAN], &first);
        cli_json_num(t->log, "offset_std", f[FLASHML_RA_F_OFFSET_STD], &first);
        cli_json_num(t->log, "offset_absdiff_mean", f[FLASHML_RA_F_OFFSET_ABSDIFF_MEAN], &first);
        cli_json_num(t->log, "readahead_kib", f[FLASHML_RA_F_READAHEAD_KIB], &first);
        fprintf(t->log, ", \"model_kib\": %d", model);
        cli_json_int(t->log, "kib", kib, &first);
        fprintf(t->log, ", \"clamped\": %s", clamped ? "true" : "false");
        cli_json_int(t->log, "set_kib", now, &first);
        cli_json_int(t->log, "files", t->last_files, &first);
        struct timespec wall; /* when it was set, Unix time (to line the log up with a workload's) */
        clock_gettime(CLOCK_REALTIME, &wall);
        cli_json_num(t->log, "wall", (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9, &first);
        fputs("}\n", t->log);
        fflush(t->log); /* a line per window, readable while the tuner runs */
    }
    return 0;
}

/* ---- replay: a CSV of events ---- */

enum { RUN_ERROR = 1, RUN_STOP = 4 }; /* a row callback's returns besides 0 */
enum stop_reason { STOP_END, STOP_DURATION, STOP_SIGNAL };

struct replay {
    struct tuner *t;
    const char *path;
    double window_s, duration, t0, last;
    int64_t cur; /* the current window's index, -1 before the first event */
    enum stop_reason why;
};

/* Python's float floor division (CPython's float_floor_div: fmod, then the quotient rounded
 * to the nearest integer when it lies within 0.5 above its floor), so an event lands in the
 * window window_features puts it in even where (x / w) rounds across an integer. Both
 * operands here are >= 0 and w > 0. */
static double py_floordiv(double x, double w) {
    double mod = fmod(x, w), div = (x - mod) / w;
    if (mod != 0.0 && (w < 0) != (mod < 0)) div -= 1.0;
    if (div == 0.0) return 0.0;
    double fl = floor(div);
    return div - fl > 0.5 ? fl + 1.0 : fl;
}

static int replay_row(void *ctx, char *line, unsigned long long lineno) {
    struct replay *r = ctx;
    if (stop_signal) {
        r->why = STOP_SIGNAL;
        return RUN_STOP;
    }
    char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    if (!c1 || !c2 || strchr(c2 + 1, ','))
        return ERR("%s:%llu: expected 3 fields (time_s,inode,page)", r->path, lineno);
    *c1 = 0;
    double ts;
    uint64_t ino, page;
    if (cli_parse_double(line, &ts) != 0 || ts < 0.0)
        return ERR("%s:%llu: field 'time_s': expected a non-negative number, got '%.40s'", r->path, lineno, line);
    if (r->cur >= 0 && ts < r->last)
        return ERR("%s:%llu: field 'time_s': %.17g goes back in time (the line before: %.17g)", r->path, lineno, ts, r->last);
    if (cli_parse_u64n(c1 + 1, (size_t)(c2 - c1 - 1), &ino) != 0)
        return ERR("%s:%llu: field 'inode': expected a non-negative integer, got '%.*s'", r->path, lineno, (int)(c2 - c1 - 1 > 40 ? 40 : c2 - c1 - 1), c1 + 1);
    if (cli_parse_u64n(c2 + 1, strlen(c2 + 1), &page) != 0)
        return ERR("%s:%llu: field 'page': expected a non-negative integer, got '%.40s'", r->path, lineno, c2 + 1);
    if (r->cur < 0) r->t0 = ts;
    r->last = ts;
    if (r->duration > 0.0 && ts - r->t0 >= r->duration) {
        r->why = STOP_DURATION;
        return RUN_STOP;
    }
    double w = py_floordiv(ts - r->t0, r->window_s);
    if (!(w < 9e18)) return ERR("%s:%llu: field 'time_s': %.17g is too far from the first event", r->path, lineno, ts);
    if (r->cur >= 0 && (int64_t)w != r->cur && classify(r->t, (uint64_t)r->cur, (double)r->cur * r->window_s) != 0)
        return RUN_ERROR;
    r->cur = (int64_t)w;
    frt_ra_add(&r->t->acc, page);
    r->t->events++;
    return 0;
}

static int run_replay(struct tuner *t, const char *path, double window_s, double duration, enum stop_reason *why) {
    struct replay r = {.t = t, .path = path, .window_s = window_s, .duration = duration, .cur = -1, .why = STOP_END};
    int rc = cli_read_csv(path, "time_s,inode,page", replay_row, &r);
    *why = r.why;
    if (rc == RUN_STOP) rc = 0;
    /* the last window, as window_features flushes it (not when a signal cut it short) */
    if (rc == 0 && r.why != STOP_SIGNAL && r.cur >= 0 && frt_ra_count(&t->acc) > 0)
        rc = classify(t, (uint64_t)r.cur, (double)r.cur * window_s);
    t->windows = r.cur < 0 ? 0 : (uint64_t)r.cur + 1;
    return rc;
}

/* ---- live: trace_pipe of a tracefs instance ---- */

struct live {
    char mounted[PATH_MAX]; /* a tracefs mounted here ("" if the system's is used) */
    char instance[PATH_MAX + 128];
    int fd;                 /* trace_pipe, -1 when closed */
    int mono;               /* the instance's trace clock is CLOCK_MONOTONIC (our clock) */
    unsigned major, minor;
    uint64_t kdev;          /* major << 20 | minor: how tracepoints print a dev_t */
    uint64_t foreign;       /* lines that were not the device's events */
};

static int put(const char *dir, const char *file, const char *text) {
    char path[PATH_MAX + 512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int bad = w != (ssize_t)n;
    bad |= close(fd) != 0;
    return bad ? -1 : 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Removes what live_open made, in reverse; safe on a partly opened or closed one. */
static void live_close(struct live *lv) {
    if (lv->fd >= 0) close(lv->fd);
    lv->fd = -1;
    if (lv->instance[0]) {
        char ev[PATH_MAX + 256];
        snprintf(ev, sizeof ev, "%s/" TRACE_EVENT, lv->instance);
        put(ev, "enable", "0\n");
        if (rmdir(lv->instance) != 0)
            fprintf(stderr, "flashrt: warning: %s: cannot remove the tracing instance: %s\n", lv->instance, strerror(errno));
        lv->instance[0] = 0;
    }
    if (lv->mounted[0]) {
        if (umount(lv->mounted) != 0 || rmdir(lv->mounted) != 0)
            fprintf(stderr, "flashrt: warning: %s: cannot unmount the tracefs mounted here: %s\n", lv->mounted, strerror(errno));
        lv->mounted[0] = 0;
    }
}

static int live_open(struct live *lv) {
    const char *root = NULL;
    char tmp[PATH_MAX];
    if (is_dir("/sys/kernel/tracing/events")) root = "/sys/kernel/tracing";
    else if (is_dir("/sys/kernel/debug/tracing/events")) root = "/sys/kernel/debug/tracing";
    else {
        const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(tmp, sizeof tmp, "%s/flashrt-tracefs-XXXXXX", base);
        if (!mkdtemp(tmp)) return ERR("%s: cannot make a directory to mount tracefs on: %s", tmp, strerror(errno));
        if (mount("nodev", tmp, "tracefs", 0, NULL) != 0) {
            int e = errno;
            rmdir(tmp);
            return ERR("cannot mount tracefs at %s (needed to trace the page cache): %s", tmp, strerror(e));
        }
        snprintf(lv->mounted, sizeof lv->mounted, "%s", tmp);
        root = lv->mounted;
    }
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/" TRACE_EVENT, root);
    if (!is_dir(path)) return ERR("%s: missing: this kernel has no mm_filemap_add_to_page_cache tracepoint", path);
    snprintf(path, sizeof path, "%s/instances/flashrt-readahead-%ld", root, (long)getpid());
    if (mkdir(path, 0700) != 0) return ERR("%s: cannot make a tracing instance: %s", path, strerror(errno));
    snprintf(lv->instance, sizeof lv->instance, "%s", path);
    /* timestamps on our clock, so an event's window is the one it happened in, even when the
     * kernel hands it over late; without it (old kernels) an event counts when it is read */
    lv->mono = put(lv->instance, "trace_clock", "mono\n") == 0;
    /* the device's filesystem's pages (s_dev), and the raw device's own pages: those belong
     * to the block device's inode in the bdev pseudo filesystem (an anonymous dev 0:N) whose
     * inode number is the device's dev_t (seen on 6.x: "dev 0:3 ino 700000" for loop0) */
    char filter[160], ev[PATH_MAX + 256];
    snprintf(filter, sizeof filter, "s_dev == %llu || (s_dev < 1048576 && i_ino == %llu)\n",
             (unsigned long long)lv->kdev, (unsigned long long)lv->kdev);
    snprintf(ev, sizeof ev, "%s/" TRACE_EVENT, lv->instance);
    if (put(ev, "filter", filter) != 0) return ERR("%s/filter: cannot set '%.*s': %s", ev, (int)strlen(filter) - 1, filter, strerror(errno));
    if (put(ev, "enable", "1\n") != 0) return ERR("%s/enable: cannot enable the tracepoint: %s", ev, strerror(errno));
    char pipe[PATH_MAX + 256];
    snprintf(pipe, sizeof pipe, "%s/trace_pipe", lv->instance);
    lv->fd = open(pipe, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (lv->fd < 0) return ERR("%s: cannot open: %s", pipe, strerror(errno));
    return 0;
}

struct live_state {
    struct tuner *t;
    struct live *lv;
    double start, window_s, window_end;
    uint64_t window;
};

/* Ends the current window (classified when it had events) and starts the next. */
static int next_window(struct live_state *s) {
    int rc = 0;
    if (frt_ra_count(&s->t->acc) > 0) rc = classify(s->t, s->window, (double)s->window * s->window_s);
    s->t->windows++;
    s->window++;
    s->window_end = s->start + (double)(s->window + 1) * s->window_s;
    return rc;
}

static int live_line(struct live_state *s, const char *line) {
    struct frt_ra_event ev;
    struct live *lv = s->lv;
    if (frt_ra_parse_line(line, &ev) != 0 ||
        !((ev.major == lv->major && ev.minor == lv->minor) || (ev.major == 0 && ev.ino == lv->kdev))) {
        if (*line) lv->foreign++;
        return 0;
    }
    /* an event stamped after the window's end opens the windows up to its own */
    while (lv->mono && ev.t >= s->window_end)
        if (next_window(s) != 0) return 1;
    frt_ra_add(&s->t->acc, ev.ofs / FLASHML_READAHEAD_PAGE_BYTES);
    s->t->events++;
    return 0;
}

/* Reads what trace_pipe has now (non-blocking) and handles its whole lines. */
static int live_drain(struct live_state *s, char *buf, size_t cap, size_t *have) {
    for (;;) {
        ssize_t n = read(s->lv->fd, buf + *have, cap - 1 - *have);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return 0;
        if (n < 0) return ERR("%s/trace_pipe: read failed: %s", s->lv->instance, strerror(errno));
        if (n == 0) return 0;
        *have += (size_t)n;
        buf[*have] = 0;
        char *p = buf, *nl;
        while ((nl = strchr(p, '\n'))) {
            *nl = 0;
            if (live_line(s, p) != 0) return 1;
            p = nl + 1;
        }
        *have -= (size_t)(p - buf);
        memmove(buf, p, *have);
        if (*have == cap - 1) { /* a line longer than the buffer: not an event of ours */
            s->lv->foreign++;
            *have = 0;
        }
    }
}

static int run_live(struct tuner *t, struct live *lv, double window_s, double duration, enum stop_reason *why) {
    const size_t cap = 1 << 16;
    char *buf = malloc(cap);
    if (!buf) return ERR("out of memory");
    size_t have = 0;
    int rc = 0;
    struct live_state s = {.t = t, .lv = lv, .start = frt_now(), .window_s = window_s};
    s.window_end = s.start + window_s;
    const double stop_at = duration > 0.0 ? s.start + duration : INFINITY;
    for (;;) {
        if (stop_signal) { *why = STOP_SIGNAL; break; }
        double now = frt_now();
        if (now >= s.window_end) {
            if ((rc = live_drain(&s, buf, cap, &have)) != 0) break;
            /* the drain may have closed it already (an event past its end) */
            if (now >= s.window_end && (rc = next_window(&s)) != 0) break;
            continue;
        }
        if (now >= stop_at) { *why = STOP_DURATION; break; }
        /* wait for events, at most until the window's end, the stop, or 100 ms: a signal
         * that arrives just before poll() is seen within 100 ms */
        double until = s.window_end < stop_at ? s.window_end : stop_at;
        int ms = (int)ceil((until - now) * 1000.0);
        if (ms > 100) ms = 100;
        if (ms < 1) ms = 1;
        struct pollfd pfd = {.fd = lv->fd, .events = POLLIN};
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno != EINTR) { rc = ERR("%s/trace_pipe: poll failed: %s", lv->instance, strerror(errno)); break; }
        /* read whether poll said so or not: the kernel wakes trace_pipe's readers lazily */
        if ((rc = live_drain(&s, buf, cap, &have)) != 0) break;
    }
    free(buf);
    return rc;
}

/* ---- the command ---- */

/* DEV (a path, or a name under /dev) -> its major:minor and the file holding its disk's
 * readahead (a partition has no queue of its own: its parent's). */
static int resolve_device(const char *dev, char *path, size_t pathlen, unsigned *major, unsigned *minor, char *ra, size_t ralen) {
    snprintf(path, pathlen, "%s%s", strchr(dev, '/') ? "" : "/dev/", dev);
    struct stat st;
    if (stat(path, &st) != 0) return ERR("%s: no such device (%s)", path, strerror(errno));
    if (!S_ISBLK(st.st_mode)) return ERR("%s: not a block device", path);
    *major = major(st.st_rdev);
    *minor = minor(st.st_rdev);
    snprintf(ra, ralen, "/sys/dev/block/%u:%u/queue/read_ahead_kb", *major, *minor);
    if (access(ra, F_OK) == 0) return 0;
    snprintf(ra, ralen, "/sys/dev/block/%u:%u/../queue/read_ahead_kb", *major, *minor);
    if (access(ra, F_OK) == 0) return 0;
    return ERR("%s: no queue/read_ahead_kb under /sys/dev/block/%u:%u or its parent", path, *major, *minor);
}

int cli_tune_readahead(int argc, char **argv) {
    if (cli_want_help(argc, argv)) {
        printf(RA_HELP, FRT_KML_READAHEAD_KIB_MIN, FRT_KML_READAHEAD_KIB_MAX);
        return 0;
    }
    const char *dev = NULL, *bundle = NULL, *log_path = NULL, *events = NULL, *ra_file = NULL;
    uint64_t interval_ms = 0;
    double duration = 0.0;
    int as_json = 0, no_propagate = 0;
    for (int i = 0; i < argc; i++) {
        const char *v, *a = argv[i];
#define OPT(name) (v = cli_optval(argc, argv, &i, name))
#define BAD(name) do { fprintf(stderr, "flashrt tune-readahead: error: %s: invalid value '%s'\n", name, v); return 2; } while (0)
#define BADR(name, what) do { fprintf(stderr, "flashrt tune-readahead: error: %s: invalid value '%s' (expected %s)\n", name, v, what); return 2; } while (0)
        if (OPT("--device")) { if (!*v) BAD("--device"); dev = v; }
        else if (OPT("--bundle")) { if (!*v) BAD("--bundle"); bundle = v; }
        else if (OPT("--interval-ms")) { if (cli_parse_uint(v, &interval_ms) || interval_ms == 0 || interval_ms > 3600000) BADR("--interval-ms", "milliseconds, an integer in [1, 3600000]"); }
        else if (OPT("--duration")) { if (cli_parse_double(v, &duration) || !(duration >= 0.0 && duration < 1e9)) BADR("--duration", "seconds in [0, 1e9); 0 = until SIGINT or SIGTERM"); }
        else if (OPT("--log")) { if (!*v) BAD("--log"); log_path = v; }
        else if (OPT("--events")) { if (!*v) BAD("--events"); events = v; }
        else if (OPT("--readahead-file")) { if (!*v) BAD("--readahead-file"); ra_file = v; }
        else if (!strcmp(a, "--json")) as_json = 1;
        else if (!strcmp(a, "--no-propagate")) no_propagate = 1;
        else {
            fprintf(stderr, "flashrt tune-readahead: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
#undef BAD
#undef BADR
#undef OPT
    }
    const char *missing = !bundle ? "--bundle" : !events && !dev ? "--device (or --events with --readahead-file)"
                        : !dev && !ra_file ? "--device or --readahead-file" : NULL;
    if (missing) { fprintf(stderr, "flashrt tune-readahead: error: %s is required (see --help)\n", missing); return 2; }

    /* no output is an input, nothing is a FIFO */
    struct cli_guard g;
    cli_guard_init(&g, "tune-readahead");
    cli_guard_add(&g, "--events", events, CLI_IN);
    cli_guard_add_bundle(&g, "--bundle", bundle);
    cli_guard_add(&g, "--readahead-file", ra_file, CLI_OUT);
    cli_guard_add(&g, "--log", log_path, CLI_OUT);
    if (cli_guard_check(&g)) return 1;

    struct live lv = {.fd = -1};
    char devpath[PATH_MAX], sys_ra[PATH_MAX + 64];
    if (dev && resolve_device(dev, devpath, sizeof devpath, &lv.major, &lv.minor, sys_ra, sizeof sys_ra) != 0) return 1;
    lv.kdev = (uint64_t)lv.major << 20 | lv.minor;
    if (!events && geteuid() != 0)
        return ERR("%s: tracing the page cache (tracefs) and setting the readahead need root; --events replays a file without it", devpath);
    char err[FLASHRT_ERR_LEN] = "";
    flashrt_policy *pol = frt_readahead_load(bundle, err, sizeof err);
    if (!pol) return ERR("%s", err);
    struct tuner t = {.fns = frt_policy_readahead(pol), .ra_path = ra_file ? ra_file : sys_ra,
                      .propagate = !events && !ra_file && !no_propagate, .major = lv.major,
                      .minor = lv.minor};
    frt_ra_init(&t.acc);
    if (!interval_ms) interval_ms = (uint64_t)t.fns->window_ms;
    const double window_s = (double)interval_ms / 1000.0;
    if (log_path && !(t.log = fopen(log_path, "w"))) {
        flashrt_policy_free(pol);
        return ERR("%s: cannot write: %s", log_path, strerror(errno));
    }
    /* handlers before the original readahead is read: from then on a signal must end in the
     * restore below, never in the default action (no SA_RESTART: poll returns at once) */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    uint64_t original = 0;
    int rc = read_kib(t.ra_path, &original);
    int have_original = rc == 0;
    t.current_kib = original;
    enum stop_reason why = STOP_END;
    const double wall0 = frt_now();
    if (rc == 0 && events) rc = run_replay(&t, events, window_s, duration, &why);
    else if (rc == 0) {
        rc = live_open(&lv);
        if (rc == 0) rc = run_live(&t, &lv, window_s, duration, &why);
    }
    const double wall = frt_now() - wall0;
    /* the cleanup of every path: the tracing instance (and a tracefs mounted here), then the
     * original readahead */
    live_close(&lv);
    const uint64_t final_kib = t.current_kib;
    int restored = 0;
    if (have_original) {
        uint64_t back;
        restored = set_readahead(&t, original, &back) == 0;
        if (!restored) {
            fprintf(stderr, "flashrt: error: %s: could not restore the original readahead %llu KiB\n", t.ra_path, (unsigned long long)original);
            rc = 1;
        }
    }
    if (t.log) {
        int bad = ferror(t.log) | (fclose(t.log) != 0);
        if (bad && rc == 0) rc = ERR("%s: cannot write: %s", log_path, strerror(errno));
    }
    if (rc == 0) {
        /* the decisions by KiB, ascending */
        for (size_t i = 1; i < t.ndec; i++)
            for (size_t j = i; j > 0 && t.dec[j - 1].kib > t.dec[j].kib; j--) {
                struct kib_count x = t.dec[j];
                t.dec[j] = t.dec[j - 1];
                t.dec[j - 1] = x;
            }
        const char *stopped = why == STOP_END ? "end" : why == STOP_DURATION ? "duration"
                            : stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
        const double mean_ns = t.classified ? (double)t.infer_ns / (double)t.classified : NAN;
        if (as_json) {
            int first = 1;
            fputc('{', stdout);
            cli_json_str(stdout, "mode", events ? "replay" : "live", &first);
            if (dev) cli_json_str(stdout, "device", devpath, &first);
            cli_json_str(stdout, "readahead_file", t.ra_path, &first);
            cli_json_str(stdout, "policy", flashrt_policy_name(pol), &first);
            cli_json_str(stdout, "readahead_contract_hash", FLASHML_READAHEAD_CONTRACT_HASH, &first);
            cli_json_int(stdout, "interval_ms", interval_ms, &first);
            cli_json_int(stdout, "windows", t.windows, &first);
            cli_json_int(stdout, "windows_classified", t.classified, &first);
            cli_json_int(stdout, "events", t.events, &first);
            fputs(", \"decisions\": {", stdout);
            for (size_t i = 0; i < t.ndec; i++)
                printf("%s\"%llu\": %llu", i ? ", " : "", (unsigned long long)t.dec[i].kib, (unsigned long long)t.dec[i].n);
            fputc('}', stdout);
            cli_json_int(stdout, "clamped", t.clamped, &first);
            cli_json_int(stdout, "original_kib", original, &first);
            cli_json_int(stdout, "final_kib", final_kib, &first);
            fprintf(stdout, ", \"restored\": %s", restored ? "true" : "false");
            cli_json_num(stdout, "mean_inference_ns", mean_ns, &first);
            fprintf(stdout, ", \"propagate\": %s", t.propagate ? "true" : "false");
            cli_json_int(stdout, "files_updated", t.files_updated, &first);
            cli_json_int(stdout, "propagate_errors", t.propagate_errors, &first);
            if (!events) {
                cli_json_int(stdout, "other_lines", lv.foreign, &first);
                cli_json_str(stdout, "trace_clock", lv.mono ? "mono" : "read time", &first);
            }
            cli_json_str(stdout, "stopped_by", stopped, &first);
            cli_json_num(stdout, "wall_s", wall, &first);
            fputs("}\n", stdout);
        } else {
            printf("%-26s  %s\n%-26s  %llu\n%-26s  %llu\n%-26s  %llu\n", "readahead_file", t.ra_path, "windows",
                   (unsigned long long)t.windows, "windows_classified", (unsigned long long)t.classified, "events",
                   (unsigned long long)t.events);
            for (size_t i = 0; i < t.ndec; i++)
                printf("decisions %-16llu  %llu\n", (unsigned long long)t.dec[i].kib, (unsigned long long)t.dec[i].n);
            printf("%-26s  %llu (restored)\n%-26s  %.6g\n%-26s  %s\n", "original_kib", (unsigned long long)original,
                   "mean_inference_ns", mean_ns, "stopped_by", stopped);
        }
    }
    free(t.dec);
    flashrt_policy_free(pol);
    return rc;
}
