/* cuda/gelu.cu - GELU forward and backward on the GPU, each tensor fp32 or bf16.
 *
 * Fast kernels (the default): a thread per 8 consecutive elements, 16-byte loads and stores
 * (cuda/warp.cuh tri_load8 / tri_store8) when every tensor starts 16-byte aligned, else one by one;
 * each element is engine/core/math.h's tri_gelu / tri_gelu_grad, so the bits are the simple kernels'
 * (cuda/kernels/gelu.kern.h, a thread per element, tested on the CPU against the CPU backend), which
 * run with the device's simple switch on. The first GPU profile had the scalar 2-byte loads of the
 * bf16 MLP activations at ~3x the memory time. */
#include "cuda/kernels/gelu.kern.h"
#include "cuda/launch.cuh"
#include "cuda/warp.cuh"

__global__ void gelu_forward_fast_kernel(void *out, int out_bf16, const void *inp, int inp_bf16, int64_t n, bool vec)
{
    float v[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(v, inp, inp_bf16, i, n, vec);
        for (int k = 0; k < 8; k++)
            v[k] = tri_gelu(v[k]);
        tri_store8(out, out_bf16, i, n, v, vec);
    }
}

__global__ void gelu_backward_fast_kernel(void *dinp, int dinp_bf16, const void *inp, int inp_bf16, const void *dout,
                                          int dout_bf16, int64_t n, bool vec)
{
    float x[8] = {0}, g[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(x, inp, inp_bf16, i, n, vec);
        tri_load8(g, dout, dout_bf16, i, n, vec);
        for (int k = 0; k < 8; k++)
            x[k] = tri_gelu_grad(x[k]) * g[k];
        tri_store8(dinp, dinp_bf16, i, n, x, vec);
    }
}

extern "C" int tri_cuda_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(inp);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(gelu_forward_kernel, n, cu->stream, tri_data(out), tri_is_bf16(out), tri_data(inp),
                                 tri_is_bf16(inp), n);
    bool vec = tri_aligned16_host(out.data) && tri_aligned16_host(inp.data);
    return TRI_CUDA_LAUNCH(gelu_forward_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream,
                           tri_data(out), tri_is_bf16(out), tri_data(inp), tri_is_bf16(inp), n, vec);
}

extern "C" int tri_cuda_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(inp);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(gelu_backward_kernel, n, cu->stream, tri_data(dinp), tri_is_bf16(dinp), tri_data(inp),
                                 tri_is_bf16(inp), tri_data(dout), tri_is_bf16(dout), n);
    bool vec = tri_aligned16_host(dinp.data) && tri_aligned16_host(inp.data) && tri_aligned16_host(dout.data);
    return TRI_CUDA_LAUNCH(gelu_backward_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream,
                           tri_data(dinp), tri_is_bf16(dinp), tri_data(inp), tri_is_bf16(inp), tri_data(dout),
                           tri_is_bf16(dout), n, vec);
}
