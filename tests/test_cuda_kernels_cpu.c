/* tests/test_cuda_kernels_cpu.c - the CUDA backend's simple kernels, run on the CPU.
 *
 * cuda/kernels/<family>.kern.h hold the simple form of every CUDA kernel (grid-stride loops, one thread
 * per element, row or column); cuda/kernels/shim.h compiles them as C here, with TRI_LAUNCH
 * running every emulated (block, thread) pair. Each kernel is run on random data and compared
 * with the CPU backend's op on the same data (tri_op_* on a CPU device, whose memory is host
 * memory), so the indexing, the bounds and the accumulate-or-overwrite contract of the code the GPU
 * runs are tested on a machine without one.
 *
 * Every kernel runs under three launch shapes: the one the CUDA backend uses (TRI_BLOCK threads,
 * tri_grid_for blocks), 3 blocks of 32 threads (the grid-stride loop wraps many times) and a single
 * thread. Sizes are awkward: not multiples of the block size, one-row and one-token inputs.
 * Every buffer has guard bytes on both sides that must be untouched afterwards (no out-of-bounds
 * writes), and outputs start as NaN where the op overwrites them, or as random values where it
 * accumulates.
 *
 * Expected agreement: the kernels call the same engine/math.h functions as the CPU backend, in the
 * same order per element, row and column, and this file is compiled with the same flags (no FMA
 * contraction in ISO C mode), so results must be bit-identical, except attention, where the CPU
 * backend multiplies with sgemm (other summation order): relative 1e-5 with a floor of 1/10 of the
 * RMS (measured at most 3.9e-6, dk of the 17-token case, with TRIDENT_TEST_VERBOSE=1). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels/adamw.kern.h"
#include "cuda/kernels/attention.kern.h"
#include "cuda/kernels/convert.kern.h"
#include "cuda/kernels/crossentropy.kern.h"
#include "cuda/kernels/elementwise.kern.h"
#include "cuda/kernels/embedding.kern.h"
#include "cuda/kernels/fixed.kern.h"
#include "cuda/kernels/gelu.kern.h"
#include "cuda/kernels/layernorm.kern.h"
#include "cuda/kernels/matmul.kern.h"
#include "cuda/kernels/reduce.kern.h"
#include "engine/device.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

TestSuite(cuda_kernels_cpu, .fini = ot_teardown);

#define ATT_TOL 1e-5
#define FLOOR 0.1

/* ---- launch shapes ---- */

typedef struct shape {
    int64_t grid, block;
} shape;

#define N_SHAPES 3
/* The backend's shape for `items` work items, a small wrapping grid, one thread. */
static void shapes_for(int64_t items, shape s[N_SHAPES])
{
    s[0] = (shape){tri_grid_for(items, TRI_BLOCK), TRI_BLOCK};
    s[1] = (shape){3, 32};
    s[2] = (shape){1, 1};
}

/* ---- guarded buffers: GUARD bytes of a pattern on each side, checked after every launch ---- */

#define GUARD 256
#define MAX_GUARDED 64

typedef struct guarded {
    unsigned char *base;
    size_t bytes;
} guarded;

static guarded live[MAX_GUARDED];
static int n_live;

static void *gbuf(size_t bytes, const void *init)
{
    cr_assert_lt(n_live, MAX_GUARDED);
    unsigned char *base = malloc(bytes + 2 * GUARD);
    cr_assert(base);
    memset(base, 0xA5, GUARD);
    memset(base + GUARD + bytes, 0x5A, GUARD);
    if (init)
        memcpy(base + GUARD, init, bytes);
    else
        memset(base + GUARD, 0xFF, bytes); /* NaN as floats: overwritten outputs start as NaN */
    live[n_live++] = (guarded){base, bytes};
    return base + GUARD;
}

/* Fails the test if any guard byte of any live buffer changed; frees them all. */
static void check_guards_and_free(const char *what)
{
    for (int i = 0; i < n_live; i++) {
        for (size_t k = 0; k < GUARD; k++) {
            cr_assert_eq(live[i].base[k], 0xA5, "%s: buffer %d written %zu bytes before its start",
                         what, i, GUARD - k);
            cr_assert_eq(live[i].base[GUARD + live[i].bytes + k], 0x5A,
                         "%s: buffer %d written %zu bytes past its end", what, i, k);
        }
        free(live[i].base);
    }
    n_live = 0;
}

static float *gfloats(size_t n, const float *init)
{
    return gbuf(n * sizeof(float), init);
}

static tri_device *cpu(void)
{
    return ot_device(1);
}

static void same_bits(const char *what, const float *got, const float *want, size_t n)
{
    cr_assert(ot_same_bits(what, got, want, n), "%s differs from the CPU backend", what);
}

/* ---- element-wise ---- */

static const int64_t SIZES[] = {1, 255, 1001, 4099};
#define N_SIZES (sizeof SIZES / sizeof *SIZES)

Test(cuda_kernels_cpu, elementwise)
{
    tri_device *d = cpu();
    for (size_t z = 0; z < N_SIZES; z++) {
        int64_t n = SIZES[z];
        float *a = ot_uniform((size_t)n, -2.0f, 2.0f, 10 + z), *b = ot_uniform((size_t)n, -2.0f, 2.0f, 20 + z);
        float *want = ot_floats((size_t)n);
        shape s[N_SHAPES];
        shapes_for(n, s);
        for (int k = 0; k < N_SHAPES; k++) {
            /* fill */
            float *x = gfloats((size_t)n, NULL);
            TRI_LAUNCH(fill_kernel, s[k].grid, s[k].block, x, 0.625f, n);
            memcpy(want, a, (size_t)n * sizeof *want);
            cr_assert_eq(tri_op_fill(d, tri_tensor_1d(want, TRI_F32, n), 0.625f), TRI_OK);
            same_bits("fill_kernel", x, want, (size_t)n);
            /* add, out aliasing a */
            float *o = gfloats((size_t)n, a);
            float *y = gfloats((size_t)n, b);
            TRI_LAUNCH(add_kernel, s[k].grid, s[k].block, o, o, y, n);
            cr_assert_eq(tri_op_add(d, tri_tensor_1d(want, TRI_F32, n), tri_tensor_1d(a, TRI_F32, n),
                                    tri_tensor_1d(b, TRI_F32, n)), TRI_OK);
            same_bits("add_kernel", o, want, (size_t)n);
            /* axpy and scale on the result */
            TRI_LAUNCH(axpy_kernel, s[k].grid, s[k].block, o, -0.3f, y, n);
            cr_assert_eq(tri_op_axpy(d, tri_tensor_1d(want, TRI_F32, n), -0.3f, tri_tensor_1d(b, TRI_F32, n)), TRI_OK);
            same_bits("axpy_kernel", o, want, (size_t)n);
            TRI_LAUNCH(scale_kernel, s[k].grid, s[k].block, o, 1.7f, n);
            cr_assert_eq(tri_op_scale(d, tri_tensor_1d(want, TRI_F32, n), 1.7f), TRI_OK);
            same_bits("scale_kernel", o, want, (size_t)n);
            check_guards_and_free("elementwise");
        }
    }
}

/* ---- reductions ---- */

Test(cuda_kernels_cpu, sum_squares_and_count_nonfinite)
{
    tri_device *d = cpu();
    const int64_t sizes[] = {1, 63, 1001, 100003};
    for (int z = 0; z < 4; z++) {
        int64_t n = sizes[z];
        float *x = ot_uniform((size_t)n, -3.0f, 3.0f, 30 + (uint64_t)z);
        float *bad = ot_uniform((size_t)n, -3.0f, 3.0f, 40 + (uint64_t)z);
        bad[n / 2] = NAN;
        bad[n - 1] = INFINITY;
        bad[0] = -INFINITY;
        /* the CPU backend's 64 chunks give its exact result; other chunk sizes agree closely */
        int64_t chunks[] = {(n + 63) / 64, 1000, 7};
        for (int c = 0; c < 3; c++) {
            int64_t chunk = chunks[c], n_chunks = (n + chunk - 1) / chunk;
            shape s[N_SHAPES];
            shapes_for(n_chunks, s);
            for (int k = 0; k < N_SHAPES; k++) {
                float start = 0.25f, want = start, want_bad = start;
                float *out = gfloats(1, &start), *out_bad = gfloats(1, &start);
                double *partial = gbuf((size_t)n_chunks * sizeof(double), NULL);
                const float *gx = gfloats((size_t)n, x), *gbad = gfloats((size_t)n, bad);
                TRI_LAUNCH(sum_squares_partial_kernel, s[k].grid, s[k].block, partial, gx, n, chunk, n_chunks);
                TRI_LAUNCH(reduce_finish_kernel, s[k].grid, s[k].block, out, partial, n_chunks);
                TRI_LAUNCH(count_nonfinite_partial_kernel, s[k].grid, s[k].block, partial, gbad, n, chunk, n_chunks);
                TRI_LAUNCH(reduce_finish_kernel, s[k].grid, s[k].block, out_bad, partial, n_chunks);
                cr_assert_eq(tri_op_sum_squares(d, tri_tensor_1d(&want, TRI_F32, 1), tri_tensor_1d(x, TRI_F32, n)), TRI_OK);
                cr_assert_eq(tri_op_count_nonfinite(d, tri_tensor_1d(&want_bad, TRI_F32, 1), tri_tensor_1d(bad, TRI_F32, n)), TRI_OK);
                if (c == 0)
                    same_bits("sum_squares kernels, 64 chunks", out, &want, 1);
                else
                    cr_assert_leq(fabs((double)*out - want), 2.5e-7 * want, "sum_squares chunk %lld: %.9g vs %.9g",
                                  (long long)chunk, (double)*out, (double)want);
                cr_assert_eq(*out_bad, want_bad, "count_nonfinite: %g vs %g", (double)*out_bad, (double)want_bad);
                cr_assert_eq(*out_bad, start + (n == 1 ? 1.0f : 3.0f));
                check_guards_and_free("reduce");
            }
        }
    }
}

/* ---- fixed point (deterministic mode): integer results, so bit-identical for any chunking ---- */

/* Values including NaN, Inf and out-of-range ones (|x| >= 2^(62 - 44) = 262144). */
static float *fixed_inputs(int64_t n, uint64_t seed)
{
    float *x = ot_uniform((size_t)n, -3.0f, 3.0f, seed);
    for (int64_t i = 0; i < n; i += 5)
        x[i] = ldexpf(x[i], -45); /* rounding to 2^-44 matters */
    x[n / 2] = NAN;
    if (n > 2) {
        x[1] = 3e5f;
        x[n - 1] = -INFINITY;
    }
    return x;
}

Test(cuda_kernels_cpu, fixed_point)
{
    tri_device *d = cpu();
    const int bits = 44;
    for (size_t z = 0; z < N_SIZES; z++) {
        int64_t n = SIZES[z];
        float *x = fixed_inputs(n, 50 + z);
        int64_t *acc0 = (int64_t *)ot_ints(2 * (size_t)n), *want = (int64_t *)ot_ints(2 * (size_t)n); /* n int64s */
        for (int64_t i = 0; i < n; i++)
            acc0[i] = (int64_t)(i * 1000003) - 77;
        shape s[N_SHAPES];
        shapes_for(n, s);
        for (int k = 0; k < N_SHAPES; k++) {
            /* accumulate (and its bad count through the partials), then to_float, then add_i64 */
            int64_t chunk = (n + 63) / 64, n_chunks = (n + chunk - 1) / chunk;
            float start = 1.0f, want_bad = start;
            int64_t *acc = gbuf((size_t)n * sizeof *acc, acc0);
            float *gx = gfloats((size_t)n, x), *bad = gfloats(1, &start);
            double *partial = gbuf((size_t)n_chunks * sizeof(double), NULL);
            TRI_LAUNCH(fixed_accumulate_kernel, s[k].grid, s[k].block, acc, gx, bits, n);
            TRI_LAUNCH(fixed_bad_partial_kernel, s[k].grid, s[k].block, partial, gx, bits, n, chunk, n_chunks);
            TRI_LAUNCH(fixed_bad_finish_kernel, s[k].grid, s[k].block, bad, partial, n_chunks);
            memcpy(want, acc0, (size_t)n * sizeof *want);
            cr_assert_eq(tri_op_fixed_accumulate(d, tri_tensor_1d(want, TRI_I64, n), tri_tensor_1d(x, TRI_F32, n),
                                                 bits, tri_tensor_1d(&want_bad, TRI_F32, 1)), TRI_OK);
            cr_assert_eq(memcmp(acc, want, (size_t)n * sizeof *acc), 0, "fixed_accumulate_kernel differs, n %lld",
                         (long long)n);
            cr_assert_eq(*bad, want_bad, "fixed bad count %g vs %g", (double)*bad, (double)want_bad);
            cr_assert_eq(*bad, start + (n > 2 ? 3.0f : 1.0f));

            float *out = gfloats((size_t)n, NULL), *want_out = ot_floats((size_t)n);
            TRI_LAUNCH(fixed_to_float_kernel, s[k].grid, s[k].block, out, acc, bits, n);
            cr_assert_eq(tri_op_fixed_to_float(d, tri_tensor_1d(want_out, TRI_F32, n), tri_tensor_1d(want, TRI_I64, n),
                                               bits), TRI_OK);
            same_bits("fixed_to_float_kernel", out, want_out, (size_t)n);

            const int64_t *other = gbuf((size_t)n * sizeof *acc, acc0);
            TRI_LAUNCH(add_i64_kernel, s[k].grid, s[k].block, acc, other, n);
            cr_assert_eq(tri_op_add_i64(d, tri_tensor_1d(want, TRI_I64, n), tri_tensor_1d(acc0, TRI_I64, n)), TRI_OK);
            cr_assert_eq(memcmp(acc, want, (size_t)n * sizeof *acc), 0, "add_i64_kernel differs, n %lld", (long long)n);
            check_guards_and_free("fixed element-wise");
        }
        /* sum of squares: the CPU backend's 64 chunks give identical limbs; other chunkings the
         * same integer (same reading after carrying) */
        int64_t want_limbs[6] = {1, 2, 3, 4, 5, 6};
        float want_bad = 0.0f;
        cr_assert_eq(tri_op_fixed_sum_squares(d, tri_tensor_1d(want_limbs, TRI_I64, 6), tri_tensor_1d(x, TRI_F32, n),
                                              bits, tri_tensor_1d(&want_bad, TRI_F32, 1)), TRI_OK);
        int64_t chunks[] = {(n + 63) / 64, 1000, 7};
        for (int c = 0; c < 3; c++) {
            int64_t chunk = chunks[c], n_chunks = (n + chunk - 1) / chunk;
            shape s2[N_SHAPES];
            shapes_for(n_chunks, s2);
            for (int k = 0; k < N_SHAPES; k++) {
                const int64_t init[6] = {1, 2, 3, 4, 5, 6};
                float zero = 0.0f;
                int64_t *limbs = gbuf(sizeof init, init);
                float *bad = gfloats(1, &zero), *gx = gfloats((size_t)n, x);
                uint64_t *words = gbuf((size_t)n_chunks * 4 * sizeof(uint64_t), NULL);
                TRI_LAUNCH(fixed_sumsq_partial_kernel, s2[k].grid, s2[k].block, words, gx, bits, n, chunk, n_chunks);
                TRI_LAUNCH(fixed_sumsq_finish_kernel, s2[k].grid, s2[k].block, limbs, bad, words, n_chunks);
                if (c == 0)
                    cr_assert_eq(memcmp(limbs, want_limbs, sizeof init), 0, "fixed_sumsq limbs differ, n %lld",
                                 (long long)n);
                double got_v = tri_fixed_limbs_value(limbs, 2 * bits), want_v = tri_fixed_limbs_value(want_limbs, 2 * bits);
                cr_assert_eq(memcmp(&got_v, &want_v, sizeof got_v), 0, "fixed_sumsq chunk %lld: %.17g vs %.17g",
                             (long long)chunk, got_v, want_v);
                cr_assert_eq(*bad, want_bad, "fixed_sumsq bad %g vs %g", (double)*bad, (double)want_bad);
                check_guards_and_free("fixed sum of squares");
            }
        }
    }
}

/* ---- matmul family: bias backward and the K == 0 cases ---- */

Test(cuda_kernels_cpu, bias_backward_and_k0)
{
    tri_device *d = cpu();
    const int64_t dims[][2] = {{1, 1}, {1, 300}, {37, 5}, {129, 257}};
    for (int z = 0; z < 4; z++) {
        int64_t N = dims[z][0], OC = dims[z][1];
        float *dout = ot_uniform((size_t)(N * OC), -1.0f, 1.0f, 50 + (uint64_t)z);
        float *db0 = ot_uniform((size_t)OC, -1.0f, 1.0f, 60 + (uint64_t)z);
        float *c0 = ot_uniform((size_t)(N * OC), -1.0f, 1.0f, 70 + (uint64_t)z);
        float *want = ot_floats((size_t)(N * OC));
        shape s[N_SHAPES];
        shapes_for(OC, s);
        for (int k = 0; k < N_SHAPES; k++) {
            float *db = gfloats((size_t)OC, db0);
            const float *kd = gfloats((size_t)(N * OC), dout);
            TRI_LAUNCH(bias_backward_kernel, s[k].grid, s[k].block, db, kd, N, OC);
            memcpy(want, db0, (size_t)OC * sizeof *want);
            cr_assert_eq(tri_op_bias_backward(d, tri_tensor_1d(want, TRI_F32, OC), tri_tensor_2d(dout, TRI_F32, N, OC)), TRI_OK);
            same_bits("bias_backward_kernel", db, want, (size_t)OC);
            /* matmul with K == 0: c = beta c (0 for beta 0), or the bias */
            float empty[1];
            tri_tensor a0 = tri_tensor_2d(empty, TRI_F32, N, 0), b0 = tri_tensor_2d(empty, TRI_F32, 0, OC);
            float betas[] = {0.0f, 0.5f};
            for (int bi = 0; bi < 2; bi++) {
                float *c = gfloats((size_t)(N * OC), c0);
                c[0] = NAN;
                memcpy(want, c, (size_t)(N * OC) * sizeof *want);
                TRI_LAUNCH(matmul_scale_kernel, s[k].grid, s[k].block, c, betas[bi], N * OC);
                cr_assert_eq(tri_op_matmul(d, tri_tensor_2d(want, TRI_F32, N, OC), a0, b0, tri_tensor_none(), false,
                                           false, betas[bi]), TRI_OK);
                same_bits("matmul_scale_kernel", c, want, (size_t)(N * OC));
            }
            float *c = gfloats((size_t)(N * OC), NULL);
            const float *kbias = gfloats((size_t)OC, db0);
            TRI_LAUNCH(bias_broadcast_kernel, s[k].grid, s[k].block, c, kbias, N, OC);
            cr_assert_eq(tri_op_matmul(d, tri_tensor_2d(want, TRI_F32, N, OC), a0, b0, tri_tensor_1d(db0, TRI_F32, OC),
                                       false, false, 0.0f), TRI_OK);
            same_bits("bias_broadcast_kernel", c, want, (size_t)(N * OC));
            check_guards_and_free("matmul family");
        }
    }
}

/* ---- layernorm ---- */

Test(cuda_kernels_cpu, layernorm)
{
    tri_device *d = cpu();
    const int64_t dims[][2] = {{1, 7}, {5, 1}, {33, 67}, {300, 40}};
    for (int z = 0; z < 4; z++) {
        int64_t N = dims[z][0], C = dims[z][1];
        size_t nc = (size_t)(N * C);
        float *x = ot_uniform(nc, -2.0f, 2.0f, 80 + (uint64_t)z), *w = ot_uniform((size_t)C, 0.5f, 1.5f, 81);
        float *b = ot_uniform((size_t)C, -0.5f, 0.5f, 82), *g = ot_uniform(nc, -1.0f, 1.0f, 83);
        float *dx0 = ot_uniform(nc, -1.0f, 1.0f, 84), *dw0 = ot_uniform((size_t)C, -1.0f, 1.0f, 85);
        float *db0 = ot_uniform((size_t)C, -1.0f, 1.0f, 86);
        /* CPU reference: forward, then backward accumulating into dx0, dw0, db0 copies */
        float *out = ot_floats(nc), *mean = ot_floats((size_t)N), *rstd = ot_floats((size_t)N);
        float *dx = ot_floats(nc), *dw = ot_floats((size_t)C), *db = ot_floats((size_t)C);
        memcpy(dx, dx0, nc * sizeof *dx);
        memcpy(dw, dw0, (size_t)C * sizeof *dw);
        memcpy(db, db0, (size_t)C * sizeof *db);
        tri_tensor tx = tri_tensor_2d(x, TRI_F32, N, C), tw = tri_tensor_1d(w, TRI_F32, C);
        tri_tensor tm = tri_tensor_1d(mean, TRI_F32, N), tr = tri_tensor_1d(rstd, TRI_F32, N);
        cr_assert_eq(tri_op_layernorm_forward(d, tri_tensor_2d(out, TRI_F32, N, C), tm, tr, tx, tw,
                                              tri_tensor_1d(b, TRI_F32, C)), TRI_OK);
        cr_assert_eq(tri_op_layernorm_backward(d, tri_tensor_2d(dx, TRI_F32, N, C), tri_tensor_1d(dw, TRI_F32, C),
                                               tri_tensor_1d(db, TRI_F32, C), tri_tensor_2d(g, TRI_F32, N, C), tx,
                                               tw, tm, tr), TRI_OK);
        for (int k = 0; k < N_SHAPES; k++) {
            shape rows[N_SHAPES], cols[N_SHAPES];
            shapes_for(N, rows);
            shapes_for(C, cols);
            float *ko = gfloats(nc, NULL), *km = gfloats((size_t)N, NULL), *kr = gfloats((size_t)N, NULL);
            const float *kx = gfloats(nc, x), *kw = gfloats((size_t)C, w), *kb = gfloats((size_t)C, b);
            const float *kg = gfloats(nc, g);
            float *kdx = gfloats(nc, dx0), *kdw = gfloats((size_t)C, dw0), *kdb = gfloats((size_t)C, db0);
            TRI_LAUNCH(layernorm_forward_kernel, rows[k].grid, rows[k].block, ko, km, kr, kx, kw, kb, N, C);
            same_bits("layernorm_forward_kernel out", ko, out, nc);
            same_bits("layernorm_forward_kernel mean", km, mean, (size_t)N);
            same_bits("layernorm_forward_kernel rstd", kr, rstd, (size_t)N);
            TRI_LAUNCH(layernorm_backward_input_kernel, rows[k].grid, rows[k].block, kdx, kg, kx, kw, km, kr, N, C);
            TRI_LAUNCH(layernorm_backward_params_kernel, cols[k].grid, cols[k].block, kdw, kdb, kg, kx, km, kr, N, C);
            same_bits("layernorm_backward_input_kernel", kdx, dx, nc);
            same_bits("layernorm_backward_params_kernel dw", kdw, dw, (size_t)C);
            same_bits("layernorm_backward_params_kernel db", kdb, db, (size_t)C);
            check_guards_and_free("layernorm");
        }
    }
}

/* ---- attention ---- */

static void close_to(const char *what, const float *got, const float *want, size_t n)
{
    double *w = ot_widen(want, n);
    cr_assert(ot_close(what, got, w, n, FLOOR, ATT_TOL), "%s differs from the CPU backend", what);
}

Test(cuda_kernels_cpu, attention)
{
    tri_device *d = cpu();
    const int64_t dims[][3] = {{1, 1, 1}, {1, 5, 3}, {2, 7, 2}, {3, 17, 4}}; /* B, T, NH; HS = 4 */
    for (int z = 0; z < 4; z++) {
        int64_t B = dims[z][0], T = dims[z][1], NH = dims[z][2], C = NH * 4;
        size_t nqkv = (size_t)(B * T * 3 * C), natt = (size_t)(B * NH * T * T), nout = (size_t)(B * T * C);
        float *qkv = ot_uniform(nqkv, -1.5f, 1.5f, 90 + (uint64_t)z), *g = ot_uniform(nout, -1.0f, 1.0f, 91);
        float *out = ot_floats(nout), *att = ot_floats(natt), *dqkv = ot_floats(nqkv), *datt = ot_floats(natt);
        tri_tensor tq = tri_tensor_3d(qkv, TRI_F32, B, T, 3 * C), ta = tri_tensor_4d(att, TRI_F32, B, NH, T, T);
        cr_assert_eq(tri_op_attention_forward(d, tri_tensor_3d(out, TRI_F32, B, T, C), ta, tq), TRI_OK);
        cr_assert_eq(tri_op_attention_backward(d, tri_tensor_3d(dqkv, TRI_F32, B, T, 3 * C),
                                               tri_tensor_4d(datt, TRI_F32, B, NH, T, T),
                                               tri_tensor_3d(g, TRI_F32, B, T, C), tq, ta), TRI_OK);
        int64_t rows = B * NH * T;
        shape s[N_SHAPES];
        shapes_for(rows, s);
        for (int k = 0; k < N_SHAPES; k++) {
            /* the whole op in the simple form */
            const float *kq = gfloats(nqkv, qkv), *kg = gfloats(nout, g);
            float *ko = gfloats(nout, NULL), *ka = gfloats(natt, NULL);
            float *kdq = gfloats(nqkv, NULL), *kda = gfloats(natt, NULL);
            TRI_LAUNCH(attention_forward_kernel, s[k].grid, s[k].block, ko, ka, kq, B, T, C, NH);
            close_to("attention_forward_kernel out", ko, out, nout);
            close_to("attention_forward_kernel att", ka, att, natt);
            TRI_LAUNCH(attention_backward_rows_kernel, s[k].grid, s[k].block, kdq, kda, kg, kq, ka, B, T, C, NH);
            TRI_LAUNCH(attention_backward_cols_kernel, s[k].grid, s[k].block, kdq, kda, kg, kq, ka, B, T, C, NH);
            close_to("attention_backward kernels dqkv", kdq, dqkv, nqkv);
            close_to("attention_backward kernels dscores", kda, datt, natt);
            /* the row pieces the cuBLASLt path runs, on the CPU backend's scores */
            float *scores = gfloats(natt, NULL);
            for (int64_t r = 0; r < rows; r++) {
                int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
                for (int64_t j = 0; j < T; j++) {
                    float sdot = 0.0f;
                    for (int64_t i = 0; i < 4; i++)
                        sdot += qkv[(b * T + t) * 3 * C + h * 4 + i] * qkv[(b * T + j) * 3 * C + C + h * 4 + i];
                    scores[r * T + j] = sdot * 0.5f; /* 1 / sqrt(HS = 4) */
                }
            }
            TRI_LAUNCH(causal_softmax_kernel, s[k].grid, s[k].block, scores, rows, T);
            close_to("causal_softmax_kernel", scores, att, natt);
            /* softmax backward from dprobs = dout v^T of the CPU's probabilities */
            float *dp = gfloats(natt, NULL);
            for (int64_t r = 0; r < rows; r++) {
                int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
                for (int64_t j = 0; j < T; j++) {
                    float sdot = 0.0f;
                    for (int64_t i = 0; i < 4; i++)
                        sdot += g[(b * T + t) * C + h * 4 + i] * qkv[(b * T + j) * 3 * C + 2 * C + h * 4 + i];
                    dp[r * T + j] = sdot;
                }
            }
            const float *katt = gfloats(natt, att);
            TRI_LAUNCH(causal_softmax_backward_kernel, s[k].grid, s[k].block, dp, katt, rows, T);
            close_to("causal_softmax_backward_kernel", dp, datt, natt);
            check_guards_and_free("attention");
        }
    }
}

/* ---- GELU ---- */

Test(cuda_kernels_cpu, gelu)
{
    tri_device *d = cpu();
    for (size_t z = 0; z < N_SIZES; z++) {
        int64_t n = SIZES[z];
        float *x = ot_uniform((size_t)n, -6.0f, 6.0f, 100 + z), *g = ot_uniform((size_t)n, -1.0f, 1.0f, 101 + z);
        float *out = ot_floats((size_t)n), *dx = ot_floats((size_t)n);
        cr_assert_eq(tri_op_gelu_forward(d, tri_tensor_1d(out, TRI_F32, n), tri_tensor_1d(x, TRI_F32, n)), TRI_OK);
        cr_assert_eq(tri_op_gelu_backward(d, tri_tensor_1d(dx, TRI_F32, n), tri_tensor_1d(x, TRI_F32, n),
                                          tri_tensor_1d(g, TRI_F32, n)), TRI_OK);
        shape s[N_SHAPES];
        shapes_for(n, s);
        for (int k = 0; k < N_SHAPES; k++) {
            float *ko = gfloats((size_t)n, NULL);
            const float *kx = gfloats((size_t)n, x);
            float *kg = gfloats((size_t)n, g);
            TRI_LAUNCH(gelu_forward_kernel, s[k].grid, s[k].block, ko, kx, n);
            same_bits("gelu_forward_kernel", ko, out, (size_t)n);
            TRI_LAUNCH(gelu_backward_kernel, s[k].grid, s[k].block, kg, kx, kg, n); /* in place */
            same_bits("gelu_backward_kernel", kg, dx, (size_t)n);
            check_guards_and_free("gelu");
        }
    }
}

/* ---- embeddings ---- */

Test(cuda_kernels_cpu, embeddings)
{
    tri_device *d = cpu();
    const int64_t dims[][4] = {{1, 1, 5, 1}, {7, 3, 11, 4}, {40, 33, 20, 8}}; /* N, C, V_l, T */
    for (int z = 0; z < 3; z++) {
        int64_t N = dims[z][0], C = dims[z][1], V_l = dims[z][2], T = dims[z][3];
        int64_t vocab_start = 3, row0 = z == 2 ? 5 : 0;
        size_t nc = (size_t)(N * C), vc = (size_t)(V_l * C);
        int32_t *tok = ot_ints((size_t)N);
        for (int64_t n = 0; n < N; n++) /* ids below, inside (repeating) and above the shard */
            tok[n] = (int32_t)((n * 7) % (V_l + 6));
        float *wte = ot_uniform(vc, -1.0f, 1.0f, 110), *wpe = ot_uniform((size_t)(T * C), -1.0f, 1.0f, 111);
        float *g = ot_uniform(nc, -1.0f, 1.0f, 112), *o0 = ot_uniform(nc, -1.0f, 1.0f, 113);
        float *dwte0 = ot_uniform(vc, -1.0f, 1.0f, 114), *dwpe0 = ot_uniform((size_t)(T * C), -1.0f, 1.0f, 115);
        float *out = ot_floats(nc), *pout = ot_floats(nc), *dwte = ot_floats(vc), *dwpe = ot_floats((size_t)(T * C));
        memcpy(pout, o0, nc * sizeof *pout);
        memcpy(dwte, dwte0, vc * sizeof *dwte);
        memcpy(dwpe, dwpe0, (size_t)(T * C) * sizeof *dwpe);
        tri_tensor tt = tri_tensor_1d(tok, TRI_I32, N), tg = tri_tensor_2d(g, TRI_F32, N, C);
        cr_assert_eq(tri_op_embedding_forward(d, tri_tensor_2d(out, TRI_F32, N, C), tt,
                                              tri_tensor_2d(wte, TRI_F32, V_l, C), vocab_start), TRI_OK);
        cr_assert_eq(tri_op_embedding_backward(d, tri_tensor_2d(dwte, TRI_F32, V_l, C), tg, tt, vocab_start), TRI_OK);
        cr_assert_eq(tri_op_position_forward(d, tri_tensor_2d(pout, TRI_F32, N, C), tri_tensor_2d(wpe, TRI_F32, T, C),
                                             T, row0), TRI_OK);
        cr_assert_eq(tri_op_position_backward(d, tri_tensor_2d(dwpe, TRI_F32, T, C), tg, T, row0), TRI_OK);
        shape el[N_SHAPES], cols[N_SHAPES];
        shapes_for(N * C, el);
        shapes_for(C, cols);
        for (int k = 0; k < N_SHAPES; k++) {
            const int32_t *kt = gbuf((size_t)N * sizeof(int32_t), tok);
            const float *kg = gfloats(nc, g);
            float *ko = gfloats(nc, NULL), *kp = gfloats(nc, o0);
            float *kdwte = gfloats(vc, dwte0), *kdwpe = gfloats((size_t)(T * C), dwpe0);
            const float *kwte = gfloats(vc, wte), *kwpe = gfloats((size_t)(T * C), wpe);
            TRI_LAUNCH(embedding_forward_kernel, el[k].grid, el[k].block, ko, kt, kwte, N, C, V_l, vocab_start);
            same_bits("embedding_forward_kernel", ko, out, nc);
            TRI_LAUNCH(embedding_backward_kernel, cols[k].grid, cols[k].block, kdwte, kg, kt, N, C, V_l, vocab_start);
            same_bits("embedding_backward_kernel", kdwte, dwte, vc);
            TRI_LAUNCH(position_forward_kernel, el[k].grid, el[k].block, kp, kwpe, N, C, T, row0);
            same_bits("position_forward_kernel", kp, pout, nc);
            TRI_LAUNCH(position_backward_kernel, cols[k].grid, cols[k].block, kdwpe, kg, N, C, T, row0);
            same_bits("position_backward_kernel", kdwpe, dwpe, (size_t)(T * C));
            check_guards_and_free("embeddings");
        }
    }
}

/* ---- cross-entropy ---- */

Test(cuda_kernels_cpu, cross_entropy)
{
    tri_device *d = cpu();
    const int64_t dims[][3] = {{1, 9, 9}, {5, 13, 10}, {37, 300, 257}, {3, 16, 0}}; /* N, V_l, V_valid */
    for (int z = 0; z < 4; z++) {
        int64_t N = dims[z][0], V_l = dims[z][1], V_valid = dims[z][2], vocab_start = 2;
        size_t nv = (size_t)(N * V_l);
        float *logits = ot_uniform(nv, -8.0f, 8.0f, 120 + (uint64_t)z);
        int32_t *tgt = ot_ints((size_t)N);
        for (int64_t n = 0; n < N; n++) /* targets below, inside and past the valid columns */
            tgt[n] = (int32_t)((n * 5) % (V_l + 4));
        float *maxes = ot_floats((size_t)N), *stats = ot_floats((size_t)(2 * N)), *losses = ot_floats((size_t)N);
        float *dl = ot_floats(nv);
        tri_tensor tl = tri_tensor_2d(logits, TRI_F32, N, V_l), tm = tri_tensor_1d(maxes, TRI_F32, N);
        tri_tensor ts = tri_tensor_2d(stats, TRI_F32, N, 2), tt = tri_tensor_1d(tgt, TRI_I32, N);
        cr_assert_eq(tri_op_ce_row_max(d, tm, tl, V_valid), TRI_OK);
        cr_assert_eq(tri_op_ce_sumexp_target(d, ts, tl, tm, tt, vocab_start, V_valid), TRI_OK);
        if (V_valid > 0)
            cr_assert_eq(tri_op_ce_loss(d, tri_tensor_1d(losses, TRI_F32, N), tm, ts), TRI_OK);
        cr_assert_eq(tri_op_ce_backward(d, tri_tensor_2d(dl, TRI_F32, N, V_l), tl, tm, ts, tt, vocab_start, V_valid,
                                        0.125f), TRI_OK);
        shape rows[N_SHAPES], el[N_SHAPES];
        shapes_for(N, rows);
        shapes_for(N * V_l, el);
        for (int k = 0; k < N_SHAPES; k++) {
            float *kl = gfloats(nv, logits);
            const int32_t *kt = gbuf((size_t)N * sizeof(int32_t), tgt);
            float *km = gfloats((size_t)N, NULL), *ks = gfloats((size_t)(2 * N), NULL), *kloss = gfloats((size_t)N, NULL);
            TRI_LAUNCH(ce_row_max_kernel, rows[k].grid, rows[k].block, km, kl, N, V_l, V_valid);
            same_bits("ce_row_max_kernel", km, maxes, (size_t)N);
            TRI_LAUNCH(ce_sumexp_target_kernel, rows[k].grid, rows[k].block, ks, kl, km, kt, N, V_l, vocab_start, V_valid);
            same_bits("ce_sumexp_target_kernel", ks, stats, (size_t)(2 * N));
            if (V_valid > 0) {
                TRI_LAUNCH(ce_loss_kernel, rows[k].grid, rows[k].block, kloss, km, ks, N);
                same_bits("ce_loss_kernel", kloss, losses, (size_t)N);
            }
            TRI_LAUNCH(ce_backward_kernel, el[k].grid, el[k].block, kl, kl, km, ks, kt, N, V_l, vocab_start, V_valid,
                       0.125f); /* in place, as llm.c's fused classifier */
            same_bits("ce_backward_kernel", kl, dl, nv);
            check_guards_and_free("cross-entropy");
        }
    }
}

/* ---- AdamW ---- */

Test(cuda_kernels_cpu, adamw)
{
    tri_device *d = cpu();
    for (size_t z = 0; z < N_SIZES; z++) {
        int64_t n = SIZES[z];
        float *p0 = ot_uniform((size_t)n, -1.0f, 1.0f, 130 + z), *g = ot_uniform((size_t)n, -1.0f, 1.0f, 131 + z);
        float *m0 = ot_uniform((size_t)n, -0.1f, 0.1f, 132 + z), *v0 = ot_uniform((size_t)n, 0.0f, 0.01f, 133 + z);
        tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                .grad_scale = 0.7f, .step = 3};
        float *p = ot_floats((size_t)n), *m = ot_floats((size_t)n), *v = ot_floats((size_t)n);
        memcpy(p, p0, (size_t)n * sizeof *p);
        memcpy(m, m0, (size_t)n * sizeof *m);
        memcpy(v, v0, (size_t)n * sizeof *v);
        cr_assert_eq(tri_op_adamw(d, tri_tensor_1d(p, TRI_F32, n), tri_tensor_1d(g, TRI_F32, n),
                                  tri_tensor_1d(m, TRI_F32, n), tri_tensor_1d(v, TRI_F32, n), &hp), TRI_OK);
        /* the host side of the CUDA op: bias corrections as the CPU backend computes them */
        float bc1 = 1.0f - powf(hp.beta1, (float)hp.step), bc2 = 1.0f - powf(hp.beta2, (float)hp.step);
        shape s[N_SHAPES];
        shapes_for(n, s);
        for (int k = 0; k < N_SHAPES; k++) {
            float *kp = gfloats((size_t)n, p0), *km = gfloats((size_t)n, m0), *kv = gfloats((size_t)n, v0);
            const float *kgrad = gfloats((size_t)n, g);
            TRI_LAUNCH(adamw_kernel, s[k].grid, s[k].block, kp, kgrad, km, kv, n, hp.lr, hp.beta1,
                       hp.beta2, hp.eps, hp.weight_decay, bc1, bc2, hp.grad_scale);
            same_bits("adamw_kernel param", kp, p, (size_t)n);
            same_bits("adamw_kernel m", km, m, (size_t)n);
            same_bits("adamw_kernel v", kv, v, (size_t)n);
            check_guards_and_free("adamw");
        }
    }
}

/* ---- bf16 conversion (no CPU op: against engine/math.h's scalar functions and known values) ---- */

static float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

Test(cuda_kernels_cpu, bf16_conversion)
{
    const int64_t n = 1031;
    float *x = ot_uniform((size_t)n, -1e4f, 1e4f, 140);
    /* special values and ties: 1 + 2^-8 ties to even (1), 1 + 3 * 2^-8 ties up, NaN stays NaN */
    x[0] = 1.0f + 1.0f / 256.0f;
    x[1] = 1.0f + 3.0f / 256.0f;
    x[2] = NAN;
    x[3] = INFINITY;
    x[4] = -0.0f;
    x[5] = bits_to_float(0x7f7fffffu); /* FLT_MAX rounds up to Inf */
    x[6] = bits_to_float(0x00000001u); /* smallest subnormal */
    shape s[N_SHAPES];
    shapes_for(n, s);
    for (int k = 0; k < N_SHAPES; k++) {
        uint16_t *h = gbuf((size_t)n * sizeof(uint16_t), NULL);
        float *back = gfloats((size_t)n, NULL);
        const float *kx = gfloats((size_t)n, x);
        TRI_LAUNCH(float_to_bf16_kernel, s[k].grid, s[k].block, h, kx, n);
        TRI_LAUNCH(bf16_to_float_kernel, s[k].grid, s[k].block, back, h, n);
        for (int64_t i = 0; i < n; i++) {
            cr_assert_eq(h[i], tri_float_to_bf16(x[i]), "element %lld", (long long)i);
            if (i >= 7) /* finite normal values: within half a bf16 ulp */
                cr_assert_leq(fabsf(back[i] - x[i]), fabsf(x[i]) / 256.0f, "element %lld: %g -> %g", (long long)i,
                              (double)x[i], (double)back[i]);
        }
        cr_assert_eq(h[0], 0x3f80);
        cr_assert_eq(h[1], 0x3f82);
        cr_assert(isnan(back[2]));
        cr_assert_eq(h[3], 0x7f80);
        cr_assert_eq(h[4], 0x8000);
        cr_assert_eq(h[5], 0x7f80);
        check_guards_and_free("bf16 conversion");
    }
}
