/* cuda/fixed/fixed.cu - the fixed-point ops of deterministic mode on the GPU.
 *
 * Launches of the simple kernels of cuda/fixed/fixed.kern.h (tested on the CPU against the CPU
 * backend through the shim). The reductions reuse the device's partials buffer (TRI_CUDA_MAX_PARTIALS
 * doubles; the sum of squares needs 4 words per chunk, so a quarter as many chunks). */
#include "cuda/fixed/fixed.kern.h"
#include "cuda/launch.cuh"

#define FIXED_MIN_CHUNK 4096

static int64_t fixed_chunk_for(int64_t n, int64_t max_chunks)
{
    int64_t chunk = (n + max_chunks - 1) / max_chunks;
    return chunk < FIXED_MIN_CHUNK ? FIXED_MIN_CHUNK : chunk;
}

extern "C" int tri_cuda_fixed_accumulate(tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad)
{
    tri_cuda *c = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(x), chunk = fixed_chunk_for(n, TRI_CUDA_MAX_PARTIALS);
    int64_t n_chunks = (n + chunk - 1) / chunk;
    int rc = TRI_CUDA_LAUNCH_N(fixed_accumulate_kernel, n, c->stream, (int64_t *)acc.data, tri_fp(x), bits, n);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(fixed_bad_partial_kernel, n_chunks, c->stream, c->partials, tri_fp(x), bits, n,
                                    chunk, n_chunks);
    if (!rc) rc = TRI_CUDA_LAUNCH(fixed_bad_finish_kernel, 1, 1, c->stream, tri_fp(bad), c->partials, n_chunks);
    return rc;
}

extern "C" int tri_cuda_fixed_to_float(tri_device *d, tri_tensor out, tri_tensor acc, int bits)
{
    int64_t n = tri_tensor_numel(out);
    return TRI_CUDA_LAUNCH_N(fixed_to_float_kernel, n, tri_cuda_of(d)->stream, tri_fp(out),
                             (const int64_t *)acc.data, bits, n);
}

extern "C" int tri_cuda_add_i64(tri_device *d, tri_tensor y, tri_tensor x)
{
    int64_t n = tri_tensor_numel(y);
    return TRI_CUDA_LAUNCH_N(add_i64_kernel, n, tri_cuda_of(d)->stream, (int64_t *)y.data, (const int64_t *)x.data, n);
}

extern "C" int tri_cuda_fixed_sum_squares(tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad)
{
    tri_cuda *c = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(x), chunk = fixed_chunk_for(n, TRI_CUDA_MAX_PARTIALS / 4);
    int64_t n_chunks = (n + chunk - 1) / chunk;
    uint64_t *words = (uint64_t *)c->partials;
    int rc = TRI_CUDA_LAUNCH_N(fixed_sumsq_partial_kernel, n_chunks, c->stream, words, tri_fp(x), bits, n, chunk,
                               n_chunks);
    if (!rc) rc = TRI_CUDA_LAUNCH(fixed_sumsq_finish_kernel, 1, 1, c->stream, (int64_t *)limbs.data, tri_fp(bad),
                                  (const uint64_t *)words, n_chunks);
    return rc;
}
