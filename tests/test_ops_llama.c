/* tests/test_ops_llama.c - the Llama family's ops on the CPU backend: RMSNorm, SwiGLU, rotary embedding.
 *
 * Each forward against a naive fp64 loop written here from its definition (RMSNorm: Zhang & Sennrich
 * 2019 as Hugging Face's LlamaRMSNorm, x / sqrt(mean(x^2) + eps) * w; SwiGLU: Shazeer 2020,
 * silu(gate) * up; rotary: Su et al. 2021 in Hugging Face's rotate_half form, x cos + rotate_half(x)
 * sin), each backward against central finite differences of that loop for L = sum(out * R), and the
 * contracts: rmsnorm_backward accumulates (+=) into dinp and dw, swiglu_backward overwrites
 * dgate_up (it starts NaN), rope works in place on the first n_heads heads of a row and leaves the
 * other columns (v of a qkv row) bit for bit. The per-head RMSNorm (rmsnorm_heads_*, Qwen3's q_norm and
 * k_norm) likewise, each head row also bit for bit rmsnorm_forward's row, its weight gradients bit for
 * bit a host loop in the op's defined order, in place and out of place the same bits. bf16 storage
 * against the fp32 op rounded once. The
 * rotary tables (layers/rotary.h: Hugging Face's inverse frequencies, Llama 3's rope_scaling)
 * against the same formulas in fp64.
 *
 * Tolerances as tests/test_ops_layers.c: forward 1e-5 relative (floor 1/10 of the RMS), backward
 * 1e-4 against fp64 finite differences (exact to ~1e-9; the margin covers the fp32 rounding of the
 * analytic backward), bf16 one bf16 ulp where the widened fp32 result rounds (2^-8 relative). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/device.h"
#include "layers/rotary.h"
#include "tests/opsutil.h"

TestSuite(ops_llama, .fini = ot_teardown);

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define BF16_TOL 0x1p-8
#define FLOOR 0.1
#define EPS 1e-6f
#define TWO_PI 6.283185307179586

static float *nans(size_t n)
{
    float *x = ot_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

/* ---- RMSNorm ---- */

typedef struct rms_problem {
    int64_t N, C;
    double *x, *w;
    const double *R;
    double *out;
} rms_problem;

static void rms_ref(rms_problem *p)
{
    for (int64_t n = 0; n < p->N; n++) {
        double ss = 0.0;
        for (int64_t i = 0; i < p->C; i++)
            ss += p->x[n * p->C + i] * p->x[n * p->C + i];
        double r = 1.0 / sqrt(ss / (double)p->C + (double)EPS);
        for (int64_t i = 0; i < p->C; i++)
            p->out[n * p->C + i] = p->x[n * p->C + i] * r * p->w[i];
    }
}

static double rms_loss(void *ctx)
{
    rms_problem *p = ctx;
    rms_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->N * p->C));
}

static void rmsnorm_case(int64_t N, int64_t C, uint64_t seed)
{
    tri_device *d = ot_device(2);
    size_t nx = (size_t)(N * C);
    float *x = ot_uniform(nx, -2.0f, 2.0f, seed), *w = ot_uniform((size_t)C, 0.5f, 1.5f, seed + 1);
    float *R = ot_uniform(nx, -1.0f, 1.0f, seed + 2);
    float *dx0 = ot_uniform(nx, -1.0f, 1.0f, seed + 3), *dw0 = ot_uniform((size_t)C, -1.0f, 1.0f, seed + 4);
    rms_problem p = {N, C, ot_widen(x, nx), ot_widen(w, (size_t)C), ot_widen(R, nx), ot_doubles(nx)};
    tri_tensor tx = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), x), tw = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, C), w);
    tri_tensor to = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), nans(nx));
    tri_tensor tr = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), nans((size_t)N));
    cr_assert_eq(tri_op_rmsnorm_forward(d, to, tr, tx, tw, EPS), TRI_OK, "%s", tri_error_message());
    rms_ref(&p);
    cr_assert(ot_close("rmsnorm fwd out", ot_read(d, to), p.out, nx, FLOOR, FWD_TOL));
    /* backward accumulates onto dx0, dw0 */
    tri_tensor tdx = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), dx0);
    tri_tensor tdw = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, C), dw0);
    tri_tensor tg = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), R);
    cr_assert_eq(tri_op_rmsnorm_backward(d, tdx, tdw, tg, tx, tw, tr), TRI_OK, "%s", tri_error_message());
    double *gx = ot_doubles(nx), *gw = ot_doubles((size_t)C);
    ot_fd_grad(gx, p.x, nx, rms_loss, &p);
    ot_fd_grad(gw, p.w, (size_t)C, rms_loss, &p);
    float *dx = ot_read(d, tdx), *dw = ot_read(d, tdw);
    for (size_t i = 0; i < nx; i++)
        dx[i] -= dx0[i];
    for (int64_t i = 0; i < C; i++)
        dw[i] -= dw0[i];
    cr_assert(ot_close("rmsnorm bwd dinp (+=)", dx, gx, nx, FLOOR, BWD_TOL));
    cr_assert(ot_close("rmsnorm bwd dw (+=)", dw, gw, (size_t)C, FLOOR, BWD_TOL));
}

Test(ops_llama, rmsnorm) 
{
    rmsnorm_case(5, 67, 10);
    rmsnorm_case(130, 7, 20); /* more rows than one column chunk */
    rmsnorm_case(3, 300, 30); /* a row longer than the 256 slots */
}

/* ---- per-head RMSNorm of q|k|v rows (Qwen3's q_norm / k_norm) ---- */

typedef struct heads_problem {
    int64_t N, NH, NH_kv, HS, W;
    double *x, *qw, *kw;
    const double *R;
    double *out;
} heads_problem;

/* Hugging Face's Qwen3Attention: q_norm on each q head, k_norm on each k head, the rest copied. */
static void heads_ref(heads_problem *p)
{
    int64_t H = p->NH + p->NH_kv;
    for (int64_t n = 0; n < p->N; n++) {
        for (int64_t i = H * p->HS; i < p->W; i++)
            p->out[n * p->W + i] = p->x[n * p->W + i];
        for (int64_t h = 0; h < H; h++) {
            const double *x = p->x + n * p->W + h * p->HS, *w = h < p->NH ? p->qw : p->kw;
            double ss = 0.0;
            for (int64_t i = 0; i < p->HS; i++)
                ss += x[i] * x[i];
            double r = 1.0 / sqrt(ss / (double)p->HS + (double)EPS);
            for (int64_t i = 0; i < p->HS; i++)
                p->out[n * p->W + h * p->HS + i] = x[i] * r * w[i];
        }
    }
}

static double heads_loss(void *ctx)
{
    heads_problem *p = ctx;
    heads_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->N * p->W));
}

/* dw's definition order (ops_list.h): chunks of TRI_COL_CHUNK head rows n G + (h - h0), in order. */
static void heads_dw_in_order(float *dw, const float *g, const float *x, const float *rs, const heads_problem *p,
                              int64_t h0, int64_t G)
{
    int64_t H = p->NH + p->NH_kv, M = p->N * G;
    for (int64_t j = 0; j < p->HS; j++)
        for (int64_t c0 = 0; c0 < M; c0 += TRI_COL_CHUNK) {
            float s = 0.0f;
            for (int64_t m = c0; m < M && m < c0 + TRI_COL_CHUNK; m++) {
                int64_t n = m / G, h = h0 + m % G, at = n * p->W + h * p->HS + j;
                s += x[at] * rs[n * H + h] * g[at];
            }
            dw[j] += s;
        }
}

static void rmsnorm_heads_case(int64_t N, int64_t NH, int64_t NH_kv, int64_t HS, int64_t rest, uint64_t seed)
{
    tri_device *d = ot_device(2);
    int64_t H = NH + NH_kv, W = H * HS + rest;
    size_t nx = (size_t)(N * W), nh = (size_t)HS;
    float *x = ot_uniform(nx, -2.0f, 2.0f, seed), *qw = ot_uniform(nh, 0.5f, 1.5f, seed + 1);
    float *kw = ot_uniform(nh, 0.5f, 1.5f, seed + 2), *R = ot_uniform(nx, -1.0f, 1.0f, seed + 3);
    float *dq0 = ot_uniform(nh, -1.0f, 1.0f, seed + 4), *dk0 = ot_uniform(nh, -1.0f, 1.0f, seed + 5);
    heads_problem p = {N, NH, NH_kv, HS, W, ot_widen(x, nx), ot_widen(qw, nh), ot_widen(kw, nh), ot_widen(R, nx),
                       ot_doubles(nx)};
    tri_tensor tx = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), x);
    tri_tensor tq = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, HS), qw), tk = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, HS), kw);
    tri_tensor to = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), nans(nx));
    tri_tensor tr = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, H), nans((size_t)(N * H)));
    cr_assert_eq(tri_op_rmsnorm_heads_forward(d, to, tr, tx, tq, tk, NH, NH_kv, EPS), TRI_OK, "%s", tri_error_message());
    heads_ref(&p);
    float *out = ot_read(d, to), *rs = ot_read(d, tr);
    cr_assert(ot_close("rmsnorm_heads fwd out", out, p.out, nx, FLOOR, FWD_TOL));
    for (int64_t n = 0; n < N; n++) /* the v columns copied bit for bit */
        cr_assert(ot_same_bits("rmsnorm_heads fwd v columns", out + n * W + H * HS, x + n * W + H * HS, (size_t)rest));
    /* each head row is rmsnorm_forward's row, bit for bit */
    for (int64_t h = 0; h < H; h += H - 1) {
        tri_tensor row = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 1, HS), x + h * HS);
        tri_tensor ro = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 1, HS), NULL), rr = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 1), NULL);
        cr_assert_eq(tri_op_rmsnorm_forward(d, ro, rr, row, h < NH ? tq : tk, EPS), TRI_OK);
        cr_assert(ot_same_bits("rmsnorm_heads head row vs rmsnorm_forward", ot_read(d, ro), out + h * HS, (size_t)HS));
        cr_assert(ot_same_bits("rmsnorm_heads rstd vs rmsnorm_forward", ot_read(d, rr), rs + h, 1));
    }
    /* in place: the same bits */
    tri_tensor tin = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), x);
    cr_assert_eq(tri_op_rmsnorm_heads_forward(d, tin, tr, tin, tq, tk, NH, NH_kv, EPS), TRI_OK);
    cr_assert(ot_same_bits("rmsnorm_heads fwd in place", ot_read(d, tin), out, nx));
    /* backward: dinp set (it starts NaN), the weight gradients accumulate onto dq0, dk0 */
    tri_tensor tdx = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), nans(nx));
    tri_tensor tdq = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, HS), dq0), tdk = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, HS), dk0);
    tri_tensor tg = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), R);
    cr_assert_eq(tri_op_rmsnorm_heads_backward(d, tdx, tdq, tdk, tg, tx, tq, tk, tr, NH, NH_kv), TRI_OK, "%s",
                 tri_error_message());
    double *gx = ot_doubles(nx), *gq = ot_doubles(nh), *gk = ot_doubles(nh);
    ot_fd_grad(gx, p.x, nx, heads_loss, &p);
    ot_fd_grad(gq, p.qw, nh, heads_loss, &p);
    ot_fd_grad(gk, p.kw, nh, heads_loss, &p);
    float *dx = ot_read(d, tdx), *dq = ot_read(d, tdq), *dk = ot_read(d, tdk);
    cr_assert(ot_close("rmsnorm_heads bwd dinp (set; v copied)", dx, gx, nx, FLOOR, BWD_TOL));
    float *wq = ot_floats(nh), *wk = ot_floats(nh);
    memcpy(wq, dq0, nh * sizeof(float));
    memcpy(wk, dk0, nh * sizeof(float));
    heads_dw_in_order(wq, R, x, rs, &p, 0, NH);
    heads_dw_in_order(wk, R, x, rs, &p, NH, NH_kv);
    cr_assert(ot_same_bits("rmsnorm_heads dq_w in its defined order", dq, wq, nh));
    cr_assert(ot_same_bits("rmsnorm_heads dk_w in its defined order", dk, wk, nh));
    for (size_t i = 0; i < nh; i++) {
        dq[i] -= dq0[i];
        dk[i] -= dk0[i];
    }
    cr_assert(ot_close("rmsnorm_heads bwd dq_w (+=)", dq, gq, nh, FLOOR, BWD_TOL));
    cr_assert(ot_close("rmsnorm_heads bwd dk_w (+=)", dk, gk, nh, FLOOR, BWD_TOL));
    /* in place on dout: the same bits */
    tri_tensor tdd = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), R);
    tri_tensor tdq2 = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, HS), dq0), tdk2 = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, HS), dk0);
    cr_assert_eq(tri_op_rmsnorm_heads_backward(d, tdd, tdq2, tdk2, tdd, tx, tq, tk, tr, NH, NH_kv), TRI_OK);
    cr_assert(ot_same_bits("rmsnorm_heads bwd in place", ot_read(d, tdd), dx, nx));
    cr_assert(ot_same_bits("rmsnorm_heads bwd in place dq_w", ot_read(d, tdq2), wq, nh));
}

Test(ops_llama, rmsnorm_heads)
{
    rmsnorm_heads_case(3, 4, 2, 16, 32, 60);  /* grouped-query q|k|v rows */
    rmsnorm_heads_case(40, 2, 1, 12, 12, 70); /* more head rows than one column chunk, HS not a multiple of 8 */
    rmsnorm_heads_case(2, 1, 1, 300, 0, 80);  /* a head longer than the 256 slots, no other columns */
}

/* ---- SwiGLU ---- */

typedef struct swiglu_problem {
    int64_t N, F;
    double *gu;
    const double *R;
    double *out;
} swiglu_problem;

static void swiglu_ref(swiglu_problem *p)
{
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t i = 0; i < p->F; i++) {
            double g = p->gu[n * 2 * p->F + i], u = p->gu[n * 2 * p->F + p->F + i];
            p->out[n * p->F + i] = g / (1.0 + exp(-g)) * u;
        }
}

static double swiglu_loss(void *ctx)
{
    swiglu_problem *p = ctx;
    swiglu_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->N * p->F));
}

Test(ops_llama, swiglu)
{
    tri_device *d = ot_device(2);
    const int64_t N = 6, F = 37;
    size_t ngu = (size_t)(N * 2 * F), no = (size_t)(N * F);
    float *gu = ot_uniform(ngu, -6.0f, 6.0f, 40), *R = ot_uniform(no, -1.0f, 1.0f, 41);
    swiglu_problem p = {N, F, ot_widen(gu, ngu), ot_widen(R, no), ot_doubles(no)};
    tri_tensor tgu = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, 2 * F), gu);
    tri_tensor to = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, F), nans(no));
    cr_assert_eq(tri_op_swiglu_forward(d, to, tgu), TRI_OK, "%s", tri_error_message());
    swiglu_ref(&p);
    cr_assert(ot_close("swiglu fwd", ot_read(d, to), p.out, no, FLOOR, FWD_TOL));
    tri_tensor tdgu = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, 2 * F), nans(ngu));
    tri_tensor tg = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, F), R);
    cr_assert_eq(tri_op_swiglu_backward(d, tdgu, tgu, tg), TRI_OK, "%s", tri_error_message());
    double *want = ot_doubles(ngu);
    ot_fd_grad(want, p.gu, ngu, swiglu_loss, &p);
    cr_assert(ot_close("swiglu bwd dgate_up (overwritten)", ot_read(d, tdgu), want, ngu, FLOOR, BWD_TOL));
    /* an odd last dimension is refused, naming the tensor */
    tri_tensor odd = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, 2 * F - 1), NULL);
    cr_assert_neq(tri_op_swiglu_forward(d, to, odd), TRI_OK);
    cr_assert(strstr(tri_error_message(), "gate_up") != NULL, "%s", tri_error_message());
}

/* ---- rotary embedding ---- */

typedef struct rope_problem {
    int64_t N, W, n_heads, half, T, row0;
    double *x;
    const float *cos, *sin;
    const double *R;
    double *out;
} rope_problem;

/* out = x with heads h < n_heads of each row rotated: x cos + rotate_half(x) sin (Hugging Face's
 * apply_rotary_pos_emb, cos and sin repeated over the two halves) */
static void rope_ref(rope_problem *p)
{
    int64_t HS = 2 * p->half;
    memcpy(p->out, p->x, (size_t)(p->N * p->W) * sizeof *p->out);
    for (int64_t n = 0; n < p->N; n++) {
        int64_t pos = (p->row0 + n) % p->T;
        for (int64_t h = 0; h < p->n_heads; h++)
            for (int64_t i = 0; i < HS; i++) {
                const double *xh = p->x + n * p->W + h * HS;
                int64_t f = i % p->half;
                double rot = i < p->half ? -xh[i + p->half] : xh[i - p->half];
                p->out[n * p->W + h * HS + i] = xh[i] * p->cos[pos * p->half + f] + rot * p->sin[pos * p->half + f];
            }
    }
}

static double rope_loss(void *ctx)
{
    rope_problem *p = ctx;
    rope_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->N * p->W));
}

Test(ops_llama, rope)
{
    tri_device *d = ot_device(2);
    /* 7 rows of a (q 2 heads | k 1 head | v 1 head) row, HS 8, positions (3 + n) % 5 */
    const int64_t N = 7, HS = 8, half = 4, W = 4 * HS, n_heads = 3, T = 5, row0 = 3, P = 6;
    size_t nx = (size_t)(N * W);
    float *x = ot_uniform(nx, -2.0f, 2.0f, 50), *R = ot_uniform(nx, -1.0f, 1.0f, 51);
    float *cs = ot_floats((size_t)(P * half)), *sn = ot_floats((size_t)(P * half));
    for (int64_t pos = 0; pos < P; pos++)
        for (int64_t i = 0; i < half; i++) { /* theta 10000: Llama's inverse frequencies */
            double a = (double)pos * pow(10000.0, -2.0 * (double)i / (double)HS);
            cs[pos * half + i] = (float)cos(a);
            sn[pos * half + i] = (float)sin(a);
        }
    rope_problem p = {N, W, n_heads, half, T, row0, ot_widen(x, nx), cs, sn, ot_widen(R, nx), ot_doubles(nx)};
    tri_tensor tx = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), x);
    tri_tensor tc = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, P, half), cs);
    tri_tensor ts = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, P, half), sn);
    cr_assert_eq(tri_op_rope_forward(d, tx, tc, ts, n_heads, T, row0, 1, 0), TRI_OK, "%s", tri_error_message());
    rope_ref(&p);
    float *got = ot_read(d, tx);
    cr_assert(ot_close("rope fwd", got, p.out, nx, FLOOR, FWD_TOL));
    for (int64_t n = 0; n < N; n++) /* the v head is untouched, bit for bit */
        cr_assert(memcmp(got + n * W + n_heads * HS, x + n * W + n_heads * HS, (size_t)HS * sizeof *x) == 0);
    /* backward in place from R: dL/dx */
    tri_tensor tg = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, W), R);
    cr_assert_eq(tri_op_rope_backward(d, tg, tc, ts, n_heads, T, row0, 1, 0), TRI_OK, "%s", tri_error_message());
    double *want = ot_doubles(nx);
    ot_fd_grad(want, p.x, nx, rope_loss, &p);
    cr_assert(ot_close("rope bwd", ot_read(d, tg), want, nx, FLOOR, BWD_TOL));
    /* a table shorter than T is refused */
    tri_tensor short_c = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 4, half), cs);
    cr_assert_neq(tri_op_rope_forward(d, tx, short_c, short_c, n_heads, T, row0, 1, 0), TRI_OK);
    cr_assert(strstr(tri_error_message(), "cos") != NULL, "%s", tri_error_message());
}

/* ---- bf16 storage: the fp32 op's results rounded once (the wrappers widen bf16 arguments) ---- */

static bool within_bf16(const char *what, const float *got, const float *want32, size_t n)
{
    double worst = 0.0, top = 0.0;
    for (size_t i = 0; i < n; i++) {
        double w = tri_round_bf16(want32[i]);
        double e = fabs((double)got[i] - w);
        worst = e > worst ? e : worst;
        top = fabs(w) > top ? fabs(w) : top;
    }
    bool ok = worst <= BF16_TOL * top;
    if (!ok || getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s %s: max |got - round(fp32)| %.3g of max %.3g\n", ok ? "ok  " : "FAIL", what, worst, top);
    return ok;
}

Test(ops_llama, bf16_storage)
{
    tri_device *d = ot_device(1);
    const int64_t N = 9, C = 40;
    size_t nx = (size_t)(N * C);
    float *x = ot_bf16_uniform(nx, -2.0f, 2.0f, 60), *w = ot_bf16_uniform((size_t)C, 0.5f, 1.5f, 61);
    tri_tensor r32 = ot_put_f32(d, ot_v1(N), NULL), r16 = ot_put_f32(d, ot_v1(N), NULL);
    tri_tensor o32 = ot_put_f32(d, ot_m2(N, C), NULL), o16 = ot_put_bf16(d, ot_m2(N, C), NULL);
    cr_assert_eq(tri_op_rmsnorm_forward(d, o32, r32, ot_put_f32(d, ot_m2(N, C), x), ot_put_f32(d, ot_v1(C), w), EPS),
                 TRI_OK);
    cr_assert_eq(tri_op_rmsnorm_forward(d, o16, r16, ot_put_bf16(d, ot_m2(N, C), x), ot_put_bf16(d, ot_v1(C), w), EPS),
                 TRI_OK);
    cr_assert(within_bf16("rmsnorm bf16", ot_read(d, o16), ot_read(d, o32), nx));
    cr_assert(ot_same_bits("rmsnorm bf16 rstd", ot_read(d, r16), ot_read(d, r32), (size_t)N));
    tri_tensor s32 = ot_put_f32(d, ot_m2(N, C / 2), NULL), s16 = ot_put_bf16(d, ot_m2(N, C / 2), NULL);
    cr_assert_eq(tri_op_swiglu_forward(d, s32, ot_put_f32(d, ot_m2(N, C), x)), TRI_OK);
    cr_assert_eq(tri_op_swiglu_forward(d, s16, ot_put_bf16(d, ot_m2(N, C), x)), TRI_OK);
    cr_assert(within_bf16("swiglu bf16", ot_read(d, s16), ot_read(d, s32), nx / 2));
}

/* ---- the rotary tables (layers/rotary.h) against the formulas in fp64 ---- */

/* Hugging Face's inverse frequencies in fp64: theta^(-2i/HS), and Llama 3's rescaling */
static double inv_freq_d(int64_t i, int64_t HS, double theta, const tri_rope_scaling *s)
{
    double inv = 1.0 / pow(theta, (double)(2 * i) / (double)HS);
    if (!s)
        return inv;
    double old = (double)s->original_max_positions, wavelen = TWO_PI / inv;
    double low = old / s->low_freq_factor, high = old / s->high_freq_factor;
    if (wavelen > low)
        return inv / s->factor;
    if (wavelen < high)
        return inv;
    double smooth = (old / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - smooth) * inv / s->factor + smooth * inv;
}

Test(ops_llama, rotary_tables_plain_and_llama3)
{
    const int64_t HS = 128, half = 64, P = 9;
    /* Llama 3.1's rope_scaling: factor 8, low 1, high 4, original 8192, theta 500000 */
    tri_rope_scaling l3 = {.llama3 = true, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                           .original_max_positions = 8192};
    float inv[64], cs[9 * 64], sn[9 * 64];
    int low = 0, mid = 0, high = 0;
    for (int scaled = 0; scaled < 2; scaled++) {
        double theta = scaled ? 500000.0 : 10000.0;
        tri_rope_inv_freq(inv, HS, theta, scaled ? &l3 : NULL);
        for (int64_t i = 0; i < half; i++) {
            double want = inv_freq_d(i, HS, theta, scaled ? &l3 : NULL);
            cr_assert(fabs(inv[i] - want) <= 1e-6 * want, "inv_freq[%lld] %.9g, fp64 %.9g (%s)", (long long)i,
                      (double)inv[i], want, scaled ? "llama3" : "plain");
            if (scaled) {
                double wl = TWO_PI / (1.0 / pow(theta, (double)(2 * i) / (double)HS));
                low += wl > 8192.0, high += wl < 2048.0, mid += wl >= 2048.0 && wl <= 8192.0;
            }
        }
        tri_rope_tables(cs, sn, P, half, inv);
        for (int64_t p = 0; p < P; p++)
            for (int64_t i = 0; i < half; i++) {
                double a = (double)p * (double)inv[i];
                cr_assert(fabs(cs[p * half + i] - cos(a)) <= 1e-6 && fabs(sn[p * half + i] - sin(a)) <= 1e-6,
                          "table at position %lld, frequency %lld", (long long)p, (long long)i);
            }
    }
    /* HS 128 at theta 500000 has frequencies in all three of Llama 3's regions */
    cr_assert(low > 0 && mid > 0 && high > 0, "regions: %d low, %d medium, %d high", low, mid, high);
}
