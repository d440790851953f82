/* internal.h: helpers shared by libflashrt's sources (not part of the public API): errors,
 * hashing, clocks, SHA-256, JSON, atomic files; it brings in map.h and stats.h. The cache's
 * parts have their own headers: engine/device.h, engine/region.h, engine/policy_slots.h
 * (runtime/README.md, Layout). */
#ifndef FLASHRT_INTERNAL_H
#define FLASHRT_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "util/map.h"
#include "util/stats.h"
#include "util/units.h"

#if defined(__GNUC__)
#define FRT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FRT_PRINTF(a, b)
#endif

/* snprintf into a caller's error buffer (NULL-safe); always returns -1 for `return seterr()`. */
int frt_seterr(char *err, size_t errlen, const char *fmt, ...) FRT_PRINTF(3, 4);

static inline uint64_t frt_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A uniform number in [0, 1) from a 64-bit hash: its top 53 bits, exact in a double (the
 * simulator's hash::unit_interval). */
static inline double frt_unit_interval(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }

static inline double frt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t frt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* SHA-256 */
void frt_sha256(const void *data, size_t n, uint8_t out[32]);
int frt_sha256_file(const char *path, char hex[65], char *err, size_t errlen);

/* Minimal JSON: parses a whole document whose top level is an object and returns its
 * scalar members (strings, numbers, booleans, null); nested values are validated and
 * skipped. */
enum frt_json_type { FRT_JSON_STRING, FRT_JSON_NUMBER, FRT_JSON_BOOL, FRT_JSON_NULL, FRT_JSON_NESTED };
struct frt_json_member {
    char key[64];
    enum frt_json_type type;
    char str[256];
    double num;
    size_t off, len; /* the value's text: text[off, off + len) (a nested value's whole span) */
};
struct frt_json_object {
    struct frt_json_member members[64];
    int n;
    char nonfinite[64]; /* the top-level key of the first number that reads as +-inf ("" if none) */
};
int frt_json_parse_object(const char *text, size_t len, struct frt_json_object *out, char *err,
                          size_t errlen);
const struct frt_json_member *frt_json_get(const struct frt_json_object *o, const char *key);

/* An input file for reading: opened without blocking (a FIFO), refused unless a regular file
 * (or a block device), with the message naming it; then ordinary blocking reads. */
#include <stdio.h>
FILE *frt_fopen_input(const char *path, char *err, size_t errlen);

/* Atomic output: writes `text` to PATH via PATH.tmp.PID then rename. */
int frt_write_file_atomic(const char *path, const char *text, size_t n, char *err,
                          size_t errlen);

#endif
