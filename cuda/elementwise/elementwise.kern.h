/* cuda/elementwise/elementwise.kern.h - simple kernels of fill, add, axpy and scale (CUDA and C).
 *
 * One thread per element in a grid-stride loop; the arithmetic is the CPU backend's
 * (engine/device/ops/elementwise_cpu.c) expression for expression, in fp32 whatever the storage: every array is
 * fp32 or bf16 as its `_bf16` flag says, read through tri_load and written through tri_store
 * (engine/core/math.h), so each element is rounded once, as the CPU backend's widened path does. out
 * may alias a or b in add_kernel (then with the same dtype): each element is read before it is
 * written by the same thread. */
#ifndef TRIDENT_CUDA_ELEMENTWISE_ELEMENTWISE_KERN_H
#define TRIDENT_CUDA_ELEMENTWISE_ELEMENTWISE_KERN_H

#include "cuda/kernels/shim.h"

/* x[i] = value, i < n */
TRI_KERNEL fill_kernel(void *x, int x_bf16, float value, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(x, x_bf16, i, value);
}

/* out[i] = a[i] + b[i] */
TRI_KERNEL add_kernel(void *out, int out_bf16, const void *a, int a_bf16, const void *b, int b_bf16,
                      int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(out, out_bf16, i, tri_load(a, a_bf16, i) + tri_load(b, b_bf16, i));
}

/* y[i] += alpha * x[i] */
TRI_KERNEL axpy_kernel(void *y, int y_bf16, float alpha, const void *x, int x_bf16, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(y, y_bf16, i, tri_load(y, y_bf16, i) + alpha * tri_load(x, x_bf16, i));
}

/* x[i] *= s */
TRI_KERNEL scale_kernel(void *x, int x_bf16, float s, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(x, x_bf16, i, tri_load(x, x_bf16, i) * s);
}

#endif
