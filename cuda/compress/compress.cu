/* cuda/compress/compress.cu - the gradient compressors on the GPU: launches of the simple kernels
 * of cuda/compress/compress.kern.h (1bit and qsgd packing, decode-add, which is also the
 * error-feedback update, the top-k scatter-add, the top-k selection and Gram-Schmidt on one thread)
 * and, unless the simple switch is on, of their fast forms: the block scales, 1bit's sign words and
 * qsgd's code words (cuda/compress/compress_fast.cuh: a warp a block, ballots, codes staged a warp),
 * the top-k selection (cuda/compress/topk_fast.cuh: compress_math.h's radix select over blocks, no
 * host sync) and Gram-Schmidt (cuda/compress/gram_schmidt_fast.cuh: a block a matrix). Tested
 * against the CPU backend, both forms, through the emulated build. */
#include "cuda/compress/compress.kern.h"
#include "cuda/compress/compress_fast.cuh"
#include "cuda/compress/gram_schmidt_fast.cuh"
#include "cuda/compress/topk_fast.cuh"
#include "cuda/launch.cuh"

static int pack(tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels, uint64_t seed,
                uint64_t stream)
{
    tri_cuda *cu = tri_cuda_of(d);
    int32_t *pay = (int32_t *)payload.data;
    int64_t n = tri_tensor_numel(e), nb = tri_compress_blocks(n, block), nw = tri_compress_words(n, block, levels) - nb;
    int rc = cu->simple ? TRI_CUDA_LAUNCH_N(compress_scale_kernel, nb, cu->stream, pay, tri_fp(e), n, block, levels)
                        : TRI_CUDA_LAUNCH_STRIDED(compress_scale_fast_kernel, tri_warp_grid(nb), 32 * TRI_ROWS_PER_BLOCK,
                                                  cu->stream, pay, tri_fp(e), n, block, levels);
    if (rc)
        return rc;
    if (!cu->simple) { /* 1bit's signs or qsgd's codes: compress_fast.cuh, 32 words a warp */
        int64_t grid = tri_warp_grid((nw + 31) / 32);
        return levels == 0 ? TRI_CUDA_LAUNCH_STRIDED(compress_sign_words_fast_kernel, grid, 32 * TRI_ROWS_PER_BLOCK,
                                                     cu->stream, pay, tri_fp(e), n, block)
                           : TRI_CUDA_LAUNCH_STRIDED(compress_qsgd_words_fast_kernel, grid, 32 * TRI_ROWS_PER_BLOCK,
                                                     cu->stream, pay, tri_fp(e), n, block, levels, seed, stream);
    }
    return TRI_CUDA_LAUNCH_N(compress_pack_kernel, nw, cu->stream, pay, tri_fp(e), n, block, levels, seed, stream);
}

extern "C" int tri_cuda_compress_sign_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block)
{
    return pack(d, payload, e, block, 0, 0, 0);
}

extern "C" int tri_cuda_compress_qsgd_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels,
                                           uint64_t seed, uint64_t stream)
{
    return pack(d, payload, e, block, levels, seed, stream);
}

extern "C" int tri_cuda_compress_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t n,
                                            int64_t first, int block, int levels, float alpha)
{
    int64_t m = tri_tensor_numel(out);
    return TRI_CUDA_LAUNCH_N(compress_unpack_add_kernel, m, tri_cuda_of(d)->stream, tri_fp(out),
                             m, (const int32_t *)payload.data, n, first, block, levels, alpha);
}

/* The fast selection (topk_fast.cuh) of k of e(n) into payload, its scratch in the workspace. */
static int topk_fast(tri_cuda *cu, int32_t *payload, const float *e, int64_t n, int64_t k)
{
    int64_t nch = tri_topk_chunks(n), G = tri_topk_hist_grid(n), grid = nch < TRI_MAX_BLOCKS ? nch : TRI_MAX_BLOCKS;
    int64_t *state = (int64_t *)cu->workspace, *counts = state + 4;
    uint32_t *part = (uint32_t *)(counts + 2 * nch);
    int rc = TRI_OK;
    for (int shift = TRI_TOPK_FIRST_SHIFT; !rc && shift >= 0; shift -= 8) {
        rc = TRI_CUDA_LAUNCH(compress_topk_hist_kernel, G, TRI_TOPK_THREADS, cu->stream, part, e, n,
                             (const int64_t *)state, shift);
        if (!rc) rc = TRI_CUDA_LAUNCH(compress_topk_digit_kernel, 1, TRI_TOPK_THREADS, cu->stream, state,
                                      (const uint32_t *)part, G, shift, k);
    }
    if (!rc) rc = TRI_CUDA_LAUNCH_STRIDED(compress_topk_count_kernel, grid, TRI_TOPK_THREADS, cu->stream, counts, e, n,
                                          nch, (const int64_t *)state);
    if (!rc) rc = TRI_CUDA_LAUNCH(compress_topk_scan_kernel, 1, TRI_TOPK_SCAN_THREADS, cu->stream, counts, nch);
    if (!rc) rc = TRI_CUDA_LAUNCH(compress_topk_scan_kernel, 1, TRI_TOPK_SCAN_THREADS, cu->stream, counts + nch, nch);
    if (!rc) rc = TRI_CUDA_LAUNCH_STRIDED(compress_topk_emit_kernel, grid, TRI_TOPK_THREADS, cu->stream, payload, e, n,
                                          nch, (const int64_t *)state, (const int64_t *)counts);
    return rc;
}

extern "C" int tri_cuda_compress_topk_pack(tri_device *d, tri_tensor payload, tri_tensor e)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(e), k = tri_tensor_numel(payload) / 2;
    int32_t *out = (int32_t *)payload.data;
    if (!cu->simple && (size_t)tri_topk_scratch_bytes(n) <= cu->workspace_bytes)
        return topk_fast(cu, out, tri_fp(e), n, k);
    return TRI_CUDA_LAUNCH(compress_topk_select_kernel, 1, 1, cu->stream, out, (const float *)tri_fp(e), n, k);
}

extern "C" int tri_cuda_compress_topk_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t first,
                                                 float alpha)
{
    int64_t k = tri_tensor_numel(payload) / 2;
    return TRI_CUDA_LAUNCH_N(compress_topk_unpack_add_kernel, k, tri_cuda_of(d)->stream, tri_fp(out),
                             tri_tensor_numel(out), (const int32_t *)payload.data, k, first, alpha);
}

extern "C" int tri_cuda_orthonormalize_rows(tri_device *d, tri_tensor x)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = x.shape[x.ndim - 1], r = n > 0 ? tri_tensor_numel(x) / n : 0;
    if (!cu->simple)
        return TRI_CUDA_LAUNCH(orthonormalize_rows_fast_kernel, 1, TRI_GS_SLOTS, cu->stream, tri_fp(x), r, n);
    return TRI_CUDA_LAUNCH(orthonormalize_rows_kernel, 1, 1, cu->stream, tri_fp(x), r, n);
}
