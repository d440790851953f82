/* backing.c: deterministic content, prepare-backing, and the backing-store reader.
 *
 * Content: the 8-byte little-endian word w (= byte position / 8) of block `key` is
 * mix(kh ^ w) with kh = frt_mix64(key ^ SEED) and mix(x) = m ^ (m >> 32), m = x * golden; for
 * one key the words are all distinct (a bijection of w), so any misplaced byte range is caught.
 * Layout: block i of the sorted distinct keys of the trace lives at i x 8 MiB; the key list is
 * the map file (text: a header line, then one key per line in slot order). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backing_internal.h"
#include "engine/device.h"
#include "flashrt.h"
#include "util/internal.h"

#define SEED 0x666C6173686D6C31ull /* "flashml1" */
#define MAP_MAGIC "# flashrt-backing v1"

static inline uint64_t word(uint64_t kh, uint64_t w) {
    uint64_t m = (kh ^ w) * 0x9E3779B97F4A7C15ull;
    return m ^ (m >> 32);
}

static inline void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void flashrt_content(uint64_t key, uint64_t pos, uint8_t *out, size_t n) {
    uint64_t kh = frt_mix64(key ^ SEED);
    while (n && (pos & 7)) {
        *out++ = (uint8_t)(word(kh, pos >> 3) >> (8 * (pos & 7)));
        pos++;
        n--;
    }
    uint64_t w = pos >> 3;
    for (; n >= 8; n -= 8, out += 8, w++) put64(out, word(kh, w));
    pos = w << 3;
    for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(word(kh, w) >> (8 * i));
}

int64_t flashrt_verify(uint64_t key, uint64_t pos, const uint8_t *data, size_t n) {
    uint64_t kh = frt_mix64(key ^ SEED);
    size_t i = 0;
    while (i < n && ((pos + i) & 7)) {
        uint64_t p = pos + i;
        if (data[i] != (uint8_t)(word(kh, p >> 3) >> (8 * (p & 7)))) return (int64_t)i;
        i++;
    }
    uint64_t w = (pos + i) >> 3;
    for (; i + 8 <= n; i += 8, w++) {
        uint64_t v;
        memcpy(&v, data + i, 8); /* little-endian hosts (x86-64, aarch64) */
        if (v != word(kh, w)) {
            for (int k = 0; k < 8; k++)
                if (data[i + k] != (uint8_t)(word(kh, w) >> (8 * k))) return (int64_t)(i + k);
        }
    }
    for (int k = 0; i < n; i++, k++)
        if (data[i] != (uint8_t)(word(kh, w) >> (8 * k))) return (int64_t)i;
    return -1;
}

/* ---- prepare ---- */

struct touched {
    uint64_t key, mask;
};

static int cmp_key(const void *a, const void *b) {
    uint64_t x = ((const struct touched *)a)->key, y = ((const struct touched *)b)->key;
    return (x > y) - (x < y);
}

static void default_map(const char *path, const char *map_path, char *out, size_t n) {
    if (map_path) snprintf(out, n, "%s", map_path);
    else snprintf(out, n, "%s.map", path);
}

int flashrt_prepare_backing(const char *path, const char *map_path, const char *trace_path,
                            struct flashrt_prepare_stats *st, char *err, size_t errlen) {
    double t0 = frt_now();
    memset(st, 0, sizeof *st);
    char mp[4096];
    default_map(path, map_path, mp, sizeof mp);
    flashrt_trace *tr = flashrt_trace_open(trace_path, err, errlen);
    if (!tr) return -1;
    struct frt_map idx;
    struct touched *blocks = NULL;
    size_t nb = 0, capb = 0;
    if (frt_map_init(&idx, 1024) != 0) { flashrt_trace_close(tr); return frt_seterr(err, errlen, "out of memory"); }
    struct flashrt_access a;
    int r;
    while ((r = flashrt_trace_next(tr, &a, err, errlen)) == 1) {
        uint32_t *v = frt_map_get(&idx, a.key);
        if (!v) {
            if (nb == capb) {
                capb = capb ? capb * 2 : 1024;
                struct touched *nbk = realloc(blocks, capb * sizeof *nbk);
                if (!nbk) { r = frt_seterr(err, errlen, "out of memory"); break; }
                blocks = nbk;
            }
            blocks[nb].key = a.key;
            blocks[nb].mask = 0;
            if (frt_map_put(&idx, a.key, (uint32_t)nb) != 0) { r = frt_seterr(err, errlen, "out of memory"); break; }
            v = frt_map_get(&idx, a.key);
            nb++;
        }
        uint64_t s0 = a.offset / FRT_SEGMENT_BYTES, s1 = (a.offset + a.size - 1) / FRT_SEGMENT_BYTES;
        for (uint64_t s = s0; s <= s1; s++) blocks[*v].mask |= 1ull << s;
    }
    flashrt_trace_close(tr);
    frt_map_free(&idx);
    if (r < 0) { free(blocks); return -1; }
    if (nb == 0) { free(blocks); return frt_seterr(err, errlen, "%s: the trace has no accesses", trace_path); }
    qsort(blocks, nb, sizeof *blocks, cmp_key);

    /* the backing: a regular file is written under a temporary name, then renamed */
    struct stat sb;
    int is_dev = stat(path, &sb) == 0 && S_ISBLK(sb.st_mode);
    char tmp[4200];
    if (is_dev) snprintf(tmp, sizeof tmp, "%s", path);
    else snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, is_dev ? O_WRONLY | O_CLOEXEC : O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { free(blocks); return frt_seterr(err, errlen, "%s: %s", path, strerror(errno)); }
    uint64_t total = (uint64_t)nb * FRT_BLOCK_BYTES;
    int ok = 1;
    if (is_dev) {
        uint64_t size = 0;
        int bd;
        if (frt_dev_size(fd, &size, &bd) != 0 || size < total) {
            frt_seterr(err, errlen, "%s: the device has %llu bytes but the trace's %zu blocks need %llu",
                       path, (unsigned long long)size, nb, (unsigned long long)total);
            ok = 0;
        }
    } else if (ftruncate(fd, (off_t)total) != 0) {
        frt_seterr(err, errlen, "%s: cannot size it to %llu bytes: %s", tmp, (unsigned long long)total, strerror(errno));
        ok = 0;
    }
    uint8_t *buf = ok ? malloc(FRT_BLOCK_BYTES) : NULL;
    if (ok && !buf) { frt_seterr(err, errlen, "out of memory"); ok = 0; }
    for (size_t i = 0; ok && i < nb; i++) {
        uint64_t m = blocks[i].mask;
        unsigned s = 0;
        while (s < FRT_SEGMENTS_PER_BLOCK) {
            if (!((m >> s) & 1)) { s++; continue; }
            unsigned e = s;
            while (e + 1 < FRT_SEGMENTS_PER_BLOCK && ((m >> (e + 1)) & 1)) e++;
            size_t len = (size_t)(e - s + 1) * FRT_SEGMENT_BYTES;
            uint64_t pos = (uint64_t)s * FRT_SEGMENT_BYTES;
            flashrt_content(blocks[i].key, pos, buf, len);
            if (frt_pwrite_full(fd, buf, len, (uint64_t)i * FRT_BLOCK_BYTES + pos) != 0) {
                frt_seterr(err, errlen, "%s: write failed: %s", path, strerror(errno));
                ok = 0;
                break;
            }
            st->segments += e - s + 1;
            st->bytes_written += len;
            s = e + 1;
        }
    }
    free(buf);
    if (ok && fdatasync(fd) != 0) { frt_seterr(err, errlen, "%s: sync failed: %s", path, strerror(errno)); ok = 0; }
    close(fd);
    if (ok && !is_dev && rename(tmp, path) != 0) { frt_seterr(err, errlen, "%s: %s", path, strerror(errno)); ok = 0; }
    if (!ok) {
        if (!is_dev) unlink(tmp);
        free(blocks);
        return -1;
    }
    /* the map last: its presence means the backing is complete */
    size_t cap = 128 + nb * 24, n = 0;
    char *text = malloc(cap);
    if (!text) { free(blocks); return frt_seterr(err, errlen, "out of memory"); }
    n += (size_t)snprintf(text + n, cap - n, "%s block_bytes=%u segment_bytes=%u blocks=%zu\n", MAP_MAGIC, FRT_BLOCK_BYTES, FRT_SEGMENT_BYTES, nb);
    for (size_t i = 0; i < nb; i++) n += (size_t)snprintf(text + n, cap - n, "%llu\n", (unsigned long long)blocks[i].key);
    int rc = frt_write_file_atomic(mp, text, n, err, errlen);
    free(text);
    st->blocks = nb;
    st->seconds = frt_now() - t0;
    free(blocks);
    return rc;
}

/* ---- reader ---- */

struct flashrt_backing {
    int fd, direct;
    uint64_t nblocks;
    flashrt_backing_read_fn read_fn; /* flashrt_backing_open_fn's: the caller's reads */
    void *read_ctx;
    struct frt_map slots;
    frt_ra_hook *ra; /* optional, the caller's (frt_backing_set_readahead) */
    char path[4096];
};

flashrt_backing *flashrt_backing_open(const char *path, const char *map_path, int direct,
                                      char *err, size_t errlen) {
    char mp[4096];
    default_map(path, map_path, mp, sizeof mp);
    FILE *f = frt_fopen_input(mp, err, errlen);
    if (!f) {
        if (errno == ENOENT) frt_seterr(err, errlen, "%s: %s (run `flashrt prepare-backing` first)", mp, strerror(errno));
        return NULL;
    }
    flashrt_backing *b = calloc(1, sizeof *b);
    if (!b || frt_map_init(&b->slots, 1024) != 0) {
        free(b);
        fclose(f);
        frt_seterr(err, errlen, "out of memory");
        return NULL;
    }
    b->fd = -1;
    snprintf(b->path, sizeof b->path, "%s", path);
    char line[256];
    unsigned long long blocks = 0;
    unsigned bb = 0, sb = 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, MAP_MAGIC, strlen(MAP_MAGIC)) != 0 ||
        sscanf(line + strlen(MAP_MAGIC), " block_bytes=%u segment_bytes=%u blocks=%llu", &bb, &sb, &blocks) != 3) {
        frt_seterr(err, errlen, "%s:1: not a flashrt backing map", mp);
        goto fail;
    }
    if (bb != FRT_BLOCK_BYTES || sb != FRT_SEGMENT_BYTES) {
        frt_seterr(err, errlen, "%s:1: block/segment sizes %u/%u differ from this runtime's %u/%u", mp, bb, sb, FRT_BLOCK_BYTES, FRT_SEGMENT_BYTES);
        goto fail;
    }
    for (unsigned long long i = 0; i < blocks; i++) {
        char *end;
        if (!fgets(line, sizeof line, f)) {
            frt_seterr(err, errlen, "%s:%llu: truncated map: expected %llu keys", mp, i + 2, blocks);
            goto fail;
        }
        errno = 0;
        unsigned long long k = strtoull(line, &end, 10);
        if (end == line || (*end != '\n' && *end) || errno) {
            frt_seterr(err, errlen, "%s:%llu: field 'key': not an integer", mp, i + 2);
            goto fail;
        }
        if (frt_map_put(&b->slots, k, (uint32_t)i) != 0) { frt_seterr(err, errlen, "out of memory"); goto fail; }
    }
    b->nblocks = blocks;
    fclose(f);
    f = NULL;
    b->fd = frt_open_dev(path, O_RDONLY, direct, &b->direct, err, errlen);
    if (b->fd < 0) goto fail;
    uint64_t size;
    int bd;
    if (frt_dev_size(b->fd, &size, &bd) != 0) { frt_seterr(err, errlen, "%s: %s", path, strerror(errno)); goto fail; }
    if (size < blocks * FRT_BLOCK_BYTES) {
        frt_seterr(err, errlen, "%s: %llu bytes, but its map %s lists %llu blocks of 8 MiB", path, (unsigned long long)size, mp, blocks);
        goto fail;
    }
    return b;
fail:
    if (f) fclose(f);
    flashrt_backing_close(b);
    return NULL;
}

flashrt_backing *flashrt_backing_open_fn(flashrt_backing_read_fn read, void *ctx, const char *name, char *err,
                                         size_t errlen) {
    flashrt_backing *b = calloc(1, sizeof *b);
    if (!b || frt_map_init(&b->slots, 16) != 0) {
        free(b);
        frt_seterr(err, errlen, "out of memory");
        return NULL;
    }
    b->fd = -1;
    b->read_fn = read;
    b->read_ctx = ctx;
    snprintf(b->path, sizeof b->path, "%s", name ? name : "backing");
    return b;
}

uint64_t flashrt_backing_blocks(const flashrt_backing *b) { return b->nblocks; }

int flashrt_backing_offset(const flashrt_backing *b, uint64_t key, uint64_t *off) {
    const uint32_t *slot = b->read_fn ? NULL : frt_map_get(&b->slots, key);
    if (!slot) return -1;
    *off = (uint64_t)*slot * FRT_BLOCK_BYTES;
    return 0;
}
int frt_backing_direct(const flashrt_backing *b) { return b->direct; }
void frt_backing_set_readahead(flashrt_backing *b, frt_ra_hook *h) { b->ra = h; }

void flashrt_backing_close(flashrt_backing *b) {
    if (!b) return;
    if (b->fd >= 0) close(b->fd);
    frt_map_free(&b->slots);
    free(b);
}

int frt_backing_read(flashrt_backing *b, uint64_t key, unsigned lo, unsigned hi, uint8_t *buf,
                     double t, char *err, size_t errlen) {
    if (b->read_fn) {
        uint64_t pos = (uint64_t)lo * FRT_SEGMENT_BYTES;
        size_t len = (size_t)(hi - lo + 1) * FRT_SEGMENT_BYTES;
        if (b->read_fn(b->read_ctx, key, pos, buf, len) != 0)
            return frt_seterr(err, errlen, "%s: read of %zu bytes of block %llu at %llu failed: %s", b->path, len,
                              (unsigned long long)key, (unsigned long long)pos, strerror(errno));
        return 0;
    }
    uint32_t *slot = frt_map_get(&b->slots, key);
    if (!slot)
        return frt_seterr(err, errlen, "block %llu is not on the backing device %s (prepare it with this trace)",
                          (unsigned long long)key, b->path);
    uint64_t off = (uint64_t)*slot * FRT_BLOCK_BYTES + (uint64_t)lo * FRT_SEGMENT_BYTES;
    size_t n = (size_t)(hi - lo + 1) * FRT_SEGMENT_BYTES;
    if (frt_pread_full(b->fd, buf, n, off) != 0)
        return frt_seterr(err, errlen, "%s: read of %zu bytes at %llu failed: %s", b->path, n, (unsigned long long)off, strerror(errno));
    /* the stream is the block (ra_hook.h: a block is the backing's file) */
    if (b->ra)
        frt_ra_hook_read(b->ra, key, t, b->fd, (uint64_t)*slot * FRT_BLOCK_BYTES, FRT_BLOCK_BYTES,
                         (uint64_t)lo * FRT_SEGMENT_BYTES, n);
    return 0;
}
