/* cli_partition.h: `flashrt partition-replay` (cli_partition.c). */
#ifndef FLASHRT_CLI_PARTITION_H
#define FLASHRT_CLI_PARTITION_H

/* argv holds the options after the command. */
int cli_partition_replay(int argc, char **argv);

#endif
