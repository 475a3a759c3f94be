/* tools/cli/outputs.h - the one rule every Trident tool that writes applies before it creates or
 * truncates anything: an output never destroys an input, a run or a model (docs/ckpt-safety.md).
 *
 * The output is resolved through every symlink (engine/core/file.h tri_path_resolve), and so is
 * each input, together with what the symlinks inside an input directory lead to. The output is
 * refused when it is an input (also through a hard link), lies inside one, or contains one; --force
 * never overrides that. A directory output (a run, a model directory) is refused when it already
 * holds a run or a checkpoint step (writing into it would move its `latest` or replace its steps),
 * and when it holds a model unless --force (then the model is replaced only once the new one is
 * complete). A file output may replace an existing regular file (the writers stage it under a
 * temporary name beside it and rename it into place: checkpoints/fsutil.h tri_fs_temp_beside,
 * tri_fs_publish), never a directory or a special file. Messages name the flag or argument, the path,
 * where it resolves to and the input it collides with. */
#ifndef TRIDENT_TOOLS_CLI_OUTPUTS_H
#define TRIDENT_TOOLS_CLI_OUTPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An input a command reads: how the user named it ("SRC", "--input") and its path. */
typedef struct tri_cli_input {
    const char *name;
    const char *path;
} tri_cli_input;

/* The output a command is about to write. */
typedef struct tri_cli_output {
    const char *name;  /* how the user named it: "OUT", "--output-prefix" */
    const char *path;
    bool is_dir;       /* a directory the command fills (a run or a model) rather than one file */
    bool force;        /* --force given: an existing model directory may be replaced */
} tri_cli_output;

/* The rule above for out against inputs in[0..n). TRI_EINVAL naming both paths and what collides;
 * TRI_EIO when a path cannot be resolved. Creates nothing. */
int tri_cli_check_output(const tri_cli_output *out, const tri_cli_input *in, int n);

/* What directory dir holds that a writer must not touch: "a run (latest -> iter_0000002)",
 * "a checkpoint step (manifest.sha256)", "a model (config.json)", or NULL for none of these
 * (absent, empty, or other files only). what holds the text (at least 128 bytes). */
const char *tri_cli_dir_holds(const char *dir, char *what, size_t cap);

/* engine_train's --save-dir against what the run reads and where it starts:
 *   - the data files and the config must not be the save directory, its `latest`, its
 *     metrics.jsonl or inside one of its step directories (saves replace those and --keep-last
 *     prunes them), and the save directory must not lie inside the checkpoint step --load resolves
 *     to (load may be NULL);
 *   - a save directory whose `latest` names a step newer than the one the run starts from (--load's
 *     latest step, or iteration 0 without a checkpoint) is refused: the run would replace its newer
 *     steps as it reaches them (the README's "a checkpoint never overwrites the last good one").
 * TRI_EINVAL naming the flags, paths and iterations. Reads only small files; creates nothing. */
int tri_cli_check_save_dir(const char *save_dir, const char *load, const tri_cli_input *in, int n);

#endif
