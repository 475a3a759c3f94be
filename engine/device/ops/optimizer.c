/* engine/device/ops/optimizer.c - the optimizer ops' checked wrappers: AdamW on one tensor and on
 * many in one call (and fused with the bf16 publish and the gradient zeroing); momentum SGD / LARS, LAMB's two phases and the layer-wise trust ratio on many.
 *
 * Contracts in engine/device/ops_list.h. adamw_multi is an optional slot: where the backend lacks
 * it (the CPU), the wrapper runs adamw piece by piece with each piece's weight decay;
 * adamw_fused_multi too: without it (the cost device's 2026-11-27 op set) the wrapper runs
 * adamw_multi, convert and fill. The CPU loop
 * is optimizer_cpu.c; the CUDA kernels cuda/optimizer/adamw.cu. */
#include <stdio.h>

#include "engine/device/ops_internal.h"

/* ---- optimizer ---- */

/* tri_op_adamw's argument checks; op names the op (and piece) in the messages. */
static int adamw_check(const char *op, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                       const tri_adamw_hparams *hp)
{
    int64_t n = tri_tensor_numel(param);
    int rc = tri_need(op, "param", param, TRI_F32);
    if (!rc) rc = tri_need(op, "grad", grad, TRI_F32);
    if (!rc) rc = tri_need(op, "m", m, TRI_F32);
    if (!rc) rc = tri_need(op, "v", v, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "grad", grad, n);
    if (!rc) rc = tri_need_numel(op, "m", m, n);
    if (!rc) rc = tri_need_numel(op, "v", v, n);
    if (!rc && hp->step < 1)
        rc = TRI_ERR(TRI_EINVAL, "%s: step must be >= 1 (got %lld)", op, (long long)hp->step);
    if (!rc && hp->freeze_step < 0)
        rc = TRI_ERR(TRI_EINVAL, "%s: freeze_step must be >= 0 (0: v never frozen; got %lld)", op,
                     (long long)hp->freeze_step);
    return rc;
}

int tri_op_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                 const tri_adamw_hparams *hp)
{
    int rc = adamw_check("adamw", param, grad, m, v, hp);
    return rc ? rc : TRI_DISPATCH(d, adamw, param, grad, m, v, hp);
}

int tri_op_adamw_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp)
{
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++) {
        char op[48];
        snprintf(op, sizeof op, "adamw_multi piece %d", k);
        const tri_adamw_piece *p = &pieces[k];
        rc = adamw_check(op, p->param, p->grad, p->m, p->v, hp);
    }
    if (rc || n <= 0)
        return rc;
    if (!d->ops->adamw_multi) {
        for (int k = 0; k < n && !rc; k++) {
            tri_adamw_hparams h = *hp;
            h.weight_decay = pieces[k].weight_decay;
            rc = TRI_DISPATCH(d, adamw, pieces[k].param, pieces[k].grad, pieces[k].m, pieces[k].v, &h);
        }
        return rc;
    }
    return TRI_DISPATCH(d, adamw_multi, pieces, n, hp);
}

int tri_op_adamw_fused_multi(tri_device *d, const tri_adamw_piece *pieces, const tri_tensor *models, int n,
                             const tri_adamw_hparams *hp)
{
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++) {
        char op[48];
        snprintf(op, sizeof op, "adamw_fused_multi piece %d", k);
        const tri_adamw_piece *p = &pieces[k];
        rc = adamw_check(op, p->param, p->grad, p->m, p->v, hp);
        if (!rc && models) rc = tri_need(op, "model", models[k], TRI_BF16);
        if (!rc && models) rc = tri_need_numel(op, "model", models[k], tri_tensor_numel(p->param));
    }
    if (rc || n <= 0)
        return rc;
    if (!d->ops->adamw_fused_multi) { /* the three ops that define it */
        rc = tri_op_adamw_multi(d, pieces, n, hp);
        for (int k = 0; k < n && !rc; k++) {
            if (models) rc = tri_op_convert(d, models[k], pieces[k].param);
            if (!rc) rc = tri_op_fill(d, pieces[k].grad, 0.0f);
        }
        return rc;
    }
    /* the models are written as bf16 bits by every backend (as convert does): nothing to widen */
    return TRI_DISPATCH(d, adamw_fused_multi, pieces, models, n, hp);
}

bool tri_device_has_adamw_fused(const tri_device *d)
{
    return d->ops->adamw_fused_multi != NULL;
}

/* A momentum or LAMB-update piece's checks: fp32 param and grad (and buf when with_buf) of equal
 * numel, a ratio index inside ratios. */
static int sgd_piece_check(const char *name, int k, const tri_sgd_piece *p, tri_tensor ratios, bool with_buf)
{
    char op[48];
    snprintf(op, sizeof op, "%s piece %d", name, k);
    int64_t n = tri_tensor_numel(p->param);
    int rc = tri_need(op, "param", p->param, TRI_F32);
    if (!rc) rc = tri_need(op, "grad", p->grad, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "grad", p->grad, n);
    if (!rc && with_buf) rc = tri_need(op, "buf", p->buf, TRI_F32);
    if (!rc && with_buf) rc = tri_need_numel(op, "buf", p->buf, n);
    if (!rc && p->ratio >= 0 && (!tri_tensor_present(ratios) || p->ratio >= tri_tensor_numel(ratios)))
        rc = TRI_ERR(TRI_EINVAL, "%s: ratio index %lld outside ratios of %lld elements", op, (long long)p->ratio,
                     (long long)(tri_tensor_present(ratios) ? tri_tensor_numel(ratios) : 0));
    return rc;
}

static int ratios_check(const char *op, tri_tensor ratios)
{
    return tri_tensor_present(ratios) ? tri_need(op, "ratios", ratios, TRI_F32) : TRI_OK;
}

int tri_op_sgd_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, const tri_sgd_hparams *hp)
{
    int rc = ratios_check("sgd_multi", ratios);
    for (int k = 0; k < n && !rc; k++)
        rc = sgd_piece_check("sgd_multi", k, &pieces[k], ratios, true);
    if (rc || n <= 0)
        return rc;
    return TRI_DISPATCH(d, sgd_multi, pieces, n, ratios, hp);
}

int tri_op_lamb_direction_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp)
{
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++) {
        char op[48];
        snprintf(op, sizeof op, "lamb_direction_multi piece %d", k);
        rc = adamw_check(op, pieces[k].param, pieces[k].grad, pieces[k].m, pieces[k].v, hp);
    }
    if (rc || n <= 0)
        return rc;
    return TRI_DISPATCH(d, lamb_direction_multi, pieces, n, hp);
}

int tri_op_lamb_update_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, float lr)
{
    int rc = ratios_check("lamb_update_multi", ratios);
    for (int k = 0; k < n && !rc; k++)
        rc = sgd_piece_check("lamb_update_multi", k, &pieces[k], ratios, false);
    if (rc || n <= 0)
        return rc;
    return TRI_DISPATCH(d, lamb_update_multi, pieces, n, ratios, lr);
}

int tri_op_trust_ratio(tri_device *d, tri_tensor ratios, tri_tensor sums, int64_t span, const tri_trust_hparams *hp)
{
    int rc = tri_need("trust_ratio", "ratios", ratios, TRI_F32);
    if (!rc) rc = tri_need("trust_ratio", "sums", sums, TRI_F32);
    if (!rc && span < 1)
        rc = TRI_ERR(TRI_EINVAL, "trust_ratio: span %lld (partial sums per tensor) must be >= 1", (long long)span);
    if (!rc) rc = tri_need_numel("trust_ratio", "sums", sums, 2 * span * tri_tensor_numel(ratios));
    if (!rc && hp->kind != TRI_TRUST_LARS && hp->kind != TRI_TRUST_LAMB)
        rc = TRI_ERR(TRI_EINVAL, "trust_ratio: kind %d (expected LARS 0 or LAMB 1)", (int)hp->kind);
    return rc ? rc : TRI_DISPATCH(d, trust_ratio, ratios, sums, span, hp);
}
