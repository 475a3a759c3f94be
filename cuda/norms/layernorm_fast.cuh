/* cuda/norms/layernorm_fast.cuh - the fast layernorm kernels (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): a warp per row for the normalisation and the input gradient, loads
 * in whole sectors, the row sums in engine/core/math.h's order across the lanes (cuda/warp.cuh): the bits of the
 * simple kernels of cuda/norms/layernorm.kern.h and of the CPU backend. */
#ifndef TRIDENT_CUDA_NORMS_LAYERNORM_FAST_CUH
#define TRIDENT_CUDA_NORMS_LAYERNORM_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/norms_math.h"

/* The rest of a row's layernorm once its mean m is known (the lane's slots of the row x, fp32 or
 * bf16): the variance's sum across the lanes, then out = (x - m) * rstd * w + b, and mean, rstd. */
__device__ __forceinline__ void layernorm_row_finish(void *o, int out_bf16, float *mean, float *rstd, const void *x,
                                                     int inp_bf16, const void *w, int w_bf16, const void *b,
                                                     int b_bf16, int64_t row, int64_t C, float m)
{
    int lane = tri_lane();
    bool vx = tri_aligned16(x), vo = tri_aligned16(o), vw = tri_aligned16(w), vb = tri_aligned16(b);
    float r[8] = {0}, v[8] = {0}, wv[8] = {0}, bv[8] = {0};
    for (int64_t i = tri_row_first(lane); i < C; i += TRI_ROW_SLOTS) {
        tri_row_load8(v, x, inp_bf16, i, C, vx);
        for (int k = 0; k < 8 && i + tri_row_at(k) < C; k++) {
            float dx = v[k] - m;
            r[k] += dx * dx;
        }
    }
    float var = tri_warp_row_sum(r) / (float)C;
    float rs = 1.0f / sqrtf(var + TRI_LN_EPS);
    for (int64_t i = tri_row_first(lane); i < C; i += TRI_ROW_SLOTS) {
        tri_row_load8(v, x, inp_bf16, i, C, vx);
        tri_row_load8(wv, w, w_bf16, i, C, vw);
        tri_row_load8(bv, b, b_bf16, i, C, vb);
        for (int k = 0; k < 8; k++)
            v[k] = (v[k] - m) * rs * wv[k] + bv[k];
        tri_row_store8(o, out_bf16, i, C, v, vo);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* out(N,C) = layernorm(inp) * w + b, mean(N), rstd(N): a warp per row (math.h's
 * tri_layernorm_row_forward_mixed with its sums across the lanes) */
__global__ void layernorm_forward_fast_kernel(void *out, int out_bf16, float *mean, float *rstd, const void *inp,
                                              int inp_bf16, const void *w, int w_bf16, const void *b, int b_bf16,
                                              int64_t N, int64_t C)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    const void *x = tri_at(inp, inp_bf16, row * C);
    float r[8] = {0};
    tri_row_sums(r, x, inp_bf16, C, false);
    float m = tri_warp_row_sum(r) / (float)C;
    layernorm_row_finish(tri_at(out, out_bf16, row * C), out_bf16, mean, rstd, x, inp_bf16, w, w_bf16, b, b_bf16,
                         row, C, m);
}

/* res(N,C) = a + b, then out, mean, rstd = layernorm(res) * w + bias: one warp a row, the add in the
 * pass that sums the mean; the later passes read back res, which each lane wrote itself (its own
 * slots). The bits of add_fast_kernel then layernorm_forward_fast_kernel. res may alias a or b. */
__global__ void add_layernorm_forward_fast_kernel(void *res, int res_bf16, void *out, int out_bf16, float *mean,
                                                  float *rstd, const void *a, int a_bf16, const void *b, int b_bf16,
                                                  const void *w, int w_bf16, const void *bias, int bias_bf16,
                                                  int64_t N, int64_t C)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    void *x = tri_at(res, res_bf16, row * C);
    float r[8] = {0};
    tri_residual_row_sums(r, x, res_bf16, tri_at(a, a_bf16, row * C), a_bf16, tri_at(b, b_bf16, row * C), b_bf16, C,
                          false);
    float m = tri_warp_row_sum(r) / (float)C;
    layernorm_row_finish(tri_at(out, out_bf16, row * C), out_bf16, mean, rstd, x, res_bf16, w, w_bf16, bias,
                         bias_bf16, row, C, m);
}

/* dinp(N,C) += the input gradient: a warp per row (math.h's tri_layernorm_row_backward_input_mixed) */
__global__ void layernorm_backward_input_fast_kernel(void *dinp, int dinp_bf16, const void *dout, int dout_bf16,
                                                     const void *inp, int inp_bf16, const void *w, int w_bf16,
                                                     const float *mean, const float *rstd, int64_t N, int64_t C)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    int lane = tri_lane();
    const void *x = tri_at(inp, inp_bf16, row * C), *g = tri_at(dout, dout_bf16, row * C);
    void *dx = tri_at(dinp, dinp_bf16, row * C);
    bool vx = tri_aligned16(x), vg = tri_aligned16(g), vw = tri_aligned16(w), vd = tri_aligned16(dx);
    float mu = mean[row], rs = rstd[row];
    float a1[8] = {0}, a2[8] = {0}, xv[8] = {0}, gv[8] = {0}, wv[8] = {0}, dv[8] = {0};
    for (int64_t i = tri_row_first(lane); i < C; i += TRI_ROW_SLOTS) {
        tri_row_load8(xv, x, inp_bf16, i, C, vx);
        tri_row_load8(gv, g, dout_bf16, i, C, vg);
        tri_row_load8(wv, w, w_bf16, i, C, vw);
        for (int k = 0; k < 8 && i + tri_row_at(k) < C; k++) {
            float norm = (xv[k] - mu) * rs;
            float dnorm = wv[k] * gv[k];
            a1[k] += dnorm;
            a2[k] += dnorm * norm;
        }
    }
    float dnorm_mean = tri_warp_row_sum(a1) / (float)C;
    float dnorm_norm_mean = tri_warp_row_sum(a2) / (float)C;
    for (int64_t i = tri_row_first(lane); i < C; i += TRI_ROW_SLOTS) {
        tri_row_load8(xv, x, inp_bf16, i, C, vx);
        tri_row_load8(gv, g, dout_bf16, i, C, vg);
        tri_row_load8(wv, w, w_bf16, i, C, vw);
        tri_row_load8(dv, dx, dinp_bf16, i, C, vd);
        for (int k = 0; k < 8; k++) {
            float norm = (xv[k] - mu) * rs;
            float dnorm = wv[k] * gv[k];
            dv[k] = dv[k] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
        tri_row_store8(dx, dinp_bf16, i, C, dv, vd);
    }
}

#endif
