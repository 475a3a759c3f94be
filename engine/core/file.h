/* engine/core/file.h - opening input files safely, and where a path really leads.
 *
 * Every reader of outside input (configs, token files, tokenizer files, checkpoints, safetensors,
 * llm.c files) opens it through tri_file_open_read: an O_NONBLOCK open followed by fstat, so a FIFO,
 * a device, a socket or a directory is refused at once by name and kind instead of blocking in
 * open(2) or read(2) (a FIFO without a writer blocks forever in a plain open).
 *
 * The tools that write (ckpt, tokenize, engine_train) ask tri_path_resolve where an output really
 * leads (through every symlink, also for a path that does not exist yet) and tri_path_relation how
 * it relates to each input, so an output that is, contains or lies inside an input is refused before
 * anything is created or truncated (tools/cli/outputs.h). */
#ifndef TRIDENT_ENGINE_CORE_FILE_H
#define TRIDENT_ENGINE_CORE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#define TRI_PATH_MAX 4096

/* "a regular file", "a directory", "a FIFO (named pipe)", "a character device", "a block device",
 * "a socket", "a symbolic link" or "a special file": the kind of a stat mode, for messages. */
const char *tri_file_kind(mode_t mode);

/* Opens path for reading: O_RDONLY | O_NONBLOCK | O_CLOEXEC, then fstat, then blocking mode again.
 * *fd the descriptor (the caller closes it), *size the file's size when size is not NULL.
 * TRI_EIO "cannot open PATH: <strerror>" (e.g. "No such file or directory", "Permission denied"),
 * or TRI_EIO "PATH is a FIFO (named pipe), not a regular file" for anything but a regular file. */
int tri_file_open_read(const char *path, int *fd, size_t *size);

/* The same as a stdio stream ("rb"). */
int tri_file_fopen_read(const char *path, FILE **f);

/* The absolute, canonical path that path leads to, through every symlink: realpath(3) where path
 * exists; otherwise the resolved nearest existing ancestor with the missing components appended, and
 * a dangling symlink followed to where it points (at most 40 links deep, as the kernel). out holds
 * TRI_PATH_MAX bytes. TRI_EINVAL for an empty or too long path, TRI_EIO naming the path and the
 * cause (e.g. a symlink loop). */
int tri_path_resolve(const char *path, char *out);

typedef enum tri_path_rel {
    TRI_PATH_APART = 0,    /* neither contains the other */
    TRI_PATH_SAME,         /* the same path, or the same file through a hard link */
    TRI_PATH_INSIDE,       /* a lies inside directory b */
    TRI_PATH_CONTAINS,     /* a is a directory that contains b */
} tri_path_rel;

/* How resolved paths a and b (tri_path_resolve) relate: by their components, and for two existing
 * files also by device and inode (a hard link is the same file). */
tri_path_rel tri_path_relation(const char *a, const char *b);

#endif
