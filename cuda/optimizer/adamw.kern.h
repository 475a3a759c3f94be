/* cuda/optimizer/adamw.kern.h - the AdamW update (CUDA and C): tri_adamw_element of
 * engine/device/ops/optimizer_math.h per element, with the bias corrections bc1 = 1 - beta1^t and bc2 = 1 -
 * beta2^t computed once on the host exactly as the CPU backend computes them. */
#ifndef TRIDENT_CUDA_OPTIMIZER_ADAMW_KERN_H
#define TRIDENT_CUDA_OPTIMIZER_ADAMW_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/launch_shapes.h"
#include "engine/device/ops/optimizer_math.h"

/* One AdamW step on p, m, v (n floats each) with gradient grad * grad_scale; update_v 0 holds v
 * (1-bit Adam's frozen variance, bc2 then the freeze step's). */
TRI_KERNEL adamw_kernel(float *p, const float *grad, float *m, float *v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float wd, float bc1, float bc2,
                        float grad_scale, int update_v)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_adamw_element(p + i, grad[i] * grad_scale, m + i, v + i, lr, beta1, beta2, eps, wd, bc1,
                          bc2, update_v);
}

/* ---- many tensors in one launch (tri_op_adamw_multi) ----
 * A group of up to TRI_ADAMW_GROUP pieces (engine/device/launch_shapes.h) passed by value in the
 * kernel's parameters: piece k is p[k], g[k], m[k], v[k] of first[k + 1] - first[k]
 * elements with weight decay wd[k]; the kernel walks the group's first[n] elements as one range (a
 * thread per element of the grid-stride loop, the piece found by bisection), each with
 * tri_adamw_element exactly as adamw_kernel: the same bits as the single op piece by piece. */

typedef struct tri_adamw_group {
    int n;
    float *p[TRI_ADAMW_GROUP], *m[TRI_ADAMW_GROUP], *v[TRI_ADAMW_GROUP];
    const float *g[TRI_ADAMW_GROUP];
    float wd[TRI_ADAMW_GROUP];
    int64_t first[TRI_ADAMW_GROUP + 1];
} tri_adamw_group;

TRI_KERNEL adamw_multi_kernel(tri_adamw_group a, float lr, float beta1, float beta2, float eps, float bc1, float bc2,
                              float grad_scale, int update_v)
{
    for (int64_t i = TRI_GLOBAL_ID; i < a.first[a.n]; i += TRI_GLOBAL_STRIDE) {
        int k = tri_piece_of(a.first, a.n, i);
        int64_t j = i - a.first[k];
        tri_adamw_element(a.p[k] + j, a.g[k][j] * grad_scale, a.m[k] + j, a.v[k] + j, lr, beta1, beta2, eps, a.wd[k],
                          bc1, bc2, update_v);
    }
}

/* ---- AdamW, the bf16 publish and the gradient zeroing in one launch (tri_op_adamw_fused_multi) ----
 * The group of adamw_multi_kernel plus each piece's bf16 model view o (NULL: none, fp32 training): per
 * element tri_adamw_element, then o[k][j] = tri_float_to_bf16(p) as float_to_bf16_kernel
 * (cuda/elementwise/convert.kern.h), then g[k][j] = 0 as the fill: the bits of the three launches the
 * simple form (cuda/optimizer/adamw.cu) runs instead. One read of p, g, m, v; writes of p, m, v, o, g. */

typedef struct tri_adamw_fused_group {
    int n;
    float *p[TRI_ADAMW_GROUP], *m[TRI_ADAMW_GROUP], *v[TRI_ADAMW_GROUP], *g[TRI_ADAMW_GROUP];
    uint16_t *o[TRI_ADAMW_GROUP];
    float wd[TRI_ADAMW_GROUP];
    int64_t first[TRI_ADAMW_GROUP + 1];
} tri_adamw_fused_group;

TRI_KERNEL adamw_fused_multi_kernel(tri_adamw_fused_group a, float lr, float beta1, float beta2, float eps, float bc1,
                                    float bc2, float grad_scale, int update_v)
{
    for (int64_t i = TRI_GLOBAL_ID; i < a.first[a.n]; i += TRI_GLOBAL_STRIDE) {
        int k = tri_piece_of(a.first, a.n, i);
        int64_t j = i - a.first[k];
        tri_adamw_element(a.p[k] + j, a.g[k][j] * grad_scale, a.m[k] + j, a.v[k] + j, lr, beta1, beta2, eps, a.wd[k],
                          bc1, bc2, update_v);
        if (a.o[k])
            a.o[k][j] = tri_float_to_bf16(a.p[k][j]);
        a.g[k][j] = 0.0f;
    }
}

#endif
