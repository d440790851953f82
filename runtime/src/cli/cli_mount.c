/* cli_mount.c: `flashrt mount`: its options and the checks made before anything is mounted or
 * written; the file system itself is src/fuse/mount_fs.c (built where pkg-config finds
 * libfuse3; without it the command says so). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_mount.h"
#include "flashrt.h"
#include "fuse/mount_fs.h"
#include "policies/policy_internal.h"
#include "util/units.h"

static const char *MOUNT_HELP =
    "usage: flashrt mount BACKING_DIR MOUNTPOINT --flash PATH --flash-bytes N\n"
    "                     (--bundle DIR | --admission NAME) [options]\n"
    "\n"
    "Mounts a FUSE file system at MOUNTPOINT whose files are BACKING_DIR's, every read served\n"
    "by the cache engine exactly as `flashrt replay` serves a trace's GETs: each file is cut\n"
    "into 8 MiB blocks (cache key: the file's id, in the order files are first opened, x 2^24\n"
    "+ the block's index) and 128 KiB segments; a read of a block is one GET at the mount's\n"
    "wall-clock time, a hit read from the flash file, a miss read from the backing file with\n"
    "the admission policy's decision (and the bundle's prefetch). Writes go through to the\n"
    "backing file and drop the cached segments they touch; creating, removing or renaming\n"
    "files and directories is refused (read-only file system). The backing files must not\n"
    "change except through the mount while it is mounted.\n"
    "\n"
    "Unmounts on SIGINT, SIGTERM, SIGHUP or `fusermount3 -u MOUNTPOINT`; a kill -9 leaves\n"
    "the mount to fusermount3 (auto_unmount), which releases it. The counters (reads, hits,\n"
    "misses, backend IOs and bytes, flash writes, invalidated segments, ...) are written as\n"
    "one JSON object on unmount and on SIGUSR1.\n"
    "\n"
    "options:\n"
    "  --flash PATH           flash file (created when missing; locked while mounted); not\n"
    "                         inside BACKING_DIR or MOUNTPOINT\n"
    "  --flash-bytes N        bytes of flash to use (256MiB, 1GB; docs: Sizes)\n"
    "  --bundle DIR           policy bundle (admission + prefetch), verified as `flashrt\n"
    "                         verify` does; its admission fills the admission slot\n"
    "  --admission NAME       bundle (the --bundle's; the default with --bundle), admitall,\n"
    "                         rejectx, rejectx_block, coinflip\n"
    "  --eviction NAME        lru (default), fifo or mru over regions; mat: MAT's eviction\n"
    "                         (the model of --eviction-bundle, or else of --bundle)\n"
    "  --eviction-bundle DIR  the bundle whose eviction capability --eviction mat asks\n"
    "  --region-bytes N       flash region size (default 1MiB; a multiple of 128 KiB)\n"
    "  --direct auto|on|off   O_DIRECT on the flash file (default auto: when supported)\n"
    "  --stats-out FILE       the counters' JSON (written atomically on SIGUSR1 and at\n"
    "                         unmount); default: stdout at unmount (foreground only)\n"
    "  --trace-out FILE       record every access served as a Tectonic trace (schema 201910:\n"
    "                         block_id = the cache key, op_time = seconds since the mount, GET\n"
    "                         for a read, PUT for a write), renamed into place when the mount\n"
    "                         ends cleanly; `flashrt replay` of it makes the same decisions\n"
    "  -f, --foreground       serve in the foreground (default: return once mounted)\n";

/* PATH made absolute with its links resolved; a missing last component is resolved through
 * its folder. 0, or -1 with errno. */
static int resolve(const char *path, char out[PATH_MAX]) {
    if (realpath(path, out)) return 0;
    if (errno != ENOENT) return -1;
    char tmp[PATH_MAX], dir[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    char *slash = strrchr(tmp, '/');
    const char *base = slash ? slash + 1 : tmp;
    if (!*base) return -1;
    if (slash == tmp) snprintf(dir, sizeof dir, "/");
    else if (slash) { *slash = 0; snprintf(dir, sizeof dir, "%s", tmp); }
    else snprintf(dir, sizeof dir, ".");
    char rdir[PATH_MAX];
    if (!realpath(dir, rdir)) return -1;
    if (snprintf(out, PATH_MAX, "%s/%s", strcmp(rdir, "/") ? rdir : "", base) >= PATH_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

/* 1 when resolved path `p` is `dir` or below it. */
static int within(const char *p, const char *dir) {
    size_t n = strlen(dir);
    if (!strcmp(dir, "/")) return 1;
    return !strncmp(p, dir, n) && (p[n] == 0 || p[n] == '/');
}

/* A file the mount writes (`opt` PATH) is neither in the backing directory nor on the mount. */
static int outside(const char *opt, const char *path, const char *backing, const char *mnt) {
    char r[PATH_MAX];
    if (resolve(path, r) != 0) return ERR("%s %s: %s", opt, path, strerror(errno));
    if (within(r, backing))
        return ERR("%s %s: refused: it is inside BACKING_DIR %s (the mount would serve it and change it)", opt, path, backing);
    if (within(r, mnt)) return ERR("%s %s: refused: it is on the mount (MOUNTPOINT %s)", opt, path, mnt);
    return 0;
}

#ifdef FLASHRT_FUSE
/* Background: the child mounts and serves; the parent returns once it is mounted (0) or
 * prints why it is not (1). */
static int in_background(struct frt_mount_opts *o, struct cli_guard *g, const char *journal) {
    int p[2]; /* close-on-exec: fusermount3 (auto_unmount) must not hold it open */
    if (pipe2(p, O_CLOEXEC) != 0) return ERR("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return ERR("fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        int rc = 1;
        if (cli_guard_lock(g, "--flash", o->cfg.flash_path, 1, 1) || cli_guard_lock(g, "--flash's journal", journal, 1, 1)) {
            const char *msg = "the flash file is in use (see above)";
            (void)!write(p[1], msg, strlen(msg));
        } else {
            rc = frt_mount_run(o, p[1]);
        }
        cli_guard_release(g, rc == 1);
        _exit(rc);
    }
    close(p[1]);
    char buf[FLASHRT_ERR_LEN + 4200];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(p[0], buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
        if (n == sizeof buf - 1 || (n == 3 && !memcmp(buf, "ok\n", 3))) break;
    }
    close(p[0]);
    buf[n] = 0;
    if (!strcmp(buf, "ok\n")) return 0;
    /* the child printed its error (its stderr is still ours) and exits */
    int st;
    waitpid(pid, &st, 0);
    if (!n) return ERR("the mount process ended before mounting (status %d)", st);
    return 1;
}
#endif

int cli_mount(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(MOUNT_HELP, stdout); return 0; }
#ifndef FLASHRT_FUSE
    (void)argc;
    (void)argv;
    (void)outside;
    return ERR("mount: this flashrt was built without FUSE (pkg-config found no libfuse3 when it was built): "
               "install fuse3, libfuse3-dev and pkg-config, then rebuild (make -C runtime)");
#else
    struct frt_mount_opts o;
    memset(&o, 0, sizeof o);
    flashrt_config_default(&o.cfg);
    const char *pos[2] = {NULL, NULL}, *bundle = NULL, *admission = NULL, *eviction = "lru", *ev_bundle = NULL;
    int npos = 0, have_bytes = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        const char *a = argv[i];
#define OPT(name) (v = cli_optval(argc, argv, &i, name))
#define BADR(name, what) do { fprintf(stderr, "flashrt mount: error: %s: invalid value '%s' (expected %s)\n", name, v, what); return 2; } while (0)
        if (OPT("--flash")) { if (!*v) BADR("--flash", "a file"); o.cfg.flash_path = v; }
        else if (OPT("--flash-bytes")) {
            if (cli_parse_bytes(v, &o.cfg.flash_bytes) || !o.cfg.flash_bytes) BADR("--flash-bytes", "bytes > 0: an integer with an optional unit, 256MiB, 1GB (docs: Sizes)");
            have_bytes = 1;
        } else if (OPT("--bundle")) { if (!*v) BADR("--bundle", "a policy bundle directory"); bundle = v; }
        else if (OPT("--eviction-bundle")) { if (!*v) BADR("--eviction-bundle", "a policy bundle directory"); ev_bundle = v; }
        else if (OPT("--admission")) {
            if (flashrt_admission_from_name(v) < 0) BADR("--admission", "bundle, admitall, rejectx, rejectx_block or coinflip");
            admission = v;
        } else if (OPT("--eviction")) {
            int e = flashrt_eviction_from_name(v);
            if (e < 0) BADR("--eviction", "lru, fifo, mru or mat");
            o.cfg.eviction = (enum flashrt_eviction)e;
            eviction = v;
        } else if (OPT("--region-bytes")) {
            if (cli_parse_bytes(v, &o.cfg.region_bytes) || !o.cfg.region_bytes || o.cfg.region_bytes % FRT_SEGMENT_BYTES ||
                o.cfg.region_bytes > ((uint64_t)1 << 40))
                BADR("--region-bytes", "bytes: a positive multiple of 128 KiB up to 1 TiB, 1MiB (docs: Sizes)");
        } else if (OPT("--direct")) {
            if (!strcmp(v, "auto")) o.cfg.direct = FLASHRT_DIRECT_AUTO;
            else if (!strcmp(v, "on")) o.cfg.direct = FLASHRT_DIRECT_ON;
            else if (!strcmp(v, "off")) o.cfg.direct = FLASHRT_DIRECT_OFF;
            else BADR("--direct", "auto, on or off");
        } else if (OPT("--stats-out")) { if (!*v) BADR("--stats-out", "a file"); o.stats_out = v; }
        else if (OPT("--trace-out")) { if (!*v) BADR("--trace-out", "a file"); o.trace_out = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--foreground")) o.foreground = 1;
        else if (a[0] == '-' || npos == 2) {
            fprintf(stderr, "flashrt mount: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        } else {
            pos[npos++] = a;
        }
#undef OPT
#undef BADR
    }
    const char *missing = npos < 1 ? "BACKING_DIR" : npos < 2 ? "MOUNTPOINT" : !o.cfg.flash_path ? "--flash"
                        : !have_bytes ? "--flash-bytes" : !bundle && !admission ? "--bundle DIR or --admission NAME" : NULL;
    if (missing) {
        fprintf(stderr, "flashrt mount: error: %s is required (see --help)\n", missing);
        return 2;
    }
    if (!admission) admission = "bundle";
    int adm = flashrt_admission_from_name(admission);
    if (adm == FLASHRT_ADMIT_BUNDLE && !bundle) {
        fprintf(stderr, "flashrt mount: error: --admission bundle needs --bundle DIR\n");
        return 2;
    }
    if (adm != FLASHRT_ADMIT_BUNDLE && bundle) {
        fprintf(stderr, "flashrt mount: error: --bundle %s fills no slot: the admission is %s\n", bundle, admission);
        return 2;
    }
    if (ev_bundle && o.cfg.eviction != FLASHRT_MAT) {
        fprintf(stderr, "flashrt mount: error: --eviction-bundle is for --eviction mat (the eviction is %s)\n", eviction);
        return 2;
    }
    if (o.cfg.eviction == FLASHRT_MAT && !ev_bundle && !bundle) {
        fprintf(stderr, "flashrt mount: error: --eviction mat needs a bundle with the evict capability: "
                        "--eviction-bundle DIR, or --bundle DIR\n");
        return 2;
    }
    o.cfg.admission = (enum flashrt_admission)adm;
    o.admission = admission;
    o.eviction = eviction;
    o.policy_name = bundle ? bundle : admission;
    /* the places: two directories apart, the files the mount writes outside both */
    static char backing[PATH_MAX], mnt[PATH_MAX];
    struct stat st;
    if (stat(pos[0], &st) != 0) return ERR("BACKING_DIR %s: %s", pos[0], strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ERR("BACKING_DIR %s: not a directory", pos[0]);
    if (stat(pos[1], &st) != 0) return ERR("MOUNTPOINT %s: %s", pos[1], strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ERR("MOUNTPOINT %s: not a directory", pos[1]);
    if (!realpath(pos[0], backing)) return ERR("BACKING_DIR %s: %s", pos[0], strerror(errno));
    if (!realpath(pos[1], mnt)) return ERR("MOUNTPOINT %s: %s", pos[1], strerror(errno));
    if (!strcmp(backing, mnt)) return ERR("BACKING_DIR %s and MOUNTPOINT %s are the same directory (%s)", pos[0], pos[1], mnt);
    if (within(backing, mnt)) return ERR("BACKING_DIR %s is inside MOUNTPOINT %s: the mount would hide it", pos[0], pos[1]);
    if (within(mnt, backing))
        return ERR("MOUNTPOINT %s is inside BACKING_DIR %s: the mount would serve itself", pos[1], pos[0]);
    o.backing = backing;
    o.mountpoint = mnt;
    char journal[4200];
    snprintf(journal, sizeof journal, "%s.journal", o.cfg.flash_path);
    if (outside("--flash", o.cfg.flash_path, backing, mnt) || outside("--flash's journal", journal, backing, mnt) ||
        (o.stats_out && outside("--stats-out", o.stats_out, backing, mnt)) ||
        (o.trace_out && outside("--trace-out", o.trace_out, backing, mnt)))
        return 1;
    if (access("/dev/fuse", R_OK | W_OK) != 0)
        return ERR("mount: /dev/fuse: %s: this machine (or container) gives no FUSE device (load the fuse module; "
                   "a container needs --device /dev/fuse)", strerror(errno));
    struct cli_guard g;
    cli_guard_init(&g, "mount");
    cli_guard_add_bundle(&g, "--bundle", bundle);
    cli_guard_add_bundle(&g, "--eviction-bundle", ev_bundle);
    cli_guard_add(&g, "--flash", o.cfg.flash_path, CLI_DEV);
    cli_guard_add(&g, "--flash's journal", journal, CLI_DEV);
    cli_guard_add(&g, "--stats-out", o.stats_out, CLI_OUT);
    cli_guard_add(&g, "--trace-out", o.trace_out, CLI_OUT);
    if (cli_guard_check(&g)) return 1;
    /* the bundle verified (never loaded by path) before anything is written */
    flashrt_policy *pol = NULL, *evb = NULL;
    char err[FLASHRT_ERR_LEN];
    if (o.cfg.eviction == FLASHRT_MAT) {
        const char *dir = ev_bundle ? ev_bundle : bundle;
        evb = frt_policy_load_for(dir, FRT_CAP_AS_LISTED, err, sizeof err);
        if (!evb) return ERR("--eviction mat: %s", err);
        if (!frt_policy_evict(evb)) {
            int erc = ERR("--eviction mat: bundle %s has no evict capability (it lists: %s)", dir, frt_policy_listed(evb));
            flashrt_policy_free(evb);
            return erc;
        }
        o.cfg.eviction_policy = evb;
    }
    if (bundle) {
        pol = flashrt_policy_load(bundle, FLASHRT_FALLBACK_NONE, err, sizeof err);
        if (!pol) {
            flashrt_policy_free(evb);
            return ERR("--bundle: %s", err);
        }
        o.policy = pol;
    }
    int rc;
    if (!o.foreground) {
        rc = in_background(&o, &g, journal);
    } else if (cli_guard_lock(&g, "--flash", o.cfg.flash_path, 1, 1) ||
               cli_guard_lock(&g, "--flash's journal", journal, 1, 1)) {
        cli_guard_release(&g, 1);
        rc = 1;
    } else {
        rc = frt_mount_run(&o, -1);
        cli_guard_release(&g, rc == 1);
    }
    flashrt_policy_free(pol);
    flashrt_policy_free(evb);
    return rc;
#endif
}
