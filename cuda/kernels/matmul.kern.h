/* cuda/kernels/matmul.kern.h - the matmul family's kernels besides cuBLASLt (CUDA and C).
 *
 * bias_backward_kernel: one thread per column, rows summed in order into a float accumulator that
 * starts from dbias: the CPU backend's loop, bit for bit, and deterministic. scale_rows_kernel
 * and bias_broadcast_kernel
 * cover matmul's K == 0 case (c = beta * c, 0 when beta == 0 so NaN does not propagate; or the bias). */
#ifndef TRIDENT_CUDA_KERNELS_MATMUL_KERN_H
#define TRIDENT_CUDA_KERNELS_MATMUL_KERN_H

#include "cuda/kernels/shim.h"

/* dbias[j] += sum_n dout[n * OC + j], j < OC */
TRI_KERNEL bias_backward_kernel(float *dbias, const float *dout, int64_t N, int64_t OC)
{
    for (int64_t j = TRI_GLOBAL_ID; j < OC; j += TRI_GLOBAL_STRIDE) {
        float acc = dbias[j];
        for (int64_t n = 0; n < N; n++)
            acc += dout[n * OC + j];
        dbias[j] = acc;
    }
}

/* c[i] = beta == 0 ? 0 : beta * c[i] */
TRI_KERNEL matmul_scale_kernel(float *c, float beta, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        c[i] = beta == 0.0f ? 0.0f : beta * c[i];
}

/* c[m * N + j] = bias[j]: matmul with K == 0 and a bias */
TRI_KERNEL bias_broadcast_kernel(float *c, const float *bias, int64_t M, int64_t N)
{
    for (int64_t i = TRI_GLOBAL_ID; i < M * N; i += TRI_GLOBAL_STRIDE)
        c[i] = bias[i % N];
}

#endif
