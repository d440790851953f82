/* cli_play.h: `flashrt play` (cli_play.c). */
#ifndef FLASHRT_CLI_PLAY_H
#define FLASHRT_CLI_PLAY_H

/* argv holds the options after the command. */
int cli_play(int argc, char **argv);

#endif
