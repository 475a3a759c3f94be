/* tests/test_ops_layers.c - layernorm, causal attention and GELU (alone and after a bias add) on the
 * CPU backend.
 *
 * The three non-linear layer ops of a GPT block. Each forward is compared with a naive fp64 loop
 * written here from the op's definition (layernorm: Ba et al. 2016 with eps 1e-5; attention:
 * softmax(q k^T / sqrt(HS)) v with a causal mask; GELU: the tanh form), and each backward with
 * central finite differences of that loop for the loss L = sum(out * R), R fixed and random. The
 * gradient contracts are checked too: layernorm's dinp, dw and db accumulate (+=); attention's
 * dqkv is overwritten (it starts full of NaN) and datt is scratch; gelu_backward may run in place.
 * Shapes are odd on purpose: C = 7 and 67, T = 5, NH = 3 with HS = 4.
 *
 * Tolerances (errors relative, with a floor of 1/10 of the tensor's RMS for elements that cancel to
 * near zero; see ot_close). Forward 1e-5; measured at most 5.1e-6 (layernorm, whose output
 * (x - mean) rstd w + b cancels against b; attention 9.6e-7, gelu 3.0e-7). Backward 1e-4 against
 * fp64 finite differences, which are exact to ~1e-9, so the margin covers fp32 rounding of the
 * analytic backward alone (it also starts from the forward's fp32 mean/rstd and probabilities):
 * measured at most 3.1e-6 for layernorm, 2.2e-6 for attention, and 1.2e-5 for gelu, whose
 * derivative for x < -4 is tiny and computed from 1 - tanh^2 with tanh near -1. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device/device.h"
#include "engine/device/ops/activations_math.h"
#include "tests/opsutil.h"

TestSuite(ops_layers, .fini = ot_teardown);

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define FLOOR 0.1
#define LN_EPS 1e-5
#define PI 3.14159265358979323846

/* ---- layernorm ---- */

typedef struct ln_problem {
    int64_t N, C;
    double *inp, *w, *b;
    const double *R;
    double *out, *mean, *rstd;
} ln_problem;

/* out = (inp - mean) / sqrt(var + eps) * w + b per row, var the biased variance. */
static void ln_ref(ln_problem *p)
{
    for (int64_t n = 0; n < p->N; n++) {
        const double *x = p->inp + n * p->C;
        double m = 0.0, v = 0.0;
        for (int64_t i = 0; i < p->C; i++)
            m += x[i];
        m /= (double)p->C;
        for (int64_t i = 0; i < p->C; i++)
            v += (x[i] - m) * (x[i] - m);
        v /= (double)p->C;
        double s = 1.0 / sqrt(v + LN_EPS);
        for (int64_t i = 0; i < p->C; i++)
            p->out[n * p->C + i] = (x[i] - m) * s * p->w[i] + p->b[i];
        p->mean[n] = m;
        p->rstd[n] = s;
    }
}

static double ln_loss(void *ctx)
{
    ln_problem *p = ctx;
    ln_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->N * p->C));
}

/* inp uniform in [lo, hi) */
static void check_layernorm(int64_t B, int64_t T, int64_t C, float lo, float hi, uint64_t seed)
{
    tri_device *d = ot_device(1);
    int64_t N = B * T;
    size_t nx = (size_t)(N * C);
    float *inp = ot_uniform(nx, lo, hi, seed), *w = ot_uniform((size_t)C, -1.5f, 1.5f, seed + 1);
    float *b = ot_uniform((size_t)C, -1.0f, 1.0f, seed + 2),
          *R = ot_uniform(nx, -1.0f, 1.0f, seed + 3);
    float *dinp0 = ot_uniform(nx, -1.0f, 1.0f, seed + 4),
          *dw0 = ot_uniform((size_t)C, -1.0f, 1.0f, seed + 5);
    float *db0 = ot_uniform((size_t)C, -1.0f, 1.0f, seed + 6);
    ln_problem p = {N, C, ot_widen(inp, nx), ot_widen(w, (size_t)C), ot_widen(b, (size_t)C),
                    ot_widen(R, nx), ot_doubles(nx), ot_doubles((size_t)N), ot_doubles((size_t)N)};

    tri_tensor x3 = tri_tensor_3d(NULL, TRI_F32, B, T, C), c1 = tri_tensor_1d(NULL, TRI_F32, C);
    tri_tensor n1 = tri_tensor_1d(NULL, TRI_F32, N);
    tri_tensor tinp = ot_tensor(d, x3, inp), tw = ot_tensor(d, c1, w), tb = ot_tensor(d, c1, b);
    tri_tensor tout = ot_tensor(d, x3, NULL), tmean = ot_tensor(d, n1, NULL),
               trstd = ot_tensor(d, n1, NULL);
    cr_assert_eq(tri_op_layernorm_forward(d, tout, tmean, trstd, tinp, tw, tb), TRI_OK);
    ln_ref(&p);
    char what[96], tag[32];
    snprintf(tag, sizeof tag, "C%lld var %s", (long long)C, hi < 1.0f ? "< eps" : "~1");
    snprintf(what, sizeof what, "layernorm fwd out %s", tag);
    cr_assert(ot_close(what, ot_read(d, tout), p.out, nx, FLOOR, FWD_TOL));
    snprintf(what, sizeof what, "layernorm fwd mean %s", tag);
    cr_assert(ot_close(what, ot_read(d, tmean), p.mean, (size_t)N, FLOOR, FWD_TOL));
    snprintf(what, sizeof what, "layernorm fwd rstd %s", tag);
    cr_assert(ot_close(what, ot_read(d, trstd), p.rstd, (size_t)N, FLOOR, FWD_TOL));

    tri_tensor tdout = ot_tensor(d, x3, R), tdinp = ot_tensor(d, x3, dinp0);
    tri_tensor tdw = ot_tensor(d, c1, dw0), tdb = ot_tensor(d, c1, db0);
    cr_assert_eq(tri_op_layernorm_backward(d, tdinp, tdw, tdb, tdout, tinp, tw, tmean, trstd),
                 TRI_OK);
    double *g_inp = ot_doubles(nx), *g_w = ot_doubles((size_t)C), *g_b = ot_doubles((size_t)C);
    ot_fd_grad(g_inp, p.inp, nx, ln_loss, &p);
    ot_fd_grad(g_w, p.w, (size_t)C, ln_loss, &p);
    ot_fd_grad(g_b, p.b, (size_t)C, ln_loss, &p);
    /* the op accumulates: expected = the values already there + the gradient */
    for (size_t i = 0; i < nx; i++)
        g_inp[i] += dinp0[i];
    for (int64_t i = 0; i < C; i++) {
        g_w[i] += dw0[i];
        g_b[i] += db0[i];
    }
    snprintf(what, sizeof what, "layernorm bwd dinp (+=) %s", tag);
    cr_assert(ot_close(what, ot_read(d, tdinp), g_inp, nx, FLOOR, BWD_TOL));
    snprintf(what, sizeof what, "layernorm bwd dw (+=) %s", tag);
    cr_assert(ot_close(what, ot_read(d, tdw), g_w, (size_t)C, FLOOR, BWD_TOL));
    snprintf(what, sizeof what, "layernorm bwd db (+=) %s", tag);
    cr_assert(ot_close(what, ot_read(d, tdb), g_b, (size_t)C, FLOOR, BWD_TOL));
}

Test(ops_layers, layernorm_forward_backward_accumulate)
{
    /* rows with a mean far from 0 (about 3), so the mean subtraction matters */
    check_layernorm(2, 5, 7, 1.0f, 5.0f, 500);
    check_layernorm(1, 3, 67, 1.0f, 5.0f, 510);
    /* rows with variance ~3e-6 < eps = 1e-5, so eps sets the scale (a wrong eps fails here) */
    check_layernorm(2, 5, 7, -3e-3f, 3e-3f, 520);
}

/* ---- attention ---- */

typedef struct att_problem {
    int64_t B, T, NH, HS;
    double *qkv;       /* (B, T, 3C) */
    const double *R;   /* (B, T, C) */
    double *out, *att; /* (B, T, C), (B, NH, T, T) */
} att_problem;

/* For each (b, h, t): p_j = softmax_j<=t(q_t . k_j / sqrt(HS)), out_t = sum_j<=t p_j v_j;
 * att holds p (zero above the diagonal). */
static void att_ref(att_problem *p)
{
    int64_t T = p->T, HS = p->HS, C = p->NH * HS;
    double scale = 1.0 / sqrt((double)HS);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const double *q = p->qkv + (b * T + t) * 3 * C + h * HS;
                double *a = p->att + ((b * p->NH + h) * T + t) * T;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < T; j++) {
                    const double *k = p->qkv + (b * T + j) * 3 * C + C + h * HS;
                    double s = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        s += q[i] * k[i];
                    a[j] = s * scale;
                    if (j <= t && a[j] > mx)
                        mx = a[j];
                }
                for (int64_t j = 0; j < T; j++) {
                    a[j] = j <= t ? exp(a[j] - mx) : 0.0;
                    sum += a[j];
                }
                double *o = p->out + (b * T + t) * C + h * HS;
                for (int64_t i = 0; i < HS; i++)
                    o[i] = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    a[j] /= sum;
                    const double *v = p->qkv + (b * T + j) * 3 * C + 2 * C + h * HS;
                    for (int64_t i = 0; i < HS; i++)
                        o[i] += a[j] * v[i];
                }
            }
}

static double att_loss(void *ctx)
{
    att_problem *p = ctx;
    att_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->B * p->T * p->NH * p->HS));
}

/* Device tensors of one attention problem. */
typedef struct att_tensors {
    tri_tensor qkv, out, att, dout, dqkv, datt;
} att_tensors;

static att_tensors att_alloc(tri_device *d, int64_t B, int64_t T, int64_t NH, int64_t HS)
{
    int64_t C = NH * HS;
    att_tensors a;
    a.qkv = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, 3 * C), NULL);
    a.dqkv = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, 3 * C), NULL);
    a.out = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, C), NULL);
    a.dout = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, C), NULL);
    a.att = ot_tensor(d, tri_tensor_4d(NULL, TRI_F32, B, NH, T, T), NULL);
    a.datt = ot_tensor(d, tri_tensor_4d(NULL, TRI_F32, B, NH, T, T), NULL);
    return a;
}

static float *nans(size_t n)
{
    float *x = ot_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

Test(ops_layers, attention_forward_backward)
{
    tri_device *d = ot_device(1);
    const int64_t B = 2, T = 5, NH = 3, HS = 4, C = NH * HS;
    size_t nqkv = (size_t)(B * T * 3 * C), nout = (size_t)(B * T * C),
           natt = (size_t)(B * NH * T * T);
    /* values in [-2, 2] give scores of a few units: peaked, not uniform, softmax rows */
    float *qkv = ot_uniform(nqkv, -2.0f, 2.0f, 600), *R = ot_uniform(nout, -1.0f, 1.0f, 601);
    att_problem p = {B, T, NH, HS, ot_widen(qkv, nqkv), ot_widen(R, nout), ot_doubles(nout),
                     ot_doubles(natt)};
    att_tensors a = att_alloc(d, B, T, NH, HS);
    cr_assert_eq(tri_device_copy_from_host(d, a.qkv, qkv), TRI_OK);
    cr_assert_eq(tri_device_copy_from_host(d, a.att, nans(natt)), TRI_OK);
    cr_assert_eq(tri_op_attention_forward(d, a.out, a.att, a.qkv), TRI_OK);
    att_ref(&p);
    float *att = ot_read(d, a.att);
    cr_assert(ot_close("attention fwd out", ot_read(d, a.out), p.out, nout, FLOOR, FWD_TOL));
    cr_assert(ot_close("attention fwd att", att, p.att, natt, FLOOR, FWD_TOL));
    for (int64_t r = 0; r < B * NH * T; r++)
        for (int64_t j = r % T + 1; j < T; j++)
            cr_assert_eq(att[r * T + j], 0.0f, "att above the diagonal must be 0");

    /* backward: dqkv is overwritten (starts NaN), datt is scratch (starts NaN) */
    cr_assert_eq(tri_device_copy_from_host(d, a.dout, R), TRI_OK);
    cr_assert_eq(tri_device_copy_from_host(d, a.dqkv, nans(nqkv)), TRI_OK);
    cr_assert_eq(tri_device_copy_from_host(d, a.datt, nans(natt)), TRI_OK);
    cr_assert_eq(tri_op_attention_backward(d, a.dqkv, a.datt, a.dout, a.qkv, a.att), TRI_OK);
    double *g = ot_doubles(nqkv);
    ot_fd_grad(g, p.qkv, nqkv, att_loss, &p);
    float *dqkv = ot_read(d, a.dqkv);
    /* compare the q, k and v parts separately: each has its own formula */
    static const char *part_name[3] = {"attention bwd dq", "attention bwd dk", "attention bwd dv"};
    for (int part = 0; part < 3; part++) {
        float *got = ot_floats(nout);
        double *want = ot_doubles(nout);
        for (int64_t bt = 0; bt < B * T; bt++)
            for (int64_t i = 0; i < C; i++) {
                got[bt * C + i] = dqkv[bt * 3 * C + part * C + i];
                want[bt * C + i] = g[bt * 3 * C + part * C + i];
            }
        cr_assert(ot_close(part_name[part], got, want, nout, FLOOR, BWD_TOL), "%s",
                  part_name[part]);
    }
}

/* Causality: out and att at positions <= t do not depend on q, k, v at positions > t (compared
 * exactly), and a dout that is zero after t gives exactly zero dqkv after t. */
Test(ops_layers, attention_is_causal)
{
    tri_device *d = ot_device(1);
    const int64_t B = 2, T = 6, NH = 3, HS = 4, C = NH * HS, t_cut = 2;
    size_t nqkv = (size_t)(B * T * 3 * C), nout = (size_t)(B * T * C);
    float *qkv = ot_uniform(nqkv, -2.0f, 2.0f, 610);
    att_tensors a = att_alloc(d, B, T, NH, HS);
    cr_assert_eq(tri_device_copy_from_host(d, a.qkv, qkv), TRI_OK);
    cr_assert_eq(tri_op_attention_forward(d, a.out, a.att, a.qkv), TRI_OK);
    float *out1 = ot_read(d, a.out), *att1 = ot_read(d, a.att);

    float *qkv2 = ot_uniform(nqkv, -2.0f, 2.0f, 611); /* new values after t_cut, same before */
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t <= t_cut; t++)
            for (int64_t i = 0; i < 3 * C; i++)
                qkv2[(b * T + t) * 3 * C + i] = qkv[(b * T + t) * 3 * C + i];
    cr_assert_eq(tri_device_copy_from_host(d, a.qkv, qkv2), TRI_OK);
    cr_assert_eq(tri_op_attention_forward(d, a.out, a.att, a.qkv), TRI_OK);
    float *out2 = ot_read(d, a.out), *att2 = ot_read(d, a.att);
    int changed_after = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < C; i++) {
                size_t k = (size_t)((b * T + t) * C + i);
                if (t <= t_cut)
                    cr_assert_eq(out1[k], out2[k], "out at t=%lld changed", (long long)t);
                else
                    changed_after += out1[k] != out2[k];
            }
    cr_assert_gt(changed_after, 0, "the perturbation must change the later outputs");
    for (int64_t r = 0; r < B * NH * T; r++)
        if (r % T <= t_cut)
            for (int64_t j = 0; j < T; j++)
                cr_assert_eq(att1[r * T + j], att2[r * T + j]);

    float *dout = ot_uniform(nout, -1.0f, 1.0f, 612);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = t_cut + 1; t < T; t++)
            for (int64_t i = 0; i < C; i++)
                dout[(b * T + t) * C + i] = 0.0f;
    cr_assert_eq(tri_device_copy_from_host(d, a.dout, dout), TRI_OK);
    cr_assert_eq(tri_device_copy_from_host(d, a.dqkv, nans(nqkv)), TRI_OK);
    cr_assert_eq(tri_op_attention_backward(d, a.dqkv, a.datt, a.dout, a.qkv, a.att), TRI_OK);
    float *dqkv = ot_read(d, a.dqkv);
    int nonzero_before = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < 3 * C; i++) {
                float v = dqkv[(b * T + t) * 3 * C + i];
                if (t > t_cut)
                    cr_assert_eq(v, 0.0f, "dqkv at t=%lld, column %lld is %g", (long long)t,
                                 (long long)i, (double)v);
                else
                    nonzero_before += v != 0.0f;
            }
    cr_assert_gt(nonzero_before, 0);
}

/* ---- GELU ---- */

typedef struct gelu_problem {
    size_t n;
    double *inp;
    const double *R;
    double *out;
} gelu_problem;

/* gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static void gelu_ref(gelu_problem *p)
{
    for (size_t i = 0; i < p->n; i++) {
        double x = p->inp[i];
        p->out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
    }
}

static double gelu_loss(void *ctx)
{
    gelu_problem *p = ctx;
    gelu_ref(p);
    return ot_dot(p->out, p->R, p->n);
}

Test(ops_layers, gelu_forward_backward_in_place)
{
    tri_device *d = ot_device(1);
    const size_t n = 1001; /* (B, T, 4C) = (1, 11, 91) */
    float *inp = ot_uniform(n, -6.0f, 6.0f, 700), *R = ot_uniform(n, -1.0f, 1.0f, 701);
    inp[0] = 0.0f;
    inp[1] = -0.5f;
    inp[2] = 3.0f;
    gelu_problem p = {n, ot_widen(inp, n), ot_widen(R, n), ot_doubles(n)};
    tri_tensor shape = tri_tensor_3d(NULL, TRI_F32, 1, 11, 91);
    tri_tensor tinp = ot_tensor(d, shape, inp), tout = ot_tensor(d, shape, NULL);
    cr_assert_eq(tri_op_gelu_forward(d, tout, tinp), TRI_OK);
    gelu_ref(&p);
    cr_assert(ot_close("gelu fwd", ot_read(d, tout), p.out, n, FLOOR, FWD_TOL));

    tri_tensor tdout = ot_tensor(d, shape, R), tdinp = ot_tensor(d, shape, NULL);
    cr_assert_eq(tri_op_gelu_backward(d, tdinp, tinp, tdout), TRI_OK);
    double *g = ot_doubles(n);
    ot_fd_grad(g, p.inp, n, gelu_loss, &p);
    float *dinp = ot_read(d, tdinp);
    cr_assert(ot_close("gelu bwd dinp", dinp, g, n, FLOOR, BWD_TOL));
    /* in place (dinp aliases dout): the same bits */
    cr_assert_eq(tri_op_gelu_backward(d, tdout, tinp, tdout), TRI_OK);
    cr_assert(ot_same_bits("gelu bwd in place", ot_read(d, tdout), dinp, n));
}

/* ---- bias + GELU: out = gelu(inp + bias), bias(OC) broadcast over the rows ----
 * Against two references built from the stored inputs (bf16 ones widened): bit for bit against a
 * loop of its own here (its own broadcast, the one fp32 addition, then activations_math.h's tri_gelu,
 * rounded once to out's dtype), and against fp64 within a bound derived per element from the fp32
 * operations (u = 2^-24, relative rounding of one operation):
 * - x = fl(inp + bias) is off the exact sum by at most u |x| (1 + u); gelu'(x) lies in [-0.17, 1.13],
 *   so gelu(x) moves by at most 1.13 u |x| (1 + u);
 * - tri_gelu(x) = x / (1 + e), e = tri_expf(t), t = -2 K (x + 0.044715 x x x): the cube term rounds 4
 *   times (its constant and three products), the sum of two terms of one sign once more, K and the
 *   product twice more, so |t_f - t| <= 7 u |t|, which e turns into a relative error 7 u |t|, plus
 *   tri_expf's own, below 2.5e-7 over its range (tests/test_math.c expf_relative_error_over_the_range);
 *   1 + e and the division round once each: relative 2 u + 7 u |t| + 2.5e-7 of gelu(x);
 * - a bf16 out rounds once more, at most 2^-8 / (1 - 2^-8) of the stored value.
 * The sum of these (times 1.001 for second-order terms) bounds each element. The fp64 GELU is the
 * tanh form written as x / (1 + exp(-2 s)) (the same function), which does not cancel for x < -5. */

static double gelu_sigmoid_d(double x)
{
    return x / (1.0 + exp(-2.0 * sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
}

/* The derived bound above for the element with stored inputs a, b and stored result got. */
static double bias_gelu_bound(double a, double b, double got, int out_bf16)
{
    const double u = 0x1p-24, exp_rel = 2.5e-7;
    double xf = (double)((float)a + (float)b), t = 2.0 * sqrt(2.0 / PI) * fabs(xf + 0.044715 * xf * xf * xf);
    double bound = 1.13 * u * fabs(xf) * (1.0 + u) + (2.0 * u + 7.0 * u * t + exp_rel) * fabs(gelu_sigmoid_d(xf));
    if (out_bf16)
        bound += 0x1p-8 / (1.0 - 0x1p-8) * fabs(got);
    return 1.001 * bound + 1e-300;
}

typedef struct bg_prec {
    int inp, bias, out;
} bg_prec;

static tri_dtype bg_dt(int bf16)
{
    return bf16 ? TRI_BF16 : TRI_F32;
}

/* Elements of got that differ from gelu(x + bias[col(n, c)]) for a column map col: 0 for the op's. */
static int64_t bg_mismatches(const float *got, const float *x, const float *b, int64_t N, int64_t OC, int out_bf16,
                             int64_t (*col)(int64_t n, int64_t c, int64_t OC))
{
    int64_t bad = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < OC; c++) {
            float y = tri_gelu(x[n * OC + c] + b[col(n, c, OC)]);
            y = out_bf16 ? tri_round_bf16(y) : y;
            bad += memcmp(&y, &got[n * OC + c], sizeof y) != 0;
        }
    return bad;
}

static int64_t bg_col(int64_t n, int64_t c, int64_t OC)
{
    (void)n, (void)OC;
    return c;
}

static int64_t bg_col_shifted(int64_t n, int64_t c, int64_t OC)
{
    (void)n;
    return (c + 1) % OC;
}

static int64_t bg_col_of_row(int64_t n, int64_t c, int64_t OC)
{
    (void)c;
    return n % OC;
}

static void bias_gelu_case(tri_device *d, int64_t N, int64_t OC, bg_prec p, uint64_t seed)
{
    size_t n = (size_t)(N * OC);
    char what[128];
    snprintf(what, sizeof what, "bias_gelu N %lld OC %lld inp %s bias %s out %s", (long long)N, (long long)OC,
             p.inp ? "bf16" : "fp32", p.bias ? "bf16" : "fp32", p.out ? "bf16" : "fp32");
    /* inp (1, N, OC), bias (OC), out (N, OC): any shapes of those sizes */
    tri_tensor tx = ot_tensor_as(d, bg_dt(p.inp), tri_tensor_3d(NULL, TRI_F32, 1, N, OC), ot_uniform(n, -4, 4, seed));
    tri_tensor tb = ot_tensor_as(d, bg_dt(p.bias), ot_v1(OC), ot_uniform((size_t)OC, -2, 2, seed + 1));
    tri_tensor to = ot_tensor_as(d, bg_dt(p.out), ot_m2(N, OC), NULL); /* NaN: every element must be written */
    cr_assert_eq(tri_op_bias_gelu_forward(d, to, tx, tb), TRI_OK, "%s: %s", what, tri_error_message());
    const float *x = ot_read(d, tx), *b = ot_read(d, tb), *got = ot_read(d, to); /* the stored values */

    /* bit for bit against the loop here; a wrong broadcast (the next column's bias, or the row's) fails */
    cr_assert_eq(bg_mismatches(got, x, b, N, OC, p.out, bg_col), 0, "%s: not the bits of gelu(inp + bias)", what);
    if (OC > 1) {
        cr_assert_gt(bg_mismatches(got, x, b, N, OC, p.out, bg_col_shifted), 0, "%s: blind to the column", what);
        cr_assert_gt(bg_mismatches(got, x, b, N, OC, p.out, bg_col_of_row), 0, "%s: blind to the broadcast", what);
    }
    /* against fp64, within the derived bound */
    double worst = 0.0;
    for (int64_t r = 0; r < N; r++)
        for (int64_t c = 0; c < OC; c++) {
            size_t i = (size_t)(r * OC + c);
            double want = gelu_sigmoid_d((double)x[i] + (double)b[c]), err = fabs((double)got[i] - want);
            double bound = bias_gelu_bound(x[i], b[c], got[i], p.out);
            cr_assert_leq(err, bound, "%s [%lld, %lld]: %.9g, fp64 %.17g, error %.3g above the bound %.3g", what,
                          (long long)r, (long long)c, (double)got[i], want, err, bound);
            worst = err / bound > worst ? err / bound : worst;
        }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "ok   %-64s error at most %.3f of the derived bound\n", what, worst);

    /* in place (out aliases inp, same dtype): the same bits */
    if (p.inp == p.out) {
        tri_tensor tin = ot_tensor_as(d, bg_dt(p.inp), ot_m2(N, OC), x);
        cr_assert_eq(tri_op_bias_gelu_forward(d, tin, tin, tb), TRI_OK, "%s: %s", what, tri_error_message());
        cr_assert(ot_same_bits(what, ot_read(d, tin), got, n), "%s: in place differs", what);
    }
}

Test(ops_layers, bias_gelu_forward)
{
    tri_device *d = ot_device(1);
    const bg_prec precs[] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1}, {1, 1, 0}};
    const int64_t OCs[] = {1, 7, 33}, Ns[] = {1, 5};
    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++)
        for (size_t k = 0; k < sizeof OCs / sizeof *OCs; k++)
            for (size_t r = 0; r < sizeof Ns / sizeof *Ns; r++)
                bias_gelu_case(d, Ns[r], OCs[k], precs[q], 800 + 10 * k + r);
    /* several threads split the rows: the same bits */
    tri_device *d4 = ot_device(4);
    bias_gelu_case(d4, 37, 33, precs[0], 900);
    bias_gelu_case(d4, 37, 33, precs[1], 901);
}
