/* engine/device/ops/elementwise_cpu.c - the element-wise and reduction ops on the CPU backend.
 *
 * OpenMP loops over fp32 (the wrappers widen bf16), run on the device's threads
 * (engine/device/cpu_threads.h). Full reductions (sum_squares, count_nonfinite) sum a fixed number
 * of chunks, each in double by engine/core/math.h's range sums, then the chunks in math.h's order,
 * so the result is the same for any thread count and equal to the CUDA kernels'. convert is the
 * bf16 rounding of math.h, one vectorised loop per direction. */
#include <stdbool.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"

/* ---- element-wise and reductions ---- */

static void fill_loop(tri_tensor x, float value)
{
    float *restrict p = fp(x);
    int64_t n = tri_tensor_numel(x);
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        p[i] = value;
}

int tri_cpu_fill(tri_device *d, tri_tensor x, float value)
{
    TRI_ON_THREADS(nthreads(d), fill_loop(x, value));
    return TRI_OK;
}

static void add_loop(tri_tensor out, tri_tensor a, tri_tensor b)
{
    float *o = fp(out);
    const float *x = fp(a), *y = fp(b);
    int64_t n = tri_tensor_numel(out);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++)
        o[i] = x[i] + y[i];
}

int tri_cpu_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b)
{
    TRI_ON_THREADS(nthreads(d), add_loop(out, a, b));
    return TRI_OK;
}

static void axpy_loop(tri_tensor y, float alpha, tri_tensor x)
{
    float *py = fp(y);
    const float *px = fp(x);
    int64_t n = tri_tensor_numel(y);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++)
        py[i] += alpha * px[i];
}

int tri_cpu_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x)
{
    TRI_ON_THREADS(nthreads(d), axpy_loop(y, alpha, x));
    return TRI_OK;
}

static void scale_loop(tri_tensor x, float s)
{
    float *p = fp(x);
    int64_t n = tri_tensor_numel(x);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++)
        p[i] *= s;
}

int tri_cpu_scale(tri_device *d, tri_tensor x, float s)
{
    TRI_ON_THREADS(nthreads(d), scale_loop(x, s));
    return TRI_OK;
}

/* Sums x[i]^2 (squares) or the non-finite x[i] over TRI_CPU_REDUCE_CHUNKS fixed chunks (each in double
 * by engine/core/math.h's range sums, which the CUDA kernels share), then the chunk sums in
 * math.h's order (tri_chunks_total). */
static void chunk_sums_loop(double *part, const float *x, int64_t n, int squares)
{
    int64_t per = (n + TRI_CPU_REDUCE_CHUNKS - 1) / TRI_CPU_REDUCE_CHUNKS;
#pragma omp for schedule(static)
    for (int c = 0; c < TRI_CPU_REDUCE_CHUNKS; c++) {
        int64_t lo = c * per < n ? c * per : n, hi = lo + per < n ? lo + per : n;
        part[c] = squares ? tri_sum_squares_range(x, lo, hi) : tri_count_nonfinite_range(x, lo, hi);
    }
}

static double chunked_sum(tri_device *d, const float *x, int64_t n, int squares)
{
    double part[TRI_CPU_REDUCE_CHUNKS];
    TRI_ON_THREADS(nthreads(d), chunk_sums_loop(part, x, n, squares));
    return tri_chunks_total(part, TRI_CPU_REDUCE_CHUNKS);
}

int tri_cpu_sum_squares(tri_device *d, tri_tensor out, tri_tensor x)
{
    fp(out)[0] += (float)chunked_sum(d, fp(x), tri_tensor_numel(x), 1);
    return TRI_OK;
}

int tri_cpu_count_nonfinite(tri_device *d, tri_tensor out, tri_tensor x)
{
    fp(out)[0] += (float)chunked_sum(d, fp(x), tri_tensor_numel(x), 0);
    return TRI_OK;
}

/* n bf16 values widened to fp32 (exact), or fp32 rounded to bf16 (tri_float_to_bf16): one loop per
 * direction, each vectorised (a per-element dtype test, as tri_load / tri_store, is not). */
static void convert_loop(void *dst, const void *src, int64_t n, bool to_bf16)
{
    if (to_bf16) {
        const float *restrict s = src;
        uint16_t *restrict o = dst;
#pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            o[i] = tri_float_to_bf16(s[i]);
    } else {
        const uint16_t *restrict s = src;
        float *restrict o = dst;
#pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            o[i] = tri_bf16_to_float(s[i]);
    }
}

/* dst = src in dst's dtype: fp32 <-> bf16 through engine/core/math.h's widening and rounding; equal
 * dtypes copy. */
int tri_cpu_convert(tri_device *d, tri_tensor dst, tri_tensor src)
{
    int64_t n = tri_tensor_numel(src);
    if (src.dtype == dst.dtype)
        memmove(dst.data, src.data, tri_tensor_bytes(src));
    else
        TRI_ON_THREADS(n > 65536 ? nthreads(d) : 1, convert_loop(dst.data, src.data, n, dst.dtype == TRI_BF16));
    return TRI_OK;
}
