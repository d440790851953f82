/* check.h: the C tests' assertion macro and helpers (one definition for every test_*.c).
 * CHECK(cond, fmt, ...) counts a check, and on failure counts it, prints where and why, and
 * goes on; each test program ends by reporting `failures` of `checks`. */
#ifndef FLASHRT_TESTS_CHECK_H
#define FLASHRT_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* The size of file p in bytes (-1 when it cannot be read): a manifest's size_bytes. */
static inline long long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

/* The start of a test manifest's JSON object: the bundle format and the .so's size_bytes
 * (then the caller's fields). */
#define MANIFEST_HEAD "{\"format\": \"flashml-policy-bundle/1\", \"size_bytes\": %lld, "

static int failures, checks;

/* The test program's scratch folder, made by test_scratch under $TMPDIR (or /tmp) and removed
 * with everything in it by test_done. */
static char TMP[256];

/* Make TMP as "<$TMPDIR>/<prefix>-XXXXXX"; exit 2 if it cannot. */
static inline void test_scratch(const char *prefix) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(TMP, sizeof TMP, "%s/%s-XXXXXX", base, prefix);
    if (!mkdtemp(TMP)) { perror("mkdtemp"); exit(2); }
}

/* Remove TMP (if test_scratch made it), print "<name>: N checks, M failures", and return
 * the program's exit status: 1 if any check failed. */
static inline int test_done(const char *name) {
    if (TMP[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", TMP);
    }
    printf("%s: %d checks, %d failures\n", name, checks, failures);
    return failures ? 1 : 0;
}

/* Write `text` to the file `p` (a test fixture); exit 2 if it cannot. */
static inline void write_text(const char *p, const char *text) {
    FILE *f = fopen(p, "w");
    if (!f) { perror(p); exit(2); }
    fputs(text, f);
    fclose(f);
}

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        checks++;                                                                             \
        if (!(cond)) {                                                                        \
            failures++;                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

#endif
