/* tools/cli/validate.h - engine_train's input checks that need no communication.
 *
 * Every rank runs them on the same config and flags before the first collective, so every rank
 * reaches the same verdict and a bad input never leaves a rank waiting in a collective. They add
 * to the checks of the flag parser (tools/cli/flags.h), the config parser (models/config.h), the
 * model and layout checks (tri_model_rank_check) and the data loaders: sizes multiplied with overflow
 * checks (engine/core/checked.h), the planned memory of every pipeline stage against a budget, and the
 * paths the run will read or write. Messages name the flag or key, the values and what was expected. */
#ifndef TRIDENT_TOOLS_CLI_VALIDATE_H
#define TRIDENT_TOOLS_CLI_VALIDATE_H

#include <stdint.h>

#include "models/model.h"
#include "models/session.h"

/* The products a run computes from its sizes fit in 64 bits: tokens per global batch
 * (global_batch x seq_length), samples over the run (global_batch x train_iters) and the model's
 * parameter bytes (fp32, with gradients and two AdamW moments). TRI_EINVAL naming the factors. */
int tri_cli_check_sizes(const tri_model *m, const char *config_path, int64_t global_batch,
                        int64_t seq_length, int64_t train_iters);

/* The engine's planned bytes on every pipeline stage (tri_model_rank_plan, TP and DP rank 0) are at
 * most budget_gb GiB per rank; budget_gb 0 means the machine's physical memory. TRI_EINVAL naming
 * the stage, its planned GiB, the budget and the layout. */
int tri_cli_check_memory(const tri_model *m, const tri_model_run *o, double budget_gb);

/* A directory the run will create and write (e.g. --save-dir): either an existing writable
 * directory, or a path whose nearest existing ancestor is a writable directory. TRI_EINVAL/TRI_EIO
 * naming the flag and the path. Creates nothing. */
int tri_cli_check_output_dir(const char *flag, const char *dir);

/* A path the run will read (e.g. --load): it exists. TRI_EIO naming the flag and the path. */
int tri_cli_check_input_path(const char *flag, const char *path);

#endif
