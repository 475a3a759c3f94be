/* cuda/elementwise/reduce.kern.h - simple kernels of sum_squares and count_nonfinite (CUDA and C).
 *
 * Two deterministic passes, no atomics: the first gives one thread per chunk of `chunk` elements
 * and writes the chunk's sum in double (engine/core/math.h's range sums, the CPU backend's arithmetic
 * per chunk); the second, one thread, totals the chunk sums in math.h's order (tri_chunks_total) and
 * adds the total, rounded to float, to out[0]. The result depends only on the chunk size, never on the launch shape; with the
 * CPU backend's 64 chunks it is the CPU's result bit for bit. x is fp32 or bf16 (x_bf16; widening
 * is exact, so a bf16 x sums exactly the values the CPU backend's fp32 copy holds); out is fp32. */
#ifndef TRIDENT_CUDA_ELEMENTWISE_REDUCE_KERN_H
#define TRIDENT_CUDA_ELEMENTWISE_REDUCE_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/launch_shapes.h"

/* partial[c] = sum of x[i]^2 over chunk c = [c * chunk, min(n, (c + 1) * chunk)), c < n_chunks */
TRI_KERNEL sum_squares_partial_kernel(double *partial, const void *x, int x_bf16, int64_t n, int64_t chunk,
                                      int64_t n_chunks)
{
    for (int64_t c = TRI_GLOBAL_ID; c < n_chunks; c += TRI_GLOBAL_STRIDE) {
        int64_t lo = c * chunk < n ? c * chunk : n;
        int64_t hi = lo + chunk < n ? lo + chunk : n;
        partial[c] = tri_sum_squares_range_mixed(x, x_bf16, lo, hi);
    }
}

/* partial[c] = number of NaN or Inf in chunk c */
TRI_KERNEL count_nonfinite_partial_kernel(double *partial, const void *x, int x_bf16, int64_t n, int64_t chunk,
                                          int64_t n_chunks)
{
    for (int64_t c = TRI_GLOBAL_ID; c < n_chunks; c += TRI_GLOBAL_STRIDE) {
        int64_t lo = c * chunk < n ? c * chunk : n;
        int64_t hi = lo + chunk < n ? lo + chunk : n;
        partial[c] = tri_count_nonfinite_range_mixed(x, x_bf16, lo, hi);
    }
}

/* out[0] += (float)(the total of the chunk sums in engine/core/math.h's order, tri_chunks_total), by
 * thread 0: the twin of cuda/elementwise/reduce.cu's block-wide finish */
TRI_KERNEL reduce_finish_kernel(float *out, const double *partial, int64_t n_chunks)
{
    if (TRI_GLOBAL_ID != 0)
        return;
    out[0] += (float)tri_chunks_total(partial, n_chunks);
}

/* ---- many tensors in one launch (tri_op_sum_squares_multi) ----
 * A group of up to TRI_SQ_GROUP pieces (engine/device/launch_shapes.h), passed by value in the kernels' parameters (8.8 KiB: CUDA
 * 12.1 and later take 32 KiB of parameters on sm_70 and newer; the build needs CUDA 13, sm_80+): piece p is x[p] (len[p] elements, fp32 or bf16),
 * cut into chunks of chunk[p] (the single op's rule for len[p], cuda/elementwise/reduce.cu), whose sums go to
 * partial[first[p] ..] (first[n] chunks in all); its total is added to out[slot[p]]. Runs of
 * consecutive pieces with one slot, [run[r], run[r + 1]) for r < n_runs, are finished in order by
 * one block or thread, so out[slot] receives the same additions in the same order as the single op
 * called piece by piece: the same bits. */

typedef struct tri_sq_group {
    int n, n_runs;
    int bf16[TRI_SQ_GROUP];
    int run[TRI_SQ_GROUP + 1];
    int64_t slot[TRI_SQ_GROUP];
    const void *x[TRI_SQ_GROUP];
    int64_t len[TRI_SQ_GROUP], chunk[TRI_SQ_GROUP], first[TRI_SQ_GROUP + 1];
} tri_sq_group;

/* partial[gc] = the sum of squares of global chunk gc of the group, a thread per chunk */
TRI_KERNEL sum_squares_multi_partial_kernel(double *partial, tri_sq_group g)
{
    for (int64_t gc = TRI_GLOBAL_ID; gc < g.first[g.n]; gc += TRI_GLOBAL_STRIDE) {
        int p = tri_piece_of(g.first, g.n, gc);
        int64_t n = g.len[p], c = gc - g.first[p];
        int64_t lo = c * g.chunk[p] < n ? c * g.chunk[p] : n;
        int64_t hi = lo + g.chunk[p] < n ? lo + g.chunk[p] : n;
        partial[gc] = tri_sum_squares_range_mixed(g.x[p], g.bf16[p], lo, hi);
    }
}

/* out[slot[p]] += (float)tri_chunks_total(piece p's chunk sums), for the pieces in order, by
 * thread 0: the twin of cuda/elementwise/reduce.cu's block-per-run finish */
TRI_KERNEL reduce_multi_finish_kernel(float *out, const double *partial, tri_sq_group g)
{
    if (TRI_GLOBAL_ID != 0)
        return;
    for (int p = 0; p < g.n; p++)
        out[g.slot[p]] += (float)tri_chunks_total(partial + g.first[p], g.first[p + 1] - g.first[p]);
}

#endif
