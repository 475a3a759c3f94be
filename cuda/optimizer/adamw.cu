/* cuda/optimizer/adamw.cu - the fused AdamW update on the GPU: one pass over param, grad, m and v (and,
 * for tri_op_adamw_fused_multi, the bf16 publish and the gradient zeroing in the same pass) with the
 * simple kernel of cuda/optimizer/adamw.kern.h (engine/device/ops/optimizer_math.h's tri_adamw_element, tested
 * on the CPU against the CPU backend). The bias corrections are computed on the host with powf exactly as the
 * CPU backend computes them, so both backends feed the element update the same constants; past
 * hp->freeze_step v is held and bc2 is the freeze step's (1-bit Adam, Tang et al. 2021 §3). */
#include <math.h>
#include <string.h>

#include "cuda/optimizer/adamw.kern.h"
#include "cuda/launch.cuh"
#include "engine/device/ops/optimizer_math.h"

/* 1 - beta^t, as the CPU backend computes it */
static float bias_correction(float beta, int64_t step)
{
    return 1.0f - powf(beta, (float)step);
}

/* The step's constants every AdamW kernel takes: bc1 = 1 - beta1^t, bc2 = 1 - beta2^t' (t' the step v
 * was last updated at: the freeze step past hp->freeze_step) and whether v updates this step. */
typedef struct adamw_consts {
    float bc1, bc2;
    int update_v;
} adamw_consts;

static adamw_consts step_consts(const tri_adamw_hparams *hp)
{
    const int64_t vstep = tri_adamw_v_step(hp->step, hp->freeze_step);
    return (adamw_consts){bias_correction(hp->beta1, hp->step), bias_correction(hp->beta2, vstep),
                          (int)(vstep == hp->step)};
}

extern "C" int tri_cuda_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m,
                              tri_tensor v, const tri_adamw_hparams *hp)
{
    int64_t n = tri_tensor_numel(param);
    const adamw_consts k = step_consts(hp);
    return TRI_CUDA_LAUNCH_N(adamw_kernel, n, tri_cuda_of(d)->stream, tri_fp(param), tri_fp(grad),
                             tri_fp(m), tri_fp(v), n, hp->lr, hp->beta1, hp->beta2, hp->eps,
                             hp->weight_decay, k.bc1, k.bc2, hp->grad_scale, k.update_v);
}

/* Groups of up to TRI_ADAMW_GROUP pieces, one launch each: GPT-2 124M's 148 parameters in one launch
 * where piece by piece they took 148. The simple switch keeps the single kernel piece by piece. */
extern "C" int tri_cuda_adamw_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp)
{
    tri_cuda *c = tri_cuda_of(d);
    int rc = TRI_OK;
    if (c->simple) {
        for (int k = 0; k < n && !rc; k++) {
            tri_adamw_hparams h = *hp;
            h.weight_decay = pieces[k].weight_decay;
            rc = tri_cuda_adamw(d, pieces[k].param, pieces[k].grad, pieces[k].m, pieces[k].v, &h);
        }
        return rc;
    }
    const adamw_consts kc = step_consts(hp);
    for (int k = 0; k < n && !rc;) {
        tri_adamw_group a;
        memset(&a, 0, sizeof a);
        for (; k < n && a.n < TRI_ADAMW_GROUP; k++, a.n++) {
            const tri_adamw_piece *p = &pieces[k];
            a.p[a.n] = tri_fp(p->param);
            a.g[a.n] = tri_fp(p->grad);
            a.m[a.n] = tri_fp(p->m);
            a.v[a.n] = tri_fp(p->v);
            a.wd[a.n] = p->weight_decay;
            a.first[a.n + 1] = a.first[a.n] + tri_tensor_numel(p->param);
        }
        rc = TRI_CUDA_LAUNCH_N(adamw_multi_kernel, a.first[a.n], c->stream, a, hp->lr, hp->beta1, hp->beta2, hp->eps,
                               kc.bc1, kc.bc2, hp->grad_scale, kc.update_v);
    }
    return rc;
}

/* AdamW, the bf16 publish and the gradient zeroing: one launch per group of TRI_ADAMW_GROUP pieces
 * (GPT-2 124M: one launch where the separate passes took the update's, a convert per unit and the
 * fill). The simple switch runs the twin: the three ops the fused contract is defined by, piece by
 * piece (adamw_kernel, float_to_bf16_kernel, the fill). */
extern "C" int tri_cuda_adamw_fused_multi(tri_device *d, const tri_adamw_piece *pieces, const tri_tensor *models,
                                          int n, const tri_adamw_hparams *hp)
{
    tri_cuda *c = tri_cuda_of(d);
    int rc = TRI_OK;
    if (c->simple) {
        for (int k = 0; k < n && !rc; k++) {
            const tri_adamw_piece *p = &pieces[k];
            tri_adamw_hparams h = *hp;
            h.weight_decay = p->weight_decay;
            rc = tri_cuda_adamw(d, p->param, p->grad, p->m, p->v, &h);
            if (!rc && models) rc = tri_cuda_convert(d, models[k], p->param);
            if (!rc) rc = tri_cuda_fill(d, p->grad, 0.0f);
        }
        return rc;
    }
    const adamw_consts kc = step_consts(hp);
    for (int k = 0; k < n && !rc;) {
        tri_adamw_fused_group a;
        memset(&a, 0, sizeof a);
        for (; k < n && a.n < TRI_ADAMW_GROUP; k++, a.n++) {
            const tri_adamw_piece *p = &pieces[k];
            a.p[a.n] = tri_fp(p->param);
            a.g[a.n] = tri_fp(p->grad);
            a.m[a.n] = tri_fp(p->m);
            a.v[a.n] = tri_fp(p->v);
            a.o[a.n] = models ? (uint16_t *)models[k].data : NULL;
            a.wd[a.n] = p->weight_decay;
            a.first[a.n + 1] = a.first[a.n] + tri_tensor_numel(p->param);
        }
        rc = TRI_CUDA_LAUNCH_N(adamw_fused_multi_kernel, a.first[a.n], c->stream, a, hp->lr, hp->beta1, hp->beta2,
                               hp->eps, kc.bc1, kc.bc2, hp->grad_scale, kc.update_v);
    }
    return rc;
}
