/* cuda/compress/compress.kern.h - simple kernels of the gradient compressors (CUDA and C): a thread
 * per block scale, per payload word, per decoded element, per top-k pair, and one thread for a
 * top-k selection (the fast form: cuda/compress/topk_fast.cuh) and for a matrix's Gram-Schmidt, each calling engine/device/ops/compress_math.h's functions as the CPU
 * loops do, so the payloads are the CPU backend's bits. Dependent passes (the scales before the
 * words that read them) are separate launches. */
#ifndef TRIDENT_CUDA_COMPRESS_COMPRESS_KERN_H
#define TRIDENT_CUDA_COMPRESS_COMPRESS_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/compress_math.h"

/* payload[b] = block b's scale (1bit: mean |e|, qsgd: norm) */
TRI_KERNEL compress_scale_kernel(int32_t *payload, const float *e, int64_t n, int block, int levels)
{
    int64_t nb = tri_compress_blocks(n, block);
    for (int64_t b = TRI_GLOBAL_ID; b < nb; b += TRI_GLOBAL_STRIDE)
        payload[b] = tri_compress_float_word(tri_compress_block_scale(e, n, b, block, levels));
}

/* payload[nb + w] = word w of the code stream (the scales written by the previous launch) */
TRI_KERNEL compress_pack_kernel(int32_t *payload, const float *e, int64_t n, int block, int levels, uint64_t seed,
                                uint64_t stream)
{
    int64_t nb = tri_compress_blocks(n, block), nw = tri_compress_words(n, block, levels) - nb;
    for (int64_t w = TRI_GLOBAL_ID; w < nw; w += TRI_GLOBAL_STRIDE)
        payload[nb + w] = (int32_t)tri_compress_stream_word(e, payload, n, w, block, levels, seed, stream);
}

/* out[j] += alpha * decoded element first + j */
TRI_KERNEL compress_unpack_add_kernel(float *out, int64_t m, const int32_t *payload, int64_t n, int64_t first,
                                      int block, int levels, float alpha)
{
    for (int64_t j = TRI_GLOBAL_ID; j < m; j += TRI_GLOBAL_STRIDE)
        out[j] = out[j] + alpha * tri_compress_decode(payload, n, first + j, block, levels);
}

/* out[idx - first] += alpha * value for each pair inside out (indices distinct) */
TRI_KERNEL compress_topk_unpack_add_kernel(float *out, int64_t m, const int32_t *payload, int64_t k, int64_t first,
                                           float alpha)
{
    for (int64_t j = TRI_GLOBAL_ID; j < k; j += TRI_GLOBAL_STRIDE) {
        int64_t idx = (int64_t)(uint32_t)payload[2 * j] - first;
        if (idx >= 0 && idx < m)
            out[idx] = out[idx] + alpha * tri_compress_word_float(payload[2 * j + 1]);
    }
}

/* payload(2k) = the top-k payload of e(n): compress_math.h's whole selection on one thread */
TRI_KERNEL compress_topk_select_kernel(int32_t *payload, const float *e, int64_t n, int64_t k)
{
    if (TRI_GLOBAL_ID == 0)
        tri_compress_topk_select(e, n, k, payload);
}

/* Gram-Schmidt on x's r rows of n (one thread; the fast form: cuda/compress/gram_schmidt_fast.cuh) */
TRI_KERNEL orthonormalize_rows_kernel(float *x, int64_t r, int64_t n)
{
    if (TRI_GLOBAL_ID == 0)
        tri_orthonormalize_rows(x, r, n);
}

#endif
