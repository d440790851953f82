/* cli_play.c: `flashrt play`: a Tectonic trace's GETs as real preads of a file laid out by
 * `flashrt prepare-backing` (block i of the trace's sorted distinct blocks at i x 8 MiB), at
 * the trace's pace or as fast as possible; through `flashrt mount`, an application's IO with
 * the trace's offsets and sizes. Optionally every byte read is checked against the
 * deterministic content prepare-backing wrote. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_play.h"
#include "engine/device.h"
#include "flashrt.h"
#include "util/internal.h"
#include "util/stats.h"
#include "util/units.h"

static const char *PLAY_HELP =
    "usage: flashrt play --trace FILE --to PATH [--map FILE] [--speed X | --no-pace]\n"
    "                    [--limit N] [--verify] [--json]\n"
    "\n"
    "Reads, for every GET of the trace, its bytes from PATH with one pread at the block's place\n"
    "plus the access's offset, of the access's size: PATH is a file written by `flashrt\n"
    "prepare-backing --backing PATH --trace FILE` (block i of the trace's sorted distinct\n"
    "blocks at i x 8 MiB; its map lists them), or that file seen through `flashrt mount`, so\n"
    "that the mount serves the trace's IO as an application's. PUTs are not played (counted).\n"
    "Prints the reads, bytes, the read latency p50/p99 and how far behind the trace's pace\n"
    "the reads fell. Exit 0, 3 when --verify found a wrong byte, 1 on bad input or a failed read.\n"
    "\n"
    "options:\n"
    "  --trace FILE   Tectonic text trace\n"
    "  --to PATH      the prepared file, or a directory holding it as blocks.img\n"
    "  --map FILE     its map (default PATH.map; through a mount, read it from the backing\n"
    "                 directory so that it is not part of the mount's IO)\n"
    "  --speed X      trace seconds per second of play, in (0, 1e9] (default 1: the trace's pace)\n"
    "  --no-pace      every read as soon as the one before it returned\n"
    "  --limit N      stop after N accesses of the trace\n"
    "  --verify       check every byte read against prepare-backing's content\n"
    "  --json         one JSON object instead of a table\n";

static void sleep_until(double t) {
    for (;;) {
        double d = t - frt_now();
        if (d <= 0) return;
        struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
        if (nanosleep(&ts, NULL) == 0) return;
    }
}

int cli_play(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(PLAY_HELP, stdout); return 0; }
    const char *trace_path = NULL, *to = NULL, *map = NULL;
    double speed = 1.0;
    uint64_t limit = UINT64_MAX;
    int pace = 1, verify = 0, as_json = 0, have_speed = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        const char *a = argv[i];
        if ((v = cli_optval(argc, argv, &i, "--trace"))) trace_path = v;
        else if ((v = cli_optval(argc, argv, &i, "--to"))) to = v;
        else if ((v = cli_optval(argc, argv, &i, "--map"))) map = v;
        else if ((v = cli_optval(argc, argv, &i, "--speed"))) {
            if (cli_parse_double(v, &speed) || !(speed > 0 && speed <= 1e9)) {
                fprintf(stderr, "flashrt play: error: --speed: invalid value '%s' (expected trace seconds per second in (0, 1e9])\n", v);
                return 2;
            }
            have_speed = 1;
        } else if ((v = cli_optval(argc, argv, &i, "--limit"))) {
            if (cli_parse_uint(v, &limit)) {
                fprintf(stderr, "flashrt play: error: --limit: invalid value '%s' (expected accesses, an integer in [0, 2^64 - 1])\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--no-pace")) pace = 0;
        else if (!strcmp(a, "--verify")) verify = 1;
        else if (!strcmp(a, "--json")) as_json = 1;
        else {
            fprintf(stderr, "flashrt play: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!trace_path || !*trace_path || !to || !*to) {
        fprintf(stderr, "flashrt play: error: %s is required (see --help)\n", !trace_path || !*trace_path ? "--trace" : "--to");
        return 2;
    }
    if (have_speed && !pace) {
        fprintf(stderr, "flashrt play: error: --speed and --no-pace: one pace at a time\n");
        return 2;
    }
    char file[4200], mp[4300];
    struct stat st;
    if (stat(to, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(file, sizeof file, "%s/blocks.img", to);
    else snprintf(file, sizeof file, "%s", to);
    snprintf(mp, sizeof mp, map ? "%s" : "%s.map", map ? map : file);
    char err[FLASHRT_ERR_LEN];
    /* the map (and the file's size against it), then the file itself for the reads */
    flashrt_backing *bk = flashrt_backing_open(file, mp, FLASHRT_DIRECT_OFF, err, sizeof err);
    if (!bk) return ERR("%s", err);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        flashrt_backing_close(bk);
        return ERR("--to %s: %s", file, strerror(errno));
    }
    flashrt_trace *tr = flashrt_trace_open(trace_path, err, sizeof err);
    uint8_t *buf = malloc(FRT_BLOCK_BYTES);
    if (!tr || !buf) {
        int rc = ERR("%s", tr ? "out of memory" : err);
        flashrt_trace_close(tr);
        free(buf);
        close(fd);
        flashrt_backing_close(bk);
        return rc;
    }
    struct frt_vec lat = {0};
    uint64_t accesses = 0, gets = 0, puts = 0, bytes = 0, verified = 0, wrong = 0;
    double t_first = NAN, w0 = 0, max_lag = 0, lag_sum = 0;
    int rc = 0;
    struct flashrt_access a;
    int r = 0;
    while (accesses < limit && (r = flashrt_trace_next(tr, &a, err, sizeof err)) == 1) {
        accesses++;
        if (!flashrt_is_get(a.op)) {
            puts++;
            continue;
        }
        uint64_t base;
        if (flashrt_backing_offset(bk, a.key, &base) != 0 || a.offset + a.size > FRT_BLOCK_BYTES) {
            rc = ERR("%s:%llu: block %llu is not in %s (prepare the file with this trace)", trace_path,
                     (unsigned long long)a.line, (unsigned long long)a.key, mp);
            break;
        }
        if (isnan(t_first)) {
            t_first = a.time;
            w0 = frt_now();
        }
        if (pace) {
            double due = w0 + (a.time - t_first) / speed, now = frt_now();
            if (now < due) sleep_until(due);
            else {
                lag_sum += now - due;
                if (now - due > max_lag) max_lag = now - due;
            }
        }
        uint64_t r0 = frt_now_ns();
        if (frt_pread_full(fd, buf, (size_t)a.size, base + a.offset) != 0) {
            rc = ERR("%s: read of %llu bytes at %llu (%s:%llu) failed: %s", file, (unsigned long long)a.size,
                     (unsigned long long)(base + a.offset), trace_path, (unsigned long long)a.line,
                     strerror(errno));
            break;
        }
        frt_vec_push(&lat, (double)(frt_now_ns() - r0) / 1e3);
        gets++;
        bytes += a.size;
        if (verify) {
            int64_t bad = flashrt_verify(a.key, a.offset, buf, (size_t)a.size);
            if (bad >= 0 && wrong++ < 5)
                fprintf(stderr, "flashrt play: wrong byte at %llu of block %llu (%s:%llu)\n",
                        (unsigned long long)(a.offset + (uint64_t)bad), (unsigned long long)a.key, trace_path,
                        (unsigned long long)a.line);
            verified += bad < 0 ? a.size : 0;
        }
    }
    if (!rc && r < 0) rc = ERR("%s", err);
    double wall = isnan(t_first) ? 0 : frt_now() - w0;
    if (!rc) {
        struct cli_figure fig[] = {
            {"accesses", 1, 0, accesses}, {"gets", 1, 0, gets}, {"puts_not_played", 1, 0, puts},
            {"bytes", 1, 0, bytes}, {"verified_bytes", 1, 0, verified}, {"integrity_errors", 1, 0, wrong},
            {"wall_s", 0, wall, 0},
            {"read_us_p50", 0, frt_percentile(&lat, 0.5), 0}, {"read_us_p99", 0, frt_percentile(&lat, 0.99), 0},
            {"max_lag_s", 0, pace ? max_lag : NAN, 0}, {"mean_lag_s", 0, pace && gets ? lag_sum / (double)gets : NAN, 0},
            {"speed", 0, pace ? speed : NAN, 0},
        };
        const char *strs[] = {"to", file, "verify", verify ? "on" : "off"};
        cli_print_figures(fig, sizeof fig / sizeof fig[0], strs, 2, 2, as_json);
        if (wrong) rc = 3;
    }
    frt_vec_free(&lat);
    flashrt_trace_close(tr);
    free(buf);
    close(fd);
    flashrt_backing_close(bk);
    return rc;
}
