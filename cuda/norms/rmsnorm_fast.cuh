/* cuda/norms/rmsnorm_fast.cuh - the fast RMSNorm kernels (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): a warp per row for the normalisation and the input gradient, loads
 * in whole sectors, engine/core/math.h's row order across the lanes (cuda/warp.cuh): the bits of the simple
 * kernels of cuda/norms/rmsnorm.kern.h and of the CPU backend. */
#ifndef TRIDENT_CUDA_NORMS_RMSNORM_FAST_CUH
#define TRIDENT_CUDA_NORMS_RMSNORM_FAST_CUH

#include "cuda/norms/rmsnorm_row.cuh"

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
    rmsnorm_row_backward_input(tri_at(dinp, dinp_bf16, row * C), dinp_bf16, tri_at(dout, dout_bf16, row * C), dout_bf16,
                               tri_at(inp, inp_bf16, row * C), inp_bf16, w, w_bf16, rstd[row], C, true);
}

#endif
