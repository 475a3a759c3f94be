/* cuda/elementwise.cu - fill, add, axpy and scale on the GPU.
 *
 * Each op launches its simple kernel (cuda/kernels/elementwise.kern.h, tested on the CPU against
 * the CPU backend by tests/test_cuda_kernels_cpu.c) over the tensor's elements on the device's
 * stream, each tensor fp32 or bf16 as its dtype says. These ops are memory bound and the
 * grid-stride form already coalesces, so there is no faster twin. */
#include "cuda/kernels/elementwise.kern.h"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_fill(tri_device *d, tri_tensor x, float value)
{
    int64_t n = tri_tensor_numel(x);
    return TRI_CUDA_LAUNCH_N(fill_kernel, n, tri_cuda_of(d)->stream, tri_data(x), tri_is_bf16(x), value, n);
}

extern "C" int tri_cuda_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b)
{
    int64_t n = tri_tensor_numel(out);
    return TRI_CUDA_LAUNCH_N(add_kernel, n, tri_cuda_of(d)->stream, tri_data(out), tri_is_bf16(out), tri_data(a),
                             tri_is_bf16(a), tri_data(b), tri_is_bf16(b), n);
}

extern "C" int tri_cuda_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x)
{
    int64_t n = tri_tensor_numel(y);
    return TRI_CUDA_LAUNCH_N(axpy_kernel, n, tri_cuda_of(d)->stream, tri_data(y), tri_is_bf16(y), alpha, tri_data(x),
                             tri_is_bf16(x), n);
}

extern "C" int tri_cuda_scale(tri_device *d, tri_tensor x, float s)
{
    int64_t n = tri_tensor_numel(x);
    return TRI_CUDA_LAUNCH_N(scale_kernel, n, tri_cuda_of(d)->stream, tri_data(x), tri_is_bf16(x), s, n);
}
