/* cuda/gelu.cu - GELU forward and backward on the GPU: the simple kernels of
 * cuda/kernels/gelu.kern.h (engine/core/math.h's tri_gelu / tri_gelu_grad per element, tested on the CPU
 * against the CPU backend), one thread per element, each tensor fp32 or bf16. Memory bound; no
 * faster twin needed. */
#include "cuda/kernels/gelu.kern.h"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp)
{
    int64_t n = tri_tensor_numel(inp);
    return TRI_CUDA_LAUNCH_N(gelu_forward_kernel, n, tri_cuda_of(d)->stream, tri_data(out), tri_is_bf16(out),
                             tri_data(inp), tri_is_bf16(inp), n);
}

extern "C" int tri_cuda_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    int64_t n = tri_tensor_numel(inp);
    return TRI_CUDA_LAUNCH_N(gelu_backward_kernel, n, tri_cuda_of(d)->stream, tri_data(dinp), tri_is_bf16(dinp),
                             tri_data(inp), tri_is_bf16(inp), tri_data(dout), tri_is_bf16(dout), n);
}
