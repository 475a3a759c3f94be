/* tests/test_ops_elementwise.c - element-wise ops and reductions on the CPU backend.
 *
 * fill, copy, add, axpy and scale move every activation and gradient buffer; sum_squares and
 * count_nonfinite feed gradient clipping and the skip-step check, so both must accumulate into
 * their output (one call per gradient segment) and sum_squares must stay precise over a million
 * elements (its contract: double accumulation within the call). Sizes are odd (1001) or large
 * (1e6 + 3), so chunked loops have ragged ends.
 *
 * Tolerances: one IEEE operation on floats is correctly rounded, so add and scale must be within
 * 2^-24 = 6e-8 relative of the exact fp64 result (tol 1e-7, no floor; measured 5.9e-8); axpy
 * rounds twice and may cancel, so 1e-6 with the usual floor of 1/10 of the RMS (measured 4.1e-7).
 * sum_squares: a double sum rounded to float, then added to the float already in out, is within
 * 2 * 2^-24 of the exact total, 3 * 2^-24 after a second call (tol 2e-7; measured 8.0e-8 and
 * 1.2e-7); a float accumulator is off by percents on the input used (see below). Counts are
 * exact. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_elementwise, .fini = ot_teardown);

#define ROUND1_TOL 1e-7
#define AXPY_TOL 1e-6
#define FLOOR 0.1

static const int64_t B = 1, T = 7, C = 143; /* 1001 elements */

static tri_tensor shape3(void)
{
    return tri_tensor_3d(NULL, TRI_F32, B, T, C);
}

Test(ops_elementwise, fill)
{
    tri_device *d = ot_device(1);
    size_t n = (size_t)(B * T * C);
    tri_tensor x =
        ot_tensor(d, shape3(), ot_uniform(n, -1.0f, 1.0f, 1)); /* old values to replace */
    cr_assert_eq(tri_op_fill(d, x, 0.375f), TRI_OK);
    float *got = ot_read(d, x);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], 0.375f, "element %zu", i);
    cr_assert_eq(tri_op_fill(d, x, -0.0f), TRI_OK);
    got = ot_read(d, x);
    for (size_t i = 0; i < n; i++)
        cr_assert(got[i] == 0.0f && signbit(got[i]), "element %zu is not -0", i);
}

Test(ops_elementwise, copy_f32_and_i32)
{
    tri_device *d = ot_device(1);
    size_t n = (size_t)(B * T * C);
    float *src = ot_uniform(n, -1.0f, 1.0f, 2);
    src[5] = NAN; /* copied as bits, not as values */
    tri_tensor s = ot_tensor(d, shape3(), src);
    /* another shape of the same numel: copy works on bytes */
    tri_tensor dst =
        ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)n), ot_uniform(n, 0.0f, 1.0f, 3));
    cr_assert_eq(tri_op_copy(d, dst, s), TRI_OK);
    cr_assert(ot_same_bits("copy f32", ot_read(d, dst), src, n));
    cr_assert_eq(tri_op_copy(d, s, s), TRI_OK); /* onto itself: a no-op */
    cr_assert(ot_same_bits("copy onto itself", ot_read(d, s), src, n));

    int32_t ids[9] = {0, -1, 7, 50256, INT32_MAX, INT32_MIN, 3, 2, 1}, got[9];
    tri_tensor is = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, 9), ids);
    tri_tensor id = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, 3, 3), NULL);
    cr_assert_eq(tri_op_copy(d, id, is), TRI_OK);
    ot_download(d, got, id);
    cr_assert_arr_eq(got, ids, sizeof ids);
}

/* The asynchronous read to host staging memory: the values after a sync, bit for bit, including a
 * NaN; the source may be overwritten by a later device op without changing what was read (the copy
 * runs in the device's order); an empty tensor reads nothing. */
Test(ops_elementwise, copy_to_host_async)
{
    tri_device *d = ot_device(1);
    size_t n = (size_t)(B * T * C);
    float *src = ot_uniform(n, -1.0f, 1.0f, 4);
    src[3] = NAN;
    tri_tensor s = ot_tensor(d, shape3(), src);
    void *host = NULL;
    cr_assert_eq(tri_device_host_alloc(d, &host, n * sizeof(float)), TRI_OK);
    cr_assert_eq(tri_device_copy_to_host_async(d, host, s), TRI_OK);
    cr_assert_eq(tri_op_fill(d, s, 2.0f), TRI_OK);
    cr_assert_eq(tri_device_sync(d), TRI_OK);
    cr_assert(ot_same_bits("copy_to_host_async", host, src, n));
    cr_assert_eq(tri_device_copy_to_host_async(d, NULL, tri_tensor_range(s, 0, 0)), TRI_OK);
    tri_device_host_free(d, host);
}

/* out = a + b into a separate tensor, into a (out aliases a) and into b. */
Test(ops_elementwise, add_and_aliasing)
{
    tri_device *d = ot_device(1);
    size_t n = (size_t)(B * T * C);
    float *a = ot_uniform(n, -1.0f, 1.0f, 10), *b = ot_uniform(n, -1.0f, 1.0f, 11);
    double *want = ot_doubles(n);
    for (size_t i = 0; i < n; i++)
        want[i] = (double)a[i] + b[i];
    tri_tensor ta = ot_tensor(d, shape3(), a), tb = ot_tensor(d, shape3(), b);
    tri_tensor tout = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, B * T, C), NULL);
    cr_assert_eq(tri_op_add(d, tout, ta, tb), TRI_OK);
    float *out = ot_read(d, tout);
    cr_assert(ot_close("add", out, want, n, 0.0, ROUND1_TOL));
    cr_assert_eq(tri_op_add(d, ta, ta, tb), TRI_OK);
    cr_assert(ot_same_bits("add out = a", ot_read(d, ta), out, n));
    cr_assert_eq(tri_device_copy_from_host(d, ta, a), TRI_OK);
    cr_assert_eq(tri_op_add(d, tb, ta, tb), TRI_OK);
    cr_assert(ot_same_bits("add out = b", ot_read(d, tb), out, n));
}

Test(ops_elementwise, axpy_and_scale)
{
    tri_device *d = ot_device(1);
    size_t n = (size_t)(B * T * C);
    float *x = ot_uniform(n, -1.0f, 1.0f, 20), *y = ot_uniform(n, -1.0f, 1.0f, 21);
    const float alpha = -0.7f, s = 1.3f;
    double *want = ot_doubles(n);
    for (size_t i = 0; i < n; i++)
        want[i] = (double)y[i] + (double)alpha * x[i];
    tri_tensor tx = ot_tensor(d, shape3(), x), ty = ot_tensor(d, shape3(), y);
    cr_assert_eq(tri_op_axpy(d, ty, alpha, tx), TRI_OK);
    cr_assert(ot_close("axpy", ot_read(d, ty), want, n, FLOOR, AXPY_TOL));

    for (size_t i = 0; i < n; i++)
        want[i] = (double)x[i] * s;
    cr_assert_eq(tri_op_scale(d, tx, s), TRI_OK);
    cr_assert(ot_close("scale", ot_read(d, tx), want, n, 0.0, ROUND1_TOL));
}

/* 1e6 + 3 elements: one of 4096 (square 2^24) then values in [-1, 1). A float accumulator stops
 * growing once it holds 2^24 (adding a square < 1 rounds back), losing ~2% of the total; the
 * contract's double accumulation keeps all of it. The output already holds 1.5 and must keep it
 * (+=), and a second call adds the same sum again. */
Test(ops_elementwise, sum_squares_precise_and_accumulating)
{
    tri_device *d = ot_device(1);
    const size_t n = 1000003;
    float *x = ot_uniform(n, -1.0f, 1.0f, 30);
    x[0] = 4096.0f;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += (double)x[i] * x[i];
    float init = 1.5f;
    tri_tensor tx = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)n), x);
    tri_tensor tout = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 1), &init);
    cr_assert_eq(tri_op_sum_squares(d, tout, tx), TRI_OK);
    double want = 1.5 + sum;
    float got;
    ot_download(d, &got, tout);
    cr_assert(ot_close("sum_squares 1e6 (+=)", &got, &want, 1, 0.0, 2e-7));
    cr_assert_eq(tri_op_sum_squares(d, tout, tx), TRI_OK);
    want = 1.5 + 2.0 * sum;
    ot_download(d, &got, tout);
    cr_assert(ot_close("sum_squares second call (+=)", &got, &want, 1, 0.0, 2e-7));
}

/* tri_op_sum_squares_multi adds to each slot exactly what tri_op_sum_squares adds piece by piece
 * (pieces of one slot in a row, an empty piece, fp32 and bf16 pieces), in 1 and 2 threads. */
Test(ops_elementwise, sum_squares_multi_same_bits_as_piece_by_piece)
{
    const int64_t lens[] = {1001, 0, 63, 100003, 1, 4096};
    const int64_t slots[] = {2, 0, 0, 3, 3, 1};
    enum { P = sizeof lens / sizeof *lens, S = 4 };
    const float start[S] = {0.25f, -1.0f, 0.0f, 3.0f};
    for (int threads = 1; threads <= 2; threads++) {
        tri_device *d = ot_device(threads);
        tri_tensor xs[P];
        tri_tensor want = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, S), start);
        tri_tensor got = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, S), start);
        for (int p = 0; p < P; p++) {
            float *x = ot_uniform((size_t)(lens[p] > 0 ? lens[p] : 1), -3.0f, 3.0f, 600 + (uint64_t)p);
            xs[p] = ot_tensor_as(d, p % 2 ? TRI_BF16 : TRI_F32, tri_tensor_1d(NULL, TRI_F32, lens[p] > 0 ? lens[p] : 1), x);
            xs[p] = tri_tensor_range(xs[p], 0, lens[p]);
            cr_assert_eq(tri_op_sum_squares(d, tri_tensor_range(want, slots[p], 1), xs[p]), TRI_OK);
        }
        cr_assert_eq(tri_op_sum_squares_multi(d, got, xs, slots, P), TRI_OK, "%s", tri_error_message());
        cr_assert(ot_same_bits("sum_squares_multi vs piece by piece", ot_read(d, got), ot_read(d, want), S));
    }
}

/* NaN (of both signs), +Inf and -Inf count; the largest, smallest and subnormal finite values and
 * -0 do not. The output already holds 2 (+=). */
Test(ops_elementwise, count_nonfinite_accumulating)
{
    tri_device *d = ot_device(1);
    const size_t n = 100003;
    float *x = ot_uniform(n, -1.0f, 1.0f, 40);
    x[0] = NAN;
    x[17] = -NAN;
    x[n - 1] = NAN;
    x[5000] = INFINITY;
    x[77777] = INFINITY;
    x[12345] = -INFINITY;
    x[1] = FLT_MAX;
    x[2] = -FLT_MAX;
    x[3] = FLT_MIN / 8.0f;
    x[4] = -0.0f;
    float init = 2.0f, got;
    tri_tensor tx = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)n), x);
    tri_tensor tout = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 1), &init);
    cr_assert_eq(tri_op_count_nonfinite(d, tout, tx), TRI_OK);
    ot_download(d, &got, tout);
    cr_assert_eq(got, 8.0f, "count_nonfinite gave %g, expected 2 + 6", (double)got);

    float *finite = ot_uniform(n, -1.0f, 1.0f, 41);
    cr_assert_eq(tri_device_copy_from_host(d, tx, finite), TRI_OK);
    cr_assert_eq(tri_op_count_nonfinite(d, tout, tx), TRI_OK);
    ot_download(d, &got, tout);
    cr_assert_eq(got, 8.0f, "no non-finite values must add nothing");
}
