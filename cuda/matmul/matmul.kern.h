/* cuda/matmul/matmul.kern.h - the matmul family's kernels besides cuBLASLt (CUDA and C).
 *
 * bias_backward_kernel: one thread per column summing the rows in engine/core/math.h's column order
 * (chunks of TRI_COL_CHUNK rows, each from 0 in row order, added in chunk order to a float
 * accumulator that starts from dbias and is stored once): the CPU backend's loop and the two-pass
 * column sums' (cuda/matmul/colsum.kern.h) bit for bit, and deterministic.
 * scale_rows_kernel and bias_broadcast_kernel cover matmul's K == 0 case (c = beta * c, 0 when
 * beta == 0 so NaN does not propagate; or the bias) and the unfused bias path. gemm_fallback_kernel
 * is the product when cuBLASLt has no working algorithm for a shape (cuda/matmul/matmul.cu): a thread
 * per output element, k ascending in fp32, slow but never a failure. Every floating array
 * is fp32 or bf16 as its `_bf16` flag says (engine/core/math.h tri_load / tri_store, fp32 arithmetic). */
#ifndef TRIDENT_CUDA_MATMUL_MATMUL_KERN_H
#define TRIDENT_CUDA_MATMUL_MATMUL_KERN_H

#include "cuda/kernels/shim.h"

/* dbias[j] += sum_n dout[n * OC + j], j < OC */
TRI_KERNEL bias_backward_kernel(void *dbias, int dbias_bf16, const void *dout, int dout_bf16, int64_t N,
                                int64_t OC)
{
    for (int64_t j = TRI_GLOBAL_ID; j < OC; j += TRI_GLOBAL_STRIDE) {
        float acc = tri_load(dbias, dbias_bf16, j);
        for (int64_t c0 = 0; c0 < N; c0 += TRI_COL_CHUNK) {
            float part = 0.0f;
            for (int64_t n = c0; n < N && n < c0 + TRI_COL_CHUNK; n++)
                part += tri_load(dout, dout_bf16, n * OC + j);
            acc += part;
        }
        tri_store(dbias, dbias_bf16, j, acc);
    }
}

/* c[i] = beta == 0 ? 0 : beta * c[i] */
TRI_KERNEL matmul_scale_kernel(void *c, int c_bf16, float beta, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(c, c_bf16, i, beta == 0.0f ? 0.0f : beta * tri_load(c, c_bf16, i));
}

/* c[m * N + j] = bias[j]: matmul with K == 0 and a bias, or the unfused bias path */
TRI_KERNEL bias_broadcast_kernel(void *c, int c_bf16, const void *bias, int bias_bf16, int64_t M, int64_t N)
{
    for (int64_t i = TRI_GLOBAL_ID; i < M * N; i += TRI_GLOBAL_STRIDE)
        tri_store(c, c_bf16, i, tri_load(bias, bias_bf16, i % N));
}

/* c = alpha op(a) op(b) + beta c (+ bias[j] on every row), row-major, for each of `batch` matrices
 * (element strides sa, sb, sc apart): op(a) is M x K (a's row stride lda; transposed when trans_a),
 * op(b) K x N (ldb), c M x N (ldc). Products summed k ascending in fp32; c not read when beta == 0. */
TRI_KERNEL gemm_fallback_kernel(void *c, int c_bf16, const void *a, const void *b, int ab_bf16, const void *bias,
                                int64_t M, int64_t N, int64_t K, int trans_a, int trans_b, int64_t lda, int64_t ldb,
                                int64_t ldc, int64_t sa, int64_t sb, int64_t sc, int64_t batch, float alpha, float beta)
{
    for (int64_t idx = TRI_GLOBAL_ID; idx < batch * M * N; idx += TRI_GLOBAL_STRIDE) {
        int64_t z = idx / (M * N), m = idx % (M * N) / N, n = idx % N;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float x = tri_load(a, ab_bf16, z * sa + (trans_a ? k * lda + m : m * lda + k));
            float y = tri_load(b, ab_bf16, z * sb + (trans_b ? n * ldb + k : k * ldb + n));
            acc += x * y;
        }
        int64_t at = z * sc + m * ldc + n;
        float v = alpha * acc + (beta == 0.0f ? 0.0f : beta * tri_load(c, c_bf16, at));
        if (bias)
            v += tri_load(bias, c_bf16, n);
        tri_store(c, c_bf16, at, v);
    }
}

#endif
