/* cuda/norms/rmsnorm_heads_fast.cuh - the fast per-head RMSNorm kernels (CUDA, and C++ on the CPU
 * through cuda/kernels/cuda_emu.h): a warp per head row (HS values of one q or k head of one token)
 * for the normalisation and the input gradient, loads in whole sectors where aligned, math.h's row
 * order across the lanes (cuda/warp.cuh): the bits of cuda/norms/rmsnorm_heads.kern.h's simple
 * kernels and of the CPU backend: rmsnorm_row.cuh's row (the one rmsnorm_fast.cuh runs) on each head
 * row. */
#ifndef TRIDENT_CUDA_NORMS_RMSNORM_HEADS_FAST_CUH
#define TRIDENT_CUDA_NORMS_RMSNORM_HEADS_FAST_CUH

#include "cuda/norms/rmsnorm_row.cuh"

/* out's head rows = rmsnorm(inp's head rows), rstd(N H): a warp per head row */
__global__ void rmsnorm_heads_forward_fast_kernel(void *out, int out_bf16, float *rstd, const void *inp, int inp_bf16,
                                                  const void *q_w, const void *k_w, int w_bf16, int64_t N, int64_t W,
                                                  int64_t HS, int64_t NH, int64_t H, float eps)
{
    int64_t r = tri_warp_row();
    if (r >= N * H)
        return;
    int64_t at = tri_head_row_at(r, H, W, HS);
    const void *x = tri_at(inp, inp_bf16, at);
    float s[8] = {0};
    tri_row_sums(s, x, inp_bf16, HS, true);
    rmsnorm_row_finish(tri_at(out, out_bf16, at), out_bf16, rstd, x, inp_bf16, r % H < NH ? q_w : k_w, w_bf16, r, HS,
                       eps, s);
}

/* dinp's head rows = the input gradient (set; dinp may be dout): math.h's
 * tri_rmsnorm_row_backward_set_mixed, a warp per head row */
__global__ void rmsnorm_heads_backward_input_fast_kernel(void *dinp, int dinp_bf16, const void *dout, int dout_bf16,
                                                         const void *inp, int inp_bf16, const void *q_w,
                                                         const void *k_w, int w_bf16, const float *rstd, int64_t N,
                                                         int64_t W, int64_t HS, int64_t NH, int64_t H)
{
    int64_t r = tri_warp_row();
    if (r >= N * H)
        return;
    int64_t at = tri_head_row_at(r, H, W, HS);
    rmsnorm_row_backward_input(tri_at(dinp, dinp_bf16, at), dinp_bf16, tri_at(dout, dout_bf16, at), dout_bf16,
                               tri_at(inp, inp_bf16, at), inp_bf16, r % H < NH ? q_w : k_w, w_bf16, rstd[r], HS, false);
}

#endif
