/* engine/device/ops/optimizer_math.h - the optimizers' element updates and the layer-wise trust
 * ratio, written once: the CPU loops (optimizer_cpu.c), the CUDA kernels (cuda/optimizer/) and the
 * host's deterministic-mode ratios (engine/train/trust_ratio.c) call them (TRI_HD: C, or
 * __host__ __device__ under nvcc). AdamW: Loshchilov & Hutter 2019; SGD with momentum as
 * torch.optim.SGD; LARS: You et al. 2017 (Algorithm 1); LAMB: You et al. 2020 (Algorithm 2). */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_OPTIMIZER_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_OPTIMIZER_MATH_H

#include <math.h>
#include <stdint.h>

#include "engine/core/math.h"

/* ---- AdamW on one element (Loshchilov & Hutter 2019, Algorithm 2) ----
 * In torch.optim.AdamW's order of operations: decay first, then the Adam step.
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. update_v 0 holds v (1-bit Adam's compression stage, Tang
 * et al. 2021 §3: the update is then linear in m, so error feedback compensates a compressed
 * gradient); the caller then passes bc2 = 1 - beta2^freeze_step (tri_adamw_v_step). */
TRI_HD void tri_adamw_element(float *p, float g, float *m, float *v, float lr, float beta1,
                              float beta2, float eps, float wd, float bc1, float bc2, int update_v)
{
    float mm = beta1 * *m + (1.0f - beta1) * g;
    float vv = update_v ? beta2 * *v + (1.0f - beta2) * g * g : *v;
    *m = mm;
    *v = vv;
    float pp = *p * (1.0f - lr * wd);
    *p = pp - (lr / bc1) * mm / (sqrtf(vv) / sqrtf(bc2) + eps);
}

/* The step whose bias correction v carries: step, or freeze_step once v is frozen (step >
 * freeze_step > 0). v updates at step exactly when the result is step. */
TRI_HD int64_t tri_adamw_v_step(int64_t step, int64_t freeze_step)
{
    return freeze_step > 0 && step > freeze_step ? freeze_step : step;
}

/* ---- SGD with momentum on one element (torch.optim.SGD, dampening 0) ----
 * d = g + wd p; b = mu b + d; p -= lr (nesterov ? d + mu b : b). */
TRI_HD void tri_sgd_element(float *p, float g, float *b, float lr, float mu, float wd, int nesterov)
{
    float dd = g + wd * *p;
    float bb = mu * *b + dd;
    *b = bb;
    *p = *p - lr * (nesterov ? dd + mu * bb : bb);
}

/* ---- LARS on one element (You et al. 2017, Algorithm 1) ----
 * llr = lr * the tensor's trust ratio: d = llr (g + wd p); b = mu b + d; p -= nesterov ? d + mu b : b. */
TRI_HD void tri_lars_element(float *p, float g, float *b, float llr, float mu, float wd, int nesterov)
{
    float dd = llr * (g + wd * *p);
    float bb = mu * *b + dd;
    *b = bb;
    *p = *p - (nesterov ? dd + mu * bb : bb);
}

/* ---- LAMB's direction on one element (You et al. 2020, Algorithm 2) ----
 * Adam's moments, bias-corrected (bc1 = 1 - beta1^t, bc2 = 1 - beta2^t), plus decoupled decay:
 * returns r = (m / bc1) / (sqrt(v / bc2) + eps) + wd p; m and v are updated. */
TRI_HD float tri_lamb_direction(float p, float g, float *m, float *v, float beta1, float beta2, float eps,
                                float wd, float bc1, float bc2)
{
    float mm = beta1 * *m + (1.0f - beta1) * g;
    float vv = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mm;
    *v = vv;
    return (mm / bc1) / (sqrtf(vv / bc2) + eps) + wd * p;
}

/* ---- the layer-wise trust ratio of one tensor, from its whole sums of squares ----
 * wsq = ||w||^2, usq = ||u||^2 (u: the gradient for LARS, the direction r for LAMB), u_scale
 * multiplying ||u|| (LARS: the clipping scale of the gradient). In double, rounded once:
 *   LARS (kind 0): eta ||w|| / (||u|| + wd ||w||)
 *   LAMB (kind 1): ||w|| / ||u||   (phi the identity)
 * and 1 when either norm is 0 (a zero-initialised tensor, a zero gradient), as both papers'
 * reference implementations do. */
TRI_HD float tri_trust_ratio(double wsq, double usq, int kind, float eta, float wd, float u_scale)
{
    double wn = sqrt(wsq), un = (double)u_scale * sqrt(usq);
    if (!(wn > 0.0) || !(un > 0.0))
        return (wn != wn || un != un) ? (float)(wn + un) : 1.0f; /* NaN stays NaN */
    return kind == 0 ? (float)((double)eta * wn / (un + (double)wd * wn)) : (float)(wn / un);
}

#endif
