/* test_readahead.c: C unit tests of KML's readahead tuner, the library part (src/kml/readahead.c)
 * under ASan+UBSan (`make test`) and valgrind (`make valgrind`): the window features against
 * a slow recomputation from every stored offset, the trace line parser on this kernel's lines
 * and on malformed ones, and loading a readahead bundle (the test policy
 * tests/policies/readahead.c) with the loader's refusals, and the per-stream controller of the
 * backing reads (src/kml/ra_hook.c: decisions per stream, determinism, the table's reuse, the
 * hints on a real backing). The features against Python's
 * window_features, and the command: tests/runtime/test_runtime_readahead.py. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashml_policy.h"
#include "flashrt.h"
#include "util/internal.h"
#include "engine/backing_internal.h"
#include "policies/policy_internal.h"
#include "kml/ra_hook.h"
#include "kml/readahead.h"

#include "check.h"


static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fmax(fabs(a), fabs(b))); }

/* ---- the accumulator against the definitions, recomputed from the window's events ---- */

static void test_accumulator(void) {
    struct frt_ra_acc a;
    frt_ra_init(&a);
    double f[FLASHML_READAHEAD_NUM_FEATURES];
    CHECK(frt_ra_count(&a) == 0, "empty at start");
    /* by hand: 10, 14, 2 -> mean 26/3, population std sqrt(((4/3)^2 + (16/3)^2 + (20/3)^2)/3),
     * absdiff (4 + 12) / 2 = 8 */
    frt_ra_add(&a, 10);
    frt_ra_add(&a, 14);
    frt_ra_add(&a, 2);
    CHECK(frt_ra_count(&a) == 3, "count");
    frt_ra_window(&a, f, 128.0);
    CHECK(f[0] == 3.0 && close_to(f[1], 26.0 / 3.0) && close_to(f[2], sqrt((16.0 / 9 + 256.0 / 9 + 400.0 / 9) / 3.0)) &&
          f[3] == 8.0 && f[4] == 128.0, "%g %g %g %g %g", f[0], f[1], f[2], f[3], f[4]);
    CHECK(frt_ra_count(&a) == 0, "the window is reset");
    /* one event: no consecutive pair in the window (0); mean and std are the window's own */
    frt_ra_add(&a, 1000);
    frt_ra_window(&a, f, 16.0);
    CHECK(f[0] == 1.0 && f[3] == 0.0 && f[1] == 1000.0 && f[2] == 0.0 && f[4] == 16.0, "%g %g %g", f[1], f[2], f[3]);
    /* the first event alone: std 0 */
    frt_ra_init(&a);
    frt_ra_add(&a, 7);
    frt_ra_window(&a, f, 4.0);
    CHECK(f[0] == 1.0 && f[1] == 7.0 && f[2] == 0.0 && f[3] == 0.0, "single event");

    /* a random stream: windows of 0..40 events (empty ones skipped, as the tuner skips them),
     * pages sequential runs or random jumps, some near 2^40 */
    frt_ra_init(&a);
    enum { MAXN = 20000 };
    uint64_t *all = malloc(MAXN * sizeof *all);
    size_t n = 0, windows = 0, empty = 0;
    uint64_t x = 12345;
    while (n < MAXN - 64) {
        x = frt_mix64(x);
        size_t k = x % 41;
        if (k < 5) k = 0; /* plenty of empty windows */
        size_t w0 = n;
        for (size_t i = 0; i < k; i++) {
            x = frt_mix64(x);
            uint64_t page = (x & 3) == 0 ? (x >> 24) : (x & 3) == 1 ? (x >> 8) % 5000 : (n ? all[n - 1] + 1 : 0);
            all[n++] = page;
            frt_ra_add(&a, page);
        }
        CHECK(frt_ra_count(&a) == k, "count %zu", k);
        if (k == 0) { empty++; continue; }
        frt_ra_window(&a, f, (double)k);
        windows++;
        double s = 0.0, ss = 0.0, ad = 0.0;
        for (size_t i = w0; i < n; i++) s += (double)all[i];
        const double mean = s / (double)k;
        for (size_t i = w0; i < n; i++) ss += ((double)all[i] - mean) * ((double)all[i] - mean);
        for (size_t i = w0 + 1; i < n; i++) ad += fabs((double)all[i] - (double)all[i - 1]);
        const double std = k > 1 ? sqrt(ss / (double)k) : 0.0, absdiff = k > 1 ? ad / (double)(k - 1) : 0.0;
        CHECK(f[0] == (double)k && close_to(f[1], mean) && close_to(f[2], std) && close_to(f[3], absdiff) && f[4] == (double)k,
              "window %zu: %g %g %g vs %g %g %g", windows, f[1], f[2], f[3], mean, std, absdiff);
    }
    CHECK(windows > 100 && empty > 20, "windows %zu, empty %zu", windows, empty);
    free(all);
}

/* ---- the trace line parser ---- */

static void test_parser(void) {
    struct frt_ra_event e;
    /* this kernel's (6.x) lines: a raw loop device read, and a filesystem page */
    CHECK(frt_ra_parse_line("              dd-29088   [001] ..... 20327.259977: mm_filemap_add_to_page_cache: dev 0:3 ino 700000 pfn=0x129bae ofs=4096 order=0", &e) == 0 &&
              e.t == 20327.259977 && e.major == 0 && e.minor == 3 && e.ino == 0x700000 && e.ofs == 4096 && e.order == 0,
          "real line: %g %u:%u %llx %llu %d", e.t, e.major, e.minor, (unsigned long long)e.ino, (unsigned long long)e.ofs, e.order);
    CHECK(frt_ra_parse_line("            bash-29081   [001] ..... 20327.247847: mm_filemap_add_to_page_cache: dev 254:1 ino fe00000 pfn=0x1895e4 ofs=6433427456 order=8\n", &e) == 0 &&
              e.major == 254 && e.minor == 1 && e.ino == 0xfe00000 && e.ofs == 6433427456ull && e.order == 8,
          "newline, order 8");
    /* older kernels end at ofs; newer fields after it are ignored; a task name with spaces */
    CHECK(frt_ra_parse_line("  kworker/u8:2 x-17 [000] .... 5.000100: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=0", &e) == 0 &&
              e.t == 5.0001 && e.minor == 3 && e.ino == 26 && e.ofs == 0 && e.order == -1,
          "no order");
    CHECK(frt_ra_parse_line(" a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=8192 order=1 extra=3", &e) == 0 &&
              e.ofs == 8192 && e.order == 1,
          "extra fields");
    static const char *const BAD[] = {
        "",
        "CPU:1 [LOST 120 EVENTS]",
        " a-1 [000] .... 5.5: mm_filemap_delete_from_page_cache: dev 7:3 ino 1a pfn=0xff ofs=8192 order=0",
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=12x order=0",   /* ofs not a number */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1g pfn=0xff ofs=12 order=0",    /* ino not hex */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7 ino 1a pfn=0xff ofs=12",              /* no minor */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a ofs=12",                     /* no pfn */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=",              /* empty ofs */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=99999999999999999999", /* > 2^64 */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 4096:3 ino 1a pfn=0xff ofs=1",          /* major > 12 bits */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=1 order=x",
        " a-1 [000] .... 55: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=1",              /* no fraction */
        " a-1 [000] .... .5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=1",              /* no seconds */
        "5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff ofs=1",                             /* no space before */
        " a-1 [000] .... 5.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0xff",                   /* truncated */
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++)
        CHECK(frt_ra_parse_line(BAD[i], &e) == -1, "malformed line %zu accepted: %s", i, BAD[i]);
}

/* ---- loading a readahead bundle ---- */

/* A bundle TMP/name holding poldir/so_name as policy.so, its manifest listing `caps` with
 * readahead_contract_hash `rhash` (left out when NULL). */
static void bundle(const char *name, const char *poldir, const char *so_name, const char *caps, const char *rhash, char *dir, size_t dirlen) {
    char so[600], man[1600], hex[65], err[FLASHRT_ERR_LEN], cmd[2400];
    snprintf(dir, dirlen, "%s/%s", TMP, name);
    snprintf(so, sizeof so, "%s/policy.so", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/%s' '%s'", dir, poldir, so_name, so);
    if (system(cmd) != 0) { fprintf(stderr, "%s failed\n", cmd); exit(2); }
    if (frt_sha256_file(so, hex, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); exit(2); }
    int n = snprintf(man, sizeof man, MANIFEST_HEAD "\"abi_version\": %d, \"sha256\": \"%s\", \"capabilities\": [%s]", file_size(so), FLASHML_POLICY_ABI_VERSION, hex, caps);
    if (rhash) n += snprintf(man + n, sizeof man - (size_t)n, ", \"readahead_contract_hash\": \"%s\"", rhash);
    snprintf(man + n, sizeof man - (size_t)n, "}\n");
    snprintf(cmd, sizeof cmd, "%s/manifest.json", dir);
    write_text(cmd, man);
}

static void test_loader(const char *poldir) {
    char dir[400], err[FLASHRT_ERR_LEN];
    bundle("ra", poldir, "readahead.so", "\"readahead\"", FLASHML_READAHEAD_CONTRACT_HASH, dir, sizeof dir);
    flashrt_policy *p = frt_readahead_load(dir, err, sizeof err);
    CHECK(p != NULL, "%s", err);
    if (p) {
        const struct frt_readahead_fns *fns = frt_policy_readahead(p);
        CHECK(fns && fns->window_ms == FLASHML_READAHEAD_WINDOW_MS, "window");
        CHECK(frt_policy_caps(p) == FRT_CAP_READAHEAD && !frt_policy_evict(p) && !frt_policy_partition(p), "caps");
        if (fns) {
            double f[FLASHML_READAHEAD_NUM_FEATURES] = {10, 100, 5, 63.5, 128};
            CHECK(fns->kib(f) == 1024, "the rule: close pages");
            f[FLASHML_RA_F_OFFSET_ABSDIFF_MEAN] = 64.0;
            CHECK(fns->kib(f) == 16, "the rule: far pages");
        }
        flashrt_policy_free(p);
    }
    /* the manifest's contract hash differs */
    bundle("ra-manifest-hash", poldir, "readahead.so", "\"readahead\"",
           "2222222222222222222222222222222222222222222222222222222222222222", dir, sizeof dir);
    p = frt_readahead_load(dir, err, sizeof err);
    CHECK(!p && strstr(err, dir) && strstr(err, "readahead_contract_hash") && strstr(err, "2222") && strstr(err, FLASHML_READAHEAD_CONTRACT_HASH), "%s", err);
    flashrt_policy_free(p);
    /* the .so's contract hash differs (the manifest is right) */
    bundle("ra-so-hash", poldir, "readahead_wronghash.so", "\"readahead\"", FLASHML_READAHEAD_CONTRACT_HASH, dir, sizeof dir);
    p = frt_readahead_load(dir, err, sizeof err);
    CHECK(!p && strstr(err, dir) && strstr(err, "readahead contract hash is 1111") && strstr(err, FLASHML_READAHEAD_CONTRACT_HASH), "%s", err);
    flashrt_policy_free(p);
    /* ... and both agree on the wrong hash */
    bundle("ra-both-hash", poldir, "readahead_wronghash.so", "\"readahead\"",
           "1111111111111111111111111111111111111111111111111111111111111111", dir, sizeof dir);
    p = frt_readahead_load(dir, err, sizeof err);
    CHECK(!p && strstr(err, "field 'readahead_contract_hash' is 1111"), "%s", err);
    flashrt_policy_free(p);
    /* no readahead capability in the manifest */
    bundle("ra-nocap", poldir, "readahead.so", "\"eviction\"", FLASHML_READAHEAD_CONTRACT_HASH, dir, sizeof dir);
    p = frt_readahead_load(dir, err, sizeof err);
    CHECK(!p && strstr(err, dir) && strstr(err, "no readahead capability") && strstr(err, "lists: eviction"), "%s", err);
    flashrt_policy_free(p);
    /* the capability without the manifest's hash */
    bundle("ra-nohash", poldir, "readahead.so", "\"readahead\"", NULL, dir, sizeof dir);
    p = frt_readahead_load(dir, err, sizeof err);
    CHECK(!p && strstr(err, "field 'readahead_contract_hash': missing"), "%s", err);
    flashrt_policy_free(p);
    /* the capability listed but a .so without the functions */
    bundle("ra-nosym", poldir, "evict.so", "\"readahead\"", FLASHML_READAHEAD_CONTRACT_HASH, dir, sizeof dir);
    p = frt_readahead_load(dir, err, sizeof err);
    CHECK(!p && strstr(err, "no symbol flashml_readahead_num_features"), "%s", err);
    flashrt_policy_free(p);
    /* a readahead bundle is not an eviction one */
    bundle("ra-for-evict", poldir, "readahead.so", "\"readahead\"", FLASHML_READAHEAD_CONTRACT_HASH, dir, sizeof dir);
    p = flashrt_policy_load_eviction(dir, err, sizeof err);
    CHECK(!p && strstr(err, "no eviction capability") && strstr(err, "lists: readahead"), "%s", err);
    flashrt_policy_free(p);
}

/* ---- the per-stream controller of the backing reads (src/kml/ra_hook.c) ---- */

#define KIB128 (128u * 1024u)

/* A sparse file of `blocks` 8 MiB blocks, open for reading. */
static int sparse_file(const char *name, unsigned blocks) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", TMP, name);
    FILE *f = fopen(p, "w");
    if (!f || ftruncate(fileno(f), (off_t)blocks * FRT_BLOCK_BYTES) != 0) { perror(p); exit(2); }
    fclose(f);
    int fd = open(p, O_RDONLY);
    if (fd < 0) { perror(p); exit(2); }
    return fd;
}

static uint64_t decided(const struct frt_ra_hook_stats *st, uint64_t kib) {
    for (size_t i = 0; i < st->nsizes; i++)
        if (st->decisions[i].kib == kib) return st->decisions[i].n;
    return 0;
}

/* Two streams in one window, one reading its block sequentially, the other at random: the
 * same size before their first window closes, the rule's sizes (1024 and 16 KiB) after; the
 * hints cover the next `kib` of the block, bounded by its end. */
static void test_hook_two_streams(const struct frt_readahead_fns *fns) {
    char err[FLASHRT_ERR_LEN];
    int fd = sparse_file("ra-two.img", 2);
    frt_ra_hook *h = frt_ra_hook_new(fns, 1000, 1, err, sizeof err);
    CHECK(h != NULL, "%s", err);
    if (!h) { close(fd); return; }
    const uint64_t SEQ = 7, RND = 9, B = FRT_BLOCK_BYTES;
    static const unsigned rnd_pages[10] = {1500, 32, 1984, 640, 96, 1216, 2016, 320, 1760, 0};
    uint64_t want_hinted = 0;
    for (unsigned i = 0; i < 10; i++) {
        double t = 100.0 + 0.05 * i;
        CHECK(frt_ra_hook_read(h, SEQ, t, fd, 0, B, (uint64_t)i * KIB128, KIB128) == FRT_KML_READAHEAD_KIB_DEFAULT, "seq %u", i);
        want_hinted += KIB128;
        uint64_t off = (uint64_t)rnd_pages[i] * 4096;
        CHECK(frt_ra_hook_read(h, RND, t + 0.01, fd, B, B, off, KIB128) == FRT_KML_READAHEAD_KIB_DEFAULT, "rnd %u", i);
        uint64_t room = B - (off + KIB128);
        want_hinted += room < KIB128 ? room : KIB128;
    }
    const struct frt_ra_hook_stats *st = frt_ra_hook_stats(h);
    CHECK(st->windows == 0 && st->reads == 20 && st->streams == 2 && st->live_streams == 2, "first window: %llu windows",
          (unsigned long long)st->windows);
    CHECK(frt_ra_hook_stream_kib(h, SEQ) == 128 && frt_ra_hook_stream_kib(h, RND) == 128, "initial sizes");
    /* page 2016 + 32 pages ends at the block's end: no hint for that read */
    CHECK(st->hints == 19 && st->hinted_bytes == want_hinted && st->hint_errors == 0, "hints %llu bytes %llu (want %llu)",
          (unsigned long long)st->hints, (unsigned long long)st->hinted_bytes, (unsigned long long)want_hinted);
    /* the next window: each stream's first read closes its window */
    uint64_t hinted0 = st->hinted_bytes;
    CHECK(frt_ra_hook_read(h, SEQ, 101.2, fd, 0, B, 10 * KIB128, KIB128) == 1024, "sequential -> 1024 KiB");
    CHECK(st->hinted_bytes - hinted0 == 1024 * 1024, "a 1 MiB hint: %llu", (unsigned long long)(st->hinted_bytes - hinted0));
    CHECK(frt_ra_hook_read(h, RND, 101.3, fd, B, B, 0, KIB128) == 16, "random -> 16 KiB");
    CHECK(frt_ra_hook_stream_kib(h, SEQ) == 1024 && frt_ra_hook_stream_kib(h, RND) == 16, "sizes after the window");
    CHECK(st->windows == 2 && decided(st, 1024) == 1 && decided(st, 16) == 1 && st->clamped == 0, "decisions");
    /* near the block's end the hint is bounded by it */
    hinted0 = st->hinted_bytes;
    CHECK(frt_ra_hook_read(h, SEQ, 101.4, fd, 0, B, B - 2 * KIB128, KIB128) == 1024, "same window");
    CHECK(st->hinted_bytes - hinted0 == KIB128 && st->windows == 2, "bounded: %llu", (unsigned long long)(st->hinted_bytes - hinted0));
    /* a later window without reads of RND leaves RND alone; SEQ's window (pages 320, then 1984:
     * a jump) decides 16 */
    CHECK(frt_ra_hook_read(h, SEQ, 105.0, fd, 0, B, 0, KIB128) == 16 && st->windows == 3, "one more window");
    CHECK(frt_ra_hook_stream_kib(h, RND) == 16, "an idle stream keeps its size");
    frt_ra_hook_free(h);
    /* no hints (an O_DIRECT backing): the same decisions, nothing hinted */
    h = frt_ra_hook_new(fns, 1000, 0, err, sizeof err);
    if (h) {
        frt_ra_hook_read(h, SEQ, 0.0, fd, 0, B, 0, KIB128);
        frt_ra_hook_read(h, SEQ, 0.5, fd, 0, B, KIB128, KIB128);
        CHECK(frt_ra_hook_read(h, SEQ, 1.0, fd, 0, B, 2 * KIB128, KIB128) == 1024, "decides without hints");
        st = frt_ra_hook_stats(h);
        CHECK(st->hints == 0 && st->hinted_bytes == 0 && st->windows == 1 && !frt_ra_hook_hinting(h), "no hints");
        frt_ra_hook_free(h);
    }
    close(fd);
    CHECK(!frt_ra_hook_new(fns, 0, 1, err, sizeof err) && strstr(err, "window"), "window 0 refused: %s", err);
    CHECK(!frt_ra_hook_new(NULL, 1000, 1, err, sizeof err), "no model refused");
}

/* 40 streams (even ids read their block page after page, odd ones at random pages) over 30 s
 * of trace time. */
static frt_ra_hook *run_mix(const struct frt_readahead_fns *fns, int fd, uint64_t seed) {
    char err[FLASHRT_ERR_LEN];
    frt_ra_hook *h = frt_ra_hook_new(fns, 1000, 1, err, sizeof err);
    if (!h) return NULL;
    uint64_t next[40] = {0}, x = seed;
    double t = 50.0;
    for (int i = 0; i < 20000; i++) {
        x = frt_mix64(x);
        uint64_t id = x % 40;
        t += (double)((x >> 8) % 3000) * 1e-6;
        uint64_t page;
        if (id % 2 == 0) { page = next[id]; next[id] = (next[id] + 1) % 2048; }
        else page = (x >> 20) % 2048;
        frt_ra_hook_read(h, id, t, fd, 0, FRT_BLOCK_BYTES, page * 4096, 4096);
    }
    return h;
}

/* The decisions depend on the reads and their trace times only. */
static void test_hook_deterministic(const struct frt_readahead_fns *fns) {
    int fd = sparse_file("ra-det.img", 1);
    frt_ra_hook *a = run_mix(fns, fd, 77), *b = run_mix(fns, fd, 77);
    CHECK(a && b, "hooks");
    if (a && b) {
        const struct frt_ra_hook_stats *x = frt_ra_hook_stats(a), *y = frt_ra_hook_stats(b);
        CHECK(x->windows > 40 && x->windows == y->windows && x->reads == y->reads && x->hints == y->hints &&
              x->hinted_bytes == y->hinted_bytes && x->nsizes == y->nsizes &&
              memcmp(x->decisions, y->decisions, sizeof x->decisions) == 0, "the same decisions twice: %llu / %llu windows",
              (unsigned long long)x->windows, (unsigned long long)y->windows);
        int same = 1, rule = 1;
        for (uint64_t id = 0; id < 40; id++) {
            same &= frt_ra_hook_stream_kib(a, id) == frt_ra_hook_stream_kib(b, id);
            rule &= frt_ra_hook_stream_kib(a, id) == (id % 2 == 0 ? 1024u : 16u);
        }
        CHECK(same, "the same sizes per stream");
        CHECK(rule, "sequential streams 1024 KiB, random ones 16");
        CHECK(decided(x, 1024) > 0 && decided(x, 16) > 0 && decided(x, 1024) + decided(x, 16) == x->windows, "the rule's sizes only");
    }
    frt_ra_hook_free(a);
    frt_ra_hook_free(b);
    close(fd);
}

/* The fixed table: more streams than slots drop the least recently read of a set; a stream
 * read all along stays; a dropped one starts afresh. */
static void test_hook_table_reuse(const struct frt_readahead_fns *fns) {
    char err[FLASHRT_ERR_LEN];
    frt_ra_hook *h = frt_ra_hook_new(fns, 1000, 0, err, sizeof err);
    CHECK(h != NULL, "%s", err);
    if (!h) return;
    const uint64_t X = 42, Y = 43;
    frt_ra_hook_read(h, X, 0.0, -1, 0, FRT_BLOCK_BYTES, 0, KIB128);
    frt_ra_hook_read(h, Y, 0.0, -1, 0, FRT_BLOCK_BYTES, 0, KIB128);
    frt_ra_hook_read(h, X, 1.0, -1, 0, FRT_BLOCK_BYTES, KIB128, KIB128);
    frt_ra_hook_read(h, Y, 1.0, -1, 0, FRT_BLOCK_BYTES, KIB128, KIB128);
    CHECK(frt_ra_hook_stream_kib(h, X) == 1024 && frt_ra_hook_stream_kib(h, Y) == 1024, "decided");
    /* 8000 other streams, Y read between every two of them, X never */
    for (uint64_t i = 0; i < 8000; i++) {
        frt_ra_hook_read(h, 100000 + i, 1.5, -1, 0, FRT_BLOCK_BYTES, 0, KIB128);
        frt_ra_hook_read(h, Y, 1.5, -1, 0, FRT_BLOCK_BYTES, KIB128, KIB128);
    }
    const struct frt_ra_hook_stats *st = frt_ra_hook_stats(h);
    CHECK(st->live_streams == FRT_RA_HOOK_STREAMS, "the table is full: %llu", (unsigned long long)st->live_streams);
    CHECK(st->streams == 8002 && st->stream_evictions == st->streams - st->live_streams, "streams %llu evictions %llu",
          (unsigned long long)st->streams, (unsigned long long)st->stream_evictions);
    CHECK(frt_ra_hook_stream_kib(h, X) == 0, "X was dropped");
    CHECK(frt_ra_hook_stream_kib(h, Y) == 1024, "Y, read all along, kept its state");
    /* X back: a new stream at the initial size (its first read decides nothing) */
    uint64_t w = st->windows;
    CHECK(frt_ra_hook_read(h, X, 2.5, -1, 0, FRT_BLOCK_BYTES, 0, KIB128) == FRT_KML_READAHEAD_KIB_DEFAULT && st->windows == w &&
          st->streams == 8003, "X afresh");
    frt_ra_hook_free(h);
}

/* The hook on a real backing: prepare-backing of a small trace, reads through
 * frt_backing_read feed it (stream = the block) and hint. */
static void test_hook_backing(const struct frt_readahead_fns *fns) {
    char trace[400], back[400], err[FLASHRT_ERR_LEN];
    snprintf(trace, sizeof trace, "%s/ra.trace", TMP);
    snprintf(back, sizeof back, "%s/ra-backing.img", TMP);
    /* 201910 columns: block_id io_offset io_size op_time op_name pipeline user_namespace user_name */
    write_text(trace, "5 0 8388608 10.0 1 0 1 1\n6 0 8388608 10.0 1 0 1 1\n");
    struct flashrt_prepare_stats ps;
    CHECK(flashrt_prepare_backing(back, NULL, trace, &ps, err, sizeof err) == 0, "%s", err);
    flashrt_backing *bk = flashrt_backing_open(back, NULL, FLASHRT_DIRECT_OFF, err, sizeof err);
    CHECK(bk != NULL, "%s", err);
    frt_ra_hook *h = frt_ra_hook_new(fns, 1000, 1, err, sizeof err);
    uint8_t *buf = NULL;
    if (bk && h && posix_memalign((void **)&buf, 4096, 4 * KIB128) == 0) {
        frt_backing_set_readahead(bk, h);
        for (unsigned s = 0; s < 8; s++) {
            CHECK(frt_backing_read(bk, 5, s, s, buf, 10.0 + 0.1 * s, err, sizeof err) == 0, "%s", err);
            CHECK(flashrt_verify(5, (uint64_t)s * KIB128, buf, KIB128) == -1, "bytes of block 5");
        }
        CHECK(frt_backing_read(bk, 6, 60, 63, buf, 11.0, err, sizeof err) == 0, "%s", err); /* to the block's end */
        CHECK(frt_backing_read(bk, 5, 8, 8, buf, 11.0, err, sizeof err) == 0, "%s", err);
        const struct frt_ra_hook_stats *st = frt_ra_hook_stats(h);
        CHECK(st->reads == 10 && st->streams == 2 && st->windows == 1 && decided(st, 1024) == 1, "reads %llu streams %llu windows %llu",
              (unsigned long long)st->reads, (unsigned long long)st->streams, (unsigned long long)st->windows);
        CHECK(st->hints == 9 && st->hinted_bytes == 8 * (uint64_t)KIB128 + 1024 * 1024 && st->hint_errors == 0, "hints %llu bytes %llu",
              (unsigned long long)st->hints, (unsigned long long)st->hinted_bytes);
        CHECK(frt_ra_hook_stream_kib(h, 5) == 1024 && frt_ra_hook_stream_kib(h, 6) == 128, "per block");
        frt_backing_set_readahead(bk, NULL);
        CHECK(frt_backing_read(bk, 5, 9, 9, buf, 12.0, err, sizeof err) == 0 && st->reads == 10, "detached");
    }
    free(buf);
    frt_ra_hook_free(h);
    flashrt_backing_close(bk);
}

static void test_hook(const char *poldir) {
    char dir[400], err[FLASHRT_ERR_LEN];
    bundle("ra-hook", poldir, "readahead.so", "\"readahead\"", FLASHML_READAHEAD_CONTRACT_HASH, dir, sizeof dir);
    flashrt_policy *p = frt_readahead_load(dir, err, sizeof err);
    CHECK(p != NULL, "%s", err);
    if (!p) return;
    const struct frt_readahead_fns *fns = frt_policy_readahead(p);
    test_hook_two_streams(fns);
    test_hook_deterministic(fns);
    test_hook_table_reuse(fns);
    test_hook_backing(fns);
    flashrt_policy_free(p);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_readahead POLICY_BUILD_DIR\n");
        return 2;
    }
    test_scratch("flashrt-ra");
    test_accumulator();
    test_parser();
    test_loader(argv[1]);
    test_hook(argv[1]);
    return test_done("test_readahead");
}
