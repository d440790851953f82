/* check.h: the C tests' assertion macro and helpers (one definition for every test_*.c).
 * CHECK(cond, fmt, ...) counts a check, and on failure counts it, prints where and why, and
 * goes on; each test program ends by reporting `failures` of `checks`. */
#ifndef FLASHRT_TESTS_CHECK_H
#define FLASHRT_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int failures, checks;

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
