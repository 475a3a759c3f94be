/* cuda/elementwise/reduce.cu - sum_squares and count_nonfinite on the GPU (gradient norm, skip-step check).
 *
 * Two launches: the simple kernel's chunk sums in double (cuda/elementwise/reduce.kern.h) into the
 * device's partials buffer, then one block of TRI_CHUNK_SLOTS threads totals them in engine/core/math.h's
 * order (tri_chunks_total: a thread per slot, then a tree in shared memory; cuda/elementwise/reduce_fast.cuh,
 * also run on the CPU) into out[0]; the simple
 * switch runs the one-thread twin of the total instead (same bits). The first GPU run's profile had
 * sum_squares as 42% of a step: one thread per 4096-element chunk and per chunk total. The chunk is
 * at least MIN_CHUNK elements and large enough that the chunks fit the buffer (TRI_CUDA_MAX_PARTIALS),
 * so the 38.6M-element token embedding uses 65536 threads; the result depends only on n (deterministic, no
 * atomics) and each chunk's arithmetic is engine/core/math.h's, as in the CPU backend, which uses 64
 * chunks: the two agree to double rounding before the final float rounding. x is fp32 or bf16
 * (widened exactly), out fp32. */
#include <string.h>

#include "cuda/elementwise/reduce.kern.h"
#include "cuda/elementwise/reduce_fast.cuh"
#include "cuda/launch.cuh"

/* The smallest chunk: TRI_REDUCE_MIN_CHUNK (engine/device/launch_shapes.h says why). */
#define MIN_CHUNK TRI_REDUCE_MIN_CHUNK

/* The chunk length of an n-element reduction: at least MIN_CHUNK, and few enough chunks for the
 * partials buffer. Part of the op's result (each chunk is summed alone). */
static int64_t chunk_for(int64_t n)
{
    int64_t chunk = (n + TRI_CUDA_MAX_PARTIALS - 1) / TRI_CUDA_MAX_PARTIALS;
    return chunk < MIN_CHUNK ? MIN_CHUNK : chunk;
}

static int reduce(tri_device *d, tri_tensor out, tri_tensor x, bool squares)
{
    tri_cuda *c = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(x);
    int64_t chunk = chunk_for(n);
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

/* Groups of up to TRI_SQ_GROUP pieces whose chunk sums fit the cuBLASLt workspace (32 MiB: 4M
 * doubles; nothing else uses it between two ops on the stream), two launches a group: GPT-2 124M's
 * 148 parameters are one group (1.9M chunks), where piece by piece they were 296 launches. */
extern "C" int tri_cuda_sum_squares_multi(tri_device *d, tri_tensor out, const tri_tensor *xs, const int64_t *slots,
                                          int n)
{
    tri_cuda *c = tri_cuda_of(d);
    int64_t cap = (int64_t)(c->workspace_bytes / sizeof(double));
    double *partial = (double *)c->workspace;
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc;) {
        tri_sq_group g;
        memset(&g, 0, sizeof g);
        for (; k < n && g.n < TRI_SQ_GROUP; k++) {
            int64_t len = tri_tensor_numel(xs[k]), chunk = chunk_for(len), n_chunks = (len + chunk - 1) / chunk;
            if (g.n > 0 && g.first[g.n] + n_chunks > cap)
                break; /* a piece alone has at most TRI_CUDA_MAX_PARTIALS chunks: it always fits */
            if (g.n == 0 || slots[k] != g.slot[g.n - 1])
                g.run[g.n_runs++] = g.n;
            g.x[g.n] = xs[k].data;
            g.bf16[g.n] = tri_is_bf16(xs[k]);
            g.len[g.n] = len;
            g.chunk[g.n] = chunk;
            g.slot[g.n] = slots[k];
            g.first[g.n + 1] = g.first[g.n] + n_chunks;
            g.n++;
        }
        g.run[g.n_runs] = g.n;
        rc = TRI_CUDA_LAUNCH_N(sum_squares_multi_partial_kernel, g.first[g.n], c->stream, partial, g);
        if (!rc)
            rc = c->simple ? TRI_CUDA_LAUNCH(reduce_multi_finish_kernel, 1, 1, c->stream, tri_fp(out), partial, g)
                           : TRI_CUDA_LAUNCH(reduce_multi_finish_fast_kernel, g.n_runs, TRI_CHUNK_SLOTS, c->stream,
                                             tri_fp(out), partial, g);
    }
    return rc;
}
