/* cuda/gelu.cu - GELU forward and backward on the GPU: the simple kernels of
 * cuda/kernels/gelu.kern.h (engine/math.h's tri_gelu / tri_gelu_grad per element, tested on the CPU
 * against the CPU backend), one thread per element. Memory bound; no faster twin needed. */
#include "cuda/kernels/gelu.kern.h"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp)
{
    int64_t n = tri_tensor_numel(inp);
    return TRI_CUDA_LAUNCH_N(gelu_forward_kernel, n, tri_cuda_of(d)->stream, tri_fp(out), tri_fp(inp), n);
}

extern "C" int tri_cuda_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    int64_t n = tri_tensor_numel(inp);
    return TRI_CUDA_LAUNCH_N(gelu_backward_kernel, n, tri_cuda_of(d)->stream, tri_fp(dinp), tri_fp(inp),
                             tri_fp(dout), n);
}
