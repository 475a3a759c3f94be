/* engine/train/optimizer.c - AdamW over a flat-buffer range, gradient norm, LR schedule (see optimizer.h). */
#include "engine/train/optimizer.h"

#include <math.h>
#include <stdlib.h>

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
    /* every owned piece of every parameter in one call (a few launches on a GPU) */
    int cap = tri_zero_n_owned(z) * L->n, n_pieces = 0;
    tri_adamw_piece *pieces = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *pieces);
    if (!pieces)
        return TRI_ERR(TRI_ENOMEM, "optimizer: out of memory for %d AdamW pieces", cap);
    for (int k = 0; k < tri_zero_n_owned(z); k++)
        for (int i = 0; i < L->n; i++) {
            const tri_param *p = &L->params[i];
            int64_t s, n, at;
            if (!tri_zero_owned_piece(z, k, p, &s, &n, &at))
                continue;
            pieces[n_pieces++] = (tri_adamw_piece){
                .param = tri_zero_owned_params(z, s, n), .grad = tri_zero_owned_grads(z, s, n),
                .m = tri_tensor_range(o->m, at, n), .v = tri_tensor_range(o->v, at, n),
                .weight_decay = p->spec.weight_decay ? o->cfg.weight_decay : 0.0f};
        }
    hp.weight_decay = 0.0f; /* each piece carries its own */
    int rc = tri_op_adamw_multi(d, pieces, n_pieces, &hp);
    free(pieces);
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
