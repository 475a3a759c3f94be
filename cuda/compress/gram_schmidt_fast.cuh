/* cuda/compress/gram_schmidt_fast.cuh - PowerSGD's Gram-Schmidt (the orthonormalize_rows op) as one
 * block of TRI_GS_SLOTS threads a matrix (CUDA, and C++ on the CPU through cuda/kernels/cuda_emu.h),
 * in engine/device/ops/compress_math.h's order, so the CPU's bits: thread t owns slot t of every dot
 * product (elements t, t + TRI_GS_SLOTS, ... in index order, coalesced across the block), the slots
 * are added in shared memory by tri_slots_halve's halving (cuda/kernels/block_reduce.cuh), and each row update and scaling is the CPU's
 * expression on thread t's own elements. A thread reads back only elements it wrote itself, so the
 * only barriers are the shared sums'. The simple twin is compress.kern.h's one thread a matrix; the
 * block form does r (r + 1) / 2 dot products of n / TRI_GS_SLOTS steps a thread instead of n. */
#ifndef TRIDENT_CUDA_COMPRESS_GRAM_SCHMIDT_FAST_CUH
#define TRIDENT_CUDA_COMPRESS_GRAM_SCHMIDT_FAST_CUH

#include <math.h>
#include <stdint.h>

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/kernels/shim.h"
#include "engine/device/ops/compress_math.h"

/* The sum of the block's slots (thread t's acc in slot t) by tri_slots_halve's steps
 * (cuda/kernels/block_reduce.cuh), returned to every thread; part is free again on return. */
__device__ __forceinline__ double tri_gs_block_total(double *part, double acc, int t)
{
    part[t] = acc;
    return tri_block_halve(part, t, TRI_GS_SLOTS);
}

/* x(r, n): its rows orthonormalised (tri_orthonormalize_rows). One block of TRI_GS_SLOTS threads. */
__global__ void __launch_bounds__(TRI_GS_SLOTS) orthonormalize_rows_fast_kernel(float *x, int64_t r, int64_t n)
{
    __shared__ double part[TRI_GS_SLOTS]; /* 8 KiB */
    const int t = (int)threadIdx.x;
    for (int64_t j = 0; j < r; j++) {
        float *xj = x + j * n;
        for (int64_t k = 0; k < j; k++) {
            const float *xk = x + k * n;
            double acc = 0.0;
            for (int64_t i = t; i < n; i += TRI_GS_SLOTS)
                acc += (double)xj[i] * (double)xk[i];
            float d = (float)tri_gs_block_total(part, acc, t);
            for (int64_t i = t; i < n; i += TRI_GS_SLOTS)
                xj[i] = xj[i] - d * xk[i];
        }
        double acc = 0.0;
        for (int64_t i = t; i < n; i += TRI_GS_SLOTS)
            acc += (double)xj[i] * (double)xj[i];
        float inv = tri_gs_inv_norm(tri_gs_block_total(part, acc, t));
        for (int64_t i = t; i < n; i += TRI_GS_SLOTS)
            xj[i] = xj[i] * inv;
    }
}

#endif
