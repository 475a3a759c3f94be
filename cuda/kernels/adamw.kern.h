/* cuda/kernels/adamw.kern.h - the AdamW update (CUDA and C): tri_adamw_element of engine/core/math.h
 * per element, with the bias corrections bc1 = 1 - beta1^t and bc2 = 1 - beta2^t computed once on
 * the host exactly as the CPU backend computes them. */
#ifndef TRIDENT_CUDA_KERNELS_ADAMW_KERN_H
#define TRIDENT_CUDA_KERNELS_ADAMW_KERN_H

#include "cuda/kernels/shim.h"

/* One AdamW step on p, m, v (n floats each) with gradient grad * grad_scale. */
TRI_KERNEL adamw_kernel(float *p, const float *grad, float *m, float *v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float wd, float bc1, float bc2,
                        float grad_scale)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_adamw_element(p + i, grad[i] * grad_scale, m + i, v + i, lr, beta1, beta2, eps, wd, bc1,
                          bc2);
}

#endif
