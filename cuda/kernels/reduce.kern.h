/* cuda/kernels/reduce.kern.h - simple kernels of sum_squares and count_nonfinite (CUDA and C).
 *
 * Two deterministic passes, no atomics: the first gives one thread per chunk of `chunk` elements
 * and writes the chunk's sum in double (engine/core/math.h's range sums, the CPU backend's arithmetic
 * per chunk); the second, one thread, totals the chunk sums in math.h's order (tri_chunks_total) and
 * adds the total, rounded to float, to out[0]. The result depends only on the chunk size, never on the launch shape; with the
 * CPU backend's 64 chunks it is the CPU's result bit for bit. x is fp32 or bf16 (x_bf16; widening
 * is exact, so a bf16 x sums exactly the values the CPU backend's fp32 copy holds); out is fp32. */
#ifndef TRIDENT_CUDA_KERNELS_REDUCE_KERN_H
#define TRIDENT_CUDA_KERNELS_REDUCE_KERN_H

#include "cuda/kernels/shim.h"

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
 * thread 0: the twin of cuda/reduce.cu's block-wide finish */
TRI_KERNEL reduce_finish_kernel(float *out, const double *partial, int64_t n_chunks)
{
    if (TRI_GLOBAL_ID != 0)
        return;
    out[0] += (float)tri_chunks_total(partial, n_chunks);
}

#endif
