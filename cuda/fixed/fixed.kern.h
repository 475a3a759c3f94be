/* cuda/fixed/fixed.kern.h - simple kernels of the fixed-point ops of deterministic mode (CUDA and C).
 *
 * Element-wise: fixed_accumulate (acc += round(x * 2^bits), engine/core/math.h's tri_fixed_from_float),
 * fixed_to_float, add_i64. Reductions as in reduce.kern.h: one thread per chunk writes the chunk's
 * count of unrepresentable elements, or its exact 192-bit sum of squares, into a partials buffer;
 * one thread then adds the chunks. Integer sums are exact, so the result never depends on the
 * chunking or the launch shape. */
#ifndef TRIDENT_CUDA_FIXED_FIXED_KERN_H
#define TRIDENT_CUDA_FIXED_FIXED_KERN_H

#include "cuda/kernels/shim.h"

/* acc[i] += round(x[i] * 2^bits) for representable x[i] */
TRI_KERNEL fixed_accumulate_kernel(int64_t *acc, const float *x, int bits, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE) {
        int64_t v;
        if (tri_fixed_from_float(x[i], bits, &v))
            acc[i] = tri_fixed_add(acc[i], v);
    }
}

/* partial[c] = number of elements of chunk c that are not representable */
TRI_KERNEL fixed_bad_partial_kernel(double *partial, const float *x, int bits, int64_t n, int64_t chunk,
                                    int64_t n_chunks)
{
    for (int64_t c = TRI_GLOBAL_ID; c < n_chunks; c += TRI_GLOBAL_STRIDE) {
        int64_t lo = c * chunk < n ? c * chunk : n, hi = lo + chunk < n ? lo + chunk : n, bad = 0;
        for (int64_t i = lo; i < hi; i++) {
            int64_t v;
            bad += !tri_fixed_from_float(x[i], bits, &v);
        }
        partial[c] = (double)bad;
    }
}

/* bad[0] += the chunks' counts (one thread) */
TRI_KERNEL fixed_bad_finish_kernel(float *bad, const double *partial, int64_t n_chunks)
{
    if (TRI_GLOBAL_ID != 0)
        return;
    double count = 0.0;
    for (int64_t c = 0; c < n_chunks; c++)
        count += partial[c];
    bad[0] += (float)count;
}

/* out[i] = acc[i] * 2^-bits */
TRI_KERNEL fixed_to_float_kernel(float *out, const int64_t *acc, int bits, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        out[i] = tri_fixed_to_float(acc[i], bits);
}

/* y[i] += x[i] */
TRI_KERNEL add_i64_kernel(int64_t *y, const int64_t *x, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        y[i] = tri_fixed_add(y[i], x[i]);
}

/* words[4c .. 4c+3] = chunk c's exact sum of squares (3 words) and its unrepresentable count */
TRI_KERNEL fixed_sumsq_partial_kernel(uint64_t *words, const float *x, int bits, int64_t n, int64_t chunk,
                                      int64_t n_chunks)
{
    for (int64_t c = TRI_GLOBAL_ID; c < n_chunks; c += TRI_GLOBAL_STRIDE) {
        int64_t lo = c * chunk < n ? c * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
        uint64_t w[3] = {0, 0, 0};
        words[4 * c + 3] = (uint64_t)tri_fixed_sum_squares_range(x, bits, lo, hi, w);
        words[4 * c] = w[0];
        words[4 * c + 1] = w[1];
        words[4 * c + 2] = w[2];
    }
}

/* limbs[k] += 32-bit piece k of every chunk's sum (one thread); bad[0] += the chunks' counts */
TRI_KERNEL fixed_sumsq_finish_kernel(int64_t *limbs, float *bad, const uint64_t *words, int64_t n_chunks)
{
    if (TRI_GLOBAL_ID != 0)
        return;
    uint64_t count = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        for (int k = 0; k < 6; k++)
            limbs[k] += (int64_t)((words[4 * c + k / 2] >> (32 * (k % 2))) & 0xffffffffu);
        count += words[4 * c + 3];
    }
    bad[0] += (float)count;
}

#endif
