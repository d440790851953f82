/* mount_fs.h: `flashrt mount`'s file system (mount_fs.c, built only where pkg-config finds
 * libfuse3): the files of a backing directory, read through the cache engine. */
#ifndef FLASHRT_MOUNT_FS_H
#define FLASHRT_MOUNT_FS_H

#include <stdint.h>

#include "flashrt.h"

/* A file's block b has the cache key file_id << FRT_MOUNT_FILE_SHIFT | b (file ids from 1, in
 * the order files are first opened): 2^24 blocks of 8 MiB, 128 TiB per file. */
#define FRT_MOUNT_FILE_SHIFT 24

struct frt_mount_opts {
    const char *backing, *mountpoint; /* absolute, resolved (realpath) */
    const char *stats_out;            /* the counters' JSON file; NULL: stdout at unmount */
    const char *trace_out;            /* the accesses served, a Tectonic trace; NULL: none */
    const char *policy_name, *admission, *eviction; /* for the counters */
    int foreground;
    struct flashrt_config cfg;
    flashrt_policy *policy; /* the admission slot's (owned by the caller) */
};

/* Opens the engine over the backing directory, mounts, and serves until unmounted or until
 * SIGINT, SIGTERM or SIGHUP (then unmounts); SIGUSR1 writes the counters. `ready_fd` >= 0 (a
 * background mount): once mounted, "ok\n" is written to it, else the error; then stdio goes to
 * /dev/null. Returns the exit code (1 after printing an error). */
int frt_mount_run(const struct frt_mount_opts *o, int ready_fd);

#endif
