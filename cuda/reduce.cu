/* cuda/reduce.cu - sum_squares and count_nonfinite on the GPU (gradient norm, skip-step check).
 *
 * Two launches of the simple kernels (cuda/kernels/reduce.kern.h): chunk sums in double into the
 * device's partials buffer, then one thread adds them in order into out[0]. The chunk is at least
 * 4096 elements and large enough that the chunks fit the buffer (TRI_CUDA_MAX_PARTIALS), so a
 * 124M-element gradient uses ~30k threads; the result depends only on n (deterministic, no
 * atomics) and each chunk's arithmetic is engine/core/math.h's, as in the CPU backend, which uses 64
 * chunks: the two agree to double rounding before the final float rounding. x is fp32 or bf16
 * (widened exactly), out fp32. */
#include "cuda/kernels/reduce.kern.h"
#include "cuda/launch.cuh"

#define MIN_CHUNK 4096

static int reduce(tri_device *d, tri_tensor out, tri_tensor x, bool squares)
{
    tri_cuda *c = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(x);
    int64_t chunk = (n + TRI_CUDA_MAX_PARTIALS - 1) / TRI_CUDA_MAX_PARTIALS;
    chunk = chunk < MIN_CHUNK ? MIN_CHUNK : chunk;
    int64_t n_chunks = (n + chunk - 1) / chunk;
    int rc = squares ? TRI_CUDA_LAUNCH_N(sum_squares_partial_kernel, n_chunks, c->stream, c->partials,
                                         tri_data(x), tri_is_bf16(x), n, chunk, n_chunks)
                     : TRI_CUDA_LAUNCH_N(count_nonfinite_partial_kernel, n_chunks, c->stream,
                                         c->partials, tri_data(x), tri_is_bf16(x), n, chunk, n_chunks);
    if (!rc) rc = TRI_CUDA_LAUNCH(reduce_finish_kernel, 1, 1, c->stream, tri_fp(out), c->partials, n_chunks);
    return rc;
}

extern "C" int tri_cuda_sum_squares(tri_device *d, tri_tensor out, tri_tensor x)
{
    return reduce(d, out, x, true);
}

extern "C" int tri_cuda_count_nonfinite(tri_device *d, tri_tensor out, tri_tensor x)
{
    return reduce(d, out, x, false);
}
