/* cuda/kernels/elementwise.kern.h - simple kernels of fill, add, axpy and scale (CUDA and C).
 *
 * One thread per element in a grid-stride loop; the arithmetic is the CPU backend's
 * (engine/device_cpu.c) expression for expression. out may alias a or b in add_kernel: each
 * element is read before it is written by the same thread. */
#ifndef TRIDENT_CUDA_KERNELS_ELEMENTWISE_KERN_H
#define TRIDENT_CUDA_KERNELS_ELEMENTWISE_KERN_H

#include "cuda/kernels/shim.h"

/* x[i] = value, i < n */
TRI_KERNEL fill_kernel(float *x, float value, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        x[i] = value;
}

/* out[i] = a[i] + b[i] */
TRI_KERNEL add_kernel(float *out, const float *a, const float *b, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        out[i] = a[i] + b[i];
}

/* y[i] += alpha * x[i] */
TRI_KERNEL axpy_kernel(float *y, float alpha, const float *x, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        y[i] += alpha * x[i];
}

/* x[i] *= s */
TRI_KERNEL scale_kernel(float *x, float s, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        x[i] *= s;
}

#endif
