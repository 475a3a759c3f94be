/* engine/device/ops/compress_math.h - the gradient compressors' element arithmetic, written once:
 * the CPU loops (compress_cpu.c) and the CUDA kernels (cuda/compress/compress.kern.h) call it
 * (TRI_HD: C, or __host__ __device__ under nvcc), so both backends make the same payload bits.
 *
 * Wire formats (engine/train/grad_compression.h states them for the engine and the partitioner): a
 * payload is an array of 32-bit words, what the comm all-gathers as an i32 tensor.
 *   1bit (Seide et al. 2014) and qsgd (Alistarh et al. 2017), n elements in blocks of `block`:
 *     words [0, nb)   one fp32 per block (its bits): 1bit the block's mean |e|, qsgd its ||e||_2;
 *     words [nb, ..)  the elements' codes as one little-endian bit stream, element i at bits
 *                     [i * b, (i + 1) * b) (a code may straddle two words), b = 1 for 1bit (1 =
 *                     negative) and 1 + ceil(log2(s + 1)) for qsgd (bit 0 the sign, then the level
 *                     l in 0..s), the last word's unused bits zero.
 *     1bit decodes element i as -scale or +scale; qsgd as sign * norm * (l / s) * tri_qsgd_shrink
 *     (the contraction error feedback needs, below).
 *   topk (Aji & Heafield 2017; Stich et al. 2018): k (index, value) pairs, the index a uint32 in
 *     [0, n), the value the fp32 bits, in ascending index order: the k largest |e_i|, ties broken
 *     towards the lower index.
 * The block sums (mean |e|, the norm) are taken in double over 32 slots (tri_compress_block_scale)
 * and rounded once to fp32.
 * qsgd's stochastic rounding draws u in [0, 1) from a counter-based hash of (seed, stream, i) and
 * rounds the level p = |e_i| / ||e_b|| * s up when u < p - floor(p), so E[l] = p and
 * E[norm * l / s] = |e_i| (unbiased before the shrink factor). */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_COMPRESS_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_COMPRESS_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/core/math.h"

/* Bits per element code: 1 for 1bit (levels 0), 1 + ceil(log2(s + 1)) for qsgd with s levels. */
TRI_HD int tri_compress_code_bits(int levels)
{
    if (levels <= 0)
        return 1;
    int b = 0;
    while ((1 << b) < levels + 1)
        b++;
    return b + 1;
}

/* Blocks of `block` elements covering n. */
TRI_HD int64_t tri_compress_blocks(int64_t n, int block)
{
    return (n + block - 1) / block;
}

/* Words of a 1bit (levels 0) or qsgd (levels s) payload of n elements: the block scales, then the
 * bit stream rounded up to whole words. */
TRI_HD int64_t tri_compress_words(int64_t n, int block, int levels)
{
    return tri_compress_blocks(n, block) + (n * tri_compress_code_bits(levels) + 31) / 32;
}

TRI_HD float tri_compress_word_float(int32_t w)
{
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

TRI_HD int32_t tri_compress_float_word(float f)
{
    int32_t w;
    memcpy(&w, &f, sizeof w);
    return w;
}

/* Slots of a block's sum (tri_compress_block_scale): a warp's lanes, one a slot, on the GPU. */
#define TRI_COMPRESS_SLOTS 32

/* Element x's term of its block's sum: |x| for 1bit (levels 0), x^2 for qsgd; exact in double. */
TRI_HD double tri_compress_term(float x, int levels)
{
    return levels <= 0 ? fabs((double)x) : (double)x * (double)x;
}

/* A block's scale from the sum s of its m elements' terms: 1bit the mean |e|, qsgd the l2 norm;
 * rounded once to fp32. */
TRI_HD float tri_compress_scale_of(double s, int64_t m, int levels)
{
    return levels <= 0 ? (float)(s / (double)m) : (float)sqrt(s);
}

/* Block b's scale of e (n elements): its terms in double over TRI_COMPRESS_SLOTS slots (element lo + i
 * in slot i % 32, each slot in index order), the slots added by engine/core/math.h's tri_slots_halve,
 * then tri_compress_scale_of. The order a warp sums in (cuda/compress/
 * compress_fast.cuh: lane l a slot, then shuffles xor 16 .. 1); until 2026-12-01 the sum ran in index
 * order, which held the GPU to a thread a block. */
TRI_HD float tri_compress_block_scale(const float *e, int64_t n, int64_t b, int block, int levels)
{
    int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
    double slot[TRI_COMPRESS_SLOTS];
    for (int j = 0; j < TRI_COMPRESS_SLOTS; j++) {
        double acc = 0.0;
        for (int64_t i = lo + j; i < hi; i += TRI_COMPRESS_SLOTS)
            acc += tri_compress_term(e[i], levels);
        slot[j] = acc;
    }
    return tri_compress_scale_of(tri_slots_halve(slot, TRI_COMPRESS_SLOTS), hi - lo, levels);
}

/* A uniform float in [0, 1) (24 bits) from (seed, stream, i): splitmix64's finaliser over a mix. */
TRI_HD float tri_compress_uniform(uint64_t seed, uint64_t stream, int64_t i)
{
    uint64_t z = seed ^ (stream * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xD1B54A32D192ED03ull);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* Element i's code (see the top comment) given its block's scale. */
TRI_HD uint32_t tri_compress_code(float x, float scale, int levels, uint64_t seed, uint64_t stream, int64_t i)
{
    uint32_t neg = x < 0.0f;
    if (levels <= 0)
        return neg;
    uint32_t l = 0;
    float p = scale > 0.0f ? fabsf(x) / scale * (float)levels : 0.0f;
    if (p > 0.0f) { /* false for NaN (an infinite x over its block's infinite scale): level 0, what x86's
                     * and the GPU's conversions gave before; casting NaN to an integer is undefined */
        float f = floorf(p);
        l = (uint32_t)f + (tri_compress_uniform(seed, stream, i) < p - f);
        if (l > (uint32_t)levels)
            l = (uint32_t)levels;
    }
    return (l << 1) | neg;
}

/* The bits of element i's code (`bits` a code) that fall in the stream's word starting at bit bit0: the
 * code shifted to its place, or, when it started in the previous word, its upper bits. A word is the
 * OR of its elements' placed codes. */
TRI_HD uint32_t tri_compress_place(uint64_t code, int64_t i, int bits, int64_t bit0)
{
    int64_t at = i * bits - bit0; /* negative: the code started in the previous word */
    return (uint32_t)(at >= 0 ? code << at : code >> -at);
}

/* Word w of the bit stream of e (n elements) whose block scales are `scales`. */
TRI_HD uint32_t tri_compress_stream_word(const float *e, const int32_t *scales, int64_t n, int64_t w, int block,
                                         int levels, uint64_t seed, uint64_t stream)
{
    int bits = tri_compress_code_bits(levels);
    int64_t bit0 = w * 32, first = bit0 / bits, last = (bit0 + 31) / bits;
    int64_t b = first / block, next = (b + 1) * block; /* the element's block, advanced as i passes it */
    float scale = tri_compress_word_float(scales[b]);
    uint32_t word = 0;
    for (int64_t i = first; i <= last && i < n; i++) {
        if (i >= next) {
            b++;
            next += block;
            scale = tri_compress_word_float(scales[b]);
        }
        word |= tri_compress_place(tri_compress_code(e[i], scale, levels, seed, stream, i), i, bits, bit0);
    }
    return word;
}

/* qsgd's decode factor 1 / (1 + w), w = min(d / s^2, sqrt(d) / s) the variance bound of
 * Alistarh et al. 2017 (Lemma 3.1) for blocks of d elements: the unbiased quantizer scaled so that
 * it contracts, ||x - C(x)||^2 <= (1 - 1 / (1 + w)) ||x||^2 in expectation, which error feedback
 * needs to converge (Karimireddy et al. 2019, Remark 5; Stich et al. 2018). Unscaled, a block of 256
 * at s = 7 has w = 2.3 and the residual grows without bound (measured: the run diverges). */
TRI_HD float tri_qsgd_shrink(int block, int levels)
{
    float d = (float)block, s = (float)levels, a = d / (s * s), b = sqrtf(d) / s;
    return 1.0f / (1.0f + (a < b ? a : b));
}

/* The code of element i from the bit stream (b bits per code). */
TRI_HD uint32_t tri_compress_code_at(const uint32_t *stream, int64_t i, int bits)
{
    int64_t bit = i * bits;
    uint64_t two = stream[bit >> 5];
    if ((bit & 31) + bits > 32)
        two |= (uint64_t)stream[(bit >> 5) + 1] << 32;
    return (uint32_t)(two >> (bit & 31)) & ((1u << bits) - 1u);
}

/* The value of a code given its block's scale (shrink: tri_qsgd_shrink, unused for 1bit). */
TRI_HD float tri_compress_value(uint32_t code, float scale, int levels, float shrink)
{
    float v = levels <= 0 ? scale : scale * ((float)(code >> 1) / (float)levels) * shrink;
    return (code & 1u) ? -v : v;
}

/* Element i of a 1bit (levels 0) or qsgd payload of n elements, decoded. */
TRI_HD float tri_compress_decode(const int32_t *payload, int64_t n, int64_t i, int block, int levels)
{
    int64_t nb = tri_compress_blocks(n, block);
    uint32_t code = tri_compress_code_at((const uint32_t *)(payload + nb), i, tri_compress_code_bits(levels));
    return tri_compress_value(code, tri_compress_word_float(payload[i / block]), levels,
                              levels > 0 ? tri_qsgd_shrink(block, levels) : 1.0f);
}

/* Slots of Gram-Schmidt's dot products (tri_gs_dot): a block of this many threads sums one on the
 * GPU (cuda/compress/gram_schmidt_fast.cuh), a thread a slot. */
#define TRI_GS_SLOTS 1024

/* a(n) . b(n) in double: product i (exact in double) added to slot i % TRI_GS_SLOTS, each slot in
 * index order from 0, then the slots by tri_slots_halve (engine/core/math.h). */
TRI_HD double tri_gs_dot(const float *a, const float *b, int64_t n)
{
    double slot[TRI_GS_SLOTS];
    for (int s = 0; s < TRI_GS_SLOTS; s++)
        slot[s] = 0.0;
    for (int64_t i = 0; i < n; i++)
        slot[i % TRI_GS_SLOTS] += (double)a[i] * (double)b[i];
    return tri_slots_halve(slot, TRI_GS_SLOTS);
}

/* The factor that normalises a row of squared norm ss: 1 / (||x|| + 1e-8), PyTorch's powerSGD_hook's
 * epsilon, so a zero row stays finite. */
TRI_HD float tri_gs_inv_norm(double ss)
{
    return 1.0f / ((float)sqrt(ss) + 1e-8f);
}

/* Gram-Schmidt on the rows of x (r rows of n, row-major), in row order: row j loses its projections
 * on rows 0..j-1 (d = (float) tri_gs_dot, then x_j[i] - d x_k[i]), then is multiplied by
 * tri_gs_inv_norm of its tri_gs_dot with itself. PowerSGD's orthogonalisation (Vogels et al. 2019,
 * Algorithm 1; modified Gram-Schmidt as PyTorch's powerSGD_hook) on P^T. The dot products' slot order
 * lets a block of threads compute them (until 2026-12-01 they were summed in index order, which held
 * the GPU to one thread a matrix). */
TRI_HD void tri_orthonormalize_rows(float *x, int64_t r, int64_t n)
{
    for (int64_t j = 0; j < r; j++) {
        float *xj = x + j * n;
        for (int64_t k = 0; k < j; k++) {
            const float *xk = x + k * n;
            float d = (float)tri_gs_dot(xj, xk, n);
            for (int64_t i = 0; i < n; i++)
                xj[i] = xj[i] - d * xk[i];
        }
        float inv = tri_gs_inv_norm(tri_gs_dot(xj, xj, n));
        for (int64_t i = 0; i < n; i++)
            xj[i] = xj[i] * inv;
    }
}

/* The sort key of |x| (its fp32 bits without the sign: ordered as the magnitudes). */
TRI_HD uint32_t tri_compress_abs_key(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7fffffffu;
}

/* Top-k selection (Aji & Heafield 2017), the definition both backends compute: the payload (2k
 * words) of the k largest |e_i| of e (n elements), ties towards the lower index, in index order
 * (NaN's key is above every number's). A radix select on the magnitude keys finds the k-th largest
 * key T in four passes of 8 bits, each counting the keys that still match T's digits found so far
 * (tri_compress_topk_matches) by their next digit and taking digits from the top while they hold
 * fewer keys than are still wanted (tri_compress_topk_digit); then every element above T and the
 * first `want` (in index order) of those equal to T are taken, element i at the payload position
 * tri_compress_topk_place gives from the elements above T and equal to T before it. The CPU loop
 * (tri_compress_topk_select) and the CUDA kernels (the simple twin a thread running this loop, the
 * fast form cuda/compress/topk_fast.cuh's passes over blocks) make the same payload: the selection
 * is unique, so any order of counting gives it. */
#define TRI_TOPK_FIRST_SHIFT 24 /* the first pass's digit: bits 31..24 (bit 31, the sign, is 0) */

/* Whether key's digits above `shift` are the select's prefix so far (every key in the first pass). */
TRI_HD int tri_compress_topk_matches(uint32_t key, uint32_t prefix, int shift)
{
    return shift == TRI_TOPK_FIRST_SHIFT || (key >> (shift + 8)) == (prefix >> (shift + 8));
}

/* One pass's choice: hist[d] the matching keys whose digit at `shift` is d. Takes the digits from 255
 * down while they hold fewer keys than *want (all of them are in the top k), subtracting them from
 * *want, and sets T's digit at `shift` in *prefix to the digit where the k-th largest lies. */
TRI_HD void tri_compress_topk_digit(const int64_t *hist, int shift, uint32_t *prefix, int64_t *want)
{
    int d = 255;
    while (d > 0 && hist[d] < *want) {
        *want -= hist[d];
        d--;
    }
    *prefix |= (uint32_t)d << shift;
}

/* The payload position of an element of key `key` given T, the number `want` of elements equal to T
 * that are taken, and the elements above T and equal to T before it in index order; -1 when it is
 * not taken. The positions of the taken elements are 0..k-1 in index order. */
TRI_HD int64_t tri_compress_topk_place(uint32_t key, uint32_t T, int64_t want, int64_t above, int64_t ties)
{
    if (key > T)
        return above + (ties < want ? ties : want);
    return key == T && ties < want ? above + ties : -1;
}

/* The CPU's selection (also the CUDA backend's simple twin, one thread): k in [1, n]. */
TRI_HD void tri_compress_topk_select(const float *e, int64_t n, int64_t k, int32_t *payload)
{
    if (k <= 0)
        return;
    uint32_t prefix = 0;
    int64_t want = k; /* elements still to take among those matching the prefix */
    for (int shift = TRI_TOPK_FIRST_SHIFT; shift >= 0; shift -= 8) {
        int64_t hist[256];
        for (int d = 0; d < 256; d++)
            hist[d] = 0;
        for (int64_t i = 0; i < n; i++) {
            uint32_t key = tri_compress_abs_key(e[i]);
            if (tri_compress_topk_matches(key, prefix, shift))
                hist[(key >> shift) & 255u]++;
        }
        tri_compress_topk_digit(hist, shift, &prefix, &want);
    }
    int64_t above = 0, ties = 0; /* prefix is T */
    for (int64_t i = 0; i < n; i++) {
        uint32_t key = tri_compress_abs_key(e[i]);
        int64_t at = tri_compress_topk_place(key, prefix, want, above, ties);
        if (at >= 0) {
            payload[2 * at] = (int32_t)(uint32_t)i;
            payload[2 * at + 1] = tri_compress_float_word(e[i]);
        }
        above += key > prefix;
        ties += key == prefix;
    }
}

#endif
