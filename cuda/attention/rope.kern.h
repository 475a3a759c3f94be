/* cuda/attention/rope.kern.h - rotary position embedding (CUDA and C): a thread per rotated pair
 * (row n, head h, frequency i), in place, engine/device/ops/attention_math.h's tri_rope_pair / _backward with
 * the cos and sin tables (positions, HS/2) fp32 at position tri_seq_position(T, row0 + n, cp, cp_rank)
 * (engine/device/ops/positions_math.h; (row0 + n) % T at cp 1): the twin of
 * cuda/attention/rope_fast.cuh's block-per-row kernel. */
#ifndef TRIDENT_CUDA_ATTENTION_ROPE_KERN_H
#define TRIDENT_CUDA_ATTENTION_ROPE_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/attention_math.h"
#include "engine/device/ops/positions_math.h"
TRI_KERNEL rope_kernel(void *x, int x_bf16, const float *cos, const float *sin, int64_t N, int64_t W,
                       int64_t n_heads, int64_t half, int64_t T, int64_t row0, int cp, int cp_rank, int backward)
{
    int64_t pairs = n_heads * half;
    for (int64_t e = TRI_GLOBAL_ID; e < N * pairs; e += TRI_GLOBAL_STRIDE) {
        int64_t n = e / pairs, h = e % pairs / half, i = e % half;
        int64_t pos = tri_seq_position(T, row0 + n, cp, cp_rank);
        int64_t at = n * W + h * 2 * half + i;
        float a = tri_load(x, x_bf16, at), b = tri_load(x, x_bf16, at + half);
        if (backward)
            tri_rope_pair_backward(&a, &b, cos[pos * half + i], sin[pos * half + i]);
        else
            tri_rope_pair(&a, &b, cos[pos * half + i], sin[pos * half + i]);
        tri_store(x, x_bf16, at, a);
        tri_store(x, x_bf16, at + half, b);
    }
}

#endif
