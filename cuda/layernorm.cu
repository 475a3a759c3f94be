/* cuda/layernorm.cu - layernorm forward and backward on the GPU.
 *
 * The simple kernels of cuda/kernels/layernorm.kern.h, tested on the CPU against the CPU backend:
 * one thread per row for the normalisation and the input gradient (engine/core/math.h's row
 * functions), one thread per column for dw and db, walking the rows in order (deterministic, the
 * CPU backend's order, no atomics). The backward's two launches touch disjoint outputs. Every
 * tensor but mean and rstd (fp32) is fp32 or bf16, each as its dtype says. */
#include "cuda/kernels/layernorm.kern.h"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean,
                                          tri_tensor rstd, tri_tensor inp, tri_tensor w, tri_tensor b)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    return TRI_CUDA_LAUNCH_N(layernorm_forward_kernel, N, tri_cuda_of(d)->stream, tri_data(out), tri_is_bf16(out),
                             tri_fp(mean), tri_fp(rstd), tri_data(inp), tri_is_bf16(inp), tri_data(w),
                             tri_is_bf16(w), tri_data(b), tri_is_bf16(b), N, C);
}

extern "C" int tri_cuda_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw,
                                           tri_tensor db, tri_tensor dout, tri_tensor inp,
                                           tri_tensor w, tri_tensor mean, tri_tensor rstd)
{
    cudaStream_t s = tri_cuda_of(d)->stream;
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    int rc = TRI_CUDA_LAUNCH_N(layernorm_backward_input_kernel, N, s, tri_data(dinp), tri_is_bf16(dinp),
                               tri_data(dout), tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp), tri_data(w),
                               tri_is_bf16(w), tri_fp(mean), tri_fp(rstd), N, C);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(layernorm_backward_params_kernel, C, s, tri_data(dw), tri_is_bf16(dw),
                                    tri_data(db), tri_is_bf16(db), tri_data(dout), tri_is_bf16(dout), tri_data(inp),
                                    tri_is_bf16(inp), tri_fp(mean), tri_fp(rstd), N, C);
    return rc;
}
