/* cli_replay.c: `flashrt replay`: options, the replay loop with byte verification, and the
 * metrics as a table or one JSON object. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backing_internal.h"
#include "engine/policy_slots.h"
#include "cli/cli.h"
#include "flashrt.h"
#include "pannier/pannier_settings.h"
#include "policies/policy_internal.h"
#include "kml/ra_hook.h"
#include "kml/readahead.h"
#include "mlcache/mlcache_settings.h"

/* a format: the partition interval's default (mlcache_settings.h) fills both its %llu */
#define REPLAY_HELP \
    "usage: flashrt replay [--policy DIR] [--admission NAME] [--eviction NAME] [--budget NAME]\n" \
    "                      [--placement NAME] [--partition NAME]\n" \
    "                      --trace FILE --flash PATH --flash-bytes N --backing PATH [options]\n" \
    "\n" \
    "Replays the trace through the cache: GETs are served from flash or the backing device and\n" \
    "every returned byte is checked against the deterministic content; PUTs are charged DT.\n" \
    "Prints the simulator's metric keys plus integrity_errors, device_errors, decision_ns_p50\n" \
    "(features + admission + prefetch decision on a miss; its parts features_ns_p50 and\n" \
    "policy_ns_p50), hit_path_us_p50, miss_path_us_p50 and more. Exit 0\n" \
    "when every byte was correct, 3 when some were not, 1 on bad input or a device failure.\n" \
    "\n" \
    "The cache's policy slots, each filled by one policy (names as `flashml sim run`'s):\n" \
    "  --admission NAME       bundle (default: the --policy bundle's admission + prefetch\n" \
    "                         capabilities), admitall, rejectx (the artifact's: keyed by (block,\n" \
    "                         segment), asked per missed segment), rejectx_block (keyed by\n" \
    "                         block, asked once per miss), coinflip\n" \
    "  --eviction NAME        lru (default) or fifo over regions; mat: MAT's Algorithm 1 over\n" \
    "                         the block LRU tail, asking the eviction capability of\n" \
    "                         --eviction-bundle or else --policy (the region of the condemned\n" \
    "                         block's lowest segment goes); mru (the worked example: the most\n" \
    "                         recently used region goes)\n" \
    "  --eviction-bundle DIR  the bundle whose eviction capability --eviction mat asks\n" \
    "  --placement NAME       single (default: one open region) or packing (Pannier's hot/cold\n" \
    "                         packing: a hot and a cold open region; a missed block goes hot when\n" \
    "                         the ghost sketch counted it more often than the median block placed)\n" \
    "  --partition NAME       shared (default: no partition), even (the simulator's: each\n" \
    "                         namespace of the trace the same share of the regions) or static\n" \
    "                         (--partition-shares A,B,...: one per namespace, ascending); a\n" \
    "                         namespace's misses fill its own regions and, at its quota, evict its\n" \
    "                         own (with lru, fifo or mru); bundle: MLCache, the\n" \
    "                         --partition-bundle's flashml_partition over the monitor's features\n" \
    "                         every --partition-interval N page requests (GETs' segments; default\n" \
    "                         %llu); the simulator's static_optimal, discrete_optimal and\n" \
    "                         previous_optimal are refused (mlcache is bundle here)\n" \
    "  --budget NAME          none (default), bucket (the write-rate token bucket: --write-rate-mbps,\n" \
    "                         --write-burst-s, --rate-clock; a write rate alone means bucket),\n" \
    "                         tire (Pannier's TIRE over the regions' erasures: --tire-*)\n" \
    "\n" \
    "options:\n" \
    "  --policy DIR           policy bundle: DIR/policy.so + DIR/manifest.json (checked: sha256,\n" \
    "                         ABI version, contract hash); builtin:NAME is --admission NAME\n" \
    "  --fallback MODE        none (default): refuse a bad policy; rejectx: serve with RejectX\n" \
    "  --rejectx-x X          rejectx, rejectx_block: admit a key seen X times before (default 1)\n" \
    "  --rejectx-factor F     rejectx, rejectx_block: a history of F x capacity-in-segments keys\n" \
    "                         (default 2)\n" \
    "  --coinflip-p P         coinflip: admit probability in [0, 1] (default 0.5)\n" \
    "  --coinflip-seed N      coinflip: hash seed (default 0)\n" \
    "  --partition-shares A,B,...  static: a share >= 0 per namespace of the trace, ascending\n" \
    "  --partition-bundle DIR bundle: a bundle with the partition capability (flashml mlcache run)\n" \
    "  --partition-interval N bundle: page requests (GETs' segments) per interval (default %llu)\n" \
    "  --trace FILE           Tectonic text trace\n" \
    "  --flash PATH           flash file (a missing file is created; locked while flashrt runs)\n" \
    "  --allow-block-device   let --flash be a block device (its contents are overwritten)\n" \
    "  --flash-bytes N        bytes of flash to use (256MiB, 1GB; docs: Sizes); 0 = all\n" \
    "  --backing PATH         backing device or file written by prepare-backing\n" \
    "  --map FILE             backing map (default PATH.map)\n" \
    "  --region-bytes N       flash region size (default 1MiB; a multiple of 128 KiB)\n" \
    "  --direct auto|on|off   O_DIRECT on flash and backing (default auto: when supported)\n" \
    "  --sample-ratio X       percent of a full node in the trace (default: the trace's flashml\n" \
    "                         comment, else 100)\n" \
    "  --write-rate-mbps X    bucket: write-rate limit at full-node scale, MB/s\n" \
    "  --write-burst-s X      bucket: depth in seconds of the rate (default 60)\n" \
    "  --rate-clock trace|wall  bucket: its clock (default trace time)\n" \
    "  --lifespan-epbpd N     tire: erasures allowed per region per day (required)\n" \
    "  --tire-slack K         tire: the ladder's top, K x the quantum's allowance (default 4)\n" \
    "  --tire-steps N         tire: the ladder's steps, 1..16 (default 3)\n" \
    "  --tire-quantum-s X     tire: the quantum of trace time, seconds (default 300)\n" \
    "  --warmup-s X           DT warm-up excluded from the series (default 86400)\n" \
    "  --window-s X           DT window (default 600)\n" \
    "  --disks N              disks per node (default 36)\n" \
    "  --tracker-width-log2 N count-min sketch width (default 14)\n" \
    "  --tracker-depth N      count-min sketch rows (default 4)\n" \
    "  --measure-raw          on hits, also time a raw read of the same flash bytes\n" \
    "  --no-policy-prefetch   do not call the policy's prefetch hint (when a GET arrives and\n" \
    "                         between accesses)\n" \
    "  --fail-read-every N    fault injection: every Nth flash read fails (also env\n" \
    "                         FLASHRT_FAULT_FLASH_READ_EVERY)\n" \
    "  --fail-write-every N   fault injection: every Nth flash write fails (also env\n" \
    "                         FLASHRT_FAULT_FLASH_WRITE_EVERY)\n" \
    "  --limit N              stop after N accesses\n" \
    "  --recover              start from what the flash holds (after a crash: kill -9) instead\n" \
    "                         of cold: the regions' headers and PATH.journal (the flash file's\n" \
    "                         layout must be the one it was written with); never a stale byte\n" \
    "  --sync                 fdatasync each region header and journal record (power loss)\n" \
    "  --readahead-bundle DIR KML's readahead model (capability \"readahead\") on the backing\n" \
    "                         reads: per stream (the block) every window of trace time its\n" \
    "                         flashml_readahead_kib sizes a posix_fadvise(WILLNEED) of the\n" \
    "                         block's next bytes after each backing read (no hint under\n" \
    "                         O_DIRECT); stats under \"readahead\"\n" \
    "  --readahead-window-ms N  its window (default: the bundle's flashml_readahead_window_ms)\n" \
    "  --json                 one JSON object instead of a table\n"

struct replay_opts {
    struct flashrt_config cfg;
    const char *policy_dir, *trace_path, *backing_path, *map_path, *fallback;
    const char *ra_bundle; /* --readahead-bundle, NULL: no readahead hook */
    const char *ev_bundle; /* --eviction-bundle, NULL: --policy's for --eviction mat */
    const char *part_bundle; /* --partition-bundle */
    const char *admission; /* the admission slot's policy name */
    const char *budget;    /* the budget slot's policy name */
    const char *placement; /* the placement slot's policy name */
    double shares[FLASHRT_PART_MAX_STREAMS]; /* --partition-shares */
    unsigned nshares;
    int32_t ns[FLASHRT_PART_MAX_STREAMS];    /* the trace's namespaces, ascending (partitioned) */
    uint64_t ra_window_ms; /* 0: the bundle's */
    int as_json, allow_block;
    double sample_ratio; /* 0: from the trace */
    uint64_t limit;
};

/* The admission slot from --admission and --policy (builtin:NAME is --admission NAME): one
 * policy, a name the engine has, its knobs only; 0, or -1 after printing the error. */
static int slots(struct replay_opts *o, const char *rx_knob, const char *cf_knob) {
    struct flashrt_config *cfg = &o->cfg;
    if (o->policy_dir && !strncmp(o->policy_dir, "builtin:", 8)) {
        if (o->admission) {
            fprintf(stderr, "flashrt replay: error: two policies for the admission slot: --policy %s and --admission %s\n",
                    o->policy_dir, o->admission);
            return -1;
        }
        o->admission = o->policy_dir + 8;
        o->policy_dir = NULL;
        if (!strcmp(o->admission, "bundle")) {
            fprintf(stderr, "flashrt replay: error: --policy builtin:bundle: a bundle is a directory (--policy DIR)\n");
            return -1;
        }
    }
    if (!o->admission) o->admission = "bundle";
    const char *why = frt_admission_unsupported(o->admission);
    if (why) {
        fprintf(stderr, "flashrt replay: error: --admission %s: not in this runtime: %s; flashrt replay reads none "
                        "(use bundle, admitall, rejectx, rejectx_block or coinflip)\n", o->admission, why);
        return -1;
    }
    int a = flashrt_admission_from_name(o->admission);
    if (a < 0) {
        fprintf(stderr, "flashrt replay: error: --admission: invalid value '%s' (expected bundle, admitall, rejectx, "
                        "rejectx_block or coinflip)\n", o->admission);
        return -1;
    }
    cfg->admission = (enum flashrt_admission)a;
    if (a == FLASHRT_ADMIT_BUNDLE && !o->policy_dir) {
        fprintf(stderr, "flashrt replay: error: --admission bundle needs --policy DIR (a bundle with the admission "
                        "capability; or --admission NAME for a built-in)\n");
        return -1;
    }
    const char *stray = rx_knob && a != FLASHRT_ADMIT_REJECTX && a != FLASHRT_ADMIT_REJECTX_BLOCK ? rx_knob
                      : cf_knob && a != FLASHRT_ADMIT_COINFLIP ? cf_knob
                      : strcmp(o->fallback, "none") && a != FLASHRT_ADMIT_BUNDLE ? "--fallback" : NULL;
    if (stray) {
        fprintf(stderr, "flashrt replay: error: %s does not apply: the admission is %s\n", stray, o->admission);
        return -1;
    }
    return 0;
}

/* The budget slot from --budget (default: bucket with a write rate, else none) and its
 * knobs; 0, or -1 after printing the error. */
static int budget_slot(struct replay_opts *o, const char *bucket_knob, const char *tire_knob) {
    struct flashrt_config *cfg = &o->cfg;
    int rate = cfg->write_rate_mbps > 0;
    int which = !o->budget ? (rate ? FLASHRT_BUDGET_BUCKET : FLASHRT_BUDGET_NONE) : flashrt_budget_from_name(o->budget);
    if (which < 0) {
        fprintf(stderr, "flashrt replay: error: --budget: invalid value '%s' (expected none, bucket or tire)\n", o->budget);
        return -1;
    }
    const char *name = flashrt_budget_name(which);
    if (which == FLASHRT_BUDGET_BUCKET && !rate) {
        fprintf(stderr, "flashrt replay: error: --budget bucket needs --write-rate-mbps X > 0 (MB/s at full-node scale)\n");
        return -1;
    }
    if (which != FLASHRT_BUDGET_BUCKET && rate) {
        fprintf(stderr, "flashrt replay: error: two policies for the budget slot: --budget %s and --write-rate-mbps "
                        "(the bucket)\n", name);
        return -1;
    }
    const char *stray = o->budget && which != FLASHRT_BUDGET_BUCKET && bucket_knob ? bucket_knob
                      : which != FLASHRT_BUDGET_TIRE && tire_knob ? tire_knob : NULL;
    if (stray) {
        fprintf(stderr, "flashrt replay: error: %s does not apply: the budget is %s\n", stray, name);
        return -1;
    }
    if (which == FLASHRT_BUDGET_TIRE && !(cfg->lifespan_epbpd > 0)) {
        fprintf(stderr, "flashrt replay: error: --budget tire needs --lifespan-epbpd N (erasures allowed per region per day)\n");
        return -1;
    }
    cfg->budget = (enum flashrt_budget)which;
    o->budget = name;
    return 0;
}

/* -1 when the options are good, else the exit code. */
static int parse_replay(int argc, char **argv, struct replay_opts *o) {
    struct flashrt_config *cfg = &o->cfg;
    flashrt_config_default(cfg);
    o->policy_dir = o->trace_path = o->backing_path = o->map_path = NULL;
    o->fallback = "none";
    o->ra_bundle = NULL;
    o->ev_bundle = NULL;
    o->part_bundle = NULL;
    o->admission = NULL;
    o->ra_window_ms = 0;
    /* the slots' options, each given at most once (one policy per slot); the knobs' */
    static const char *const ONCE[] = {"--policy", "--admission", "--eviction", "--eviction-bundle", "--budget",
                                       "--placement", "--partition", "--partition-bundle", NULL};
    int seen[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const char *rx_knob = NULL, *cf_knob = NULL, *bucket_knob = NULL, *tire_knob = NULL;
    int interval_knob = 0;
    o->budget = NULL;
    o->nshares = 0;
    o->as_json = o->allow_block = 0;
    o->sample_ratio = 0;
    o->limit = UINT64_MAX;
    int have_bytes = 0;
    uint64_t u;
    const char *env;
    if ((env = getenv("FLASHRT_FAULT_FLASH_READ_EVERY")) && cli_parse_uint(env, &cfg->fail_read_every))
        return ERR("FLASHRT_FAULT_FLASH_READ_EVERY: expected an integer, got '%s'", env);
    if ((env = getenv("FLASHRT_FAULT_FLASH_WRITE_EVERY")) && cli_parse_uint(env, &cfg->fail_write_every))
        return ERR("FLASHRT_FAULT_FLASH_WRITE_EVERY: expected an integer, got '%s'", env);
    for (int i = 0; i < argc; i++) {
        const char *v;
        const char *a = argv[i];
        for (int k = 0; ONCE[k]; k++)
            if (!strcmp(a, ONCE[k]) && seen[k]++) {
                fprintf(stderr, "flashrt replay: error: %s given twice (a slot holds one policy)\n", a);
                return 2;
            }
#define OPT(name) (v = cli_optval(argc, argv, &i, name))
#define BAD(name) do { fprintf(stderr, "flashrt replay: error: %s: invalid value '%s'\n", name, v); return 2; } while (0)
#define BADR(name, what) do { fprintf(stderr, "flashrt replay: error: %s: invalid value '%s' (expected %s)\n", name, v, what); return 2; } while (0)
#define BADW(name, why) do { fprintf(stderr, "flashrt replay: error: %s: invalid value '%s' (must be %s)\n", name, v, why); return 2; } while (0)
        if (OPT("--policy")) o->policy_dir = v;
        else if (OPT("--admission")) o->admission = v;
        else if (OPT("--rejectx-x")) { if (cli_parse_uint(v, &u) || u < 1 || u > 4294967295u) BADR("--rejectx-x", "an integer in [1, 2^32 - 1] (accesses)"); cfg->rejectx_x = (unsigned)u; rx_knob = "--rejectx-x"; }
        else if (OPT("--rejectx-factor")) { if (cli_parse_double(v, &cfg->rejectx_factor) || !(cfg->rejectx_factor >= 1e-6 && cfg->rejectx_factor <= 1e4)) BADR("--rejectx-factor", "a number in [1e-6, 1e4] (x capacity)"); rx_knob = "--rejectx-factor"; }
        else if (OPT("--coinflip-p")) { if (cli_parse_double(v, &cfg->coinflip_p) || !(cfg->coinflip_p >= 0 && cfg->coinflip_p <= 1)) BADR("--coinflip-p", "a probability in [0, 1]"); cf_knob = "--coinflip-p"; }
        else if (OPT("--coinflip-seed")) { if (cli_parse_uint(v, &cfg->coinflip_seed)) BADR("--coinflip-seed", "an integer in [0, 2^64 - 1]"); cf_knob = "--coinflip-seed"; }
        else if (OPT("--fallback")) {
            if (strcmp(v, "none") && strcmp(v, "rejectx")) BAD("--fallback");
            o->fallback = v;
        } else if (OPT("--trace")) o->trace_path = v;
        else if (OPT("--flash-bytes")) {
            if (cli_parse_bytes(v, &cfg->flash_bytes)) BADR("--flash-bytes", "bytes: an integer with an optional unit, 256MiB, 1GB (docs: Sizes); 0 = all");
            have_bytes = 1;
        } else if (OPT("--flash")) cfg->flash_path = v;
        else if (OPT("--backing")) o->backing_path = v;
        else if (OPT("--map")) o->map_path = v;
        else if (OPT("--region-bytes")) { if (cli_parse_bytes(v, &cfg->region_bytes) || !cfg->region_bytes || cfg->region_bytes % FRT_SEGMENT_BYTES || cfg->region_bytes > ((uint64_t)1 << 40)) BADR("--region-bytes", "bytes: a positive multiple of 128 KiB up to 1 TiB, 1MiB (docs: Sizes)"); }
        else if (OPT("--eviction-bundle")) { if (!*v) BAD("--eviction-bundle"); o->ev_bundle = v; }
        else if (OPT("--eviction")) {
            int e = flashrt_eviction_from_name(v);
            if (e < 0) BADR("--eviction", "lru, fifo, mat or mru");
            cfg->eviction = (enum flashrt_eviction)e;
        } else if (OPT("--direct")) {
            if (!strcmp(v, "auto")) cfg->direct = FLASHRT_DIRECT_AUTO;
            else if (!strcmp(v, "on")) cfg->direct = FLASHRT_DIRECT_ON;
            else if (!strcmp(v, "off")) cfg->direct = FLASHRT_DIRECT_OFF;
            else BAD("--direct");
        } else if (OPT("--sample-ratio")) { if (cli_parse_double(v, &o->sample_ratio) || !(o->sample_ratio > 0 && o->sample_ratio <= 100)) BADR("--sample-ratio", "percent of a full node in (0, 100]"); }
        else if (OPT("--write-rate-mbps")) { if (cli_parse_double(v, &cfg->write_rate_mbps) || !(cfg->write_rate_mbps >= 0 && cfg->write_rate_mbps <= 1e9)) BADR("--write-rate-mbps", "MB/s in [0, 1e9]"); }
        else if (OPT("--write-burst-s")) { if (cli_parse_double(v, &cfg->write_burst_s) || !(cfg->write_burst_s > 0 && cfg->write_burst_s <= 1e9)) BADR("--write-burst-s", "seconds in (0, 1e9]"); bucket_knob = "--write-burst-s"; }
        else if (OPT("--rate-clock")) {
            if (!strcmp(v, "trace")) cfg->rate_clock = FLASHRT_CLOCK_TRACE;
            else if (!strcmp(v, "wall")) cfg->rate_clock = FLASHRT_CLOCK_WALL;
            else BAD("--rate-clock");
            bucket_knob = "--rate-clock";
        }
        else if (OPT("--budget")) o->budget = v;
        else if (OPT("--placement")) {
            int pl = flashrt_placement_from_name(v);
            if (pl < 0) BADR("--placement", "single or packing");
            cfg->placement = (enum flashrt_placement)pl;
        } else if (OPT("--partition")) {
            const char *why = frt_partition_unsupported(v);
            if (why) {
                fprintf(stderr, "flashrt replay: error: --partition %s: not in this runtime yet: %s (use shared, even or "
                                "static)\n", v, why);
                return 2;
            }
            int pt = flashrt_partition_from_name(v);
            if (pt < 0) BADR("--partition", "shared, even, static or bundle");
            cfg->partition = (enum flashrt_partition)pt;
        } else if (OPT("--partition-bundle")) { if (!*v) BAD("--partition-bundle"); o->part_bundle = v; }
        else if (OPT("--partition-interval")) {
            uint64_t n;
            const char *why;
            if (cli_parse_uint(v, &n)) BADR("--partition-interval", "page requests (segments of GETs), an integer");
            if ((why = frt_mlc_partition_interval_problem(n > INT64_MAX ? INT64_MAX : (int64_t)n))) BADW("--partition-interval", why);
            cfg->partition_interval = n;
            interval_knob = 1;
        }
        else if (OPT("--partition-shares")) {
            char *end = NULL;
            const char *q = v;
            o->nshares = 0;
            for (;;) {
                if (o->nshares == FLASHRT_PART_MAX_STREAMS) BADR("--partition-shares", "at most 16 shares");
                double x = strtod(q, &end);
                if (end == q || !(x >= 0 && x <= 1e12)) BADR("--partition-shares", "shares >= 0, comma-separated, one per namespace in ascending order");
                o->shares[o->nshares++] = x;
                if (*end == 0) break;
                if (*end != ',') BADR("--partition-shares", "shares >= 0, comma-separated, one per namespace in ascending order");
                q = end + 1;
            }
        }
        else if (OPT("--lifespan-epbpd")) {
            const char *why;
            if (cli_parse_double(v, &cfg->lifespan_epbpd)) BADR("--lifespan-epbpd", "a number of erasures per region per day");
            if ((why = frt_pn_lifespan_epbpd_problem(cfg->lifespan_epbpd))) BADW("--lifespan-epbpd", why);
            tire_knob = "--lifespan-epbpd";
        }
        else if (OPT("--tire-slack")) { if (cli_parse_double(v, &cfg->tire_slack) || !(cfg->tire_slack >= 1 && cfg->tire_slack <= 1e6)) BADR("--tire-slack", "a factor in [1, 1e6]"); tire_knob = "--tire-slack"; }
        else if (OPT("--tire-steps")) { if (cli_parse_uint(v, &u) || u < 1 || u > 16) BADR("--tire-steps", "an integer in [1, 16]"); cfg->tire_steps = (unsigned)u; tire_knob = "--tire-steps"; }
        else if (OPT("--tire-quantum-s")) { if (cli_parse_double(v, &cfg->tire_quantum_s) || !(cfg->tire_quantum_s >= 1e-3 && cfg->tire_quantum_s <= 1e9)) BADR("--tire-quantum-s", "seconds in [0.001, 1e9]"); tire_knob = "--tire-quantum-s"; } else if (OPT("--warmup-s")) { if (cli_parse_double(v, &cfg->warmup_s) || !(cfg->warmup_s >= 0 && cfg->warmup_s <= 1e12)) BADR("--warmup-s", "seconds in [0, 1e12]"); }
        else if (OPT("--window-s")) { if (cli_parse_double(v, &cfg->window_s) || !(cfg->window_s >= 1e-3 && cfg->window_s <= 1e9)) BADR("--window-s", "seconds in [0.001, 1e9]"); }
        else if (OPT("--disks")) { if (cli_parse_uint(v, &u) || u == 0 || u > 1000000) BADR("--disks", "disks per node, an integer in [1, 1000000]"); cfg->disks = (unsigned)u; }
        else if (OPT("--tracker-width-log2")) { if (cli_parse_uint(v, &u) || u < 4 || u > 24) BADR("--tracker-width-log2", "an integer in [4, 24]"); cfg->tracker_width_log2 = (unsigned)u; }
        else if (OPT("--tracker-depth")) { if (cli_parse_uint(v, &u) || u < 1 || u > 8) BADR("--tracker-depth", "an integer in [1, 8]"); cfg->tracker_depth = (unsigned)u; }
        else if (OPT("--fail-read-every")) { if (cli_parse_uint(v, &cfg->fail_read_every)) BADR("--fail-read-every", "flash reads, an integer in [0, 2^64 - 1]; 0 = never"); }
        else if (OPT("--fail-write-every")) { if (cli_parse_uint(v, &cfg->fail_write_every)) BADR("--fail-write-every", "flash writes, an integer in [0, 2^64 - 1]; 0 = never"); }
        else if (OPT("--limit")) { if (cli_parse_uint(v, &o->limit)) BADR("--limit", "accesses, an integer in [0, 2^64 - 1]"); }
        else if (OPT("--readahead-bundle")) { if (!*v) BAD("--readahead-bundle"); o->ra_bundle = v; }
        else if (OPT("--readahead-window-ms")) { if (cli_parse_uint(v, &o->ra_window_ms) || o->ra_window_ms == 0 || o->ra_window_ms > 86400000) BADR("--readahead-window-ms", "milliseconds, an integer in [1, 86400000]"); }
        else if (!strcmp(a, "--recover")) cfg->recover = 1;
        else if (!strcmp(a, "--sync")) cfg->sync = 1;
        else if (!strcmp(a, "--measure-raw")) cfg->measure_raw = 1;
        else if (!strcmp(a, "--no-policy-prefetch")) cfg->no_policy_prefetch = 1;
        else if (!strcmp(a, "--json")) o->as_json = 1;
        else if (!strcmp(a, "--allow-block-device")) o->allow_block = 1;
        else {
            fprintf(stderr, "flashrt replay: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
#undef BAD
#undef BADR
#undef OPT
    }
    const char *missing = !o->trace_path ? "--trace" : !cfg->flash_path ? "--flash"
                        : !have_bytes ? "--flash-bytes" : !o->backing_path ? "--backing" : NULL;
    if (missing) {
        fprintf(stderr, "flashrt replay: error: %s is required (see --help)\n", missing);
        return 2;
    }
    if (slots(o, rx_knob, cf_knob) != 0 || budget_slot(o, bucket_knob, tire_knob) != 0) return 2;
    if (o->nshares && cfg->partition != FLASHRT_PART_STATIC) {
        fprintf(stderr, "flashrt replay: error: --partition-shares does not apply: the partition is %s\n",
                flashrt_partition_name((int)cfg->partition));
        return 2;
    }
    if (cfg->partition == FLASHRT_PART_BUNDLE && !o->part_bundle) {
        fprintf(stderr, "flashrt replay: error: --partition bundle needs --partition-bundle DIR (a bundle with the "
                        "partition capability: flashml mlcache run)\n");
        return 2;
    }
    if ((o->part_bundle || interval_knob) && cfg->partition != FLASHRT_PART_BUNDLE) {
        fprintf(stderr, "flashrt replay: error: %s does not apply: the partition is %s\n",
                o->part_bundle ? "--partition-bundle" : "--partition-interval", flashrt_partition_name((int)cfg->partition));
        return 2;
    }
    if (cfg->partition == FLASHRT_PART_BUNDLE && !cfg->partition_interval) cfg->partition_interval = FRT_MLC_PARTITION_INTERVAL_DEFAULT;
    if (cfg->partition == FLASHRT_PART_STATIC && !o->nshares) {
        fprintf(stderr, "flashrt replay: error: --partition static needs --partition-shares A,B,... (one per namespace of "
                        "the trace, in ascending order)\n");
        return 2;
    }
    if (cfg->partition != FLASHRT_PART_SHARED && cfg->eviction == FLASHRT_MAT) {
        fprintf(stderr, "flashrt replay: error: --partition %s with --eviction mat: not a composition this engine has (MAT "
                        "chooses blocks across the whole cache); use --eviction lru, fifo or mru\n",
                flashrt_partition_name((int)cfg->partition));
        return 2;
    }
    if (o->ev_bundle && cfg->eviction != FLASHRT_MAT) {
        fprintf(stderr, "flashrt replay: error: --eviction-bundle is for --eviction mat (the eviction is %s)\n",
                flashrt_eviction_name((int)cfg->eviction));
        return 2;
    }
    if (cfg->eviction == FLASHRT_MAT && !o->ev_bundle && !o->policy_dir) {
        fprintf(stderr, "flashrt replay: error: --eviction mat needs a bundle with the evict capability: "
                        "--eviction-bundle DIR, or a bundle as --policy\n");
        return 2;
    }
    /* a bundle no slot takes */
    if (o->policy_dir && cfg->admission != FLASHRT_ADMIT_BUNDLE && !(cfg->eviction == FLASHRT_MAT && !o->ev_bundle)) {
        fprintf(stderr, "flashrt replay: error: --policy %s fills no slot: the admission is %s and --eviction %s takes %s\n",
                o->policy_dir, o->admission, flashrt_eviction_name((int)cfg->eviction),
                cfg->eviction == FLASHRT_MAT ? "--eviction-bundle" : "no bundle");
        return 2;
    }
    return -1;
}

/* The readahead hook's figures: a "readahead" object (JSON) or readahead_* lines (table). */
static void print_readahead(void *ctx, int as_json, int *first) {
    const frt_ra_hook *h = ctx;
    const struct frt_ra_hook_stats *st = frt_ra_hook_stats(h);
    /* the decisions by KiB, ascending */
    size_t order[FRT_RA_HOOK_MAX_SIZES];
    for (size_t i = 0; i < st->nsizes; i++) {
        size_t j = i;
        for (; j > 0 && st->decisions[order[j - 1]].kib > st->decisions[i].kib; j--) order[j] = order[j - 1];
        order[j] = i;
    }
    double mean_ns = st->windows ? (double)st->infer_ns / (double)st->windows : 0.0;
    const char *hinting = frt_ra_hook_hinting(h) ? "fadvise" : "off: O_DIRECT backing (page-cache hints do not apply)";
    if (!as_json) {
        printf("%-26s  %s\n", "readahead_hinting", hinting);
        printf("%-26s  %d\n", "readahead_window_ms", frt_ra_hook_window_ms(h));
        printf("%-26s  %llu\n%-26s  %llu\n%-26s  %llu\n%-26s  %llu\n", "readahead_reads", (unsigned long long)st->reads,
               "readahead_streams", (unsigned long long)st->streams, "readahead_windows", (unsigned long long)st->windows,
               "readahead_hints", (unsigned long long)st->hints);
        printf("%-26s  %llu\n%-26s  %.6g\n", "readahead_hinted_bytes", (unsigned long long)st->hinted_bytes,
               "readahead_inference_ns", mean_ns);
        for (size_t i = 0; i < st->nsizes; i++)
            printf("readahead_kib %-12llu  %llu\n", (unsigned long long)st->decisions[order[i]].kib,
                   (unsigned long long)st->decisions[order[i]].n);
        return;
    }
    printf("%s\"readahead\": {", *first ? "" : ", ");
    *first = 0;
    int f = 1;
    cli_json_int(stdout, "streams", st->streams, &f);
    cli_json_int(stdout, "live_streams", st->live_streams, &f);
    cli_json_int(stdout, "stream_evictions", st->stream_evictions, &f);
    cli_json_int(stdout, "table_streams", FRT_RA_HOOK_STREAMS, &f);
    cli_json_int(stdout, "reads", st->reads, &f);
    cli_json_int(stdout, "window_ms", (uint64_t)frt_ra_hook_window_ms(h), &f);
    cli_json_int(stdout, "windows", st->windows, &f);
    fputs(", \"decisions\": {", stdout);
    for (size_t i = 0; i < st->nsizes; i++)
        printf("%s\"%llu\": %llu", i ? ", " : "", (unsigned long long)st->decisions[order[i]].kib,
               (unsigned long long)st->decisions[order[i]].n);
    fputc('}', stdout);
    cli_json_int(stdout, "decisions_other", st->decisions_other, &f);
    cli_json_int(stdout, "clamped", st->clamped, &f);
    cli_json_int(stdout, "initial_kib", FRT_KML_READAHEAD_KIB_DEFAULT, &f);
    cli_json_str(stdout, "hinting", hinting, &f);
    cli_json_int(stdout, "hints", st->hints, &f);
    cli_json_int(stdout, "hinted_bytes", st->hinted_bytes, &f);
    cli_json_int(stdout, "hint_errors", st->hint_errors, &f);
    cli_json_num(stdout, "mean_inference_ns", mean_ns, &f);
    fputc('}', stdout);
}

/* What follows the figures: the readahead hook's, the partitions'. */
struct more_ctx {
    const frt_ra_hook *ra;
    const struct flashrt_metrics *m;
    const int32_t *ns;
};

static void print_more(void *ctx, int as_json, int *first) {
    const struct more_ctx *c = ctx;
    if (c->ra) print_readahead((void *)c->ra, as_json, first);
    const struct flashrt_metrics *m = c->m;
    if (!m->partitions) return;
    if (as_json) printf("%s\"partitions\": [", *first ? "" : ", ");
    *first = 0;
    for (unsigned p = 0; p < m->partitions; p++) {
        if (!as_json) {
            printf("partition %-16d  quota_regions %llu regions %llu gets %llu hits %llu\n", (int)c->ns[p],
                   (unsigned long long)m->partition_quota[p], (unsigned long long)m->partition_regions[p],
                   (unsigned long long)m->partition_gets[p], (unsigned long long)m->partition_hits[p]);
            continue;
        }
        int f = 1;
        printf("%s{", p ? ", " : "");
        cli_json_int(stdout, "namespace", (uint64_t)(int64_t)c->ns[p], &f);
        cli_json_int(stdout, "quota_regions", m->partition_quota[p], &f);
        cli_json_int(stdout, "regions", m->partition_regions[p], &f);
        cli_json_int(stdout, "gets", m->partition_gets[p], &f);
        cli_json_int(stdout, "hits", m->partition_hits[p], &f);
        fputc('}', stdout);
    }
    if (as_json) fputc(']', stdout);
}

/* The metrics in the simulator's key order, then the runtime's: one JSON object or a table. */
static void print_metrics(const struct flashrt_metrics *mp, uint64_t integrity, uint64_t verified_bytes,
                          double sample_ratio, const char *policy, const char *warning, const char *admission,
                          const char *eviction, const char *budget, const char *placement, const char *partition,
                          const int32_t *ns, int as_json, const frt_ra_hook *ra) {
    const struct flashrt_metrics m = *mp;
    struct cli_figure kvs[] = {
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
        {"sample_ratio", 0, sample_ratio, 0},
        {"throughput_accesses_per_s", 0, m.throughput_accesses_per_s, 0},
        {"throughput_mb_per_s", 0, m.throughput_mb_per_s, 0}, {"direct_io", 1, 0, (uint64_t)m.direct_io},
        {"eviction_decisions", 1, 0, m.eviction_decisions}, {"eviction_predictions", 1, 0, m.eviction_predictions},
        {"eviction_reinsertions", 1, 0, m.eviction_reinsertions}, {"eviction_threshold", 0, m.eviction_threshold, 0},
        {"eviction_decision_ns_p50", 0, m.eviction_decision_ns_p50, 0},
        {"budget_quota", 0, m.budget_quota, 0}, {"budget_credit", 0, m.budget_credit, 0},
        {"budget_quanta", 1, 0, m.budget_quanta}, {"budget_blocked_quanta", 1, 0, m.budget_blocked_quanta},
        {"recovered_regions", 1, 0, m.recovered_regions}, {"recovered_segments", 1, 0, m.recovered_segments},
        {"recovery_dropped", 1, 0, m.recovery_dropped}, {"recovered_hits", 1, 0, m.recovered_hits},
        {"header_errors", 1, 0, m.header_errors}, {"journalled", 1, 0, m.journalled},
        {"placement_hot_misses", 1, 0, m.placement_hot_misses},
        {"partition_intervals", 1, 0, m.partition_intervals},
        {"partition_resize_evictions", 1, 0, m.partition_resize_evictions},
    };
    const char *strs[] = {"policy", policy, "admission", admission, "eviction", eviction, "budget", budget,
                          "placement", placement, "partition", partition, "policy_warning", warning};
    struct more_ctx more = {ra, mp, ns};
    cli_print_figures_more(kvs, sizeof kvs / sizeof kvs[0], strs, 7, 6, as_json, print_more, &more);
}

static int replay_run(const struct replay_opts *op, struct flashrt_config *cfgp, flashrt_policy *pol,
                      const char *warning, char *err);

/* The partition's streams: the trace's namespaces, ascending (the simulator's dense rank),
 * read before any file is written; static's shares must be one per namespace. 0, or 1 after
 * printing the error. */
static int partition_streams(struct replay_opts *o, struct flashrt_config *cfg) {
    char err[FLASHRT_ERR_LEN];
    flashrt_trace *tr = flashrt_trace_open(o->trace_path, err, sizeof err);
    if (!tr) return ERR("%s", err);
    struct flashrt_access a;
    unsigned k = 0;
    int r;
    while ((r = flashrt_trace_next(tr, &a, err, sizeof err)) == 1) {
        unsigned i = 0;
        while (i < k && o->ns[i] < a.ns) i++;
        if (i < k && o->ns[i] == a.ns) continue;
        if (k == FLASHRT_PART_MAX_STREAMS) {
            flashrt_trace_close(tr);
            return ERR("--partition %s: %s has more than %d namespaces (%s:%llu); a partition per namespace needs at "
                       "most %d", flashrt_partition_name((int)cfg->partition), o->trace_path, FLASHRT_PART_MAX_STREAMS,
                       o->trace_path, (unsigned long long)a.line, FLASHRT_PART_MAX_STREAMS);
        }
        memmove(o->ns + i + 1, o->ns + i, (k - i) * sizeof o->ns[0]);
        o->ns[i] = a.ns;
        k++;
    }
    flashrt_trace_close(tr);
    if (r < 0) return ERR("%s", err);
    if (cfg->partition == FLASHRT_PART_STATIC && o->nshares != k)
        return ERR("--partition-shares: %u shares for the %u namespaces of %s (one per namespace, ascending)", o->nshares,
                   k, o->trace_path);
    cfg->partition_streams = k;
    cfg->partition_ns = o->ns;
    cfg->partition_shares = o->shares;
    cfg->partition_nshares = o->nshares;
    return 0;
}

int cli_replay(int argc, char **argv) {
    if (cli_want_help(argc, argv)) {
        const unsigned long long interval = FRT_MLC_PARTITION_INTERVAL_DEFAULT;
        printf(REPLAY_HELP, interval, interval);
        return 0;
    }
    struct replay_opts o;
    int bad = parse_replay(argc, argv, &o);
    if (bad >= 0) return bad;
    struct flashrt_config cfg = o.cfg;
    char err[FLASHRT_ERR_LEN] = "";
    /* no output is an input; the flash file and the backing's map locked */
    char map[4200];
    snprintf(map, sizeof map, o.map_path ? "%s" : "%s.map", o.map_path ? o.map_path : o.backing_path);
    struct cli_guard g;
    cli_guard_init(&g, "replay");
    g.allow_block = o.allow_block;
    cli_guard_add(&g, "--trace", o.trace_path, CLI_IN);
    cli_guard_add(&g, "--backing", o.backing_path, CLI_IN);
    cli_guard_add(&g, o.map_path ? "--map" : "--backing's map", map, CLI_IN);
    cli_guard_add_bundle(&g, "--policy", o.policy_dir);
    cli_guard_add_bundle(&g, "--readahead-bundle", o.ra_bundle);
    cli_guard_add_bundle(&g, "--eviction-bundle", o.ev_bundle);
    cli_guard_add_bundle(&g, "--partition-bundle", o.part_bundle);
    cli_guard_add(&g, "--flash", cfg.flash_path, CLI_DEV);
    cli_guard_add_suffix(&g, "--flash's journal", cfg.flash_path, ".journal", CLI_DEV);
    if (cli_guard_check(&g)) return 1;
    if (cfg.partition != FLASHRT_PART_SHARED && partition_streams(&o, &cfg) != 0) return 1;
    /* every bundle a slot takes, loaded and checked before any device is touched: --eviction
     * mat's eviction capability, --admission bundle's admission and prefetch */
    flashrt_policy *evb = NULL, *pol = NULL, *partb = NULL;
    char warning[FLASHRT_ERR_LEN] = "";
    if (cfg.partition == FLASHRT_PART_BUNDLE) {
        partb = flashrt_policy_load_partition(o.part_bundle, err, sizeof err);
        if (!partb) return ERR("--partition bundle: %s", err);
        cfg.partition_policy = partb;
    }
    if (cfg.eviction == FLASHRT_MAT) {
        const char *dir = o.ev_bundle ? o.ev_bundle : o.policy_dir;
        evb = frt_policy_load_for(dir, FRT_CAP_AS_LISTED, err, sizeof err);
        if (!evb) {
            flashrt_policy_free(partb);
            return ERR("--eviction mat: %s", err);
        }
        if (!frt_policy_evict(evb)) {
            int rc = ERR("--eviction mat: bundle %s has no evict capability (it lists: %s)", dir, frt_policy_listed(evb));
            flashrt_policy_free(evb);
            flashrt_policy_free(partb);
            return rc;
        }
        cfg.eviction_policy = evb;
    }
    if (cfg.admission == FLASHRT_ADMIT_BUNDLE) {
        pol = flashrt_policy_load(o.policy_dir, !strcmp(o.fallback, "rejectx") ? FLASHRT_FALLBACK_REJECTX : FLASHRT_FALLBACK_NONE, err, FLASHRT_ERR_LEN);
        if (!pol) {
            flashrt_policy_free(evb);
            flashrt_policy_free(partb);
            return ERR("--admission bundle: %s", err);
        }
        if (err[0]) {
            snprintf(warning, sizeof warning, "%s", err);
            fprintf(stderr, "flashrt: warning: %s; serving with the RejectX fallback\n", warning);
        }
    }
    int rc = 1;
    if (cli_guard_lock(&g, "--flash", cfg.flash_path, 1, 1) ||
        cli_guard_lock(&g, o.map_path ? "--map" : "--backing's map", map, 0, 0) || cli_guard_hold()) {
        cli_guard_release(&g, 1);
    } else {
        rc = replay_run(&o, &cfg, pol, warning, err);
        cli_guard_release(&g, rc == 1);
    }
    flashrt_policy_free(pol);
    flashrt_policy_free(evb);
    flashrt_policy_free(partb);
    return rc;
}

static int replay_run(const struct replay_opts *op, struct flashrt_config *cfgp, flashrt_policy *pol,
                      const char *warning, char *err) {
    const struct replay_opts o = *op;
    struct flashrt_config cfg = *cfgp;
    flashrt_trace *tr = flashrt_trace_open(o.trace_path, err, FLASHRT_ERR_LEN);
    if (!tr) return ERR("%s", err);
    flashrt_backing *bk = flashrt_backing_open(o.backing_path, o.map_path, cfg.direct, err, FLASHRT_ERR_LEN);
    if (!bk) { flashrt_trace_close(tr); return ERR("%s", err); }
    /* the readahead hook: the model's bundle and the controller, attached to the backing */
    flashrt_policy *ra_pol = NULL;
    frt_ra_hook *ra = NULL;
    if (o.ra_bundle) {
        ra_pol = frt_readahead_load(o.ra_bundle, err, FLASHRT_ERR_LEN);
        const struct frt_readahead_fns *fns = ra_pol ? frt_policy_readahead(ra_pol) : NULL;
        if (fns) ra = frt_ra_hook_new(fns, o.ra_window_ms ? (int)o.ra_window_ms : fns->window_ms, !frt_backing_direct(bk), err, FLASHRT_ERR_LEN);
        if (!ra) {
            flashrt_policy_free(ra_pol);
            flashrt_backing_close(bk); flashrt_trace_close(tr);
            return ERR("%s", err);
        }
        frt_backing_set_readahead(bk, ra);
    }
    /* the sample ratio comes from the trace's comment, read while the header is parsed: read
     * the first access before opening the cache */
    struct flashrt_access acc;
    int r = flashrt_trace_next(tr, &acc, err, FLASHRT_ERR_LEN);
    if (r < 0) { frt_ra_hook_free(ra); flashrt_policy_free(ra_pol); flashrt_backing_close(bk); flashrt_trace_close(tr); return ERR("%s", err); }
    cfg.sample_ratio = o.sample_ratio > 0 ? o.sample_ratio : flashrt_trace_sample_ratio(tr) > 0 ? flashrt_trace_sample_ratio(tr) : 100.0;
    flashrt *rt = flashrt_open(&cfg, pol, bk, err, FLASHRT_ERR_LEN);
    if (!rt) { frt_ra_hook_free(ra); flashrt_policy_free(ra_pol); flashrt_backing_close(bk); flashrt_trace_close(tr); return ERR("%s", err); }
    uint64_t integrity = 0, n = 0, verified_bytes = 0;
    const unsigned long long hold_at = cli_guard_hold_at();
    int rc = 0;
    while (r == 1 && n < o.limit) {
        struct flashrt_result res;
        if (flashrt_access(rt, &acc, &res) != 0) {
            rc = ERR("%s:%llu: %s", o.trace_path, (unsigned long long)acc.line, flashrt_error(rt));
            break;
        }
        flashrt_idle(rt);
        if (res.data) {
            int64_t bad_at = flashrt_verify(acc.key, acc.offset, res.data, res.len);
            if (bad_at >= 0) {
                if (integrity < 10)
                    fprintf(stderr, "flashrt: integrity error: %s:%llu: block %llu byte %llu differs (%s)\n", o.trace_path,
                            (unsigned long long)acc.line, (unsigned long long)acc.key,
                            (unsigned long long)(acc.offset + (uint64_t)bad_at), res.hit ? "flash" : "backing");
                integrity++;
            }
            verified_bytes += res.len;
        }
        n++;
        if (n == hold_at && (rc = cli_guard_hold_now()) != 0) break;
        r = flashrt_trace_next(tr, &acc, err, FLASHRT_ERR_LEN);
    }
    if (r < 0 && rc == 0) rc = ERR("%s", err);
    if (rc == 0) {
        struct flashrt_metrics m;
        flashrt_metrics(rt, &m);
        print_metrics(&m, integrity, verified_bytes, cfg.sample_ratio, pol ? flashrt_policy_name(pol) : o.admission,
                      warning, o.admission, flashrt_eviction_name((int)cfg.eviction), o.budget,
                      flashrt_placement_name((int)cfg.placement), flashrt_partition_name((int)cfg.partition),
                      cfg.partition_ns, o.as_json, ra);
        if (integrity) rc = 3;
    }
    flashrt_close(rt);
    flashrt_backing_close(bk);
    frt_ra_hook_free(ra);
    flashrt_policy_free(ra_pol);
    flashrt_trace_close(tr);
    return rc;
}
