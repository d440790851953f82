/* main.c: the flashrt command line: usage, the small commands (prepare-backing, probe-disk,
 * features, units) and the dispatch; replay is cli_replay.c, the shared helpers cli_util.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "mat/cli_mat.h"
#include "cli/cli_mount.h"
#include "cli/cli_play.h"
#include "pannier/cli_pannier.h"
#include "mlcache/cli_partition.h"
#include "kml/cli_readahead.h"
#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "policies/policy_internal.h"

static const char *USAGE =
    "usage: flashrt COMMAND [options]\n"
    "\n"
    "The reference flash-cache runtime of flashml: serves real bytes from a flash device in\n"
    "front of a backing device, with the admission and prefetch decisions of a policy .so.\n"
    "\n"
    "commands:\n"
    "  prepare-backing  write deterministic content for every segment a trace touches\n"
    "  replay           replay a trace's GETs through the cache, verifying every byte\n"
    "  mat-replay       replay an object trace through an object cache with MAT's learned\n"
    "                   eviction (a compiled bundle), verifying every byte\n"
    "  partition-replay replay a multi-stream page trace through a page cache partitioned\n"
    "                   by stream with MLCache's network (a compiled bundle)\n"
    "  pannier-replay   replay a block trace through Pannier's container flash cache (LRU+\n"
    "                   or Pannier, optionally TIRE), verifying every byte; survives kill -9\n"
    "  tune-readahead   set a block device's readahead every window with KML's model (a\n"
    "                   compiled bundle) from the page cache's activity; restores it on exit\n"
    "  mount            serve a directory's files through the cache (FUSE): reads from flash\n"
    "                   or the backing files by the policy, writes through\n"
    "  play             read a trace's GETs from a prepared file (e.g. through a mount) at\n"
    "                   the trace's offsets, sizes and pace\n"
    "  verify           verify a policy bundle as every command loads it (manifest schema,\n"
    "                   size, sha256, ELF checks, mapped from a sealed copy, the values it\n"
    "                   reports); prints its capabilities and sha256\n"
    "  probe-disk       measure a device's seek time and bandwidth (simulator config JSON)\n"
    "  features         print the tracker's feature vector of every access (CSV)\n"
    "  units            print the units this runtime was built with (JSON)\n"
    "\n"
    "`flashrt COMMAND --help` describes each command; `flashrt --version` prints the version.\n";

static const char *PREPARE_HELP =
    "usage: flashrt prepare-backing --backing PATH --trace FILE [--map FILE]\n"
    "\n"
    "Writes deterministic content (a function of block id and byte position) for every\n"
    "segment the trace touches. Block i of the trace's sorted distinct block ids lives at byte\n"
    "i x 8 MiB of PATH; untouched segments stay holes of a sparse file. The key list goes to\n"
    "FILE (default PATH.map). A regular file is written under a temporary name and renamed.\n";

static const char *PROBE_HELP =
    "usage: flashrt probe-disk --device PATH [--out FILE] [--reads N] [--seq-bytes N]\n"
    "\n"
    "Measures the disk model's constants: t_seek_s (mean random 4 KiB read latency minus its\n"
    "transfer time, N reads, default 200) and bandwidth_bytes_per_s (sequential 1 MiB reads,\n"
    "default up to 256M). Writes JSON with the simulator's config field names (SimConfig in\n"
    "flashml/simulation.py) to FILE (atomically) or stdout.\n";

static const char *FEATURES_HELP =
    "usage: flashrt features --trace FILE [--tracker-width-log2 N] [--tracker-depth N]\n"
    "\n"
    "Prints, for every access of the trace, the 18 contract features the runtime's count-min\n"
    "tracker computes (CSV with a header of feature names), to compare with exact counts.\n";

static const char *VERIFY_HELP =
    "usage: flashrt verify DIR [--need CAPS] [--system NAME]\n"
    "\n"
    "Loads the policy bundle DIR exactly as every flashrt command does: the directory opened\n"
    "once; manifest.json and the .so it names read once each from regular files (no symbolic\n"
    "link, FIFO or device); the manifest checked against the bundle schema (format, system,\n"
    "capabilities, sha256, size_bytes, the knobs' types and ranges); the .so's size, sha256 and\n"
    "ELF headers checked on the bytes read; exactly those bytes mapped from a sealed memfd; its\n"
    "functions and the values it reports checked. Prints one JSON object (capabilities,\n"
    "sha256, size_bytes) and exits 0, or prints the refusal and exits 1. A knobs-only bundle\n"
    "(capabilities [], Pannier's) has no .so: its manifest is checked.\n"
    "\n"
    "options:\n"
    "  --need CAPS    comma-separated capabilities the bundle must have (admission, prefetch,\n"
    "                 eviction, partition, readahead); default: the ones its manifest lists\n"
    "  --system NAME  the system the bundle must be for (baleen, mat, pannier, mlcache, kml)\n";

static const char *UNITS_HELP =
    "usage: flashrt units [--json]\n"
    "\n"
    "Prints the units and defaults compiled into the runtime (runtime/src/util/units.h).\n";

/* ---- prepare-backing ---- */

static int cmd_prepare(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(PREPARE_HELP, stdout); return 0; }
    const char *backing = NULL, *trace = NULL, *map = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = cli_optval(argc, argv, &i, "--backing"))) backing = v;
        else if ((v = cli_optval(argc, argv, &i, "--trace"))) trace = v;
        else if ((v = cli_optval(argc, argv, &i, "--map"))) map = v;
        else {
            fprintf(stderr, "flashrt prepare-backing: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!backing || !trace || !*backing || !*trace) {
        fprintf(stderr, "flashrt prepare-backing: error: --backing and --trace are required (see --help)\n");
        return 2;
    }
    /* no output is an input; the map locked (a replay reading it holds it shared) */
    char mp[4200];
    snprintf(mp, sizeof mp, map ? "%s" : "%s.map", map ? map : backing);
    struct cli_guard g;
    cli_guard_init(&g, "prepare-backing");
    g.allow_block = 1;
    cli_guard_add(&g, "--trace", trace, CLI_IN);
    cli_guard_add(&g, "--backing", backing, CLI_DEV);
    cli_guard_add(&g, map ? "--map" : "--backing's map", mp, CLI_OUT);
    if (cli_guard_check(&g) || cli_guard_lock(&g, map ? "--map" : "--backing's map", mp, 1, 0) || cli_guard_hold()) {
        cli_guard_release(&g, 1);
        return 1;
    }
    char err[FLASHRT_ERR_LEN];
    struct flashrt_prepare_stats st;
    int bad = flashrt_prepare_backing(backing, map, trace, &st, err, sizeof err);
    cli_guard_release(&g, bad != 0);
    if (bad) return ERR("%s", err);
    printf("{\"blocks\": %llu, \"segments\": %llu, \"bytes_written\": %llu, \"seconds\": %.6f}\n",
           (unsigned long long)st.blocks, (unsigned long long)st.segments,
           (unsigned long long)st.bytes_written, st.seconds);
    return 0;
}

/* ---- probe-disk ---- */

static int cmd_probe(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(PROBE_HELP, stdout); return 0; }
    const char *dev = NULL, *out = NULL;
    uint64_t reads = 200, seq = 256ull << 20;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = cli_optval(argc, argv, &i, "--device"))) dev = v;
        else if ((v = cli_optval(argc, argv, &i, "--out"))) out = v;
        else if ((v = cli_optval(argc, argv, &i, "--reads"))) {
            if (cli_parse_uint(v, &reads) || reads == 0 || reads > 1000000) { fprintf(stderr, "flashrt probe-disk: error: --reads: invalid value '%s'\n", v); return 2; }
        } else if ((v = cli_optval(argc, argv, &i, "--seq-bytes"))) {
            if (cli_parse_bytes(v, &seq) || seq == 0) { fprintf(stderr, "flashrt probe-disk: error: --seq-bytes: invalid value '%s'\n", v); return 2; }
        } else {
            fprintf(stderr, "flashrt probe-disk: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!dev || !*dev) { fprintf(stderr, "flashrt probe-disk: error: --device is required (see --help)\n"); return 2; }
    struct cli_guard g;
    cli_guard_init(&g, "probe-disk");
    cli_guard_add(&g, "--device", dev, CLI_IN);
    cli_guard_add(&g, "--out", out, CLI_OUT);
    if (cli_guard_check(&g)) return 1;
    char err[FLASHRT_ERR_LEN];
    struct flashrt_probe p;
    if (flashrt_probe_disk(dev, (unsigned)reads, seq, &p, err, sizeof err) != 0) return ERR("%s", err);
    char text[1024];
    int n = snprintf(text, sizeof text,
                     "{\"t_seek_s\": %.9g, \"bandwidth_bytes_per_s\": %.9g, \"read_latency_s_p50\": %.9g, "
                     "\"random_reads\": %llu, \"sequential_bytes\": %llu, \"device_bytes\": %llu, "
                     "\"direct_io\": %s, \"device\": \"%s\"}\n",
                     p.t_seek_s, p.bandwidth_bytes_per_s, p.read_latency_s_p50,
                     (unsigned long long)p.random_reads, (unsigned long long)p.sequential_bytes,
                     (unsigned long long)p.device_bytes, p.direct_io ? "true" : "false", dev);
    if (n < 0 || n >= (int)sizeof text || strchr(dev, '"') || strchr(dev, '\\')) return ERR("%s: unusable device name", dev);
    if (out) {
        if (frt_write_file_atomic(out, text, (size_t)n, err, sizeof err) != 0) return ERR("%s", err);
    } else {
        fputs(text, stdout);
    }
    return 0;
}

/* ---- features ---- */

static int cmd_features(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(FEATURES_HELP, stdout); return 0; }
    const char *trace = NULL;
    uint64_t wl = 14, depth = 4;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = cli_optval(argc, argv, &i, "--trace"))) trace = v;
        else if ((v = cli_optval(argc, argv, &i, "--tracker-width-log2"))) { if (cli_parse_uint(v, &wl)) return ERR("--tracker-width-log2: invalid value '%s'", v); }
        else if ((v = cli_optval(argc, argv, &i, "--tracker-depth"))) { if (cli_parse_uint(v, &depth)) return ERR("--tracker-depth: invalid value '%s'", v); }
        else {
            fprintf(stderr, "flashrt features: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!trace) { fprintf(stderr, "flashrt features: error: --trace is required (see --help)\n"); return 2; }
    char err[FLASHRT_ERR_LEN];
    flashrt_tracker *tk = flashrt_tracker_new((unsigned)wl, (unsigned)depth, err, sizeof err);
    if (!tk) return ERR("%s", err);
    flashrt_trace *tr = flashrt_trace_open(trace, err, sizeof err);
    if (!tr) { flashrt_tracker_free(tk); return ERR("%s", err); }
    static const char *names[FLASHRT_NUM_FEATURES] = {
        "op", "namespace", "user", "start", "end", "size",
        "block_count_h1", "block_count_h2", "block_count_h3", "block_count_h4", "block_count_h5", "block_count_h6",
        "segment_count_h1", "segment_count_h2", "segment_count_h3", "segment_count_h4", "segment_count_h5", "segment_count_h6"};
    for (int k = 0; k < FLASHRT_NUM_FEATURES; k++) printf("%s%s", k ? "," : "", names[k]);
    putchar('\n');
    struct flashrt_access a;
    int r;
    while ((r = flashrt_trace_next(tr, &a, err, sizeof err)) == 1) {
        double f[FLASHRT_NUM_FEATURES];
        flashrt_tracker_features(tk, &a, f);
        flashrt_tracker_add(tk, &a);
        for (int k = 0; k < FLASHRT_NUM_FEATURES; k++) printf("%s%.17g", k ? "," : "", f[k]);
        putchar('\n');
    }
    flashrt_trace_close(tr);
    flashrt_tracker_free(tk);
    if (r < 0) return ERR("%s", err);
    return 0;
}

/* ---- verify ---- */

static int cmd_verify(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(VERIFY_HELP, stdout); return 0; }
    const char *dir = NULL, *system = NULL;
    unsigned need = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = cli_optval(argc, argv, &i, "--need"))) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                static const char *const NAMES[] = {"admission", "prefetch", "eviction", "partition", "readahead"};
                unsigned bit = 0;
                for (unsigned k = 0; k < 5; k++)
                    if (!strcmp(t, NAMES[k])) bit = 1u << k;
                if (!bit) {
                    fprintf(stderr, "flashrt verify: error: --need: unknown capability '%s' (admission, prefetch, eviction, partition, readahead)\n", t);
                    return 2;
                }
                need |= bit;
            }
            if (!need) { fprintf(stderr, "flashrt verify: error: --need: expected capability names\n"); return 2; }
        } else if ((v = cli_optval(argc, argv, &i, "--system"))) {
            system = v;
        } else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "flashrt verify: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (!dir || !*dir) { fprintf(stderr, "flashrt verify: error: DIR is required (see --help)\n"); return 2; }
    char err[FLASHRT_ERR_LEN];
    /* the manifest alone first: a knobs-only bundle has nothing to map */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dfd < 0) return ERR("%s: not a policy directory (%s)", dir, strerror(errno));
    struct frt_manifest *man = malloc(sizeof *man);
    if (!man) { close(dfd); return ERR("out of memory"); }
    int bad = frt_manifest_read(dfd, dir, system, man, NULL, NULL, err, sizeof err);
    close(dfd);
    if (bad) { free(man); return ERR("%s", err); }
    if (!man->has_so) {
        int rc = need ? ERR("%s: refused: a knobs-only bundle (capabilities []) has no capability", dir) : 0;
        if (!rc) {
            int first = 1;
            fputc('{', stdout);
            cli_json_str(stdout, "bundle", dir, &first);
            cli_json_str(stdout, "system", man->system, &first);
            fputs(", \"capabilities\": [], \"sha256\": null, \"size_bytes\": null}\n", stdout);
        }
        free(man);
        return rc;
    }
    free(man);
    flashrt_policy *p = frt_policy_load_for(dir, need ? need : FRT_CAP_AS_LISTED, err, sizeof err);
    if (!p) return ERR("%s", err);
    char names[160];
    snprintf(names, sizeof names, "%s", frt_policy_listed(p));
    int first = 1;
    fputc('{', stdout);
    cli_json_str(stdout, "bundle", dir, &first);
    fputs(", \"capabilities\": [", stdout);
    char *save = NULL;
    int k = 0;
    for (char *t = strtok_r(names, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) printf("%s\"%s\"", k++ ? ", " : "", t);
    fputc(']', stdout);
    cli_json_str(stdout, "sha256", frt_policy_sha256(p), &first);
    cli_json_int(stdout, "size_bytes", frt_policy_size_bytes(p), &first);
    fputs("}\n", stdout);
    flashrt_policy_free(p);
    return 0;
}

static int cmd_units(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(UNITS_HELP, stdout); return 0; }
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--json") != 0) {
            fprintf(stderr, "flashrt units: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    char b[10][32];
    printf("{\"segment_bytes\": %u, \"block_bytes\": %u, \"t_seek_s\": %s, "
           "\"bandwidth_bytes_per_s\": %s, \"MB\": %s, \"GB\": %s, \"disks\": %u, "
           "\"window_s\": %s, \"warmup_s\": %s, \"sample_ratio\": %s, \"cache_gb\": %s, "
           "\"target_write_rate_mbps\": %s, \"abi_version\": %d, \"contract_hash\": \"%s\", "
           "\"num_features\": %d, \"hour_seconds\": %d, \"hours\": %d}\n",
           FRT_SEGMENT_BYTES, FRT_BLOCK_BYTES, cli_num(b[0], FRT_T_SEEK_S),
           cli_num(b[1], FRT_BANDWIDTH_BYTES_PER_S), cli_num(b[2], FRT_MB), cli_num(b[3], FRT_GB),
           FRT_DISKS, cli_num(b[4], FRT_WINDOW_S), cli_num(b[5], FRT_WARMUP_S),
           cli_num(b[6], FRT_SAMPLE_RATIO), cli_num(b[7], FRT_CACHE_GB),
           cli_num(b[8], FRT_TARGET_WRITE_RATE_MBPS), FLASHML_POLICY_ABI_VERSION,
           FLASHML_POLICY_CONTRACT_HASH, FLASHML_POLICY_NUM_FEATURES, FLASHML_POLICY_HOUR_SECONDS,
           FLASHML_POLICY_HOURS);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        /* FLASHRT_VERSION: flashml's version, from pyproject.toml (runtime/Makefile) */
        printf("flashrt %s (policy ABI %d)\n", FLASHRT_VERSION, FLASHML_POLICY_ABI_VERSION);
        return 0;
    }
    const char *cmd = argv[1];
    argc -= 2;
    argv += 2;
    if (!strcmp(cmd, "replay")) return cli_replay(argc, argv);
    if (!strcmp(cmd, "mat-replay")) return cli_mat_replay(argc, argv);
    if (!strcmp(cmd, "partition-replay")) return cli_partition_replay(argc, argv);
    if (!strcmp(cmd, "pannier-replay")) return cli_pannier_replay(argc, argv);
    if (!strcmp(cmd, "mount")) return cli_mount(argc, argv);
    if (!strcmp(cmd, "play")) return cli_play(argc, argv);
    if (!strcmp(cmd, "tune-readahead")) return cli_tune_readahead(argc, argv);
    if (!strcmp(cmd, "prepare-backing")) return cmd_prepare(argc, argv);
    if (!strcmp(cmd, "probe-disk")) return cmd_probe(argc, argv);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc, argv);
    if (!strcmp(cmd, "features")) return cmd_features(argc, argv);
    if (!strcmp(cmd, "units")) return cmd_units(argc, argv);
    fprintf(stderr, "flashrt: error: unknown command '%s'\n%s", cmd, USAGE);
    return 2;
}
