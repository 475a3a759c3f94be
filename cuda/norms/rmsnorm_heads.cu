/* cuda/norms/rmsnorm_heads.cu - per-head RMSNorm of fused q|k|v rows on the GPU (Qwen3's q_norm and
 * k_norm, Hugging Face's Qwen3Attention; ops_list.h rmsnorm_heads_*).
 *
 * As cuda/norms/rmsnorm.cu with a head row (HS values) for a row: a warp per head row
 * (cuda/norms/rmsnorm_heads_fast.cuh), the weight gradients as chunked column sums over each group's
 * head rows in two coalesced passes through the workspace, the other (v) columns copied by a thread
 * per element when out is not inp; the simple kernels of cuda/norms/rmsnorm_heads.kern.h with the
 * device's simple switch (or for the weight gradients when the chunk sums do not fit the workspace).
 * Same additions in the same order: the GPU suite holds both and the CPU backend to the same bits. */
#include "cuda/norms/rmsnorm_heads.kern.h"
#include "cuda/norms/rmsnorm_heads_fast.cuh"
#include "cuda/launch.cuh"

/* dst's columns from `first` on = src's, unless they are one buffer */
static int copy_rest(tri_cuda *cu, tri_tensor dst, tri_tensor src, int64_t first)
{
    int64_t N = tri_tensor_rows(src), W = tri_tensor_cols(src);
    if (dst.data == src.data || W == first)
        return TRI_OK;
    return TRI_CUDA_LAUNCH_N(rmsnorm_heads_copy_rest_kernel, N * (W - first), cu->stream, tri_data(dst),
                             tri_data(src), tri_is_bf16(src), N, W, first);
}

extern "C" int tri_cuda_rmsnorm_heads_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp,
                                              tri_tensor q_w, tri_tensor k_w, int64_t NH, int64_t NH_kv, float eps)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), W = tri_tensor_cols(inp), HS = tri_tensor_numel(q_w), H = NH + NH_kv;
    int rc; /* q_w and k_w share a dtype (the wrapper's check) */
    if (cu->simple)
        rc = TRI_CUDA_LAUNCH_N(rmsnorm_heads_forward_kernel, N * H, cu->stream, tri_data(out), tri_is_bf16(out),
                               tri_fp(rstd), tri_data(inp), tri_is_bf16(inp), tri_data(q_w), tri_data(k_w),
                               tri_is_bf16(q_w), N, W, HS, NH, H, eps);
    else
        rc = TRI_CUDA_LAUNCH(rmsnorm_heads_forward_fast_kernel, tri_warp_grid(N * H), 32 * TRI_ROWS_PER_BLOCK,
                             cu->stream, tri_data(out), tri_is_bf16(out), tri_fp(rstd), tri_data(inp),
                             tri_is_bf16(inp), tri_data(q_w), tri_data(k_w), tri_is_bf16(q_w), N, W, HS, NH, H, eps);
    return rc ? rc : copy_rest(cu, out, inp, H * HS);
}

/* dw += the weight gradient of the group of G heads from h0 */
static int heads_dw(tri_cuda *cu, tri_tensor dw, tri_tensor dout, tri_tensor inp, tri_tensor rstd, int64_t h0,
                    int64_t G, int64_t H)
{
    int64_t N = tri_tensor_rows(inp), W = tri_tensor_cols(inp), HS = tri_tensor_numel(dw);
    int64_t nch = tri_col_chunks(N * G);
    if (cu->simple || (size_t)(nch * HS) * sizeof(float) > cu->workspace_bytes)
        return TRI_CUDA_LAUNCH_N(rmsnorm_heads_backward_params_kernel, HS, cu->stream, tri_data(dw), tri_is_bf16(dw),
                                 tri_data(dout), tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp), tri_fp(rstd), N,
                                 W, HS, h0, G, H);
    float *pw = (float *)cu->workspace;
    int rc = TRI_CUDA_LAUNCH_N(rmsnorm_heads_params_chunks_kernel, nch * HS, cu->stream, pw, tri_data(dout),
                               tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp), tri_fp(rstd), N, W, HS, h0, G, H);
    return rc ? rc : tri_cuda_col_chunks_finish(cu, dw, pw, nch, HS);
}

/* The weight gradients first (they read dout, which dinp may be), then the input gradient. */
extern "C" int tri_cuda_rmsnorm_heads_backward(tri_device *d, tri_tensor dinp, tri_tensor dq_w, tri_tensor dk_w,
                                               tri_tensor dout, tri_tensor inp, tri_tensor q_w, tri_tensor k_w,
                                               tri_tensor rstd, int64_t NH, int64_t NH_kv)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), W = tri_tensor_cols(inp), HS = tri_tensor_numel(q_w), H = NH + NH_kv;
    int rc = heads_dw(cu, dq_w, dout, inp, rstd, 0, NH, H); /* q_w and k_w share a dtype (the wrapper's check) */
    if (!rc) rc = heads_dw(cu, dk_w, dout, inp, rstd, NH, NH_kv, H);
    if (!rc && cu->simple)
        rc = TRI_CUDA_LAUNCH_N(rmsnorm_heads_backward_input_kernel, N * H, cu->stream, tri_data(dinp),
                               tri_is_bf16(dinp), tri_data(dout), tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp),
                               tri_data(q_w), tri_data(k_w), tri_is_bf16(q_w), tri_fp(rstd), N, W, HS, NH, H);
    else if (!rc)
        rc = TRI_CUDA_LAUNCH(rmsnorm_heads_backward_input_fast_kernel, tri_warp_grid(N * H), 32 * TRI_ROWS_PER_BLOCK,
                             cu->stream, tri_data(dinp), tri_is_bf16(dinp), tri_data(dout), tri_is_bf16(dout),
                             tri_data(inp), tri_is_bf16(inp), tri_data(q_w), tri_data(k_w), tri_is_bf16(q_w),
                             tri_fp(rstd), N, W, HS, NH, H);
    return rc ? rc : copy_rest(cu, dinp, dout, H * HS);
}
