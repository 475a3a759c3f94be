/* tests/test_cp_attention.c - attention across a context-parallel group (layers/cp_attention.c) and
 * the fused attention's split-sequence ops it runs on (engine/device/ops_list.h
 * flash_attention_kv_*, flash_attention_delta, flash_attention_merge, copy_columns).
 *
 * The ops: the kv forward of a cp rank's two query chunks against key blocks at other global
 * positions, against a naive fp64 attention over the global sequence restricted to those keys
 * (normalised error within test_flash_attention.c's derived 1e-5 for fp32); merging two blocks'
 * partial results (log-sum-exp) against fp64 of their union; the special case (one chunk, kv =
 * qkv) and the backward passes accumulated over blocks in ascending order bit for bit against
 * today's flash_attention_forward / _backward; the refusals.
 *
 * The algorithm on thread-rank comms (tri_run_thread_ranks), cp 2 and 4, MHA and GQA, B 2, Tc 64
 * and 128: the full sequence's qkv and dout scattered into the chunk layout, the results gathered
 * back. Forward (every mode) and the deterministic backward: bit for bit the one-rank fused op on
 * the same tokens. all_gather backward: dq bit for bit (the same sums), dk and dv within a derived
 * bound: each element of dk, dv is a sum over the query rows of rep heads of f32 products that both
 * runs compute identically (the tiles' P and dS are the same sgemm calls on the same rows); only the
 * order of the additions differs (one chain of query tiles on one rank, cp partial chains summed by
 * the reduce-scatter). Each order's error against the exact sum of those products is at most
 * gamma_N A = N u A (Higham 2002 §3.1; u = 2^-24, N = rep T + 4 additions and products in a chain,
 * A = sum of the terms' magnitudes, computed in fp64 here), so the two runs differ by at most
 * 2 N u A per element. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/math.h"
#include "engine/device/device.h"
#include "layers/cp_attention.h"
#include "partitioner/context_parallel.h"
#include "tests/opsutil.h"

TestSuite(cp_attention, .fini = ot_teardown);

#define FP32_TOL 1e-5
#define MAXCP 4

typedef struct shape {
    int64_t B, T, NH, NH_kv, HS;
} shape;

static int64_t width(shape s) { return (s.NH + 2 * s.NH_kv) * s.HS; }
static int64_t cols(shape s) { return s.NH * s.HS; }

/* fp64 attention of the queries at global positions qpos[0..Tq) (rows of qkv, (B, Tq, W)) against the
 * keys at kpos[0..Tk) (k|v = the last 2 C_kv columns of kv, (B, Tk, Wk)), causal by position: out,
 * lse (-inf, out 0 for a row that sees no key). */
static void naive_forward(shape s, const float *qkv, const int64_t *qpos, int64_t Tq, const float *kv, int64_t Wk,
                          const int64_t *kpos, int64_t Tk, double *out, double *lse)
{
    int64_t HS = s.HS, C = cols(s), W = width(s), rep = s.NH / s.NH_kv, ko = Wk - 2 * s.NH_kv * HS;
    double scale = 1.0 / sqrt((double)HS), *p = malloc((size_t)(Tk > 0 ? Tk : 1) * sizeof *p);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.NH; h++)
            for (int64_t t = 0; t < Tq; t++) {
                const float *q = qkv + (b * Tq + t) * W + h * HS;
                int64_t g = h / rep;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < Tk; j++) {
                    p[j] = -INFINITY;
                    if (kpos[j] > qpos[t])
                        continue;
                    const float *k = kv + (b * Tk + j) * Wk + ko + g * HS;
                    double acc = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        acc += (double)q[i] * k[i];
                    p[j] = acc * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                double *o = out + (b * Tq + t) * C + h * HS;
                memset(o, 0, (size_t)HS * sizeof *o);
                if (mx == -INFINITY) {
                    lse[(b * s.NH + h) * Tq + t] = -INFINITY;
                    continue;
                }
                for (int64_t j = 0; j < Tk; j++)
                    sum += (p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - mx));
                for (int64_t j = 0; j < Tk; j++)
                    for (int64_t i = 0; i < HS; i++)
                        o[i] += p[j] / sum * kv[(b * Tk + j) * Wk + ko + (s.NH_kv + g) * HS + i];
                lse[(b * s.NH + h) * Tq + t] = mx + log(sum);
            }
    free(p);
}

/* fp64 magnitudes of the terms of dk and dv over the whole causal sequence (qkv (B, T, W), one
 * chunk): A_dk[j] = sum_t |dS_tj q_t| / sqrt(HS), A_dv[j] = sum_t |P_tj dout_t| over the group's heads;
 * adq (B, T, C) if not NULL: A_dq[t] = sum_j |dS_tj k_j| / sqrt(HS). */
static void naive_dkv_magnitudes(shape s, const float *qkv, const float *dout, double *adkv, double *adq)
{
    int64_t T = s.T, HS = s.HS, C = cols(s), W = width(s), rep = s.NH / s.NH_kv;
    double scale = 1.0 / sqrt((double)HS), *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
    memset(adkv, 0, (size_t)(s.B * T * 2 * s.NH_kv * HS) * sizeof *adkv);
    if (adq)
        memset(adq, 0, (size_t)(s.B * T * C) * sizeof *adq);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.NH; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = h / rep, kofs = C + g * HS, vofs = C + (s.NH_kv + g) * HS;
                const float *q = qkv + (b * T + t) * W + h * HS, *go = dout + (b * T + t) * C + h * HS;
                double mx = -INFINITY, sum = 0.0, dot = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    double acc = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        acc += (double)q[i] * qkv[(b * T + j) * W + kofs + i];
                    p[j] = acc * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j <= t; j++)
                    sum += (p[j] = exp(p[j] - mx));
                for (int64_t j = 0; j <= t; j++) {
                    p[j] /= sum;
                    double acc = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        acc += (double)go[i] * qkv[(b * T + j) * W + vofs + i];
                    dp[j] = acc;
                    dot += p[j] * acc;
                }
                for (int64_t j = 0; j <= t; j++) {
                    double ds = p[j] * (dp[j] - dot) * scale;
                    double *a = adkv + (b * T + j) * 2 * s.NH_kv * HS;
                    for (int64_t i = 0; i < HS; i++) {
                        a[g * HS + i] += fabs(ds * q[i]);
                        a[(s.NH_kv + g) * HS + i] += fabs(p[j] * go[i]);
                        if (adq)
                            adq[(b * T + t) * C + h * HS + i] += fabs(ds * qkv[(b * T + j) * W + kofs + i]);
                    }
                }
            }
    free(p);
    free(dp);
}

static void close_norm(const char *what, const float *got, const double *want, size_t n, double tol)
{
    double top = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(want[i]) && want[i] < 0) {
            cr_assert(isinf(got[i]) && got[i] < 0, "%s[%zu] = %g, want -inf", what, i, got[i]);
            continue;
        }
        double e = fabs((double)got[i] - want[i]);
        top = fabs(want[i]) > top ? fabs(want[i]) : top;
        diff = e > diff || isnan(e) ? e : diff;
    }
    double err = top > 0 ? diff / top : diff;
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s: normalised err %.3g (tol %.3g)\n", what, err, tol);
    cr_assert(err <= tol, "%s: normalised error %.3g > %.3g", what, err, tol);
}

static void same_bits(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(memcmp(&got[i], &want[i], sizeof(float)) == 0, "%s[%zu] = %.9g, one rank %.9g", what, i, got[i],
                  want[i]);
}

/* ---- the ops ---- */

/* Rows [r0, r0 + n) of each sequence of x (B, T, X) into out (B, n, X) at row o0 of its n_out rows. */
static void take_rows(float *out, int64_t n_out, int64_t o0, const float *x, int64_t B, int64_t T, int64_t X,
                      int64_t r0, int64_t n)
{
    for (int64_t b = 0; b < B; b++)
        memcpy(out + (b * n_out + o0) * X, x + (b * T + r0) * X, (size_t)(n * X) * sizeof *x);
}

/* The same for row statistics (B, NH, T) -> (B, NH, n_out). */
static void take_stats(float *out, int64_t n_out, int64_t o0, const float *x, int64_t BNH, int64_t T, int64_t r0,
                       int64_t n)
{
    for (int64_t bh = 0; bh < BNH; bh++)
        memcpy(out + bh * n_out + o0, x + bh * T + r0, (size_t)n * sizeof *x);
}

/* cp 2's rank 0 (chunks 0 and 3 of 64 rows: positions 0..63, 192..255) against key blocks of the
 * whole sequence of 256: keys [64, 192) alone (chunk 0 sees none: lse -inf, out 0), keys [0, 64)
 * then [64, 256) merged, and all keys; each against fp64. GQA 4 query heads over 2. */
Test(cp_attention, kv_forward_blocks_and_merge_against_fp64)
{
    shape g = {2, 256, 4, 2, 16};
    int64_t Tc = 64, Tl = 128, W = width(g), C = cols(g);
    tri_device *d = ot_device(2);
    float *qkv = ot_uniform((size_t)(g.B * g.T * W), -1.0f, 1.0f, 1);
    float *ql = ot_floats((size_t)(g.B * Tl * W));
    take_rows(ql, Tl, 0, qkv, g.B, g.T, W, 0, Tc);
    take_rows(ql, Tl, Tc, qkv, g.B, g.T, W, 3 * Tc, Tc);
    int64_t qpos[128], kpos[256];
    for (int64_t t = 0; t < Tl; t++)
        qpos[t] = t < Tc ? t : 3 * Tc + t - Tc;
    for (int64_t j = 0; j < g.T; j++)
        kpos[j] = j;
    shape l = g;
    l.T = Tl;
    tri_flash_rows qr = {Tc, 0, 3 * Tc};
    tri_tensor tq = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, W), ql);
    tri_tensor out = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, C), NULL);
    tri_tensor lse = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, g.B, g.NH, Tl), NULL);
    tri_tensor out2 = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, C), NULL);
    tri_tensor lse2 = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, g.B, g.NH, Tl), NULL);
    size_t no = (size_t)(g.B * Tl * C), nl = (size_t)(g.B * g.NH * Tl);
    double *wo = ot_doubles(no), *wl = ot_doubles(nl);
    struct { int64_t k0, n; } blocks[3] = {{64, 128}, {0, 64}, {64, 192}};
    float *kvb = ot_floats((size_t)(g.B * g.T * W));
    for (int i = 0; i < 3; i++) {
        take_rows(kvb, blocks[i].n, 0, qkv, g.B, g.T, W, blocks[i].k0, blocks[i].n);
        tri_tensor tk = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, g.B, blocks[i].n, W), kvb);
        tri_flash_rows kr = {blocks[i].n, blocks[i].k0, blocks[i].k0 + blocks[i].n};
        cr_assert_eq(tri_op_flash_attention_kv_forward(d, i == 2 ? out2 : out, i == 2 ? lse2 : lse, tq, tk, qr, kr),
                     TRI_OK, "%s", tri_error_message());
        if (i == 1)
            continue; /* merged with block 2 below */
        naive_forward(l, ql, qpos, Tl, kvb, W, kpos + blocks[i].k0, blocks[i].n, wo, wl);
        if (i == 0) {
            close_norm("out, keys [64, 192)", ot_read(d, out), wo, no, FP32_TOL);
            close_norm("lse, keys [64, 192)", ot_read(d, lse), wl, nl, FP32_TOL);
        }
    }
    cr_assert_eq(tri_op_flash_attention_merge(d, out, lse, out2, lse2), TRI_OK, "%s", tri_error_message());
    naive_forward(l, ql, qpos, Tl, qkv, W, kpos, g.T, wo, wl);
    close_norm("out, [0, 64) merged with [64, 256)", ot_read(d, out), wo, no, FP32_TOL);
    close_norm("lse, merged", ot_read(d, lse), wl, nl, FP32_TOL);
    /* all keys in one call against fp64 */
    tri_tensor tall = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, g.B, g.T, W), qkv);
    cr_assert_eq(tri_op_flash_attention_kv_forward(d, out, lse, tq, tall, qr, tri_flash_rows_whole(g.T)), TRI_OK);
    close_norm("out, all keys", ot_read(d, out), wo, no, FP32_TOL);
    /* merging with a block no row sees (lse -inf, out 0) changes nothing, bit for bit */
    float *before = ot_read(d, out), *lbefore = ot_read(d, lse);
    cr_assert_eq(tri_op_fill(d, out2, 0.0f), TRI_OK);
    cr_assert_eq(tri_op_fill(d, lse2, -INFINITY), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_merge(d, out, lse, out2, lse2), TRI_OK);
    same_bits("out merged with an empty block", ot_read(d, out), before, no);
    same_bits("lse merged with an empty block", ot_read(d, lse), lbefore, nl);
}

/* The special case is today's op, bit for bit, forward and both backward passes; the passes over
 * two key blocks (or two query blocks) accumulated in ascending order give the one call's bits. */
static void special_case(shape s, int threads)
{
    int64_t W = width(s), C = cols(s), T = s.T;
    tri_device *d = ot_device(threads);
    float *hq = ot_uniform((size_t)(s.B * T * W), -1.0f, 1.0f, 7), *hg = ot_uniform((size_t)(s.B * T * C), -1, 1, 8);
    tri_tensor qkv = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, T, W), hq);
    tri_tensor dout = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, T, C), hg);
    tri_tensor out = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, T, C), NULL);
    tri_tensor lse = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, T), NULL);
    tri_tensor delta = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, T), NULL);
    tri_tensor dqkv = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, T, W), NULL);
    cr_assert_eq(tri_op_flash_attention_forward(d, out, lse, qkv), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_backward(d, dqkv, delta, dout, qkv, out, lse), TRI_OK);
    float *ro = ot_read(d, out), *rl = ot_read(d, lse), *rdq = ot_read(d, dqkv), *rdl = ot_read(d, delta);
    size_t no = (size_t)(s.B * T * C), nl = (size_t)(s.B * s.NH * T), nq = (size_t)(s.B * T * W);
    tri_flash_rows all = tri_flash_rows_whole(T);
    cr_assert_eq(tri_op_flash_attention_kv_forward(d, out, lse, qkv, qkv, all, all), TRI_OK, "%s", tri_error_message());
    same_bits("kv_forward out", ot_read(d, out), ro, no);
    same_bits("kv_forward lse", ot_read(d, lse), rl, nl);
    cr_assert_eq(tri_op_flash_attention_delta(d, delta, dout, out), TRI_OK);
    same_bits("delta", ot_read(d, delta), rdl, nl);
    cr_assert_eq(tri_op_fill(d, dqkv, NAN), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_kv_backward_dq(d, dqkv, dout, qkv, qkv, lse, delta, all, all, false), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_kv_backward_dkv(d, dqkv, dout, qkv, qkv, lse, delta, all, all, false), TRI_OK);
    same_bits("dq, dk, dv by the two passes", ot_read(d, dqkv), rdq, nq);
    /* the one-pass op (dq into dqkv's q columns, dk, dv into its k|v columns): the same bits */
    cr_assert_eq(tri_op_fill(d, dqkv, NAN), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_kv_backward(d, dqkv, dqkv, dout, qkv, qkv, lse, delta, all, all, false), TRI_OK,
                 "%s", tri_error_message());
    same_bits("dq, dk, dv by the one-pass kv op", ot_read(d, dqkv), rdq, nq);
    if (T % 64 != 0 || T < 128)
        return;
    /* keys in two blocks [0, 64), [64, T) (dq accumulated), queries in two ([0, 64), [64, T): dk, dv) */
    int64_t n2 = T - 64;
    float *k1 = ot_floats((size_t)(s.B * 64 * W)), *k2 = ot_floats((size_t)(s.B * n2 * W));
    take_rows(k1, 64, 0, hq, s.B, T, W, 0, 64);
    take_rows(k2, n2, 0, hq, s.B, T, W, 64, n2);
    tri_tensor tk1 = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, 64, W), k1);
    tri_tensor tk2 = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, n2, W), k2);
    tri_flash_rows r1 = {64, 0, 64}, r2 = {n2, 64, T};
    cr_assert_eq(tri_op_fill(d, dqkv, 0.0f), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_kv_backward_dq(d, dqkv, dout, qkv, tk1, lse, delta, all, r1, false), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_kv_backward_dq(d, dqkv, dout, qkv, tk2, lse, delta, all, r2, true), TRI_OK);
    float *got = ot_read(d, dqkv);
    for (int64_t r = 0; r < s.B * T; r++)
        same_bits("dq over two key blocks", got + r * W, rdq + r * W, (size_t)C);
    /* the one-pass op accumulating into buffers that hold values, keys [64, T) at their positions: the
       two passes' bits (one pass per (b, key/value head) on 1 thread, the two passes where fewer such
       tasks than threads exist) */
    {
        float *h1 = ot_uniform(nq, -1.0f, 1.0f, 9), *h2 = ot_uniform((size_t)(s.B * n2 * W), -1.0f, 1.0f, 10);
        tri_tensor aq = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, T, W), h1);
        tri_tensor ak = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, n2, W), h2);
        tri_tensor bq = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, T, W), h1);
        tri_tensor bk = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, n2, W), h2);
        cr_assert_eq(tri_op_flash_attention_kv_backward_dq(d, aq, dout, qkv, tk2, lse, delta, all, r2, true), TRI_OK);
        cr_assert_eq(tri_op_flash_attention_kv_backward_dkv(d, ak, dout, qkv, tk2, lse, delta, all, r2, true), TRI_OK);
        cr_assert_eq(tri_op_flash_attention_kv_backward(d, bq, bk, dout, qkv, tk2, lse, delta, all, r2, true), TRI_OK,
                     "%s", tri_error_message());
        same_bits("one-pass kv op dq (accumulating, keys [64, T))", ot_read(d, bq), ot_read(d, aq), nq);
        same_bits("one-pass kv op dk, dv (accumulating)", ot_read(d, bk), ot_read(d, ak), (size_t)(s.B * n2 * W));
    }
    /* queries [0, 64) then [64, T) into dk, dv of all keys: the one call's bits for multi-head
     * attention (under grouped-query attention one call sums head by head, each over all its query
     * tiles, so blocks of queries interleave the heads differently) */
    if (s.NH != s.NH_kv)
        return;
    float *q1 = ot_floats((size_t)(s.B * 64 * W)), *q2 = ot_floats((size_t)(s.B * n2 * W));
    float *g1 = ot_floats((size_t)(s.B * 64 * C)), *g2 = ot_floats((size_t)(s.B * n2 * C));
    float *s1 = ot_floats((size_t)(s.B * s.NH * 64)), *s2 = ot_floats((size_t)(s.B * s.NH * n2));
    float *e1 = ot_floats((size_t)(s.B * s.NH * 64)), *e2 = ot_floats((size_t)(s.B * s.NH * n2));
    take_rows(q1, 64, 0, hq, s.B, T, W, 0, 64);
    take_rows(q2, n2, 0, hq, s.B, T, W, 64, n2);
    take_rows(g1, 64, 0, hg, s.B, T, C, 0, 64);
    take_rows(g2, n2, 0, hg, s.B, T, C, 64, n2);
    take_stats(s1, 64, 0, rl, s.B * s.NH, T, 0, 64);
    take_stats(s2, n2, 0, rl, s.B * s.NH, T, 64, n2);
    take_stats(e1, 64, 0, rdl, s.B * s.NH, T, 0, 64);
    take_stats(e2, n2, 0, rdl, s.B * s.NH, T, 64, n2);
    cr_assert_eq(tri_op_fill(d, dqkv, 0.0f), TRI_OK);
    for (int part = 0; part < 2; part++) {
        int64_t n = part ? n2 : 64;
        tri_tensor a = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, n, W), part ? q2 : q1);
        tri_tensor b = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, n, C), part ? g2 : g1);
        tri_tensor c = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, n), part ? s2 : s1);
        tri_tensor e = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, n), part ? e2 : e1);
        cr_assert_eq(tri_op_flash_attention_kv_backward_dkv(d, dqkv, b, a, qkv, c, e, part ? r2 : r1, all, part == 1),
                     TRI_OK, "%s", tri_error_message());
    }
    got = ot_read(d, dqkv);
    for (int64_t r = 0; r < s.B * T; r++)
        same_bits("dk, dv over two query blocks", got + r * W + C, rdq + r * W + C, (size_t)(W - C));
}

Test(cp_attention, special_case_is_todays_op_bit_for_bit)
{
    special_case((shape){2, 192, 4, 4, 16}, 1);
    special_case((shape){2, 256, 4, 4, 16}, 2);
    special_case((shape){2, 256, 4, 2, 16}, 2);
    special_case((shape){1, 100, 2, 1, 8}, 2); /* a partial tile */
    special_case((shape){1, 130, 3, 3, 8}, 3);
}

Test(cp_attention, copy_columns_packs_and_converts)
{
    tri_device *d = ot_device(1);
    float *h = ot_uniform(5 * 7, -1, 1, 3);
    tri_tensor src = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 5, 7), h);
    tri_tensor dst = ot_tensor_as(d, TRI_BF16, tri_tensor_2d(NULL, TRI_F32, 5, 4), NULL);
    cr_assert_eq(tri_op_fill(d, dst, 9.0f), TRI_OK);
    cr_assert_eq(tri_op_copy_columns(d, dst, 1, src, 4, 3), TRI_OK, "%s", tri_error_message());
    float *got = ot_read(d, dst);
    for (int r = 0; r < 5; r++) {
        cr_assert_eq(got[r * 4], 9.0f);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(got[r * 4 + 1 + i], tri_round_bf16(h[r * 7 + 4 + i]));
    }
    cr_assert_eq(tri_op_copy_columns(d, dst, 2, src, 4, 3), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "columns [2, 5)"), "%s", tri_error_message());
}

Test(cp_attention, ops_refuse_misplaced_chunks)
{
    shape s = {1, 128, 2, 2, 8};
    tri_device *d = ot_device(1);
    tri_tensor qkv = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, 1, 128, width(s)), ot_uniform(128 * 48, -1, 1, 2));
    tri_tensor out = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, 1, 128, cols(s)), NULL);
    tri_tensor lse = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, 1, 2, 128), NULL);
    tri_flash_rows all = tri_flash_rows_whole(128), odd = {40, 0, 128}, off = {128, 32, 160};
    cr_assert_eq(tri_op_flash_attention_kv_forward(d, out, lse, qkv, qkv, odd, all), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "qrows {Tc 40"), "%s", tri_error_message());
    cr_assert_eq(tri_op_flash_attention_kv_forward(d, out, lse, qkv, qkv, all, off), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "multiples of 64"), "%s", tri_error_message());
    tri_tensor narrow = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, 1, 128, 16), NULL);
    cr_assert_eq(tri_op_flash_attention_kv_forward(d, out, lse, qkv, narrow, all, all), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "Wk >= 2 C_kv = 32"), "%s", tri_error_message());
}

/* ---- the algorithm on thread ranks ---- */

typedef struct rank_side {
    tri_device *dev;
    tri_tensor qkv, dout, atty, lse, dqkv, delta;
    tri_tensor atty1, lse1; /* the one-rank forward's rows, fed to the ring's backward */
    tri_cp_scratch sc;
} rank_side;

typedef struct cp_case {
    shape g; /* the global problem */
    int cp;
    tri_cp_comm_type type;
    bool deterministic;
    tri_dtype dt;
    rank_side rank[MAXCP];
    uint64_t sent[MAXCP];
    uint64_t payload[MAXCP][TRI_COMM_KINDS]; /* tri_comm_bytes of both passes, per kind */
} cp_case;

/* The ring's results depend on the order of its merges and sums; to bound its backward against one
 * rank's by the order of additions alone, it is fed the one-rank forward's out and lse (the same
 * P and dS terms), and its own forward is checked against fp64. */
static bool is_ring(const cp_case *c)
{
    return c->type == TRI_CP_COMM_P2P && !c->deterministic && c->cp > 1;
}

static int rank_fn(int rank, int size, tri_comm *comm, void *arg)
{
    cp_case *c = arg;
    rank_side *r = &c->rank[rank];
    tri_cp cp = {comm, size, rank, c->type, c->deterministic};
    uint64_t before = tri_comm_wire_bytes(comm, TRI_COMM_KINDS), pay[TRI_COMM_KINDS];
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        pay[k] = tri_comm_bytes(comm, (tri_comm_kind)k);
    bool feed = is_ring(c);
    int rc = tri_cp_attention_forward(r->dev, &cp, r->atty, r->lse, r->qkv, &r->sc);
    if (!rc)
        rc = tri_cp_attention_backward(r->dev, &cp, r->dqkv, r->delta, r->dout, r->qkv, feed ? r->atty1 : r->atty,
                                       feed ? r->lse1 : r->lse, &r->sc);
    c->sent[rank] = tri_comm_wire_bytes(comm, TRI_COMM_KINDS) - before;
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        c->payload[rank][k] = tri_comm_bytes(comm, (tri_comm_kind)k) - pay[k];
    return rc;
}

/* Rank q's local rows (its chunks q and 2cp-1-q) of a global (B, T, X) array. */
static float *local_rows(const float *x, shape g, int cp, int q, int64_t X)
{
    int64_t Tc = g.T / (2 * cp), Tl = 2 * Tc;
    float *out = ot_floats((size_t)(g.B * Tl * X));
    take_rows(out, Tl, 0, x, g.B, g.T, X, q * Tc, Tc);
    take_rows(out, Tl, Tc, x, g.B, g.T, X, (2 * cp - 1 - q) * Tc, Tc);
    return out;
}

static float *local_stats(const float *x, shape g, int cp, int q)
{
    int64_t Tc = g.T / (2 * cp), Tl = 2 * Tc;
    float *out = ot_floats((size_t)(g.B * g.NH * Tl));
    take_stats(out, Tl, 0, x, g.B * g.NH, g.T, q * Tc, Tc);
    take_stats(out, Tl, Tc, x, g.B * g.NH, g.T, (2 * cp - 1 - q) * Tc, Tc);
    return out;
}

static void run_cp(shape g, int cp, tri_cp_comm_type type, bool det, tri_dtype dt)
{
    int64_t W = width(g), C = cols(g), KV = 2 * g.NH_kv * g.HS, Tl = g.T / cp;
    float *hq = ot_uniform((size_t)(g.B * g.T * W), -1.0f, 1.0f, 21);
    float *hg = ot_uniform((size_t)(g.B * g.T * C), -1.0f, 1.0f, 22);
    /* one rank, today's op */
    tri_device *rd = ot_device(1);
    tri_tensor qkv = ot_tensor_as(rd, dt, tri_tensor_3d(NULL, TRI_F32, g.B, g.T, W), hq);
    tri_tensor dout = ot_tensor_as(rd, dt, tri_tensor_3d(NULL, TRI_F32, g.B, g.T, C), hg);
    tri_tensor out = ot_tensor_as(rd, dt, tri_tensor_3d(NULL, TRI_F32, g.B, g.T, C), NULL);
    tri_tensor lse = ot_tensor(rd, tri_tensor_3d(NULL, TRI_F32, g.B, g.NH, g.T), NULL);
    tri_tensor delta = ot_tensor(rd, tri_tensor_3d(NULL, TRI_F32, g.B, g.NH, g.T), NULL);
    tri_tensor dqkv = ot_tensor_as(rd, dt, tri_tensor_3d(NULL, TRI_F32, g.B, g.T, W), NULL);
    cr_assert_eq(tri_op_flash_attention_forward(rd, out, lse, qkv), TRI_OK);
    cr_assert_eq(tri_op_flash_attention_backward(rd, dqkv, delta, dout, qkv, out, lse), TRI_OK);
    float *ro = ot_read(rd, out), *rl = ot_read(rd, lse), *rdq = ot_read(rd, dqkv);
    float *hqr = ot_read(rd, qkv), *hgr = ot_read(rd, dout); /* the inputs as stored (bf16-rounded) */
    /* cp ranks */
    cp_case *c = calloc(1, sizeof *c);
    c->g = g, c->cp = cp, c->type = type, c->deterministic = det, c->dt = dt;
    for (int q = 0; q < cp; q++) {
        rank_side *r = &c->rank[q];
        r->dev = ot_device(1);
        r->qkv = ot_tensor_as(r->dev, dt, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, W), local_rows(hqr, g, cp, q, W));
        r->dout = ot_tensor_as(r->dev, dt, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, C), local_rows(hgr, g, cp, q, C));
        r->atty = ot_tensor_as(r->dev, dt, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, C), NULL);
        r->lse = ot_tensor(r->dev, tri_tensor_3d(NULL, TRI_F32, g.B, g.NH, Tl), NULL);
        r->delta = ot_tensor(r->dev, tri_tensor_3d(NULL, TRI_F32, g.B, g.NH, Tl), NULL);
        r->dqkv = ot_tensor_as(r->dev, dt, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, W), NULL);
        r->atty1 = ot_tensor_as(r->dev, dt, tri_tensor_3d(NULL, TRI_F32, g.B, Tl, C), local_rows(ro, g, cp, q, C));
        r->lse1 = ot_tensor(r->dev, tri_tensor_3d(NULL, TRI_F32, g.B, g.NH, Tl), local_stats(rl, g, cp, q));
        tri_cp ctx = {NULL, cp, q, type, det};
        tri_cp_shape s = {{g.B, Tl, g.NH, g.NH_kv, g.HS}, dt};
        int64_t an, fn; /* the numbers need no comm (the partitioner's plan) */
        cr_assert_eq(tri_cp_scratch_numel(&ctx, &s, &an, &fn), TRI_OK, "%s", tri_error_message());
        r->sc.act = ot_tensor_as(r->dev, dt, tri_tensor_1d(NULL, TRI_F32, an), NULL);
        r->sc.f32 = ot_tensor(r->dev, tri_tensor_1d(NULL, TRI_F32, fn), NULL);
        /* the partitioner plans exactly what the layer carves */
        tri_cp_dims pd = {.B = g.B, .T = g.T, .cp = cp, .C_l = C, .C_kv_l = g.NH_kv * g.HS, .NH_l = g.NH,
                          .e = (int)tri_dtype_size(dt), .type = type, .deterministic = det};
        int64_t pf, pb;
        tri_cp_scratch_bytes(&pd, &pf, &pb);
        cr_assert_eq(pb, cp > 1 ? an * (int64_t)tri_dtype_size(dt) + 4 * fn : 0,
                     "cp %d: planned scratch %lld bytes, the layer carves %lld + %lld f32 elements", cp, (long long)pb,
                     (long long)an, (long long)fn);
    }
    cr_assert_eq(tri_run_thread_ranks(cp, rank_fn, c), TRI_OK, "%s", tri_error_message());
    double *adkv = NULL, *adq = NULL, *nout = NULL, *nlse = NULL;
    bool ringed = is_ring(c);
    if (!det) {
        adkv = ot_doubles((size_t)(g.B * g.T * KV));
        adq = ringed ? ot_doubles((size_t)(g.B * g.T * C)) : NULL;
        naive_dkv_magnitudes(g, hqr, hgr, adkv, adq);
    }
    if (ringed) { /* fp64 of the whole sequence, from the inputs as stored */
        int64_t *pos = calloc((size_t)g.T, sizeof *pos);
        for (int64_t t = 0; t < g.T; t++)
            pos[t] = t;
        nout = ot_doubles((size_t)(g.B * g.T * C));
        nlse = ot_doubles((size_t)(g.B * g.NH * g.T));
        naive_forward(g, hqr, pos, g.T, hqr, W, pos, g.T, nout, nlse);
        free(pos);
    }
    int64_t rep = g.NH / g.NH_kv, N = rep * g.T + 4;
    double worst = 0.0;
    for (int q = 0; q < cp; q++) {
        rank_side *r = &c->rank[q];
        char what[96];
        if (ringed) {
            /* the ring's forward against fp64: test_flash_attention's derived FP32_TOL, plus in bf16 the
               roundings of the partials: the own block's out, then per merge the block's partial and the
               merged out, 2 cp - 1 roundings of at most 2^-9 of a value <= max |out| */
            int64_t Tc = Tl / 2, n = g.B * Tl * C, ns = g.B * g.NH * Tl;
            double *wo = ot_doubles((size_t)n), *wl = ot_doubles((size_t)ns);
            for (int64_t row = 0; row < g.B * Tl; row++) {
                int64_t b = row / Tl, t = row % Tl, gt = t < Tc ? q * Tc + t : (2 * cp - 1 - q) * Tc + t - Tc;
                memcpy(wo + row * C, nout + (b * g.T + gt) * C, (size_t)C * sizeof *wo);
                for (int64_t h = 0; h < g.NH; h++)
                    wl[(b * g.NH + h) * Tl + t] = nlse[(b * g.NH + h) * g.T + gt];
            }
            snprintf(what, sizeof what, "cp %d rank %d atty (ring)", cp, q);
            close_norm(what, ot_read(r->dev, r->atty), wo, (size_t)n,
                       FP32_TOL + (dt == TRI_BF16 ? (2.0 * cp - 1) * 0x1p-9 : 0.0));
            snprintf(what, sizeof what, "cp %d rank %d lse (ring)", cp, q);
            close_norm(what, ot_read(r->dev, r->lse), wl, (size_t)ns, FP32_TOL);
        } else {
            snprintf(what, sizeof what, "cp %d rank %d atty", cp, q);
            same_bits(what, ot_read(r->dev, r->atty), local_rows(ro, g, cp, q, C), (size_t)(g.B * Tl * C));
            snprintf(what, sizeof what, "cp %d rank %d lse", cp, q);
            same_bits(what, ot_read(r->dev, r->lse), local_stats(rl, g, cp, q), (size_t)(g.B * g.NH * Tl));
        }
        float *got = ot_read(r->dev, r->dqkv), *want = local_rows(rdq, g, cp, q, W);
        if (det) {
            snprintf(what, sizeof what, "cp %d rank %d dqkv (deterministic)", cp, q);
            same_bits(what, got, want, (size_t)(g.B * Tl * W));
            continue;
        }
        for (int64_t row = 0; row < g.B * Tl; row++) {
            int64_t b = row / Tl, t = row % Tl, Tc = Tl / 2;
            int64_t gt = t < Tc ? q * Tc + t : (2 * cp - 1 - q) * Tc + t - Tc;
            if (!ringed) {
                snprintf(what, sizeof what, "cp %d rank %d dq (all_gather)", cp, q);
                same_bits(what, got + row * W, want + row * W, (size_t)C);
            }
            for (int64_t i = 0; i < C && ringed; i++) {
                /* the ring sums dq's terms block by block (own block, then ranks i-1, i-2, ...): the same
                   f32 terms in another order, 2 N u A; in bf16 each of the cp accumulations rounds the
                   partial sum (<= A) once, and the one rank rounds its result once */
                double a = adq[(b * g.T + gt) * C + i], e = fabs((double)got[row * W + i] - want[row * W + i]);
                double tol = 2.0 * (double)N * 0x1p-24 * a;
                if (dt == TRI_BF16)
                    tol += (cp + 1) * 0x1p-8 * a;
                worst = a > 0 && e / a > worst ? e / a : worst;
                cr_assert(e <= tol, "cp %d rank %d dq[%lld, %lld] = %.9g, one rank %.9g: |diff| %.3g > %.3g (ring)", cp,
                          q, (long long)row, (long long)i, got[row * W + i], want[row * W + i], e, tol);
            }
            for (int64_t i = 0; i < KV; i++) {
                double a = adkv[(b * g.T + gt) * KV + i], e = fabs((double)got[row * W + C + i] - want[row * W + C + i]);
                double tol = 2.0 * (double)N * 0x1p-24 * a;
                if (dt == TRI_BF16) /* each rounded once to bf16 from values within tol: one bf16 ulp more */
                    tol += 0x1p-8 * fabs((double)want[row * W + C + i]) * 2.0;
                worst = a > 0 && e / a > worst ? e / a : worst;
                cr_assert(e <= tol, "cp %d rank %d d%s[%lld, %lld] = %.9g, one rank %.9g: |diff| %.3g > %.3g", cp, q,
                          i < KV / 2 ? "k" : "v", (long long)row, (long long)i, got[row * W + C + i],
                          want[row * W + C + i], e, tol);
            }
        }
    }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "cp %d %s %s: all_gather dk/dv worst |diff| / A %.3g (bound 2 N u = %.3g)\n", cp,
                det ? "deterministic" : "all_gather", dt == TRI_BF16 ? "bf16" : "f32", worst, 2.0 * N * 0x1p-24);
    /* wire bytes each rank sent, as cp_attention.h states */
    uint64_t es = tri_dtype_size(dt), cpu = (uint64_t)cp;
    uint64_t fwd = (uint64_t)(g.B * Tl * KV) * es * (cpu - 1);
    uint64_t bwd = det ? ((uint64_t)(g.B * Tl * (W + C)) * es + 2 * (uint64_t)(g.B * g.NH * Tl) * 4) * (cpu - 1)
                       : (uint64_t)(g.B * Tl * KV) * es * (cpu - 1) + (uint64_t)(g.B * Tl * KV) * 4 * (cpu - 1);
    if (ringed)
        bwd = (uint64_t)(g.B * Tl * KV) * es * (cpu - 1) + (uint64_t)(g.B * Tl * KV) * 4 * cpu;
    for (int q = 0; q < cp; q++)
        cr_assert_eq(c->sent[q], fwd + bwd, "cp %d rank %d sent %llu bytes, expected %llu", cp, q,
                     (unsigned long long)c->sent[q], (unsigned long long)(fwd + bwd));
    /* payload bytes per kind: exactly the partitioner's tri_cp_layer_traffic */
    tri_cp_dims pd = {.B = g.B, .T = g.T, .cp = cp, .C_l = C, .C_kv_l = g.NH_kv * g.HS, .NH_l = g.NH,
                      .e = (int)es, .type = type, .deterministic = det};
    uint64_t pf[TRI_COMM_KINDS], pb[TRI_COMM_KINDS];
    int steps;
    tri_cp_layer_traffic(&pd, pf, pb, &steps);
    for (int q = 0; q < cp; q++)
        for (int k = 0; k < TRI_COMM_KINDS; k++)
            cr_assert_eq(c->payload[q][k], pf[k] + pb[k], "cp %d rank %d: %s payload %llu bytes, planned %llu", cp, q,
                         tri_comm_kind_name((tri_comm_kind)k), (unsigned long long)c->payload[q][k],
                         (unsigned long long)(pf[k] + pb[k]));
    free(c);
}

Test(cp_attention, deterministic_is_one_rank_bit_for_bit)
{
    run_cp((shape){2, 256, 4, 4, 16}, 2, TRI_CP_COMM_ALL_GATHER, true, TRI_F32); /* Tc 64, MHA */
    run_cp((shape){2, 512, 4, 2, 16}, 2, TRI_CP_COMM_P2P, true, TRI_F32);        /* Tc 128, GQA */
    run_cp((shape){2, 512, 4, 2, 16}, 4, TRI_CP_COMM_ALL_GATHER, true, TRI_F32); /* Tc 64, GQA */
    run_cp((shape){2, 1024, 2, 2, 8}, 4, TRI_CP_COMM_P2P, true, TRI_F32);        /* Tc 128, MHA */
    run_cp((shape){2, 512, 4, 2, 16}, 4, TRI_CP_COMM_ALL_GATHER, true, TRI_BF16);
}

/* cp 1 is today's layout: both algorithms give the fused op's bits (the gathers and the
 * reduce-scatter of one rank move nothing). */
Test(cp_attention, cp1_is_the_fused_op)
{
    run_cp((shape){2, 256, 4, 2, 16}, 1, TRI_CP_COMM_ALL_GATHER, true, TRI_F32);
    run_cp((shape){2, 256, 4, 2, 16}, 1, TRI_CP_COMM_ALL_GATHER, false, TRI_F32);
}

typedef struct short_case {
    tri_tensor qkv, out, lse;
    tri_cp_scratch sc;
    tri_device *d;
} short_case;

static int short_fn(int rank, int size, tri_comm *comm, void *arg)
{
    short_case *c = arg;
    tri_cp cp = {comm, size, rank, TRI_CP_COMM_ALL_GATHER, false};
    return tri_cp_attention_forward(c->d, &cp, c->out, c->lse, c->qkv, &c->sc);
}

/* A scratch one element short of tri_cp_scratch_numel is refused before any communication. */
Test(cp_attention, refuses_short_scratch)
{
    shape g = {1, 128, 2, 2, 8};
    tri_cp cp = {NULL, 1, 0, TRI_CP_COMM_ALL_GATHER, false};
    tri_cp_shape s = {{1, 128, 2, 2, 8}, TRI_F32};
    int64_t an, fn;
    cr_assert_eq(tri_cp_scratch_numel(&cp, &s, &an, &fn), TRI_OK, "%s", tri_error_message());
    short_case c;
    c.d = ot_device(1);
    c.qkv = ot_tensor(c.d, tri_tensor_3d(NULL, TRI_F32, 1, 128, width(g)), ot_uniform((size_t)(128 * width(g)), -1, 1, 4));
    c.out = ot_tensor(c.d, tri_tensor_3d(NULL, TRI_F32, 1, 128, cols(g)), NULL);
    c.lse = ot_tensor(c.d, tri_tensor_3d(NULL, TRI_F32, 1, 2, 128), NULL);
    c.sc.act = ot_tensor(c.d, tri_tensor_1d(NULL, TRI_F32, an - 1), NULL);
    c.sc.f32 = ot_tensor(c.d, tri_tensor_1d(NULL, TRI_F32, fn), NULL);
    cr_assert_eq(tri_run_thread_ranks(1, short_fn, &c), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "tri_cp_scratch_numel"), "%s", tri_error_message());
    c.sc.act = ot_tensor(c.d, tri_tensor_1d(NULL, TRI_F32, an), NULL);
    cr_assert_eq(tri_run_thread_ranks(1, short_fn, &c), TRI_OK, "%s", tri_error_message());
}

Test(cp_attention, all_gather_within_derived_bound)
{
    run_cp((shape){2, 256, 4, 4, 16}, 2, TRI_CP_COMM_ALL_GATHER, false, TRI_F32);
    run_cp((shape){2, 512, 4, 2, 16}, 4, TRI_CP_COMM_ALL_GATHER, false, TRI_F32);
    run_cp((shape){2, 1024, 2, 1, 8}, 4, TRI_CP_COMM_ALL_GATHER, false, TRI_F32);
    run_cp((shape){2, 512, 4, 2, 16}, 2, TRI_CP_COMM_ALL_GATHER, false, TRI_BF16);
}

/* The p2p ring: forward against fp64, backward (from the one-rank forward's out and lse) within the
 * order-of-addition bounds of one rank, bytes and scratch exactly as planned. */
Test(cp_attention, p2p_ring_within_derived_bound)
{
    run_cp((shape){2, 256, 4, 4, 16}, 2, TRI_CP_COMM_P2P, false, TRI_F32);  /* Tc 64, MHA */
    run_cp((shape){2, 512, 4, 2, 16}, 2, TRI_CP_COMM_P2P, false, TRI_BF16); /* Tc 128, GQA */
    run_cp((shape){2, 512, 4, 2, 16}, 4, TRI_CP_COMM_P2P, false, TRI_F32);  /* Tc 64, GQA */
    run_cp((shape){2, 1024, 2, 1, 8}, 4, TRI_CP_COMM_P2P, false, TRI_F32);  /* Tc 128, GQA 2/1 */
    run_cp((shape){2, 1024, 2, 2, 8}, 4, TRI_CP_COMM_P2P, false, TRI_BF16); /* Tc 128, MHA */
}

Test(cp_attention, refuses_bad_layouts)
{
    tri_comm dummy = {0};
    dummy.size = 4;
    tri_cp_shape s = {{2, 96, 4, 2, 16}, TRI_F32}; /* T_l 96: Tc 48 */
    tri_cp cp = {&dummy, 4, 1, TRI_CP_COMM_ALL_GATHER, false};
    int64_t a, f;
    cr_assert_eq(tri_cp_scratch_numel(&cp, &s, &a, &f), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "seq-length 384 at cp 4 gives chunks of Tc = T / (2 cp) = 48"), "%s",
              tri_error_message());
    s.local.T = 128;
    cp.cp = 3; /* the group has 4 ranks */
    cr_assert_eq(tri_cp_check(&cp, &s), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "the cp group has 4 ranks, cp is 3"), "%s", tri_error_message());
    cp.cp = 4;
    cp.cp_rank = 4;
    cr_assert_eq(tri_cp_check(&cp, &s), TRI_EINVAL);
    cp.cp_rank = 1;
    cp.type = TRI_CP_COMM_P2P; /* the ring, in either mode */
    cr_assert_eq(tri_cp_check(&cp, &s), TRI_OK, "%s", tri_error_message());
    cp.deterministic = true;
    cr_assert_eq(tri_cp_check(&cp, &s), TRI_OK, "%s", tri_error_message());
}
