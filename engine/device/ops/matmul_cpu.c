/* engine/device/ops/matmul_cpu.c - the matmul ops on the CPU backend.
 *
 * Every matmul is one OpenBLAS sgemm (row-major; a bias is broadcast into c first and added as
 * beta 1); an inner dimension of 0, which sgemm rejects, is c = beta c. bias_backward sums dout's
 * columns in engine/core/math.h's order (TRI_COL_CHUNK row chunks), parallel over column blocks,
 * so its bits do not depend on the thread count and equal the CUDA kernels'. The grouped matmuls are
 * one sgemm per group (tri_cpu_matmul on the group's views), no padding. */
#include <cblas.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"
#include "engine/device/ops/grouped_matmul.h"

/* ---- matmul ---- */

/* c(M, N) = row (N) in every row */
static void broadcast_rows_loop(float *c, const float *row, int64_t M, int64_t N)
{
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; i++)
        memcpy(c + i * N, row, (size_t)N * sizeof(float));
}

int tri_cpu_matmul(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias,
                   bool trans_a, bool trans_b, float beta)
{
    int64_t M = tri_tensor_rows(c), N = tri_tensor_cols(c);
    int64_t K = trans_a ? tri_tensor_rows(a) : tri_tensor_cols(a);
    float *pc = fp(c);
    if (tri_tensor_present(bias)) {
        TRI_ON_THREADS(nthreads(d), broadcast_rows_loop(pc, fp(bias), M, N));
        beta = 1.0f;
    }
    if (K == 0) /* c = beta c (sgemm rejects lda 0, so it cannot be asked) */
        return beta == 0.0f ? tri_cpu_fill(d, c, 0.0f) : beta == 1.0f ? TRI_OK : tri_cpu_scale(d, c, beta);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0f, fp(a), (int)tri_tensor_cols(a), fp(b),
                (int)tri_tensor_cols(b), beta, pc, (int)N);
    return TRI_OK;
}

/* dbias[j] += the column sums of dout in engine/core/math.h's order (TRI_COL_CHUNK row chunks) */
static void bias_backward_loop(tri_tensor dbias, tri_tensor dout)
{
    int64_t N = tri_tensor_rows(dout), OC = tri_tensor_cols(dout);
    float *db = fp(dbias);
    const float *g = fp(dout);
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < OC; j0 += TRI_CPU_COL_BLOCK) {
        int64_t j1 = j0 + TRI_CPU_COL_BLOCK < OC ? j0 + TRI_CPU_COL_BLOCK : OC;
        float part[TRI_CPU_COL_BLOCK];
        for (int64_t c0 = 0; c0 < N; c0 += TRI_COL_CHUNK) {
            int64_t c1 = c0 + TRI_COL_CHUNK < N ? c0 + TRI_COL_CHUNK : N;
            for (int64_t j = j0; j < j1; j++)
                part[j - j0] = 0.0f;
            for (int64_t n = c0; n < c1; n++)
                for (int64_t j = j0; j < j1; j++)
                    part[j - j0] += g[n * OC + j];
            for (int64_t j = j0; j < j1; j++)
                db[j] += part[j - j0];
        }
    }
}

int tri_cpu_bias_backward(tri_device *d, tri_tensor dbias, tri_tensor dout)
{
    TRI_ON_THREADS(nthreads(d), bias_backward_loop(dbias, dout));
    return TRI_OK;
}

/* ---- grouped matmul: one sgemm per group (engine/device/ops/grouped_matmul.h) ---- */

int tri_cpu_grouped_matmul_forward(tri_device *d, tri_tensor out, tri_tensor x, tri_tensor w, const int32_t *counts)
{
    return tri_grouped_matmul_run(d, tri_cpu_matmul, TRI_GROUPED_FORWARD, out, x, w, counts, 0.0f);
}

int tri_cpu_grouped_matmul_backward_input(tri_device *d, tri_tensor dx, tri_tensor dout, tri_tensor w,
                                          const int32_t *counts, float beta)
{
    return tri_grouped_matmul_run(d, tri_cpu_matmul, TRI_GROUPED_DINP, dx, dout, w, counts, beta);
}

int tri_cpu_grouped_matmul_backward_weight(tri_device *d, tri_tensor dw, tri_tensor dout, tri_tensor x,
                                           const int32_t *counts, float beta)
{
    return tri_grouped_matmul_run(d, tri_cpu_matmul, TRI_GROUPED_DWEIGHT, x, dout, dw, counts, beta);
}
