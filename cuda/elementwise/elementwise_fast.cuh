/* cuda/elementwise/elementwise_fast.cuh - the fast element-wise kernels (CUDA, and C++ on the CPU
 * through cuda/kernels/cuda_emu.h): fill, add, axpy and scale take 8 consecutive elements a
 * thread (cuda/warp.cuh's tri_vec8_*), with 16-byte loads and stores when every tensor starts
 * 16-byte aligned (vec) and one by one otherwise; each element is the simple kernel's expression
 * (cuda/elementwise/elementwise.kern.h), so their bits. out may be a (add) and y is read
 * before it is written (axpy): each thread reads its 8 elements before it writes them. */
#ifndef TRIDENT_CUDA_ELEMENTWISE_ELEMENTWISE_FAST_CUH
#define TRIDENT_CUDA_ELEMENTWISE_ELEMENTWISE_FAST_CUH

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

#endif
