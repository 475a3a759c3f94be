/* tools/cli/local_sgd_flags.c - the local SGD flags (see local_sgd_flags.h). */
#include "tools/cli/local_sgd_flags.h"

#include <math.h>
#include <string.h>

#include "engine/core/status.h"

void tri_cli_local_sgd_defaults(tri_cli_local_sgd *f)
{
    *f = (tri_cli_local_sgd){.steps = 1, .outer_lr = NAN, .outer_momentum = 0.9f};
}

int tri_cli_local_sgd_steps_flag(tri_cli_local_sgd *f, tri_flag *t, int n)
{
    t[n++] = (tri_flag){"local-sgd-steps", TRI_FLAG_INT, &f->steps,
                        "local SGD / DiLoCo: each data-parallel replica runs H inner steps on its share of every "
                        "global batch with no data-parallel communication (its own gradient norm for clipping, its "
                        "own loss in the log), then one outer synchronisation averages the replicas' parameter "
                        "change (1: synchronous data parallelism, unless --outer-optimizer is given); the "
                        "partitioner charges that synchronisation's bytes and time 1/H a step. Iterations and the "
                        "learning-rate schedule count inner steps; the last iteration always synchronises; an "
                        "--eval-interval between synchronisations reports the mean of the replicas' losses. ZeRO "
                        "stage 0 only (each replica keeps its whole AdamW state, never averaged); composes with tp, "
                        "pp, sequence parallelism, bf16 (fp32 anchor and deltas), recomputation and deterministic "
                        "mode. With --grad-compression the outer synchronisation's reduction of the parameter change "
                        "goes through that compressor, with an error-feedback residual of its own (per replica, "
                        "checkpointed) and, for powersgd, a Q warm-started across outer steps; the "
                        "--local-sgd-warmup-iters synchronous steps compress their gradients as a compressed "
                        "synchronous run does", -1000000, 1 << 30, NULL, false};
    return n;
}

int tri_cli_local_sgd_flags(tri_cli_local_sgd *f, tri_flag *t, int n)
{
    n = tri_cli_local_sgd_steps_flag(f, t, n);
    t[n++] = (tri_flag){"outer-optimizer", TRI_FLAG_CHOICE, &f->outer_optimizer,
                        "local SGD's outer step on the replicas' mean parameter change delta (anchor - parameters): "
                        "average moves the anchor by outer-lr x delta (outer lr 1: parameter averaging, Lin et al. "
                        "2020); nesterov is PyTorch's SGD with Nesterov momentum on delta, as DiLoCo (Douillard et "
                        "al. 2023). Default average; giving it turns local SGD on even at --local-sgd-steps 1",
                        0, 0, "average|nesterov", false};
    t[n++] = (tri_flag){"outer-lr", TRI_FLAG_FLOAT, &f->outer_lr,
                        "outer learning rate, > 0 (default: 1 for average, DiLoCo's 0.7 for nesterov)", -1e9, 1e9,
                        NULL, false};
    t[n++] = (tri_flag){"outer-momentum", TRI_FLAG_FLOAT, &f->outer_momentum,
                        "Nesterov momentum of the outer step, in [0, 1) (DiLoCo's 0.9; nesterov only)", -1e9, 1e9,
                        NULL, false};
    t[n++] = (tri_flag){"local-sgd-warmup-iters", TRI_FLAG_INT64, &f->warmup_iters,
                        "local SGD: the first W iterations are synchronous data parallelism, local steps and the "
                        "anchor start after them (post-local SGD, Lin et al. 2020; DiLoCo starts from a trained "
                        "model)", -1e12, 1e12, NULL, false};
    t[n++] = (tri_flag){"reset-outer-state", TRI_FLAG_BOOL, &f->reset_outer_state,
                        "on resume, start local SGD's outer state afresh (anchor = the loaded weights, momentum "
                        "zero; without local SGD: drop the checkpoint's) instead of refusing a checkpoint saved "
                        "with other --local-sgd-steps / --outer-optimizer", 0, 0, NULL, false};
    return n;
}

int tri_cli_local_sgd_steps_check(int steps)
{
    if (steps < 1)
        return TRI_ERR(TRI_EINVAL, "--local-sgd-steps %d: expected H >= 1 inner steps per outer synchronisation "
                       "(1: synchronous data parallelism)", steps);
    return TRI_OK;
}

int tri_cli_local_sgd_resolve(const tri_cli_local_sgd *f, int64_t train_iters, int zero_stage,
                              tri_local_sgd_config *out)
{
    memset(out, 0, sizeof *out);
    int rc = tri_cli_local_sgd_steps_check(f->steps);
    if (rc)
        return rc;
    if (f->steps == 1 && !f->outer_optimizer) {
        if (!isnan(f->outer_lr) || f->warmup_iters != 0)
            return TRI_ERR(TRI_EINVAL, "--%s needs local SGD (--local-sgd-steps H > 1 or --outer-optimizer)",
                           !isnan(f->outer_lr) ? "outer-lr" : "local-sgd-warmup-iters");
        return TRI_OK; /* --reset-outer-state here drops a checkpoint's local SGD state */
    }
    rc = tri_outer_kind_parse(f->outer_optimizer ? f->outer_optimizer : "average", &out->outer);
    if (rc)
        return rc;
    out->steps = f->steps;
    out->outer_lr = !isnan(f->outer_lr) ? f->outer_lr : out->outer == TRI_OUTER_NESTEROV ? 0.7f : 1.0f;
    out->outer_momentum = f->outer_momentum;
    out->final_iter = train_iters;
    out->warmup_iters = f->warmup_iters;
    return tri_local_sgd_check(out, zero_stage);
}
