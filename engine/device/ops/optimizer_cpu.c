/* engine/device/ops/optimizer_cpu.c - AdamW on the CPU backend: one vectorised OpenMP loop over
 * the elements calling engine/device/ops/optimizer_math.h's tri_adamw_element, the CUDA kernels' arithmetic. */
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
    const float bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    const float lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = hp->weight_decay;
    const float gs = hp->grad_scale;
    float *restrict p = fp(param), *restrict pm = fp(m), *restrict pv = fp(v);
    const float *restrict g = fp(grad);
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        tri_adamw_element(p + i, g[i] * gs, pm + i, pv + i, lr, b1, b2, eps, wd, bc1, bc2);
}

int tri_cpu_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                  const tri_adamw_hparams *hp)
{
    TRI_ON_THREADS(nthreads(d), adamw_loop(param, grad, m, v, hp));
    return TRI_OK;
}
