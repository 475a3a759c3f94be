/* cuda/norms/layernorm.kern.h - simple layernorm kernels (CUDA and C).
 *
 * Forward and the input gradient: one thread per row calling engine/device/ops/norms_math.h's row functions,
 * as the CPU backend does. The parameter gradients dw, db: one thread per column summing the rows in
 * engine/core/math.h's column order (TRI_COL_CHUNK row chunks, chunk sums added in order to float
 * accumulators that start from dw, db and are stored once: the CPU backend's column loop and the
 * fast kernels', bit for bit), so the result is deterministic and needs no atomics. out, inp, w, b,
 * dout, dinp, dw and db are each fp32 or bf16 (their `_bf16` flags); mean and rstd are fp32. Every
 * output element is written once from fp32 values, so a bf16 result is the CPU backend's fp32
 * result rounded once. */
#ifndef TRIDENT_CUDA_NORMS_LAYERNORM_KERN_H
#define TRIDENT_CUDA_NORMS_LAYERNORM_KERN_H

#include "cuda/kernels/shim.h"
#include "cuda/matmul/colsum_index.h"
#include "engine/device/ops/norms_math.h"

/* out(N,C) = layernorm(inp) * w + b per row; mean(N), rstd(N) saved */
TRI_KERNEL layernorm_forward_kernel(void *out, int out_bf16, float *mean, float *rstd, const void *inp,
                                    int inp_bf16, const void *w, int w_bf16, const void *b, int b_bf16,
                                    int64_t N, int64_t C)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        tri_layernorm_row_forward_mixed(tri_at(out, out_bf16, n * C), out_bf16, mean + n, rstd + n,
                                        tri_at(inp, inp_bf16, n * C), inp_bf16, w, w_bf16, b, b_bf16, C);
}

/* dinp(N,C) += the input gradient, one row per thread */
TRI_KERNEL layernorm_backward_input_kernel(void *dinp, int dinp_bf16, const void *dout, int dout_bf16,
                                           const void *inp, int inp_bf16, const void *w, int w_bf16,
                                           const float *mean, const float *rstd, int64_t N, int64_t C)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        tri_layernorm_row_backward_input_mixed(tri_at(dinp, dinp_bf16, n * C), dinp_bf16,
                                               tri_at(dout, dout_bf16, n * C), dout_bf16,
                                               tri_at(inp, inp_bf16, n * C), inp_bf16, w, w_bf16, mean[n],
                                               rstd[n], C);
}

/* dw[j] += sum_n norm[n,j] * dout[n,j], db[j] += sum_n dout[n,j], one column per thread */
TRI_KERNEL layernorm_backward_params_kernel(void *dw, int dw_bf16, void *db, int db_bf16, const void *dout,
                                            int dout_bf16, const void *inp, int inp_bf16, const float *mean,
                                            const float *rstd, int64_t N, int64_t C)
{
    for (int64_t j = TRI_GLOBAL_ID; j < C; j += TRI_GLOBAL_STRIDE) {
        float aw = tri_load(dw, dw_bf16, j), ab = tri_load(db, db_bf16, j);
        for (int64_t c0 = 0; c0 < N; c0 += TRI_COL_CHUNK) {
            float pw = 0.0f, pb = 0.0f;
            for (int64_t n = c0; n < N && n < c0 + TRI_COL_CHUNK; n++) {
                float norm = (tri_load(inp, inp_bf16, n * C + j) - mean[n]) * rstd[n];
                float g = tri_load(dout, dout_bf16, n * C + j);
                pw += norm * g;
                pb += g;
            }
            aw += pw;
            ab += pb;
        }
        tri_store(dw, dw_bf16, j, aw);
        tri_store(db, db_bf16, j, ab);
    }
}

/* The fast form's first pass of dw, db (the second is cuda/matmul/colsum.kern.h's): pw[c * C + j] and pb[c *
 * C + j] = the chunk-c sums of norm * dout and of dout over column j, a thread per (chunk, column). */
TRI_KERNEL layernorm_params_chunks_kernel(float *pw, float *pb, const void *dout, int dout_bf16, const void *inp,
                                          int inp_bf16, const float *mean, const float *rstd, int64_t N, int64_t C)
{
    int64_t total = tri_col_chunks(N) * C;
    for (int64_t idx = TRI_GLOBAL_ID; idx < total; idx += TRI_GLOBAL_STRIDE) {
        tri_col_cell e = tri_col_cell_of(idx, N, C);
        float sw = 0.0f, sb = 0.0f;
        for (int64_t n = e.begin; n < e.end; n++) {
            float norm = (tri_load(inp, inp_bf16, tri_col_at(n, e.j, C)) - mean[n]) * rstd[n];
            float g = tri_load(dout, dout_bf16, tri_col_at(n, e.j, C));
            sw += norm * g;
            sb += g;
        }
        pw[tri_col_at(e.c, e.j, C)] = sw;
        pb[tri_col_at(e.c, e.j, C)] = sb;
    }
}

#endif
