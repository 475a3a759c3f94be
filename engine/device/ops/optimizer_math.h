/* engine/device/ops/optimizer_math.h - AdamW on one element, written once: the CPU loop
 * (optimizer_cpu.c) and the CUDA kernels (cuda/optimizer/adamw.kern.h, cuda/optimizer/adamw.cu) call it
 * (TRI_HD: C, or __host__ __device__ under nvcc). */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_OPTIMIZER_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_OPTIMIZER_MATH_H

#include <math.h>
#include <stdint.h>

#include "engine/core/math.h"

/* ---- AdamW on one element (Loshchilov & Hutter 2019, Algorithm 2) ----
 * In torch.optim.AdamW's order of operations: decay first, then the Adam step.
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. */
TRI_HD void tri_adamw_element(float *p, float g, float *m, float *v, float lr, float beta1,
                              float beta2, float eps, float wd, float bc1, float bc2)
{
    float mm = beta1 * *m + (1.0f - beta1) * g;
    float vv = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mm;
    *v = vv;
    float pp = *p * (1.0f - lr * wd);
    *p = pp - (lr / bc1) * mm / (sqrtf(vv) / sqrtf(bc2) + eps);
}

#endif
