/* cuda/norms/rmsnorm_row.cuh - one RMSNorm row on a warp (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): the normalisation's finish and the input gradient of a row of C values
 * in engine/core/math.h's row order across the lanes (cuda/warp.cuh). The row kernels of
 * rmsnorm_fast.cuh (rows of (N, C)) and rmsnorm_heads_fast.cuh (q and k head rows of a fused q|k|v
 * buffer) are these on their rows, so both give the bits of the CPU backend. */
#ifndef TRIDENT_CUDA_NORMS_RMSNORM_ROW_CUH
#define TRIDENT_CUDA_NORMS_RMSNORM_ROW_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/norms_math.h"

/* The rest of a row's RMSNorm once the lanes hold their slots' sums of squares in r: rstd, then
 * out = (x * rstd) * w. */
__device__ __forceinline__ void rmsnorm_row_finish(void *o, int out_bf16, float *rstd, const void *x, int inp_bf16,
                                                   const void *w, int w_bf16, int64_t row, int64_t C, float eps,
                                                   float r[8])
{
    int lane = tri_lane();
    bool vx = tri_aligned16(x), vo = tri_aligned16(o), vw = tri_aligned16(w);
    float v[8] = {0}, wv[8] = {0};
    float rs = 1.0f / sqrtf(tri_warp_row_sum(r) / (float)C + eps);
    for (int64_t i = tri_row_first(lane); i < C; i += TRI_ROW_SLOTS) {
        tri_row_load8(v, x, inp_bf16, i, C, vx);
        tri_row_load8(wv, w, w_bf16, i, C, vw);
        for (int k = 0; k < 8; k++)
            v[k] = v[k] * rs * wv[k];
        tri_row_store8(o, out_bf16, i, C, v, vo);
    }
    if (lane == 0)
        rstd[row] = rs;
}

/* dx = (accumulate ? dx : 0) + the input gradient of the row x (C) with gradient g and rstd rs:
 * math.h's tri_rmsnorm_row_backward_input_mixed (accumulate) or _set_mixed, the warp's lanes. */
__device__ __forceinline__ void rmsnorm_row_backward_input(void *dx, int dinp_bf16, const void *g, int dout_bf16,
                                                           const void *x, int inp_bf16, const void *w, int w_bf16,
                                                           float rs, int64_t C, bool accumulate)
{
    int lane = tri_lane();
    bool vx = tri_aligned16(x), vg = tri_aligned16(g), vw = tri_aligned16(w), vd = tri_aligned16(dx);
    float a[8] = {0}, xv[8] = {0}, gv[8] = {0}, wv[8] = {0}, dv[8] = {0};
    for (int64_t i = tri_row_first(lane); i < C; i += TRI_ROW_SLOTS) {
        tri_row_load8(xv, x, inp_bf16, i, C, vx);
        tri_row_load8(gv, g, dout_bf16, i, C, vg);
        tri_row_load8(wv, w, w_bf16, i, C, vw);
        for (int k = 0; k < 8 && i + tri_row_at(k) < C; k++) {
            float norm = xv[k] * rs;
            a[k] += wv[k] * gv[k] * norm;
        }
    }
    float dnorm_norm_mean = tri_warp_row_sum(a) / (float)C;
    for (int64_t i = tri_row_first(lane); i < C; i += TRI_ROW_SLOTS) {
        tri_row_load8(xv, x, inp_bf16, i, C, vx);
        tri_row_load8(gv, g, dout_bf16, i, C, vg);
        tri_row_load8(wv, w, w_bf16, i, C, vw);
        if (accumulate)
            tri_row_load8(dv, dx, dinp_bf16, i, C, vd);
        for (int k = 0; k < 8; k++) {
            float norm = xv[k] * rs;
            float dnorm = wv[k] * gv[k];
            float d = (dnorm - norm * dnorm_norm_mean) * rs;
            dv[k] = accumulate ? dv[k] + d : d;
        }
        tri_row_store8(dx, dinp_bf16, i, C, dv, vd);
    }
}

#endif
