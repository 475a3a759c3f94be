/* cuda/compress/compress_fast.cuh - the fast forms of 1bit's and qsgd's packing (CUDA, and C++ on the
 * CPU through cuda/kernels/cuda_emu.h), each the simple twin's words (cuda/compress/compress.kern.h),
 * so the CPU's bits:
 *   - the block scales, a warp a block: lane l adds the terms of elements lo + l, lo + l + 32, ...
 *     (engine/device/ops/compress_math.h's slot l: coalesced, 128 bytes a step), then shuffles xor
 *     16, 8, 4, 2, 1 add the slots in tri_compress_block_scale's halving order (lane 0's sums are the
 *     halving's; IEEE addition commutes, so every lane's total is the same), and lane 0 writes the
 *     scale (the twin: a thread a block walking its 256 elements, 1 KiB apart across a warp);
 *   - 1bit's sign words, a warp 32 words: for each of the 32 words a ballot of the warp's 32
 *     consecutive elements (tri_compress_code: x < 0), lane j keeping word j's, then one coalesced
 *     store of the 32 words (the twin: a thread a word reading its 32 elements).
 * qsgd's codes (several bits an element, straddling words, a rounding draw each) keep the twin. */
#ifndef TRIDENT_CUDA_COMPRESS_COMPRESS_FAST_CUH
#define TRIDENT_CUDA_COMPRESS_COMPRESS_FAST_CUH

#include <stdint.h>

#include "cuda/warp.cuh"
#include "engine/device/ops/compress_math.h"

#if TRI_COMPRESS_SLOTS != 32
#error "a warp's lanes are the block sum's slots"
#endif

/* payload[b] = block b's scale of e(n) (1bit: mean |e|, qsgd: norm), a warp a block. Block of 32
 * TRI_ROWS_PER_BLOCK threads, any grid. */
__global__ void __launch_bounds__(32 * TRI_ROWS_PER_BLOCK)
    compress_scale_fast_kernel(int32_t *payload, const float *e, int64_t n, int block, int levels)
{
    const int64_t nb = tri_compress_blocks(n, block);
    const int lane = tri_lane();
    for (int64_t b = tri_warp_row(); b < nb; b += (int64_t)gridDim.x * TRI_ROWS_PER_BLOCK) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        double acc = 0.0;
        for (int64_t i = lo + lane; i < hi; i += TRI_COMPRESS_SLOTS)
            acc += tri_compress_term(e[i], levels);
        for (int k = TRI_COMPRESS_SLOTS / 2; k > 0; k >>= 1)
            acc += __shfl_xor_sync(TRI_WARP_FULL, acc, k);
        if (lane == 0)
            payload[b] = tri_compress_float_word(tri_compress_scale_of(acc, hi - lo, levels));
    }
}

/* payload[nb + w] = 1bit's sign word w of e(n) (bit l: element 32 w + l negative), 32 words a warp.
 * Block of 32 TRI_ROWS_PER_BLOCK threads, any grid. */
__global__ void __launch_bounds__(32 * TRI_ROWS_PER_BLOCK)
    compress_sign_words_fast_kernel(int32_t *payload, const float *e, int64_t n, int block)
{
    const int64_t nb = tri_compress_blocks(n, block), nw = (n + 31) / 32;
    const int lane = tri_lane();
    for (int64_t w0 = tri_warp_row() * 32; w0 < nw; w0 += (int64_t)gridDim.x * TRI_ROWS_PER_BLOCK * 32) {
        uint32_t mine = 0;
        for (int j = 0; j < 32; j++) {
            int64_t i = (w0 + j) * 32 + lane;
            uint32_t bits = __ballot_sync(TRI_WARP_FULL, i < n && tri_compress_code(e[i], 0.0f, 0, 0, 0, i) != 0);
            mine = lane == j ? bits : mine;
        }
        if (w0 + lane < nw)
            payload[nb + w0 + lane] = (int32_t)mine;
    }
}

#endif
