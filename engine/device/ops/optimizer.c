/* engine/device/ops/optimizer.c - the optimizer ops' checked wrappers: AdamW on one tensor and on
 * many in one call.
 *
 * Contracts in engine/device/ops_list.h. adamw_multi is an optional slot: where the backend lacks
 * it (the CPU), the wrapper runs adamw piece by piece with each piece's weight decay. The CPU loop
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
