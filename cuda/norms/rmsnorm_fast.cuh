/* cuda/norms/rmsnorm_fast.cuh - the fast RMSNorm kernels (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): a warp per row for the normalisation and the input gradient, loads
 * in whole sectors, engine/core/math.h's row order across the lanes (cuda/warp.cuh): the bits of the simple
 * kernels of cuda/norms/rmsnorm.kern.h and of the CPU backend. */
#ifndef TRIDENT_CUDA_NORMS_RMSNORM_FAST_CUH
#define TRIDENT_CUDA_NORMS_RMSNORM_FAST_CUH

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

/* out(N,C) = (inp * rstd) * w, rstd(N): math.h's tri_rmsnorm_row_forward_mixed, a warp per row */
__global__ void rmsnorm_forward_fast_kernel(void *out, int out_bf16, float *rstd, const void *inp, int inp_bf16,
                                            const void *w, int w_bf16, int64_t N, int64_t C, float eps)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    const void *x = tri_at(inp, inp_bf16, row * C);
    float r[8] = {0};
    tri_row_sums(r, x, inp_bf16, C, true);
    rmsnorm_row_finish(tri_at(out, out_bf16, row * C), out_bf16, rstd, x, inp_bf16, w, w_bf16, row, C, eps, r);
}

/* res(N,C) = a + b, then out, rstd = rmsnorm(res) * w: one warp a row, the add in the pass that sums
 * the squares (warp.cuh's tri_residual_row_sums); the bits of add_fast_kernel then
 * rmsnorm_forward_fast_kernel. res may alias a or b. */
__global__ void add_rmsnorm_forward_fast_kernel(void *res, int res_bf16, void *out, int out_bf16, float *rstd,
                                                const void *a, int a_bf16, const void *b, int b_bf16, const void *w,
                                                int w_bf16, int64_t N, int64_t C, float eps)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    void *x = tri_at(res, res_bf16, row * C);
    float r[8] = {0};
    tri_residual_row_sums(r, x, res_bf16, tri_at(a, a_bf16, row * C), a_bf16, tri_at(b, b_bf16, row * C), b_bf16, C,
                          true);
    rmsnorm_row_finish(tri_at(out, out_bf16, row * C), out_bf16, rstd, x, res_bf16, w, w_bf16, row, C, eps, r);
}

/* dinp(N,C) += the input gradient: math.h's tri_rmsnorm_row_backward_input_mixed, a warp per row */
__global__ void rmsnorm_backward_input_fast_kernel(void *dinp, int dinp_bf16, const void *dout, int dout_bf16,
                                                   const void *inp, int inp_bf16, const void *w, int w_bf16,
                                                   const float *rstd, int64_t N, int64_t C)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    int lane = tri_lane();
    const void *x = tri_at(inp, inp_bf16, row * C), *g = tri_at(dout, dout_bf16, row * C);
    void *dx = tri_at(dinp, dinp_bf16, row * C);
    bool vx = tri_aligned16(x), vg = tri_aligned16(g), vw = tri_aligned16(w), vd = tri_aligned16(dx);
    float rs = rstd[row];
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
        tri_row_load8(dv, dx, dinp_bf16, i, C, vd);
        for (int k = 0; k < 8; k++) {
            float norm = xv[k] * rs;
            float dnorm = wv[k] * gv[k];
            dv[k] = dv[k] + (dnorm - norm * dnorm_norm_mean) * rs;
        }
        tri_row_store8(dx, dinp_bf16, i, C, dv, vd);
    }
}

#endif
