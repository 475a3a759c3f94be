/* cuda/activations/gelu.cu - GELU forward and backward on the GPU, each tensor fp32 or bf16.
 *
 * Fast kernels (the default; cuda/activations/gelu_fast.cuh, also run on the CPU): a thread per 8 consecutive
 * elements, 16-byte loads and stores (cuda/warp.cuh tri_load8 / tri_store8) when every tensor starts 16-byte
 * aligned, else one by one; each element is engine/device/ops/activations_math.h's tri_gelu / tri_gelu_grad,
 * so the bits are the simple kernels' (cuda/activations/gelu.kern.h, a thread per element, tested on the CPU
 * against the CPU backend), which run with the device's simple switch on. The first GPU profile had the
 * scalar 2-byte loads of the bf16 MLP activations at ~3x the memory time. */
#include "cuda/activations/gelu.kern.h"
#include "cuda/activations/gelu_fast.cuh"
#include "cuda/launch.cuh"
#include "engine/device/ops/activations_math.h"

extern "C" int tri_cuda_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(inp);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(gelu_forward_kernel, n, cu->stream, tri_data(out), tri_is_bf16(out), tri_data(inp),
                                 tri_is_bf16(inp), n);
    bool vec = tri_aligned16_host(out.data) && tri_aligned16_host(inp.data);
    return TRI_CUDA_LAUNCH_STRIDED(gelu_forward_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(out),
                                   tri_is_bf16(out), tri_data(inp), tri_is_bf16(inp), n, vec);
}

extern "C" int tri_cuda_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(inp);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(gelu_backward_kernel, n, cu->stream, tri_data(dinp), tri_is_bf16(dinp), tri_data(inp),
                                 tri_is_bf16(inp), tri_data(dout), tri_is_bf16(dout), n);
    bool vec = tri_aligned16_host(dinp.data) && tri_aligned16_host(inp.data) && tri_aligned16_host(dout.data);
    return TRI_CUDA_LAUNCH_STRIDED(gelu_backward_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(dinp),
                                   tri_is_bf16(dinp), tri_data(inp), tri_is_bf16(inp), tri_data(dout),
                                   tri_is_bf16(dout), n, vec);
}
