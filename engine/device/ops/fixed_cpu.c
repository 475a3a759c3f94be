/* engine/device/ops/fixed_cpu.c - the fixed-point ops on the CPU backend: OpenMP loops over
 * engine/core/math.h's fixed-point conversions and saturating adds; the count of values without a
 * fixed-point value and the chunked 192-bit sums of squares are integers, exact in any order. */
#include <stdint.h>

#include "engine/core/math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"

/* ---- fixed point ---- */

/* acc += x in fixed point; *count += the elements that have no fixed-point value (each thread adds
 * its own count once: an integer sum, exact in any order). */
static void fixed_accumulate_loop(tri_tensor acc, tri_tensor x, int bits, int64_t *count)
{
    int64_t n = tri_tensor_numel(x), mine = 0;
    int64_t *a = acc.data;
    const float *px = fp(x);
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        if (tri_fixed_from_float(px[i], bits, &v))
            a[i] = tri_fixed_add(a[i], v);
        else
            mine++;
    }
#pragma omp atomic
    *count += mine;
}

int tri_cpu_fixed_accumulate(tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad)
{
    int64_t count = 0;
    TRI_ON_THREADS(nthreads(d), fixed_accumulate_loop(acc, x, bits, &count));
    fp(bad)[0] += (float)count;
    return TRI_OK;
}

static void fixed_to_float_loop(tri_tensor out, tri_tensor acc, int bits)
{
    int64_t n = tri_tensor_numel(out);
    const int64_t *a = acc.data;
    float *o = fp(out);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++)
        o[i] = tri_fixed_to_float(a[i], bits);
}

int tri_cpu_fixed_to_float(tri_device *d, tri_tensor out, tri_tensor acc, int bits)
{
    TRI_ON_THREADS(nthreads(d), fixed_to_float_loop(out, acc, bits));
    return TRI_OK;
}

static void add_i64_loop(tri_tensor y, tri_tensor x)
{
    int64_t n = tri_tensor_numel(y);
    int64_t *py = y.data;
    const int64_t *px = x.data;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++)
        py[i] = tri_fixed_add(py[i], px[i]);
}

int tri_cpu_add_i64(tri_device *d, tri_tensor y, tri_tensor x)
{
    TRI_ON_THREADS(nthreads(d), add_i64_loop(y, x));
    return TRI_OK;
}

/* Each chunk's sum of squares as a 192-bit integer (w) and its count of values with no fixed-point
 * value (bad). */
static void fixed_chunk_squares_loop(uint64_t (*w)[3], int64_t *bad, const float *x, int64_t n, int bits)
{
    int64_t per = (n + TRI_CPU_REDUCE_CHUNKS - 1) / TRI_CPU_REDUCE_CHUNKS;
#pragma omp for schedule(static)
    for (int c = 0; c < TRI_CPU_REDUCE_CHUNKS; c++) {
        int64_t lo = c * per < n ? c * per : n, hi = lo + per < n ? lo + per : n;
        w[c][0] = w[c][1] = w[c][2] = 0;
        bad[c] = tri_fixed_sum_squares_range(x, bits, lo, hi, w[c]);
    }
}

/* Exact: chunk sums as 192-bit integers, added into the limbs in any order. */
int tri_cpu_fixed_sum_squares(tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad)
{
    uint64_t w[TRI_CPU_REDUCE_CHUNKS][3];
    int64_t chunk_bad[TRI_CPU_REDUCE_CHUNKS], count = 0;
    TRI_ON_THREADS(nthreads(d), fixed_chunk_squares_loop(w, chunk_bad, fp(x), tri_tensor_numel(x), bits));
    int64_t *l = limbs.data;
    for (int c = 0; c < TRI_CPU_REDUCE_CHUNKS; c++) {
        for (int k = 0; k < 6; k++)
            l[k] += (int64_t)((w[c][k / 2] >> (32 * (k % 2))) & 0xffffffffu);
        count += chunk_bad[c];
    }
    fp(bad)[0] += (float)count;
    return TRI_OK;
}
