/* cli_readahead.h: `flashrt tune-readahead` (cli_readahead.c). */
#ifndef FLASHRT_CLI_READAHEAD_H
#define FLASHRT_CLI_READAHEAD_H

/* argv holds the options after the command. */
int cli_tune_readahead(int argc, char **argv);

#endif
