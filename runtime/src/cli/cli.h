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

/* The files a command names (cli_guard.c): every output (CLI_OUT: written whole under a
 * temporary name) and device (CLI_DEV: the flash/cache file written in place, or a block
 * device with allow_block) is compared with every other file by device and inode after
 * links (a missing file by its folder's and its name) and refused when it is one of them;
 * an existing FIFO, socket or character device is refused whatever its role. */
enum { CLI_IN, CLI_OUT, CLI_DEV };
struct cli_guard_file {
    const char *opt;
    char path[4200];
    int role, exists, parent_known, unknown;
    unsigned mode;
    unsigned long long dev, ino;
    const char *base;
};
struct cli_guard {
    const char *cmd;
    int allow_block; /* --allow-block-device */
    struct cli_guard_file f[24];
    int n;
    struct { int fd, created; char path[4200]; } locks[6];
};
void cli_guard_init(struct cli_guard *g, const char *cmd);
/* A NULL or empty path is ignored. */
void cli_guard_add(struct cli_guard *g, const char *opt, const char *path, int role);
void cli_guard_add_suffix(struct cli_guard *g, const char *opt, const char *path, const char *suffix, int role);
/* DIR/manifest.json and DIR/policy.so as inputs (nothing for builtin:NAME). */
void cli_guard_add_bundle(struct cli_guard *g, const char *opt, const char *dir);
/* The checks above: 0, or 1 after printing the refusal naming both options. */
int cli_guard_check(struct cli_guard *g);
/* Locks PATH (created empty when missing and `create`; 2: and kept even when the run fails,
 * for a file others depend on): exclusive, or shared for a file only
 * read; a flock plus a POSIX lock of one byte far past the end that carries the PID. Held
 * elsewhere: prints "PATH: in use by flashrt (pid N)" and returns 1 at once. */
int cli_guard_lock(struct cli_guard *g, const char *opt, const char *path, int exclusive, int create);
/* Test hook (FLASHRT_TEST_HOLD=PATH): waits with the locks held until PATH exists, having
 * created PATH.held (a test waits for it). With FLASHRT_TEST_HOLD_AT=N, replay waits after
 * its Nth access instead, so a test can kill it mid-run: cli_guard_hold_at() is that N (0:
 * none; read once, before the loop), cli_guard_hold_now() the wait. */
int cli_guard_hold(void);
unsigned long long cli_guard_hold_at(void);
int cli_guard_hold_now(void);
/* Drops the locks; `failed`: removes the files the locks created (this run made them). */
void cli_guard_release(struct cli_guard *g, int failed);

/* `flashrt replay` (cli_replay.c); argv holds the options after the command. */
int cli_replay(int argc, char **argv);

#endif
