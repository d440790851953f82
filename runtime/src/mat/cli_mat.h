/* cli_mat.h: `flashrt mat-replay` (cli_mat.c). */
#ifndef FLASHRT_CLI_MAT_H
#define FLASHRT_CLI_MAT_H

/* argv holds the options after the command. */
int cli_mat_replay(int argc, char **argv);

#endif
