/* tests/test_flash_attention.c - the fused causal attention (FlashAttention-2) on the CPU backend.
 *
 * tri_op_flash_attention_forward/backward against a naive fp64 loop written here from the
 * definition (softmax(q k^T / sqrt(HS)) v with a causal mask; the backward's dv = P^T dout,
 * dS = P (dout v^T - rowsum(P dout v^T)), dq = dS k / sqrt(HS), dk = dS^T q / sqrt(HS)), against the
 * materialised op (its reference twin), against central finite differences on shapes that cross a
 * tile boundary, in bf16 storage, and across thread counts (bit for bit: every sum has a fixed order).
 *
 * Shapes: T in {1, 17, 64, 127, 1024}, HS in {64, 80, 128} and odd small ones, NH 1-16, B 1-4, and
 * grouped-query attention (NH_kv < NH key/value heads, Ainslie et al. 2023) against the same
 * reference with Hugging Face's repeat_kv mapping (query head h reads key/value head h / (NH/NH_kv)).
 *
 * Tolerances, as max |got - want| / max |want| over a tensor ("normalised"), are the 1e-5
 * for fp32. Why that holds: each output is a sum of at most T products whose weights are
 * probabilities (they sum to 1) of values |v| <= 1, plus the score products q.k of HS terms; fp32
 * rounds each addition by at most 2^-24 relative, and with BLAS's blocked (pairwise-like) sums and
 * the online softmax's one rescaling per 64-key tile the accumulated error grows like sqrt(terms)
 * 2^-24 |partial sums|, i.e. ~2e-6 at 1024 keys; measured (TRIDENT_TEST_VERBOSE=1) at most 3.2e-7
 * forward and 5.3e-7 backward against fp64, 1.0e-6 against the materialised op (bound 2e-5: the sum
 * of the two paths' bounds). bf16 storage: the rounding of the inputs,
 * outputs and gradients to 8 bits dominates; the bound is test_ops_bf16's 2^-7 after rounding the
 * reference to bf16. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(flash_attention, .fini = ot_teardown);

#define FP32_TOL 1e-5
#define BF16_TOL 0x1p-7
#define FD_TOL 1e-4 /* against fp64 finite differences: fp32 rounding of the analytic backward */

/* NH_kv 0: multi-head (NH_kv = NH); else grouped-query attention with NH_kv key/value heads. */
typedef struct shape {
    int64_t B, T, NH, HS, NH_kv;
} shape;

static int64_t kv_heads(shape s) { return s.NH_kv ? s.NH_kv : s.NH; }
static int64_t width(shape s) { return (s.NH + 2 * kv_heads(s)) * s.HS; }
static size_t n_qkv(shape s) { return (size_t)(s.B * s.T * width(s)); }
static size_t n_out(shape s) { return (size_t)(s.B * s.T * s.NH * s.HS); }
static size_t n_rows(shape s) { return (size_t)(s.B * s.NH * s.T); }

/* fp64 reference: out, lse (per (b, h, t)) and, when dout is given, dqkv. */
static void reference(shape s, const double *qkv, const double *dout, double *out, double *lse, double *dqkv)
{
    int64_t T = s.T, HS = s.HS, C = s.NH * HS, W = width(s), rep = s.NH / kv_heads(s);
    double scale = 1.0 / sqrt((double)HS);
    double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
    if (dqkv)
        memset(dqkv, 0, n_qkv(s) * sizeof *dqkv);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.NH; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t kofs = C + h / rep * HS, vofs = C + kv_heads(s) * HS + h / rep * HS;
                const double *q = qkv + (b * T + t) * W + h * HS;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    const double *k = qkv + (b * T + j) * W + kofs;
                    double acc = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        acc += q[i] * k[i];
                    p[j] = acc * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j <= t; j++)
                    sum += (p[j] = exp(p[j] - mx));
                double *o = out + (b * T + t) * C + h * HS;
                memset(o, 0, (size_t)HS * sizeof *o);
                for (int64_t j = 0; j <= t; j++) {
                    p[j] /= sum;
                    for (int64_t i = 0; i < HS; i++)
                        o[i] += p[j] * qkv[(b * T + j) * W + vofs + i];
                }
                lse[(b * s.NH + h) * T + t] = mx + log(sum);
                if (!dqkv)
                    continue;
                const double *g = dout + (b * T + t) * C + h * HS;
                double dot = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    const double *v = qkv + (b * T + j) * W + vofs;
                    double *dv = dqkv + (b * T + j) * W + vofs;
                    double acc = 0.0;
                    for (int64_t i = 0; i < HS; i++) {
                        acc += g[i] * v[i];
                        dv[i] += p[j] * g[i];
                    }
                    dp[j] = acc;
                    dot += p[j] * acc;
                }
                double *dq = dqkv + (b * T + t) * W + h * HS;
                for (int64_t j = 0; j <= t; j++) {
                    double ds = p[j] * (dp[j] - dot) * scale;
                    const double *k = qkv + (b * T + j) * W + kofs;
                    double *dk = dqkv + (b * T + j) * W + kofs;
                    for (int64_t i = 0; i < HS; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
    free(p);
    free(dp);
}

/* max |got - want| / max |want| <= tol (want rounded to bf16 first when `bf16`); prints the error
 * on failure and with TRIDENT_TEST_VERBOSE. */
static bool close_norm(const char *what, shape s, const float *got, const double *want, size_t n, double tol,
                       bool bf16)
{
    double top = 0.0, diff = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double w = bf16 ? (double)tri_round_bf16((float)want[i]) : want[i];
        double e = fabs((double)got[i] - w);
        top = fabs(w) > top ? fabs(w) : top;
        if (!(e <= diff)) {
            diff = isnan(e) ? INFINITY : e;
            wi = i;
        }
    }
    double err = top > 0.0 ? diff / top : diff;
    bool ok = err <= tol;
    if (!ok || getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s %s B %lld T %lld NH %lld HS %lld: normalised err %.3g (tol %.3g) at [%zu] got %.9g want %.9g\n",
                ok ? "ok  " : "FAIL", what, (long long)s.B, (long long)s.T, (long long)s.NH, (long long)s.HS, err,
                tol, wi, n ? got[wi] : 0.0, n ? want[wi] : 0.0);
    return ok;
}

/* The fused op's results for one problem, stored as `dt`; dout NULL: forward only. */
typedef struct flash_result {
    float *out, *lse, *dqkv;
} flash_result;

static flash_result run_flash(tri_device *d, shape s, tri_dtype dt, const float *qkv, const float *dout)
{
    int64_t C = s.NH * s.HS;
    tri_tensor tqkv = ot_tensor_as(d, dt, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, width(s)), qkv);
    tri_tensor tout = ot_tensor_as(d, dt, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, C), NULL);
    tri_tensor tlse = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, s.T), NULL);
    flash_result r = {NULL, NULL, NULL};
    cr_assert_eq(tri_op_flash_attention_forward(d, tout, tlse, tqkv), TRI_OK, "%s", tri_error_message());
    r.out = ot_read(d, tout);
    r.lse = ot_read(d, tlse);
    if (!dout)
        return r;
    tri_tensor tdout = ot_tensor_as(d, dt, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, C), dout);
    tri_tensor tdqkv = ot_tensor_as(d, dt, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, width(s)), NULL);
    tri_tensor tdelta = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, s.T), NULL);
    cr_assert_eq(tri_op_flash_attention_backward(d, tdqkv, tdelta, tdout, tqkv, tout, tlse), TRI_OK, "%s",
                 tri_error_message());
    r.dqkv = ot_read(d, tdqkv);
    return r;
}

/* Checks one shape in fp32 against the fp64 reference and the materialised op. */
static void check_fp32(shape s, uint64_t seed)
{
    tri_device *d = ot_device(2);
    size_t nq = n_qkv(s), no = n_out(s), nr = n_rows(s);
    float *qkv = ot_uniform(nq, -1.5f, 1.5f, seed), *dout = ot_uniform(no, -1.0f, 1.0f, seed + 1);
    double *out = ot_doubles(no), *lse = ot_doubles(nr), *dqkv = ot_doubles(nq);
    reference(s, ot_widen(qkv, nq), ot_widen(dout, no), out, lse, dqkv);
    flash_result f = run_flash(d, s, TRI_F32, qkv, dout);
    cr_assert(close_norm("fp32 flash out", s, f.out, out, no, FP32_TOL, false));
    cr_assert(close_norm("fp32 flash lse", s, f.lse, lse, nr, FP32_TOL, false));
    cr_assert(close_norm("fp32 flash dqkv", s, f.dqkv, dqkv, nq, FP32_TOL, false));

    /* the materialised twin on the same inputs (multi-head only): both within the bound of fp64, so
     * of each other */
    if (kv_heads(s) != s.NH)
        return;
    int64_t C = s.NH * s.HS;
    tri_tensor tqkv = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, 3 * C), qkv);
    tri_tensor tout = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, C), NULL);
    tri_tensor tatt = ot_put_f32(d, tri_tensor_4d(NULL, TRI_F32, s.B, s.NH, s.T, s.T), NULL);
    tri_tensor tdatt = ot_put_f32(d, tri_tensor_4d(NULL, TRI_F32, s.B, s.NH, s.T, s.T), NULL);
    tri_tensor tdout = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, C), dout);
    tri_tensor tdqkv = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.T, 3 * C), NULL);
    cr_assert_eq(tri_op_attention_forward(d, tout, tatt, tqkv), TRI_OK);
    cr_assert_eq(tri_op_attention_backward(d, tdqkv, tdatt, tdout, tqkv, tatt), TRI_OK);
    double *mout = ot_widen(ot_read(d, tout), no), *mdqkv = ot_widen(ot_read(d, tdqkv), nq);
    cr_assert(close_norm("fp32 flash out vs materialised", s, f.out, mout, no, 2 * FP32_TOL, false));
    cr_assert(close_norm("fp32 flash dqkv vs materialised", s, f.dqkv, mdqkv, nq, 2 * FP32_TOL, false));
}

Test(flash_attention, fp32_one_token) { check_fp32((shape){1, 1, 1, 64, 0}, 10); }
Test(flash_attention, fp32_T17_HS64_NH3_B2) { check_fp32((shape){2, 17, 3, 64, 0}, 20); }
Test(flash_attention, fp32_T64_HS80_NH2_B3) { check_fp32((shape){3, 64, 2, 80, 0}, 30); }
Test(flash_attention, fp32_T127_HS128_NH2_B4) { check_fp32((shape){4, 127, 2, 128, 0}, 40); }
Test(flash_attention, fp32_T127_HS8_NH16_B1) { check_fp32((shape){1, 127, 16, 8, 0}, 50); }
Test(flash_attention, fp32_T1024_HS64_NH1_B1) { check_fp32((shape){1, 1024, 1, 64, 0}, 60); }
Test(flash_attention, fp32_T1024_HS128_NH2_B1) { check_fp32((shape){1, 1024, 2, 128, 0}, 70); }
Test(flash_attention, fp32_T1024_HS80_NH1_B2) { check_fp32((shape){2, 1024, 1, 80, 0}, 80); }
/* grouped-query attention (Ainslie et al. 2023): 8 query heads on 2 key/value heads, and
 * multi-query (one key/value head) */
Test(flash_attention, fp32_gqa_NH8_kv2_T127_HS64_B2) { check_fp32((shape){2, 127, 8, 64, 2}, 85); }
Test(flash_attention, fp32_mqa_NH4_kv1_T200_HS32) { check_fp32((shape){1, 200, 4, 32, 1}, 86); }
/* Llama 3 8B's head grouping at T 1024; under the sanitizers (the test command's second stage) left
 * to the Release stage: the grouped-query paths are the two cases above (4 query heads on a
 * key/value head, several tiles), and this one took 17 of the suite's 32 s there. */
#if !defined(__SANITIZE_ADDRESS__)
Test(flash_attention, fp32_gqa_NH16_kv4_T1024_HS128) { check_fp32((shape){1, 1024, 16, 128, 4}, 87); }
#endif

/* Scores that grow along the sequence (k_j = q direction times j/8): every key tile raises the
 * running max of the rows past it, so the online softmax rescales its accumulator at every tile,
 * and the probabilities span exp(-60)..1. */
Test(flash_attention, fp32_rising_scores_rescale_every_tile)
{
    shape s = {1, 300, 2, 16, 0};
    int64_t C = s.NH * s.HS;
    float *qkv = ot_uniform(n_qkv(s), -0.2f, 0.2f, 90), *dout = ot_uniform(n_out(s), -1.0f, 1.0f, 91);
    for (int64_t t = 0; t < s.T; t++)
        for (int64_t i = 0; i < C; i++) {
            qkv[t * width(s) + i] += 1.0f;                        /* q */
            qkv[t * width(s) + C + i] += (float)t / 128.0f;       /* k */
        }
    tri_device *d = ot_device(2);
    double *out = ot_doubles(n_out(s)), *lse = ot_doubles(n_rows(s)), *dqkv = ot_doubles(n_qkv(s));
    reference(s, ot_widen(qkv, n_qkv(s)), ot_widen(dout, n_out(s)), out, lse, dqkv);
    flash_result f = run_flash(d, s, TRI_F32, qkv, dout);
    cr_assert(close_norm("rising flash out", s, f.out, out, n_out(s), FP32_TOL, false));
    cr_assert(close_norm("rising flash lse", s, f.lse, lse, n_rows(s), FP32_TOL, false));
    cr_assert(close_norm("rising flash dqkv", s, f.dqkv, dqkv, n_qkv(s), FP32_TOL, false));
}

/* bf16 storage of qkv, out, dout and dqkv (lse and delta stay fp32). */
static void check_bf16(shape s, uint64_t seed)
{
    tri_device *d = ot_device(2);
    size_t nq = n_qkv(s), no = n_out(s), nr = n_rows(s);
    float *qkv = ot_bf16_uniform(nq, -1.5f, 1.5f, seed), *dout = ot_bf16_uniform(no, -1.0f, 1.0f, seed + 1);
    double *out = ot_doubles(no), *lse = ot_doubles(nr), *dqkv = ot_doubles(nq);
    reference(s, ot_widen(qkv, nq), ot_widen(dout, no), out, lse, dqkv);
    flash_result f = run_flash(d, s, TRI_BF16, qkv, dout);
    cr_assert(close_norm("bf16 flash out", s, f.out, out, no, BF16_TOL, true));
    cr_assert(close_norm("bf16 flash lse", s, f.lse, lse, nr, FP32_TOL, false));
    cr_assert(close_norm("bf16 flash dqkv", s, f.dqkv, dqkv, nq, BF16_TOL, true));
}

Test(flash_attention, bf16_T17_HS64_NH3_B2) { check_bf16((shape){2, 17, 3, 64, 0}, 100); }
Test(flash_attention, bf16_T127_HS80_NH4_B2) { check_bf16((shape){2, 127, 4, 80, 0}, 110); }
Test(flash_attention, bf16_T1024_HS128_NH1_B1) { check_bf16((shape){1, 1024, 1, 128, 0}, 120); }
Test(flash_attention, bf16_gqa_NH6_kv3_T130_HS64) { check_bf16((shape){2, 130, 6, 64, 3}, 130); }

/* ---- finite differences of L = sum(out * R), through the fp64 reference's forward ---- */

typedef struct fd_problem {
    shape s;
    double *qkv, *R, *out, *lse;
} fd_problem;

static double fd_loss(void *ctx)
{
    fd_problem *p = ctx;
    reference(p->s, p->qkv, NULL, p->out, p->lse, NULL);
    return ot_dot(p->out, p->R, n_out(p->s));
}

static void check_fd(shape s, uint64_t seed)
{
    tri_device *d = ot_device(1);
    size_t nq = n_qkv(s), no = n_out(s);
    float *qkv = ot_uniform(nq, -2.0f, 2.0f, seed), *R = ot_uniform(no, -1.0f, 1.0f, seed + 1);
    fd_problem p = {s, ot_widen(qkv, nq), ot_widen(R, no), ot_doubles(no), ot_doubles(n_rows(s))};
    double *g = ot_doubles(nq);
    ot_fd_grad(g, p.qkv, nq, fd_loss, &p);
    flash_result f = run_flash(d, s, TRI_F32, qkv, R);
    cr_assert(ot_close("flash dqkv vs finite differences", f.dqkv, g, nq, 0.1, FD_TOL));
}

Test(flash_attention, finite_differences_T5_NH3_HS4_B2) { check_fd((shape){2, 5, 3, 4, 0}, 200); }
/* T 70 crosses the 64-key tile: the rescaled accumulator and the second tile's gradients */
Test(flash_attention, finite_differences_T70_NH1_HS3) { check_fd((shape){1, 70, 1, 3, 0}, 210); }
/* each key/value head's gradient sums over its group's query heads */
Test(flash_attention, finite_differences_gqa_T70_NH4_kv2_HS3) { check_fd((shape){1, 70, 4, 3, 2}, 220); }

/* ---- determinism and contracts ---- */

/* Parallel over (b, h, query tile) forward and (b, key/value head) or tiles backward with fixed
 * sums: the same bits for 1 and 2 threads, and dqkv fully overwritten (it starts NaN;
 * ot_tensor_as fills NaN). */
Test(flash_attention, same_bits_for_any_thread_count)
{
    shape s = {2, 200, 4, 32, 2};
    float *qkv = ot_uniform(n_qkv(s), -1.5f, 1.5f, 300), *dout = ot_uniform(n_out(s), -1.0f, 1.0f, 301);
    flash_result one = run_flash(ot_device(1), s, TRI_F32, qkv, dout);
    flash_result two = run_flash(ot_device(2), s, TRI_F32, qkv, dout);
    cr_assert(ot_same_bits("flash out", two.out, one.out, n_out(s)));
    cr_assert(ot_same_bits("flash lse", two.lse, one.lse, n_rows(s)));
    cr_assert(ot_same_bits("flash dqkv", two.dqkv, one.dqkv, n_qkv(s)));
    /* one (b, key/value head): one thread runs the one-pass backward, two threads the two passes
     * with a task per tile (engine/device/ops/flash_cpu.c); the same sgemm calls per element */
    shape m = {1, 300, 4, 32, 1};
    float *mq = ot_uniform(n_qkv(m), -1.5f, 1.5f, 302), *mg = ot_uniform(n_out(m), -1.0f, 1.0f, 303);
    flash_result a = run_flash(ot_device(1), m, TRI_F32, mq, mg), b = run_flash(ot_device(2), m, TRI_F32, mq, mg);
    cr_assert(ot_same_bits("flash dqkv, one pass vs two passes", b.dqkv, a.dqkv, n_qkv(m)));
}

/* An empty batch or an empty sequence is nothing to compute: TRI_OK in fp32 and bf16 (the empty
 * views point into a small device buffer). tests/gpu/test_gpu_ops.c runs the same cases on a GPU,
 * where a grid of 0 blocks would be an invalid launch. */
Test(flash_attention, empty_batch_or_sequence)
{
    tri_device *d = ot_device(1);
    void *mem = ot_put_f32(d, tri_tensor_2d(NULL, TRI_F32, 1, 16), NULL).data;
    cr_assert_eq(ot_flash_empty_cases(d, mem), TRI_OK, "%s", tri_error_message());
}

/* Bad shapes are refused with a message naming the tensor. */
Test(flash_attention, refuses_mismatched_shapes)
{
    tri_device *d = ot_device(1);
    tri_tensor qkv = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, 2, 8, 12), NULL);
    tri_tensor out = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, 2, 8, 4), NULL);
    tri_tensor lse_bad = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, 2, 3, 8), NULL); /* 4 % 3 != 0 */
    cr_assert_neq(tri_op_flash_attention_forward(d, out, lse_bad, qkv), TRI_OK);
    cr_assert(strstr(tri_error_message(), "lse") != NULL, "%s", tri_error_message());
    tri_tensor lse_bf16 = ot_put_bf16(d, tri_tensor_3d(NULL, TRI_F32, 2, 2, 8), NULL);
    cr_assert_neq(tri_op_flash_attention_forward(d, out, lse_bf16, qkv), TRI_OK);
    cr_assert(strstr(tri_error_message(), "'lse'") != NULL, "%s", tri_error_message());
    tri_tensor lse = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, 2, 2, 8), NULL);
    tri_tensor lse4 = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, 2, 4, 8), NULL);
    tri_tensor out6 = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, 2, 8, 6), NULL); /* 6 % 4 heads != 0 */
    cr_assert_neq(tri_op_flash_attention_forward(d, out6, lse4, qkv), TRI_OK);
    cr_assert(strstr(tri_error_message(), "out") != NULL, "%s", tri_error_message());
    /* qkv 16 wide for out 4 = 2 heads of 2: a key/value part of 12 is 3 key/value heads, which do
     * not divide the 2 query heads into groups */
    tri_tensor qkv_bad = ot_put_f32(d, tri_tensor_3d(NULL, TRI_F32, 2, 8, 16), NULL);
    cr_assert_neq(tri_op_flash_attention_forward(d, out, lse, qkv_bad), TRI_OK);
    cr_assert(strstr(tri_error_message(), "NH_kv") != NULL, "%s", tri_error_message());
}
