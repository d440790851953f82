/* cli_pannier.c: `flashrt pannier-replay`: a block trace through Pannier's container flash
 * cache (pannier.c) with real bytes: the decisions are the simulator's (flashml_sim
 * simulate_blocks "lru_plus" / "pannier"), every block served is verified, and the cache
 * survives kill -9 (--recover). Bad input (options, the bundle, the trace) is refused before
 * any output. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "pannier/cli_pannier.h"
#include "util/internal.h"
#include "pannier/pannier.h"
#include "policies/policy_internal.h"

static const char *PN_HELP =
    "usage: flashrt pannier-replay --trace T.csv --flash F.img --flash-bytes SIZE --backing B.img\n"
    "                              [options]\n"
    "\n"
    "Replays a block trace through Pannier's container flash cache (Middleware '15): 4 KiB\n"
    "blocks are packed into RAM open containers, sealed whole into container slots of the\n"
    "flash file, evicted whole; LRU+ (container LRU) or Pannier (S2LRU* + survival queue,\n"
    "aging, invalidation-awareness, hot/cold packing, copy-forward), optionally gated by TIRE.\n"
    "The decisions are the simulator's (simulate_blocks) on the same trace and knobs. Every\n"
    "block served (hits from flash or RAM, misses from the backing) is verified against the\n"
    "block's current version. Exit 0, 3 when some bytes were wrong, 1 on bad input or an IO\n"
    "error, 2 on unknown or missing options.\n"
    "\n"
    "The trace: CSV with the header time,block,blocks,write (seconds, non-decreasing; the first\n"
    "block; block count >= 1; 0 or 1).\n"
    "\n"
    "options:\n"
    "  --trace FILE            the block trace\n"
    "  --flash PATH            the flash file (containers, then their headers); PATH.journal\n"
    "  --flash-bytes SIZE      the flash cache's size (container slots = SIZE / container size)\n"
    "  --backing PATH          the backing file (sparse; created when missing); PATH.versions\n"
    "  --no-data               no files, no bytes: decisions only (--flash/--backing unused)\n"
    "  --open-in-cache         charge the RAM open containers to --flash-bytes (sealed + open\n"
    "                          <= slots; default: RAM beside the flash, the paper's model)\n"
    "  --policy lru_plus|pannier   (default pannier)\n"
    "  --bundle DIR            knobs from DIR/manifest.json (flashml pannier's compiled/;\n"
    "                          format flashml-policy-bundle/1, system pannier); flags override\n"
    "  --lifespan-epbpd N      TIRE's lifespan target in erasures per erase block per day\n"
    "  --container-bytes SIZE  (default 2MiB)     --erase-bytes SIZE  (default: the container)\n"
    "  --page-bytes N          (default 4096)     --promotion-pct P   (default 5)\n"
    "  --lifetime-pct P        (default 99)       --ghost-factor F    (default 2)\n"
    "  --tire-slack K          (default 4)        --tire-steps N      (default 3)\n"
    "  --quantum-s S           (default 300)      --sample-pct P      (default 3)\n"
    "  --recover               rebuild the cache from the flash file instead of starting empty\n"
    "  --sync                  fdatasync every container and log record (power loss)\n"
    "  --stop-after N          stop after N requests without cleanup (crash tests)\n"
    "  --json                  one JSON object instead of a table\n";

struct block_trace {
    double *time;
    uint64_t *block;
    uint32_t *blocks;
    uint8_t *write;
    size_t n, cap;
};

static void trace_free(struct block_trace *t) {
    free(t->time);
    free(t->block);
    free(t->blocks);
    free(t->write);
}

struct pn_rows {
    const char *path;
    struct block_trace *t;
    uint64_t page_bytes;
    int data;
};

/* One `time,block,blocks,write` row into the trace. */
static int pn_row(void *ctx, char *line, unsigned long long lineno) {
    const struct pn_rows *r = ctx;
    const char *path = r->path;
    struct block_trace *t = r->t;
    uint64_t page_bytes = r->page_bytes;
    int data = r->data;
    char *f1 = line, *c1 = strchr(f1, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL, *c3 = c2 ? strchr(c2 + 1, ',') : NULL;
    if (!c1 || !c2 || !c3 || strchr(c3 + 1, ',')) {
        return ERR("%s:%llu: expected 4 fields (time,block,blocks,write)", path, lineno);
    }
    *c1 = 0;
    double tm;
    uint64_t b, n, w;
    if (cli_parse_double(f1, &tm) != 0) {
        return ERR("%s:%llu: field 'time': expected a finite number of seconds, got '%.40s'", path, lineno, f1);
    }
    if (t->n && tm < t->time[t->n - 1]) {
        return ERR("%s:%llu: field 'time': %.17g is before the previous request's %.17g (sort the trace by time)", path, lineno, tm, t->time[t->n - 1]);
    }
    if (cli_parse_u64n(c1 + 1, (size_t)(c2 - c1 - 1), &b)) {
        return ERR("%s:%llu: field 'block': expected a non-negative integer, got '%.*s'", path, lineno, (int)(c2 - c1 - 1), c1 + 1);
    }
    if (cli_parse_u64n(c2 + 1, (size_t)(c3 - c2 - 1), &n) || n == 0 || n > UINT32_MAX) {
        return ERR("%s:%llu: field 'blocks': expected an integer >= 1, got '%.*s'", path, lineno, (int)(c3 - c2 - 1), c2 + 1);
    }
    if (b > UINT64_MAX - n || (data && (b + n) > (uint64_t)INT64_MAX / page_bytes)) {
        return ERR("%s:%llu: field 'block': block %llu + %llu is beyond the backing's byte offsets", path, lineno,
                 (unsigned long long)b, (unsigned long long)n);
    }
    if (cli_parse_u64n(c3 + 1, strlen(c3 + 1), &w) || w > 1) {
        return ERR("%s:%llu: field 'write': expected 0 or 1, got '%.20s'", path, lineno, c3 + 1);
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        double *a = realloc(t->time, cap * sizeof *a);
        if (a) t->time = a;
        uint64_t *bb = realloc(t->block, cap * sizeof *bb);
        if (bb) t->block = bb;
        uint32_t *cc = realloc(t->blocks, cap * sizeof *cc);
        if (cc) t->blocks = cc;
        uint8_t *d = realloc(t->write, cap);
        if (d) t->write = d;
        if (!a || !bb || !cc || !d) {
            return ERR("%s: out of memory at line %llu", path, lineno);
        }
        t->cap = cap;
    }
    t->time[t->n] = tm;
    t->block[t->n] = b;
    t->blocks[t->n] = (uint32_t)n;
    t->write[t->n] = (uint8_t)w;
    t->n++;
    return 0;
}

static int trace_read(const char *path, struct block_trace *t, uint64_t page_bytes, int data) {
    memset(t, 0, sizeof *t);
    struct pn_rows ctx = {path, t, page_bytes, data};
    int rc = cli_read_csv(path, "time,block,blocks,write", pn_row, &ctx);
    if (rc == 0 && t->n == 0) rc = ERR("%s: the trace has no requests", path);
    if (rc) trace_free(t);
    return rc;
}

/* The top-level member `key`'s object text (validated JSON) into [*s, *s + *n). */
static int nested_object(const char *text, size_t len, const char *key, const char **s, size_t *n) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    size_t pl = strlen(pat);
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = 0;
            continue;
        }
        if (ch == '{' || ch == '[') depth++;
        else if (ch == '}' || ch == ']') depth--;
        else if (ch == '"') {
            if (depth == 1 && i + pl <= len && !memcmp(text + i, pat, pl)) {
                size_t j = i + pl;
                while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) j++;
                if (j < len && text[j] == ':') {
                    j++;
                    while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) j++;
                    if (j >= len || text[j] != '{') return -1;
                    int d = 0, str = 0;
                    for (size_t k = j; k < len; k++) {
                        char e = text[k];
                        if (str) {
                            if (e == '\\') k++;
                            else if (e == '"') str = 0;
                        } else if (e == '"') str = 1;
                        else if (e == '{' || e == '[') d++;
                        else if (e == '}' || e == ']') {
                            if (--d == 0) {
                                *s = text + j;
                                *n = k - j + 1;
                                return 0;
                            }
                        }
                    }
                    return -1;
                }
            }
            in_str = 1;
        }
    }
    return -1;
}

/* Knobs from DIR/manifest.json into cfg: the manifest read once from a regular file (no link,
 * no FIFO) and checked by the bundle schema (format, system pannier, capabilities []). */
static int load_bundle(const char *dir, struct frt_pn_config *cfg) {
    char mf[4200];
    if (snprintf(mf, sizeof mf, "%s/manifest.json", dir) >= (int)sizeof mf) return ERR("%s: path too long", dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dfd < 0) return ERR("%s: not a bundle directory (%s)", dir, strerror(errno));
    char *text = NULL;
    size_t n = 0;
    struct frt_manifest *man = malloc(sizeof *man);
    struct frt_json_object *k = malloc(sizeof *k);
    char err[FLASHRT_ERR_LEN];
    int rc = 0;
    const char *ks;
    size_t kn;
    const struct frt_json_member *m;
    if (!man || !k) rc = ERR("out of memory");
    else if (frt_manifest_read(dfd, dir, "pannier", man, &text, &n, err, sizeof err) != 0) rc = ERR("%s", err);
    else if (!man->system[0]) rc = ERR("%s: field 'system': expected \"pannier\", got nothing", mf);
    else if (nested_object(text, n, "knobs", &ks, &kn) != 0) rc = ERR("%s: field 'knobs': expected an object", mf);
    else if (frt_json_parse_object(ks, kn, k, err, sizeof err) != 0) rc = ERR("%s: field 'knobs': %s", mf, err);
    else {
        static const char *NAMES[] = {"container_bytes", "erase_bytes", "promotion_pct", "lifetime_pct", "ghost_factor",
                                      "tire_slack", "tire_steps", "quantum_s", "page_bytes", "lifespan_epbpd"};
        for (size_t i = 0; rc == 0 && i < sizeof NAMES / sizeof NAMES[0]; i++) {
            m = frt_json_get(k, NAMES[i]);
            if (!m || m->type == FRT_JSON_NULL) continue;
            double v = m->num;
            int integer = i == 0 || i == 1 || i == 6 || i == 8;
            if (m->type != FRT_JSON_NUMBER || !isfinite(v) || v < 0 || (integer && (v != floor(v) || v > 9.0e15))) {
                rc = ERR("%s: field 'knobs.%s': expected a %s number", mf, NAMES[i], integer ? "non-negative integer" : "non-negative");
                break;
            }
            switch (i) {
            case 0: cfg->container_bytes = (uint64_t)v; break;
            case 1: cfg->erase_bytes = (uint64_t)v; break;
            case 2: cfg->promotion_pct = v; break;
            case 3: cfg->lifetime_pct = v; break;
            case 4: cfg->ghost_factor = v; break;
            case 5: cfg->tire_slack = v; break;
            case 6: cfg->tire_steps = v > 1000 ? 1000 : (uint32_t)v; break;
            case 7: cfg->quantum_s = v; break;
            case 8: cfg->page_bytes = (uint64_t)v; break;
            default: cfg->has_tire = 1; cfg->lifespan_epbpd = v; break;
            }
        }
    }
    close(dfd);
    free(man);
    free(k);
    free(text);
    return rc;
}

static void json_array_f(const char *k, const double *v, size_t n) {
    char b[32];
    printf(", \"%s\": [", k);
    for (size_t i = 0; i < n; i++) printf("%s%s", i ? ", " : "", isfinite(v[i]) ? cli_num(b, v[i]) : "null");
    putchar(']');
}

int cli_pannier_replay(int argc, char **argv) {
    if (cli_want_help(argc, argv)) {
        fputs(PN_HELP, stdout);
        return 0;
    }
    struct frt_pn_config cfg;
    frt_pn_config_default(&cfg);
    const char *trace = NULL, *flash = NULL, *backing = NULL, *bundle = NULL;
    int as_json = 0, no_data = 0, have_fb = 0;
    uint64_t flash_bytes = 0, stop_after = 0;
    /* the bundle first: explicit flags override its knobs */
    for (int i = 0; i < argc; i++) {
        const char *v = cli_optval(argc, argv, &i, "--bundle");
        if (v) {
            if (!*v) return ERR("--bundle: expected a directory");
            bundle = v;
        }
    }
    if (bundle && load_bundle(bundle, &cfg) != 0) return 1;
    for (int i = 0; i < argc; i++) {
        const char *v, *a = argv[i];
        uint64_t u;
        double d;
#define OPT(name) (v = cli_optval(argc, argv, &i, name))
#define BAD(name, what) return ERR("%s: invalid value '%s' (expected %s)", name, v, what)
/* a number of the declared knob `knob` (pannier_settings.h): read, checked */
#define KNOB_F(name, knob, dst) do { \
        const char *why_; \
        if (cli_parse_double(v, &d)) BAD(name, "a number"); \
        if ((why_ = frt_pn_##knob##_problem(d))) return ERR("%s: invalid value '%s' (must be %s)", name, v, why_); \
        dst = d; \
    } while (0)
        if (OPT("--bundle")) continue;
        else if (OPT("--trace")) trace = v;
        else if (OPT("--flash")) flash = v;
        else if (OPT("--backing")) backing = v;
        else if (OPT("--flash-bytes")) { if (cli_parse_bytes(v, &flash_bytes) || flash_bytes == 0) BAD("--flash-bytes", "a size such as 64MiB"); have_fb = 1; }
        else if (OPT("--policy")) {
            if (!strcmp(v, "lru_plus")) cfg.policy = FRT_PN_LRU_PLUS;
            else if (!strcmp(v, "pannier")) cfg.policy = FRT_PN_PANNIER;
            else BAD("--policy", "lru_plus or pannier");
        } else if (OPT("--lifespan-epbpd")) {
            KNOB_F("--lifespan-epbpd", lifespan_epbpd, cfg.lifespan_epbpd);
            cfg.has_tire = 1;
        } else if (OPT("--container-bytes")) { if (cli_parse_bytes(v, &u) || u == 0) BAD("--container-bytes", "a size such as 2MiB"); cfg.container_bytes = u; }
        else if (OPT("--erase-bytes")) { if (cli_parse_bytes(v, &u) || u == 0) BAD("--erase-bytes", "a size such as 2MiB"); cfg.erase_bytes = u; }
        else if (OPT("--page-bytes")) { if (cli_parse_bytes(v, &u) || u == 0 || u % 8) BAD("--page-bytes", "a positive multiple of 8 bytes"); cfg.page_bytes = u; }
        else if (OPT("--promotion-pct")) KNOB_F("--promotion-pct", promotion_pct, cfg.promotion_pct);
        else if (OPT("--lifetime-pct")) KNOB_F("--lifetime-pct", lifetime_pct, cfg.lifetime_pct);
        else if (OPT("--sample-pct")) KNOB_F("--sample-pct", sample_pct, cfg.sample_pct);
        else if (OPT("--ghost-factor")) KNOB_F("--ghost-factor", ghost_factor, cfg.ghost_factor);
        else if (OPT("--tire-slack")) KNOB_F("--tire-slack", tire_slack, cfg.tire_slack);
        else if (OPT("--tire-steps")) {
            if (cli_parse_uint(v, &u)) BAD("--tire-steps", "an integer");
            const char *why = frt_pn_tire_steps_problem(u > INT64_MAX ? INT64_MAX : (int64_t)u);
            if (why) return ERR("%s: invalid value '%s' (must be %s)", "--tire-steps", v, why);
            cfg.tire_steps = (uint32_t)u;
        }
        else if (OPT("--quantum-s")) KNOB_F("--quantum-s", quantum_s, cfg.quantum_s);
        else if (OPT("--stop-after")) { if (cli_parse_uint(v, &stop_after) || stop_after == 0) BAD("--stop-after", "a number of requests >= 1"); }
        else if (!strcmp(a, "--recover")) cfg.recover = 1;
        else if (!strcmp(a, "--sync")) cfg.sync = 1;
        else if (!strcmp(a, "--no-data")) no_data = 1;
        else if (!strcmp(a, "--open-in-cache")) cfg.open_in_cache = 1;
        else if (!strcmp(a, "--json")) as_json = 1;
        else {
            fprintf(stderr, "flashrt pannier-replay: error: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
#undef BAD
#undef OPT
    }
    const char *missing = !trace || !*trace ? "--trace" : !have_fb ? "--flash-bytes"
                        : !no_data && (!flash || !*flash) ? "--flash (or --no-data)"
                        : !no_data && (!backing || !*backing) ? "--backing (or --no-data)" : NULL;
    if (missing) {
        fprintf(stderr, "flashrt pannier-replay: error: %s is required (see --help)\n", missing);
        return 2;
    }
    if (no_data && cfg.recover) return ERR("--recover: needs the flash file (not --no-data)");
    cfg.cache_bytes = flash_bytes;
    if (!no_data) {
        cfg.flash_path = flash;
        cfg.backing_path = backing;
    }
    char err[600] = "";
    if (frt_pn_config_check(&cfg, err, sizeof err) != 0) {
        /* the flag (or the bundle's knob) each check is about */
        static const struct { const char *prefix, *flag; } FLAGS[] = {
            {"block size", "--page-bytes"}, {"block of", "--page-bytes / --container-bytes"},
            {"container size", "--container-bytes / --page-bytes"},
            {"erase block", "--erase-bytes / --container-bytes"}, {"more than 2^20", "--container-bytes"},
            {"cache size", "--flash-bytes"}, {"the cache has", "--flash-bytes"},
            {"promotion", "--promotion-pct"}, {"sample", "--sample-pct"},
            {"lifetime", "--lifetime-pct"}, {"ghost", "--ghost-factor"},
            {"lifespan", "--lifespan-epbpd"}, {"TIRE slack", "--tire-slack"},
            {"TIRE steps", "--tire-steps"}, {"TIRE quantum", "--quantum-s"}};
        const char *flag = "options";
        for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; i++)
            if (!strncmp(err, FLAGS[i].prefix, strlen(FLAGS[i].prefix))) { flag = FLAGS[i].flag; break; }
        return ERR("%s: %s%s", flag, err, bundle ? " (the flags over the bundle's knobs)" : "");
    }
    /* no output is an input; the flash and backing files locked */
    struct cli_guard g;
    cli_guard_init(&g, "pannier-replay");
    cli_guard_add(&g, "--trace", trace, CLI_IN);
    if (bundle) cli_guard_add_suffix(&g, "--bundle", bundle, "/manifest.json", CLI_IN);
    if (!no_data) {
        cli_guard_add(&g, "--flash", flash, CLI_DEV);
        cli_guard_add_suffix(&g, "--flash's journal", flash, ".journal", CLI_DEV);
        cli_guard_add(&g, "--backing", backing, CLI_DEV);
        cli_guard_add_suffix(&g, "--backing's version log", backing, ".versions", CLI_DEV);
    }
    if (cli_guard_check(&g) || (!no_data && (cli_guard_lock(&g, "--flash", flash, 1, !cfg.recover) || cli_guard_lock(&g, "--backing", backing, 1, 2))) ||
        cli_guard_hold()) {
        cli_guard_release(&g, 1);
        return 1;
    }
    struct block_trace tr;
    if (trace_read(trace, &tr, cfg.page_bytes, !no_data) != 0) {
        cli_guard_release(&g, 1);
        return 1;
    }
    frt_pn *c = frt_pn_open(&cfg, err, sizeof err);
    if (!c) {
        trace_free(&tr);
        cli_guard_release(&g, 1);
        return ERR("%s", err);
    }
    int rc = 0;
    size_t n = tr.n;
    if (stop_after && stop_after < n) n = (size_t)stop_after;
    double t0 = frt_now();
    for (size_t i = 0; i < n; i++)
        if (frt_pn_request(c, tr.time[i], tr.block[i], tr.blocks[i], tr.write[i]) < 0) {
            rc = ERR("%s:%llu: %s", trace, (unsigned long long)i + 2, frt_pn_error(c));
            break;
        }
    int stopped = stop_after && stop_after <= tr.n;
    if (rc == 0 && !stopped) frt_pn_finish(c);
    double wall = frt_now() - t0;
    if (rc == 0) {
        const struct frt_pn_counters *k = frt_pn_counters(c);
        uint64_t pb = cfg.page_bytes, eb = frt_pn_erase_blocks(c);
        double span = tr.time[n - 1] - tr.time[0], days = (span > 1.0 ? span : 1.0) / 86400.0;
        uint64_t fw = (k->host_write_pages + k->internal_write_pages) * pb;
        double rhr = k->reads ? (double)k->read_hits / (double)k->reads : 0.0;
        double whr = k->writes ? (double)k->write_hits / (double)k->writes : 0.0;
        struct cli_figure kv[] = {
            {"requests", 1, 0, k->requests}, {"reads", 1, 0, k->reads}, {"read_hits", 1, 0, k->read_hits},
            {"writes", 1, 0, k->writes}, {"write_hits", 1, 0, k->write_hits},
            {"read_hit_ratio", 0, rhr, 0}, {"write_hit_ratio", 0, whr, 0},
            {"page_reads", 1, 0, k->page_reads}, {"page_read_hits", 1, 0, k->page_read_hits}, {"page_writes", 1, 0, k->page_writes},
            {"inserted_pages", 1, 0, k->inserted_pages}, {"rejected_pages", 1, 0, k->rejected_pages},
            {"copied_forward_pages", 1, 0, k->copied_forward_pages}, {"evictions", 1, 0, k->evictions},
            {"erasures", 1, 0, k->erasures}, {"erase_blocks", 1, 0, eb},
            {"flash_read_bytes", 1, 0, k->flash_read_pages * pb},
            {"host_write_bytes", 1, 0, k->host_write_pages * pb}, {"internal_write_bytes", 1, 0, k->internal_write_pages * pb},
            {"flash_write_bytes", 1, 0, fw}, {"days", 0, days, 0},
            {"epbpd", 0, (double)k->erasures / (double)eb / days, 0},
            {"quota", 0, frt_pn_quota(c), 0}, {"final_credit", 0, frt_pn_credit(c), 0}, {"lifetime", 1, 0, frt_pn_lifetime(c)},
            {"container_slots", 1, 0, frt_pn_slots(c)},
            {"verify_failures", 1, 0, k->verify_failures}, {"verified_blocks", 1, 0, k->verified_blocks},
            {"flash_reads", 1, 0, k->flash_reads}, {"backing_reads", 1, 0, k->backing_reads},
            {"recovered_containers", 1, 0, k->recovered_containers}, {"recovered_blocks", 1, 0, k->recovered_blocks},
            {"recovered_stale", 1, 0, k->recovered_stale}, {"recovered_hits", 1, 0, k->recovered_hits},
            {"stopped_after", 1, 0, stopped ? (uint64_t)n : 0},
            {"wall_s", 0, wall, 0}, {"requests_per_s", 0, (double)n / (wall > 1e-9 ? wall : 1e-9), 0},
        };
        size_t nkv = sizeof kv / sizeof kv[0];
        const char *policy = cfg.policy == FRT_PN_PANNIER ? "pannier" : "lru_plus";
        const char *strs[] = {"policy", policy, "tire", cfg.has_tire ? "on" : "off"};
        if (!as_json) cli_print_figures(kv, nkv, strs, 2, 2, 0);
        else {
            int first = 1;
            putchar('{');
            for (size_t i = 0; i < nkv; i++) {
                if (kv[i].is_int) cli_json_int(stdout, kv[i].k, kv[i].u, &first);
                else cli_json_num(stdout, kv[i].k, kv[i].d, &first);
            }
            cli_json_str(stdout, "policy", policy, &first);
            printf(", \"tire\": %s", cfg.has_tire ? "true" : "false");
            size_t nq;
            const struct frt_tire_quantum *q = frt_pn_quanta(c, &nq);
            double *col = malloc((nq ? nq : 1) * sizeof *col);
            if (col) {
                for (size_t i = 0; i < nq; i++) col[i] = q[i].start_s;
                json_array_f("quanta_start_s", col, nq);
                for (size_t i = 0; i < nq; i++) col[i] = q[i].credit;
                json_array_f("quanta_credit", col, nq);
                for (size_t i = 0; i < nq; i++) col[i] = (double)q[i].erasures;
                json_array_f("quanta_erasures", col, nq);
                for (size_t i = 0; i < nq; i++) col[i] = q[i].blocked;
                json_array_f("quanta_blocked", col, nq);
                free(col);
            }
            fputs("}\n", stdout);
        }
        if (k->verify_failures) {
            fprintf(stderr, "flashrt: integrity error: %llu blocks read back wrong bytes\n", (unsigned long long)k->verify_failures);
            rc = 3;
        }
    }
    if (stopped && rc == 0) { /* a crash as far as the files are concerned: nothing closed */
        fflush(stdout);
        _exit(0);
    }
    frt_pn_close(c);
    trace_free(&tr);
    cli_guard_release(&g, rc == 1);
    return rc;
}
