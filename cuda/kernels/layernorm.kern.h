/* cuda/kernels/layernorm.kern.h - simple layernorm kernels (CUDA and C).
 *
 * Forward and the input gradient: one thread per row calling engine/math.h's row functions, as the
 * CPU backend does. The parameter gradients dw, db: one thread per column summing the rows in
 * order into float accumulators that start from dw, db (the CPU backend's column loop, bit for
 * bit), so the result is deterministic and needs no atomics. */
#ifndef TRIDENT_CUDA_KERNELS_LAYERNORM_KERN_H
#define TRIDENT_CUDA_KERNELS_LAYERNORM_KERN_H

#include "cuda/kernels/shim.h"

/* out(N,C) = layernorm(inp) * w + b per row; mean(N), rstd(N) saved */
TRI_KERNEL layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int64_t N, int64_t C)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        tri_layernorm_row_forward(out + n * C, mean + n, rstd + n, inp + n * C, w, b, C);
}

/* dinp(N,C) += the input gradient, one row per thread */
TRI_KERNEL layernorm_backward_input_kernel(float *dinp, const float *dout, const float *inp,
                                           const float *w, const float *mean, const float *rstd,
                                           int64_t N, int64_t C)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        tri_layernorm_row_backward_input(dinp + n * C, dout + n * C, inp + n * C, w, mean[n],
                                         rstd[n], C);
}

/* dw[j] += sum_n norm[n,j] * dout[n,j], db[j] += sum_n dout[n,j], one column per thread */
TRI_KERNEL layernorm_backward_params_kernel(float *dw, float *db, const float *dout,
                                            const float *inp, const float *mean, const float *rstd,
                                            int64_t N, int64_t C)
{
    for (int64_t j = TRI_GLOBAL_ID; j < C; j += TRI_GLOBAL_STRIDE) {
        float aw = dw[j], ab = db[j];
        for (int64_t n = 0; n < N; n++) {
            float norm = (inp[n * C + j] - mean[n]) * rstd[n];
            aw += norm * dout[n * C + j];
            ab += dout[n * C + j];
        }
        dw[j] = aw;
        db[j] = ab;
    }
}

#endif
