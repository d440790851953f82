/* cli_mat.c: `flashrt mat-replay`: an object trace through the MAT object cache (mat.c),
 * every hit's bytes verified, the decisions optionally written out, the figures as a table or
 * one JSON object. Bad input (options, the bundle, the trace) is refused before any output
 * is written; output files appear whole (written under a temporary name, then renamed). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "mat/cli_mat.h"
#include "flashml_policy.h"
#include "flashrt.h"
#include "mat/mat_settings.h"

static const char *MAT_HELP =
    "usage: flashrt mat-replay (--bundle DIR | --no-model) --trace FILE --capacity N\n"
    "                          (--cache-file PATH | --no-data) [options]\n"
    "\n"
    "Replays an object trace (one request per line: key, size) through an object cache with\n"
    "MAT's learned eviction (ML at the tail of LRU): on each eviction the LRU tail\n"
    "candidates' times to next access are predicted by the bundle's flashml_evict_predict from\n"
    "LRB's 44 features; the decisions are the simulator's (flashml.simulation.\n"
    "simulate_objects_mat) on the same trace and capacity. Objects' bytes live in the cache\n"
    "file (4 KiB pages); a miss writes the object's deterministic content, a hit reads it back\n"
    "and verifies every byte. Prints requests, hits, misses, miss_ratio, byte_miss_ratio,\n"
    "evictions, predictions, predictions_per_eviction, reused_predictions,\n"
    "candidates_per_eviction, final_threshold and decision_ns_mean/p50/p99 (one eviction\n"
    "decision: candidates' features + predictions + list moves). Exit 0,\n"
    "3 when some bytes read back were wrong, 1 on bad input or an IO error, 2 on bad options.\n"
    "\n"
    "options:\n"
    "  --bundle DIR            compiled bundle with the eviction capability (DIR/policy.so +\n"
    "                          DIR/manifest.json; checked: sha256, ABI, eviction contract hash)\n"
    "  --no-model              no predictor: evict the LRU tail (exactly LRU)\n"
    "  --trace FILE            object trace\n"
    "  --format F              objects-csv (default; alias csv: header naming time,key,size) or\n"
    "                          cloudphysics (version,time,op,size,lbn)\n"
    "  --capacity N            cache capacity in --unit (bytes: 2GiB, 500MB; docs: Sizes)\n"
    "  --unit bytes|objects    what the capacity counts (default bytes)\n"
    "  --cache-file PATH       the file holding the cached bytes (a missing file is created)\n"
    "  --no-data               keep no bytes (decisions and figures only)\n"
    "  --direct auto|on|off    O_DIRECT on the cache file (default auto: when supported)\n"
    "  --bypass-oversize       serve objects larger than the whole cache uncached (a miss, no\n"
    "                          eviction, as the simulator does); default: refuse such a trace\n"
    "  --k X, --max-candidates N, --delta X, --initial-threshold X|auto, --memory-window N\n"
    "                          Algorithm 1's knobs (default: the bundle's; auto: the number of\n"
    "                          cached objects at the first eviction)\n"
    "  --controller sign|mean  the threshold controller (default: the bundle's; sign for a\n"
    "                          bundle without one): sign, T *= 1 + delta at a try < k, 1 - delta\n"
    "                          at a try > k (L + 1 on exhaustion); mean, T *= 1 + delta (k - p),\n"
    "                          p the candidates taken (L on exhaustion), which holds their mean\n"
    "                          at k (needs delta * (L - k) < 1)\n"
    "  --reuse-predictions on|off\n"
    "                          keep each candidate's prediction until the object's next access\n"
    "                          and judge it by that (TTA with its age now) when it comes to the\n"
    "                          tail again, no new prediction (counted in reused_predictions)\n"
    "                          (default: the bundle's; off for a bundle without one)\n"
    "  --decisions-out FILE    CSV, one line per eviction: time (request index of the miss),\n"
    "                          key, size, tries (L + 1: none reached T), threshold (T after)\n"
    "  --candidates-out FILE   CSV, one line per tail candidate examined: time, key, last,\n"
    "                          prediction, tta, threshold, then its 44 features f0..f43\n"
    "  --no-timing             do not keep each decision's time (no percentiles)\n"
    "  --json                  one JSON object instead of a table\n";

struct out_file {
    const char *path;
    char tmp[4200];
    FILE *f;
};

static int out_open(struct out_file *o, const char *path) {
    o->path = path;
    o->f = NULL;
    if (!path) return 0;
    if (snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof o->tmp)
        return ERR("%s: path too long", path);
    o->f = fopen(o->tmp, "w");
    if (!o->f) return ERR("%s: cannot write: %m", o->tmp);
    return 0;
}

/* ok: flush and rename into place (1 on failure); else remove the temporary file. */
static int out_close(struct out_file *o, int ok) {
    if (!o->f) return 0;
    int bad = ferror(o->f) | (fflush(o->f) != 0) | (fsync(fileno(o->f)) != 0);
    bad |= fclose(o->f) != 0;
    o->f = NULL;
    if (ok && !bad && rename(o->tmp, o->path) == 0) return 0;
    unlink(o->tmp);
    return ok ? ERR("%s: cannot write: %m", o->path) : 0;
}

/* JSON: "reuse_predictions" as a boolean; a table: on/off. */
static void print_reuse(void *ctx, int as_json, int *first) {
    const int reuse = *(const int *)ctx;
    if (as_json) printf("%s\"reuse_predictions\": %s", *first ? "" : ", ", reuse ? "true" : "false");
    else printf("%-26s  %s\n", "reuse_predictions", reuse ? "on" : "off");
    *first = 0;
}

static void on_candidate(void *ctx, const struct flashrt_mat_candidate *c) {
    FILE *f = ctx;
    fprintf(f, "%llu,%llu,%llu,%.17g,%.17g,%.17g", (unsigned long long)c->time, (unsigned long long)c->key,
            (unsigned long long)c->last, c->prediction, c->tta, c->threshold);
    for (int i = 0; i < FLASHML_EVICT_NUM_FEATURES; i++) fprintf(f, ",%.17g", c->features[i]);
    fputc('\n', f);
}

int cli_mat_replay(int argc, char **argv) {
    if (cli_want_help(argc, argv)) { fputs(MAT_HELP, stdout); return 0; }
    struct flashrt_mat_config cfg;
    flashrt_mat_config_default(&cfg);
    const char *bundle = NULL, *trace = NULL, *format = "objects-csv", *dec_path = NULL, *cand_path = NULL;
    int no_model = 0, no_data = 0, as_json = 0, bypass = 0, have_cap = 0;
    uint64_t u;
    const char *why;
    for (int i = 0; i < argc; i++) {
        const char *v, *a = argv[i];
#define OPT(name) (v = cli_optval(argc, argv, &i, name))
#define BAD(name) do { fprintf(stderr, "flashrt mat-replay: error: %s: invalid value '%s'\n", name, v); return 2; } while (0)
#define BADR(name, what) do { fprintf(stderr, "flashrt mat-replay: error: %s: invalid value '%s' (expected %s)\n", name, v, what); return 2; } while (0)
/* a number outside the knob's declared bounds (mat_settings.h) */
#define BADW(name, why) do { fprintf(stderr, "flashrt mat-replay: error: %s: invalid value '%s' (must be %s)\n", name, v, why); return 2; } while (0)
        if (OPT("--bundle")) bundle = v;
        else if (OPT("--trace")) trace = v;
        else if (OPT("--format")) format = v;
        else if (OPT("--capacity")) { if (cli_parse_bytes(v, &cfg.capacity)) BADR("--capacity", "an integer with an optional size unit, 2GiB, 500MB, in --unit (docs: Sizes)"); have_cap = 1; }
        else if (OPT("--unit")) {
            if (!strcmp(v, "bytes")) cfg.unit = FLASHRT_MAT_BYTES;
            else if (!strcmp(v, "objects")) cfg.unit = FLASHRT_MAT_OBJECTS;
            else BAD("--unit");
        } else if (OPT("--cache-file")) { if (!*v) BAD("--cache-file"); cfg.cache_path = v; }
        else if (OPT("--direct")) {
            if (!strcmp(v, "auto")) cfg.direct = FLASHRT_DIRECT_AUTO;
            else if (!strcmp(v, "on")) cfg.direct = FLASHRT_DIRECT_ON;
            else if (!strcmp(v, "off")) cfg.direct = FLASHRT_DIRECT_OFF;
            else BAD("--direct");
        } else if (OPT("--k")) {
            if (cli_parse_double(v, &cfg.k)) BADR("--k", "a number of candidates per eviction");
            if ((why = frt_mat_k_problem(cfg.k))) BADW("--k", why);
        } else if (OPT("--max-candidates")) {
            if (cli_parse_uint(v, &u)) BADR("--max-candidates", "an integer number of candidates");
            if ((why = frt_mat_max_candidates_problem(u > INT64_MAX ? INT64_MAX : (int64_t)u))) BADW("--max-candidates", why);
            cfg.max_candidates = (uint32_t)u;
        }
        else if (OPT("--controller")) {
            if (!strcmp(v, "sign")) cfg.controller = 0;
            else if (!strcmp(v, "mean")) cfg.controller = 1;
            else BAD("--controller");
        } else if (OPT("--reuse-predictions")) {
            if (!strcmp(v, "on")) cfg.reuse_predictions = 1;
            else if (!strcmp(v, "off")) cfg.reuse_predictions = 0;
            else BAD("--reuse-predictions");
        } else if (OPT("--delta")) {
            if (cli_parse_double(v, &cfg.delta)) BADR("--delta", "a number");
            if ((why = frt_mat_delta_problem(cfg.delta))) BADW("--delta", why);
        } else if (OPT("--initial-threshold")) {
            if (!strcmp(v, "auto")) cfg.initial_threshold = 0.0;
            else if (cli_parse_double(v, &cfg.initial_threshold)) BADR("--initial-threshold", "auto or a number of logical requests");
            else if ((why = frt_mat_initial_threshold_problem(cfg.initial_threshold))) BADW("--initial-threshold", why);
        } else if (OPT("--memory-window")) {
            if (cli_parse_uint(v, &cfg.memory_window)) BADR("--memory-window", "an integer number of logical requests");
            if ((why = frt_mat_memory_window_problem(cfg.memory_window > INT64_MAX ? INT64_MAX : (int64_t)cfg.memory_window))) BADW("--memory-window", why);
        }
        else if (OPT("--decisions-out")) { if (!*v) BAD("--decisions-out"); dec_path = v; }
        else if (OPT("--candidates-out")) { if (!*v) BAD("--candidates-out"); cand_path = v; }
        else if (!strcmp(a, "--no-model")) no_model = 1;
        else if (!strcmp(a, "--no-data")) no_data = 1;
        else if (!strcmp(a, "--bypass-oversize")) bypass = 1;
        else if (!strcmp(a, "--no-timing")) cfg.time_decisions = 0;
        else if (!strcmp(a, "--json")) as_json = 1;
        else {
            fprintf(stderr, "flashrt mat-replay: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
#undef BAD
#undef BADR
#undef OPT
    }
    const char *missing = !bundle && !no_model ? "--bundle (or --no-model)" : !trace || !*trace ? "--trace"
                        : !have_cap ? "--capacity" : !cfg.cache_path && !no_data ? "--cache-file (or --no-data)" : NULL;
    if (missing) { fprintf(stderr, "flashrt mat-replay: error: %s is required (see --help)\n", missing); return 2; }
    if (bundle && no_model) { fprintf(stderr, "flashrt mat-replay: error: --bundle and --no-model exclude each other\n"); return 2; }
    if (cfg.cache_path && no_data) { fprintf(stderr, "flashrt mat-replay: error: --cache-file and --no-data exclude each other\n"); return 2; }
    if (cfg.capacity == 0) { fprintf(stderr, "flashrt mat-replay: error: --capacity must be > 0\n"); return 2; }

    /* no output is an input; the cache file locked */
    struct cli_guard g;
    cli_guard_init(&g, "mat-replay");
    cli_guard_add(&g, "--trace", trace, CLI_IN);
    cli_guard_add_bundle(&g, "--bundle", bundle);
    cli_guard_add(&g, "--cache-file", cfg.cache_path, CLI_DEV);
    cli_guard_add(&g, "--decisions-out", dec_path, CLI_OUT);
    cli_guard_add(&g, "--candidates-out", cand_path, CLI_OUT);
    if (cli_guard_check(&g) || cli_guard_lock(&g, "--cache-file", cfg.cache_path, 1, 1) || cli_guard_hold()) {
        cli_guard_release(&g, 1);
        return 1;
    }
    char err[FLASHRT_ERR_LEN] = "";
    flashrt_policy *pol = NULL;
    if (bundle && !(pol = flashrt_policy_load_eviction(bundle, err, sizeof err))) {
        cli_guard_release(&g, 1);
        return ERR("%s", err);
    }
    struct flashrt_objects tr;
    if (flashrt_objects_read(trace, format, &tr, err, sizeof err) != 0) {
        flashrt_policy_free(pol);
        cli_guard_release(&g, 1);
        return ERR("%s", err);
    }
    int rc = 0;
    if (!bypass) {
        for (size_t i = 0; i < tr.n; i++) {
            uint64_t charge = cfg.unit == FLASHRT_MAT_OBJECTS ? 1 : tr.size[i];
            if (charge > cfg.capacity) {
                rc = ERR("%s:%llu: field 'size': an object of %llu bytes is larger than the whole cache (--capacity %llu bytes); "
                         "give a larger --capacity, or --bypass-oversize to serve such objects uncached",
                         trace, (unsigned long long)i + 2, (unsigned long long)tr.size[i], (unsigned long long)cfg.capacity);
                break;
            }
        }
    }
    struct out_file dec = {0}, cand = {0};
    if (rc == 0 && (rc = out_open(&dec, dec_path)) == 0) rc = out_open(&cand, cand_path);
    flashrt_mat *m = NULL;
    if (rc == 0) {
        if (cand.f) {
            cfg.on_candidate = on_candidate;
            cfg.ctx = cand.f;
            fputs("time,key,last,prediction,tta,threshold", cand.f);
            for (int i = 0; i < FLASHML_EVICT_NUM_FEATURES; i++) fprintf(cand.f, ",f%d", i);
            fputc('\n', cand.f);
        }
        if (dec.f) fputs("time,key,size,tries,threshold\n", dec.f);
        m = flashrt_mat_open(&cfg, pol, err, sizeof err);
        if (!m) rc = ERR("%s", err);
    }
    for (size_t i = 0; rc == 0 && i < tr.n; i++) {
        struct flashrt_mat_result res;
        if (flashrt_mat_get(m, tr.key[i], tr.size[i], &res) != 0) {
            rc = ERR("%s:%llu: %s", trace, (unsigned long long)i + 2, flashrt_mat_error(m));
            break;
        }
        if (dec.f)
            for (size_t j = 0; j < res.nvictims; j++)
                fprintf(dec.f, "%llu,%llu,%llu,%u,%.17g\n", (unsigned long long)i, (unsigned long long)res.victims[j].key,
                        (unsigned long long)res.victims[j].size, res.victims[j].tries, res.victims[j].threshold);
    }
    struct flashrt_mat_metrics mt;
    if (m) flashrt_mat_metrics(m, &mt);
    if (out_close(&dec, rc == 0)) rc = 1;
    if (out_close(&cand, rc == 0)) rc = 1;
    if (rc == 0) {
        const char *unit = cfg.unit == FLASHRT_MAT_OBJECTS ? "objects" : "bytes";
        const char *policy = pol ? flashrt_policy_name(pol) : "none";
        struct cli_figure kv[] = {
            {"requests", 1, 0, mt.requests}, {"hits", 1, 0, mt.hits}, {"misses", 1, 0, mt.misses},
            {"miss_ratio", 0, mt.miss_ratio, 0}, {"byte_miss_ratio", 0, mt.byte_miss_ratio, 0},
            {"evictions", 1, 0, mt.evictions}, {"predictions", 1, 0, mt.predictions},
            {"predictions_per_eviction", 0, mt.predictions_per_eviction, 0},
            {"reused_predictions", 1, 0, mt.reused},
            {"candidates_per_eviction", 0, mt.candidates_per_eviction, 0},
            {"reinsertions", 1, 0, mt.reinsertions}, {"final_threshold", 0, mt.final_threshold, 0},
            {"ns_per_eviction", 0, mt.decision_ns_mean, 0},
            {"decision_ns_mean", 0, mt.decision_ns_mean, 0}, {"decision_ns_p50", 0, mt.decision_ns_p50, 0},
            {"decision_ns_p99", 0, mt.decision_ns_p99, 0}, {"bypassed", 1, 0, mt.bypassed},
            {"request_bytes", 1, 0, mt.request_bytes}, {"miss_bytes", 1, 0, mt.miss_bytes},
            {"cached_objects", 1, 0, mt.cached_objects}, {"used", 1, 0, mt.used}, {"capacity", 1, 0, mt.capacity},
            {"k", 0, mt.k, 0}, {"max_candidates", 1, 0, mt.max_candidates}, {"delta", 0, mt.delta, 0},
            {"initial_threshold", 0, mt.initial_threshold, 0}, {"memory_window", 1, 0, mt.memory_window},
            {"bytes_written", 1, 0, mt.bytes_written}, {"bytes_read", 1, 0, mt.bytes_read},
            {"verified_bytes", 1, 0, mt.verified_bytes}, {"integrity_errors", 1, 0, mt.integrity_errors},
            {"cache_file_bytes", 1, 0, mt.file_bytes}, {"direct_io", 1, 0, (uint64_t)mt.direct_io},
            {"wall_s", 0, mt.wall_s, 0},
        };
        const char *controller = mt.controller == 1 ? "mean" : "sign";
        const char *strs[] = {"policy", policy, "unit", unit, "controller", controller,
                              "evict_contract_hash", FLASHML_EVICT_CONTRACT_HASH};
        cli_print_figures_more(kv, sizeof kv / sizeof kv[0], strs, 4, 3, as_json, print_reuse, &mt.reuse_predictions);
        if (mt.integrity_errors) {
            fprintf(stderr, "flashrt: integrity error: %llu hits read back wrong bytes from %s\n",
                    (unsigned long long)mt.integrity_errors, cfg.cache_path);
            rc = 3;
        }
    }
    flashrt_mat_close(m);
    flashrt_objects_free(&tr);
    flashrt_policy_free(pol);
    cli_guard_release(&g, rc == 1);
    return rc;
}
