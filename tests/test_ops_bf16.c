/* tests/test_ops_bf16.c - every device op in bf16 on the CPU backend, against fp64 loops.
 *
 * engine/device/device.h's precision rule: every floating argument of an op may be fp32 or bf16, each
 * independently (except the documented f32 ones), and the op computes in fp32: it widens what it
 * reads (exact) and rounds what it writes to nearest even. The CPU backend gets this from the
 * wrappers' widening (engine/device/device.c), and the CUDA kernels are compared with it. Here every
 * floating op runs with all its floating arguments bf16 against a naive fp64 loop on the same
 * (bf16-rounded) inputs whose result is rounded to bf16; the mixed cases of training (bf16
 * activations into fp32 gradient accumulators) run against the same loops at fp32 tolerances; and
 * gelu_backward in bf16 against finite differences. The storage itself (tri_op_convert, zero, fill),
 * the bit-exact definition (bf16 result = rounded fp32 result) and the dtype errors are in
 * test_ops_bf16_semantics.c.
 *
 * Tolerances. The reference sees exactly the op's inputs, so what differs is the op's fp32 arithmetic
 * (relative ~1e-6) and the rounding of the output. bf16 keeps 8 significant bits: one ulp is 2^-8 to
 * 2^-7 of a value. Element-wise ops (each output from a few inputs) must land within 1 ulp of the
 * rounded reference: rounding twice (the exact value to fp32, then to bf16) can land on a bf16 tie
 * the exact value was not on and go the other way; measured 1 ulp for axpy and scale (e.g. a * 1.3f
 * rounds in fp32 onto the midpoint of two bf16 values), 0 for add, gelu, position forward and CE's
 * dlogits; the embedding forward, a copy, exactly. Reductions (matmul, bias, layernorm,
 * attention, embedding and position backward) can cancel, leaving elements much smaller than the
 * terms whose fp32 rounding they carry, so they are measured tensor-wide: max|got - ref| / max|ref|
 * <= 2^-7, one ulp of the largest element (two roundings of values ~1e-6 apart differ by at most one
 * ulp); measured 0 on every reduction here (each element equals the rounded reference). f32 outputs
 * computed from bf16 inputs keep fp32 tolerances, 1e-5 relative with a floor of 1/10 of the RMS: one
 * bf16 rounding on their path would cost ~2^-9 and fail them; measured at most 1.4e-7 (CE sum-exp,
 * layernorm mean and rstd), 9.6e-7 (fp32 dw from bf16 layernorm backward, sums over 10 rows), 6.4e-7
 * (fp32 dwte), 4.0e-7 (fp32 weight gradient of bf16 matmul). TRIDENT_TEST_VERBOSE=1 prints them. */
#include <criterion/criterion.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/core/math.h"
#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_bf16, .fini = ot_teardown);

#define ULP_TOL 1       /* element-wise ops: bf16 ulps from the rounded reference */
#define NORM_TOL 0x1p-7 /* reductions: max |got - ref| / max |ref| */
#define F32_TOL 1e-5    /* f32 outputs from bf16 inputs (relative, floor FLOOR of the RMS) */
#define FLOOR 0.1
#define LN_EPS 1e-5
#define PI 3.14159265358979323846

/* ---- tensors ---- */


static tri_tensor i32_tensor(tri_device *d, const int32_t *ids, int64_t n)
{
    return ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, n), ids);
}

/* ---- comparisons ---- */

/* x rounded to the nearest bf16 value, ties to even, in double (for the normal range, where every
 * reference here lies): 8 significant bits. */
static double round_bf16_d(double x)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    int e;
    double m = frexp(x, &e); /* |m| in [0.5, 1) */
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

/* Position of a bf16 value on the number line: neighbours differ by 1, +0 and -0 are both 0. */
static int bf16_rank(float x)
{
    uint16_t h = tri_float_to_bf16(x);
    return (h & 0x8000u) ? -(int)(h & 0x7fffu) : (int)h;
}

static void report(bool ok, const char *what, const char *measure, double err, double tol, size_t worst,
                   double got, double want)
{
    if (!ok || getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s %-46s %s %.3e (tol %.1e) worst [%zu] got %.9g want %.9g\n",
                ok ? "ok  " : "FAIL", what, measure, err, tol, worst, got, want);
}

/* Whether every got[i] is within max_ulps bf16 ulps of want[i] rounded to bf16. */
static bool within_ulps(const char *what, const float *got, const double *want, size_t n, int max_ulps)
{
    int worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double r = round_bf16_d(want[i]);
        int u = isnan(got[i]) ? INT_MAX : abs(bf16_rank(got[i]) - bf16_rank((float)r));
        if (u > worst) {
            worst = u;
            wi = i;
        }
    }
    bool ok = worst <= max_ulps;
    report(ok, what, "max ulps", worst, max_ulps, wi, n ? got[wi] : 0.0,
           n ? round_bf16_d(want[wi]) : 0.0);
    return ok;
}

/* Whether max_i |got_i - r_i| / max_i |r_i| <= tol, r = want rounded to bf16. */
static bool within_norm(const char *what, const float *got, const double *want, size_t n, double tol)
{
    double top = 0.0, diff = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double r = round_bf16_d(want[i]);
        double e = fabs((double)got[i] - r);
        top = fabs(r) > top ? fabs(r) : top;
        if (isnan(e) || e > diff) {
            diff = isnan(e) ? INFINITY : e;
            wi = i;
        }
    }
    double err = top > 0.0 ? diff / top : diff;
    bool ok = err <= tol;
    report(ok, what, "max norm err", err, tol, wi, n ? got[wi] : 0.0, n ? round_bf16_d(want[wi]) : 0.0);
    return ok;
}

/* ---- naive fp64 references ---- */

/* op(a)[i][k] for a (M, K), or (K, M) when transposed */
static double at(const float *a, bool trans, int64_t rows, int64_t cols, int64_t i, int64_t k)
{
    return trans ? a[k * rows + i] : a[i * cols + k];
}

/* c(M,N) = op(a) op(b) + bias + beta c0 */
static double *matmul_ref(const float *a, const float *b, const float *bias, double beta,
                          const float *c0, int64_t M, int64_t N, int64_t K, bool ta, bool tb)
{
    double *c = ot_doubles((size_t)(M * N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = bias ? bias[j] : 0.0;
            for (int64_t k = 0; k < K; k++)
                s += at(a, ta, M, K, i, k) * at(b, tb, K, N, k, j);
            c[i * N + j] = s + (beta != 0.0 ? beta * c0[i * N + j] : 0.0);
        }
    return c;
}

static void layernorm_forward_ref(double *out, double *mean, double *rstd, const float *x,
                                  const float *w, const float *b, int64_t N, int64_t C)
{
    for (int64_t n = 0; n < N; n++) {
        const float *r = x + n * C;
        double m = 0.0, v = 0.0;
        for (int64_t i = 0; i < C; i++)
            m += r[i];
        m /= (double)C;
        for (int64_t i = 0; i < C; i++)
            v += (r[i] - m) * (r[i] - m);
        double s = 1.0 / sqrt(v / (double)C + LN_EPS);
        for (int64_t i = 0; i < C; i++)
            out[n * C + i] = (r[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* dinp, dw, db += the gradients given dout, with the op's saved mean and rstd. */
static void layernorm_backward_ref(double *dinp, double *dw, double *db, const float *dout,
                                   const float *x, const float *w, const float *mean, const float *rstd,
                                   int64_t N, int64_t C)
{
    for (int64_t n = 0; n < N; n++) {
        const float *r = x + n * C, *g = dout + n * C;
        double s = rstd[n], dmean = 0.0, dnorm_mean = 0.0;
        for (int64_t i = 0; i < C; i++) {
            double norm = (r[i] - mean[n]) * s;
            dmean += (double)w[i] * g[i];
            dnorm_mean += (double)w[i] * g[i] * norm;
            dw[i] += norm * g[i];
            db[i] += g[i];
        }
        dmean /= (double)C;
        dnorm_mean /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double norm = (r[i] - mean[n]) * s;
            dinp[n * C + i] += ((double)w[i] * g[i] - dmean - norm * dnorm_mean) * s;
        }
    }
}

typedef struct att_dims {
    int64_t B, T, NH, HS;
} att_dims;

/* Row t of q, k or v (part 0, 1, 2) of head h in batch b of qkv (B, T, 3C). */
static const float *qkv_row(const float *qkv, att_dims a, int part, int64_t b, int64_t t, int64_t h)
{
    int64_t C = a.NH * a.HS;
    return qkv + (b * a.T + t) * 3 * C + part * C + h * a.HS;
}

/* att = causal softmax(q k^T / sqrt(HS)), out = att v, per (b, h). */
static void attention_forward_ref(double *out, double *att, const float *qkv, att_dims a)
{
    int64_t T = a.T, HS = a.HS, C = a.NH * HS;
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *q = qkv_row(qkv, a, 0, b, t, h);
                double *p = att + ((b * a.NH + h) * T + t) * T, mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    const float *k = qkv_row(qkv, a, 1, b, j, h);
                    double s = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        s += (double)q[i] * k[i];
                    p[j] = s / sqrt((double)HS);
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j < T; j++) {
                    p[j] = j <= t ? exp(p[j] - mx) : 0.0;
                    sum += p[j];
                }
                double *o = out + (b * T + t) * C + h * HS;
                for (int64_t i = 0; i < HS; i++)
                    o[i] = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    p[j] /= sum;
                    const float *v = qkv_row(qkv, a, 2, b, j, h);
                    for (int64_t i = 0; i < HS; i++)
                        o[i] += p[j] * v[i];
                }
            }
}

/* dqkv given dout, qkv and the saved probabilities att: datt = dout v^T, dv = att^T dout,
 * dscores = att * (datt - rowsum(att * datt)), dq = dscores k / sqrt(HS), dk = dscores^T q / sqrt(HS). */
static void attention_backward_ref(double *dqkv, const float *dout, const float *qkv, const float *att,
                                   att_dims a)
{
    int64_t T = a.T, HS = a.HS, C = a.NH * HS;
    double scale = 1.0 / sqrt((double)HS), *ds = ot_doubles((size_t)(T * T));
    for (size_t i = 0; i < (size_t)(a.B * T * 3 * C); i++)
        dqkv[i] = 0.0;
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.NH; h++) {
            const float *p = att + (b * a.NH + h) * T * T;
            for (int64_t t = 0; t < T; t++) {
                const float *g = dout + (b * T + t) * C + h * HS;
                double dot = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    const float *v = qkv_row(qkv, a, 2, b, j, h);
                    double dp = 0.0;
                    for (int64_t i = 0; i < HS; i++) {
                        dp += (double)g[i] * v[i];
                        dqkv[(b * T + j) * 3 * C + 2 * C + h * HS + i] += (double)p[t * T + j] * g[i];
                    }
                    ds[t * T + j] = dp;
                    dot += p[t * T + j] * dp;
                }
                for (int64_t j = 0; j <= t; j++)
                    ds[t * T + j] = p[t * T + j] * (ds[t * T + j] - dot);
            }
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j <= t; j++)
                    for (int64_t i = 0; i < HS; i++) {
                        double s = ds[t * T + j] * scale;
                        dqkv[(b * T + t) * 3 * C + h * HS + i] += s * qkv_row(qkv, a, 1, b, j, h)[i];
                        dqkv[(b * T + j) * 3 * C + C + h * HS + i] += s * qkv_row(qkv, a, 0, b, t, h)[i];
                    }
        }
}

/* GELU's tanh form 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), and its derivative
 * 0.5 (1 + t) + 0.5 x (1 - t^2) u', evaluated through the identities 0.5 (1 + tanh(u)) = s =
 * 1 / (1 + e), e = exp(-2u), and 1 - t^2 = 4 s (1 - s) = 4 e s^2: 1 + tanh(u) itself cancels for
 * x < -5, even in double, leaving finite differences of gelu there ~10% wrong. */
static double gelu_d(double x)
{
    double u = sqrt(2.0 / PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}

static double gelu_grad_d(double x)
{
    double u = sqrt(2.0 / PI) * (x + 0.044715 * x * x * x), e = exp(-2.0 * u), s = 1.0 / (1.0 + e);
    return s + 2.0 * x * e * s * s * sqrt(2.0 / PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

/* ---- element-wise ops and reductions ---- */

Test(ops_bf16, add_axpy_scale)
{
    tri_device *d = ot_device(1);
    const int64_t n = 1001;
    const float alpha = -0.7f, s = 1.3f;
    float *a = ot_bf16_uniform((size_t)n, -1.0f, 1.0f, 40),
          *b = ot_bf16_uniform((size_t)n, -1.0f, 1.0f, 41);
    double *want = ot_doubles((size_t)n);
    tri_tensor ta = ot_put_bf16(d, ot_v1(n), a), tb = ot_put_bf16(d, ot_v1(n), b),
               out = ot_put_bf16(d, ot_m2(7, 143), NULL);

    for (int64_t i = 0; i < n; i++)
        want[i] = (double)a[i] + b[i];
    cr_assert_eq(tri_op_add(d, out, ta, tb), TRI_OK);
    uint16_t *sum = ot_read_bits(d, out);
    cr_assert(within_ulps("bf16 add", ot_read(d, out), want, (size_t)n, ULP_TOL));
    cr_assert_eq(tri_op_add(d, ta, ta, tb), TRI_OK); /* out aliases a */
    cr_assert_arr_eq(ot_read_bits(d, ta), sum, (size_t)n * 2, "add with out = a differs");

    for (int64_t i = 0; i < n; i++)
        want[i] = (double)b[i] + (double)alpha * a[i];
    tri_tensor y = ot_put_bf16(d, ot_v1(n), b), x = ot_put_bf16(d, ot_v1(n), a);
    cr_assert_eq(tri_op_axpy(d, y, alpha, x), TRI_OK);
    cr_assert(within_ulps("bf16 axpy", ot_read(d, y), want, (size_t)n, ULP_TOL));

    for (int64_t i = 0; i < n; i++)
        want[i] = (double)a[i] * s;
    cr_assert_eq(tri_op_scale(d, x, s), TRI_OK);
    cr_assert(within_ulps("bf16 scale", ot_read(d, x), want, (size_t)n, ULP_TOL));
}

/* bf16 inputs, f32 outputs (+=): the sum of squares of the bf16 values to fp32 precision, and the
 * count of bf16 NaN and Inf patterns. */
Test(ops_bf16, sum_squares_and_count_nonfinite)
{
    tri_device *d = ot_device(1);
    const int64_t n = 10007;
    float *x = ot_bf16_uniform((size_t)n, -2.0f, 2.0f, 50);
    double want = 0.5;
    for (int64_t i = 0; i < n; i++)
        want += (double)x[i] * x[i];
    float init = 0.5f, got;
    tri_tensor tx = ot_put_bf16(d, ot_v1(n), x), out = ot_put_f32(d, ot_v1(1), &init);
    cr_assert_eq(tri_op_sum_squares(d, out, tx), TRI_OK);
    ot_download(d, &got, out);
    cr_assert(ot_close("bf16 sum_squares (+= f32)", &got, &want, 1, 0.0, 2e-7));

    uint16_t *bits = (uint16_t *)ot_floats((size_t)n);
    for (int64_t i = 0; i < n; i++)
        bits[i] = tri_float_to_bf16(x[i]);
    bits[3] = 0x7f80;    /* +Inf */
    bits[70] = 0xff80;   /* -Inf */
    bits[500] = 0xffc0;  /* a quiet NaN */
    bits[9000] = 0x7f81; /* a NaN whose payload is only the lowest bit */
    bits[9001] = 0x7f7f; /* the largest finite bf16 */
    float two = 2.0f;
    tx = ot_tensor(d, tri_tensor_1d(NULL, TRI_BF16, n), bits);
    out = ot_put_f32(d, ot_v1(1), &two);
    cr_assert_eq(tri_op_count_nonfinite(d, out, tx), TRI_OK);
    ot_download(d, &got, out);
    cr_assert_eq(got, 6.0f, "count_nonfinite of bf16: %g, want 2 + 4", (double)got);
}

/* ---- matmul ---- */

typedef struct mm_shape {
    int64_t M, N, K;
    bool ta, tb;
} mm_shape;

static tri_tensor a_shape(mm_shape s)
{
    return s.ta ? ot_m2(s.K, s.M) : ot_m2(s.M, s.K);
}

static tri_tensor b_shape(mm_shape s)
{
    return s.tb ? ot_m2(s.N, s.K) : ot_m2(s.K, s.N);
}

/* c(M,N) in c_dtype = op(a) op(b) [+ bias] [+ beta c0] with a and b in ab_dtype: the device result
 * and its fp64 reference. */
static float *run_matmul(tri_device *d, mm_shape s, tri_dtype ab_dtype, tri_dtype c_dtype,
                         bool with_bias, float beta, uint64_t seed, double **want)
{
    float *a = ot_bf16_uniform((size_t)(s.M * s.K), -1.0f, 1.0f, seed);
    float *b = ot_bf16_uniform((size_t)(s.K * s.N), -1.0f, 1.0f, seed + 1);
    float *bias = with_bias ? ot_bf16_uniform((size_t)s.N, -1.0f, 1.0f, seed + 2) : NULL;
    float *c0 = ot_bf16_uniform((size_t)(s.M * s.N), -4.0f, 4.0f, seed + 3);
    tri_tensor ta = ot_tensor_as(d, ab_dtype, a_shape(s), a),
               tb = ot_tensor_as(d, ab_dtype, b_shape(s), b);
    tri_tensor tbias = with_bias ? ot_tensor_as(d, c_dtype, ot_v1(s.N), bias) : tri_tensor_none();
    tri_tensor tc = ot_tensor_as(d, c_dtype, ot_m2(s.M, s.N), beta != 0.0f ? c0 : NULL);
    cr_assert_eq(tri_op_matmul(d, tc, ta, tb, tbias, s.ta, s.tb, beta), TRI_OK, "%s",
                 tri_error_message());
    *want = matmul_ref(a, b, bias, beta, c0, s.M, s.N, s.K, s.ta, s.tb);
    return ot_read(d, tc);
}

/* The four transpose combinations, each plain, with a bias, and accumulating (beta 1). */
Test(ops_bf16, matmul_all_transposes_bias_and_accumulate)
{
    static const char *mode_name[3] = {"", "+ bias", "beta 1"};
    tri_device *d = ot_device(1);
    for (int t = 0; t < 4; t++)
        for (int mode = 0; mode < 3; mode++) {
            mm_shape s = {7, 9, 67, t & 1, (t >> 1) & 1};
            double *want;
            float *got = run_matmul(d, s, TRI_BF16, TRI_BF16, mode == 1, mode == 2 ? 1.0f : 0.0f,
                                    (uint64_t)(100 + 10 * (3 * t + mode)), &want);
            char what[96];
            snprintf(what, sizeof what, "bf16 matmul%s%s %s", s.ta ? " a^T" : "", s.tb ? " b^T" : "",
                     mode_name[mode]);
            cr_assert(within_norm(what, got, want, (size_t)(s.M * s.N), NORM_TOL));
        }
}

/* dbias(OC) += column sums of dout(N, OC); OC > 64 spans two of the CPU backend's column blocks. */
Test(ops_bf16, bias_backward)
{
    tri_device *d = ot_device(1);
    const int64_t N = 67, OC = 70;
    float *dout = ot_bf16_uniform((size_t)(N * OC), -1.0f, 1.0f, 200);
    float *db0 = ot_bf16_uniform((size_t)OC, -1.0f, 1.0f, 201);
    double *want = ot_widen(db0, (size_t)OC);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < OC; j++)
            want[j] += dout[n * OC + j];
    tri_tensor tdb = ot_put_bf16(d, ot_v1(OC), db0);
    cr_assert_eq(tri_op_bias_backward(d, tdb, ot_put_bf16(d, ot_m2(N, OC), dout)), TRI_OK);
    cr_assert(within_norm("bf16 bias_backward (+=)", ot_read(d, tdb), want, (size_t)OC, NORM_TOL));
}

/* ---- layers ---- */

/* Rows with a mean far from 0 (inp in [1, 5)), C = 67. */
Test(ops_bf16, layernorm_forward_backward)
{
    tri_device *d = ot_device(1);
    const int64_t N = 10, C = 67;
    size_t nx = (size_t)(N * C);
    float *inp = ot_bf16_uniform(nx, 1.0f, 5.0f, 300), *w = ot_bf16_uniform((size_t)C, -1.5f, 1.5f, 301);
    float *b = ot_bf16_uniform((size_t)C, -1.0f, 1.0f, 302),
          *dout = ot_bf16_uniform(nx, -1.0f, 1.0f, 303);
    float *dinp0 = ot_bf16_uniform(nx, -1.0f, 1.0f, 304),
          *dw0 = ot_bf16_uniform((size_t)C, -1.0f, 1.0f, 305);
    float *db0 = ot_bf16_uniform((size_t)C, -1.0f, 1.0f, 306);
    tri_tensor tinp = ot_put_bf16(d, ot_m2(N, C), inp), tw = ot_put_bf16(d, ot_v1(C), w), tb = ot_put_bf16(d, ot_v1(C), b);
    tri_tensor tout = ot_put_bf16(d, ot_m2(N, C), NULL);
    tri_tensor tmean = ot_put_f32(d, ot_v1(N), NULL), trstd = ot_put_f32(d, ot_v1(N), NULL);
    cr_assert_eq(tri_op_layernorm_forward(d, tout, tmean, trstd, tinp, tw, tb), TRI_OK);
    double *out = ot_doubles(nx), *mean = ot_doubles((size_t)N), *rstd = ot_doubles((size_t)N);
    layernorm_forward_ref(out, mean, rstd, inp, w, b, N, C);
    cr_assert(within_norm("bf16 layernorm fwd out", ot_read(d, tout), out, nx, NORM_TOL));
    float *gmean = ot_read(d, tmean), *grstd = ot_read(d, trstd);
    cr_assert(ot_close("bf16 layernorm fwd mean (f32)", gmean, mean, (size_t)N, FLOOR, F32_TOL));
    cr_assert(ot_close("bf16 layernorm fwd rstd (f32)", grstd, rstd, (size_t)N, FLOOR, F32_TOL));

    tri_tensor tdinp = ot_put_bf16(d, ot_m2(N, C), dinp0), tdw = ot_put_bf16(d, ot_v1(C), dw0),
               tdb = ot_put_bf16(d, ot_v1(C), db0);
    cr_assert_eq(tri_op_layernorm_backward(d, tdinp, tdw, tdb, ot_put_bf16(d, ot_m2(N, C), dout), tinp, tw,
                                           tmean, trstd),
                 TRI_OK);
    double *dinp = ot_widen(dinp0, nx), *dw = ot_widen(dw0, (size_t)C), *db = ot_widen(db0, (size_t)C);
    layernorm_backward_ref(dinp, dw, db, dout, inp, w, gmean, grstd, N, C);
    cr_assert(within_norm("bf16 layernorm bwd dinp (+=)", ot_read(d, tdinp), dinp, nx, NORM_TOL));
    cr_assert(within_norm("bf16 layernorm bwd dw (+=)", ot_read(d, tdw), dw, (size_t)C, NORM_TOL));
    cr_assert(within_norm("bf16 layernorm bwd db (+=)", ot_read(d, tdb), db, (size_t)C, NORM_TOL));
}

/* Compares dq, dk and dv separately (each has its own formula and scale). */
static void expect_dqkv(const float *got, const double *want, att_dims a)
{
    static const char *name[3] = {"bf16 attention bwd dq", "bf16 attention bwd dk",
                                  "bf16 attention bwd dv"};
    int64_t C = a.NH * a.HS, rows = a.B * a.T;
    for (int part = 0; part < 3; part++) {
        float *g = ot_floats((size_t)(rows * C));
        double *w = ot_doubles((size_t)(rows * C));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < C; i++) {
                g[r * C + i] = got[r * 3 * C + part * C + i];
                w[r * C + i] = want[r * 3 * C + part * C + i];
            }
        cr_assert(within_norm(name[part], g, w, (size_t)(rows * C), NORM_TOL));
    }
}

Test(ops_bf16, attention_forward_backward)
{
    tri_device *d = ot_device(1);
    att_dims a = {2, 5, 3, 4};
    int64_t C = a.NH * a.HS;
    size_t nqkv = (size_t)(a.B * a.T * 3 * C), nout = (size_t)(a.B * a.T * C),
           natt = (size_t)(a.B * a.NH * a.T * a.T);
    float *qkv = ot_bf16_uniform(nqkv, -2.0f, 2.0f, 400),
          *dout = ot_bf16_uniform(nout, -1.0f, 1.0f, 401);
    tri_tensor tqkv = ot_put_bf16(d, tri_tensor_3d(NULL, TRI_F32, a.B, a.T, 3 * C), qkv);
    tri_tensor tout = ot_put_bf16(d, tri_tensor_3d(NULL, TRI_F32, a.B, a.T, C), NULL);
    tri_tensor tatt = ot_put_bf16(d, tri_tensor_4d(NULL, TRI_F32, a.B, a.NH, a.T, a.T), NULL);
    cr_assert_eq(tri_op_attention_forward(d, tout, tatt, tqkv), TRI_OK);
    double *out = ot_doubles(nout), *att = ot_doubles(natt);
    attention_forward_ref(out, att, qkv, a);
    float *gatt = ot_read(d, tatt);
    cr_assert(within_norm("bf16 attention fwd out", ot_read(d, tout), out, nout, NORM_TOL));
    cr_assert(within_norm("bf16 attention fwd att", gatt, att, natt, NORM_TOL));

    /* backward from the saved (bf16) probabilities; dqkv and datt start NaN */
    tri_tensor tdqkv = ot_put_bf16(d, tri_tensor_3d(NULL, TRI_F32, a.B, a.T, 3 * C), NULL);
    tri_tensor tdatt = ot_put_bf16(d, tri_tensor_4d(NULL, TRI_F32, a.B, a.NH, a.T, a.T), NULL);
    tri_tensor tdout = ot_put_bf16(d, tri_tensor_3d(NULL, TRI_F32, a.B, a.T, C), dout);
    cr_assert_eq(tri_op_attention_backward(d, tdqkv, tdatt, tdout, tqkv, tatt), TRI_OK);
    double *dqkv = ot_doubles(nqkv);
    attention_backward_ref(dqkv, dout, qkv, gatt, a);
    expect_dqkv(ot_read(d, tdqkv), dqkv, a);
}

/* Element-wise, so within 1 ulp; in place (dinp aliasing dout) the same bits. */
Test(ops_bf16, gelu_forward_backward)
{
    tri_device *d = ot_device(1);
    const int64_t n = 1001;
    float *x = ot_bf16_uniform((size_t)n, -6.0f, 6.0f, 500),
          *dout = ot_bf16_uniform((size_t)n, -1.0f, 1.0f, 501);
    x[0] = 0.0f;
    double *y = ot_doubles((size_t)n), *dx = ot_doubles((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        y[i] = gelu_d(x[i]);
        dx[i] = gelu_grad_d(x[i]) * dout[i];
    }
    tri_tensor tx = ot_put_bf16(d, ot_v1(n), x), ty = ot_put_bf16(d, ot_v1(n), NULL);
    cr_assert_eq(tri_op_gelu_forward(d, ty, tx), TRI_OK);
    cr_assert(within_ulps("bf16 gelu fwd", ot_read(d, ty), y, (size_t)n, ULP_TOL));

    tri_tensor tdout = ot_put_bf16(d, ot_v1(n), dout), tdx = ot_put_bf16(d, ot_v1(n), NULL);
    cr_assert_eq(tri_op_gelu_backward(d, tdx, tx, tdout), TRI_OK);
    uint16_t *bits = ot_read_bits(d, tdx);
    cr_assert(within_ulps("bf16 gelu bwd", ot_read(d, tdx), dx, (size_t)n, ULP_TOL));
    cr_assert_eq(tri_op_gelu_backward(d, tdout, tx, tdout), TRI_OK);
    cr_assert_arr_eq(ot_read_bits(d, tdout), bits, (size_t)n * 2, "gelu bwd in place differs");
}

/* ---- embeddings ---- */

/* A vocab shard [5, 12): tokens inside it with repeats, and outside it on both sides. */
static const int32_t shard_tokens[14] = {5, 11, 4, 12, 7, 7, 0, 11, 30, 5, 8, 6, 9, 7};

/* Forward is a copy (exact, zero rows outside the shard); backward sums rows (+=). */
Test(ops_bf16, embedding_forward_backward)
{
    tri_device *d = ot_device(1);
    const int64_t N = 14, C = 67, V_l = 7, vocab_start = 5;
    size_t nw = (size_t)(V_l * C), no = (size_t)(N * C);
    float *wte = ot_bf16_uniform(nw, -1.0f, 1.0f, 600), *dout = ot_bf16_uniform(no, -1.0f, 1.0f, 601);
    float *dwte0 = ot_bf16_uniform(nw, -1.0f, 1.0f, 602);
    double *out = ot_doubles(no), *dwte = ot_widen(dwte0, nw);
    for (int64_t n = 0; n < N; n++) {
        int64_t r = shard_tokens[n] - vocab_start;
        for (int64_t j = 0; j < C && r >= 0 && r < V_l; j++) {
            out[n * C + j] = wte[r * C + j];
            dwte[r * C + j] += dout[n * C + j];
        }
    }
    tri_tensor tokens = i32_tensor(d, shard_tokens, N), tout = ot_put_bf16(d, ot_m2(N, C), NULL);
    cr_assert_eq(tri_op_embedding_forward(d, tout, tokens, ot_put_bf16(d, ot_m2(V_l, C), wte), vocab_start),
                 TRI_OK);
    cr_assert(within_ulps("bf16 embedding fwd (a copy)", ot_read(d, tout), out, no, 0));

    tri_tensor tdwte = ot_put_bf16(d, ot_m2(V_l, C), dwte0);
    cr_assert_eq(tri_op_embedding_backward(d, tdwte, ot_put_bf16(d, ot_m2(N, C), dout), tokens, vocab_start),
                 TRI_OK);
    cr_assert(within_norm("bf16 embedding bwd (+=)", ot_read(d, tdwte), dwte, nw, NORM_TOL));
}

/* out row n += wpe row (row0 + n) % T, from row0 = 3 so rows wrap; the backward sums the rows of
 * each position (+=). wpe has more rows than T. */
Test(ops_bf16, position_forward_backward)
{
    tri_device *d = ot_device(1);
    const int64_t N = 12, C = 67, T = 5, P = 8, row0 = 3;
    size_t no = (size_t)(N * C), nw = (size_t)(P * C);
    float *out0 = ot_bf16_uniform(no, -1.0f, 1.0f, 700), *wpe = ot_bf16_uniform(nw, -1.0f, 1.0f, 701);
    float *dout = ot_bf16_uniform(no, -1.0f, 1.0f, 702), *dwpe0 = ot_bf16_uniform(nw, -1.0f, 1.0f, 703);
    double *out = ot_widen(out0, no), *dwpe = ot_widen(dwpe0, nw);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < C; j++) {
            out[n * C + j] += wpe[((row0 + n) % T) * C + j];
            dwpe[((row0 + n) % T) * C + j] += dout[n * C + j];
        }
    tri_tensor tout = ot_put_bf16(d, ot_m2(N, C), out0), tdwpe = ot_put_bf16(d, ot_m2(P, C), dwpe0);
    cr_assert_eq(tri_op_position_forward(d, tout, ot_put_bf16(d, ot_m2(P, C), wpe), T, row0, 1, 0), TRI_OK);
    cr_assert(within_ulps("bf16 position fwd (+=)", ot_read(d, tout), out, no, ULP_TOL));
    cr_assert_eq(tri_op_position_backward(d, tdwpe, ot_put_bf16(d, ot_m2(N, C), dout), T, row0, 1, 0), TRI_OK);
    cr_assert(within_norm("bf16 position bwd (+=)", ot_read(d, tdwpe), dwpe, nw, NORM_TOL));
}

/* ---- cross-entropy ---- */

/* A shard of V_l = 13 columns from vocab id 4, V_valid = 11 (two padded columns at +50, which must
 * not count). maxes are selections of bf16 values (exact), stats f32 sums (fp32 tolerance), dlogits
 * bf16 (element-wise: one value per logit from the row's f32 statistics); padded columns exactly 0;
 * in place (dlogits aliasing logits) the same bits. */
Test(ops_bf16, cross_entropy_pieces)
{
    tri_device *d = ot_device(1);
    const int64_t N = 10, V_l = 13, V_valid = 11, vocab_start = 4;
    const float dloss = 0.37f;
    size_t nl = (size_t)(N * V_l);
    float *logits = ot_bf16_uniform(nl, -4.0f, 4.0f, 800);
    int32_t *targets = ot_ints((size_t)N);
    for (int64_t n = 0; n < N; n++) {
        /* some below vocab_start, some past the valid columns */
        targets[n] = (int32_t)((5 * n + 1) % 17);
        for (int64_t j = V_valid; j < V_l; j++)
            logits[n * V_l + j] = 50.0f;
    }
    tri_tensor tl = ot_put_bf16(d, ot_m2(N, V_l), logits), tt = i32_tensor(d, targets, N);
    tri_tensor tmax = ot_put_f32(d, ot_v1(N), NULL), tstats = ot_put_f32(d, ot_m2(N, 2), NULL);
    tri_tensor tdl = ot_put_bf16(d, ot_m2(N, V_l), NULL);
    cr_assert_eq(tri_op_ce_row_max(d, tmax, tl, V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_sumexp_target(d, tstats, tl, tmax, tt, vocab_start, V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_backward(d, tdl, tl, tmax, tstats, tt, vocab_start, V_valid, dloss), TRI_OK);
    float *maxes = ot_read(d, tmax), *stats = ot_read(d, tstats);

    double *sumexp = ot_doubles((size_t)N), *dl = ot_doubles(nl);
    for (int64_t n = 0; n < N; n++) {
        const float *l = logits + n * V_l;
        float mx = -FLT_MAX;
        for (int64_t j = 0; j < V_valid; j++)
            mx = l[j] > mx ? l[j] : mx;
        cr_assert_eq(maxes[n], mx, "row %lld: max %g, want %g", (long long)n, (double)maxes[n],
                     (double)mx);
        for (int64_t j = 0; j < V_valid; j++)
            sumexp[n] += exp((double)l[j] - mx);
        int64_t r = targets[n] - vocab_start;
        bool in_shard = r >= 0 && r < V_valid;
        cr_assert_eq(stats[2 * n + 1], in_shard ? l[r] : 0.0f, "row %lld: target logit", (long long)n);
        for (int64_t j = 0; j < V_valid; j++) /* from the op's own f32 statistics (its inputs) */
            dl[n * V_l + j] =
                dloss * (exp((double)l[j] - maxes[n]) / stats[2 * n] - (j == r ? 1.0 : 0.0));
    }
    float *s0 = ot_floats((size_t)N);
    for (int64_t n = 0; n < N; n++)
        s0[n] = stats[2 * n];
    cr_assert(ot_close("bf16 ce sumexp (f32)", s0, sumexp, (size_t)N, 0.0, F32_TOL));
    uint16_t *bits = ot_read_bits(d, tdl);
    cr_assert(within_ulps("bf16 ce dlogits", ot_read(d, tdl), dl, nl, ULP_TOL));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = V_valid; j < V_l; j++)
            cr_assert_eq(bits[n * V_l + j], 0, "padded column %lld of row %lld", (long long)j,
                         (long long)n);

    cr_assert_eq(tri_op_ce_backward(d, tl, tl, tmax, tstats, tt, vocab_start, V_valid, dloss), TRI_OK);
    cr_assert_arr_eq(ot_read_bits(d, tl), bits, nl * 2, "ce backward in place differs");
}

/* ---- mixed precision: bf16 activations, fp32 gradient accumulators ---- */

/* The weight gradient dw(OC, C) += dout^T(OC, N) inp(N, C) from bf16 activations into an fp32
 * accumulator: fp32 accuracy (a bf16 rounding of c would cost ~2^-9 relative). */
Test(ops_bf16, mixed_matmul_bf16_inputs_into_f32)
{
    tri_device *d = ot_device(1);
    mm_shape s = {9, 7, 67, true, false};
    double *want;
    float *got = run_matmul(d, s, TRI_BF16, TRI_F32, false, 1.0f, 900, &want);
    cr_assert(ot_close("matmul bf16 a^T b += f32 c", got, want, (size_t)(s.M * s.N), FLOOR, F32_TOL));
    s = (mm_shape){7, 9, 67, false, true};
    got = run_matmul(d, s, TRI_BF16, TRI_F32, true, 0.0f, 910, &want);
    cr_assert(ot_close("matmul bf16 a b^T + f32 bias -> f32 c", got, want, (size_t)(s.M * s.N), FLOOR,
                       F32_TOL));
}

/* bf16 dinp, dout, inp and w; fp32 dw and db keep fp32 accuracy. */
Test(ops_bf16, mixed_layernorm_backward_f32_param_grads)
{
    tri_device *d = ot_device(1);
    const int64_t N = 10, C = 67;
    size_t nx = (size_t)(N * C);
    float *inp = ot_bf16_uniform(nx, 1.0f, 5.0f, 1000),
          *w = ot_bf16_uniform((size_t)C, -1.5f, 1.5f, 1001);
    float *dout = ot_bf16_uniform(nx, -1.0f, 1.0f, 1002),
          *dinp0 = ot_bf16_uniform(nx, -1.0f, 1.0f, 1003);
    float *dw0 = ot_uniform((size_t)C, -1.0f, 1.0f, 1004),
          *db0 = ot_uniform((size_t)C, -1.0f, 1.0f, 1005);
    float *mean = ot_floats((size_t)N), *rstd = ot_floats((size_t)N);
    /* any saved statistics will do: the backward takes them as given */
    for (int64_t n = 0; n < N; n++) {
        mean[n] = 3.0f + 0.01f * (float)n;
        rstd[n] = 0.9f - 0.02f * (float)n;
    }
    tri_tensor tdinp = ot_put_bf16(d, ot_m2(N, C), dinp0), tdw = ot_put_f32(d, ot_v1(C), dw0),
               tdb = ot_put_f32(d, ot_v1(C), db0);
    cr_assert_eq(tri_op_layernorm_backward(d, tdinp, tdw, tdb, ot_put_bf16(d, ot_m2(N, C), dout),
                                           ot_put_bf16(d, ot_m2(N, C), inp), ot_put_bf16(d, ot_v1(C), w),
                                           ot_put_f32(d, ot_v1(N), mean), ot_put_f32(d, ot_v1(N), rstd)),
                 TRI_OK, "%s", tri_error_message());
    double *dinp = ot_widen(dinp0, nx), *dw = ot_widen(dw0, (size_t)C), *db = ot_widen(db0, (size_t)C);
    layernorm_backward_ref(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    cr_assert(within_norm("layernorm bwd dinp bf16 (+=)", ot_read(d, tdinp), dinp, nx, NORM_TOL));
    cr_assert(
        ot_close("layernorm bwd dw f32 from bf16 (+=)", ot_read(d, tdw), dw, (size_t)C, FLOOR, F32_TOL));
    cr_assert(
        ot_close("layernorm bwd db f32 from bf16 (+=)", ot_read(d, tdb), db, (size_t)C, FLOOR, F32_TOL));
}

/* dwte fp32 += rows of a bf16 dout: sums of up to four O(1) values in fp32. */
Test(ops_bf16, mixed_embedding_backward_into_f32)
{
    tri_device *d = ot_device(1);
    const int64_t N = 14, C = 67, V_l = 7, vocab_start = 5;
    size_t nw = (size_t)(V_l * C);
    float *dout = ot_bf16_uniform((size_t)(N * C), -1.0f, 1.0f, 1100),
          *dwte0 = ot_uniform(nw, -1.0f, 1.0f, 1101);
    double *want = ot_widen(dwte0, nw);
    for (int64_t n = 0; n < N; n++) {
        int64_t r = shard_tokens[n] - vocab_start;
        for (int64_t j = 0; j < C && r >= 0 && r < V_l; j++)
            want[r * C + j] += dout[n * C + j];
    }
    tri_tensor tdwte = ot_put_f32(d, ot_m2(V_l, C), dwte0);
    cr_assert_eq(tri_op_embedding_backward(d, tdwte, ot_put_bf16(d, ot_m2(N, C), dout),
                                           i32_tensor(d, shard_tokens, N), vocab_start),
                 TRI_OK);
    cr_assert(
        ot_close("embedding bwd f32 dwte from bf16 (+=)", ot_read(d, tdwte), want, nw, FLOOR, F32_TOL));
}

/* An fp32 sum of two bf16 tensors is the fp32 sum of their values, bit for bit. */
Test(ops_bf16, mixed_add_f32_out)
{
    tri_device *d = ot_device(1);
    const int64_t n = 1001;
    float *a = ot_bf16_uniform((size_t)n, -1.0f, 1.0f, 1200),
          *b = ot_bf16_uniform((size_t)n, -1.0f, 1.0f, 1201);
    b[0] = 0x1p-20f; /* the exact sum a[0] + 2^-20 needs more bits than bf16 has */
    float *want = ot_floats((size_t)n);
    for (int64_t i = 0; i < n; i++)
        want[i] = a[i] + b[i];
    tri_tensor out = ot_put_f32(d, ot_v1(n), NULL);
    cr_assert_eq(tri_op_add(d, out, ot_put_bf16(d, ot_v1(n), a), ot_put_bf16(d, ot_v1(n), b)), TRI_OK);
    cr_assert(ot_same_bits("add f32 = bf16 + bf16", ot_read(d, out), want, (size_t)n));
}

/* ---- finite differences ---- */

/* gelu_backward in bf16 against central differences of the fp64 GELU at the same bf16 inputs,
 * per element ((gelu(x + h) - gelu(x - h)) / 2h, exact to ~1e-9 relative here): within 1 ulp, so
 * the bf16 gradient is the true one rounded, as the fp32 op's is to fp32 precision. */
Test(ops_bf16, gelu_backward_against_finite_differences)
{
    tri_device *d = ot_device(1);
    const int64_t n = 1001;
    float *x = ot_bf16_uniform((size_t)n, -6.0f, 6.0f, 1400),
          *dout = ot_bf16_uniform((size_t)n, -1.0f, 1.0f, 1401);
    double *want = ot_doubles((size_t)n);
    for (int64_t i = 0; i < n; i++)
        want[i] = (gelu_d(x[i] + OT_FD_H) - gelu_d(x[i] - OT_FD_H)) / (2.0 * OT_FD_H) * dout[i];
    tri_tensor tdx = ot_put_bf16(d, ot_v1(n), NULL);
    cr_assert_eq(tri_op_gelu_backward(d, tdx, ot_put_bf16(d, ot_v1(n), x), ot_put_bf16(d, ot_v1(n), dout)), TRI_OK);
    cr_assert(
        within_ulps("bf16 gelu bwd vs finite differences", ot_read(d, tdx), want, (size_t)n, ULP_TOL));
}
