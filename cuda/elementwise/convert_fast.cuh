/* cuda/elementwise/convert_fast.cuh - the fast fp32 <-> bf16 conversion kernel (CUDA, and C++ on the CPU
 * through cuda/kernels/cuda_emu.h): 8 consecutive elements a thread (cuda/warp.cuh's tri_vec8_*),
 * 16-byte loads and stores when both tensors start 16-byte aligned, one by one otherwise; each
 * element through engine/core/math.h's tri_load / tri_store, which round to nearest even and widen
 * exactly, as the simple kernels of cuda/elementwise/convert.kern.h do: their bits. */
#ifndef TRIDENT_CUDA_ELEMENTWISE_CONVERT_FAST_CUH
#define TRIDENT_CUDA_ELEMENTWISE_CONVERT_FAST_CUH

#include "cuda/warp.cuh"

/* dst = src in dst's storage: math.h's round to nearest even, or the exact widening */
__global__ void convert_fast_kernel(void *dst, int dst_bf16, const void *src, int src_bf16, int64_t n, bool vec)
{
    float v[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(v, src, src_bf16, i, n, vec);
        tri_store8(dst, dst_bf16, i, n, v, vec);
    }
}

#endif
