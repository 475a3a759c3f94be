/* engine/device/ops/norms_math.h - layernorm and RMSNorm over one row, written once.
 *
 * Inline functions (TRI_HD: C for the CPU backend, __host__ __device__ under nvcc) that the CPU loops
 * (norms_cpu.c) and the CUDA kernels (cuda/norms/layernorm.kern.h, layernorm_fast.cuh,
 * rmsnorm.kern.h, rmsnorm_fast.cuh, rmsnorm_heads.kern.h, rmsnorm_heads_fast.cuh) both call, summing each row in engine/core/math.h's row order,
 * so the backends agree bit for bit and the CPU tests exercise the GPU's arithmetic. */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_NORMS_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_NORMS_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/core/math.h"

#define TRI_LN_EPS 1e-5f

/* ---- layernorm over one row of C; mean and rstd are fp32 ----
 * mean = sum(x) / C, var = sum((x - mean)^2) / C, each sum in engine/core/math.h's row order. */
TRI_HD void tri_layernorm_row_forward_mixed(void *out, int out_bf16, float *mean_out, float *rstd_out,
                                            const void *x, int x_bf16, const void *w, int w_bf16,
                                            const void *b, int b_bf16, int64_t C)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++)
            acc[s] += tri_load(x, x_bf16, i0 + s);
    float m = tri_row_slots_combine(acc) / (float)C;
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float dx = tri_load(x, x_bf16, i0 + s) - m;
            acc[s] += dx * dx;
        }
    float var = tri_row_slots_combine(acc) / (float)C;
    float rs = 1.0f / sqrtf(var + TRI_LN_EPS);
    for (int64_t i = 0; i < C; i++)
        tri_store(out, out_bf16, i,
                  (tri_load(x, x_bf16, i) - m) * rs * tri_load(w, w_bf16, i) + tri_load(b, b_bf16, i));
    *mean_out = m;
    *rstd_out = rs;
}

TRI_HD void tri_layernorm_row_forward(float *out, float *mean_out, float *rstd_out, const float *x,
                                      const float *w, const float *b, int64_t C)
{
    tri_layernorm_row_forward_mixed(out, 0, mean_out, rstd_out, x, 0, w, 0, b, 0, C);
}

/* dx += d layernorm / dx given dout for one row: the means of dnorm = w * dout and of dnorm * norm
 * are row sums in engine/core/math.h's order. dw and db are the caller's column sums (TRI_COL_CHUNK). */
TRI_HD void tri_layernorm_row_backward_input_mixed(void *dx, int dx_bf16, const void *dout, int dout_bf16,
                                                   const void *x, int x_bf16, const void *w, int w_bf16,
                                                   float mean, float rstd, int64_t C)
{
    float a1[TRI_ROW_SLOTS], a2[TRI_ROW_SLOTS];
    tri_row_slots_zero(a1);
    tri_row_slots_zero(a2);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float norm = (tri_load(x, x_bf16, i0 + s) - mean) * rstd;
            float dnorm = tri_load(w, w_bf16, i0 + s) * tri_load(dout, dout_bf16, i0 + s);
            a1[s] += dnorm;
            a2[s] += dnorm * norm;
        }
    float dnorm_mean = tri_row_slots_combine(a1) / (float)C;
    float dnorm_norm_mean = tri_row_slots_combine(a2) / (float)C;
    for (int64_t i = 0; i < C; i++) {
        float norm = (tri_load(x, x_bf16, i) - mean) * rstd;
        float dnorm = tri_load(w, w_bf16, i) * tri_load(dout, dout_bf16, i);
        tri_store(dx, dx_bf16, i,
                  tri_load(dx, dx_bf16, i) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd);
    }
}

TRI_HD void tri_layernorm_row_backward_input(float *dx, const float *dout, const float *x,
                                             const float *w, float mean, float rstd, int64_t C)
{
    tri_layernorm_row_backward_input_mixed(dx, 0, dout, 0, x, 0, w, 0, mean, rstd, C);
}

/* ---- RMSNorm over one row of C (Zhang & Sennrich 2019; Hugging Face's LlamaRMSNorm): rstd fp32 ----
 * rstd = 1 / sqrt(sum(x^2) / C + eps) with the sum in engine/core/math.h's row order; out = (x * rstd) * w. */
TRI_HD void tri_rmsnorm_row_forward_mixed(void *out, int out_bf16, float *rstd_out, const void *x, int x_bf16,
                                          const void *w, int w_bf16, int64_t C, float eps)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float v = tri_load(x, x_bf16, i0 + s);
            acc[s] += v * v;
        }
    float rs = 1.0f / sqrtf(tri_row_slots_combine(acc) / (float)C + eps);
    for (int64_t i = 0; i < C; i++)
        tri_store(out, out_bf16, i, tri_load(x, x_bf16, i) * rs * tri_load(w, w_bf16, i));
    *rstd_out = rs;
}

/* dx (+)= d rmsnorm / dx given dout for one row: with norm = x rstd and dnorm = w dout,
 * dx = (dnorm - norm * sum(dnorm norm) / C) rstd, the sum in engine/core/math.h's row order, added to
 * dx (accumulate) or written (each element's dout read before its dx is written, so dx may be dout).
 * dw is the caller's column sum of dout * norm (TRI_COL_CHUNK). */
TRI_HD void tri_rmsnorm_row_backward_mixed(void *dx, int dx_bf16, const void *dout, int dout_bf16, const void *x,
                                           int x_bf16, const void *w, int w_bf16, float rstd, int64_t C,
                                           bool accumulate)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float norm = tri_load(x, x_bf16, i0 + s) * rstd;
            acc[s] += tri_load(w, w_bf16, i0 + s) * tri_load(dout, dout_bf16, i0 + s) * norm;
        }
    float dnorm_norm_mean = tri_row_slots_combine(acc) / (float)C;
    for (int64_t i = 0; i < C; i++) {
        float norm = tri_load(x, x_bf16, i) * rstd;
        float dnorm = tri_load(w, w_bf16, i) * tri_load(dout, dout_bf16, i);
        float d = (dnorm - norm * dnorm_norm_mean) * rstd;
        tri_store(dx, dx_bf16, i, accumulate ? tri_load(dx, dx_bf16, i) + d : d);
    }
}

/* dx += the row's input gradient (tri_rmsnorm_row_backward_mixed accumulating). */
TRI_HD void tri_rmsnorm_row_backward_input_mixed(void *dx, int dx_bf16, const void *dout, int dout_bf16,
                                                 const void *x, int x_bf16, const void *w, int w_bf16, float rstd,
                                                 int64_t C)
{
    tri_rmsnorm_row_backward_mixed(dx, dx_bf16, dout, dout_bf16, x, x_bf16, w, w_bf16, rstd, C, true);
}

/* ---- per-head RMSNorm of fused q|k|v rows (Qwen3's q_norm / k_norm; ops_list.h rmsnorm_heads_*) ----
 * Head row r of rows of W columns with H = NH + NH_kv heads of HS: token r / H, head r % H, its values
 * from column (r % H) HS; rstd(N,H) is indexed by r itself. The normalisation is
 * tri_rmsnorm_row_forward_mixed on the head row (C = HS). */
TRI_HD int64_t tri_head_row_at(int64_t r, int64_t H, int64_t W, int64_t HS)
{
    return (r / H) * W + (r % H) * HS;
}

/* The head row of weight-gradient row m of a group of G heads from head h0 (q: h0 = 0, G = NH; k:
 * h0 = NH, G = NH_kv), m = n G + (h - h0): the order the weight gradient's column sums take. */
TRI_HD int64_t tri_head_group_row(int64_t m, int64_t h0, int64_t G, int64_t H)
{
    return (m / G) * H + h0 + m % G;
}

/* dx = the row's input gradient, set (tri_rmsnorm_row_backward_mixed writing; dx may be dout). */
TRI_HD void tri_rmsnorm_row_backward_set_mixed(void *dx, int dx_bf16, const void *dout, int dout_bf16, const void *x,
                                               int x_bf16, const void *w, int w_bf16, float rstd, int64_t C)
{
    tri_rmsnorm_row_backward_mixed(dx, dx_bf16, dout, dout_bf16, x, x_bf16, w, w_bf16, rstd, C, false);
}

/* One term of a per-head weight gradient: column j of weight-gradient row m (tri_head_group_row),
 * x * rstd * dout as rmsnorm's dw terms. */
TRI_HD float tri_rmsnorm_heads_dw_term(const void *dout, int dout_bf16, const void *x, int x_bf16, const float *rstd,
                                       int64_t m, int64_t j, int64_t h0, int64_t G, int64_t H, int64_t W, int64_t HS)
{
    int64_t r = tri_head_group_row(m, h0, G, H), at = tri_head_row_at(r, H, W, HS) + j;
    return tri_load(x, x_bf16, at) * rstd[r] * tri_load(dout, dout_bf16, at);
}

#endif
