/* cuda/elementwise.cu - fill, add, axpy and scale on the GPU, each tensor fp32 or bf16.
 *
 * Fast kernels (the default): a thread per 8 consecutive elements, 16-byte loads and stores
 * (cuda/warp.cuh tri_load8 / tri_store8) when every tensor starts 16-byte aligned, else one by one;
 * each element is the simple kernel's expression, so their bits. The simple kernels
 * (cuda/kernels/elementwise.kern.h, a thread per element, tested on the CPU against the CPU backend)
 * run with the device's simple switch on. The residual adds of a GPT block are these ops on bf16
 * activations, where 2-byte scalar accesses took ~3x the memory time (the GELU's, before its 16-byte
 * form: the first GPU profile). out may be a (add) or y (axpy): each thread reads its 8 elements
 * before it writes them. */
#include "cuda/kernels/elementwise.kern.h"
#include "cuda/launch.cuh"
#include "cuda/warp.cuh"

__global__ void fill_fast_kernel(void *x, int x_bf16, float value, int64_t n, bool vec)
{
    float v[8] = {value, value, value, value, value, value, value, value};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride())
        tri_store8(x, x_bf16, i, n, v, vec);
}

__global__ void add_fast_kernel(void *out, int out_bf16, const void *a, int a_bf16, const void *b, int b_bf16, int64_t n,
                                bool vec)
{
    float x[8] = {0}, y[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(x, a, a_bf16, i, n, vec);
        tri_load8(y, b, b_bf16, i, n, vec);
        for (int k = 0; k < 8; k++)
            x[k] = x[k] + y[k];
        tri_store8(out, out_bf16, i, n, x, vec);
    }
}

__global__ void axpy_fast_kernel(void *y, int y_bf16, float alpha, const void *x, int x_bf16, int64_t n, bool vec)
{
    float u[8] = {0}, w[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(u, y, y_bf16, i, n, vec);
        tri_load8(w, x, x_bf16, i, n, vec);
        for (int k = 0; k < 8; k++)
            u[k] = u[k] + alpha * w[k];
        tri_store8(y, y_bf16, i, n, u, vec);
    }
}

__global__ void scale_fast_kernel(void *x, int x_bf16, float s, int64_t n, bool vec)
{
    float u[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(u, x, x_bf16, i, n, vec);
        for (int k = 0; k < 8; k++)
            u[k] = u[k] * s;
        tri_store8(x, x_bf16, i, n, u, vec);
    }
}

extern "C" int tri_cuda_fill(tri_device *d, tri_tensor x, float value)
{
    int64_t n = tri_tensor_numel(x);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(fill_kernel, n, cu->stream, tri_data(x), tri_is_bf16(x), value, n);
    return TRI_CUDA_LAUNCH(fill_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(x), tri_is_bf16(x), value,
                           n, tri_aligned16_host(x.data));
}

extern "C" int tri_cuda_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b)
{
    int64_t n = tri_tensor_numel(out);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(add_kernel, n, cu->stream, tri_data(out), tri_is_bf16(out), tri_data(a), tri_is_bf16(a),
                                 tri_data(b), tri_is_bf16(b), n);
    bool vec = tri_aligned16_host(out.data) && tri_aligned16_host(a.data) && tri_aligned16_host(b.data);
    return TRI_CUDA_LAUNCH(add_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(out), tri_is_bf16(out),
                           tri_data(a), tri_is_bf16(a), tri_data(b), tri_is_bf16(b), n, vec);
}

extern "C" int tri_cuda_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x)
{
    int64_t n = tri_tensor_numel(y);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(axpy_kernel, n, cu->stream, tri_data(y), tri_is_bf16(y), alpha, tri_data(x),
                                 tri_is_bf16(x), n);
    bool vec = tri_aligned16_host(y.data) && tri_aligned16_host(x.data);
    return TRI_CUDA_LAUNCH(axpy_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(y), tri_is_bf16(y), alpha,
                           tri_data(x), tri_is_bf16(x), n, vec);
}

extern "C" int tri_cuda_scale(tri_device *d, tri_tensor x, float s)
{
    int64_t n = tri_tensor_numel(x);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(scale_kernel, n, cu->stream, tri_data(x), tri_is_bf16(x), s, n);
    return TRI_CUDA_LAUNCH(scale_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(x), tri_is_bf16(x), s, n,
                           tri_aligned16_host(x.data));
}
