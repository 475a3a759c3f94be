/* tools/cli/local_sgd_flags.h - engine_train's flags of local SGD / DiLoCo (engine/train/local_sgd.h;
 * Lin et al. 2020, Douillard et al. 2023): --local-sgd-steps H, --outer-optimizer average|nesterov,
 * --outer-lr, --outer-momentum, --local-sgd-warmup-iters and --reset-outer-state. --local-sgd-steps,
 * which sets how often the data-parallel group synchronises, is the partitioner's too: one flag, one
 * default (1: synchronous data parallelism), one bound. */
#ifndef TRIDENT_TOOLS_CLI_LOCAL_SGD_FLAGS_H
#define TRIDENT_TOOLS_CLI_LOCAL_SGD_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/train/local_sgd.h"
#include "tools/cli/flags.h"

typedef struct tri_cli_local_sgd {
    int steps;                   /* --local-sgd-steps H; 1: synchronous data parallelism */
    const char *outer_optimizer; /* NULL: not given (average when H > 1) */
    float outer_lr;              /* NAN: the outer optimizer's default */
    float outer_momentum;
    int64_t warmup_iters;        /* --local-sgd-warmup-iters */
    bool reset_outer_state;
} tri_cli_local_sgd;

/* H 1 (off), no outer optimizer given, the outer optimizer's default lr, DiLoCo's momentum 0.9. */
void tri_cli_local_sgd_defaults(tri_cli_local_sgd *f);
/* Appends --local-sgd-steps, which the partitioner takes too, to table t at n; returns the new count. */
int tri_cli_local_sgd_steps_flag(tri_cli_local_sgd *f, tri_flag *t, int n);
/* Appends all of engine_train's local SGD flags to table t at n; returns the new count. */
int tri_cli_local_sgd_flags(tri_cli_local_sgd *f, tri_flag *t, int n);
/* TRI_EINVAL naming --local-sgd-steps unless H >= 1. */
int tri_cli_local_sgd_steps_check(int steps);
/* The local SGD the flags ask for into out (steps 0: off, synchronous data parallelism; then the
 * outer flags --outer-lr and --local-sgd-warmup-iters are refused, as they need local SGD), checked
 * against the ZeRO stage (tri_local_sgd_check). train_iters: the final iteration, which always
 * synchronises. TRI_EINVAL naming the flag and value. */
int tri_cli_local_sgd_resolve(const tri_cli_local_sgd *f, int64_t train_iters, int zero_stage,
                              tri_local_sgd_config *out);

#endif
