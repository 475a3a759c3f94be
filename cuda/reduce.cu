/* cuda/reduce.cu - sum_squares and count_nonfinite on the GPU (gradient norm, skip-step check).
 *
 * Two launches: the simple kernel's chunk sums in double (cuda/kernels/reduce.kern.h) into the
 * device's partials buffer, then one block of TRI_CHUNK_SLOTS threads totals them in engine/core/math.h's
 * order (tri_chunks_total: a thread per slot, then a tree in shared memory) into out[0]; the simple
 * switch runs the one-thread twin of the total instead (same bits). The first GPU run's profile had
 * sum_squares as 42% of a step: one thread per 4096-element chunk and per chunk total. The chunk is
 * at least MIN_CHUNK elements and large enough that the chunks fit the buffer (TRI_CUDA_MAX_PARTIALS),
 * so the 38.6M-element token embedding uses 65536 threads; the result depends only on n (deterministic, no
 * atomics) and each chunk's arithmetic is engine/core/math.h's, as in the CPU backend, which uses 64
 * chunks: the two agree to double rounding before the final float rounding. x is fp32 or bf16
 * (widened exactly), out fp32. */
#include "cuda/kernels/reduce.kern.h"
#include "cuda/launch.cuh"

/* The smallest chunk. Every chunk is one thread's serial walk (8 loads in flight), so the chunk
 * length is the latency of the whole op: 64 elements keeps a 768-element bias at 12 threads (the
 * first GPU profile, with 4096, spent ~200 us per call walking small parameters in one thread). */
#define MIN_CHUNK 64

/* out[0] += (float)tri_chunks_total(partial, n_chunks), one block of TRI_CHUNK_SLOTS threads */
__global__ void reduce_finish_fast_kernel(float *out, const double *partial, int64_t n_chunks)
{
    __shared__ double acc[TRI_CHUNK_SLOTS];
    int s = (int)threadIdx.x;
    double a = 0.0, v[8];
    int64_t c = s;
    /* 8 loads in flight, then the additions in chunk order (the order of tri_chunks_total) */
    for (; c + 7 * TRI_CHUNK_SLOTS < n_chunks; c += 8 * TRI_CHUNK_SLOTS) {
        for (int k = 0; k < 8; k++)
            v[k] = partial[c + k * TRI_CHUNK_SLOTS];
        for (int k = 0; k < 8; k++)
            a += v[k];
    }
    for (; c < n_chunks; c += TRI_CHUNK_SLOTS)
        a += partial[c];
    acc[s] = a;
    __syncthreads();
    for (int k = TRI_CHUNK_SLOTS / 2; k >= 1; k /= 2) {
        if (s < k)
            acc[s] += acc[s + k];
        __syncthreads();
    }
    if (s == 0)
        out[0] += (float)acc[0];
}

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
    if (!rc)
        rc = c->simple ? TRI_CUDA_LAUNCH(reduce_finish_kernel, 1, 1, c->stream, tri_fp(out), c->partials, n_chunks)
                       : TRI_CUDA_LAUNCH(reduce_finish_fast_kernel, 1, TRI_CHUNK_SLOTS, c->stream, tri_fp(out),
                                         c->partials, n_chunks);
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
