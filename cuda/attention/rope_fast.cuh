/* cuda/attention/rope_fast.cuh - the fast rotary embedding kernel (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h), in place: a block per row of x(N, W) (grid-stride over rows), a thread
 * per 8 consecutive frequencies of one head (the pairs i and i + half of its 2 * half columns),
 * 16-byte accesses when the head's halves and the tables' row start 16-byte aligned (half a
 * multiple of 8, as every real head size gives), one by one otherwise. The position, the head and the
 * frequency come from the row and the thread, not from a division of a flat index per element (the
 * simple kernel of cuda/attention/rope.kern.h); each pair is engine/device/ops/attention_math.h's tri_rope_pair
 * or tri_rope_pair_backward with the same table entries, so its bits. */
#ifndef TRIDENT_CUDA_ATTENTION_ROPE_FAST_CUH
#define TRIDENT_CUDA_ATTENTION_ROPE_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/attention_math.h"
#include "engine/device/ops/positions_math.h"
__global__ void rope_fast_kernel(void *x, int x_bf16, const float *cos, const float *sin, int64_t N, int64_t W,
                                 int64_t n_heads, int64_t half, int64_t T, int64_t row0, int cp, int cp_rank,
                                 int backward)
{
    int64_t groups = (half + 7) / 8; /* 8-frequency groups of a head */
    float a[8] = {0}, b[8] = {0}, c[8] = {0}, s[8] = {0};
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {        int64_t pos = tri_seq_position(T, row0 + n, cp, cp_rank); /* positions_math.h: both backends */
        const float *cr = cos + pos * half, *sr = sin + pos * half;
        bool vt = tri_aligned16(cr) && tri_aligned16(sr);
        for (int64_t j = threadIdx.x; j < n_heads * groups; j += blockDim.x) {
            int64_t h = j / groups, i = 8 * (j % groups);
            void *lo = tri_at(x, x_bf16, n * W + h * 2 * half), *hi = tri_at(x, x_bf16, n * W + h * 2 * half + half);
            bool vec = vt && tri_aligned16(lo) && tri_aligned16(hi);
            tri_load8(a, lo, x_bf16, i, half, vec);
            tri_load8(b, hi, x_bf16, i, half, vec);
            tri_load8(c, cr, 0, i, half, vec);
            tri_load8(s, sr, 0, i, half, vec);
            for (int k = 0; k < 8; k++) {
                if (backward)
                    tri_rope_pair_backward(&a[k], &b[k], c[k], s[k]);
                else
                    tri_rope_pair(&a[k], &b[k], c[k], s[k]);
            }
            tri_store8(lo, x_bf16, i, half, a, vec);
            tri_store8(hi, x_bf16, i, half, b, vec);
        }
    }
}

#endif
