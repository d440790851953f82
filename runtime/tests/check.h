/* check.h: the C tests' assertion macro (one definition for test_flashrt.c, test_mat.c and test_partition.c).
 * CHECK(cond, fmt, ...) counts a check, and on failure counts it, prints where and why, and
 * goes on; each test program ends by reporting `failures` of `checks`. */
#ifndef FLASHRT_TESTS_CHECK_H
#define FLASHRT_TESTS_CHECK_H

#include <stdio.h>

static int failures, checks;

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
