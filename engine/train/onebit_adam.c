/* engine/train/onebit_adam.c - 1-bit Adam's compression stage: the refusals and the momentum
 * exchange (see onebit_adam.h; Tang et al. 2021, Algorithm 1). */
#include "engine/train/onebit_adam.h"

#include "engine/core/status.h"
#include "engine/train/dp_compress.h"

int tri_onebit_adam_check(const tri_adamw_config *a, const tri_compression *c, int zero_stage,
                          int64_t local_sgd_steps, bool deterministic, int cp)
{
    if (!a->onebit_adam)
        return TRI_OK;
    if (a->kind != TRI_OPT_ADAM)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --optimizer %s: 1-bit Adam's compression stage is AdamW's "
                       "(use --optimizer adam)", tri_optimizer_name(a->kind));
    if (a->freeze_step <= 0)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --adam-freeze-step %lld: the compression stage starts when "
                       "Adam's variance is frozen (give --adam-freeze-step N > 0, Tang et al.: 15-25%% of training)",
                       (long long)a->freeze_step);
    if (c->kind == TRI_COMPRESS_NONE)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --grad-compression none: the compression stage all-reduces "
                       "the momentum compressed (give 1bit, qsgd, topk or powersgd)");
    int64_t start = tri_compression_start_iter(c);
    if (start != a->freeze_step)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --%s %lld and --adam-freeze-step %lld: the full-precision "
                       "warm-up ends at the freeze (give the same N, or leave the start unset)",
                       c->kind == TRI_COMPRESS_POWERSGD ? "powersgd-start-iter" : "grad-compression-start-iter",
                       (long long)start, (long long)a->freeze_step);
    if (zero_stage != 0)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --zero-stage %d: every worker updates the whole momentum "
                       "with its own gradient before the exchange, which a sharded optimizer state does not keep "
                       "(use --zero-stage 0)", zero_stage);
    if (local_sgd_steps > 0)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --local-sgd-steps %lld: both own the data-parallel "
                       "exchange (train without one of the two)", (long long)local_sgd_steps);
    if (deterministic)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --deterministic-mode: the momentum exchange runs on fp32 "
                       "buffers, not the exact fixed-point sums (not built; train without one of the two)");
    if (cp > 1)
        return TRI_ERR(TRI_EINVAL, "--onebit-adam with --context-parallel-size %d: a replica's cp ranks would have "
                       "to sum their gradients before the momentum update (not built)", cp);
    return TRI_OK;
}

int tri_onebit_adam_exchange(tri_device *d, const tri_optimizer *o, tri_zero *z, float grad_scale)
{
    if (!tri_optimizer_onebit_stage(o, z))
        return TRI_ERR(TRI_EINVAL, "onebit_adam: the exchange runs only in the compression stage (--onebit-adam, "
                       "after --adam-freeze-step %lld updates; %lld done)", (long long)o->cfg.freeze_step,
                       (long long)o->step);
    float a = o->cfg.beta1 / (float)z->dp->size, c = (1.0f - o->cfg.beta1) * grad_scale;
    int rc = TRI_OK;
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t start, len, local;
        tri_zero_owned(z, k, &start, &len, &local);
        tri_tensor g = tri_zero_owned_grads(z, start, len); /* (len) f32: this worker's gradient / D */
        rc = tri_op_scale(d, g, c);
        if (!rc) rc = tri_op_axpy(d, g, a, tri_tensor_range(o->m, local, len));
    }
    for (int unit = 0; unit < z->L->n_units && !rc; unit++)
        rc = tri_dp_compress_unit(&z->comp, d, z->dp, z->grads, unit, z->iteration);
    return rc;
}
