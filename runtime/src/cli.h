/* cli.h: what the flashrt command line's files share (main.c, cli_replay.c, cli_util.c). */
#ifndef FLASHRT_CLI_H
#define FLASHRT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* `return ERR("...", ...)`: prints "flashrt: error: ..." and returns exit code 1. */
#define ERR(...) (fprintf(stderr, "flashrt: error: " __VA_ARGS__), fputc('\n', stderr), 1)

/* 1 if any argument is --help or -h. */
int cli_want_help(int argc, char **argv);
/* A byte count with an optional unit: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers
 * of 1024), case-insensitive (README "Sizes", flashml's parse_capacity table). */
int cli_parse_bytes(const char *s, uint64_t *out);
/* A finite double / a non-negative decimal integer, the whole string; -1 if not. */
int cli_parse_double(const char *s, double *out);
int cli_parse_uint(const char *s, uint64_t *out);
/* The `len` characters at s as a non-negative decimal integer (a CSV field); -1 if not. */
int cli_parse_u64n(const char *s, size_t len, uint64_t *out);
/* Read the CSV file `path` whose first line must be `header`: row(ctx, line, lineno) for every
 * other non-empty line (end-of-line characters removed; the line may be modified). Stops at the
 * first non-zero return of row and returns it; errors (cannot open, wrong header, read error,
 * empty file) are printed as ERR does and return 1. */
int cli_read_csv(const char *path, const char *header,
                 int (*row)(void *ctx, char *line, unsigned long long lineno), void *ctx);
/* Option `name` at argv[*i]: "--name VALUE" (advances *i; "" when VALUE is missing) or
 * "--name=VALUE"; NULL when argv[*i] is another option. */
const char *cli_optval(int argc, char **argv, int *i, const char *name);

/* Members of a JSON object on one line: `first` says whether a comma goes before. Non-finite
 * numbers print as null. */
void cli_json_num(FILE *f, const char *k, double v, int *first);
/* The shortest %g text of v that reads back as v (15 to 17 digits): 366.475, not
 * 366.47500000000002. buf holds at least 32 bytes. */
const char *cli_num(char buf[32], double v);
void cli_json_int(FILE *f, const char *k, uint64_t v, int *first);
void cli_json_str(FILE *f, const char *k, const char *v, int *first);

/* One figure of a command's output: an integer (is_int, u) or a number (d). */
struct cli_figure {
    const char *k;
    int is_int;
    double d;
    uint64_t u;
};
/* A command's figures on stdout: one JSON object (the figures, then the string members
 * strs[2i] = key, strs[2i+1] = value, i < nstr; a NULL value is left out), or a table (the
 * first `ntable` string members, then the figures). */
void cli_print_figures(const struct cli_figure *fig, size_t n, const char *const *strs,
                       size_t nstr, size_t ntable, int as_json);
/* The same, then more(ctx, as_json, &first) adds members of its own (JSON: after the string
 * members, before the closing brace; a table: its lines at the end). */
void cli_print_figures_more(const struct cli_figure *fig, size_t n, const char *const *strs,
                            size_t nstr, size_t ntable, int as_json,
                            void (*more)(void *ctx, int as_json, int *first), void *ctx);

/* `flashrt replay` (cli_replay.c); argv holds the options after the command. */
int cli_replay(int argc, char **argv);

#endif
