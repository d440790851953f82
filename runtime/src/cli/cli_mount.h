/* cli_mount.h: `flashrt mount` (cli_mount.c; the file system: src/fuse/mount_fs.c). */
#ifndef FLASHRT_CLI_MOUNT_H
#define FLASHRT_CLI_MOUNT_H

/* argv holds the arguments after the command. */
int cli_mount(int argc, char **argv);

#endif
