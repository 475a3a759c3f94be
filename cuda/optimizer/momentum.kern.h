/* cuda/optimizer/momentum.kern.h - SGD with momentum, LARS, LAMB's two phases and the layer-wise
 * trust ratio (CUDA and C): engine/device/ops/optimizer_math.h's tri_sgd_element, tri_lars_element,
 * tri_lamb_direction and tri_trust_ratio per element (per tensor for the ratio), with the trust
 * ratio read from device memory (ratios[idx], or 1 for idx < 0), so no host wait sits between the
 * norms and the update. The simple twins the CPU tests run against the CPU backend
 * (tests/test_cuda_kernels_cpu.c). */
#ifndef TRIDENT_CUDA_OPTIMIZER_MOMENTUM_KERN_H
#define TRIDENT_CUDA_OPTIMIZER_MOMENTUM_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/optimizer_math.h"

/* The trust ratio of a piece: ratios[idx], or 1 without one. */
TRI_HD float tri_piece_ratio(const float *ratios, int64_t idx)
{
    return idx >= 0 ? ratios[idx] : 1.0f;
}

/* One momentum step on p and buf (n floats) with gradient grad * grad_scale: SGD, or LARS with the
 * learning rate lr * ratio. */
TRI_KERNEL sgd_kernel(float *p, const float *grad, float *buf, int64_t n, const float *ratios, int64_t idx, float lr,
                      float mu, float wd, float grad_scale, int nesterov, int lars)
{
    const float llr = lr * tri_piece_ratio(ratios, idx);
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE) {
        if (lars)
            tri_lars_element(p + i, grad[i] * grad_scale, buf + i, llr, mu, wd, nesterov);
        else
            tri_sgd_element(p + i, grad[i] * grad_scale, buf + i, lr, mu, wd, nesterov);
    }
}

/* LAMB's first phase: m, v updated, grad overwritten with the direction r. */
TRI_KERNEL lamb_direction_kernel(const float *p, float *grad, float *m, float *v, int64_t n, float beta1, float beta2,
                                 float eps, float wd, float bc1, float bc2, float grad_scale)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        grad[i] = tri_lamb_direction(p[i], grad[i] * grad_scale, m + i, v + i, beta1, beta2, eps, wd, bc1, bc2);
}

/* LAMB's second phase: p -= (lr * ratio) * r. */
TRI_KERNEL lamb_update_kernel(float *p, const float *r, int64_t n, const float *ratios, int64_t idx, float lr)
{
    const float step = lr * tri_piece_ratio(ratios, idx);
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        p[i] = p[i] - step * r[i];
}

/* ratios[i] from tensor i's partial sums (sums: n x span of the weights, then n x span of the second
 * quantity), added in index order in double: a thread per tensor, as the CPU loop. */
TRI_KERNEL trust_ratio_kernel(float *ratios, const float *sums, int64_t n, int64_t span, int kind, float eta, float wd,
                              float u_scale)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE) {
        double w = 0.0, u = 0.0;
        for (int64_t j = 0; j < span; j++) {
            w += (double)sums[i * span + j];
            u += (double)sums[(n + i) * span + j];
        }
        ratios[i] = tri_trust_ratio(w, u, kind, eta, wd, u_scale);
    }
}

#endif
