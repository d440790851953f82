/* main.c: the flashrt command line (replay, prepare-backing, probe-disk, features, units). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "internal.h"

#define ERR(...) (fprintf(stderr, "flashrt: error: " __VA_ARGS__), fputc('\n', stderr), 1)

static const char *USAGE =
    "usage: flashrt COMMAND [options]\n"
    "\n"
    "The reference flash-cache runtime of flashml: serves real bytes from a flash device in\n"
    "front of a backing device, with the admission and prefetch decisions of a policy .so.\n"
    "\n"
    "commands:\n"
    "  prepare-backing  write deterministic content for every segment a trace touches\n"
    "  replay           replay a trace's GETs through the cache, verifying every byte\n"
    "  probe-disk       measure a device's seek time and bandwidth (simulator config JSON)\n"
    "  features         print the tracker's feature vector of every access (CSV)\n"
    "  units            print the units this runtime was built with (JSON)\n"
    "\n"
    "`flashrt COMMAND --help` describes each command.\n";

static const char *REPLAY_HELP =
    "usage: flashrt replay --policy DIR --trace FILE --flash PATH --flash-bytes N\n"
    "                      --backing PATH [options]\n"
    "\n"
    "Replays the trace through the cache: GETs are served from flash or the backing device and\n"
    "every returned byte is checked against the deterministic content; PUTs are charged DT.\n"
    "Prints the simulator's metric keys plus integrity_errors, device_errors, decision_ns_p50\n"
    "(features + admission + prefetch decision on a miss; its parts features_ns_p50 and\n"
    "policy_ns_p50), hit_path_us_p50, miss_path_us_p50 and more. Exit 0\n"
    "when every byte was correct, 3 when some were not, 1 on bad input or a device failure.\n"
    "\n"
    "options:\n"
    "  --policy DIR           policy bundle: DIR/policy.so + DIR/manifest.json (checked: sha256,\n"
    "                         ABI version, contract hash); or builtin:rejectx, builtin:admitall\n"
    "  --fallback MODE        none (default): refuse a bad policy; rejectx: serve with RejectX\n"
    "  --trace FILE           Tectonic text trace\n"
    "  --flash PATH           flash device or file (a missing file is created)\n"
    "  --flash-bytes N        bytes of flash to use (suffixes K, M, G = KiB, MiB, GiB); 0 = all\n"
    "  --backing PATH         backing device or file written by prepare-backing\n"
    "  --map FILE             backing map (default PATH.map)\n"
    "  --region-bytes N       flash region size (default 1M; a multiple of 128 KiB)\n"
    "  --eviction lru|fifo    region eviction (default lru)\n"
    "  --direct auto|on|off   O_DIRECT on flash and backing (default auto: when supported)\n"
    "  --sample-ratio X       percent of a full node in the trace (default: the trace's flashml\n"
    "                         comment, else 100)\n"
    "  --write-rate-mbps X    write-rate limit at full-node scale, MB/s (default 0 = none)\n"
    "  --write-burst-s X      limiter bucket depth in seconds of the rate (default 60)\n"
    "  --rate-clock trace|wall  the limiter's clock (default trace time)\n"
    "  --warmup-s X           DT warm-up excluded from the series (default 86400)\n"
    "  --window-s X           DT window (default 600)\n"
    "  --disks N              disks per node (default 36)\n"
    "  --tracker-width-log2 N count-min sketch width (default 14)\n"
    "  --tracker-depth N      count-min sketch rows (default 4)\n"
    "  --measure-raw          on hits, also time a raw read of the same flash bytes\n"
    "  --no-policy-prefetch   do not call the policy's prefetch hint (when a GET arrives and\n"
    "                         between accesses)\n"
    "  --fail-read-every N    fault injection: every Nth flash read fails (also env\n"
    "                         FLASHRT_FAULT_FLASH_READ_EVERY)\n"
    "  --fail-write-every N   fault injection: every Nth flash write fails (also env\n"
    "                         FLASHRT_FAULT_FLASH_WRITE_EVERY)\n"
    "  --limit N              stop after N accesses\n"
    "  --json                 one JSON object instead of a table\n";

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

static const char *UNITS_HELP =
    "usage: flashrt units [--json]\n"
    "\n"
    "Prints the units and defaults compiled into the runtime (runtime/src/units.h).\n";

static int want_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

static int parse_bytes(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno) return -1;
    uint64_t mult = 1;
    if (*end) {
        if (!strcmp(end, "K") || !strcmp(end, "KiB") || !strcmp(end, "k")) mult = 1ull << 10;
        else if (!strcmp(end, "M") || !strcmp(end, "MiB")) mult = 1ull << 20;
        else if (!strcmp(end, "G") || !strcmp(end, "GiB")) mult = 1ull << 30;
        else if (!strcmp(end, "T") || !strcmp(end, "TiB")) mult = 1ull << 40;
        else return -1;
    }
    if (v > UINT64_MAX / mult) return -1;
    *out = v * mult;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_uint(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || errno) return -1;
    *out = v;
    return 0;
}

/* option helpers: --name VALUE or --name=VALUE */
static const char *optval(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != 0) return NULL;
    if (*i + 1 >= argc) return "";
    return argv[++*i];
}

static void json_num(FILE *f, const char *k, double v, int *first) {
    fprintf(f, "%s\"%s\": ", *first ? "" : ", ", k);
    if (isfinite(v)) fprintf(f, "%.17g", v);
    else fputs("null", f);
    *first = 0;
}

static void json_int(FILE *f, const char *k, uint64_t v, int *first) {
    fprintf(f, "%s\"%s\": %llu", *first ? "" : ", ", k, (unsigned long long)v);
    *first = 0;
}

static void json_str(FILE *f, const char *k, const char *v, int *first) {
    fprintf(f, "%s\"%s\": \"", *first ? "" : ", ", k);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if ((unsigned char)*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
    *first = 0;
}

/* ---- replay ---- */

struct kv {
    const char *k;
    int is_int;
    double d;
    uint64_t u;
};

static int cmd_replay(int argc, char **argv) {
    if (want_help(argc, argv)) { fputs(REPLAY_HELP, stdout); return 0; }
    struct flashrt_config cfg;
    flashrt_config_default(&cfg);
    const char *policy_dir = NULL, *trace_path = NULL, *backing_path = NULL, *map_path = NULL;
    const char *fallback = "none";
    int as_json = 0, have_bytes = 0;
    double sample_ratio = 0;
    uint64_t limit = UINT64_MAX, u;
    const char *env;
    if ((env = getenv("FLASHRT_FAULT_FLASH_READ_EVERY")) && parse_uint(env, &cfg.fail_read_every))
        return ERR("FLASHRT_FAULT_FLASH_READ_EVERY: expected an integer, got '%s'", env);
    if ((env = getenv("FLASHRT_FAULT_FLASH_WRITE_EVERY")) && parse_uint(env, &cfg.fail_write_every))
        return ERR("FLASHRT_FAULT_FLASH_WRITE_EVERY: expected an integer, got '%s'", env);
    for (int i = 0; i < argc; i++) {
        const char *v;
        const char *a = argv[i];
#define BAD(name) do { fprintf(stderr, "flashrt replay: error: %s: invalid value '%s'\n", name, v); return 2; } while (0)
        if ((v = optval(argc, argv, &i, "--policy"))) policy_dir = v;
        else if ((v = optval(argc, argv, &i, "--fallback"))) {
            if (strcmp(v, "none") && strcmp(v, "rejectx")) BAD("--fallback");
            fallback = v;
        } else if ((v = optval(argc, argv, &i, "--trace"))) trace_path = v;
        else if ((v = optval(argc, argv, &i, "--flash-bytes"))) {
            if (parse_bytes(v, &cfg.flash_bytes)) BAD("--flash-bytes");
            have_bytes = 1;
        } else if ((v = optval(argc, argv, &i, "--flash"))) cfg.flash_path = v;
        else if ((v = optval(argc, argv, &i, "--backing"))) backing_path = v;
        else if ((v = optval(argc, argv, &i, "--map"))) map_path = v;
        else if ((v = optval(argc, argv, &i, "--region-bytes"))) { if (parse_bytes(v, &cfg.region_bytes)) BAD("--region-bytes"); }
        else if ((v = optval(argc, argv, &i, "--eviction"))) {
            if (!strcmp(v, "lru")) cfg.eviction = FLASHRT_LRU;
            else if (!strcmp(v, "fifo")) cfg.eviction = FLASHRT_FIFO;
            else BAD("--eviction");
        } else if ((v = optval(argc, argv, &i, "--direct"))) {
            if (!strcmp(v, "auto")) cfg.direct = FLASHRT_DIRECT_AUTO;
            else if (!strcmp(v, "on")) cfg.direct = FLASHRT_DIRECT_ON;
            else if (!strcmp(v, "off")) cfg.direct = FLASHRT_DIRECT_OFF;
            else BAD("--direct");
        } else if ((v = optval(argc, argv, &i, "--sample-ratio"))) { if (parse_double(v, &sample_ratio) || !(sample_ratio > 0 && sample_ratio <= 100)) BAD("--sample-ratio"); }
        else if ((v = optval(argc, argv, &i, "--write-rate-mbps"))) { if (parse_double(v, &cfg.write_rate_mbps) || cfg.write_rate_mbps < 0) BAD("--write-rate-mbps"); }
        else if ((v = optval(argc, argv, &i, "--write-burst-s"))) { if (parse_double(v, &cfg.write_burst_s) || !(cfg.write_burst_s > 0)) BAD("--write-burst-s"); }
        else if ((v = optval(argc, argv, &i, "--rate-clock"))) {
            if (!strcmp(v, "trace")) cfg.rate_clock = FLASHRT_CLOCK_TRACE;
            else if (!strcmp(v, "wall")) cfg.rate_clock = FLASHRT_CLOCK_WALL;
            else BAD("--rate-clock");
        } else if ((v = optval(argc, argv, &i, "--warmup-s"))) { if (parse_double(v, &cfg.warmup_s) || cfg.warmup_s < 0) BAD("--warmup-s"); }
        else if ((v = optval(argc, argv, &i, "--window-s"))) { if (parse_double(v, &cfg.window_s) || !(cfg.window_s > 0)) BAD("--window-s"); }
        else if ((v = optval(argc, argv, &i, "--disks"))) { if (parse_uint(v, &u) || u == 0 || u > 1000000) BAD("--disks"); cfg.disks = (unsigned)u; }
        else if ((v = optval(argc, argv, &i, "--tracker-width-log2"))) { if (parse_uint(v, &u) || u > 24) BAD("--tracker-width-log2"); cfg.tracker_width_log2 = (unsigned)u; }
        else if ((v = optval(argc, argv, &i, "--tracker-depth"))) { if (parse_uint(v, &u) || u > 8) BAD("--tracker-depth"); cfg.tracker_depth = (unsigned)u; }
        else if ((v = optval(argc, argv, &i, "--fail-read-every"))) { if (parse_uint(v, &cfg.fail_read_every)) BAD("--fail-read-every"); }
        else if ((v = optval(argc, argv, &i, "--fail-write-every"))) { if (parse_uint(v, &cfg.fail_write_every)) BAD("--fail-write-every"); }
        else if ((v = optval(argc, argv, &i, "--limit"))) { if (parse_uint(v, &limit)) BAD("--limit"); }
        else if (!strcmp(a, "--measure-raw")) cfg.measure_raw = 1;
        else if (!strcmp(a, "--no-policy-prefetch")) cfg.no_policy_prefetch = 1;
        else if (!strcmp(a, "--json")) as_json = 1;
        else {
            fprintf(stderr, "flashrt replay: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
#undef BAD
    }
    const char *missing = !policy_dir ? "--policy" : !trace_path ? "--trace" : !cfg.flash_path ? "--flash"
                        : !have_bytes ? "--flash-bytes" : !backing_path ? "--backing" : NULL;
    if (missing) {
        fprintf(stderr, "flashrt replay: error: %s is required (see --help)\n", missing);
        return 2;
    }
    char err[FLASHRT_ERR_LEN] = "";
    flashrt_trace *tr = flashrt_trace_open(trace_path, err, sizeof err);
    if (!tr) return ERR("%s", err);
    flashrt_policy *pol;
    char warning[FLASHRT_ERR_LEN] = "";
    if (!strncmp(policy_dir, "builtin:", 8)) {
        pol = flashrt_policy_builtin(policy_dir + 8, err, sizeof err);
    } else {
        pol = flashrt_policy_load(policy_dir, !strcmp(fallback, "rejectx") ? FLASHRT_FALLBACK_REJECTX : FLASHRT_FALLBACK_NONE, err, sizeof err);
        if (pol && err[0]) {
            snprintf(warning, sizeof warning, "%s", err);
            fprintf(stderr, "flashrt: warning: %s; serving with the RejectX fallback\n", warning);
        }
    }
    if (!pol) { flashrt_trace_close(tr); return ERR("%s", err); }
    flashrt_backing *bk = flashrt_backing_open(backing_path, map_path, cfg.direct, err, sizeof err);
    if (!bk) { flashrt_policy_free(pol); flashrt_trace_close(tr); return ERR("%s", err); }
    /* the sample ratio comes from the trace's comment, read while the header is parsed: read
     * the first access before opening the cache */
    struct flashrt_access acc;
    int r = flashrt_trace_next(tr, &acc, err, sizeof err);
    if (r < 0) { flashrt_backing_close(bk); flashrt_policy_free(pol); flashrt_trace_close(tr); return ERR("%s", err); }
    cfg.sample_ratio = sample_ratio > 0 ? sample_ratio : flashrt_trace_sample_ratio(tr) > 0 ? flashrt_trace_sample_ratio(tr) : 100.0;
    flashrt *rt = flashrt_open(&cfg, pol, bk, err, sizeof err);
    if (!rt) { flashrt_backing_close(bk); flashrt_policy_free(pol); flashrt_trace_close(tr); return ERR("%s", err); }
    uint64_t integrity = 0, n = 0, verified_bytes = 0;
    int rc = 0;
    while (r == 1 && n < limit) {
        struct flashrt_result res;
        if (flashrt_access(rt, &acc, &res) != 0) {
            rc = ERR("%s:%llu: %s", trace_path, (unsigned long long)acc.line, flashrt_error(rt));
            break;
        }
        flashrt_idle(rt);
        if (res.data) {
            int64_t bad = flashrt_verify(acc.key, acc.offset, res.data, res.len);
            if (bad >= 0) {
                if (integrity < 10)
                    fprintf(stderr, "flashrt: integrity error: %s:%llu: block %llu byte %llu differs (%s)\n", trace_path,
                            (unsigned long long)acc.line, (unsigned long long)acc.key,
                            (unsigned long long)(acc.offset + (uint64_t)bad), res.hit ? "flash" : "backing");
                integrity++;
            }
            verified_bytes += res.len;
        }
        n++;
        r = flashrt_trace_next(tr, &acc, err, sizeof err);
    }
    if (r < 0 && rc == 0) rc = ERR("%s", err);
    if (rc == 0) {
        struct flashrt_metrics m;
        flashrt_metrics(rt, &m);
        struct kv kvs[] = {
            {"peak_dt_util", 0, m.peak_dt_util, 0}, {"mean_dt_util", 0, m.mean_dt_util, 0},
            {"p50_dt_util", 0, m.p50_dt_util, 0}, {"p90_dt_util", 0, m.p90_dt_util, 0},
            {"p99_dt_util", 0, m.p99_dt_util, 0}, {"flash_write_rate_mbps", 0, m.flash_write_rate_mbps, 0},
            {"dwpd", 0, m.dwpd, 0}, {"io_hit_ratio", 0, m.io_hit_ratio, 0},
            {"byte_hit_ratio", 0, m.byte_hit_ratio, 0}, {"segment_hit_ratio", 0, m.segment_hit_ratio, 0},
            {"avg_eviction_age_s", 0, m.avg_eviction_age_s, 0}, {"backend_ios", 1, 0, m.backend_ios},
            {"backend_bytes", 1, 0, m.backend_bytes}, {"admitted_segments", 1, 0, m.admitted_segments},
            {"prefetched_segments", 1, 0, m.prefetched_segments}, {"accesses", 1, 0, m.accesses},
            {"wall_s", 0, m.wall_s, 0},
            {"integrity_errors", 1, 0, integrity}, {"verified_bytes", 1, 0, verified_bytes},
            {"device_errors", 1, 0, m.device_errors}, {"flash_read_errors", 1, 0, m.flash_read_errors},
            {"flash_write_errors", 1, 0, m.flash_write_errors}, {"rate_limited", 1, 0, m.rate_limited},
            {"decision_ns_p50", 0, m.decision_ns_p50, 0}, {"decision_ns_p99", 0, m.decision_ns_p99, 0},
            {"features_ns_p50", 0, m.features_ns_p50, 0}, {"policy_ns_p50", 0, m.policy_ns_p50, 0},
            {"policy_prefetch_ns_p50", 0, m.policy_prefetch_ns_p50, 0},
            {"hit_path_us_p50", 0, m.hit_path_us_p50, 0}, {"hit_path_us_p99", 0, m.hit_path_us_p99, 0},
            {"miss_path_us_p50", 0, m.miss_path_us_p50, 0}, {"miss_path_us_p99", 0, m.miss_path_us_p99, 0},
            {"raw_read_us_p50", 0, m.raw_read_us_p50, 0}, {"hit_overhead_us_p50", 0, m.hit_overhead_us_p50, 0},
            {"backend_wall_ms_p50", 0, m.backend_wall_ms_p50, 0}, {"backend_dt_ms_p50", 0, m.backend_dt_ms_p50, 0},
            {"backend_wall_s", 0, m.backend_wall_s, 0}, {"backend_dt_s", 0, m.backend_dt_s, 0},
            {"gets", 1, 0, m.gets}, {"puts", 1, 0, m.puts}, {"hits", 1, 0, m.hits},
            {"evicted_regions", 1, 0, m.evicted_regions}, {"evicted_segments", 1, 0, m.evicted_segments},
            {"capacity_segments", 1, 0, m.capacity_segments}, {"region_bytes", 1, 0, m.region_bytes},
            {"regions", 1, 0, m.regions}, {"trace_seconds", 0, m.trace_seconds, 0},
            {"sample_ratio", 0, cfg.sample_ratio, 0},
            {"throughput_accesses_per_s", 0, m.throughput_accesses_per_s, 0},
            {"throughput_mb_per_s", 0, m.throughput_mb_per_s, 0}, {"direct_io", 1, 0, (uint64_t)m.direct_io},
        };
        size_t nk = sizeof kvs / sizeof kvs[0];
        if (as_json) {
            int first = 1;
            fputc('{', stdout);
            for (size_t i = 0; i < nk; i++) {
                if (kvs[i].is_int) json_int(stdout, kvs[i].k, kvs[i].u, &first);
                else json_num(stdout, kvs[i].k, kvs[i].d, &first);
            }
            json_str(stdout, "policy", flashrt_policy_name(pol), &first);
            json_str(stdout, "policy_warning", warning, &first);
            fputs("}\n", stdout);
        } else {
            printf("%-26s  %s\n", "policy", flashrt_policy_name(pol));
            for (size_t i = 0; i < nk; i++) {
                if (kvs[i].is_int) printf("%-26s  %llu\n", kvs[i].k, (unsigned long long)kvs[i].u);
                else printf("%-26s  %.6g\n", kvs[i].k, kvs[i].d);
            }
        }
        if (integrity) rc = 3;
    }
    flashrt_close(rt);
    flashrt_backing_close(bk);
    flashrt_policy_free(pol);
    flashrt_trace_close(tr);
    return rc;
}

/* ---- prepare-backing ---- */

static int cmd_prepare(int argc, char **argv) {
    if (want_help(argc, argv)) { fputs(PREPARE_HELP, stdout); return 0; }
    const char *backing = NULL, *trace = NULL, *map = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = optval(argc, argv, &i, "--backing"))) backing = v;
        else if ((v = optval(argc, argv, &i, "--trace"))) trace = v;
        else if ((v = optval(argc, argv, &i, "--map"))) map = v;
        else {
            fprintf(stderr, "flashrt prepare-backing: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!backing || !trace || !*backing || !*trace) {
        fprintf(stderr, "flashrt prepare-backing: error: --backing and --trace are required (see --help)\n");
        return 2;
    }
    char err[FLASHRT_ERR_LEN];
    struct flashrt_prepare_stats st;
    if (flashrt_prepare_backing(backing, map, trace, &st, err, sizeof err) != 0) return ERR("%s", err);
    printf("{\"blocks\": %llu, \"segments\": %llu, \"bytes_written\": %llu, \"seconds\": %.6f}\n",
           (unsigned long long)st.blocks, (unsigned long long)st.segments,
           (unsigned long long)st.bytes_written, st.seconds);
    return 0;
}

/* ---- probe-disk ---- */

static int cmd_probe(int argc, char **argv) {
    if (want_help(argc, argv)) { fputs(PROBE_HELP, stdout); return 0; }
    const char *dev = NULL, *out = NULL;
    uint64_t reads = 200, seq = 256ull << 20;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = optval(argc, argv, &i, "--device"))) dev = v;
        else if ((v = optval(argc, argv, &i, "--out"))) out = v;
        else if ((v = optval(argc, argv, &i, "--reads"))) {
            if (parse_uint(v, &reads) || reads == 0 || reads > 1000000) { fprintf(stderr, "flashrt probe-disk: error: --reads: invalid value '%s'\n", v); return 2; }
        } else if ((v = optval(argc, argv, &i, "--seq-bytes"))) {
            if (parse_bytes(v, &seq) || seq == 0) { fprintf(stderr, "flashrt probe-disk: error: --seq-bytes: invalid value '%s'\n", v); return 2; }
        } else {
            fprintf(stderr, "flashrt probe-disk: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!dev || !*dev) { fprintf(stderr, "flashrt probe-disk: error: --device is required (see --help)\n"); return 2; }
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
    if (want_help(argc, argv)) { fputs(FEATURES_HELP, stdout); return 0; }
    const char *trace = NULL;
    uint64_t wl = 14, depth = 4;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = optval(argc, argv, &i, "--trace"))) trace = v;
        else if ((v = optval(argc, argv, &i, "--tracker-width-log2"))) { if (parse_uint(v, &wl)) return ERR("--tracker-width-log2: invalid value '%s'", v); }
        else if ((v = optval(argc, argv, &i, "--tracker-depth"))) { if (parse_uint(v, &depth)) return ERR("--tracker-depth: invalid value '%s'", v); }
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

static int cmd_units(int argc, char **argv) {
    if (want_help(argc, argv)) { fputs(UNITS_HELP, stdout); return 0; }
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--json") != 0) {
            fprintf(stderr, "flashrt units: error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    printf("{\"segment_bytes\": %u, \"block_bytes\": %u, \"t_seek_s\": %.17g, "
           "\"bandwidth_bytes_per_s\": %.17g, \"MB\": %.17g, \"GB\": %.17g, \"disks\": %u, "
           "\"window_s\": %.17g, \"warmup_s\": %.17g, \"sample_ratio\": %.17g, \"cache_gb\": %.17g, "
           "\"target_write_rate_mbps\": %.17g, \"abi_version\": %d, \"contract_hash\": \"%s\", "
           "\"num_features\": %d, \"hour_seconds\": %d, \"hours\": %d}\n",
           FRT_SEGMENT_BYTES, FRT_BLOCK_BYTES, FRT_T_SEEK_S, FRT_BANDWIDTH_BYTES_PER_S, FRT_MB,
           FRT_GB, FRT_DISKS, FRT_WINDOW_S, FRT_WARMUP_S, FRT_SAMPLE_RATIO, FRT_CACHE_GB,
           FRT_TARGET_WRITE_RATE_MBPS, FLASHML_POLICY_ABI_VERSION, FLASHML_POLICY_CONTRACT_HASH,
           FLASHML_POLICY_NUM_FEATURES, FLASHML_POLICY_HOUR_SECONDS, FLASHML_POLICY_HOURS);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc -= 2;
    argv += 2;
    if (!strcmp(cmd, "replay")) return cmd_replay(argc, argv);
    if (!strcmp(cmd, "prepare-backing")) return cmd_prepare(argc, argv);
    if (!strcmp(cmd, "probe-disk")) return cmd_probe(argc, argv);
    if (!strcmp(cmd, "features")) return cmd_features(argc, argv);
    if (!strcmp(cmd, "units")) return cmd_units(argc, argv);
    fprintf(stderr, "flashrt: error: unknown command '%s'\n%s", cmd, USAGE);
    return 2;
}
