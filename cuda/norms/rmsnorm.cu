/* cuda/norms/rmsnorm.cu - RMSNorm forward and backward on the GPU (the Llama family's norm).
 *
 * As cuda/norms/layernorm.cu (cuda/norms/rmsnorm_fast.cuh, also run on the CPU): a warp per row for the normalisation and the input gradient (whole-sector loads,
 * engine/core/math.h's row order across the lanes, cuda/warp.cuh), dw as chunked column sums in two
 * coalesced passes through the workspace; the simple kernels of cuda/norms/rmsnorm.kern.h with
 * the device's simple switch (or for dw when the chunk sums do not fit the workspace). Same additions
 * in the same order: the GPU suite holds both and the CPU backend to the same bits. */
#include "cuda/norms/rmsnorm.kern.h"
#include "cuda/norms/rmsnorm_fast.cuh"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_rmsnorm_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w,
                                        float eps)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(rmsnorm_forward_kernel, N, cu->stream, tri_data(out), tri_is_bf16(out), tri_fp(rstd),
                                 tri_data(inp), tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), N, C, eps);
    return TRI_CUDA_LAUNCH(rmsnorm_forward_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_data(out), tri_is_bf16(out), tri_fp(rstd), tri_data(inp), tri_is_bf16(inp), tri_data(w),
                           tri_is_bf16(w), N, C, eps);
}

/* res = a + b, then rmsnorm(res): the fused kernel; its twin is the two simple kernels in turn */
extern "C" int tri_cuda_add_rmsnorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor rstd,
                                            tri_tensor a, tri_tensor b, tri_tensor w, float eps)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(res), C = tri_tensor_cols(res);
    if (cu->simple) {
        int rc = tri_cuda_add(d, res, a, b);
        return rc ? rc : tri_cuda_rmsnorm_forward(d, out, rstd, res, w, eps);
    }
    return TRI_CUDA_LAUNCH(add_rmsnorm_forward_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_data(res), tri_is_bf16(res), tri_data(out), tri_is_bf16(out), tri_fp(rstd), tri_data(a),
                           tri_is_bf16(a), tri_data(b), tri_is_bf16(b), tri_data(w), tri_is_bf16(w), N, C, eps);
}

extern "C" int tri_cuda_rmsnorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout,
                                         tri_tensor inp, tri_tensor w, tri_tensor rstd)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp), nch = tri_col_chunks(N);
    int rc = cu->simple
                 ? TRI_CUDA_LAUNCH_N(rmsnorm_backward_input_kernel, N, cu->stream, tri_data(dinp), tri_is_bf16(dinp),
                                     tri_data(dout), tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp), tri_data(w),
                                     tri_is_bf16(w), tri_fp(rstd), N, C)
                 : TRI_CUDA_LAUNCH(rmsnorm_backward_input_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK,
                                   cu->stream, tri_data(dinp), tri_is_bf16(dinp), tri_data(dout), tri_is_bf16(dout),
                                   tri_data(inp), tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), tri_fp(rstd), N, C);
    if (rc)
        return rc;
    if (cu->simple || (size_t)(nch * C) * sizeof(float) > cu->workspace_bytes)
        return TRI_CUDA_LAUNCH_N(rmsnorm_backward_params_kernel, C, cu->stream, tri_data(dw), tri_is_bf16(dw),
                                 tri_data(dout), tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp), tri_fp(rstd), N, C);
    float *pw = (float *)cu->workspace;
    rc = TRI_CUDA_LAUNCH_N(rmsnorm_params_chunks_kernel, nch * C, cu->stream, pw, tri_data(dout), tri_is_bf16(dout),
                           tri_data(inp), tri_is_bf16(inp), tri_fp(rstd), N, C);
    if (!rc) rc = tri_cuda_col_chunks_finish(cu, dw, pw, nch, C);
    return rc;
}
