/* engine/train/optimizer.c - AdamW over a flat-buffer range, gradient norm, LR schedule (see optimizer.h). */
#include "engine/train/optimizer.h"

#include <math.h>

#include "engine/core/status.h"

int tri_optimizer_take(tri_optimizer *o, tri_arena *a, const tri_adamw_config *cfg, int64_t owned)
{
    o->cfg = *cfg;
    o->step = 0;
    int64_t n = owned > 0 ? owned : 1;
    int rc = tri_arena_take(a, TRI_MEM_OPTIMIZER, &o->m, TRI_F32, 1, (int64_t[]){n});
    if (!rc) rc = tri_arena_take(a, TRI_MEM_OPTIMIZER, &o->v, TRI_F32, 1, (int64_t[]){n});
    if (!rc) rc = tri_arena_take(a, TRI_MEM_WORKSPACE, &o->scalar, TRI_F32, 1, (int64_t[]){1});
    return rc;
}

int tri_optimizer_reset(tri_device *d, tri_optimizer *o)
{
    int rc = tri_op_fill(d, o->m, 0.0f);
    if (!rc) rc = tri_op_fill(d, o->v, 0.0f);
    o->step = 0;
    return rc;
}

int tri_optimizer_step(tri_device *d, tri_optimizer *o, const tri_zero *z, float lr, float grad_scale)
{
    tri_adamw_hparams hp = {
        .lr = lr, .beta1 = o->cfg.beta1, .beta2 = o->cfg.beta2, .eps = o->cfg.eps,
        .grad_scale = grad_scale, .step = o->step + 1,
    };
    const tri_param_layout *L = z->L;
    int rc = TRI_OK;
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++)
        for (int i = 0; i < L->n && !rc; i++) {
            const tri_param *p = &L->params[i];
            int64_t s, n, at;
            if (!tri_zero_owned_piece(z, k, p, &s, &n, &at))
                continue;
            hp.weight_decay = p->spec.weight_decay ? o->cfg.weight_decay : 0.0f;
            rc = tri_op_adamw(d, tri_zero_owned_params(z, s, n), tri_zero_owned_grads(z, s, n),
                              tri_tensor_range(o->m, at, n), tri_tensor_range(o->v, at, n), &hp);
        }
    if (!rc) rc = tri_zero_publish_owned(z); /* bf16: master weights rounded into the model's */
    if (!rc)
        o->step++;
    return rc;
}

float tri_lr_at(const tri_lr_schedule *s, int64_t iter)
{
    if (s->warmup_iters > 0 && iter <= s->warmup_iters)
        return s->lr * (float)iter / (float)s->warmup_iters;
    if (s->style == TRI_LR_CONSTANT)
        return s->lr;
    if (iter >= s->decay_iters)
        return s->min_lr;
    double ratio = (double)(iter - s->warmup_iters) / (double)(s->decay_iters - s->warmup_iters);
    double coeff = s->style == TRI_LR_COSINE ? 0.5 * (cos(3.14159265358979323846 * ratio) + 1.0) : 1.0 - ratio;
    return s->min_lr + (float)(coeff * (s->lr - s->min_lr));
}
