/* engine/train/optimizer.c - AdamW, SGD, LARS and LAMB over the owned flat-buffer ranges, LR schedule (see optimizer.h). */
#include "engine/train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

static const char *const kind_names[] = {"adam", "sgd", "lars", "lamb"};

const char *tri_optimizer_name(tri_optimizer_kind k)
{
    return k >= TRI_OPT_ADAM && k <= TRI_OPT_LAMB ? kind_names[k] : "?";
}

int tri_optimizer_parse(const char *name, tri_optimizer_kind *k)
{
    for (int i = 0; i <= TRI_OPT_LAMB; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *k = (tri_optimizer_kind)i;
            return TRI_OK;
        }
    return TRI_ERR(TRI_EINVAL, "--optimizer %s: unknown optimizer (expected adam, sgd, lars or lamb)", name);
}

bool tri_optimizer_has_moments(tri_optimizer_kind k)
{
    return k == TRI_OPT_ADAM || k == TRI_OPT_LAMB;
}

bool tri_optimizer_has_trust_ratio(tri_optimizer_kind k)
{
    return k == TRI_OPT_LARS || k == TRI_OPT_LAMB;
}

int tri_optimizer_take(tri_optimizer *o, tri_arena *a, const tri_adamw_config *cfg, int64_t owned)
{
    o->cfg = *cfg;
    o->step = 0;
    o->v = tri_tensor_none();
    int64_t n = owned > 0 ? owned : 1;
    int rc = tri_arena_take(a, TRI_MEM_OPTIMIZER, &o->m, TRI_F32, 1, (int64_t[]){n});
    if (!rc && tri_optimizer_has_moments(cfg->kind))
        rc = tri_arena_take(a, TRI_MEM_OPTIMIZER, &o->v, TRI_F32, 1, (int64_t[]){n});
    if (!rc) rc = tri_arena_take(a, TRI_MEM_WORKSPACE, &o->scalar, TRI_F32, 1, (int64_t[]){1});
    return rc;
}

int tri_optimizer_reset(tri_device *d, tri_optimizer *o)
{
    int rc = tri_op_fill(d, o->m, 0.0f);
    if (!rc && tri_tensor_present(o->v)) rc = tri_op_fill(d, o->v, 0.0f);
    o->step = 0;
    return rc;
}

/* The owned pieces of every parameter, as AdamW pieces (param, grad, m, v, decay); *n of them,
 * malloc'd. With `models`, also *models: each piece's bf16 parameters the model reads (malloc'd). */
static int adamw_pieces(const tri_optimizer *o, const tri_zero *z, tri_adamw_piece **out, tri_tensor **models,
                        int *n_out)
{
    const tri_param_layout *L = z->L;
    int cap = tri_zero_n_owned(z) * L->n, n = 0;
    size_t slots = (size_t)(cap > 0 ? cap : 1);
    tri_adamw_piece *pieces = malloc(slots * sizeof *pieces);
    tri_tensor *model = models ? malloc(slots * sizeof *model) : NULL;
    if (!pieces || (models && !model)) {
        free(pieces);
        free(model);
        return TRI_ERR(TRI_ENOMEM, "optimizer: out of memory for %d pieces", cap);
    }
    for (int k = 0; k < tri_zero_n_owned(z); k++)
        for (int i = 0; i < L->n; i++) {
            const tri_param *p = &L->params[i];
            int64_t s, len, at;
            if (!tri_zero_owned_piece(z, k, p, &s, &len, &at))
                continue;
            pieces[n++] = (tri_adamw_piece){
                .param = tri_zero_owned_params(z, s, len), .grad = tri_zero_owned_grads(z, s, len),
                .m = tri_tensor_range(o->m, at, len),
                .v = tri_tensor_present(o->v) ? tri_tensor_range(o->v, at, len) : tri_tensor_none(),
                .weight_decay = p->spec.weight_decay ? o->cfg.weight_decay : 0.0f};
            if (model)
                model[n - 1] = tri_zero_owned_model(z, s, len);
        }
    *out = pieces;
    if (models)
        *models = model;
    *n_out = n;
    return TRI_OK;
}

/* The same pieces as momentum / LAMB-update pieces: the buffer is m, the trust ratio the parameter's
 * global index for LARS and LAMB on decayed parameters (-1: ratio 1). */
static int sgd_pieces(const tri_optimizer *o, const tri_zero *z, tri_sgd_piece **out, int *n_out)
{
    const tri_param_layout *L = z->L;
    int cap = tri_zero_n_owned(z) * L->n, n = 0;
    tri_sgd_piece *pieces = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *pieces);
    if (!pieces)
        return TRI_ERR(TRI_ENOMEM, "optimizer: out of memory for %d pieces", cap);
    bool trust = tri_optimizer_has_trust_ratio(o->cfg.kind);
    for (int k = 0; k < tri_zero_n_owned(z); k++)
        for (int i = 0; i < L->n; i++) {
            const tri_param *p = &L->params[i];
            int64_t s, len, at;
            if (!tri_zero_owned_piece(z, k, p, &s, &len, &at))
                continue;
            pieces[n++] = (tri_sgd_piece){
                .param = tri_zero_owned_params(z, s, len), .grad = tri_zero_owned_grads(z, s, len),
                .buf = tri_tensor_range(o->m, at, len),
                .weight_decay = p->spec.weight_decay ? o->cfg.weight_decay : 0.0f,
                .ratio = trust && p->spec.weight_decay ? p->spec.global_index : -1};
        }
    *out = pieces;
    *n_out = n;
    return TRI_OK;
}

static tri_adamw_hparams adam_hparams(const tri_optimizer *o, float lr, float grad_scale)
{
    return (tri_adamw_hparams){.lr = lr, .beta1 = o->cfg.beta1, .beta2 = o->cfg.beta2, .eps = o->cfg.eps,
                               .weight_decay = 0.0f /* each piece carries its own */,
                               .grad_scale = grad_scale, .step = o->step + 1,
                               .freeze_step = o->cfg.kind == TRI_OPT_ADAM ? o->cfg.freeze_step : 0};
}

bool tri_optimizer_onebit_stage(const tri_optimizer *o, const tri_zero *z)
{
    return o->cfg.kind == TRI_OPT_ADAM && o->cfg.onebit_adam && o->cfg.freeze_step > 0 &&
           o->step >= o->cfg.freeze_step && z->comp.on;
}

/* AdamW's settings for the update on z: in 1-bit Adam's compression stage the gradient buffer holds
 * the averaged momentum, taken as m by beta1 0 (m = 0 m + 1 g = g exactly for a finite m; bc1 =
 * 1 - 0^t = 1: Algorithm 1 of Tang et al. has no first-moment bias correction, and at beta1 0.9
 * 1 - beta1^t rounds to 1 in fp32 from t = 166 on anyway). */
static tri_adamw_hparams step_hparams(const tri_optimizer *o, const tri_zero *z, float lr, float grad_scale)
{
    tri_adamw_hparams hp = adam_hparams(o, lr, grad_scale);
    if (tri_optimizer_onebit_stage(o, z))
        hp.beta1 = 0.0f;
    return hp;
}

int tri_optimizer_lamb_direction(tri_device *d, tri_optimizer *o, const tri_zero *z, float grad_scale)
{
    tri_adamw_piece *pieces = NULL;
    int n = 0;
    tri_adamw_hparams hp = adam_hparams(o, 0.0f, grad_scale);
    int rc = adamw_pieces(o, z, &pieces, NULL, &n);
    if (!rc) rc = tri_op_lamb_direction_multi(d, pieces, n, &hp);
    free(pieces);
    return rc;
}

/* AdamW with the bf16 publish and the gradient zeroing in its own pass (tri_op_adamw_fused_multi):
 * each piece's model view is the owned bf16 parameters it updates. Valid only where the gradients
 * the update reads are all the next step's fill would clear (tri_zero_update_zeroes_grads): then the
 * fill is skipped (z->grads_zeroed). tri_zero_publish_owned's convert per owned range is replaced by
 * the pieces' rounding: the ranges' padding, which no piece covers, holds zeros in both copies. */
static int adamw_fused(tri_device *d, tri_optimizer *o, tri_zero *z, float lr, float grad_scale)
{
    tri_adamw_piece *pieces = NULL;
    tri_tensor *models = NULL;
    tri_adamw_hparams hp = step_hparams(o, z, lr, grad_scale);
    int n = 0, rc = adamw_pieces(o, z, &pieces, z->bf16 ? &models : NULL, &n);
    if (!rc) rc = tri_op_adamw_fused_multi(d, pieces, models, n, &hp);
    free(pieces);
    free(models);
    if (!rc) z->grads_zeroed = true;
    return rc;
}

int tri_optimizer_step(tri_device *d, tri_optimizer *o, tri_zero *z, float lr, float grad_scale,
                       tri_tensor ratios)
{
    int rc, n = 0;
    /* AdamW: one pass for the update, the bf16 publish and the next step's gradient zeroing where
     * the layout allows it. Elsewhere (stage 1 at dp > 1, a compressed dp reduction: see
     * tri_zero_update_zeroes_grads), with unfused_update, on a device without the fused op (whose
     * stand-in would convert and fill piece by piece, more launches than the passes below), and for
     * SGD, LARS and LAMB (whose updates keep their own passes) the update, the publish and the next
     * step's fill stay separate. */
    if (o->cfg.kind == TRI_OPT_ADAM && !o->cfg.unfused_update && tri_device_has_adamw_fused(d) &&
        tri_zero_update_zeroes_grads(z)) {
        rc = adamw_fused(d, o, z, lr, grad_scale);
        if (!rc)
            o->step++;
        return rc;
    }
    /* every owned piece of every parameter in one call (a few launches on a GPU) */
    if (o->cfg.kind == TRI_OPT_ADAM) {
        tri_adamw_piece *pieces = NULL;
        tri_adamw_hparams hp = step_hparams(o, z, lr, grad_scale);
        rc = adamw_pieces(o, z, &pieces, NULL, &n);
        if (!rc) rc = tri_op_adamw_multi(d, pieces, n, &hp);
        free(pieces);
    } else {
        tri_sgd_piece *pieces = NULL;
        tri_sgd_hparams hp = {.lr = lr, .momentum = o->cfg.momentum, .grad_scale = grad_scale,
                              .nesterov = o->cfg.nesterov, .lars = o->cfg.kind == TRI_OPT_LARS};
        rc = sgd_pieces(o, z, &pieces, &n);
        if (!rc && o->cfg.kind == TRI_OPT_LAMB)
            rc = tri_op_lamb_update_multi(d, pieces, n, ratios, lr); /* grad holds r, already scaled */
        else if (!rc)
            rc = tri_op_sgd_multi(d, pieces, n, ratios, &hp);
        free(pieces);
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
