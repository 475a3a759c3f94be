/* engine/train/local_sgd_config.c - local SGD's options: the outer optimizer's names, the check of
 * a configuration and which iterations are inner steps or synchronise (see local_sgd.h). Apart from
 * the outer step so that what reads a checkpoint's manifest (checkpoints/manifest.c, and the
 * manifest fuzzer that links it alone) needs no device or comm. */
#include "engine/train/local_sgd.h"

#include <math.h>
#include <string.h>

#include "engine/core/status.h"

const char *tri_outer_kind_name(tri_outer_kind k)
{
    return k == TRI_OUTER_NESTEROV ? "nesterov" : "average";
}

int tri_outer_kind_parse(const char *name, tri_outer_kind *k)
{
    if (name && strcmp(name, "average") == 0)
        *k = TRI_OUTER_AVERAGE;
    else if (name && strcmp(name, "nesterov") == 0)
        *k = TRI_OUTER_NESTEROV;
    else
        return TRI_ERR(TRI_EINVAL, "--outer-optimizer %s: expected average or nesterov", name ? name : "(none)");
    return TRI_OK;
}

int tri_local_sgd_check(const tri_local_sgd_config *c, int zero_stage)
{
    if (c->steps < 0)
        return TRI_ERR(TRI_EINVAL, "--local-sgd-steps %d: expected H >= 1 inner steps per outer synchronisation",
                       c->steps);
    if (c->steps == 0)
        return TRI_OK;
    if (c->outer != TRI_OUTER_AVERAGE && c->outer != TRI_OUTER_NESTEROV)
        return TRI_ERR(TRI_EINVAL, "--outer-optimizer %d: expected average or nesterov", (int)c->outer);
    if (!(c->outer_lr > 0.0f) || !isfinite(c->outer_lr))
        return TRI_ERR(TRI_EINVAL, "--outer-lr %g: expected a finite outer learning rate > 0", (double)c->outer_lr);
    if (c->warmup_iters < 0)
        return TRI_ERR(TRI_EINVAL, "--local-sgd-warmup-iters %lld: expected 0 or more synchronous updates",
                       (long long)c->warmup_iters);
    if (!(c->outer_momentum >= 0.0f && c->outer_momentum < 1.0f))
        return TRI_ERR(TRI_EINVAL, "--outer-momentum %g: expected a momentum in [0, 1)", (double)c->outer_momentum);
    if (zero_stage != 0)
        return TRI_ERR(TRI_EINVAL, "--local-sgd-steps %d with ZeRO stage %d (--zero-stage, --use-distributed-optimizer): inner steps "
                       "run each replica's optimizer on its whole state without data-parallel communication, so the "
                       "optimizer cannot be sharded over dp (use ZeRO stage 0; the outer state is sharded anyway)",
                       c->steps, zero_stage);
    return TRI_OK;
}

bool tri_local_sgd_inner(const tri_local_sgd_config *c, int64_t iter)
{
    return c->steps > 0 && iter > c->warmup_iters;
}

bool tri_local_sgd_syncs_at(const tri_local_sgd_config *c, int64_t iter)
{
    return tri_local_sgd_inner(c, iter) && ((iter - c->warmup_iters) % c->steps == 0 || iter == c->final_iter);
}
