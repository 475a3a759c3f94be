/* cuda/elementwise/elementwise.cu - fill, add, axpy and scale on the GPU, each tensor fp32 or bf16.
 *
 * Fast kernels (the default; cuda/elementwise/elementwise_fast.cuh, also run on the CPU): a thread per 8
 * consecutive elements, 16-byte loads and stores when every tensor starts 16-byte aligned, else one
 * by one; each element is the simple kernel's expression, so their bits. The simple kernels
 * (cuda/elementwise/elementwise.kern.h, a thread per element, tested on the CPU against the CPU backend)
 * run with the device's simple switch on. The residual adds of a GPT block are these ops on bf16
 * activations, where 2-byte scalar accesses took ~3x the memory time (the GELU's, before its 16-byte
 * form: the first GPU profile). out may be a (add) or y (axpy): each thread reads its 8 elements
 * before it writes them. */
#include "cuda/elementwise/elementwise.kern.h"
#include "cuda/elementwise/elementwise_fast.cuh"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_fill(tri_device *d, tri_tensor x, float value)
{
    int64_t n = tri_tensor_numel(x);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(fill_kernel, n, cu->stream, tri_data(x), tri_is_bf16(x), value, n);
    return TRI_CUDA_LAUNCH_STRIDED(fill_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(x),
                                   tri_is_bf16(x), value, n, tri_aligned16_host(x.data));
}

extern "C" int tri_cuda_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b)
{
    int64_t n = tri_tensor_numel(out);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(add_kernel, n, cu->stream, tri_data(out), tri_is_bf16(out), tri_data(a), tri_is_bf16(a),
                                 tri_data(b), tri_is_bf16(b), n);
    bool vec = tri_aligned16_host(out.data) && tri_aligned16_host(a.data) && tri_aligned16_host(b.data);
    return TRI_CUDA_LAUNCH_STRIDED(add_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(out),
                                   tri_is_bf16(out), tri_data(a), tri_is_bf16(a), tri_data(b), tri_is_bf16(b), n, vec);
}

extern "C" int tri_cuda_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x)
{
    int64_t n = tri_tensor_numel(y);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(axpy_kernel, n, cu->stream, tri_data(y), tri_is_bf16(y), alpha, tri_data(x),
                                 tri_is_bf16(x), n);
    bool vec = tri_aligned16_host(y.data) && tri_aligned16_host(x.data);
    return TRI_CUDA_LAUNCH_STRIDED(axpy_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(y),
                                   tri_is_bf16(y), alpha, tri_data(x), tri_is_bf16(x), n, vec);
}

extern "C" int tri_cuda_scale(tri_device *d, tri_tensor x, float s)
{
    int64_t n = tri_tensor_numel(x);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(scale_kernel, n, cu->stream, tri_data(x), tri_is_bf16(x), s, n);
    return TRI_CUDA_LAUNCH_STRIDED(scale_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(x),
                                   tri_is_bf16(x), s, n, tri_aligned16_host(x.data));
}
