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
 *   - qsgd's code words, a warp 32 words: the lanes compute the codes of the words' elements, lane l
 *     elements first + l, first + l + 32, ... (coalesced loads; each code one rounding draw,
 *     tri_compress_code), into the warp's codes in shared memory; then lane j ORs word j's codes
 *     into place (tri_compress_place, as the twin does) and the warp stores its 32 words at once (the
 *     twin: a thread a word computing its own 32 / bits + 1 codes, its loads 32 / bits floats apart
 *     across a warp, and the codes that straddle two words twice). */
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

/* A warp's staged qsgd codes: its 32 words hold at most 32 * 32 / 2 codes of 2 bits (one level, the
 * fewest bits qsgd has) and one straddling each end. Code p is kept at TRI_QSGD_SLOT(p), a slot
 * skipped every 32, so that the codes the lanes read together, 32 / bits apart, fall in distinct
 * banks (tests/test_access_patterns.cpp). */
#define TRI_QSGD_WARP_CODES (32 * 32 / 2 + 2)
#define TRI_QSGD_SLOT(p) ((p) + ((p) >> 5))
#define TRI_QSGD_WARP_SLOTS TRI_QSGD_SLOT(TRI_QSGD_WARP_CODES)

/* Where the warp whose words start at w0 keeps element i's code (bits a code). */
TRI_HD int64_t tri_qsgd_slot(int64_t i, int64_t w0, int bits)
{
    return TRI_QSGD_SLOT(i - w0 * 32 / bits);
}

/* payload[nb + w] = qsgd's code word w of e(n) at `levels` (> 0: 2 bits a code or more), the block
 * scales payload[0, nb) written by the previous launch, 32 words a warp. Block of 32
 * TRI_ROWS_PER_BLOCK threads, any grid. */
__global__ void __launch_bounds__(32 * TRI_ROWS_PER_BLOCK)
    compress_qsgd_words_fast_kernel(int32_t *payload, const float *e, int64_t n, int block, int levels, uint64_t seed,
                                    uint64_t stream)
{
    __shared__ uint32_t staged[TRI_ROWS_PER_BLOCK][TRI_QSGD_WARP_SLOTS];
    const int64_t nb = tri_compress_blocks(n, block), nw = tri_compress_words(n, block, levels) - nb;
    const int bits = tri_compress_code_bits(levels), lane = tri_lane();
    uint32_t *codes = staged[threadIdx.x / 32];
    for (int64_t w0 = tri_warp_row() * 32; w0 < nw; w0 += (int64_t)gridDim.x * TRI_ROWS_PER_BLOCK * 32) {
        int64_t wend = w0 + 32 < nw ? w0 + 32 : nw, first = w0 * 32 / bits, last = (wend * 32 - 1) / bits;
        last = last < n - 1 ? last : n - 1;
        for (int64_t i = first + lane; i <= last; i += 32) {
            float scale = tri_compress_word_float(payload[i / block]);
            codes[tri_qsgd_slot(i, w0, bits)] = tri_compress_code(e[i], scale, levels, seed, stream, i);
        }
        __syncwarp();
        int64_t w = w0 + lane;
        if (w < nw) {
            int64_t bit0 = w * 32, hi = (bit0 + 31) / bits;
            uint32_t word = 0;
            for (int64_t i = bit0 / bits; i <= hi && i < n; i++)
                word |= tri_compress_place(codes[tri_qsgd_slot(i, w0, bits)], i, bits, bit0);
            payload[nb + w] = (int32_t)word;
        }
        __syncwarp(); /* the codes read before the next words' overwrite them */
    }
}

#endif
