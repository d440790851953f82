/* cli_partition.c: `flashrt partition-replay`: a multi-stream page trace through MLCache's
 * partitioned page cache (partition.c), every hit's bytes verified, the quotas of every
 * interval optionally written out, the figures as a table or one JSON object. Bad input
 * (options, the bundle, the trace) is refused before any output is written; the quota file
 * appears whole (written under a temporary name, then renamed). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "mlcache/cli_partition.h"
#include "mlcache/mlcache_settings.h"
#include "flashml_policy.h"
#include "flashrt.h"

/* a format: the page size's default (mlcache_settings.h) fills its %llu */
#define PART_HELP \
    "usage: flashrt partition-replay (--bundle DIR | --even) --trace FILE --capacity PAGES\n" \
    "                                --interval N (--cache-file PATH | --no-data) [options]\n" \
    "\n" \
    "Replays a multi-stream page trace through a page cache partitioned by stream (MLCache):\n" \
    "one LRU partition per stream, re-divided every --interval requests the cache\n" \
    "sees by the bundle's flashml_partition from the monitor's features of the interval\n" \
    "before (per-stream LRU stack distances in 10 buckets of the capacity, request shares);\n" \
    "the first interval, or --even, splits evenly. A shrinking partition evicts its LRU pages.\n" \
    "The quotas and hits are the simulator's (flashml sim partition --policy mlcache --bundle\n" \
    "DIR) on the same trace. Each page's bytes live in the cache file: a miss writes its\n" \
    "deterministic content, a hit reads it back and verifies every byte. Exit 0, 3 when some\n" \
    "bytes read back were wrong, 1 on bad input or an IO error, 2 on bad options.\n" \
    "\n" \
    "The trace: CSV with the header stream,page,write; stream 0..K-1 (K <= 16), page a\n" \
    "non-negative integer, write 0 or 1 (flashml.systems.mlcache.partitioning.write_page_csv writes one).\n" \
    "\n" \
    "options:\n" \
    "  --bundle DIR          compiled bundle with the partition capability (flashml mlcache\n" \
    "                        run's compiled/; checked: sha256, ABI, partition contract hash)\n" \
    "  --even                no network: an even split in every interval\n" \
    "  --trace FILE          the page trace\n" \
    "  --capacity PAGES      cache pages\n" \
    "  --interval N          requests the cache sees per interval\n" \
    "  --streams K           streams (default: the largest stream id in the trace + 1)\n" \
    "  --writes-only         cache and monitor writes only; reads go around the cache (the\n" \
    "                        paper's setting)\n" \
    "  --page-bytes B        bytes per page in the cache file (default %llu, the paper's)\n" \
    "  --cache-file PATH     the file holding the cached pages (a missing file is created)\n" \
    "  --no-data             keep no bytes (decisions and figures only)\n" \
    "  --direct auto|on|off  O_DIRECT on the cache file (default auto)\n" \
    "  --allocations-out F   CSV, one line per interval: interval, then each stream's pages\n" \
    "  --json                one JSON object instead of a table\n"

struct page_trace {
    int *stream;
    uint64_t *page;
    uint8_t *write;
    size_t n, cap;
    int max_stream;
};

static void trace_free(struct page_trace *t) {
    free(t->stream);
    free(t->page);
    free(t->write);
}

struct part_rows {
    const char *path;
    struct page_trace *t;
};

/* One `stream,page,write` row into the trace. */
static int part_row(void *ctx, char *line, unsigned long long lineno) {
    const char *path = ((struct part_rows *)ctx)->path;
    struct page_trace *t = ((struct part_rows *)ctx)->t;
    char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    if (!c1 || !c2 || strchr(c2 + 1, ',')) {
        return ERR("%s:%llu: expected 3 fields (stream,page,write)", path, lineno);
    }
    uint64_t s, pg, w;
    if (cli_parse_u64n(line, (size_t)(c1 - line), &s) || s >= FLASHML_PARTITION_MAX_STREAMS) {
        return ERR("%s:%llu: field 'stream': expected 0..%d, got '%.*s'", path, lineno, FLASHML_PARTITION_MAX_STREAMS - 1,
                 (int)(c1 - line), line);
    }
    if (cli_parse_u64n(c1 + 1, (size_t)(c2 - c1 - 1), &pg)) {
        return ERR("%s:%llu: field 'page': expected a non-negative integer, got '%.*s'", path, lineno, (int)(c2 - c1 - 1), c1 + 1);
    }
    if (cli_parse_u64n(c2 + 1, strlen(c2 + 1), &w) || w > 1) {
        return ERR("%s:%llu: field 'write': expected 0 or 1, got '%.20s'", path, lineno, c2 + 1);
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        int *a = realloc(t->stream, cap * sizeof *a);
        if (a) t->stream = a;
        uint64_t *b = realloc(t->page, cap * sizeof *b);
        if (b) t->page = b;
        uint8_t *c = realloc(t->write, cap);
        if (c) t->write = c;
        if (!a || !b || !c) {
            return ERR("%s: out of memory at line %llu", path, lineno);
        }
        t->cap = cap;
    }
    t->stream[t->n] = (int)s;
    t->page[t->n] = pg;
    t->write[t->n] = (uint8_t)w;
    t->n++;
    if ((int)s > t->max_stream) t->max_stream = (int)s;
    return 0;
}

static int trace_read(const char *path, struct page_trace *t) {
    memset(t, 0, sizeof *t);
    t->max_stream = -1;
    struct part_rows ctx = {path, t};
    int rc = cli_read_csv(path, "stream,page,write", part_row, &ctx);
    if (rc == 0 && t->n == 0) rc = ERR("%s: no requests", path);
    if (rc) trace_free(t);
    return rc;
}

int cli_partition_replay(int argc, char **argv) {
    if (cli_want_help(argc, argv)) {
        printf(PART_HELP, (unsigned long long)FRT_MLC_PAGE_BYTES_DEFAULT);
        return 0;
    }
    struct flashrt_part_config cfg = {.page_bytes = FRT_MLC_PAGE_BYTES_DEFAULT, .direct = FLASHRT_DIRECT_AUTO};
    const char *bundle = NULL, *trace = NULL, *alloc_path = NULL;
    int even = 0, no_data = 0, as_json = 0, have_cap = 0, have_iv = 0;
    uint64_t u, streams = 0;
    for (int i = 0; i < argc; i++) {
        const char *v, *a = argv[i];
#define OPT(name) (v = cli_optval(argc, argv, &i, name))
#define BAD(name) do { fprintf(stderr, "flashrt partition-replay: error: %s: invalid value '%s'\n", name, v); return 2; } while (0)
#define PART_STR_(x) #x
#define PART_STR(x) PART_STR_(x)
#define BADR(name, what) do { fprintf(stderr, "flashrt partition-replay: error: %s: invalid value '%s' (expected %s)\n", name, v, what); return 2; } while (0)
/* an integer of the declared setting `knob` (mlcache_settings.h): read, checked */
#define KNOB_U(name, knob, dst) do { \
        const char *why_; \
        if (cli_parse_uint(v, &dst)) BADR(name, "an integer"); \
        if ((why_ = frt_mlc_##knob##_problem(dst > INT64_MAX ? INT64_MAX : (int64_t)dst))) { \
            fprintf(stderr, "flashrt partition-replay: error: %s: invalid value '%s' (must be %s)\n", name, v, why_); \
            return 2; \
        } \
    } while (0)
        if (OPT("--bundle")) bundle = v;
        else if (OPT("--trace")) trace = v;
        else if (OPT("--capacity")) {
            KNOB_U("--capacity", capacity, cfg.capacity);
            /* the page index's limit (partition.c) */
            if (cfg.capacity >= UINT32_MAX) BADR("--capacity", "cache pages, an integer in [" PART_STR(FRT_MLC_CAPACITY_MIN) ", 4294967294]");
            have_cap = 1;
        }
        else if (OPT("--interval")) { KNOB_U("--interval", interval, cfg.interval); have_iv = 1; }
        else if (OPT("--streams")) { if (cli_parse_uint(v, &streams) || streams == 0 || streams > FLASHML_PARTITION_MAX_STREAMS) BADR("--streams", "streams, an integer in [1, " PART_STR(FLASHML_PARTITION_MAX_STREAMS) "]"); }
        else if (OPT("--page-bytes")) {
            KNOB_U("--page-bytes", page_bytes, u);
            /* the cache file's pages are read and written O_DIRECT */
            if (u % 4096) BADR("--page-bytes", "bytes per page, a multiple of 4096");
            cfg.page_bytes = (uint32_t)u;
        }
        else if (OPT("--cache-file")) { if (!*v) BAD("--cache-file"); cfg.cache_path = v; }
        else if (OPT("--direct")) {
            if (!strcmp(v, "auto")) cfg.direct = FLASHRT_DIRECT_AUTO;
            else if (!strcmp(v, "on")) cfg.direct = FLASHRT_DIRECT_ON;
            else if (!strcmp(v, "off")) cfg.direct = FLASHRT_DIRECT_OFF;
            else BAD("--direct");
        } else if (OPT("--allocations-out")) { if (!*v) BAD("--allocations-out"); alloc_path = v; }
        else if (!strcmp(a, "--even")) even = 1;
        else if (!strcmp(a, "--writes-only")) cfg.writes_only = 1;
        else if (!strcmp(a, "--no-data")) no_data = 1;
        else if (!strcmp(a, "--json")) as_json = 1;
        else {
            fprintf(stderr, "flashrt partition-replay: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
#undef BAD
#undef BADR
#undef KNOB_U
#undef PART_STR
#undef PART_STR_
#undef OPT
    }
    const char *missing = !bundle && !even ? "--bundle (or --even)" : !trace || !*trace ? "--trace"
                        : !have_cap ? "--capacity" : !have_iv ? "--interval"
                        : !cfg.cache_path && !no_data ? "--cache-file (or --no-data)" : NULL;
    if (missing) { fprintf(stderr, "flashrt partition-replay: error: %s is required (see --help)\n", missing); return 2; }
    if (bundle && even) { fprintf(stderr, "flashrt partition-replay: error: --bundle and --even exclude each other\n"); return 2; }
    if (cfg.cache_path && no_data) { fprintf(stderr, "flashrt partition-replay: error: --cache-file and --no-data exclude each other\n"); return 2; }

    /* no output is an input; the cache file locked */
    struct cli_guard g;
    cli_guard_init(&g, "partition-replay");
    cli_guard_add(&g, "--trace", trace, CLI_IN);
    cli_guard_add_bundle(&g, "--bundle", bundle);
    cli_guard_add(&g, "--cache-file", cfg.cache_path, CLI_DEV);
    cli_guard_add(&g, "--allocations-out", alloc_path, CLI_OUT);
    if (cli_guard_check(&g) || cli_guard_lock(&g, "--cache-file", cfg.cache_path, 1, 1) || cli_guard_hold()) {
        cli_guard_release(&g, 1);
        return 1;
    }
    char err[FLASHRT_ERR_LEN] = "";
    flashrt_policy *pol = NULL;
    if (bundle && !(pol = flashrt_policy_load_partition(bundle, err, sizeof err))) {
        cli_guard_release(&g, 1);
        return ERR("%s", err);
    }
    struct page_trace tr;
    if (trace_read(trace, &tr) != 0) {
        flashrt_policy_free(pol);
        cli_guard_release(&g, 1);
        return 1;
    }
    int rc = 0;
    cfg.streams = streams ? (int)streams : tr.max_stream + 1;
    if (tr.max_stream >= cfg.streams)
        rc = ERR("%s: field 'stream': stream %d in a trace of --streams %d", trace, tr.max_stream, cfg.streams);
    char tmp[4200] = "";
    FILE *af = NULL;
    if (rc == 0 && alloc_path) {
        if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", alloc_path, (long)getpid()) >= (int)sizeof tmp) rc = ERR("%s: path too long", alloc_path);
        else if (!(af = fopen(tmp, "w"))) rc = ERR("%s: cannot write: %s", tmp, strerror(errno));
    }
    flashrt_part *p = NULL;
    if (rc == 0 && !(p = flashrt_part_open(&cfg, pol, err, sizeof err))) rc = ERR("%s", err);
    for (size_t i = 0; rc == 0 && i < tr.n; i++)
        if (flashrt_part_get(p, tr.stream[i], tr.page[i], tr.write[i]) < 0)
            rc = ERR("%s:%llu: %s", trace, (unsigned long long)i + 2, flashrt_part_error(p));
    struct flashrt_part_metrics mt;
    if (p) flashrt_part_metrics(p, &mt);
    if (af) {
        if (rc == 0) {
            size_t n;
            const uint64_t *al = flashrt_part_allocations(p, &n);
            fputs("interval", af);
            for (int s = 0; s < cfg.streams; s++) fprintf(af, ",s%d", s);
            fputc('\n', af);
            for (size_t iv = 0; iv < n; iv++) {
                fprintf(af, "%zu", iv);
                for (int s = 0; s < cfg.streams; s++) fprintf(af, ",%llu", (unsigned long long)al[iv * (size_t)cfg.streams + (size_t)s]);
                fputc('\n', af);
            }
        }
        int bad = ferror(af) | (fflush(af) != 0) | (fsync(fileno(af)) != 0);
        bad |= fclose(af) != 0;
        if (rc == 0 && (bad || rename(tmp, alloc_path) != 0)) rc = ERR("%s: cannot write: %s", alloc_path, strerror(errno));
        if (rc != 0) unlink(tmp);
    }
    if (rc == 0) {
        const char *policy = pol ? flashrt_policy_name(pol) : "even";
        struct cli_figure kv[] = {
            {"requests", 1, 0, mt.requests}, {"hits", 1, 0, mt.hits}, {"hit_ratio", 0, mt.hit_ratio, 0},
            {"reads", 1, 0, mt.reads}, {"read_hits", 1, 0, mt.read_hits}, {"read_hit_ratio", 0, mt.read_hit_ratio, 0},
            {"writes", 1, 0, mt.writes}, {"write_hits", 1, 0, mt.write_hits}, {"write_hit_ratio", 0, mt.write_hit_ratio, 0},
            {"cached_requests", 1, 0, mt.cached_requests}, {"intervals", 1, 0, mt.intervals},
            {"evictions", 1, 0, mt.evictions}, {"resize_evictions", 1, 0, mt.resize_evictions},
            {"fallbacks", 1, 0, mt.fallbacks}, {"partition_calls", 1, 0, mt.partition_calls},
            {"partition_ns_mean", 0, mt.partition_ns_mean, 0}, {"streams", 1, 0, (uint64_t)cfg.streams},
            {"capacity_pages", 1, 0, cfg.capacity}, {"interval", 1, 0, cfg.interval},
            {"bytes_written", 1, 0, mt.bytes_written}, {"bytes_read", 1, 0, mt.bytes_read},
            {"verified_bytes", 1, 0, mt.verified_bytes}, {"integrity_errors", 1, 0, mt.integrity_errors},
            {"cache_file_bytes", 1, 0, mt.file_bytes}, {"direct_io", 1, 0, (uint64_t)mt.direct_io},
            {"wall_s", 0, mt.wall_s, 0},
        };
        const char *strs[] = {"policy", policy, "partition_contract_hash", FLASHML_PARTITION_CONTRACT_HASH};
        cli_print_figures(kv, sizeof kv / sizeof kv[0], strs, 2, 1, as_json);
        if (mt.integrity_errors) {
            fprintf(stderr, "flashrt: integrity error: %llu hits read back wrong bytes from %s\n",
                    (unsigned long long)mt.integrity_errors, cfg.cache_path);
            rc = 3;
        }
    }
    flashrt_part_close(p);
    trace_free(&tr);
    flashrt_policy_free(pol);
    cli_guard_release(&g, rc == 1);
    return rc;
}
