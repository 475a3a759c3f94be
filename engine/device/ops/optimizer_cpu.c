/* engine/device/ops/optimizer_cpu.c - the optimizers on the CPU backend: one vectorised OpenMP loop
 * over each piece's elements calling engine/device/ops/optimizer_math.h (tri_adamw_element,
 * tri_sgd_element, tri_lars_element, tri_lamb_direction, tri_trust_ratio), the CUDA kernels'
 * arithmetic; AdamW's loop also fused with the bf16 publish and the gradient zeroing. */
#include <math.h>

#include "engine/core/math.h"
#include "engine/device/ops/optimizer_math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"

/* ---- optimizer ---- */

static void adamw_loop(tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                     const tri_adamw_hparams *hp)
{
    int64_t n = tri_tensor_numel(param);
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const int64_t vstep = tri_adamw_v_step(hp->step, hp->freeze_step);
    const float bc2 = 1.0f - powf(hp->beta2, (float)vstep);
    const int update_v = vstep == hp->step;
    const float lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = hp->weight_decay;
    const float gs = hp->grad_scale;
    float *restrict p = fp(param), *restrict pm = fp(m), *restrict pv = fp(v);
    const float *restrict g = fp(grad);
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        tri_adamw_element(p + i, g[i] * gs, pm + i, pv + i, lr, b1, b2, eps, wd, bc1, bc2, update_v);
}

int tri_cpu_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                  const tri_adamw_hparams *hp)
{
    TRI_ON_THREADS(nthreads(d), adamw_loop(param, grad, m, v, hp));
    return TRI_OK;
}

/* AdamW, the bf16 publish and the gradient zeroing of one piece in one loop: each element as
 * adamw_loop, then rounded into model (tri_float_to_bf16, as convert_loop) and its gradient set to 0
 * (as fill). */
static void adamw_fused_loop(const tri_adamw_piece *pc, const tri_tensor *model, const tri_adamw_hparams *hp,
                             float bc1, float bc2, int update_v)
{
    int64_t n = tri_tensor_numel(pc->param);
    const float lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = pc->weight_decay;
    const float gs = hp->grad_scale;
    float *restrict p = fp(pc->param), *restrict pm = fp(pc->m), *restrict pv = fp(pc->v);
    float *restrict g = fp(pc->grad);
    uint16_t *restrict o = model ? model->data : NULL;
    if (o) {
#pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; i++) {
            tri_adamw_element(p + i, g[i] * gs, pm + i, pv + i, lr, b1, b2, eps, wd, bc1, bc2, update_v);
            o[i] = tri_float_to_bf16(p[i]);
            g[i] = 0.0f;
        }
    } else {
#pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; i++) {
            tri_adamw_element(p + i, g[i] * gs, pm + i, pv + i, lr, b1, b2, eps, wd, bc1, bc2, update_v);
            g[i] = 0.0f;
        }
    }
}

int tri_cpu_adamw_fused_multi(tri_device *d, const tri_adamw_piece *pieces, const tri_tensor *models, int n,
                              const tri_adamw_hparams *hp)
{
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const int64_t vstep = tri_adamw_v_step(hp->step, hp->freeze_step);
    const float bc2 = 1.0f - powf(hp->beta2, (float)vstep);
    for (int k = 0; k < n; k++)
        TRI_ON_THREADS(nthreads(d), adamw_fused_loop(&pieces[k], models ? &models[k] : NULL, hp, bc1, bc2,
                                                          vstep == hp->step));
    return TRI_OK;
}

/* The trust ratio a piece multiplies its learning rate by (1 without one). */
static float piece_ratio(const tri_sgd_piece *p, tri_tensor ratios)
{
    return p->ratio >= 0 ? ((const float *)ratios.data)[p->ratio] : 1.0f;
}

static void sgd_loop(const tri_sgd_piece *pc, float r, const tri_sgd_hparams *hp)
{
    int64_t n = tri_tensor_numel(pc->param);
    const float gs = hp->grad_scale, mu = hp->momentum, wd = pc->weight_decay, llr = hp->lr * r;
    const int nesterov = hp->nesterov;
    float *restrict p = fp(pc->param), *restrict b = fp(pc->buf);
    const float *restrict g = fp(pc->grad);
    if (hp->lars) {
#pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            tri_lars_element(p + i, g[i] * gs, b + i, llr, mu, wd, nesterov);
    } else {
#pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            tri_sgd_element(p + i, g[i] * gs, b + i, hp->lr, mu, wd, nesterov);
    }
}

int tri_cpu_sgd_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, const tri_sgd_hparams *hp)
{
    for (int k = 0; k < n; k++) {
        float r = piece_ratio(&pieces[k], ratios);
        TRI_ON_THREADS(nthreads(d), sgd_loop(&pieces[k], r, hp));
    }
    return TRI_OK;
}

static void lamb_direction_loop(const tri_adamw_piece *pc, const tri_adamw_hparams *hp, float bc1, float bc2)
{
    int64_t n = tri_tensor_numel(pc->param);
    const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = pc->weight_decay, gs = hp->grad_scale;
    const float *restrict p = fp(pc->param);
    float *restrict g = fp(pc->grad), *restrict m = fp(pc->m), *restrict v = fp(pc->v);
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        g[i] = tri_lamb_direction(p[i], g[i] * gs, m + i, v + i, b1, b2, eps, wd, bc1, bc2);
}

int tri_cpu_lamb_direction_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp)
{
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const float bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    for (int k = 0; k < n; k++)
        TRI_ON_THREADS(nthreads(d), lamb_direction_loop(&pieces[k], hp, bc1, bc2));
    return TRI_OK;
}

static void lamb_update_loop(const tri_sgd_piece *pc, float step)
{
    int64_t n = tri_tensor_numel(pc->param);
    float *restrict p = fp(pc->param);
    const float *restrict r = fp(pc->grad);
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        p[i] = p[i] - step * r[i];
}

int tri_cpu_lamb_update_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, float lr)
{
    for (int k = 0; k < n; k++) {
        float step = lr * piece_ratio(&pieces[k], ratios);
        TRI_ON_THREADS(nthreads(d), lamb_update_loop(&pieces[k], step));
    }
    return TRI_OK;
}

int tri_cpu_trust_ratio(tri_device *d, tri_tensor ratios, tri_tensor sums, int64_t span, const tri_trust_hparams *hp)
{
    (void)d;
    int64_t n = tri_tensor_numel(ratios);
    const float *s = sums.data;
    float *r = ratios.data;
    for (int64_t i = 0; i < n; i++) {
        double w = 0.0, u = 0.0;
        for (int64_t j = 0; j < span; j++) {
            w += (double)s[i * span + j];
            u += (double)s[(n + i) * span + j];
        }
        r[i] = tri_trust_ratio(w, u, (int)hp->kind, hp->eta, hp->weight_decay, hp->u_scale);
    }
    return TRI_OK;
}
