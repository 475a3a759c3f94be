/* tests/test_ops_threads.c - results independent of the CPU backend's thread count.
 *
 * engine/device/device_cpu.c promises that every sum feeding a parameter gradient (bias, layernorm and
 * embedding backward, which sum over rows) and every full reduction (sum_squares) is the same for
 * any thread count: column blocks with rows summed in order, and a fixed chunk count. That is what
 * makes a run reproducible across machines and lets the parallel tests compare layouts bit for bit.
 * Each op runs here on a device with 1 thread and one with 2, on identical inputs, and the outputs
 * must be bit-identical. Shapes are wide enough (C = 200: three full column blocks of 64 and a
 * partial one; N = 37 rows; 100003 elements) that a thread-order-dependent sum would differ.
 * These ops call no BLAS, so only OpenMP's team size matters; the device passes it to every loop
 * (num_threads), which overrides the suite's OMP_NUM_THREADS=1. */
#include <criterion/criterion.h>
#include <omp.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_threads, .fini = ot_teardown);

static const int64_t N = 37, C = 200, V_l = 11, n_pos = 8, T = 5;

/* The team the 2-thread device asks for must really have 2 threads, or the test proves nothing. */
Test(ops_threads, two_threads_are_granted)
{
    int team = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    cr_assert_eq(team, 2);
}

static tri_tensor rows_cols(tri_device *d, int64_t rows, int64_t cols, uint64_t seed)
{
    return ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, rows, cols),
                     ot_uniform((size_t)(rows * cols), -1.0f, 1.0f, seed));
}

static tri_tensor vec(tri_device *d, int64_t n, uint64_t seed)
{
    return tri_tensor_flat(rows_cols(d, 1, n, seed));
}

static float *bias_backward(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor db = vec(d, C, 1), dout = rows_cols(d, N, C, 2);
    cr_assert_eq(tri_op_bias_backward(d, db, dout), TRI_OK);
    return ot_read(d, db);
}

/* dinp, dw and db one after another in one array. */
static float *layernorm_backward(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor inp = rows_cols(d, N, C, 3), w = vec(d, C, 4), b = vec(d, C, 5);
    tri_tensor out = rows_cols(d, N, C, 6), mean = vec(d, N, 7), rstd = vec(d, N, 8);
    tri_tensor dinp = rows_cols(d, N, C, 9), dw = vec(d, C, 10), db = vec(d, C, 11);
    tri_tensor dout = rows_cols(d, N, C, 12);
    cr_assert_eq(tri_op_layernorm_forward(d, out, mean, rstd, inp, w, b), TRI_OK);
    cr_assert_eq(tri_op_layernorm_backward(d, dinp, dw, db, dout, inp, w, mean, rstd), TRI_OK);
    float *all = ot_floats((size_t)(N * C + 2 * C));
    ot_download(d, all, dinp);
    ot_download(d, all + N * C, dw);
    ot_download(d, all + N * C + C, db);
    return all;
}

static float *embedding_backward(int threads)
{
    tri_device *d = ot_device(threads);
    int32_t *tokens = ot_ints((size_t)N);
    for (int64_t n = 0; n < N; n++)
        tokens[n] = (int32_t)((n * 7) % 15); /* repeats, and ids 11..14 outside [0, V_l) */
    tri_tensor tok = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), tokens);
    tri_tensor dwte = rows_cols(d, V_l, C, 13), dout = rows_cols(d, N, C, 14);
    cr_assert_eq(tri_op_embedding_backward(d, dwte, dout, tok, 0), TRI_OK);
    return ot_read(d, dwte);
}

static float *position_backward(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor dwpe = rows_cols(d, n_pos, C, 15), dout = rows_cols(d, N, C, 16);
    cr_assert_eq(tri_op_position_backward(d, dwpe, dout, T, 3), TRI_OK);
    return ot_read(d, dwpe);
}

static float *sum_squares(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor x = vec(d, 100003, 17), out = vec(d, 1, 18);
    cr_assert_eq(tri_op_sum_squares(d, out, x), TRI_OK);
    return ot_read(d, out);
}

Test(ops_threads, bias_backward)
{
    cr_assert(ot_same_bits("bias_backward 1 vs 2 threads", bias_backward(2), bias_backward(1),
                           (size_t)C));
}

Test(ops_threads, layernorm_backward)
{
    cr_assert(ot_same_bits("layernorm_backward 1 vs 2 threads", layernorm_backward(2),
                           layernorm_backward(1), (size_t)(N * C + 2 * C)));
}

Test(ops_threads, embedding_backward)
{
    cr_assert(ot_same_bits("embedding_backward 1 vs 2 threads", embedding_backward(2),
                           embedding_backward(1), (size_t)(V_l * C)));
}

Test(ops_threads, position_backward)
{
    cr_assert(ot_same_bits("position_backward 1 vs 2 threads", position_backward(2),
                           position_backward(1), (size_t)(n_pos * C)));
}

Test(ops_threads, sum_squares)
{
    cr_assert(ot_same_bits("sum_squares 1 vs 2 threads", sum_squares(2), sum_squares(1), 1));
}
