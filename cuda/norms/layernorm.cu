/* cuda/norms/layernorm.cu - layernorm forward and backward on the GPU.
 *
 * Fast kernels (the default; cuda/norms/layernorm_fast.cuh, also run on the CPU): a warp per row for the normalisation and the input gradient, whole-sector
 * loads, the row sums in engine/core/math.h's order (cuda/warp.cuh); the parameter gradients dw, db
 * as chunked column sums in two coalesced passes (cuda/matmul/colsum.kern.h) through the device's
 * workspace. Their twins, the simple kernels of cuda/norms/layernorm.kern.h (one thread per row,
 * one per column; tested on the CPU against the CPU backend), run with the device's simple switch
 * on, or for dw, db when the chunk sums do not fit the workspace. Both compute the same additions in
 * the same order: the GPU suite holds them and the CPU backend to the same bits. Every tensor but
 * mean and rstd (fp32) is fp32 or bf16, each as its dtype says. The residual add before a layernorm
 * runs in the layernorm's first pass (add_layernorm_forward_fast_kernel). */
#include "cuda/norms/layernorm.kern.h"
#include "cuda/norms/layernorm_fast.cuh"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                          tri_tensor inp, tri_tensor w, tri_tensor b)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(layernorm_forward_kernel, N, cu->stream, tri_data(out), tri_is_bf16(out),
                                 tri_fp(mean), tri_fp(rstd), tri_data(inp), tri_is_bf16(inp), tri_data(w),
                                 tri_is_bf16(w), tri_data(b), tri_is_bf16(b), N, C);
    return TRI_CUDA_LAUNCH(layernorm_forward_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_data(out), tri_is_bf16(out), tri_fp(mean), tri_fp(rstd), tri_data(inp),
                           tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), tri_data(b), tri_is_bf16(b), N, C);
}

/* res = a + b, then layernorm(res): the fused kernel; its twin is the two simple kernels in turn */
extern "C" int tri_cuda_add_layernorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor mean,
                                              tri_tensor rstd, tri_tensor a, tri_tensor b, tri_tensor w,
                                              tri_tensor bias)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(res), C = tri_tensor_cols(res);
    if (cu->simple) {
        int rc = tri_cuda_add(d, res, a, b);
        return rc ? rc : tri_cuda_layernorm_forward(d, out, mean, rstd, res, w, bias);
    }
    return TRI_CUDA_LAUNCH(add_layernorm_forward_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_data(res), tri_is_bf16(res), tri_data(out), tri_is_bf16(out), tri_fp(mean),
                           tri_fp(rstd), tri_data(a), tri_is_bf16(a), tri_data(b), tri_is_bf16(b), tri_data(w),
                           tri_is_bf16(w), tri_data(bias), tri_is_bf16(bias), N, C);
}

/* dw, db += the column sums: two passes through the workspace when the chunk sums fit it */
static int params_backward(tri_cuda *cu, tri_tensor dw, tri_tensor db, tri_tensor dout, tri_tensor inp,
                           tri_tensor mean, tri_tensor rstd, int64_t N, int64_t C)
{
    int64_t nch = tri_col_chunks(N);
    if (cu->simple || (size_t)(2 * nch * C) * sizeof(float) > cu->workspace_bytes)
        return TRI_CUDA_LAUNCH_N(layernorm_backward_params_kernel, C, cu->stream, tri_data(dw), tri_is_bf16(dw),
                                 tri_data(db), tri_is_bf16(db), tri_data(dout), tri_is_bf16(dout), tri_data(inp),
                                 tri_is_bf16(inp), tri_fp(mean), tri_fp(rstd), N, C);
    float *pw = (float *)cu->workspace, *pb = pw + nch * C;
    int rc = TRI_CUDA_LAUNCH_N(layernorm_params_chunks_kernel, nch * C, cu->stream, pw, pb, tri_data(dout),
                               tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp), tri_fp(mean), tri_fp(rstd), N, C);
    if (!rc) rc = tri_cuda_col_chunks_finish(cu, dw, pw, nch, C);
    if (!rc) rc = tri_cuda_col_chunks_finish(cu, db, pb, nch, C);
    return rc;
}

extern "C" int tri_cuda_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db,
                                           tri_tensor dout, tri_tensor inp, tri_tensor w, tri_tensor mean,
                                           tri_tensor rstd)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    int rc = cu->simple
                 ? TRI_CUDA_LAUNCH_N(layernorm_backward_input_kernel, N, cu->stream, tri_data(dinp),
                                     tri_is_bf16(dinp), tri_data(dout), tri_is_bf16(dout), tri_data(inp),
                                     tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), tri_fp(mean), tri_fp(rstd), N, C)
                 : TRI_CUDA_LAUNCH(layernorm_backward_input_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK,
                                   cu->stream, tri_data(dinp), tri_is_bf16(dinp), tri_data(dout), tri_is_bf16(dout),
                                   tri_data(inp), tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), tri_fp(mean),
                                   tri_fp(rstd), N, C);
    if (!rc) rc = params_backward(cu, dw, db, dout, inp, mean, rstd, N, C);
    return rc;
}
