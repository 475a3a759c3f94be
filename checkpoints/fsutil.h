/* checkpoints/fsutil.h - the file-system steps of an atomic checkpoint: durable writes, renames,
 * directory removal, and the checks that keep names read from a checkpoint inside its directory.
 *
 * A step is written into a temporary directory, every file fsynced, the directory renamed into
 * place and its parent fsynced; small pointer files (`latest`) are replaced by write-to-temporary,
 * fsync, rename. A process killed at any moment leaves either the old or the new state. */
#ifndef TRIDENT_CHECKPOINTS_FSUTIL_H
#define TRIDENT_CHECKPOINTS_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Creates directory path and its missing parents. TRI_EIO naming the path. */
int tri_fs_mkdir_p(const char *path);

/* fsync of a file or a directory (so a rename or a new entry in it is durable). TRI_EIO. */
int tri_fs_fsync(const char *path);

/* Writes n bytes to dir/name atomically: dir/name.tmp, fsync, rename, fsync dir. TRI_EIO. */
int tri_fs_write_atomic(const char *dir, const char *name, const void *data, size_t n);

/* Reads a whole file of at most max bytes into a malloc'd, NUL-terminated buffer. TRI_EIO when it
 * cannot be read, TRI_ECORRUPT naming the file when it is larger than max. */
int tri_fs_read_small(const char *path, size_t max, char **data, size_t *n);

/* Removes path and everything under it (no error when it does not exist). TRI_EIO. */
int tri_fs_remove_tree(const char *path);

/* A temporary name beside path, in the same directory so a rename moves it into place:
 * DIR/.BASE.tmp-PID (hidden; the process id keeps two writers apart). Any leftover of that name
 * is removed. TRI_EINVAL when it does not fit in cap; TRI_EIO when the leftover cannot go. */
int tri_fs_temp_beside(const char *path, char *tmp, size_t cap);

/* Moves a complete output, the file or directory tmp (tri_fs_temp_beside), to path and makes the
 * move durable (fsync of path's directory). A file replaces path atomically (rename(2)). A directory
 * is renamed onto an absent path or an empty directory; into an existing directory each of its
 * entries is renamed in turn, `latest` last (so a run's pointer moves only once its step is there),
 * then tmp is removed. TRI_EIO naming both paths and the cause. */
int tri_fs_publish(const char *tmp, const char *path);

/* Whether path exists (any type) / is a directory. */
bool tri_fs_exists(const char *path);
bool tri_fs_is_dir(const char *path);

/* Whether a name read from a checkpoint is a plain file name that stays in its directory: 1 to 128
 * characters of [A-Za-z0-9_.-], not starting with '.'. */
bool tri_fs_safe_name(const char *name);

/* snprintf into out (size cap) of "a/b"; TRI_EINVAL when it does not fit. */
int tri_fs_join(char *out, size_t cap, const char *a, const char *b);

#endif
