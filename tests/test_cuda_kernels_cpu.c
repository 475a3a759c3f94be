/* tests/test_cuda_kernels_cpu.c - the CUDA backend's simple kernels, run on the CPU.
 *
 * cuda/<family>/<op>.kern.h hold the simple form of every CUDA kernel (grid-stride loops, one thread
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
 * Precision (engine/device/device.h): every floating argument of a kernel may be fp32 or bf16. Each op
 * runs all-fp32, all-bf16 and mixed (e.g. bf16 inputs into an fp32 gradient); the CPU backend gets
 * the same tensors with the same dtypes, and its wrappers widen the bf16 ones to fp32 copies, run
 * the fp32 op and round the outputs once, which is the reference.
 *
 * Expected agreement: the kernels call the same engine/core/math.h functions as the CPU backend, in the
 * same order per element, row and column, and this file is compiled with the same flags (no FMA
 * contraction in ISO C mode), so results must be bit-identical, fp32 or bf16, except:
 * - attention, where the CPU backend multiplies with sgemm (other summation order): relative 1e-5
 *   with a floor of 1/10 of the RMS for fp32 results (measured at most 2.8e-6, with
 *   TRIDENT_TEST_VERBOSE=1). A bf16 result may round that difference the other way: one bf16 ulp,
 *   normalised error (max |diff| / max |want|) 2^-7 (measured 0: no rounding flipped). With a bf16
 *   att (forward) or datt (backward) the kernels also round the scores, exponentials and d
 *   probabilities between their passes, which the CPU's fp32 copies do not: normalised 1e-2
 *   (measured at most 5.9e-3, forward out; 5.4e-3 dscores, 3.9e-3 att, 2.9e-3 dqkv);
 * - fused attention (flash.kern.h) against the CPU backend's flash ops: the same tiling and online
 *   softmax, but dot products left to right against sgemm's order: normalised error (max |diff| /
 *   max |want|, the fused attention's measure) 1e-5 in fp32, 2^-7 in bf16 (measured 4.7e-7 and 4.1e-5);
 * - embedding_backward into a bf16 dwte: a token that repeats in the batch rounds the gradient at
 *   every repeat, the CPU backend once: normalised 1e-2 (measured at most 6.1e-3).
 * Everything else (RMSNorm, SwiGLU and the rotary embedding of the Llama family included), every
 * dtype mix included, is bit-identical. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/optimizer/adamw.kern.h"
#include "cuda/optimizer/momentum.kern.h"
#include "cuda/attention/attention.kern.h"
#include "cuda/elementwise/convert.kern.h"
#include "cuda/crossentropy/crossentropy.kern.h"
#include "cuda/elementwise/elementwise.kern.h"
#include "cuda/embedding/embedding.kern.h"
#include "cuda/fixed/fixed.kern.h"
#include "cuda/attention/flash.kern.h"
#include "cuda/activations/bias_gelu.kern.h"
#include "cuda/activations/gelu.kern.h"
#include "cuda/matmul/colsum.kern.h"
#include "cuda/norms/layernorm.kern.h"
#include "cuda/matmul/matmul.kern.h"
#include "cuda/elementwise/reduce.kern.h"
#include "cuda/norms/rmsnorm.kern.h"
#include "cuda/attention/rope.kern.h"
#include "cuda/activations/swiglu.kern.h"
#include "engine/device/device.h"
#include "engine/device/ops/attention_math.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

TestSuite(cuda_kernels_cpu, .fini = ot_teardown);

#define ATT_TOL 1e-5
#define ATT_TOL_BF16 7.8125e-3 /* 2^-7 */
#define ATT_TOL_BF16_ROUNDED 1e-2
#define EMB_TOL_BF16 1e-2
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

/* ---- storage: fp32 (bf16 flag 0) or bf16 (1) arrays, as the kernels take them ---- */

static tri_dtype dt(int bf16)
{
    return bf16 ? TRI_BF16 : TRI_F32;
}

static size_t esize(int bf16)
{
    return bf16 ? sizeof(uint16_t) : sizeof(float);
}

/* A tracked host array holding x (n values) in the given storage: bf16 rounds to nearest even. */
static void *host_as(const float *x, size_t n, int bf16)
{
    void *p = ot_floats(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        tri_store(p, bf16, (int64_t)i, x[i]);
    return p;
}

/* A tracked host copy of n elements of a typed array. */
static void *host_copy(const void *p, size_t n, int bf16)
{
    void *q = ot_floats(n ? n : 1);
    memcpy(q, p, n * esize(bf16));
    return q;
}

/* A guarded buffer of n elements of the storage, from init (same storage) or NaN-filled. */
static void *gtyped(size_t n, int bf16, const void *init)
{
    return gbuf(n * esize(bf16), init); /* 0xFF bytes: NaN in fp32 and in bf16 */
}

/* got and want (n elements of one storage) hold the same bits. */
static void same_typed(const char *what, const void *got, const void *want, size_t n, int bf16)
{
    for (size_t i = 0; i < n; i++) {
        const char *g = (const char *)got + i * esize(bf16), *w = (const char *)want + i * esize(bf16);
        cr_assert(memcmp(g, w, esize(bf16)) == 0, "%s (%s): element %zu differs from the CPU backend: %.9g vs %.9g",
                  what, bf16 ? "bf16" : "fp32", i, (double)tri_load(got, bf16, (int64_t)i),
                  (double)tri_load(want, bf16, (int64_t)i));
    }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "ok   %-48s %-4s %zu elements bit-identical\n", what, bf16 ? "bf16" : "fp32", n);
}

/* For typed arrays (no allocation: the suite compares many times), one of two errors <= tol:
 * relative, max_i |got_i - want_i| / max(|want_i|, FLOOR * RMS(want)) as ot_close (fp32 results);
 * or normalised, max_i |got_i - want_i| / max_i |want_i| as the GPU suites (results that bf16
 * rounding separates from the reference: relative to small elements a bf16 ulp is large, relative
 * to the tensor's scale it is 2^-8). Prints both on failure, and always with TRIDENT_TEST_VERBOSE. */
static void close_typed(const char *what, const void *got, const void *want, size_t n, int bf16, double tol,
                        bool normalised)
{
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) {
        double w = tri_load(want, bf16, (int64_t)i);
        ss += w * w;
    }
    double floor = FLOOR * sqrt(ss / (double)(n ? n : 1)), err = 0.0, diff = 0.0, top = 0.0;
    floor = floor < 1e-30 ? 1e-30 : floor;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double g = tri_load(got, bf16, (int64_t)i), w = tri_load(want, bf16, (int64_t)i);
        double e = fabs(g - w) / (fabs(w) > floor ? fabs(w) : floor);
        e = isnan(e) ? INFINITY : e;
        diff = fabs(g - w) > diff ? fabs(g - w) : diff;
        top = fabs(w) > top ? fabs(w) : top;
        if (e > err) {
            err = e;
            worst = i;
        }
    }
    double norm = diff / (top > 0 ? top : 1e-30), checked = normalised ? norm : err;
    if (checked > tol || getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s %-48s %-4s relative %.3e normalised %.3e (%s tol %.1e) worst [%zu] got %.9g want %.9g\n",
                checked <= tol ? "ok  " : "FAIL", what, bf16 ? "bf16" : "fp32", err, norm,
                normalised ? "normalised" : "relative", tol, worst,
                n ? (double)tri_load(got, bf16, (int64_t)worst) : 0.0,
                n ? (double)tri_load(want, bf16, (int64_t)worst) : 0.0);
    cr_assert(checked <= tol, "%s differs from the CPU backend beyond %g", what, tol);
}

/* ---- element-wise ---- */

static const int64_t SIZES[] = {1, 255, 1001, 4099};
#define N_SIZES (sizeof SIZES / sizeof *SIZES)

/* Storage of the element-wise ops' arguments: o is x of fill, out and a of add (aliased), y of
 * axpy and x of scale; b is add's b and axpy's x. */
typedef struct ew_prec {
    int o, b;
} ew_prec;

static void elementwise_case(tri_device *d, int64_t n, size_t z, ew_prec p)
{
    float *a = ot_uniform((size_t)n, -2.0f, 2.0f, 10 + z), *b = ot_uniform((size_t)n, -2.0f, 2.0f, 20 + z);
    void *ha = host_as(a, (size_t)n, p.o), *hb = host_as(b, (size_t)n, p.b);
    void *want = host_copy(ha, (size_t)n, p.o);
    tri_tensor tw = tri_tensor_1d(want, dt(p.o), n), tb = tri_tensor_1d(hb, dt(p.b), n);
    shape s[N_SHAPES];
    shapes_for(n, s);
    for (int k = 0; k < N_SHAPES; k++) {
        /* fill */
        void *x = gtyped((size_t)n, p.o, NULL);
        TRI_LAUNCH(fill_kernel, s[k].grid, s[k].block, x, p.o, 0.625f, n);
        memcpy(want, ha, (size_t)n * esize(p.o));
        cr_assert_eq(tri_op_fill(d, tw, 0.625f), TRI_OK);
        same_typed("fill_kernel", x, want, (size_t)n, p.o);
        /* add, out aliasing a (in both) */
        void *o = gtyped((size_t)n, p.o, ha);
        const void *y = gtyped((size_t)n, p.b, hb);
        TRI_LAUNCH(add_kernel, s[k].grid, s[k].block, o, p.o, o, p.o, y, p.b, n);
        memcpy(want, ha, (size_t)n * esize(p.o));
        cr_assert_eq(tri_op_add(d, tw, tw, tb), TRI_OK, "%s", tri_error_message());
        same_typed("add_kernel", o, want, (size_t)n, p.o);
        /* axpy and scale on the result */
        TRI_LAUNCH(axpy_kernel, s[k].grid, s[k].block, o, p.o, -0.3f, y, p.b, n);
        cr_assert_eq(tri_op_axpy(d, tw, -0.3f, tb), TRI_OK);
        same_typed("axpy_kernel", o, want, (size_t)n, p.o);
        TRI_LAUNCH(scale_kernel, s[k].grid, s[k].block, o, p.o, 1.7f, n);
        cr_assert_eq(tri_op_scale(d, tw, 1.7f), TRI_OK);
        same_typed("scale_kernel", o, want, (size_t)n, p.o);
        check_guards_and_free("elementwise");
    }
}

Test(cuda_kernels_cpu, elementwise)
{
    tri_device *d = cpu();
    const ew_prec precs[] = {{0, 0}, {1, 1}, {1, 0}, {0, 1}}; /* fp32, bf16, two mixes */
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (size_t z = 0; z < N_SIZES; z++)
            elementwise_case(d, SIZES[z], z, precs[q]);
}

/* ---- reductions: x fp32 or bf16, out fp32 ---- */

static void reductions_case(tri_device *d, int64_t n, int z, int xb)
{
    float *xf = ot_uniform((size_t)n, -3.0f, 3.0f, 30 + (uint64_t)z);
    float *badf = ot_uniform((size_t)n, -3.0f, 3.0f, 40 + (uint64_t)z);
    badf[n / 2] = NAN;
    badf[n - 1] = INFINITY;
    badf[0] = -INFINITY;
    void *x = host_as(xf, (size_t)n, xb), *bad = host_as(badf, (size_t)n, xb);
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
            const void *gx = gtyped((size_t)n, xb, x), *gbad = gtyped((size_t)n, xb, bad);
            TRI_LAUNCH(sum_squares_partial_kernel, s[k].grid, s[k].block, partial, gx, xb, n, chunk, n_chunks);
            TRI_LAUNCH(reduce_finish_kernel, s[k].grid, s[k].block, out, partial, n_chunks);
            TRI_LAUNCH(count_nonfinite_partial_kernel, s[k].grid, s[k].block, partial, gbad, xb, n, chunk, n_chunks);
            TRI_LAUNCH(reduce_finish_kernel, s[k].grid, s[k].block, out_bad, partial, n_chunks);
            cr_assert_eq(tri_op_sum_squares(d, tri_tensor_1d(&want, TRI_F32, 1), tri_tensor_1d(x, dt(xb), n)), TRI_OK);
            cr_assert_eq(tri_op_count_nonfinite(d, tri_tensor_1d(&want_bad, TRI_F32, 1), tri_tensor_1d(bad, dt(xb), n)),
                         TRI_OK);
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

Test(cuda_kernels_cpu, sum_squares_and_count_nonfinite)
{
    tri_device *d = cpu();
    const int64_t sizes[] = {1, 63, 1001, 100003};
    for (int xb = 0; xb < 2; xb++)
        for (int z = 0; z < 4; z++)
            reductions_case(d, sizes[z], z, xb);
}
/* Many tensors in one launch (tri_op_sum_squares_multi's kernels): pieces of several sizes (one
 * empty, two pairs sharing a slot, fp32 and bf16 mixed) through the group's partial and finish kernels
 * must add to every slot exactly what the single-tensor kernels add piece by piece with the same
 * chunk lengths. */
Test(cuda_kernels_cpu, sum_squares_multi_same_bits_as_piece_by_piece)
{
    const int64_t lens[] = {1001, 0, 63, 100003, 1, 4096, 777};
    const int64_t slot_of[] = {2, 0, 3, 3, 1, 4, 4};
    const int64_t chunk_of[] = {64, 64, 7, 1000, 64, 64, 13};
    enum { P = sizeof lens / sizeof *lens, S = 5 };
    const float start[S] = {0.25f, -1.0f, 0.0f, 3.0f, 0.5f};
    tri_sq_group g;
    memset(&g, 0, sizeof g);
    float *want = gfloats(S, start);
    for (int p = 0; p < P; p++) {
        int xb = p % 2;
        float *xf = ot_uniform((size_t)(lens[p] > 0 ? lens[p] : 1), -3.0f, 3.0f, 500 + (uint64_t)p);
        const void *gx = gtyped((size_t)(lens[p] > 0 ? lens[p] : 1), xb, host_as(xf, (size_t)(lens[p] > 0 ? lens[p] : 1), xb));
        int64_t n_chunks = (lens[p] + chunk_of[p] - 1) / chunk_of[p];
        g.x[p] = gx;
        g.bf16[p] = xb;
        g.len[p] = lens[p];
        g.chunk[p] = chunk_of[p];
        g.slot[p] = slot_of[p];
        g.first[p + 1] = g.first[p] + n_chunks;
        if (p == 0 || slot_of[p] != slot_of[p - 1])
            g.run[g.n_runs++] = p;
        /* the single-tensor kernels, piece by piece */
        double *partial = gbuf((size_t)(n_chunks > 0 ? n_chunks : 1) * sizeof(double), NULL);
        TRI_LAUNCH(sum_squares_partial_kernel, 1, 1, partial, gx, xb, lens[p], chunk_of[p], n_chunks);
        TRI_LAUNCH(reduce_finish_kernel, 1, 1, want + slot_of[p], partial, n_chunks);
    }
    g.n = P;
    g.run[g.n_runs] = P;
    cr_assert_eq(g.n_runs, 5, "pieces 2 and 3 share slot 3, pieces 5 and 6 slot 4: a run each");
    shape sh[N_SHAPES];
    shapes_for(g.first[P], sh);
    for (int k = 0; k < N_SHAPES; k++) {
        float *out = gfloats(S, start);
        double *partial = gbuf((size_t)g.first[P] * sizeof(double), NULL);
        TRI_LAUNCH(sum_squares_multi_partial_kernel, sh[k].grid, sh[k].block, partial, g);
        TRI_LAUNCH(reduce_multi_finish_kernel, sh[k].grid, sh[k].block, out, partial, g);
        same_bits("sum_squares_multi kernels vs piece by piece", out, want, S);
        cr_assert_neq(out[1], start[1], "slot 1 was added to");
    }
    check_guards_and_free("sum_squares_multi");
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


/* ---- matmul family: bias backward and the K == 0 cases ----
 * Storage: c is dbias, matmul's c and its bias (the bias has c's dtype); g is dout and matmul's a, b. */

typedef struct mm_prec {
    int c, g;
} mm_prec;

static void matmul_family_case(tri_device *d, int64_t N, int64_t OC, int z, mm_prec p)
{
    size_t nc = (size_t)(N * OC);
    void *dout = host_as(ot_uniform(nc, -1.0f, 1.0f, 50 + (uint64_t)z), nc, p.g);
    void *db0 = host_as(ot_uniform((size_t)OC, -1.0f, 1.0f, 60 + (uint64_t)z), (size_t)OC, p.c);
    void *c0 = host_as(ot_uniform(nc, -1.0f, 1.0f, 70 + (uint64_t)z), nc, p.c);
    tri_store(c0, p.c, 0, NAN); /* beta == 0: c is write-only */
    void *want = ot_floats(nc);
    float empty[1];
    tri_tensor a0 = tri_tensor_2d(empty, dt(p.g), N, 0), b0 = tri_tensor_2d(empty, dt(p.g), 0, OC);
    shape s[N_SHAPES];
    shapes_for(OC, s);
    for (int k = 0; k < N_SHAPES; k++) {
        void *db = gtyped((size_t)OC, p.c, db0);
        const void *kd = gtyped(nc, p.g, dout);
        TRI_LAUNCH(bias_backward_kernel, s[k].grid, s[k].block, db, p.c, kd, p.g, N, OC);
        memcpy(want, db0, (size_t)OC * esize(p.c));
        cr_assert_eq(tri_op_bias_backward(d, tri_tensor_1d(want, dt(p.c), OC), tri_tensor_2d(dout, dt(p.g), N, OC)),
                     TRI_OK);
        same_typed("bias_backward_kernel", db, want, (size_t)OC, p.c);
        /* the fast two-pass form: chunk sums (a thread per chunk and column), then in chunk order */
        int64_t nch = tri_col_chunks(N);
        float *part = gfloats((size_t)(nch * OC), NULL);
        void *db2 = gtyped((size_t)OC, p.c, db0);
        shape pc[N_SHAPES];
        shapes_for(nch * OC, pc);
        TRI_LAUNCH(col_chunk_sums_kernel, pc[k].grid, pc[k].block, part, kd, p.g, N, OC);
        TRI_LAUNCH(col_chunks_finish_kernel, s[k].grid, s[k].block, db2, p.c, part, nch, OC);
        same_typed("col_chunk_sums_kernel + col_chunks_finish_kernel", db2, want, (size_t)OC, p.c);
        /* matmul with K == 0: c = beta c (0 for beta 0), or the bias */
        float betas[] = {0.0f, 0.5f};
        for (int bi = 0; bi < 2; bi++) {
            void *c = gtyped(nc, p.c, c0);
            memcpy(want, c0, nc * esize(p.c));
            TRI_LAUNCH(matmul_scale_kernel, s[k].grid, s[k].block, c, p.c, betas[bi], N * OC);
            cr_assert_eq(tri_op_matmul(d, tri_tensor_2d(want, dt(p.c), N, OC), a0, b0, tri_tensor_none(), false,
                                       false, betas[bi]), TRI_OK);
            same_typed("matmul_scale_kernel", c, want, nc, p.c);
        }
        void *c = gtyped(nc, p.c, NULL);
        const void *kbias = gtyped((size_t)OC, p.c, db0);
        TRI_LAUNCH(bias_broadcast_kernel, s[k].grid, s[k].block, c, p.c, kbias, p.c, N, OC);
        cr_assert_eq(tri_op_matmul(d, tri_tensor_2d(want, dt(p.c), N, OC), a0, b0,
                                   tri_tensor_1d(db0, dt(p.c), OC), false, false, 0.0f), TRI_OK);
        same_typed("bias_broadcast_kernel", c, want, nc, p.c);
        check_guards_and_free("matmul family");
    }
}

Test(cuda_kernels_cpu, bias_backward_and_k0)
{
    tri_device *d = cpu();
    const int64_t dims[][2] = {{1, 1}, {1, 300}, {37, 5}, {129, 257}};
    const mm_prec precs[] = {{0, 0}, {1, 1}, {0, 1}}; /* fp32, bf16, fp32 dbias from bf16 dout */
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (int z = 0; z < 4; z++)
            matmul_family_case(d, dims[z][0], dims[z][1], z, precs[q]);
}

/* ---- layernorm: mean and rstd fp32, every other argument fp32 or bf16 ---- */

typedef struct ln_prec {
    int inp, w, b, out, dout, dinp, dw, db;
} ln_prec;

static void layernorm_case(tri_device *d, int64_t N, int64_t C, int z, ln_prec p)
{
    size_t nc = (size_t)N * (size_t)C, c = (size_t)C;
    void *x = host_as(ot_uniform(nc, -2.0f, 2.0f, 80 + (uint64_t)z), nc, p.inp);
    void *w = host_as(ot_uniform(c, 0.5f, 1.5f, 81), c, p.w), *b = host_as(ot_uniform(c, -0.5f, 0.5f, 82), c, p.b);
    void *g = host_as(ot_uniform(nc, -1.0f, 1.0f, 83), nc, p.dout);
    void *dx0 = host_as(ot_uniform(nc, -1.0f, 1.0f, 84), nc, p.dinp);
    void *dw0 = host_as(ot_uniform(c, -1.0f, 1.0f, 85), c, p.dw), *db0 = host_as(ot_uniform(c, -1.0f, 1.0f, 86), c, p.db);
    /* CPU reference: forward, then backward accumulating into dx0, dw0, db0 copies */
    void *out = ot_floats(nc), *dx = host_copy(dx0, nc, p.dinp), *dw = host_copy(dw0, c, p.dw);
    void *db = host_copy(db0, c, p.db);
    float *mean = ot_floats((size_t)N), *rstd = ot_floats((size_t)N);
    tri_tensor tx = tri_tensor_2d(x, dt(p.inp), N, C), tw = tri_tensor_1d(w, dt(p.w), C);
    tri_tensor tm = tri_tensor_1d(mean, TRI_F32, N), tr = tri_tensor_1d(rstd, TRI_F32, N);
    cr_assert_eq(tri_op_layernorm_forward(d, tri_tensor_2d(out, dt(p.out), N, C), tm, tr, tx, tw,
                                          tri_tensor_1d(b, dt(p.b), C)), TRI_OK);
    cr_assert_eq(tri_op_layernorm_backward(d, tri_tensor_2d(dx, dt(p.dinp), N, C), tri_tensor_1d(dw, dt(p.dw), C),
                                           tri_tensor_1d(db, dt(p.db), C), tri_tensor_2d(g, dt(p.dout), N, C), tx, tw,
                                           tm, tr), TRI_OK);
    shape rows[N_SHAPES], cols[N_SHAPES];
    shapes_for(N, rows);
    shapes_for(C, cols);
    for (int k = 0; k < N_SHAPES; k++) {
        void *ko = gtyped(nc, p.out, NULL);
        float *km = gfloats((size_t)N, NULL), *kr = gfloats((size_t)N, NULL);
        const void *kx = gtyped(nc, p.inp, x), *kw = gtyped(c, p.w, w), *kb = gtyped(c, p.b, b);
        const void *kg = gtyped(nc, p.dout, g);
        void *kdx = gtyped(nc, p.dinp, dx0), *kdw = gtyped(c, p.dw, dw0), *kdb = gtyped(c, p.db, db0);
        TRI_LAUNCH(layernorm_forward_kernel, rows[k].grid, rows[k].block, ko, p.out, km, kr, kx, p.inp, kw, p.w, kb,
                   p.b, N, C);
        same_typed("layernorm_forward_kernel out", ko, out, nc, p.out);
        same_bits("layernorm_forward_kernel mean", km, mean, (size_t)N);
        same_bits("layernorm_forward_kernel rstd", kr, rstd, (size_t)N);
        TRI_LAUNCH(layernorm_backward_input_kernel, rows[k].grid, rows[k].block, kdx, p.dinp, kg, p.dout, kx, p.inp,
                   kw, p.w, km, kr, N, C);
        TRI_LAUNCH(layernorm_backward_params_kernel, cols[k].grid, cols[k].block, kdw, p.dw, kdb, p.db, kg, p.dout,
                   kx, p.inp, km, kr, N, C);
        same_typed("layernorm_backward_input_kernel", kdx, dx, nc, p.dinp);
        same_typed("layernorm_backward_params_kernel dw", kdw, dw, c, p.dw);
        same_typed("layernorm_backward_params_kernel db", kdb, db, c, p.db);
        /* the fast two-pass form of dw, db */
        int64_t nch = tri_col_chunks(N);
        float *pw = gfloats((size_t)(nch * C), NULL), *pb = gfloats((size_t)(nch * C), NULL);
        void *kdw2 = gtyped(c, p.dw, dw0), *kdb2 = gtyped(c, p.db, db0);
        shape pc[N_SHAPES];
        shapes_for(nch * C, pc);
        TRI_LAUNCH(layernorm_params_chunks_kernel, pc[k].grid, pc[k].block, pw, pb, kg, p.dout, kx, p.inp, km, kr, N, C);
        TRI_LAUNCH(col_chunks_finish_kernel, cols[k].grid, cols[k].block, kdw2, p.dw, pw, nch, C);
        TRI_LAUNCH(col_chunks_finish_kernel, cols[k].grid, cols[k].block, kdb2, p.db, pb, nch, C);
        same_typed("layernorm_params_chunks_kernel dw", kdw2, dw, c, p.dw);
        same_typed("layernorm_params_chunks_kernel db", kdb2, db, c, p.db);
        check_guards_and_free("layernorm");
    }
}

Test(cuda_kernels_cpu, layernorm)
{
    tri_device *d = cpu();
    const int64_t dims[][2] = {{1, 7}, {5, 1}, {33, 67}, {300, 40}};
    const ln_prec precs[] = {
        {0, 0, 0, 0, 0, 0, 0, 0},
        {1, 1, 1, 1, 1, 1, 1, 1},
        {1, 1, 1, 1, 1, 1, 0, 0}, /* bf16 activations and weights, fp32 dw / db */
        {1, 0, 0, 0, 1, 0, 1, 0}, /* an arbitrary mix */
    };
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (int z = 0; z < 4; z++)
            layernorm_case(d, dims[z][0], dims[z][1], z, precs[q]);
}

/* ---- attention ---- */

typedef struct att_prec {
    int qkv, att, out, dout, dqkv, datt;
} att_prec;

/* Compares one attention output: fp32 results differ from sgemm's order only (relative ATT_TOL); a
 * bf16 result may round that difference the other way (normalised ATT_TOL_BF16); bf16
 * intermediates (att forward, datt backward) are rounded between the kernels' passes, where the
 * CPU backend keeps fp32 copies (normalised ATT_TOL_BF16_ROUNDED). */
static void att_close(const char *what, const void *got, const void *want, size_t n, int out_bf16, int rounded)
{
    if (rounded)
        close_typed(what, got, want, n, out_bf16, ATT_TOL_BF16_ROUNDED, true);
    else if (out_bf16)
        close_typed(what, got, want, n, out_bf16, ATT_TOL_BF16, true);
    else
        close_typed(what, got, want, n, out_bf16, ATT_TOL, false);
}

/* dst[r*T + j] = scale * sum_i x[row t of (b, h), part px] . y[row j, part py], HS = 4 */
static void head_products(float *dst, const void *x, int xb, int64_t ldx, int64_t offx, const void *y, int yb,
                          int64_t ldy, int64_t offy, int64_t B, int64_t T, int64_t NH, float scale)
{
    for (int64_t r = 0; r < B * NH * T; r++) {
        int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
        for (int64_t j = 0; j < T; j++) {
            float sdot = 0.0f;
            for (int64_t i = 0; i < 4; i++)
                sdot += tri_load(x, xb, (b * T + t) * ldx + offx + h * 4 + i) *
                        tri_load(y, yb, (b * T + j) * ldy + offy + h * 4 + i);
            dst[r * T + j] = sdot * scale;
        }
    }
}

static void attention_case(tri_device *d, int64_t B, int64_t T, int64_t NH, int z, att_prec p)
{
    int64_t C = NH * 4;
    size_t nqkv = (size_t)(B * T * 3 * C), natt = (size_t)(B * NH * T * T), nout = (size_t)(B * T * C);
    void *qkv = host_as(ot_uniform(nqkv, -1.5f, 1.5f, 90 + (uint64_t)z), nqkv, p.qkv);
    void *g = host_as(ot_uniform(nout, -1.0f, 1.0f, 91), nout, p.dout);
    void *out = ot_floats(nout), *att = ot_floats(natt), *dqkv = ot_floats(nqkv), *datt = ot_floats(natt);
    tri_tensor tq = tri_tensor_3d(qkv, dt(p.qkv), B, T, 3 * C), ta = tri_tensor_4d(att, dt(p.att), B, NH, T, T);
    cr_assert_eq(tri_op_attention_forward(d, tri_tensor_3d(out, dt(p.out), B, T, C), ta, tq), TRI_OK);
    cr_assert_eq(tri_op_attention_backward(d, tri_tensor_3d(dqkv, dt(p.dqkv), B, T, 3 * C),
                                           tri_tensor_4d(datt, dt(p.datt), B, NH, T, T),
                                           tri_tensor_3d(g, dt(p.dout), B, T, C), tq, ta), TRI_OK);
    int64_t rows = B * NH * T;
    /* the row pieces' inputs: scores q k^T / sqrt(4) and d probabilities dout v^T, in fp32 */
    float *scores = ot_floats(natt), *dprobs = ot_floats(natt);
    head_products(scores, qkv, p.qkv, 3 * C, 0, qkv, p.qkv, 3 * C, C, B, T, NH, 0.5f);
    head_products(dprobs, g, p.dout, C, 0, qkv, p.qkv, 3 * C, 2 * C, B, T, NH, 1.0f);
    void *scores_as = host_as(scores, natt, p.att), *dprobs_as = host_as(dprobs, natt, p.datt);
    shape s[N_SHAPES];
    shapes_for(rows, s);
    for (int k = 0; k < N_SHAPES; k++) {
        /* the whole op in the simple form; backward from the CPU's att, so each pass is checked alone */
        const void *kq = gtyped(nqkv, p.qkv, qkv), *kg = gtyped(nout, p.dout, g), *katt = gtyped(natt, p.att, att);
        void *ko = gtyped(nout, p.out, NULL), *ka = gtyped(natt, p.att, NULL);
        void *kdq = gtyped(nqkv, p.dqkv, NULL), *kda = gtyped(natt, p.datt, NULL);
        TRI_LAUNCH(attention_forward_kernel, s[k].grid, s[k].block, ko, p.out, ka, p.att, kq, p.qkv, B, T, C, NH);
        att_close("attention_forward_kernel out", ko, out, nout, p.out, p.att);
        att_close("attention_forward_kernel att", ka, att, natt, p.att, p.att);
        TRI_LAUNCH(attention_backward_rows_kernel, s[k].grid, s[k].block, kdq, p.dqkv, kda, p.datt, kg, p.dout, kq,
                   p.qkv, katt, p.att, B, T, C, NH);
        TRI_LAUNCH(attention_backward_cols_kernel, s[k].grid, s[k].block, kdq, p.dqkv, kda, p.datt, kg, p.dout, kq,
                   p.qkv, katt, p.att, B, T, C, NH);
        att_close("attention_backward kernels dqkv", kdq, dqkv, nqkv, p.dqkv, p.datt);
        att_close("attention_backward kernels dscores", kda, datt, natt, p.datt, p.datt);
        /* the row pieces the cuBLASLt path runs, on the scores and d probabilities in att's and
         * datt's storage */
        void *ks = gtyped(natt, p.att, scores_as);
        TRI_LAUNCH(causal_softmax_kernel, s[k].grid, s[k].block, ks, p.att, rows, T);
        att_close("causal_softmax_kernel", ks, att, natt, p.att, p.att);
        void *kdp = gtyped(natt, p.datt, dprobs_as);
        TRI_LAUNCH(causal_softmax_backward_kernel, s[k].grid, s[k].block, kdp, p.datt, katt, p.att, rows, T);
        att_close("causal_softmax_backward_kernel", kdp, datt, natt, p.datt, p.datt);
        check_guards_and_free("attention");
    }
}

Test(cuda_kernels_cpu, attention)
{
    tri_device *d = cpu();
    const int64_t dims[][3] = {{1, 1, 1}, {1, 5, 3}, {2, 7, 2}, {3, 17, 4}}; /* B, T, NH; HS = 4 */
    const att_prec precs[] = {
        {0, 0, 0, 0, 0, 0},
        {1, 1, 1, 1, 1, 1},
        {1, 0, 1, 1, 0, 0}, /* bf16 activations, fp32 probabilities and dqkv */
        {0, 1, 0, 0, 1, 1}, /* bf16 probabilities and gradients from fp32 activations */
    };
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (int z = 0; z < 4; z++)
            attention_case(d, dims[z][0], dims[z][1], dims[z][2], z, precs[q]);
}

/* ---- the Llama family: RMSNorm (rstd fp32), SwiGLU, rotary embedding; bit-identical ---- */

typedef struct rms_prec {
    int inp, w, out, dout, dinp, dw;
} rms_prec;

static void rmsnorm_case(tri_device *d, int64_t N, int64_t C, int z, rms_prec p)
{
    size_t nc = (size_t)N * (size_t)C, c = (size_t)C;
    const float eps = 1e-6f;
    void *x = host_as(ot_uniform(nc, -2.0f, 2.0f, 180 + (uint64_t)z), nc, p.inp);
    void *w = host_as(ot_uniform(c, 0.5f, 1.5f, 181), c, p.w), *g = host_as(ot_uniform(nc, -1.0f, 1.0f, 183), nc, p.dout);
    void *dx0 = host_as(ot_uniform(nc, -1.0f, 1.0f, 184), nc, p.dinp), *dw0 = host_as(ot_uniform(c, -1.0f, 1.0f, 185), c, p.dw);
    void *out = ot_floats(nc), *dx = host_copy(dx0, nc, p.dinp), *dw = host_copy(dw0, c, p.dw);
    float *rstd = ot_floats((size_t)N);
    tri_tensor tx = tri_tensor_2d(x, dt(p.inp), N, C), tw = tri_tensor_1d(w, dt(p.w), C), tr = tri_tensor_1d(rstd, TRI_F32, N);
    cr_assert_eq(tri_op_rmsnorm_forward(d, tri_tensor_2d(out, dt(p.out), N, C), tr, tx, tw, eps), TRI_OK);
    cr_assert_eq(tri_op_rmsnorm_backward(d, tri_tensor_2d(dx, dt(p.dinp), N, C), tri_tensor_1d(dw, dt(p.dw), C),
                                         tri_tensor_2d(g, dt(p.dout), N, C), tx, tw, tr), TRI_OK);
    shape rows[N_SHAPES], cols[N_SHAPES];
    shapes_for(N, rows);
    shapes_for(C, cols);
    for (int k = 0; k < N_SHAPES; k++) {
        void *ko = gtyped(nc, p.out, NULL);
        float *kr = gfloats((size_t)N, NULL);
        const void *kx = gtyped(nc, p.inp, x), *kw = gtyped(c, p.w, w), *kg = gtyped(nc, p.dout, g);
        void *kdx = gtyped(nc, p.dinp, dx0), *kdw = gtyped(c, p.dw, dw0);
        TRI_LAUNCH(rmsnorm_forward_kernel, rows[k].grid, rows[k].block, ko, p.out, kr, kx, p.inp, kw, p.w, N, C, eps);
        same_typed("rmsnorm_forward_kernel out", ko, out, nc, p.out);
        same_bits("rmsnorm_forward_kernel rstd", kr, rstd, (size_t)N);
        TRI_LAUNCH(rmsnorm_backward_input_kernel, rows[k].grid, rows[k].block, kdx, p.dinp, kg, p.dout, kx, p.inp, kw,
                   p.w, kr, N, C);
        TRI_LAUNCH(rmsnorm_backward_params_kernel, cols[k].grid, cols[k].block, kdw, p.dw, kg, p.dout, kx, p.inp, kr,
                   N, C);
        same_typed("rmsnorm_backward_input_kernel", kdx, dx, nc, p.dinp);
        same_typed("rmsnorm_backward_params_kernel dw", kdw, dw, c, p.dw);
        int64_t nch = tri_col_chunks(N);
        float *pw = gfloats((size_t)(nch * C), NULL);
        void *kdw2 = gtyped(c, p.dw, dw0);
        shape pc[N_SHAPES];
        shapes_for(nch * C, pc);
        TRI_LAUNCH(rmsnorm_params_chunks_kernel, pc[k].grid, pc[k].block, pw, kg, p.dout, kx, p.inp, kr, N, C);
        TRI_LAUNCH(col_chunks_finish_kernel, cols[k].grid, cols[k].block, kdw2, p.dw, pw, nch, C);
        same_typed("rmsnorm_params_chunks_kernel dw", kdw2, dw, c, p.dw);
        check_guards_and_free("rmsnorm");
    }
}

Test(cuda_kernels_cpu, rmsnorm)
{
    tri_device *d = cpu();
    const int64_t dims[][2] = {{1, 1}, {5, 67}, {130, 7}, {3, 300}};
    const rms_prec precs[] = {{0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0}, {0, 1, 1, 0, 0, 1}};
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (int z = 0; z < 4; z++)
            rmsnorm_case(d, dims[z][0], dims[z][1], z, precs[q]);
}

Test(cuda_kernels_cpu, swiglu)
{
    tri_device *d = cpu();
    const int64_t dims[][2] = {{1, 1}, {6, 37}, {65, 8}};
    const int precs[][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0, 1, 0}}; /* gate_up, out, dout, dgate_up */
    for (size_t q = 0; q < 3; q++)
        for (int z = 0; z < 3; z++) {
            int64_t N = dims[z][0], F = dims[z][1];
            size_t ngu = (size_t)(N * 2 * F), no = (size_t)(N * F);
            const int *pr = precs[q];
            void *gu = host_as(ot_uniform(ngu, -6.0f, 6.0f, 190 + (uint64_t)z), ngu, pr[0]);
            void *g = host_as(ot_uniform(no, -1.0f, 1.0f, 191), no, pr[2]);
            void *out = ot_floats(no), *dgu = ot_floats(ngu);
            tri_tensor tgu = tri_tensor_2d(gu, dt(pr[0]), N, 2 * F);
            cr_assert_eq(tri_op_swiglu_forward(d, tri_tensor_2d(out, dt(pr[1]), N, F), tgu), TRI_OK);
            cr_assert_eq(tri_op_swiglu_backward(d, tri_tensor_2d(dgu, dt(pr[3]), N, 2 * F), tgu,
                                                tri_tensor_2d(g, dt(pr[2]), N, F)), TRI_OK);
            shape s[N_SHAPES];
            shapes_for(N * F, s);
            for (int k = 0; k < N_SHAPES; k++) {
                const void *kgu = gtyped(ngu, pr[0], gu), *kg = gtyped(no, pr[2], g);
                void *ko = gtyped(no, pr[1], NULL), *kdgu = gtyped(ngu, pr[3], NULL);
                TRI_LAUNCH(swiglu_forward_kernel, s[k].grid, s[k].block, ko, pr[1], kgu, pr[0], N, F);
                same_typed("swiglu_forward_kernel", ko, out, no, pr[1]);
                TRI_LAUNCH(swiglu_backward_kernel, s[k].grid, s[k].block, kdgu, pr[3], kgu, pr[0], kg, pr[2], N, F);
                same_typed("swiglu_backward_kernel", kdgu, dgu, ngu, pr[3]);
                check_guards_and_free("swiglu");
            }
        }
}

Test(cuda_kernels_cpu, rope)
{
    tri_device *d = cpu();
    const int64_t N = 11, HS = 8, half = 4, W = 5 * HS, n_heads = 3, T = 4, row0 = 2, P = 6;
    size_t nx = (size_t)(N * W);
    float *cs = ot_uniform((size_t)(P * half), -1.0f, 1.0f, 200), *sn = ot_uniform((size_t)(P * half), -1.0f, 1.0f, 201);
    tri_tensor tc = tri_tensor_2d(cs, TRI_F32, P, half), ts = tri_tensor_2d(sn, TRI_F32, P, half);
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int backward = 0; backward < 2; backward++) {
            void *x = host_as(ot_uniform(nx, -2.0f, 2.0f, 202), nx, bf16), *want = host_copy(x, nx, bf16);
            tri_tensor tw = tri_tensor_2d(want, dt(bf16), N, W);
            cr_assert_eq(backward ? tri_op_rope_backward(d, tw, tc, ts, n_heads, T, row0, 1, 0)
                                  : tri_op_rope_forward(d, tw, tc, ts, n_heads, T, row0, 1, 0), TRI_OK);
            shape s[N_SHAPES];
            shapes_for(N * n_heads * half, s);
            for (int k = 0; k < N_SHAPES; k++) {
                void *kx = gtyped(nx, bf16, x);
                const float *kc = gfloats((size_t)(P * half), cs), *ks = gfloats((size_t)(P * half), sn);
                TRI_LAUNCH(rope_kernel, s[k].grid, s[k].block, kx, bf16, kc, ks, N, W, n_heads, half, T, row0, 1, 0, backward);
                same_typed(backward ? "rope_kernel backward" : "rope_kernel forward", kx, want, nx, bf16);
                check_guards_and_free("rope");
            }
        }
}

/* ---- fused attention (FlashAttention-2 simple twins) ---- */

typedef struct flash_prec {
    int qkv, out, dout, dqkv;
} flash_prec;

/* fp32 1e-5 and bf16 2^-7, both normalised (max |diff| / max |want|): the measure for the
 * fused attention, whose dot products of up to T terms differ from sgemm's order. */
static void flash_close(const char *what, const void *got, const void *want, size_t n, int bf16)
{
    close_typed(what, got, want, n, bf16, bf16 ? ATT_TOL_BF16 : ATT_TOL, true);
}

static void flash_case(tri_device *d, tri_flash_dims f, int z, flash_prec p)
{
    int64_t B = f.B, T = f.T, NH = f.NH, C = NH * f.HS, W = tri_flash_width(f), rows = B * NH * T;
    size_t nqkv = (size_t)(B * T * W), nout = (size_t)(B * T * C), nr = (size_t)rows;
    void *qkv = host_as(ot_uniform(nqkv, -1.5f, 1.5f, 700 + (uint64_t)z), nqkv, p.qkv);
    void *g = host_as(ot_uniform(nout, -1.0f, 1.0f, 701 + (uint64_t)z), nout, p.dout);
    void *out = ot_floats(nout), *dqkv = ot_floats(nqkv);
    float *lse = ot_floats(nr), *delta = ot_floats(nr);
    tri_tensor tq = tri_tensor_3d(qkv, dt(p.qkv), B, T, W), to = tri_tensor_3d(out, dt(p.out), B, T, C);
    tri_tensor tl = tri_tensor_3d(lse, TRI_F32, B, NH, T), tdl = tri_tensor_3d(delta, TRI_F32, B, NH, T);
    cr_assert_eq(tri_op_flash_attention_forward(d, to, tl, tq), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_op_flash_attention_backward(d, tri_tensor_3d(dqkv, dt(p.dqkv), B, T, W), tdl,
                                                 tri_tensor_3d(g, dt(p.dout), B, T, C), tq, to, tl), TRI_OK);
    shape s[N_SHAPES], skv[N_SHAPES];
    shapes_for(rows, s);
    shapes_for(B * f.NH_kv * T, skv);
    for (int k = 0; k < N_SHAPES; k++) {
        const void *kq = gtyped(nqkv, p.qkv, qkv), *kg = gtyped(nout, p.dout, g), *kout = gtyped(nout, p.out, out);
        void *ko = gtyped(nout, p.out, NULL), *kdq = gtyped(nqkv, p.dqkv, NULL);
        float *kl = gtyped(nr, 0, NULL), *kdl = gtyped(nr, 0, NULL), *klse = gtyped(nr, 0, lse);
        TRI_LAUNCH(flash_forward_kernel, s[k].grid, s[k].block, ko, p.out, kl, kq, p.qkv, f);
        flash_close("flash_forward_kernel out", ko, out, nout, p.out);
        flash_close("flash_forward_kernel lse", kl, lse, nr, 0);
        /* backward from the CPU's out and lse, so each pass is checked alone */
        TRI_LAUNCH(flash_backward_delta_kernel, s[k].grid, s[k].block, kdl, kg, p.dout, kout, p.out, f);
        flash_close("flash_backward_delta_kernel", kdl, delta, nr, 0);
        TRI_LAUNCH(flash_backward_dq_kernel, s[k].grid, s[k].block, kdq, p.dqkv, kg, p.dout, kq, p.qkv, klse, kdl, f);
        TRI_LAUNCH(flash_backward_dkv_kernel, skv[k].grid, skv[k].block, kdq, p.dqkv, kg, p.dout, kq, p.qkv, klse,
                   kdl, f);
        flash_close("flash_backward kernels dqkv", kdq, dqkv, nqkv, p.dqkv);
        check_guards_and_free("flash attention");
    }
}

Test(cuda_kernels_cpu, flash_attention)
{
    tri_device *d = cpu();
    /* B, T, NH, NH_kv, HS: multi-head, and grouped-query (2 and 4 query heads a key/value head) */
    const tri_flash_dims dims[] = {{1, 1, 1, 1, 8}, {2, 7, 3, 3, 4}, {1, 70, 2, 2, 8}, {2, 130, 1, 1, 16},
                                   {1, 70, 4, 2, 8}, {2, 33, 4, 1, 4}};
    const flash_prec precs[] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0, 1, 0}};
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (size_t z = 0; z < sizeof dims / sizeof *dims; z++)
            flash_case(d, dims[z], (int)z, precs[q]);
}

/* ---- GELU ---- */

typedef struct gelu_prec {
    int inp, out, g; /* g: dout, overwritten in place by dinp */
} gelu_prec;

static void gelu_case(tri_device *d, int64_t n, size_t z, gelu_prec p)
{
    void *x = host_as(ot_uniform((size_t)n, -6.0f, 6.0f, 100 + z), (size_t)n, p.inp);
    void *g = host_as(ot_uniform((size_t)n, -1.0f, 1.0f, 101 + z), (size_t)n, p.g);
    void *out = ot_floats((size_t)n), *dx = host_copy(g, (size_t)n, p.g);
    tri_tensor tx = tri_tensor_1d(x, dt(p.inp), n), tdx = tri_tensor_1d(dx, dt(p.g), n);
    cr_assert_eq(tri_op_gelu_forward(d, tri_tensor_1d(out, dt(p.out), n), tx), TRI_OK);
    cr_assert_eq(tri_op_gelu_backward(d, tdx, tx, tdx), TRI_OK); /* in place */
    shape s[N_SHAPES];
    shapes_for(n, s);
    for (int k = 0; k < N_SHAPES; k++) {
        void *ko = gtyped((size_t)n, p.out, NULL), *kg = gtyped((size_t)n, p.g, g);
        const void *kx = gtyped((size_t)n, p.inp, x);
        TRI_LAUNCH(gelu_forward_kernel, s[k].grid, s[k].block, ko, p.out, kx, p.inp, n);
        same_typed("gelu_forward_kernel", ko, out, (size_t)n, p.out);
        TRI_LAUNCH(gelu_backward_kernel, s[k].grid, s[k].block, kg, p.g, kx, p.inp, kg, p.g, n); /* in place */
        same_typed("gelu_backward_kernel", kg, dx, (size_t)n, p.g);
        check_guards_and_free("gelu");
    }
}

Test(cuda_kernels_cpu, gelu)
{
    tri_device *d = cpu();
    const gelu_prec precs[] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1}};
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (size_t z = 0; z < N_SIZES; z++)
            gelu_case(d, SIZES[z], z, precs[q]);
}

/* ---- bias + GELU: out(N,OC) = gelu(inp + bias), the bias broadcast over the rows ----
 * Row counts of 1 and 5 and more rows than a wrapping launch has threads, OC 1, 7, 33 and 256 (a
 * block), every dtype mix; in place (out aliases inp) as well. */

typedef struct bias_gelu_prec {
    int inp, bias, out;
} bias_gelu_prec;

static void bias_gelu_case(tri_device *d, int64_t N, int64_t OC, size_t z, bias_gelu_prec p)
{
    int64_t n = N * OC;
    void *x = host_as(ot_uniform((size_t)n, -4.0f, 4.0f, 110 + z), (size_t)n, p.inp);
    void *b = host_as(ot_uniform((size_t)OC, -2.0f, 2.0f, 111 + z), (size_t)OC, p.bias);
    void *out = ot_floats((size_t)n);
    cr_assert_eq(tri_op_bias_gelu_forward(d, tri_tensor_2d(out, dt(p.out), N, OC), tri_tensor_2d(x, dt(p.inp), N, OC),
                                          tri_tensor_1d(b, dt(p.bias), OC)),
                 TRI_OK, "%s", tri_error_message());
    shape s[N_SHAPES];
    shapes_for(n, s);
    for (int k = 0; k < N_SHAPES; k++) {
        void *ko = gtyped((size_t)n, p.out, NULL), *kx = gtyped((size_t)n, p.inp, x);
        const void *kb = gtyped((size_t)OC, p.bias, b);
        TRI_LAUNCH(bias_gelu_forward_kernel, s[k].grid, s[k].block, ko, p.out, kx, p.inp, kb, p.bias, n, OC);
        same_typed("bias_gelu_forward_kernel", ko, out, (size_t)n, p.out);
        if (p.inp == p.out) { /* in place */
            TRI_LAUNCH(bias_gelu_forward_kernel, s[k].grid, s[k].block, kx, p.inp, kx, p.inp, kb, p.bias, n, OC);
            same_typed("bias_gelu_forward_kernel in place", kx, out, (size_t)n, p.out);
        }
        check_guards_and_free("bias_gelu");
    }
}

Test(cuda_kernels_cpu, bias_gelu)
{
    tri_device *d = cpu();
    const bias_gelu_prec precs[] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1}, {1, 1, 0}};
    const int64_t dims[][2] = {{1, 1}, {5, 1}, {1, 7}, {5, 7}, {5, 33}, {131, 33}, {3, 256}, {1, 1001}};
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (size_t z = 0; z < sizeof dims / sizeof *dims; z++)
            bias_gelu_case(d, dims[z][0], dims[z][1], z, precs[q]);
}

/* ---- embeddings ---- */

typedef struct emb_prec {
    int wte, out, dwte, dout, wpe, pout, dwpe; /* pout: position_forward's out (+=) */
} emb_prec;

static void embeddings_case(tri_device *d, const int64_t dims[4], int z, emb_prec p)
{
    int64_t N = dims[0], C = dims[1], V_l = dims[2], T = dims[3];
    int64_t vocab_start = 3, row0 = z == 2 ? 5 : 0;
    size_t nc = (size_t)(N * C), vc = (size_t)(V_l * C), tc = (size_t)(T * C);
    int32_t *tok = ot_ints((size_t)N);
    for (int64_t n = 0; n < N; n++) /* ids below, inside (repeating) and above the shard */
        tok[n] = (int32_t)((n * 7) % (V_l + 6));
    void *wte = host_as(ot_uniform(vc, -1.0f, 1.0f, 110), vc, p.wte);
    void *wpe = host_as(ot_uniform(tc, -1.0f, 1.0f, 111), tc, p.wpe);
    void *g = host_as(ot_uniform(nc, -1.0f, 1.0f, 112), nc, p.dout);
    void *o0 = host_as(ot_uniform(nc, -1.0f, 1.0f, 113), nc, p.pout);
    void *dwte0 = host_as(ot_uniform(vc, -1.0f, 1.0f, 114), vc, p.dwte);
    void *dwpe0 = host_as(ot_uniform(tc, -1.0f, 1.0f, 115), tc, p.dwpe);
    void *out = ot_floats(nc), *pout = host_copy(o0, nc, p.pout), *dwte = host_copy(dwte0, vc, p.dwte);
    void *dwpe = host_copy(dwpe0, tc, p.dwpe);
    tri_tensor tt = tri_tensor_1d(tok, TRI_I32, N), tg = tri_tensor_2d(g, dt(p.dout), N, C);
    cr_assert_eq(tri_op_embedding_forward(d, tri_tensor_2d(out, dt(p.out), N, C), tt,
                                          tri_tensor_2d(wte, dt(p.wte), V_l, C), vocab_start), TRI_OK);
    cr_assert_eq(tri_op_embedding_backward(d, tri_tensor_2d(dwte, dt(p.dwte), V_l, C), tg, tt, vocab_start), TRI_OK);
    cr_assert_eq(tri_op_position_forward(d, tri_tensor_2d(pout, dt(p.pout), N, C),
                                         tri_tensor_2d(wpe, dt(p.wpe), T, C), T, row0, 1, 0), TRI_OK);
    cr_assert_eq(tri_op_position_backward(d, tri_tensor_2d(dwpe, dt(p.dwpe), T, C), tg, T, row0, 1, 0), TRI_OK);
    shape el[N_SHAPES], cols[N_SHAPES];
    shapes_for(N * C, el);
    shapes_for(C, cols);
    for (int k = 0; k < N_SHAPES; k++) {
        const int32_t *kt = gbuf((size_t)N * sizeof(int32_t), tok);
        const void *kg = gtyped(nc, p.dout, g), *kwte = gtyped(vc, p.wte, wte), *kwpe = gtyped(tc, p.wpe, wpe);
        void *ko = gtyped(nc, p.out, NULL), *kp = gtyped(nc, p.pout, o0);
        void *kdwte = gtyped(vc, p.dwte, dwte0), *kdwpe = gtyped(tc, p.dwpe, dwpe0);
        TRI_LAUNCH(embedding_forward_kernel, el[k].grid, el[k].block, ko, p.out, kt, kwte, p.wte, N, C, V_l,
                   vocab_start);
        same_typed("embedding_forward_kernel", ko, out, nc, p.out);
        TRI_LAUNCH(embedding_backward_kernel, cols[k].grid, cols[k].block, kdwte, p.dwte, kg, p.dout, kt, N, C, V_l,
                   vocab_start);
        if (p.dwte) { /* repeated tokens round a bf16 dwte at every repeat (the CPU backend: once):
                       * each rounding moves it by at most half a bf16 ulp, 2^-8 of its size */
            int64_t reps = 1;
            for (int64_t a = 0; a < N; a++) {
                int64_t c = 0;
                for (int64_t b = 0; b < N; b++)
                    c += tok[b] == tok[a];
                reps = c > reps ? c : reps;
            }
            double tol = EMB_TOL_BF16 > (double)reps * 0.00390625 ? EMB_TOL_BF16 : (double)reps * 0.00390625;
            close_typed("embedding_backward_kernel", kdwte, dwte, vc, p.dwte, tol, true);
        }
        else
            same_typed("embedding_backward_kernel", kdwte, dwte, vc, p.dwte);
        /* the linked fast form: the simple kernel's bits, in fp32 and bf16 alike */
        int32_t *next = (int32_t *)gbuf((size_t)N * sizeof(int32_t), NULL);
        int32_t *first = (int32_t *)gbuf((size_t)N * sizeof(int32_t), NULL);
        void *kdwte2 = gtyped(vc, p.dwte, dwte0);
        shape toks[N_SHAPES];
        shapes_for(N, toks);
        TRI_LAUNCH(token_links_kernel, toks[k].grid, toks[k].block, next, first, kt, N);
        TRI_LAUNCH(embedding_backward_links_kernel, el[k].grid, el[k].block, kdwte2, p.dwte, kg, p.dout, kt, next,
                   first, N, C, V_l, vocab_start);
        same_typed("embedding_backward_links_kernel vs embedding_backward_kernel", kdwte2, kdwte, vc, p.dwte);
        TRI_LAUNCH(position_forward_kernel, el[k].grid, el[k].block, kp, p.pout, kwpe, p.wpe, N, C, T, row0, 1, 0);
        same_typed("position_forward_kernel", kp, pout, nc, p.pout);
        TRI_LAUNCH(position_backward_kernel, cols[k].grid, cols[k].block, kdwpe, p.dwpe, kg, p.dout, N, C, T, row0, 1, 0);
        same_typed("position_backward_kernel", kdwpe, dwpe, tc, p.dwpe);
        check_guards_and_free("embeddings");
    }
}

Test(cuda_kernels_cpu, embeddings)
{
    tri_device *d = cpu();
    /* N, C, V_l, T; the last repeats each token ~16 times (the linked form follows long chains) */
    const int64_t dims[][4] = {{1, 1, 5, 1}, {7, 3, 11, 4}, {40, 33, 20, 8}, {200, 9, 6, 8}};
    const emb_prec precs[] = {
        {0, 0, 0, 0, 0, 0, 0},
        {1, 1, 1, 1, 1, 1, 1},
        {1, 1, 0, 1, 1, 1, 0}, /* bf16 weights and activations, fp32 gradients of the tables */
    };
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (int z = 0; z < 4; z++)
            embeddings_case(d, dims[z], z, precs[q]);
}

/* ---- positions under context parallelism (engine/device/ops/positions_math.h) ----
 * Local row r of cp rank i's (B, T_l) rows is row t = r % T_l of its sequence; written out by hand
 * here (chunk i's Tc positions, then chunk 2cp-1-i's), not through the function under test. The CPU
 * position and rotary ops must add / rotate at exactly those positions (fp32 adds of one table row:
 * exact), the simple kernels must give the CPU's bits, and the cp ranks' positions must cover every
 * position of a sequence once. */
static int64_t naive_position(int64_t T, int cp, int i, int64_t r)
{
    int64_t T_l = T / cp, Tc = T_l / 2, t = r % T_l;
    int64_t chunks[2] = {i, 2 * cp - 1 - i};
    return chunks[t / Tc] * Tc + t % Tc;
}

Test(cuda_kernels_cpu, positions_cp)
{
    tri_device *d = cpu();
    const int64_t T = 16, C = 5, B = 2, half = 4, W = 2 * half * 2;
    for (int cp = 1; cp <= 4; cp *= 2) {
        int64_t T_l = T / cp;
        int *seen = calloc((size_t)T, sizeof *seen);
        for (int i = 0; i < cp; i++)
            for (int64_t row0 = 0; row0 <= 3; row0 += 3) { /* row0 3: a sequence-parallel shard's offset */
                int64_t N = B * T_l - row0;
                size_t nc = (size_t)(N * C), tc = (size_t)(T * C);
                float *wpe = ot_uniform(tc, -1.0f, 1.0f, 300), *o0 = ot_uniform(nc, -1.0f, 1.0f, 301);
                float *g = ot_uniform(nc, -1.0f, 1.0f, 302), *dw0 = ot_uniform(tc, -1.0f, 1.0f, 303);
                float *out = host_copy(o0, nc, 0), *dwpe = host_copy(dw0, tc, 0);
                cr_assert_eq(tri_op_position_forward(d, tri_tensor_2d(out, TRI_F32, N, C), tri_tensor_2d(wpe, TRI_F32, T, C),
                                                     T, row0, cp, i), TRI_OK, "%s", tri_error_message());
                cr_assert_eq(tri_op_position_backward(d, tri_tensor_2d(dwpe, TRI_F32, T, C), tri_tensor_2d(g, TRI_F32, N, C),
                                                      T, row0, cp, i), TRI_OK, "%s", tri_error_message());
                /* the naive reference: forward exactly, backward in row order (the op's promise) */
                float *dref = host_copy(dw0, tc, 0);
                for (int64_t n = 0; n < N; n++) {
                    int64_t p = naive_position(T, cp, i, row0 + n);
                    if (row0 == 0 && n < T_l)
                        seen[p]++;
                    for (int64_t j = 0; j < C; j++) {
                        cr_assert_eq(out[n * C + j], o0[n * C + j] + wpe[p * C + j], "cp %d rank %d row %lld", cp, i,
                                     (long long)n);
                        dref[p * C + j] += g[n * C + j];
                    }
                }
                cr_assert(memcmp(dref, dwpe, tc * sizeof(float)) == 0, "position_backward cp %d rank %d row0 %lld", cp,
                          i, (long long)row0);
                /* the simple kernels: the CPU's bits */
                shape el[N_SHAPES], cols[N_SHAPES];
                shapes_for(N * C, el);
                shapes_for(T * C, cols);
                for (int k = 0; k < N_SHAPES; k++) {
                    void *kp = gtyped(nc, 0, o0), *kdw = gtyped(tc, 0, dw0);
                    const void *kwpe = gtyped(tc, 0, wpe), *kg = gtyped(nc, 0, g);
                    TRI_LAUNCH(position_forward_kernel, el[k].grid, el[k].block, kp, 0, kwpe, 0, N, C, T, row0, cp, i);
                    same_typed("position_forward_kernel cp", kp, out, nc, 0);
                    TRI_LAUNCH(position_backward_kernel, cols[k].grid, cols[k].block, kdw, 0, kg, 0, N, C, T, row0, cp, i);
                    same_typed("position_backward_kernel cp", kdw, dwpe, tc, 0);
                    check_guards_and_free("positions cp");
                }
                /* rotary: rotating at the naive positions through the cp 1 op (one row at a time, its
                 * position as row0) gives the cp op's bits, and the simple kernel gives them too */
                size_t nx = (size_t)(N * W);
                float *cs = ot_uniform((size_t)(T * half), -1.0f, 1.0f, 304), *sn = ot_uniform((size_t)(T * half), -1.0f,
                                                                                              1.0f, 305);
                tri_tensor tcs = tri_tensor_2d(cs, TRI_F32, T, half), tsn = tri_tensor_2d(sn, TRI_F32, T, half);
                float *x = ot_uniform(nx, -2.0f, 2.0f, 306), *want = host_copy(x, nx, 0), *got = host_copy(x, nx, 0);
                for (int64_t n = 0; n < N; n++)
                    cr_assert_eq(tri_op_rope_forward(d, tri_tensor_2d(want + n * W, TRI_F32, 1, W), tcs, tsn, 2, T,
                                                     naive_position(T, cp, i, row0 + n), 1, 0), TRI_OK);
                cr_assert_eq(tri_op_rope_forward(d, tri_tensor_2d(got, TRI_F32, N, W), tcs, tsn, 2, T, row0, cp, i),
                             TRI_OK, "%s", tri_error_message());
                cr_assert(memcmp(want, got, nx * sizeof(float)) == 0, "rope_forward cp %d rank %d", cp, i);
                shape s[N_SHAPES];
                shapes_for(N * 2 * half, s);
                for (int k = 0; k < N_SHAPES; k++) {
                    void *kx = gtyped(nx, 0, x);
                    const float *kc = gfloats((size_t)(T * half), cs), *ks = gfloats((size_t)(T * half), sn);
                    TRI_LAUNCH(rope_kernel, s[k].grid, s[k].block, kx, 0, kc, ks, N, W, 2, half, T, row0, cp, i, 0);
                    same_typed("rope_kernel cp", kx, got, nx, 0);
                    check_guards_and_free("rope cp");
                }
            }
        for (int64_t p = 0; p < T; p++) /* each position once a sequence over the cp ranks */
            cr_assert_eq(seen[p], 1, "cp %d: position %lld held %d times", cp, (long long)p, seen[p]);
        free(seen);
    }
    /* a split that does not cut into 2 cp chunks, or a rank outside the group: refused, naming the values */
    float buf[64] = {0};
    tri_tensor o = tri_tensor_2d(buf, TRI_F32, 2, 4), w = tri_tensor_2d(buf + 8, TRI_F32, 12, 4);
    cr_assert_eq(tri_op_position_forward(d, o, w, 12, 0, 4, 0), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "cp 4") != NULL, "%s", tri_error_message());
    cr_assert_eq(tri_op_position_forward(d, o, w, 12, 0, 2, 2), TRI_EINVAL);
    tri_error_clear();
}

/* ---- cross-entropy: logits and dlogits fp32 or bf16; maxes, stats, losses fp32 ---- */

static void cross_entropy_case(tri_device *d, const int64_t dims[3], int z, int lb, int db)
{
    int64_t N = dims[0], V_l = dims[1], V_valid = dims[2], vocab_start = 2;
    size_t nv = (size_t)(N * V_l);
    bool in_place = lb == db; /* in place as llm.c's fused classifier, or into a separate dlogits */
    void *logits = host_as(ot_uniform(nv, -8.0f, 8.0f, 120 + (uint64_t)z), nv, lb);
    int32_t *tgt = ot_ints((size_t)N);
    for (int64_t n = 0; n < N; n++) /* targets below, inside and past the valid columns */
        tgt[n] = (int32_t)((n * 5) % (V_l + 4));
    float *maxes = ot_floats((size_t)N), *stats = ot_floats((size_t)(2 * N)), *losses = ot_floats((size_t)N);
    void *dl = in_place ? host_copy(logits, nv, lb) : ot_floats(nv);
    tri_tensor tl = tri_tensor_2d(in_place ? dl : logits, dt(lb), N, V_l), tm = tri_tensor_1d(maxes, TRI_F32, N);
    tri_tensor ts = tri_tensor_2d(stats, TRI_F32, N, 2), tt = tri_tensor_1d(tgt, TRI_I32, N);
    cr_assert_eq(tri_op_ce_row_max(d, tm, tl, V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_sumexp_target(d, ts, tl, tm, tt, vocab_start, V_valid), TRI_OK);
    if (V_valid > 0)
        cr_assert_eq(tri_op_ce_loss(d, tri_tensor_1d(losses, TRI_F32, N), tm, ts), TRI_OK);
    cr_assert_eq(tri_op_ce_backward(d, tri_tensor_2d(dl, dt(db), N, V_l), tl, tm, ts, tt, vocab_start, V_valid,
                                    0.125f), TRI_OK);
    /* the fused classifier on the CPU backend (vocab_start 0; tests/test_ops_ce.c: the pieces' bits) */
    float *fused_losses = ot_floats((size_t)N);
    void *fused_l = host_copy(logits, nv, lb), *fused_dl = in_place ? fused_l : ot_floats(nv);
    cr_assert_eq(tri_op_ce_fused(d, tri_tensor_1d(fused_losses, TRI_F32, N), tri_tensor_2d(fused_dl, dt(db), N, V_l),
                                 tri_tensor_2d(fused_l, dt(lb), N, V_l), tt, V_valid, 0.125f), TRI_OK);
    shape rows[N_SHAPES], el[N_SHAPES];
    shapes_for(N, rows);
    shapes_for(N * V_l, el);
    for (int k = 0; k < N_SHAPES; k++) {
        void *kl = gtyped(nv, lb, logits);
        void *kdl = in_place ? kl : gtyped(nv, db, NULL);
        const int32_t *kt = gbuf((size_t)N * sizeof(int32_t), tgt);
        float *km = gfloats((size_t)N, NULL), *ks = gfloats((size_t)(2 * N), NULL), *kloss = gfloats((size_t)N, NULL);
        TRI_LAUNCH(ce_row_max_kernel, rows[k].grid, rows[k].block, km, kl, lb, N, V_l, V_valid);
        same_bits("ce_row_max_kernel", km, maxes, (size_t)N);
        TRI_LAUNCH(ce_sumexp_target_kernel, rows[k].grid, rows[k].block, ks, kl, lb, km, kt, N, V_l, vocab_start,
                   V_valid);
        same_bits("ce_sumexp_target_kernel", ks, stats, (size_t)(2 * N));
        if (V_valid > 0) {
            TRI_LAUNCH(ce_loss_kernel, rows[k].grid, rows[k].block, kloss, km, ks, N);
            same_bits("ce_loss_kernel", kloss, losses, (size_t)N);
        }
        TRI_LAUNCH(ce_backward_kernel, el[k].grid, el[k].block, kdl, db, kl, lb, km, ks, kt, N, V_l, vocab_start,
                   V_valid, 0.125f);
        same_typed("ce_backward_kernel", kdl, dl, nv, db);
        /* the fused classifier's twin on fresh logits */
        void *fl = gtyped(nv, lb, logits);
        void *fdl = in_place ? fl : gtyped(nv, db, NULL);
        float *floss = gfloats((size_t)N, NULL);
        TRI_LAUNCH(ce_fused_kernel, rows[k].grid, rows[k].block, floss, fdl, db, fl, lb, kt, N, V_l, V_valid, 0.125f);
        if (V_valid > 0)
            same_bits("ce_fused_kernel losses", floss, fused_losses, (size_t)N);
        same_typed("ce_fused_kernel dlogits", fdl, fused_dl, nv, db);
        float *floss_fwd = gfloats((size_t)N, NULL);
        void *fl_fwd = gtyped(nv, lb, logits);
        TRI_LAUNCH(ce_fused_kernel, rows[k].grid, rows[k].block, floss_fwd, NULL, 0, fl_fwd, lb, kt, N, V_l, V_valid,
                   0.125f);
        if (V_valid > 0)
            same_bits("ce_fused_kernel losses, forward only", floss_fwd, fused_losses, (size_t)N);
        same_typed("ce_fused_kernel, forward only, leaves the logits", fl_fwd, logits, nv, lb);
        check_guards_and_free("cross-entropy");
    }
}

Test(cuda_kernels_cpu, cross_entropy)
{
    tri_device *d = cpu();
    /* N, V_l, V_valid; the last longer than a block's 4096 values (math.h's block order of the sum) */
    const int64_t dims[][3] = {{1, 9, 9}, {5, 13, 10}, {37, 300, 257}, {3, 16, 0}, {3, 9000, 8999}};
    const int precs[][2] = {{0, 0}, {1, 1}, {1, 0}}; /* logits, dlogits: in place fp32, in place bf16, bf16 -> fp32 */
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (int z = 0; z < 5; z++)
            cross_entropy_case(d, dims[z], z, precs[q][0], precs[q][1]);
}

/* ---- AdamW ---- */

Test(cuda_kernels_cpu, adamw)
{
    tri_device *d = cpu();
    for (size_t z = 0; z < 2 * N_SIZES; z++) { /* each size with v updated, then frozen at step 2 */
        int64_t n = SIZES[z % N_SIZES], freeze = z < N_SIZES ? 0 : 2;
        float *p0 = ot_uniform((size_t)n, -1.0f, 1.0f, 130 + z), *g = ot_uniform((size_t)n, -1.0f, 1.0f, 131 + z);
        float *m0 = ot_uniform((size_t)n, -0.1f, 0.1f, 132 + z), *v0 = ot_uniform((size_t)n, 0.0f, 0.01f, 133 + z);
        tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                .grad_scale = 0.7f, .step = 3, .freeze_step = freeze};
        float *p = ot_floats((size_t)n), *m = ot_floats((size_t)n), *v = ot_floats((size_t)n);
        memcpy(p, p0, (size_t)n * sizeof *p);
        memcpy(m, m0, (size_t)n * sizeof *m);
        memcpy(v, v0, (size_t)n * sizeof *v);
        cr_assert_eq(tri_op_adamw(d, tri_tensor_1d(p, TRI_F32, n), tri_tensor_1d(g, TRI_F32, n),
                                  tri_tensor_1d(m, TRI_F32, n), tri_tensor_1d(v, TRI_F32, n), &hp), TRI_OK);
        /* the host side of the CUDA op: bias corrections as the CPU backend computes them (frozen:
         * v held, bc2 the freeze step's) */
        int64_t vstep = freeze ? freeze : hp.step;
        float bc1 = 1.0f - powf(hp.beta1, (float)hp.step), bc2 = 1.0f - powf(hp.beta2, (float)vstep);
        if (freeze)
            cr_assert(ot_same_bits("adamw frozen v unchanged", v, v0, (size_t)n));
        shape s[N_SHAPES];
        shapes_for(n, s);
        for (int k = 0; k < N_SHAPES; k++) {
            float *kp = gfloats((size_t)n, p0), *km = gfloats((size_t)n, m0), *kv = gfloats((size_t)n, v0);
            const float *kgrad = gfloats((size_t)n, g);
            TRI_LAUNCH(adamw_kernel, s[k].grid, s[k].block, kp, kgrad, km, kv, n, hp.lr, hp.beta1,
                       hp.beta2, hp.eps, hp.weight_decay, bc1, bc2, hp.grad_scale, (int)!freeze);
            same_bits("adamw_kernel param", kp, p, (size_t)n);
            same_bits("adamw_kernel m", km, m, (size_t)n);
            same_bits("adamw_kernel v", kv, v, (size_t)n);
            check_guards_and_free("adamw");
        }
    }
}

/* ---- SGD, LARS, LAMB, trust ratio (cuda/optimizer/momentum.kern.h) ----
 * Each simple kernel under every launch shape gives the CPU backend's bits: the same
 * optimizer_math.h functions, the ratio read from device memory. */
Test(cuda_kernels_cpu, sgd_lars_lamb_trust)
{
    tri_device *d = cpu();
    float sums_h[12] = {1.0f, 2.0f, 0.5f, 0.25f, 3.0f, 0.0f, 0.7f, 0.1f, 0.2f, 0.3f, 0.0f, 0.0f}; /* 2 x 3 tensors x 2 */
    float ratio_h[3];
    for (int kind = 0; kind < 2; kind++) {
        tri_trust_hparams th = {.kind = (tri_trust_kind)kind, .eta = 0.02f, .weight_decay = 0.01f, .u_scale = 0.5f};
        cr_assert_eq(tri_op_trust_ratio(d, tri_tensor_1d(ratio_h, TRI_F32, 3), tri_tensor_1d(sums_h, TRI_F32, 12), 2,
                                        &th), TRI_OK);
        float *kr = gfloats(3, NULL);
        const float *ks = gfloats(12, sums_h);
        TRI_LAUNCH(trust_ratio_kernel, 1, 32, kr, ks, 3, 2, kind, th.eta, th.weight_decay, th.u_scale);
        same_bits("trust_ratio_kernel", kr, ratio_h, 3);
        check_guards_and_free("trust_ratio");
    }
    for (size_t z = 0; z < N_SIZES; z++) {
        int64_t n = SIZES[z];
        float *p0 = ot_uniform((size_t)n, -1.0f, 1.0f, 150 + z), *g0 = ot_uniform((size_t)n, -1.0f, 1.0f, 151 + z);
        float *b0 = ot_uniform((size_t)n, -0.1f, 0.1f, 152 + z), *v0 = ot_uniform((size_t)n, 0.0f, 0.01f, 153 + z);
        for (int variant = 0; variant < 4; variant++) { /* sgd, sgd nesterov, lars nesterov, lamb */
            float *p = ot_floats((size_t)n), *g = ot_floats((size_t)n), *b = ot_floats((size_t)n), *v = ot_floats((size_t)n);
            memcpy(p, p0, (size_t)n * sizeof *p);
            memcpy(g, g0, (size_t)n * sizeof *g);
            memcpy(b, b0, (size_t)n * sizeof *b);
            memcpy(v, v0, (size_t)n * sizeof *v);
            tri_tensor tp = tri_tensor_1d(p, TRI_F32, n), tg = tri_tensor_1d(g, TRI_F32, n);
            tri_tensor tb = tri_tensor_1d(b, TRI_F32, n), tv = tri_tensor_1d(v, TRI_F32, n);
            tri_tensor tr = tri_tensor_1d(ratio_h, TRI_F32, 3);
            tri_sgd_piece pc = {tp, tg, tb, 0.01f, variant == 2 ? 1 : -1};
            tri_sgd_hparams sh = {.lr = 0.1f, .momentum = 0.9f, .grad_scale = 0.7f, .nesterov = variant >= 1,
                                  .lars = variant == 2};
            tri_adamw_piece ap = {tp, tg, tb, tv, 0.01f};
            tri_adamw_hparams ah = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .grad_scale = 0.7f, .step = 3};
            float bc1 = 1.0f - powf(ah.beta1, (float)ah.step), bc2 = 1.0f - powf(ah.beta2, (float)ah.step);
            if (variant == 3) {
                pc.ratio = 2;
                cr_assert_eq(tri_op_lamb_direction_multi(d, &ap, 1, &ah), TRI_OK);
                cr_assert_eq(tri_op_lamb_update_multi(d, &pc, 1, tr, 0.01f), TRI_OK);
            } else {
                cr_assert_eq(tri_op_sgd_multi(d, &pc, 1, tr, &sh), TRI_OK);
            }
            shape s[N_SHAPES];
            shapes_for(n, s);
            for (int k = 0; k < N_SHAPES; k++) {
                float *kp = gfloats((size_t)n, p0), *kg = gfloats((size_t)n, g0), *kb = gfloats((size_t)n, b0);
                float *kv = gfloats((size_t)n, v0);
                const float *kratios = gfloats(3, ratio_h);
                if (variant == 3) {
                    TRI_LAUNCH(lamb_direction_kernel, s[k].grid, s[k].block, kp, kg, kb, kv, n, ah.beta1, ah.beta2,
                               ah.eps, 0.01f, bc1, bc2, ah.grad_scale);
                    TRI_LAUNCH(lamb_update_kernel, s[k].grid, s[k].block, kp, kg, n, kratios, (int64_t)2, 0.01f);
                    same_bits("lamb direction (grad)", kg, g, (size_t)n);
                    same_bits("lamb v", kv, v, (size_t)n);
                } else {
                    TRI_LAUNCH(sgd_kernel, s[k].grid, s[k].block, kp, kg, kb, n, kratios, pc.ratio, sh.lr, sh.momentum,
                               0.01f, sh.grad_scale, (int)sh.nesterov, (int)sh.lars);
                }
                same_bits("momentum kernels param", kp, p, (size_t)n);
                same_bits("momentum kernels buf / m", kb, b, (size_t)n);
                check_guards_and_free("sgd_lars_lamb");
            }
        }
    }
}

/* The multi-tensor kernel (tri_op_adamw_multi's): five pieces of one buffer (one empty), weight decay
 * on and off, v updated and frozen (1-bit Adam), through adamw_multi_kernel under every launch shape must
 * give the bits of the single op piece by piece. */
Test(cuda_kernels_cpu, adamw_multi_same_bits_as_piece_by_piece)
{
    tri_device *d = cpu();
    const int64_t lens[] = {1001, 0, 63, 4099, 1};
    const float wds[] = {0.1f, 0.1f, 0.0f, 0.1f, 0.0f};
    enum { P = sizeof lens / sizeof *lens };
    int64_t total = 0;
    for (int k = 0; k < P; k++)
        total += lens[k];
    float *p0 = ot_uniform((size_t)total, -1.0f, 1.0f, 140), *g = ot_uniform((size_t)total, -1.0f, 1.0f, 141);
    float *m0 = ot_uniform((size_t)total, -0.1f, 0.1f, 142), *v0 = ot_uniform((size_t)total, 0.0f, 0.01f, 143);
    float *p = ot_floats((size_t)total), *m = ot_floats((size_t)total), *v = ot_floats((size_t)total);
    tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.7f, .step = 3};
    for (int frozen = 0; frozen < 2; frozen++) { /* v updated, then frozen at step 2 (1-bit Adam) */
        hp.freeze_step = frozen ? 2 : 0;
        memcpy(p, p0, (size_t)total * sizeof *p);
        memcpy(m, m0, (size_t)total * sizeof *m);
        memcpy(v, v0, (size_t)total * sizeof *v);
        for (int k = 0, at = 0; k < P; at += (int)lens[k], k++) {
            hp.weight_decay = wds[k];
            int64_t len = lens[k];
            cr_assert_eq(tri_op_adamw(d, tri_tensor_1d(p + at, TRI_F32, len), tri_tensor_1d(g + at, TRI_F32, len),
                                      tri_tensor_1d(m + at, TRI_F32, len), tri_tensor_1d(v + at, TRI_F32, len), &hp),
                         TRI_OK);
        }
        float bc1 = 1.0f - powf(hp.beta1, (float)hp.step);
        float bc2 = 1.0f - powf(hp.beta2, (float)(frozen ? hp.freeze_step : hp.step));
        shape s[N_SHAPES];
        shapes_for(total, s);
        for (int k = 0; k < N_SHAPES; k++) {
            float *kp = gfloats((size_t)total, p0), *km = gfloats((size_t)total, m0), *kv = gfloats((size_t)total, v0);
            float *kg = gfloats((size_t)total, g);
            tri_adamw_group a;
            memset(&a, 0, sizeof a);
            for (int q = 0; q < P; q++, a.n++) {
                int64_t at = a.first[q];
                a.p[q] = kp + at, a.g[q] = kg + at, a.m[q] = km + at, a.v[q] = kv + at, a.wd[q] = wds[q];
                a.first[q + 1] = at + lens[q];
            }
            TRI_LAUNCH(adamw_multi_kernel, s[k].grid, s[k].block, a, hp.lr, hp.beta1, hp.beta2, hp.eps, bc1, bc2,
                       hp.grad_scale, !frozen);
            same_bits("adamw_multi_kernel param", kp, p, (size_t)total);
            same_bits("adamw_multi_kernel m", km, m, (size_t)total);
            same_bits("adamw_multi_kernel v", kv, v, (size_t)total);
            check_guards_and_free("adamw_multi");
        }
    }
}

/* The fused kernel (tri_op_adamw_fused_multi's): the pieces of the test above, one of them without a
 * bf16 output, v updated and frozen, under every launch shape: param, m, v, the bf16 weights and the
 * zeroed gradients are the bits of the CPU backend's fused op, which tests/test_adamw_fused.c holds to
 * the three separate passes. */
Test(cuda_kernels_cpu, adamw_fused_multi_same_bits_as_cpu)
{
    tri_device *d = cpu();
    const int64_t lens[] = {1001, 0, 63, 4099, 1};
    const float wds[] = {0.1f, 0.1f, 0.0f, 0.1f, 0.0f};
    enum { P = sizeof lens / sizeof *lens };
    int64_t total = 0;
    for (int k = 0; k < P; k++)
        total += lens[k];
    float *p0 = ot_uniform((size_t)total, -1.0f, 1.0f, 160), *g0 = ot_uniform((size_t)total, -1.0f, 1.0f, 161);
    float *m0 = ot_uniform((size_t)total, -0.1f, 0.1f, 162), *v0 = ot_uniform((size_t)total, 0.0f, 0.01f, 163);
    uint16_t *o0 = (uint16_t *)ot_floats((size_t)total);
    memset(o0, 0xFF, (size_t)total * sizeof *o0);
    float *p = ot_floats((size_t)total), *g = ot_floats((size_t)total), *m = ot_floats((size_t)total);
    float *v = ot_floats((size_t)total);
    uint16_t *o = (uint16_t *)ot_floats((size_t)total);
    tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.7f, .step = 3};
    for (int frozen = 0; frozen < 2; frozen++) {
        hp.freeze_step = frozen ? 2 : 0;
        size_t b = (size_t)total * sizeof(float);
        memcpy(p, p0, b), memcpy(g, g0, b), memcpy(m, m0, b), memcpy(v, v0, b);
        memcpy(o, o0, (size_t)total * sizeof *o);
        tri_adamw_piece pc[P];
        tri_tensor models[P];
        for (int k = 0, at = 0; k < P; at += (int)lens[k], k++) {
            int64_t len = lens[k];
            pc[k] = (tri_adamw_piece){tri_tensor_1d(p + at, TRI_F32, len), tri_tensor_1d(g + at, TRI_F32, len),
                                      tri_tensor_1d(m + at, TRI_F32, len), tri_tensor_1d(v + at, TRI_F32, len),
                                      wds[k]};
            models[k] = tri_tensor_1d(o + at, TRI_BF16, len);
        }
        cr_assert_eq(tri_op_adamw_fused_multi(d, pc, models, P, &hp), TRI_OK, "%s", tri_error_message());
        float bc1 = 1.0f - powf(hp.beta1, (float)hp.step);
        float bc2 = 1.0f - powf(hp.beta2, (float)(frozen ? hp.freeze_step : hp.step));
        shape s[N_SHAPES];
        shapes_for(total, s);
        for (int k = 0; k < N_SHAPES; k++) {
            float *kp = gfloats((size_t)total, p0), *km = gfloats((size_t)total, m0), *kv = gfloats((size_t)total, v0);
            float *kg = gfloats((size_t)total, g0);
            uint16_t *ko = gbuf((size_t)total * sizeof *ko, o0);
            tri_adamw_fused_group a;
            memset(&a, 0, sizeof a);
            for (int q = 0; q < P; q++, a.n++) {
                int64_t at = a.first[q];
                a.p[q] = kp + at, a.g[q] = kg + at, a.m[q] = km + at, a.v[q] = kv + at, a.wd[q] = wds[q];
                a.o[q] = q == 3 ? NULL : ko + at; /* piece 3 without a bf16 output */
                a.first[q + 1] = at + lens[q];
            }
            TRI_LAUNCH(adamw_fused_multi_kernel, s[k].grid, s[k].block, a, hp.lr, hp.beta1, hp.beta2, hp.eps, bc1, bc2,
                       hp.grad_scale, !frozen);
            same_bits("adamw_fused_multi_kernel param", kp, p, (size_t)total);
            same_bits("adamw_fused_multi_kernel m", km, m, (size_t)total);
            same_bits("adamw_fused_multi_kernel v", kv, v, (size_t)total);
            same_bits("adamw_fused_multi_kernel grad", kg, g, (size_t)total);
            for (int64_t i = 0; i < total; i++) {
                bool none = i >= a.first[3] && i < a.first[4];
                cr_assert_eq(ko[i], none ? o0[i] : o[i], "adamw_fused_multi_kernel bf16 weight %lld: 0x%04x vs 0x%04x",
                             (long long)i, ko[i], none ? o0[i] : o[i]);
            }
            check_guards_and_free("adamw_fused_multi");
        }
    }
}

/* ---- bf16 conversion (no CPU op: against engine/core/math.h's scalar functions and known values) ---- */

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
