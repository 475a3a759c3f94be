/* tests/test_ops_bf16_semantics.c - bf16 storage of the device ops, bit for bit, on the CPU backend.
 *
 * What engine/device/device.h defines exactly, so exactly checked: tri_op_convert rounds fp32 to bf16 as
 * engine/core/math.h's tri_float_to_bf16 does (to nearest even: ties, subnormals, +-Inf, NaN staying NaN,
 * overflow to Inf, random bit patterns) and widens bf16 exactly (all 65536 patterns), equal dtypes
 * copy bits; tri_op_zero and tri_op_fill of bf16 views; an op with bf16 arguments gives exactly
 * tri_float_to_bf16 of the same op in fp32 on widened copies (the reference the CUDA kernels are
 * compared with); and a wrong dtype is refused with a message naming the op, the argument and what
 * it accepts (AdamW and the statistics stay fp32). Accuracy against fp64 loops is in
 * test_ops_bf16.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/core/rng.h"
#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_bf16_semantics, .init = tri_error_clear, .fini = ot_teardown);

/* ---- tensors ---- */

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}


/* ---- tri_op_convert ---- */

/* Values at the edges of rounding, each with the bf16 bits it must become. */
typedef struct rounding_case {
    uint32_t f32;
    uint16_t bf16;
    const char *why;
} rounding_case;

static const rounding_case rounding_cases[] = {
    {0x3f808000, 0x3f80, "1 + 2^-8: halfway, ties to the even 1"},
    {0x3f818000, 0x3f82, "1 + 3 2^-8: halfway, ties to the even 1 + 2^-6"},
    {0x3f808001, 0x3f81, "just above halfway rounds up"},
    {0x3f807fff, 0x3f80, "just below halfway rounds down"},
    {0xbf808000, 0xbf80, "-(1 + 2^-8): ties to even, sign kept"},
    {0xc0490fdb, 0xc049, "-pi"},
    {0x80000000, 0x8000, "-0 keeps its sign"},
    {0x00000001, 0x0000, "smallest fp32 subnormal rounds to 0"},
    {0x00010000, 0x0001, "smallest bf16 subnormal (2^-133) is exact"},
    {0x00018000, 0x0002, "1.5 2^-133: halfway, ties to even"},
    {0x00028000, 0x0002, "2.5 2^-133: halfway, ties to even"},
    {0x807fffff, 0x8080, "largest negative subnormal rounds up into -FLT_MIN"},
    {0x7f800000, 0x7f80, "+Inf"},
    {0xff800000, 0xff80, "-Inf"},
    {0x7f7f0000, 0x7f7f, "largest finite bf16 is exact"},
    {0x7f7f7fff, 0x7f7f, "just below halfway to Inf stays finite"},
    {0x7f7f8000, 0x7f80, "halfway between the largest bf16 and Inf: Inf (even)"},
    {0x7f7fffff, 0x7f80, "FLT_MAX overflows to Inf"},
    {0xff7fffff, 0xff80, "-FLT_MAX overflows to -Inf"},
};

/* NaNs, each of which must stay a NaN of the same sign: 0x7f800001 rounded as a number would
 * carry into Inf (0x7f80), and truncated it would be Inf too. */
static const uint32_t nan_cases[] = {0x7fc00000, 0xffc00000, 0x7f800001,
                                     0xff800001, 0x7fffffff, 0x7f80ffff};

Test(ops_bf16_semantics, convert_fp32_to_bf16_rounds_to_nearest_even)
{
    tri_device *d = ot_device(1);
    size_t nr = sizeof rounding_cases / sizeof *rounding_cases,
           nn = sizeof nan_cases / sizeof *nan_cases;
    size_t n = nr + nn;
    float *x = ot_floats(n);
    for (size_t i = 0; i < nr; i++)
        x[i] = from_bits(rounding_cases[i].f32);
    for (size_t i = 0; i < nn; i++)
        x[nr + i] = from_bits(nan_cases[i]);
    tri_tensor src = ot_put_f32(d, ot_v1((int64_t)n), x), dst = ot_put_bf16(d, ot_v1((int64_t)n), NULL);
    cr_assert_eq(tri_op_convert(d, dst, src), TRI_OK, "%s", tri_error_message());
    uint16_t *got = ot_read_bits(d, dst);
    for (size_t i = 0; i < nr; i++) {
        cr_expect_eq(got[i], rounding_cases[i].bf16, "0x%08x (%s): got 0x%04x, want 0x%04x",
                     rounding_cases[i].f32, rounding_cases[i].why, got[i], rounding_cases[i].bf16);
        cr_expect_eq(got[i], tri_float_to_bf16(x[i]), "0x%08x: op and engine/core/math.h differ",
                     rounding_cases[i].f32);
    }
    for (size_t i = 0; i < nn; i++) {
        float back = tri_bf16_to_float(got[nr + i]);
        cr_expect(isnan(back) && signbit(back) == signbit(x[nr + i]), "NaN 0x%08x became 0x%04x",
                  nan_cases[i], got[nr + i]);
        cr_expect_eq(got[nr + i], tri_float_to_bf16(x[nr + i]));
    }
}

/* 70001 random bit patterns (every class: normals of all exponents, subnormals, NaNs, Infs), more
 * than the 65536 above which the op's loop runs on 2 threads. */
Test(ops_bf16_semantics, convert_fp32_to_bf16_random_bits_match_math_h)
{
    tri_device *d = ot_device(2);
    const size_t n = 70001;
    float *x = ot_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = from_bits((uint32_t)tri_rng_hash64(0xbf16 + i));
    tri_tensor src = ot_put_f32(d, ot_v1((int64_t)n), x), dst = ot_put_bf16(d, ot_v1((int64_t)n), NULL);
    cr_assert_eq(tri_op_convert(d, dst, src), TRI_OK);
    uint16_t *got = ot_read_bits(d, dst);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], tri_float_to_bf16(x[i]), "0x%08x: got 0x%04x, want 0x%04x", bits_of(x[i]),
                     got[i], tri_float_to_bf16(x[i]));
}

/* Every one of the 65536 bf16 patterns widens to exactly its bits << 16 (NaN payloads too), and
 * every non-NaN value converts back to itself. */
Test(ops_bf16_semantics, convert_bf16_to_fp32_is_exact)
{
    tri_device *d = ot_device(1);
    const int64_t n = 65536;
    uint16_t *all = (uint16_t *)ot_floats((size_t)n);
    for (int64_t i = 0; i < n; i++)
        all[i] = (uint16_t)i;
    tri_tensor h = ot_tensor(d, tri_tensor_1d(NULL, TRI_BF16, n), all);
    tri_tensor f = ot_put_f32(d, ot_v1(n), NULL), back = ot_put_bf16(d, ot_v1(n), NULL);
    cr_assert_eq(tri_op_convert(d, f, h), TRI_OK);
    float *wide = ot_read(d, f);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(bits_of(wide[i]), (uint32_t)i << 16, "0x%04x widened to 0x%08x", (unsigned)i,
                     bits_of(wide[i]));
    cr_assert_eq(tri_op_convert(d, back, f), TRI_OK);
    uint16_t *again = ot_read_bits(d, back);
    for (int64_t i = 0; i < n; i++)
        if (!isnan(wide[i]))
            cr_assert_eq(again[i], (uint16_t)i, "0x%04x came back as 0x%04x", (unsigned)i, again[i]);
        else
            cr_assert(isnan(tri_bf16_to_float(again[i])), "NaN 0x%04x came back as 0x%04x", (unsigned)i,
                      again[i]);
}

/* Equal dtypes copy the bits (NaN payloads included); other dtypes and sizes are refused. */
Test(ops_bf16_semantics, convert_same_dtype_copies)
{
    tri_device *d = ot_device(1);
    const int64_t n = 9;
    float *x = ot_uniform((size_t)n, -3.0f, 3.0f, 10);
    x[2] = from_bits(0x7f800001); /* a signalling NaN: a value copy could quiet it */
    tri_tensor f1 = ot_put_f32(d, ot_v1(n), x), f2 = ot_put_f32(d, ot_v1(n), NULL);
    cr_assert_eq(tri_op_convert(d, f2, f1), TRI_OK);
    cr_assert(ot_same_bits("convert f32 -> f32", ot_read(d, f2), x, (size_t)n));

    uint16_t bits[9] = {0x3f80, 0x7f81, 0xffc1, 0x0001, 0x8000, 0x7f80, 0x4049, 0xc2c8, 0x0000}, got[9];
    tri_tensor h1 = ot_tensor(d, tri_tensor_1d(NULL, TRI_BF16, n), bits);
    tri_tensor h2 = ot_put_bf16(d, tri_tensor_3d(NULL, TRI_BF16, 1, 3, 3), NULL); /* any shape of n */
    cr_assert_eq(tri_op_convert(d, h2, h1), TRI_OK);
    ot_download(d, got, h2);
    cr_assert_arr_eq(got, bits, sizeof bits);

    cr_assert_eq(tri_op_convert(d, ot_put_bf16(d, ot_v1(n + 1), NULL), f1), TRI_EINVAL);
    cr_assert_eq(tri_op_convert(d, ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, n), NULL), f1), TRI_EINVAL);
}

/* ---- zero and fill ---- */

/* tri_op_zero of an odd number of bf16 (not a whole number of floats) and of an even number at an
 * odd offset (not float-aligned) must clear exactly those elements. */
Test(ops_bf16_semantics, zero_odd_length_and_odd_offset)
{
    tri_device *d = ot_device(1);
    float *x = ot_bf16_uniform(9, 1.0f, 2.0f, 20);
    tri_tensor t = ot_put_bf16(d, ot_v1(9), x);
    cr_assert_eq(tri_op_zero(d, tri_tensor_range(t, 0, 7)), TRI_OK, "%s", tri_error_message());
    uint16_t *got = ot_read_bits(d, t);
    for (int i = 0; i < 9; i++)
        cr_assert_eq(got[i], i < 7 ? 0 : tri_float_to_bf16(x[i]), "element %d: 0x%04x", i, got[i]);

    t = ot_put_bf16(d, ot_v1(9), x);
    cr_assert_eq(tri_op_zero(d, tri_tensor_range(t, 1, 6)), TRI_OK, "%s", tri_error_message());
    got = ot_read_bits(d, t);
    for (int i = 0; i < 9; i++)
        cr_assert_eq(got[i], (i >= 1 && i < 7) ? 0 : tri_float_to_bf16(x[i]), "element %d: 0x%04x", i,
                     got[i]);
}

/* fill stores the value rounded to bf16 (0.1 is not a bf16 value), -0 with its sign. */
Test(ops_bf16_semantics, fill)
{
    tri_device *d = ot_device(1);
    const int64_t n = 1001;
    tri_tensor x = ot_put_bf16(d, ot_v1(n), ot_bf16_uniform((size_t)n, -1.0f, 1.0f, 30));
    static const float values[] = {0.1f, -0.0f, 3.0e38f, -7.0f};
    for (size_t k = 0; k < sizeof values / sizeof *values; k++) {
        cr_assert_eq(tri_op_fill(d, x, values[k]), TRI_OK);
        uint16_t *got = ot_read_bits(d, x);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(got[i], tri_float_to_bf16(values[k]), "fill %g: element %lld is 0x%04x",
                         (double)values[k], (long long)i, got[i]);
    }
}

/* ---- the semantics, bit for bit ---- */

/* One op call on args[] (in the order of the exact_case's shapes). */
typedef int (*op_call)(tri_device *d, const tri_tensor *args);

enum { FLOATING, F32_ONLY, TOKENS }; /* an argument's kind: floating ones are bf16 or fp32 */

#define EXACT_MAX_ARGS 8

typedef struct exact_case {
    const char *name;
    op_call call;
    int n;
    tri_tensor shape[EXACT_MAX_ARGS];
    int kind[EXACT_MAX_ARGS];
    bool check[EXACT_MAX_ARGS]; /* outputs compared (scratch is not) */
} exact_case;

/* Tokens and targets below this lie inside every shard the cases use (vocab_start 0). */
#define EXACT_VOCAB 7

/* Runs c twice on the same values, floating arguments once all bf16 and once all fp32: every
 * floating output of the bf16 run must hold tri_float_to_bf16 of the fp32 run's, and every f32
 * output the same bits. */
static void check_exact(tri_device *d, const exact_case *c, uint64_t seed)
{
    tri_tensor lo[EXACT_MAX_ARGS], hi[EXACT_MAX_ARGS];
    for (int i = 0; i < c->n; i++) {
        size_t n = (size_t)tri_tensor_numel(c->shape[i]);
        if (c->kind[i] == TOKENS) {
            int32_t *ids = ot_ints(n);
            for (size_t k = 0; k < n; k++)
                ids[k] = (int32_t)((3 * k + 1) % EXACT_VOCAB);
            lo[i] = hi[i] = ot_tensor(d, c->shape[i], ids);
            continue;
        }
        float *x = ot_bf16_uniform(n, -2.0f, 2.0f, seed + (uint64_t)i);
        lo[i] = ot_tensor_as(d, c->kind[i] == F32_ONLY ? TRI_F32 : TRI_BF16, c->shape[i], x);
        hi[i] = ot_put_f32(d, c->shape[i], x);
    }
    cr_assert_eq(c->call(d, lo), TRI_OK, "%s (bf16): %s", c->name, tri_error_message());
    cr_assert_eq(c->call(d, hi), TRI_OK, "%s (fp32): %s", c->name, tri_error_message());
    for (int i = 0; i < c->n; i++) {
        if (!c->check[i])
            continue;
        size_t n = (size_t)tri_tensor_numel(c->shape[i]);
        float *ref = ot_read(d, hi[i]);
        if (c->kind[i] == F32_ONLY) {
            cr_assert(ot_same_bits(c->name, ot_read(d, lo[i]), ref, n));
            continue;
        }
        uint16_t *got = ot_read_bits(d, lo[i]);
        for (size_t k = 0; k < n; k++)
            cr_assert_eq(got[k], tri_float_to_bf16(ref[k]),
                         "%s: argument %d element %zu: 0x%04x, fp32 %.9g", c->name, i, k, got[k],
                         (double)ref[k]);
    }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "ok   %-46s bf16 = round(fp32 op), bit for bit\n", c->name);
}

static int call_add(tri_device *d, const tri_tensor *a)
{
    return tri_op_add(d, a[0], a[1], a[2]);
}

static int call_axpy(tri_device *d, const tri_tensor *a)
{
    return tri_op_axpy(d, a[0], -0.7f, a[1]);
}

static int call_gelu_backward(tri_device *d, const tri_tensor *a)
{
    return tri_op_gelu_backward(d, a[0], a[1], a[2]);
}

static int call_matmul_bias(tri_device *d, const tri_tensor *a)
{
    return tri_op_matmul(d, a[0], a[1], a[2], a[3], false, true, 0.0f);
}

static int call_matmul_accumulate(tri_device *d, const tri_tensor *a)
{
    return tri_op_matmul(d, a[0], a[1], a[2], tri_tensor_none(), true, false, 1.0f);
}

static int call_layernorm_forward(tri_device *d, const tri_tensor *a)
{
    return tri_op_layernorm_forward(d, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static int call_layernorm_backward(tri_device *d, const tri_tensor *a)
{
    return tri_op_layernorm_backward(d, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
}

static int call_attention_forward(tri_device *d, const tri_tensor *a)
{
    return tri_op_attention_forward(d, a[0], a[1], a[2]);
}

static int call_attention_backward(tri_device *d, const tri_tensor *a)
{
    return tri_op_attention_backward(d, a[0], a[1], a[2], a[3], a[4]);
}

static int call_embedding_backward(tri_device *d, const tri_tensor *a)
{
    return tri_op_embedding_backward(d, a[0], a[1], a[2], 0);
}

static int call_ce_backward(tri_device *d, const tri_tensor *a)
{
    return tri_op_ce_backward(d, a[0], a[1], a[2], a[3], a[4], 0, EXACT_VOCAB, 0.37f);
}

Test(ops_bf16_semantics, bf16_result_is_rounded_fp32_result)
{
    tri_device *d = ot_device(1);
    const int64_t N = 6, C = 67, OC = 9, B = 2, T = 3, NH = 3, HS = 4, CA = NH * HS;
    tri_tensor x = ot_m2(N, C), c1 = ot_v1(C), n1 = ot_v1(N), w = ot_m2(OC, C), o = ot_m2(N, OC), oc = ot_v1(OC);
    tri_tensor qkv = tri_tensor_3d(NULL, TRI_F32, B, T, 3 * CA),
               att = tri_tensor_4d(NULL, TRI_F32, B, NH, T, T);
    tri_tensor ao = tri_tensor_3d(NULL, TRI_F32, B, T, CA), ids = tri_tensor_1d(NULL, TRI_I32, N);
    tri_tensor logits = ot_m2(N, EXACT_VOCAB + 2), stats = ot_m2(N, 2), wte = ot_m2(EXACT_VOCAB, C);
    const exact_case cases[] = {
        {"add", call_add, 3, {x, x, x}, {0}, {true}},
        {"axpy", call_axpy, 2, {x, x}, {0}, {true}},
        {"gelu_backward", call_gelu_backward, 3, {x, x, x}, {0}, {true}},
        {"matmul a b^T + bias", call_matmul_bias, 4, {o, x, w, oc}, {0}, {true}},
        {"matmul c += a^T b", call_matmul_accumulate, 3, {w, o, x}, {0}, {true}},
        {"layernorm_forward", call_layernorm_forward, 6, {x, n1, n1, x, c1, c1},
         {FLOATING, F32_ONLY, F32_ONLY}, {true, true, true}},
        {"layernorm_backward", call_layernorm_backward, 8, {x, c1, c1, x, x, c1, n1, n1},
         {[6] = F32_ONLY, [7] = F32_ONLY}, {true, true, true}},
        {"attention_forward", call_attention_forward, 3, {ao, att, qkv}, {0}, {true, true}},
        {"attention_backward", call_attention_backward, 5, {qkv, att, ao, qkv, att}, {0}, {true}},
        {"embedding_backward", call_embedding_backward, 3, {wte, x, ids}, {[2] = TOKENS}, {true}},
        {"ce_backward", call_ce_backward, 5, {logits, logits, n1, stats, ids},
         {[2] = F32_ONLY, F32_ONLY, TOKENS}, {true}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        check_exact(d, &cases[k], 1300 + 20 * k);
}

/* ---- errors ---- */

/* rc is TRI_EINVAL and the message starts "<op>:" and contains every one of words[]. */
static void expect_refused(int rc, const char *op, const char *const *words, int n_words)
{
    const char *msg = tri_error_message();
    size_t len = strlen(op);
    cr_expect_eq(rc, TRI_EINVAL, "%s: status %d, expected EINVAL; message \"%s\"", op, rc, msg);
    cr_expect(strncmp(msg, op, len) == 0 && msg[len] == ':',
              "message does not start with \"%s:\": \"%s\"", op, msg);
    for (int i = 0; i < n_words; i++)
        cr_expect(strstr(msg, words[i]) != NULL, "%s: message does not name %s: \"%s\"", op, words[i],
                  msg);
    tri_error_clear();
}

#define EXPECT_REFUSED(rc, op, ...)                                                                     \
    expect_refused((rc), (op), (const char *const[]){__VA_ARGS__},                                      \
                   (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))

static tri_tensor as_i32(tri_tensor t)
{
    t.dtype = TRI_I32;
    return t;
}

/* An i32 tensor where a floating one belongs: the op, the argument and the accepted dtypes. */
Test(ops_bf16_semantics, error_integer_where_float_expected)
{
    tri_device *d = ot_device(1);
    const int64_t N = 4, C = 8;
    tri_tensor x = ot_put_bf16(d, ot_m2(N, C), NULL), y = ot_put_f32(d, ot_m2(N, C), NULL),
               c1 = ot_put_bf16(d, ot_v1(C), NULL);
    tri_tensor n1 = ot_put_f32(d, ot_v1(N), NULL);
    EXPECT_REFUSED(tri_op_gelu_forward(d, x, as_i32(y)), "gelu_forward", "'inp'", "f32 or bf16");
    EXPECT_REFUSED(tri_op_add(d, y, x, as_i32(x)), "add", "'b'", "f32 or bf16");
    EXPECT_REFUSED(tri_op_layernorm_forward(d, x, n1, n1, x, as_i32(c1), c1), "layernorm_forward", "'w'",
                   "f32 or bf16");
    EXPECT_REFUSED(tri_op_convert(d, as_i32(y), x), "convert", "'dst'", "f32 or bf16");
    EXPECT_REFUSED(tri_op_fill(d, as_i32(x), 1.0f), "fill", "'x'", "f32 or bf16");
}

/* matmul's a and b share a dtype: bf16 a with fp32 b is refused naming both. */
Test(ops_bf16_semantics, error_matmul_a_and_b_dtypes_differ)
{
    tri_device *d = ot_device(1);
    tri_tensor a = ot_put_bf16(d, ot_m2(4, 8), NULL), b = ot_put_f32(d, ot_m2(5, 8), NULL),
               c = ot_put_f32(d, ot_m2(4, 5), NULL);
    EXPECT_REFUSED(tri_op_matmul(d, c, a, b, tri_tensor_none(), false, true, 0.0f), "matmul",
                   "a (4, 8) bf16", "b (5, 8) f32", "share a dtype");
}

/* The bias has c's dtype. */
Test(ops_bf16_semantics, error_bias_dtype_differs_from_c)
{
    tri_device *d = ot_device(1);
    tri_tensor a = ot_put_bf16(d, ot_m2(4, 8), NULL), b = ot_put_bf16(d, ot_m2(5, 8), NULL),
               c = ot_put_bf16(d, ot_m2(4, 5), NULL);
    tri_tensor bias32 = ot_put_f32(d, ot_v1(5), NULL), bias16 = ot_put_bf16(d, ot_v1(5), NULL);
    EXPECT_REFUSED(tri_op_matmul(d, c, a, b, bias32, false, true, 0.0f), "matmul", "'bias'", "f32",
                   "expected dtype bf16");
    c = ot_put_f32(d, ot_m2(4, 5), NULL);
    EXPECT_REFUSED(tri_op_matmul(d, c, a, b, bias16, false, true, 0.0f), "matmul", "'bias'", "bf16",
                   "expected dtype f32");
}

/* AdamW updates fp32 master weights only (its moments and gradients are fp32 too). */
Test(ops_bf16_semantics, error_adamw_refuses_bf16)
{
    tri_device *d = ot_device(1);
    const int64_t n = 8;
    tri_tensor p16 = ot_put_bf16(d, ot_v1(n), NULL), f = ot_put_f32(d, ot_v1(n), NULL), g = ot_put_f32(d, ot_v1(n), NULL);
    tri_adamw_hparams hp = {
        .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = 1};
    EXPECT_REFUSED(tri_op_adamw(d, p16, g, f, f, &hp), "adamw", "'param'", "bf16", "expected dtype f32");
    EXPECT_REFUSED(tri_op_adamw(d, f, p16, g, g, &hp), "adamw", "'grad'", "bf16", "expected dtype f32");
}

/* The arguments documented f32 (statistics and reductions' outputs) refuse bf16. */
Test(ops_bf16_semantics, error_f32_only_arguments_refuse_bf16)
{
    tri_device *d = ot_device(1);
    const int64_t N = 4, C = 8;
    tri_tensor x = ot_put_bf16(d, ot_m2(N, C), NULL), c1 = ot_put_bf16(d, ot_v1(C), NULL),
               n16 = ot_put_bf16(d, ot_v1(N), NULL);
    tri_tensor n32 = ot_put_f32(d, ot_v1(N), NULL), one16 = ot_put_bf16(d, ot_v1(1), NULL);
    tri_tensor tt = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), ot_ints((size_t)N));
    EXPECT_REFUSED(tri_op_layernorm_forward(d, x, n16, n32, x, c1, c1), "layernorm_forward", "'mean'",
                   "expected dtype f32");
    EXPECT_REFUSED(tri_op_layernorm_backward(d, x, c1, c1, x, x, c1, n32, n16), "layernorm_backward",
                   "'rstd'", "expected dtype f32");
    EXPECT_REFUSED(tri_op_sum_squares(d, one16, x), "sum_squares", "'out'", "expected dtype f32");
    EXPECT_REFUSED(tri_op_count_nonfinite(d, one16, x), "count_nonfinite", "'out'",
                   "expected dtype f32");
    EXPECT_REFUSED(tri_op_ce_row_max(d, n16, x, C), "ce_row_max", "'maxes'", "expected dtype f32");
    EXPECT_REFUSED(tri_op_ce_sumexp_target(d, ot_put_bf16(d, ot_m2(N, 2), NULL), x, n32, tt, 0, C),
                   "ce_sumexp_target", "'stats'", "expected dtype f32");
}
