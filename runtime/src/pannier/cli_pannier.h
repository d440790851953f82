/* cli_pannier.h: `flashrt pannier-replay` (cli_pannier.c). */
#ifndef FLASHRT_CLI_PANNIER_H
#define FLASHRT_CLI_PANNIER_H

/* argv holds the options after the command. */
int cli_pannier_replay(int argc, char **argv);

#endif
