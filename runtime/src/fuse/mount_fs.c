/* mount_fs.c: `flashrt mount`: a FUSE file system (libfuse3, high-level API) whose files are
 * the backing directory's, every read served by the cache engine (engine.c) exactly as
 * `flashrt replay` serves a trace's GETs: a file's bytes are cut into 8 MiB blocks (cache key
 * file id << 24 | block index, mount_fs.h) and 128 KiB segments; a read of one block is one
 * GET access at the mount's wall-clock time, a hit read from the flash file, a miss read from
 * the backing file through the admission slot (and the bundle's prefetch) and admitted or not.
 * Writes go through to the backing file and drop the segments they touch from the cache
 * (flashrt_invalidate); a truncate drops the segments past the new end. Creating, removing
 * and renaming files, directories and links are refused (EROFS): the directory's shape is
 * the backing's.
 *
 * With a trace to record (--trace-out), every access the engine served is one line of a
 * Tectonic trace (schema 201910, its header first): block_id = the cache key, the offset and
 * size in the block, op_time = the access's time, op_name 1 (GET) for a read and 3 (PUT) for
 * a write through; written to PATH.tmp.PID and renamed to PATH when the mount ends cleanly,
 * so `flashrt replay` of it makes the engine's decisions again.
 *
 * One thread serves the kernel's requests (fuse_loop); a second waits for SIGUSR1 and writes
 * the counters. The engine is used under one mutex. Reads bypass the kernel's page cache
 * (direct_io) so that every read reaches the cache. The backing files must not change except
 * through the mount while it is mounted (the cache would not know). */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli/cli.h"
#include "fuse/mount_fs.h"
#include "util/internal.h"
#include "util/map.h"

#define BLOCK ((uint64_t)FRT_BLOCK_BYTES)
#define BLOCK_MASK ((1ull << FRT_MOUNT_FILE_SHIFT) - 1)
#define MAX_FILE_BYTES (BLOCK << FRT_MOUNT_FILE_SHIFT)

struct mfs {
    const struct frt_mount_opts *o;
    int root_fd;
    dev_t root_dev;
    flashrt *rt;
    flashrt_backing *backing;
    pthread_mutex_t mu;
    double t0;
    struct frt_map ids; /* inode -> file id */
    uint32_t next_id;
    /* the file the engine may read while one read is served (backing_read) */
    int cur_fd;
    uint64_t cur_id;
    /* counters */
    uint64_t reads, read_bytes, writes, write_bytes, truncates, invalidated, opens;
    uint64_t backend_reads, backend_read_bytes, backend_errors, engine_errors;
    uint64_t stats_written;
    atomic_int stop;
    FILE *trace; /* --trace-out's temporary file */
    char trace_tmp[4200];
    uint64_t traced;
};

/* One access of the recorded trace. */
static void record(struct mfs *m, uint64_t key, uint64_t off, uint64_t size, double t, int op) {
    if (!m->trace) return;
    fprintf(m->trace, "%llu %llu %llu %.9f %d 0 0 0\n", (unsigned long long)key, (unsigned long long)off,
            (unsigned long long)size, t, op);
    m->traced++;
}

/* An open file: its descriptor on the backing and its file id, packed into fuse's 64-bit
   fh rather than allocated, so a handle the kernel never releases (the file system unmounted
   while a file is open) leaks nothing. */
struct handle {
    int fd;
    uint32_t id;
};

static uint64_t handle_pack(int fd, uint32_t id) { return (uint64_t)id << 32 | (uint32_t)fd; }

static struct handle handle_of(const struct fuse_file_info *fi) {
    return (struct handle){(int)(uint32_t)fi->fh, (uint32_t)(fi->fh >> 32)};
}

static struct mfs *ctx(void) { return fuse_get_context()->private_data; }

/* The path below the backing directory ("/" is "."). */
static const char *rel(const char *path) { return path[1] ? path + 1 : "."; }

/* The file id of an inode; a new one when `assign`; 0 when it has none (or out of memory). */
static uint32_t file_id(struct mfs *m, const struct stat *st, int assign) {
    uint32_t *v = frt_map_get(&m->ids, (uint64_t)st->st_ino);
    if (v) return *v;
    if (!assign || m->next_id >= (1u << 31) || frt_map_put(&m->ids, (uint64_t)st->st_ino, m->next_id) != 0) return 0;
    return m->next_id++;
}

/* The engine's backing reads: bytes of block `key` of the file being served; past its end,
 * zeros (flashrt_backing_open_fn). */
static int backing_read(void *c, uint64_t key, uint64_t pos, uint8_t *buf, size_t n) {
    struct mfs *m = c;
    if ((key >> FRT_MOUNT_FILE_SHIFT) != m->cur_id || m->cur_fd < 0) {
        errno = EINVAL;
        return -1;
    }
    uint64_t off = (key & BLOCK_MASK) * BLOCK + pos;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(m->cur_fd, buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            m->backend_errors++;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    /* The flash is the cache: the page cache's copy of these bytes is dropped, so the next
     * miss of them reads the backing device again, as the engine's counters say it does. */
    if (got) (void)posix_fadvise(m->cur_fd, (off_t)off, (off_t)got, POSIX_FADV_DONTNEED);
    memset(buf + got, 0, n - got);
    m->backend_reads++;
    m->backend_read_bytes += got;
    return 0;
}

/* Drops the cached segments of file `id` that bytes [from, to) touch. */
static int invalidate(struct mfs *m, uint32_t id, uint64_t from, uint64_t to) {
    if (to > MAX_FILE_BYTES) to = MAX_FILE_BYTES;
    for (uint64_t pos = from; pos < to;) {
        uint64_t boff = pos % BLOCK, n = BLOCK - boff < to - pos ? BLOCK - boff : to - pos;
        int r = flashrt_invalidate(m->rt, (uint64_t)id << FRT_MOUNT_FILE_SHIFT | pos / BLOCK, boff, n);
        if (r < 0) {
            fprintf(stderr, "flashrt mount: %s\n", flashrt_error(m->rt));
            m->engine_errors++;
            return -1;
        }
        m->invalidated += (uint64_t)r;
        pos += n;
    }
    return 0;
}

/* ---- the counters ---- */

static int write_stats(struct mfs *m, int final, const char *stopped_by) {
    struct flashrt_metrics mt;
    flashrt_metrics(m->rt, &mt);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return -1;
    int first = 1;
    fputc('{', f);
    cli_json_str(f, "backing", m->o->backing, &first);
    cli_json_str(f, "mountpoint", m->o->mountpoint, &first);
    cli_json_str(f, "flash", m->o->cfg.flash_path, &first);
    cli_json_str(f, "policy", m->o->policy_name, &first);
    cli_json_str(f, "admission", m->o->admission, &first);
    cli_json_str(f, "eviction", m->o->eviction, &first);
    cli_json_int(f, "pid", (uint64_t)getpid(), &first);
    fprintf(f, ", \"final\": %s", final ? "true" : "false");
    if (stopped_by) cli_json_str(f, "stopped_by", stopped_by, &first);
    const struct cli_figure fig[] = {
        {"seconds", 0, frt_now() - m->t0, 0},
        /* the file system's */
        {"files", 1, 0, m->next_id - 1}, {"opens", 1, 0, m->opens}, {"reads", 1, 0, m->reads},
        {"read_bytes", 1, 0, m->read_bytes}, {"writes", 1, 0, m->writes},
        {"write_bytes", 1, 0, m->write_bytes}, {"truncates", 1, 0, m->truncates},
        {"invalidated_segments", 1, 0, m->invalidated}, {"backend_read_calls", 1, 0, m->backend_reads},
        {"backend_file_bytes", 1, 0, m->backend_read_bytes}, {"backend_errors", 1, 0, m->backend_errors},
        {"engine_errors", 1, 0, m->engine_errors},
        /* the engine's (flashrt replay's names) */
        {"accesses", 1, 0, mt.gets}, {"hits", 1, 0, mt.hits}, {"misses", 1, 0, mt.gets - mt.hits},
        {"io_hit_ratio", 0, mt.io_hit_ratio, 0}, {"byte_hit_ratio", 0, mt.byte_hit_ratio, 0},
        {"segment_hit_ratio", 0, mt.segment_hit_ratio, 0}, {"backend_ios", 1, 0, mt.backend_ios},
        {"backend_bytes", 1, 0, mt.backend_bytes}, {"admitted_segments", 1, 0, mt.admitted_segments},
        {"prefetched_segments", 1, 0, mt.prefetched_segments},
        {"flash_written_bytes", 1, 0, mt.admitted_segments * (uint64_t)FRT_SEGMENT_BYTES},
        {"evicted_regions", 1, 0, mt.evicted_regions}, {"evicted_segments", 1, 0, mt.evicted_segments},
        {"capacity_segments", 1, 0, mt.capacity_segments},
        {"flash_read_errors", 1, 0, mt.flash_read_errors}, {"flash_write_errors", 1, 0, mt.flash_write_errors},
        {"backend_dt_s", 0, mt.backend_dt_s, 0}, {"backend_wall_s", 0, mt.backend_wall_s, 0},
        {"hit_path_us_p50", 0, mt.hit_path_us_p50, 0}, {"hit_path_us_p99", 0, mt.hit_path_us_p99, 0},
        {"miss_path_us_p50", 0, mt.miss_path_us_p50, 0}, {"miss_path_us_p99", 0, mt.miss_path_us_p99, 0},
        {"direct_io", 1, 0, (uint64_t)mt.direct_io},
    };
    for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
        if (fig[i].is_int)
            cli_json_int(f, fig[i].k, fig[i].u, &first);
        else
            cli_json_num(f, fig[i].k, fig[i].d, &first);
    }
    if (m->o->trace_out) {
        cli_json_str(f, "trace_out", m->o->trace_out, &first);
        cli_json_int(f, "traced_accesses", m->traced, &first);
    }
    cli_json_int(f, "stats_written", ++m->stats_written, &first);
    fputs("}\n", f);
    if (fclose(f) != 0) {
        free(text);
        return -1;
    }
    int rc = 0;
    if (m->o->stats_out) {
        char err[FLASHRT_ERR_LEN];
        if (frt_write_file_atomic(m->o->stats_out, text, n, err, sizeof err) != 0) {
            fprintf(stderr, "flashrt mount: %s\n", err);
            rc = -1;
        }
    } else if (final) {
        fputs(text, stdout);
        fflush(stdout);
    }
    free(text);
    return rc;
}

static void *stats_thread(void *arg) {
    struct mfs *m = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    for (;;) {
        int sig;
        if (sigwait(&set, &sig) != 0) continue;
        if (atomic_load(&m->stop)) break;
        pthread_mutex_lock(&m->mu);
        write_stats(m, 0, NULL);
        pthread_mutex_unlock(&m->mu);
    }
    return NULL;
}

/* ---- the file system ---- */

static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    cfg->direct_io = 1; /* every read reaches the cache */
    cfg->kernel_cache = 0;
    return ctx();
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    if (fi) {
        const struct handle h = handle_of(fi);
        return fstat(h.fd, st) == 0 ? 0 : -errno;
    }
    return fstatat(ctx()->root_fd, rel(path), st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

static int fs_readlink(const char *path, char *buf, size_t size) {
    if (size == 0) return -EINVAL;
    ssize_t n = readlinkat(ctx()->root_fd, rel(path), buf, size - 1);
    if (n < 0) return -errno;
    buf[n] = 0;
    return 0;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
    (void)off;
    (void)fi;
    (void)flags;
    int fd = openat(ctx()->root_fd, rel(path), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL)
        if (fill(buf, e->d_name, NULL, 0, (enum fuse_fill_dir_flags)0)) break;
    int rc = errno ? -errno : 0;
    closedir(d);
    return rc;
}

static int fs_open(const char *path, struct fuse_file_info *fi) {
    struct mfs *m = ctx();
    int acc = fi->flags & O_ACCMODE;
    /* the kernel gives every write its offset (O_APPEND's too) */
    int fd = openat(m->root_fd, rel(path), acc | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_dev != m->root_dev) {
        close(fd);
        return S_ISREG(st.st_mode) ? -EXDEV : -EOPNOTSUPP; /* another file system's file; a device, FIFO */
    }
    pthread_mutex_lock(&m->mu);
    uint32_t id = file_id(m, &st, 1);
    int rc = id ? 0 : -ENOMEM;
    if (!rc && (fi->flags & O_TRUNC) && acc != O_RDONLY) {
        if (ftruncate(fd, 0) != 0) rc = -errno;
        else if (invalidate(m, id, 0, (uint64_t)st.st_size) != 0) rc = -EIO;
        m->truncates++;
    }
    m->opens += rc == 0;
    pthread_mutex_unlock(&m->mu);
    if (rc) {
        close(fd);
        return rc;
    }
    fi->fh = handle_pack(fd, id);
    fi->direct_io = 1;
    fi->keep_cache = 0;
    return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    struct mfs *m = ctx();
    const struct handle h = handle_of(fi);
    struct stat st;
    if (fstat(h.fd, &st) != 0) return -errno;
    uint64_t fsize = (uint64_t)st.st_size, pos0 = (uint64_t)off;
    if (off < 0) return -EINVAL;
    if (pos0 >= fsize || size == 0) return 0;
    if (size > fsize - pos0) size = (size_t)(fsize - pos0);
    if (pos0 + size > MAX_FILE_BYTES) return -EFBIG;
    pthread_mutex_lock(&m->mu);
    m->cur_fd = h.fd;
    m->cur_id = h.id;
    size_t done = 0;
    int rc = 0;
    while (done < size) {
        uint64_t pos = pos0 + done, boff = pos % BLOCK;
        uint64_t n = BLOCK - boff < size - done ? BLOCK - boff : size - done;
        struct flashrt_access a = {(uint64_t)h.id << FRT_MOUNT_FILE_SHIFT | pos / BLOCK, boff, n, frt_now() - m->t0,
                                   1 /* GET */, 0, 0, 0};
        struct flashrt_result res;
        if (flashrt_access(m->rt, &a, &res) != 0 || res.len != n) {
            fprintf(stderr, "flashrt mount: %s: %s\n", path, flashrt_error(m->rt));
            m->engine_errors++;
            rc = -EIO;
            break;
        }
        memcpy(buf + done, res.data, n);
        record(m, a.key, a.offset, a.size, a.time, 1);
        done += n;
    }
    m->cur_fd = -1;
    m->reads++;
    m->read_bytes += done;
    pthread_mutex_unlock(&m->mu);
    return rc ? rc : (int)done;
}

static int fs_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    struct mfs *m = ctx();
    const struct handle h = handle_of(fi);
    if (off < 0) return -EINVAL;
    if ((uint64_t)off + size > MAX_FILE_BYTES) return -EFBIG;
    pthread_mutex_lock(&m->mu);
    size_t done = 0;
    int rc = 0;
    while (done < size) {
        ssize_t r = pwrite(h.fd, buf + done, size - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : -EIO;
            break;
        }
        done += (size_t)r;
    }
    /* what was written is no longer what the cache holds */
    if (done && invalidate(m, h.id, (uint64_t)off, (uint64_t)off + done) != 0) rc = -EIO;
    if (m->trace) { /* a PUT per block written */
        double t = frt_now() - m->t0;
        for (uint64_t pos = (uint64_t)off, end = (uint64_t)off + done; pos < end;) {
            uint64_t boff = pos % BLOCK, n = BLOCK - boff < end - pos ? BLOCK - boff : end - pos;
            record(m, (uint64_t)h.id << FRT_MOUNT_FILE_SHIFT | pos / BLOCK, boff, n, t, 3);
            pos += n;
        }
    }
    m->writes++;
    m->write_bytes += done;
    pthread_mutex_unlock(&m->mu);
    return done ? (int)done : rc;
}

static int fs_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    struct mfs *m = ctx();
    if (size < 0) return -EINVAL;
    int fd = fi ? handle_of(fi).fd
                : openat(m->root_fd, rel(path), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    if (fstat(fd, &st) != 0) rc = -errno;
    else if (!S_ISREG(st.st_mode)) rc = -EINVAL;
    else if (ftruncate(fd, size) != 0) rc = -errno;
    else {
        /* bytes past the new end read as zeros if the file grows again */
        uint32_t id = file_id(m, &st, 0);
        if (id && (uint64_t)size < (uint64_t)st.st_size && invalidate(m, id, (uint64_t)size, (uint64_t)st.st_size) != 0)
            rc = -EIO;
        m->truncates++;
    }
    pthread_mutex_unlock(&m->mu);
    if (!fi) close(fd);
    return rc;
}

static int fs_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close(handle_of(fi).fd);
    return 0;
}

static int fs_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    const struct handle h = handle_of(fi);
    return (datasync ? fdatasync(h.fd) : fsync(h.fd)) == 0 ? 0 : -errno;
}

static int fs_statfs(const char *path, struct statvfs *sv) {
    (void)path;
    return fstatvfs(ctx()->root_fd, sv) == 0 ? 0 : -errno;
}

/* The directory's shape is the backing's: nothing is created, removed or renamed. */
static int ro_mode(const char *p, mode_t mode) { (void)p; (void)mode; return -EROFS; }
static int ro_path(const char *p) { (void)p; return -EROFS; }
static int ro_two(const char *a, const char *b) { (void)a; (void)b; return -EROFS; }
static int ro_rename(const char *a, const char *b, unsigned int flags) { (void)a; (void)b; (void)flags; return -EROFS; }
static int ro_mknod(const char *p, mode_t mode, dev_t dev) { (void)p; (void)mode; (void)dev; return -EROFS; }
static int ro_create(const char *p, mode_t mode, struct fuse_file_info *fi) { (void)p; (void)mode; (void)fi; return -EROFS; }
static int ro_chmod(const char *p, mode_t mode, struct fuse_file_info *fi) { (void)p; (void)mode; (void)fi; return -EROFS; }
static int ro_chown(const char *p, uid_t u, gid_t g, struct fuse_file_info *fi) { (void)p; (void)u; (void)g; (void)fi; return -EROFS; }
static int ro_utimens(const char *p, const struct timespec tv[2], struct fuse_file_info *fi) { (void)p; (void)tv; (void)fi; return -EROFS; }

static const struct fuse_operations OPS = {
    .init = fs_init,
    .getattr = fs_getattr,
    .readlink = fs_readlink,
    .readdir = fs_readdir,
    .open = fs_open,
    .read = fs_read,
    .write = fs_write,
    .truncate = fs_truncate,
    .release = fs_release,
    .fsync = fs_fsync,
    .statfs = fs_statfs,
    .mknod = ro_mknod,
    .mkdir = ro_mode,
    .unlink = ro_path,
    .rmdir = ro_path,
    .symlink = ro_two,
    .rename = ro_rename,
    .link = ro_two,
    .chmod = ro_chmod,
    .chown = ro_chown,
    .utimens = ro_utimens,
    .create = ro_create,
};

/* ---- mount and serve ---- */

static void tell(int ready_fd, const char *msg) {
    if (ready_fd < 0) return;
    size_t n = strlen(msg);
    while (n) {
        ssize_t w = write(ready_fd, msg, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        msg += w;
        n -= (size_t)w;
    }
}

/* An error before the mount serves: printed, and told to a waiting parent. */
static int fail(int ready_fd, const char *msg) {
    fprintf(stderr, "flashrt: error: %s\n", msg);
    tell(ready_fd, msg);
    return 1;
}

int frt_mount_run(const struct frt_mount_opts *o, int ready_fd) {
    /* SIGUSR1 is the counters thread's only: blocked before anything is mounted, so one sent
     * as soon as the mount appears waits for the thread instead of ending the process */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    struct mfs *m = calloc(1, sizeof *m);
    if (!m) return fail(ready_fd, "out of memory");
    m->o = o;
    m->cur_fd = -1;
    m->root_fd = -1;
    m->next_id = 1;
    m->t0 = frt_now();
    atomic_init(&m->stop, 0);
    pthread_mutex_init(&m->mu, NULL);
    char err[FLASHRT_ERR_LEN], msg[FLASHRT_ERR_LEN + 4200];
    int rc = 1;
    struct fuse *f = NULL;
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    int mounted = 0, handlers = 0;
    if (frt_map_init(&m->ids, 64) != 0) {
        rc = fail(ready_fd, "out of memory");
        goto out;
    }
    m->root_fd = open(o->backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat rst;
    if (m->root_fd < 0 || fstat(m->root_fd, &rst) != 0) {
        snprintf(msg, sizeof msg, "BACKING_DIR %s: %s", o->backing, strerror(errno));
        rc = fail(ready_fd, msg);
        goto out;
    }
    m->root_dev = rst.st_dev;
    m->backing = flashrt_backing_open_fn(backing_read, m, o->backing, err, sizeof err);
    if (!m->backing) {
        rc = fail(ready_fd, err);
        goto out;
    }
    m->rt = flashrt_open(&o->cfg, o->policy, m->backing, err, sizeof err);
    if (!m->rt) {
        rc = fail(ready_fd, err);
        goto out;
    }
    if (o->trace_out) {
        snprintf(m->trace_tmp, sizeof m->trace_tmp, "%s.tmp.%ld", o->trace_out, (long)getpid());
        int tfd = open(m->trace_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        m->trace = tfd >= 0 ? fdopen(tfd, "w") : NULL;
        if (!m->trace) {
            snprintf(msg, sizeof msg, "--trace-out %s: %s", m->trace_tmp, strerror(errno));
            if (tfd >= 0) close(tfd);
            m->trace_tmp[0] = 0;
            rc = fail(ready_fd, msg);
            goto out;
        }
        fputs("#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n", m->trace);
    }
    /* auto_unmount: fusermount3 stays beside the mount and unmounts it when this process ends
     * in any way (kill -9 included) */
    if (fuse_opt_add_arg(&args, "flashrt") != 0 || fuse_opt_add_arg(&args, "-o") != 0 ||
        fuse_opt_add_arg(&args, "fsname=flashrt,subtype=flashrt,default_permissions,auto_unmount") != 0) {
        rc = fail(ready_fd, "out of memory");
        goto out;
    }
    f = fuse_new(&args, &OPS, sizeof OPS, m);
    if (!f) {
        rc = fail(ready_fd, "cannot start the FUSE file system (libfuse's message above)");
        goto out;
    }
    if (fuse_mount(f, o->mountpoint) != 0) {
        snprintf(msg, sizeof msg, "MOUNTPOINT %s: cannot mount it (libfuse's message above; it needs /dev/fuse and fusermount3)",
                 o->mountpoint);
        rc = fail(ready_fd, msg);
        goto out;
    }
    mounted = 1;
    struct fuse_session *se = fuse_get_session(f);
    if (fuse_set_signal_handlers(se) != 0) {
        rc = fail(ready_fd, "cannot set the signal handlers");
        goto out;
    }
    handlers = 1;
    pthread_t th;
    int have_th = pthread_create(&th, NULL, stats_thread, m) == 0;
    if (ready_fd >= 0) {
        tell(ready_fd, "ok\n");
        close(ready_fd);
        setsid();
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
            dup2(nul, 2);
            close(nul);
        }
    } else {
        fprintf(stderr, "flashrt mount: serving %s at %s (pid %ld)\n", o->backing, o->mountpoint, (long)getpid());
    }
    int lr = fuse_loop(f);
    if (have_th) {
        atomic_store(&m->stop, 1);
        pthread_kill(th, SIGUSR1);
        pthread_join(th, NULL);
    }
    /* the recorded trace whole, before the counters that name it */
    int tw = 0;
    if (m->trace) {
        tw = fclose(m->trace) != 0 || (lr >= 0 && rename(m->trace_tmp, o->trace_out) != 0);
        if (tw) fprintf(stderr, "flashrt mount: --trace-out %s: %s\n", o->trace_out, strerror(errno));
        m->trace = NULL;
        if (!tw && lr >= 0) m->trace_tmp[0] = 0;
    }
    pthread_mutex_lock(&m->mu);
    int sw = write_stats(m, 1, lr < 0 ? "error" : "unmount or signal");
    pthread_mutex_unlock(&m->mu);
    rc = lr < 0 || sw != 0 || tw ? 1 : 0;
    if (lr < 0) fprintf(stderr, "flashrt mount: the FUSE loop failed: %s\n", strerror(-lr));
out:
    if (handlers) fuse_remove_signal_handlers(fuse_get_session(f));
    if (mounted) fuse_unmount(f);
    if (f) fuse_destroy(f);
    fuse_opt_free_args(&args);
    if (m->trace) fclose(m->trace);
    if (m->trace_tmp[0]) unlink(m->trace_tmp); /* never half a trace under its name */
    flashrt_close(m->rt);
    flashrt_backing_close(m->backing);
    if (m->root_fd >= 0) close(m->root_fd);
    frt_map_free(&m->ids);
    pthread_mutex_destroy(&m->mu);
    free(m);
    return rc;
}
