/* cli_util.c: argument parsing and JSON printing for the flashrt command line (cli.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "util/internal.h"

int cli_want_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

/* The non-negative decimal integer that starts s; *end: what follows it. */
static int parse_leading_uint(const char *s, unsigned long long *v, char **end) {
    errno = 0;
    if (*s == '-') return -1;
    *v = strtoull(s, end, 10);
    return *end == s || errno ? -1 : 0;
}

int cli_parse_bytes(const char *s, uint64_t *out) {
    /* docs/reference/conventions.md "Sizes": the table flashml.simulation's parse_capacity reads (case-insensitive;
     * bare K/M/G/T refused as ambiguous); tests/runtime/test_runtime.py checks both agree. */
    static const struct { const char *unit; uint64_t mult; } UNITS[] = {
        {"", 1}, {"b", 1},
        {"kb", 1000ull}, {"mb", 1000000ull}, {"gb", 1000000000ull}, {"tb", 1000000000000ull},
        {"kib", 1ull << 10}, {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40}};
    char *end;
    unsigned long long v;
    if (parse_leading_uint(s, &v, &end) != 0) return -1;
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++) {
        if (strcasecmp(end, UNITS[i].unit) != 0) continue;
        if (v > UINT64_MAX / UNITS[i].mult) return -1;
        *out = v * UNITS[i].mult;
        return 0;
    }
    return -1;
}

int cli_parse_double(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int cli_parse_uint(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v;
    if (parse_leading_uint(s, &v, &end) != 0 || *end) return -1;
    *out = v;
    return 0;
}

int cli_parse_u64n(const char *s, size_t len, uint64_t *out) {
    if (len == 0 || len > 20) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int cli_read_csv(const char *path, const char *header,
                 int (*row)(void *ctx, char *line, unsigned long long lineno), void *ctx) {
    char err[600];
    FILE *f = frt_fopen_input(path, err, sizeof err);
    if (!f) return ERR("%s", err);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    unsigned long long lineno = 0;
    int rc = 0;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (lineno == 1) {
            if (strcmp(line, header) != 0) {
                rc = ERR("%s:1: expected the header %s, got '%.80s'", path, header, line);
                break;
            }
            continue;
        }
        if (len == 0) continue;
        if ((rc = row(ctx, line, lineno)) != 0) break;
    }
    if (rc == 0 && ferror(f)) rc = ERR("%s: read error: %s", path, strerror(errno));
    if (rc == 0 && lineno == 0) rc = ERR("%s: empty (expected the header %s)", path, header);
    free(line);
    fclose(f);
    return rc;
}

const char *cli_optval(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != 0) return NULL;
    if (*i + 1 >= argc) return "";
    return argv[++*i];
}

const char *cli_num(char buf[32], double v) {
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, 32, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

void cli_json_num(FILE *f, const char *k, double v, int *first) {
    char b[32];
    fprintf(f, "%s\"%s\": ", *first ? "" : ", ", k);
    if (isfinite(v)) fputs(cli_num(b, v), f);
    else fputs("null", f);
    *first = 0;
}

void cli_json_int(FILE *f, const char *k, uint64_t v, int *first) {
    fprintf(f, "%s\"%s\": %llu", *first ? "" : ", ", k, (unsigned long long)v);
    *first = 0;
}

void cli_json_str(FILE *f, const char *k, const char *v, int *first) {
    fprintf(f, "%s\"%s\": \"", *first ? "" : ", ", k);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if ((unsigned char)*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
    *first = 0;
}

void cli_print_figures(const struct cli_figure *fig, size_t n, const char *const *strs,
                       size_t nstr, size_t ntable, int as_json) {
    cli_print_figures_more(fig, n, strs, nstr, ntable, as_json, NULL, NULL);
}

void cli_print_figures_more(const struct cli_figure *fig, size_t n, const char *const *strs,
                            size_t nstr, size_t ntable, int as_json,
                            void (*more)(void *ctx, int as_json, int *first), void *ctx) {
    if (as_json) {
        int first = 1;
        fputc('{', stdout);
        for (size_t i = 0; i < n; i++) {
            if (fig[i].is_int) cli_json_int(stdout, fig[i].k, fig[i].u, &first);
            else cli_json_num(stdout, fig[i].k, fig[i].d, &first);
        }
        for (size_t i = 0; i < nstr; i++)
            if (strs[2 * i + 1]) cli_json_str(stdout, strs[2 * i], strs[2 * i + 1], &first);
        if (more) more(ctx, 1, &first);
        fputs("}\n", stdout);
        return;
    }
    for (size_t i = 0; i < ntable && i < nstr; i++)
        if (strs[2 * i + 1]) printf("%-26s  %s\n", strs[2 * i], strs[2 * i + 1]);
    for (size_t i = 0; i < n; i++) {
        if (fig[i].is_int) printf("%-26s  %llu\n", fig[i].k, (unsigned long long)fig[i].u);
        else printf("%-26s  %.6g\n", fig[i].k, fig[i].d);
    }
    if (more) {
        int first = 1;
        more(ctx, 0, &first);
    }
}
