/* cli_guard.c: what every flashrt command checks before it reads or writes a file (cli.h):
 * no output or device is one of the inputs (or another output) by device and inode after
 * links; inputs and outputs are not FIFOs, sockets or character devices (nothing blocks on
 * them); a flash/cache device is a regular file, or a block device with --allow-block-device;
 * and the exclusive (or, for a read-only backing map, shared) lock on the files a command
 * writes, whose holder a second flashrt names. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "policies/policy_internal.h"

/* The byte range whose POSIX lock carries the holder's PID (F_GETLK reports it); far past the
 * end of any file, so it never overlaps another lock. */
#define PID_LOCK_AT ((off_t)1 << 62)

void cli_guard_init(struct cli_guard *g, const char *cmd) {
    memset(g, 0, sizeof *g);
    g->cmd = cmd;
    for (size_t i = 0; i < sizeof g->locks / sizeof g->locks[0]; i++) g->locks[i].fd = -1;
}

void cli_guard_add(struct cli_guard *g, const char *opt, const char *path, int role) {
    if (!path || !*path || g->n >= (int)(sizeof g->f / sizeof g->f[0])) return;
    struct cli_guard_file *f = &g->f[g->n++];
    f->opt = opt;
    snprintf(f->path, sizeof f->path, "%s", path);
    f->role = role;
}

void cli_guard_add_suffix(struct cli_guard *g, const char *opt, const char *path, const char *suffix, int role) {
    char p[4200];
    if (!path || !*path || snprintf(p, sizeof p, "%s%s", path, suffix) >= (int)sizeof p) return;
    cli_guard_add(g, opt, p, role);
}

void cli_guard_add_bundle(struct cli_guard *g, const char *opt, const char *dir) {
    if (!dir || !*dir || !strncmp(dir, "builtin:", 8)) return;
    cli_guard_add_suffix(g, opt, dir, "/manifest.json", CLI_IN);
    cli_guard_add_suffix(g, opt, dir, "/policy.so", CLI_IN);
}

/* The file's identity: its device and inode when it exists (links followed), else its parent
 * directory's and its name. 1 when it exists, 0 when not, -1 on an error (printed). */
static int identify(const struct cli_guard *g, struct cli_guard_file *f) {
    struct stat st;
    if (stat(f->path, &st) == 0) {
        f->exists = 1;
        f->dev = st.st_dev;
        f->ino = st.st_ino;
        f->mode = st.st_mode;
        return 1;
    }
    if (errno != ENOENT) { /* unreadable (EACCES, ENOTDIR...): the command's own open reports it */
        f->unknown = 1;
        return 0;
    }
    if (lstat(f->path, &st) == 0) { /* a dangling symbolic link: writing it would create its target */
        if (f->role != CLI_IN) {
            fprintf(stderr, "flashrt %s: error: %s %s: a symbolic link to a missing file: refused\n", g->cmd, f->opt, f->path);
            return -1;
        }
        return 0;
    }
    char parent[4200];
    const char *slash = strrchr(f->path, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == f->path) snprintf(parent, sizeof parent, "/");
    else snprintf(parent, sizeof parent, "%.*s", (int)(slash - f->path), f->path);
    f->base = slash ? slash + 1 : f->path;
    if (stat(parent, &st) != 0) return 0; /* the command reports the missing folder */
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->parent_known = 1;
    return 0;
}

static int same(const struct cli_guard_file *a, const struct cli_guard_file *b) {
    if (a->unknown || b->unknown) return 0;
    if (a->exists != b->exists) return 0;
    if (a->exists) return a->dev == b->dev && a->ino == b->ino;
    return a->parent_known && b->parent_known && a->dev == b->dev && a->ino == b->ino && strcmp(a->base, b->base) == 0;
}

int cli_guard_check(struct cli_guard *g) {
    for (int i = 0; i < g->n; i++) {
        struct cli_guard_file *f = &g->f[i];
        int e = identify(g, f);
        if (e < 0) return 1;
        if (!e) continue;
        mode_t m = f->mode;
        if (S_ISFIFO(m) || S_ISSOCK(m) || S_ISCHR(m)) {
            fprintf(stderr, "flashrt %s: error: %s %s: refused: it is %s (flashrt reads and writes regular files%s)\n", g->cmd, f->opt,
                    f->path, frt_file_kind(m), f->role == CLI_DEV ? " or, with --allow-block-device, a block device" : "");
            return 1;
        }
        if (f->role == CLI_OUT && (S_ISDIR(m) || S_ISBLK(m))) {
            fprintf(stderr, "flashrt %s: error: %s %s: refused: it is %s, not a file to write\n", g->cmd, f->opt, f->path, frt_file_kind(m));
            return 1;
        }
        if (f->role == CLI_DEV && S_ISBLK(m) && !g->allow_block) {
            fprintf(stderr, "flashrt %s: error: %s %s: refused: a block device (its contents would be overwritten); pass --allow-block-device to use it\n",
                    g->cmd, f->opt, f->path);
            return 1;
        }
        if (f->role == CLI_DEV && !S_ISREG(m) && !S_ISBLK(m)) {
            fprintf(stderr, "flashrt %s: error: %s %s: refused: it is %s, not a file or block device\n", g->cmd, f->opt, f->path, frt_file_kind(m));
            return 1;
        }
    }
    for (int i = 0; i < g->n; i++)
        for (int j = i + 1; j < g->n; j++) {
            const struct cli_guard_file *a = &g->f[i], *b = &g->f[j];
            if ((a->role == CLI_IN && b->role == CLI_IN) || !same(a, b)) continue;
            const struct cli_guard_file *w = a->role != CLI_IN ? a : b, *o = w == a ? b : a;
            fprintf(stderr, "flashrt %s: error: %s %s and %s %s are the same file: refused (writing %s would %s)\n", g->cmd,
                    w->opt, w->path, o->opt, o->path, w->opt, o->role == CLI_IN ? "destroy the input" : "write one file twice");
            return 1;
        }
    return 0;
}

/* The PID of a flashrt holding a lock on fd's file (F_GETLK on PID_LOCK_AT), 0 if none. */
static long holder(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = PID_LOCK_AT, .l_len = 1};
    if (fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type == F_UNLCK) return 0;
    return (long)fl.l_pid;
}

int cli_guard_lock(struct cli_guard *g, const char *opt, const char *path, int exclusive, int create) {
    if (!path || !*path) return 0;
    size_t k = 0;
    while (k < sizeof g->locks / sizeof g->locks[0] && g->locks[k].fd >= 0) k++;
    if (k == sizeof g->locks / sizeof g->locks[0]) return ERR("internal: too many locks");
    struct stat st;
    int existed = stat(path, &st) == 0;
    if (!existed && !create) return 0; /* nothing to lock: the command reports the missing file */
    if (!existed && strncmp(path, "/dev/", 5) == 0) return ERR("%s: no such device (%s)", path, opt);
    int fd = open(path, (exclusive ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (existed ? 0 : O_CREAT | O_EXCL), 0644);
    if (fd < 0 && !existed && errno == EEXIST) /* created meanwhile by another */
        fd = open(path, (exclusive ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644), existed = 1;
    if (fd < 0) return ERR("%s %s: cannot open: %s", opt, path, strerror(errno));
    struct stat now;
    if (fstat(fd, &now) != 0 || (existed && (now.st_dev != st.st_dev || now.st_ino != st.st_ino)) ||
        !(S_ISREG(now.st_mode) || (S_ISBLK(now.st_mode) && g->allow_block))) {
        close(fd);
        return ERR("%s %s: refused: it changed while flashrt checked it (now %s)", opt, path, frt_file_kind(now.st_mode));
    }
    /* the POSIX lock first (it carries the PID), then the flock (the exclusion) */
    struct flock fl = {.l_type = exclusive ? F_WRLCK : F_RDLCK, .l_whence = SEEK_SET, .l_start = PID_LOCK_AT, .l_len = 1};
    int busy = fcntl(fd, F_SETLK, &fl) != 0 && (errno == EAGAIN || errno == EACCES);
    if (!busy && flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) busy = errno == EWOULDBLOCK;
    if (busy) {
        long pid = holder(fd);
        close(fd);
        if (!existed) unlink(path);
        if (pid > 0) return ERR("%s: in use by flashrt (pid %ld) (%s)", path, pid, opt);
        return ERR("%s: in use by another process (%s)", path, opt);
    }
    g->locks[k].fd = fd;
    g->locks[k].created = !existed && create != 2;
    snprintf(g->locks[k].path, sizeof g->locks[k].path, "%s", path);
    return 0;
}

static int hold(const char *p) {
    char held[4096];
    snprintf(held, sizeof held, "%s.held", p);
    int fd = open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    for (int i = 0; i < 600 * 200; i++) { /* at most 10 minutes */
        if (access(p, F_OK) == 0) return 0;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return ERR("FLASHRT_TEST_HOLD: %s did not appear", p);
}

int cli_guard_hold(void) {
    /* test hook: a test runs a second flashrt against a first that holds its files */
    const char *p = getenv("FLASHRT_TEST_HOLD");
    const char *at = getenv("FLASHRT_TEST_HOLD_AT");
    if (!p || !*p || (at && *at)) return 0;
    return hold(p);
}

unsigned long long cli_guard_hold_at(void) {
    /* test hook: a test kills a replay in the middle of its run */
    const char *p = getenv("FLASHRT_TEST_HOLD");
    const char *at = getenv("FLASHRT_TEST_HOLD_AT");
    if (!p || !*p || !at || !*at) return 0;
    return strtoull(at, NULL, 10);
}

int cli_guard_hold_now(void) {
    return hold(getenv("FLASHRT_TEST_HOLD"));
}

void cli_guard_release(struct cli_guard *g, int failed) {
    for (size_t i = 0; i < sizeof g->locks / sizeof g->locks[0]; i++) {
        if (g->locks[i].fd < 0) continue;
        /* a file this run created (O_EXCL: nothing of the user's) goes away when it fails */
        if (failed && g->locks[i].created) unlink(g->locks[i].path);
        close(g->locks[i].fd);
        g->locks[i].fd = -1;
    }
}
