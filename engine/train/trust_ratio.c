/* engine/train/trust_ratio.c - LARS and LAMB trust ratios from whole-tensor norms (see trust_ratio.h). */
#include "engine/train/trust_ratio.h"

#include <stdlib.h>

#include "engine/core/status.h"
#include "engine/device/ops/optimizer_math.h"

static tri_trust_hparams hparams(const tri_trainer *t, float grad_scale)
{
    const tri_adamw_config *c = &t->opt[0].cfg;
    bool lamb = c->kind == TRI_OPT_LAMB;
    return (tri_trust_hparams){.kind = lamb ? TRI_TRUST_LAMB : TRI_TRUST_LARS, .eta = c->lars_eta,
                               .weight_decay = c->weight_decay, .u_scale = lamb ? 1.0f : grad_scale};
}

/* Calls fn(ctx, chunk, param, q, piece) for q = 0 (the weights) then q = 1 (the gradient or LAMB's
 * direction) over every owned piece of every counted parameter (tri_trainer_norm_holder: an expert's
 * slices on every edp rank, which at tp > 1 spans TP ranks) with a trust ratio, each parameter's
 * pieces consecutive. */
typedef int (*piece_fn)(void *ctx, int c, const tri_param *p, int q, tri_tensor x);

static int each_piece(const tri_trainer *t, piece_fn fn, void *ctx)
{
    int rc = TRI_OK;
    for (int q = 0; q < 2; q++)
        for (int c = 0; c < t->v && !rc; c++) {
            const tri_zero *z = &t->chunks[c]->zero;
            const tri_param_layout *L = &t->chunks[c]->layout;
            for (int i = 0; i < L->n && !rc; i++) {
                const tri_param *p = &L->params[i];
                if (!tri_trainer_norm_holder(t, p) || !p->spec.weight_decay)
                    continue;
                for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
                    int64_t s, n, at;
                    if (tri_zero_owned_piece(z, k, p, &s, &n, &at))
                        rc = fn(ctx, c, p, q, q ? tri_zero_owned_grads(z, s, n) : tri_zero_owned_params(z, s, n));
                }
            }
        }
    return rc;
}

typedef struct {
    const tri_trainer *t;
    tri_tensor *xs;
    int64_t *slots, nslots;
    int n;
} float_pieces;

static int add_float_piece(void *ctx, int c, const tri_param *p, int q, tri_tensor x)
{
    (void)c;
    float_pieces *f = ctx;
    f->xs[f->n] = x;
    f->slots[f->n++] = tri_trainer_norm_slot(f->t, p) + q * f->nslots;
    return TRI_OK;
}

/* Partial sums per (parameter, TP rank, DP rank) slot, one all-reduce, ratios on the device. */
static int ratios_float(tri_trainer *t, float grad_scale)
{
    int cap = 0;
    for (int c = 0; c < t->v; c++)
        cap += 2 * t->chunks[c]->layout.n * tri_zero_n_owned(&t->chunks[c]->zero);
    int64_t n_global = tri_tensor_numel(t->trust_ratios);
    float_pieces f = {.t = t, .nslots = tri_tensor_numel(t->trust_sums) / 2};
    f.xs = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *f.xs);
    f.slots = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *f.slots);
    int rc = f.xs && f.slots ? TRI_OK : TRI_ERR(TRI_ENOMEM, "trainer: out of memory for the trust ratios");
    if (!rc) rc = each_piece(t, add_float_piece, &f);
    if (!rc) rc = tri_op_fill(t->dev, t->trust_sums, 0.0f);
    if (!rc) rc = tri_op_sum_squares_multi(t->dev, t->trust_sums, f.xs, f.slots, f.n);
    free(f.xs);
    free(f.slots);
    if (!rc) rc = tri_comm_all_reduce(tri_trainer_norm_comm(t), t->trust_sums, TRI_REDUCE_SUM);
    tri_trust_hparams hp = hparams(t, grad_scale);
    if (!rc) rc = tri_op_trust_ratio(t->dev, t->trust_ratios, t->trust_sums, f.nslots / n_global, &hp);
    return rc;
}

typedef struct {
    tri_trainer *t;
    int64_t n_global;
} exact_pieces;

static int add_exact_piece(void *ctx, int c, const tri_param *p, int q, tri_tensor x)
{
    exact_pieces *e = ctx;
    tri_tensor limbs = tri_tensor_range(e->t->trust_limbs, ((int64_t)q * e->n_global + p->spec.global_index) * 6, 6);
    return tri_op_fixed_sum_squares(e->t->dev, limbs, x, TRI_FIXED_BITS, e->t->chunks[c]->zero.bad);
}

/* Exact per-tensor sums (deterministic mode): the same bits in every layout. */
static int ratios_exact(tri_trainer *t, float grad_scale)
{
    exact_pieces e = {.t = t, .n_global = tri_tensor_numel(t->trust_ratios)};
    int64_t *limbs = malloc((size_t)(12 * e.n_global) * sizeof *limbs);
    float *ratios = malloc((size_t)e.n_global * sizeof *ratios);
    int rc = limbs && ratios ? TRI_OK : TRI_ERR(TRI_ENOMEM, "trainer: out of memory for the trust ratios");
    if (!rc) rc = tri_op_zero(t->dev, t->trust_limbs);
    if (!rc) rc = each_piece(t, add_exact_piece, &e);
    if (!rc) rc = tri_comm_all_reduce(tri_trainer_norm_comm(t), t->trust_limbs, TRI_REDUCE_SUM);
    if (!rc) rc = tri_device_copy_to_host(t->dev, limbs, t->trust_limbs);
    tri_trust_hparams hp = hparams(t, grad_scale);
    for (int64_t i = 0; i < e.n_global && !rc; i++)
        ratios[i] = tri_trust_ratio(tri_fixed_limbs_value(limbs + 6 * i, 2 * TRI_FIXED_BITS),
                                    tri_fixed_limbs_value(limbs + 6 * (e.n_global + i), 2 * TRI_FIXED_BITS),
                                    (int)hp.kind, hp.eta, hp.weight_decay, hp.u_scale);
    if (!rc) rc = tri_device_copy_from_host(t->dev, t->trust_ratios, ratios);
    free(limbs);
    free(ratios);
    return rc;
}

int tri_trainer_trust_ratios(tri_trainer *t, float grad_scale)
{
    return t->chunks[0]->zero.deterministic ? ratios_exact(t, grad_scale) : ratios_float(t, grad_scale);
}
