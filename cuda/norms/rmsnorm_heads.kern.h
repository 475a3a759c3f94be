/* cuda/norms/rmsnorm_heads.kern.h - per-head RMSNorm of fused q|k|v rows (Qwen3's q_norm / k_norm),
 * the simple forms (CUDA and C).
 *
 * A thread per head row for the normalisation and the input gradient (engine/device/ops/norms_math.h's
 * rmsnorm row functions on the HS values of head r % H of token r / H, as the CPU backend calls them),
 * a thread per element for the other (v) columns' copy, a thread per column for the weight gradients
 * (chunk sums of TRI_COL_CHUNK head rows of one group in tri_head_group_row's order, added in chunk
 * order), and the first pass of the coalesced column sums the fast path finishes with
 * tri_cuda_col_chunks_finish. rstd is fp32; every other floating tensor fp32 or bf16 by its flag. */
#ifndef TRIDENT_CUDA_NORMS_RMSNORM_HEADS_KERN_H
#define TRIDENT_CUDA_NORMS_RMSNORM_HEADS_KERN_H

#include "cuda/kernels/shim.h"
#include "cuda/matmul/colsum_index.h"
#include "engine/device/ops/norms_math.h"

/* out's head rows (N H of them) = rmsnorm(inp's) with q_w for heads < NH, else k_w */
TRI_KERNEL rmsnorm_heads_forward_kernel(void *out, int out_bf16, float *rstd, const void *inp, int inp_bf16,
                                        const void *q_w, const void *k_w, int w_bf16, int64_t N, int64_t W,
                                        int64_t HS, int64_t NH, int64_t H, float eps)
{
    for (int64_t r = TRI_GLOBAL_ID; r < N * H; r += TRI_GLOBAL_STRIDE) {
        int64_t at = tri_head_row_at(r, H, W, HS);
        tri_rmsnorm_row_forward_mixed(tri_at(out, out_bf16, at), out_bf16, rstd + r, tri_at(inp, inp_bf16, at),
                                      inp_bf16, r % H < NH ? q_w : k_w, w_bf16, HS, eps);
    }
}

/* dst's columns from H HS on (the v heads) = src's, a thread per element (same dtype: a bit copy) */
TRI_KERNEL rmsnorm_heads_copy_rest_kernel(void *dst, const void *src, int bf16, int64_t N, int64_t W, int64_t first)
{
    int64_t R = W - first;
    for (int64_t i = TRI_GLOBAL_ID; i < N * R; i += TRI_GLOBAL_STRIDE) {
        int64_t at = (i / R) * W + first + i % R;
        if (bf16)
            ((uint16_t *)dst)[at] = ((const uint16_t *)src)[at];
        else
            ((float *)dst)[at] = ((const float *)src)[at];
    }
}

/* dinp's head rows = the input gradient (set), math.h's tri_rmsnorm_row_backward_set_mixed */
TRI_KERNEL rmsnorm_heads_backward_input_kernel(void *dinp, int dinp_bf16, const void *dout, int dout_bf16,
                                               const void *inp, int inp_bf16, const void *q_w, const void *k_w,
                                               int w_bf16, const float *rstd, int64_t N, int64_t W, int64_t HS,
                                               int64_t NH, int64_t H)
{
    for (int64_t r = TRI_GLOBAL_ID; r < N * H; r += TRI_GLOBAL_STRIDE) {
        int64_t at = tri_head_row_at(r, H, W, HS);
        tri_rmsnorm_row_backward_set_mixed(tri_at(dinp, dinp_bf16, at), dinp_bf16, tri_at(dout, dout_bf16, at),
                                           dout_bf16, tri_at(inp, inp_bf16, at), inp_bf16, r % H < NH ? q_w : k_w,
                                           w_bf16, rstd[r], HS);
    }
}

/* dw[j] += the column sum of the group of G heads from h0 (M = N G weight-gradient rows), a thread
 * per column: chunks of TRI_COL_CHUNK rows */
TRI_KERNEL rmsnorm_heads_backward_params_kernel(void *dw, int dw_bf16, const void *dout, int dout_bf16,
                                                const void *inp, int inp_bf16, const float *rstd, int64_t N,
                                                int64_t W, int64_t HS, int64_t h0, int64_t G, int64_t H)
{
    int64_t M = N * G;
    for (int64_t j = TRI_GLOBAL_ID; j < HS; j += TRI_GLOBAL_STRIDE) {
        float acc = tri_load(dw, dw_bf16, j);
        for (int64_t c0 = 0; c0 < M; c0 += TRI_COL_CHUNK) {
            int64_t c1 = c0 + TRI_COL_CHUNK < M ? c0 + TRI_COL_CHUNK : M;
            float s = 0.0f;
            for (int64_t m = c0; m < c1; m++)
                s += tri_rmsnorm_heads_dw_term(dout, dout_bf16, inp, inp_bf16, rstd, m, j, h0, G, H, W, HS);
            acc += s;
        }
        tri_store(dw, dw_bf16, j, acc);
    }
}

/* pw[c * HS + j] = chunk c's sum for column j of a group (the first of two coalesced passes) */
TRI_KERNEL rmsnorm_heads_params_chunks_kernel(float *pw, const void *dout, int dout_bf16, const void *inp,
                                              int inp_bf16, const float *rstd, int64_t N, int64_t W, int64_t HS,
                                              int64_t h0, int64_t G, int64_t H)
{
    int64_t M = N * G, total = tri_col_chunks(M) * HS;
    for (int64_t idx = TRI_GLOBAL_ID; idx < total; idx += TRI_GLOBAL_STRIDE) {
        tri_col_cell e = tri_col_cell_of(idx, M, HS);
        float s = 0.0f;
        for (int64_t m = e.begin; m < e.end; m++)
            s += tri_rmsnorm_heads_dw_term(dout, dout_bf16, inp, inp_bf16, rstd, m, e.j, h0, G, H, W, HS);
        pw[tri_col_at(e.c, e.j, HS)] = s;
    }
}

#endif
