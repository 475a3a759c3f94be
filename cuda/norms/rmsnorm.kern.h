/* cuda/norms/rmsnorm.kern.h - RMSNorm kernels, the simple forms (CUDA and C).
 *
 * A thread per row for the normalisation and the input gradient (engine/device/ops/norms_math.h's row
 * functions, as the CPU backend calls them), a thread per column for dw (chunk sums of TRI_COL_CHUNK rows in
 * order, added in chunk order), and the first pass of the coalesced column sums the fast path
 * finishes with tri_cuda_col_chunks_finish (cuda/matmul/colsum.kern.h). rstd is fp32; every other
 * floating tensor fp32 or bf16 by its flag. */
#ifndef TRIDENT_CUDA_NORMS_RMSNORM_KERN_H
#define TRIDENT_CUDA_NORMS_RMSNORM_KERN_H

#include "cuda/kernels/shim.h"
#include "cuda/matmul/colsum_index.h"
#include "engine/device/ops/norms_math.h"

TRI_KERNEL rmsnorm_forward_kernel(void *out, int out_bf16, float *rstd, const void *inp, int inp_bf16, const void *w,
                                  int w_bf16, int64_t N, int64_t C, float eps)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        tri_rmsnorm_row_forward_mixed(tri_at(out, out_bf16, n * C), out_bf16, rstd + n, tri_at(inp, inp_bf16, n * C),
                                      inp_bf16, w, w_bf16, C, eps);
}

TRI_KERNEL rmsnorm_backward_input_kernel(void *dinp, int dinp_bf16, const void *dout, int dout_bf16, const void *inp,
                                         int inp_bf16, const void *w, int w_bf16, const float *rstd, int64_t N,
                                         int64_t C)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        tri_rmsnorm_row_backward_input_mixed(tri_at(dinp, dinp_bf16, n * C), dinp_bf16, tri_at(dout, dout_bf16, n * C),
                                             dout_bf16, tri_at(inp, inp_bf16, n * C), inp_bf16, w, w_bf16, rstd[n], C);
}

/* dw[j] += sum over rows of dout * (inp * rstd), a thread per column: chunks of TRI_COL_CHUNK rows */
TRI_KERNEL rmsnorm_backward_params_kernel(void *dw, int dw_bf16, const void *dout, int dout_bf16, const void *inp,
                                          int inp_bf16, const float *rstd, int64_t N, int64_t C)
{
    for (int64_t j = TRI_GLOBAL_ID; j < C; j += TRI_GLOBAL_STRIDE) {
        float acc = tri_load(dw, dw_bf16, j);
        for (int64_t c0 = 0; c0 < N; c0 += TRI_COL_CHUNK) {
            int64_t c1 = c0 + TRI_COL_CHUNK < N ? c0 + TRI_COL_CHUNK : N;
            float s = 0.0f;
            for (int64_t n = c0; n < c1; n++)
                s += tri_load(inp, inp_bf16, n * C + j) * rstd[n] * tri_load(dout, dout_bf16, n * C + j);
            acc += s;
        }
        tri_store(dw, dw_bf16, j, acc);
    }
}

/* pw[c * C + j] = chunk c's sum for column j (the first of two coalesced passes) */
TRI_KERNEL rmsnorm_params_chunks_kernel(float *pw, const void *dout, int dout_bf16, const void *inp, int inp_bf16,
                                        const float *rstd, int64_t N, int64_t C)
{
    int64_t total = tri_col_chunks(N) * C;
    for (int64_t idx = TRI_GLOBAL_ID; idx < total; idx += TRI_GLOBAL_STRIDE) {
        tri_col_cell e = tri_col_cell_of(idx, N, C);
        float s = 0.0f;
        for (int64_t n = e.begin; n < e.end; n++)
            s += tri_load(inp, inp_bf16, tri_col_at(n, e.j, C)) * rstd[n] *
                 tri_load(dout, dout_bf16, tri_col_at(n, e.j, C));
        pw[tri_col_at(e.c, e.j, C)] = s;
    }
}

#endif
