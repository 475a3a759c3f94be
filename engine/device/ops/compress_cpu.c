/* engine/device/ops/compress_cpu.c - the gradient compressors on the CPU backend: OpenMP loops over
 * compress_math.h's per-block, per-word and per-element functions (each output written by one
 * iteration, so any thread count gives the same bits); top-k selection and Gram-Schmidt run on
 * one thread. */
#include <stdint.h>

#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"
#include "engine/device/ops/compress_math.h"

/* payload = block scales, then the code stream, of e */
static void pack_loop(int32_t *payload, const float *e, int64_t n, int block, int levels, uint64_t seed,
                      uint64_t stream)
{
    int64_t nb = tri_compress_blocks(n, block), nw = tri_compress_words(n, block, levels) - nb;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nb; b++)
        payload[b] = tri_compress_float_word(tri_compress_block_scale(e, n, b, block, levels));
#pragma omp for schedule(static)
    for (int64_t w = 0; w < nw; w++)
        payload[nb + w] = (int32_t)tri_compress_stream_word(e, payload, n, w, block, levels, seed, stream);
}

int tri_cpu_compress_sign_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block)
{
    TRI_ON_THREADS(nthreads(d), pack_loop(payload.data, fp(e), tri_tensor_numel(e), block, 0, 0, 0));
    return TRI_OK;
}

int tri_cpu_compress_qsgd_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels, uint64_t seed,
                               uint64_t stream)
{
    TRI_ON_THREADS(nthreads(d), pack_loop(payload.data, fp(e), tri_tensor_numel(e), block, levels, seed, stream));
    return TRI_OK;
}

/* by blocks: the scale and the shrink once per block, the same per-element expression as
 * tri_compress_decode (so the same bits) */
static void unpack_add_loop(float *out, int64_t m, const int32_t *payload, int64_t n, int64_t first, int block,
                            int levels, float alpha)
{
    int64_t nb = tri_compress_blocks(n, block), b_lo = first / block, b_hi = tri_compress_blocks(first + m, block);
    const uint32_t *stream = (const uint32_t *)(payload + nb);
    int bits = tri_compress_code_bits(levels);
    float shrink = levels > 0 ? tri_qsgd_shrink(block, levels) : 1.0f;
#pragma omp for schedule(static)
    for (int64_t b = b_lo; b < b_hi; b++) {
        float scale = tri_compress_word_float(payload[b]);
        int64_t lo = b * block > first ? b * block : first, hi = (b + 1) * block < first + m ? (b + 1) * block : first + m;
        for (int64_t i = lo; i < hi; i++)
            out[i - first] = out[i - first] + alpha * tri_compress_value(tri_compress_code_at(stream, i, bits), scale,
                                                                         levels, shrink);
    }
}

int tri_cpu_compress_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t n, int64_t first, int block,
                                int levels, float alpha)
{
    TRI_ON_THREADS(nthreads(d), unpack_add_loop(fp(out), tri_tensor_numel(out), payload.data, n, first, block,
                                                levels, alpha));
    return TRI_OK;
}

int tri_cpu_compress_topk_pack(tri_device *d, tri_tensor payload, tri_tensor e)
{
    (void)d;
    tri_compress_topk_select(fp(e), tri_tensor_numel(e), tri_tensor_numel(payload) / 2, payload.data);
    return TRI_OK;
}

int tri_cpu_compress_topk_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t first, float alpha)
{
    (void)d;
    const int32_t *p = payload.data;
    float *o = fp(out);
    int64_t k = tri_tensor_numel(payload) / 2, m = tri_tensor_numel(out);
    for (int64_t j = 0; j < k; j++) {
        int64_t idx = (int64_t)(uint32_t)p[2 * j] - first;
        if (idx >= 0 && idx < m)
            o[idx] = o[idx] + alpha * tri_compress_word_float(p[2 * j + 1]);
    }
    return TRI_OK;
}

int tri_cpu_orthonormalize_rows(tri_device *d, tri_tensor x)
{
    (void)d;
    int64_t n = x.shape[x.ndim - 1];
    tri_orthonormalize_rows(fp(x), n > 0 ? tri_tensor_numel(x) / n : 0, n);
    return TRI_OK;
}
