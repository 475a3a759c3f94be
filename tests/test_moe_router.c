/* tests/test_moe_router.c - the Mixture-of-Experts router ops (engine/device/ops/moe_router_math.h)
 * on the CPU backend against a float64 reference written from the formulas (docs/moe.md "The
 * router"), against finite differences of that reference, and against PyTorch running Hugging
 * Face's routing and load_balancing_loss_func (tests/moe_router_torch.py).
 *
 * Tolerances, derived: the op computes in fp32 what the reference computes in float64. A row of E
 * scores goes through an exp (relative error below 2e-7, engine/core/math.h), a sum of E terms
 * (error below E 2^-24 relative to the sum) and a division, so each score is within (E + 8) 2^-24
 * relative; the K weights' renormalisation adds K + 2 roundings; the backward's dot products of K and
 * E terms add as many. REL(E) = 4 (2 E + 16) 2^-24 covers the whole chain with a factor 4 of margin
 * (E = 8: 1.9e-6). The losses sum N rows in double after fp32 rows: REL(E) too. The selections, the
 * counts, the capacity decisions and the bias update are exact (integers, or sign steps). */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device/ops/moe_router_math.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

static double rel(int64_t E)
{
    return 4.0 * (2.0 * (double)E + 16.0) * ldexp(1.0, -24);
}

static void teardown(void)
{
    ot_teardown();
}

TestSuite(moe_router, .fini = teardown);

#define OK(call) cr_assert_eq((call), TRI_OK, "%s", tri_error_message())

/* ---- the float64 reference, from the formulas ---- */

/* scores s(E) of one row */
static void ref_scores(double *s, const double *l, int64_t E, int sig)
{
    double mx = l[0], sum = 0.0;
    for (int64_t e = 0; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    for (int64_t e = 0; e < E; e++) {
        s[e] = sig ? 1.0 / (1.0 + exp(-l[e])) : exp(l[e] - mx);
        sum += s[e];
    }
    if (!sig)
        for (int64_t e = 0; e < E; e++)
            s[e] /= sum;
}

/* idx(K) and w(K) of one row: repeated argmax of s + bias, lowest index on ties */
static void ref_route_row(int32_t *idx, double *w, const double *s, const float *bias, int64_t E, int K, int norm,
                          int sig)
{
    double sum = 0.0;
    for (int j = 0; j < K; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= idx[i] == e;
            double key = s[e] + (bias ? bias[e] : 0.0);
            if (!taken && (best < 0 || key > s[best] + (bias ? bias[best] : 0.0)))
                best = e;
        }
        idx[j] = (int32_t)best;
        w[j] = s[best];
        sum += s[best];
    }
    for (int j = 0; norm && j < K; j++)
        w[j] /= sum + (sig ? 1e-20 : 0.0);
}

/* What a test case runs on the CPU device: logits (N, E) in, every output read back. */
typedef struct router_case {
    int64_t N, E;
    int K, sig, norm;
    const float *logits, *bias; /* bias NULL: none */
    float *scores, *w, *dlogits;
    int32_t *idx;
} router_case;

static tri_device *dev(void)
{
    static tri_device *d;
    if (!d)
        d = ot_device(1);
    return d;
}

static void run_forward(router_case *c)
{
    tri_device *d = dev();
    int64_t N = c->N, E = c->E, K = c->K;
    tri_tensor logits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), c->logits);
    tri_tensor scores = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), NULL);
    tri_tensor idx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), NULL);
    tri_tensor w = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, K), NULL);
    tri_tensor bias = c->bias ? ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, E), c->bias) : tri_tensor_none();
    OK(tri_op_moe_router_forward(d, idx, w, scores, logits, bias, c->sig ? TRI_MOE_SIGMOID : TRI_MOE_SOFTMAX,
                                 c->norm));
    c->scores = ot_floats((size_t)(N * E));
    c->w = ot_floats((size_t)(N * K));
    c->idx = ot_ints((size_t)(N * K));
    ot_download(d, c->scores, scores);
    ot_download(d, c->w, w);
    ot_download(d, c->idx, idx);
}

/* The forward against the reference: scores and weights within REL(E), selections exact. */
static void check_forward(const router_case *c, const char *what)
{
    int64_t N = c->N, E = c->E, K = c->K;
    double *s = ot_doubles((size_t)(N * E)), *w = ot_doubles((size_t)(N * K));
    int32_t *idx = ot_ints((size_t)(N * K));
    for (int64_t n = 0; n < N; n++) {
        double *l = ot_widen(c->logits + n * E, (size_t)E);
        ref_scores(s + n * E, l, E, c->sig);
        ref_route_row(idx + n * K, w + n * K, s + n * E, c->bias, E, c->K, c->norm, c->sig);
    }
    cr_assert(ot_close(what, c->scores, s, (size_t)(N * E), 1e-3, rel(E)), "%s: scores", what);
    for (int64_t i = 0; i < N * K; i++)
        cr_assert_eq(c->idx[i], idx[i], "%s: selection %lld is expert %d, the reference's %d", what, (long long)i,
                     c->idx[i], idx[i]);
    cr_assert(ot_close(what, c->w, w, (size_t)(N * K), 1e-3, rel(E)), "%s: weights", what);
}

Test(moe_router, forward_against_float64_every_score_function_k_and_norm)
{
    int64_t N = 37, E = 8;
    int Ks[3] = {1, 2, 8};
    const float *logits = ot_uniform((size_t)(N * E), -3, 3, 11);
    for (int sig = 0; sig < 2; sig++)
        for (int k = 0; k < 3; k++)
            for (int norm = 0; norm < 2; norm++) {
                router_case c = {.N = N, .E = E, .K = Ks[k], .sig = sig, .norm = norm, .logits = logits};
                run_forward(&c);
                char what[96];
                snprintf(what, sizeof what, "%s K %d norm %d", sig ? "sigmoid" : "softmax", Ks[k], norm);
                check_forward(&c, what);
                /* selection order: descending score; with K = E every expert once; norm sums to 1 */
                for (int64_t n = 0; n < N; n++) {
                    double sum = 0.0;
                    for (int j = 0; j < Ks[k]; j++) {
                        sum += c.w[n * Ks[k] + j];
                        if (j > 0)
                            cr_assert(c.w[n * Ks[k] + j - 1] >= c.w[n * Ks[k] + j], "%s: descending", what);
                    }
                    if (norm)
                        cr_assert(fabs(sum - 1.0) <= rel(E) * Ks[k], "%s: token %lld sums to %.9g", what,
                                  (long long)n, sum);
                }
            }
}

Test(moe_router, ties_go_to_the_lower_expert_index)
{
    /* row 0: all equal; row 1: 3 tied at the top (experts 1, 2, 4), row 2: the tie below the top */
    float logits[3 * 6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, /**/ 0.0f, 2.0f, 2.0f, -1.0f, 2.0f, 1.0f,
                           /**/ 3.0f, 1.0f, 0.0f, 1.0f, 1.0f, -2.0f};
    int32_t want[3][3] = {{0, 1, 2}, {1, 2, 4}, {0, 1, 3}};
    for (int sig = 0; sig < 2; sig++) {
        router_case c = {.N = 3, .E = 6, .K = 3, .sig = sig, .norm = 1, .logits = logits};
        run_forward(&c);
        for (int n = 0; n < 3; n++)
            for (int j = 0; j < 3; j++)
                cr_assert_eq(c.idx[n * 3 + j], want[n][j], "%s row %d choice %d: expert %d, expected %d",
                             sig ? "sigmoid" : "softmax", n, j, c.idx[n * 3 + j], want[n][j]);
        check_forward(&c, sig ? "ties, sigmoid" : "ties, softmax");
    }
}

Test(moe_router, expert_bias_changes_the_selection_not_the_weights)
{
    int64_t N = 4, E = 5;
    float logits[4 * 5] = {2.0f, 1.0f, 0.0f, -1.0f, -2.0f, /**/ 0.0f, 0.5f, 0.1f, 0.2f, 0.4f,
                           /**/ 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, /**/ -1.0f, 0.5f, 3.0f, 0.0f, 0.0f};
    float bias[5] = {0.0f, 0.0f, 0.0f, 0.0f, 2.0f}; /* expert 4 pushed to the top everywhere */
    for (int sig = 0; sig < 2; sig++) {
        router_case plain = {.N = N, .E = E, .K = 2, .sig = sig, .norm = 0, .logits = logits};
        router_case biased = plain;
        biased.bias = bias;
        run_forward(&plain);
        run_forward(&biased);
        check_forward(&biased, sig ? "biased, sigmoid" : "biased, softmax");
        cr_assert(ot_same_bits("scores do not see the bias", biased.scores, plain.scores, (size_t)(N * E)));
        for (int64_t n = 0; n < N; n++) {
            cr_assert_eq(biased.idx[n * 2], 4, "token %lld: the bias selects expert 4 first", (long long)n);
            cr_assert_neq(plain.idx[n * 2], 4, "token %lld: without the bias expert 4 is not first", (long long)n);
            for (int j = 0; j < 2; j++) /* unbiased scores as weights, bit for bit */
                cr_assert_eq(biased.w[n * 2 + j], biased.scores[n * E + biased.idx[n * 2 + j]]);
        }
        /* token 0 under the bias: expert 4 then expert 0 (2 + s_4 against s_0) */
        cr_assert_eq(biased.idx[1], 0);
    }
}

/* ---- capacity ---- */

typedef struct qitem {
    int64_t n;
    float w;
} qitem;

static int by_weight(const void *a, const void *b)
{
    const qitem *x = a, *y = b;
    if (x->w != y->w)
        return x->w > y->w ? -1 : 1;
    return x->n < y->n ? -1 : 1;
}

static int by_position(const void *a, const void *b)
{
    const qitem *x = a, *y = b;
    return x->n < y->n ? -1 : 1;
}

/* Megatron's drop: per expert, its selections sorted by the policy, the first `cap` kept. */
static void ref_capacity(int32_t *kept, int32_t *tokens, int32_t *routed, const int32_t *idx, const float *w,
                         int64_t N, int K, int64_t E, int64_t cap, int policy)
{
    qitem *q = malloc((size_t)N * sizeof *q);
    for (int64_t e = 0; e < E; e++) {
        int64_t c = 0;
        for (int64_t s = 0; s < N * K; s++)
            if (idx[s] == e)
                q[c++] = (qitem){s / K, w[s]};
        qsort(q, (size_t)c, sizeof *q, policy == TRI_MOE_DROP_PROBS ? by_weight : by_position);
        routed[e] = (int32_t)c;
        tokens[e] = (int32_t)(cap > 0 && cap < c ? cap : c);
        for (int64_t r = 0; r < c; r++)
            for (int j = 0; j < K; j++)
                if (idx[q[r].n * K + j] == e)
                    kept[q[r].n * K + j] = cap <= 0 || r < cap ? (int32_t)e : -1 - (int32_t)e;
    }
    free(q);
}

static void run_capacity(int64_t N, int K, int64_t E, const int32_t *idx_h, const float *w_h, int64_t cap, int policy,
                         int32_t *kept, int32_t *tokens, int32_t *routed)
{
    tri_device *d = dev();
    tri_tensor idx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), idx_h);
    tri_tensor w = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, K), w_h);
    tri_tensor k = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), NULL);
    tri_tensor t = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), NULL), r = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), NULL);
    OK(tri_op_moe_router_capacity(d, k, t, r, idx, w, cap, policy));
    ot_download(d, kept, k);
    ot_download(d, tokens, t);
    ot_download(d, routed, r);
}

Test(moe_router, capacity_is_megatrons_rounding)
{
    cr_assert_eq(tri_moe_capacity(10, 2, 4, 1.0), 5);
    cr_assert_eq(tri_moe_capacity(10, 2, 4, 1.1), 6);  /* ceil(5.5) */
    cr_assert_eq(tri_moe_capacity(10, 2, 4, 0.3), 2);  /* ceil(1.5) */
    cr_assert_eq(tri_moe_capacity(7, 2, 8, 1.0), 2);   /* ceil(1.75) */
    cr_assert_eq(tri_moe_capacity(8, 1, 4, 1.0), 2);
    cr_assert_eq(tri_moe_capacity(12, 1, 4, 0.5), 2);  /* ceil((12 / 4) * 0.5) = ceil(1.5) */
}

Test(moe_router, capacity_drops_exactly_the_expected_selections)
{
    /* hand-made: 6 tokens, K 1, E 3, every token to expert 0 but token 4 (expert 2); capacity 2 */
    int32_t idx[6] = {0, 0, 0, 0, 2, 0};
    float w[6] = {0.5f, 0.9f, 0.7f, 0.9f, 0.8f, 0.6f};
    int32_t kept[6], tok[3], routed[3];
    run_capacity(6, 1, 3, idx, w, 2, TRI_MOE_DROP_PROBS, kept, tok, routed);
    /* by weight: tokens 1 and 3 (0.9, tie to the earlier token first) kept, 0, 2, 5 dropped */
    int32_t want_probs[6] = {-1, 0, -1, 0, 2, -1};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(kept[i], want_probs[i], "probs: token %d kept_idx %d, expected %d", i, kept[i], want_probs[i]);
    cr_assert(tok[0] == 2 && tok[1] == 0 && tok[2] == 1 && routed[0] == 5 && routed[1] == 0 && routed[2] == 1);
    run_capacity(6, 1, 3, idx, w, 2, TRI_MOE_DROP_POSITION, kept, tok, routed);
    int32_t want_pos[6] = {0, 0, -1, -1, 2, -1};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(kept[i], want_pos[i], "position: token %d kept_idx %d, expected %d", i, kept[i], want_pos[i]);
    /* the weight tie decided by token order: capacity 1 keeps token 1, not token 3 */
    run_capacity(6, 1, 3, idx, w, 1, TRI_MOE_DROP_PROBS, kept, tok, routed);
    cr_assert(kept[1] == 0 && kept[3] == -1 && tok[0] == 1);

    /* routed selections: every policy and capacity against the sort-based reference */
    int64_t N = 41, E = 6;
    int K = 2;
    router_case c = {.N = N, .E = E, .K = K, .sig = 0, .norm = 1, .logits = ot_uniform((size_t)(N * E), -2, 2, 5)};
    run_forward(&c);
    int32_t *k = ot_ints((size_t)(N * K)), *rk = ot_ints((size_t)(N * K)), t[6], r[6], rt[6], rr[6];
    double cfs[4] = {0.0, 0.5, 1.0, 1.25};
    for (int policy = 0; policy < 2; policy++)
        for (int f = 0; f < 4; f++) {
            int64_t cap = cfs[f] > 0 ? tri_moe_capacity(N, K, E, cfs[f]) : 0;
            run_capacity(N, K, E, c.idx, c.w, cap, policy, k, t, r);
            ref_capacity(rk, rt, rr, c.idx, c.w, N, K, E, cap, policy);
            int64_t dropped = 0;
            for (int64_t i = 0; i < N * K; i++) {
                cr_assert_eq(k[i], rk[i], "policy %d capacity %lld: selection %lld", policy, (long long)cap,
                             (long long)i);
                dropped += k[i] < 0;
            }
            int64_t kept_sum = 0;
            for (int64_t e = 0; e < E; e++) {
                cr_assert(t[e] == rt[e] && r[e] == rr[e], "policy %d capacity %lld: counts of expert %lld", policy,
                          (long long)cap, (long long)e);
                cr_assert(cap <= 0 || t[e] <= cap);
                kept_sum += t[e];
            }
            cr_assert_eq(dropped, N * K - kept_sum);
            if (f == 1)
                cr_assert_gt(dropped, 0, "capacity factor 0.5 must drop");
            if (f == 0)
                cr_assert_eq(dropped, 0, "dropless");
        }
}

/* ---- backward: finite differences of the float64 reference ---- */

typedef struct fd_ctx {
    int64_t N, E;
    int K, sig, norm, kind; /* kind 0: weights path, 1: aux loss, 2: z-loss */
    const int32_t *kept;    /* the op's (fixed) selections */
    const double *R;        /* d_expert_w */
    const double *counts;
    double *l;              /* logits, perturbed */
    double coeff;
} fd_ctx;

/* kind 0: sum over kept selections of w * R with the selections held fixed (piecewise the same
 * function); 1: Megatron's aux loss; 2: the z-loss */
static double fd_loss(void *p)
{
    fd_ctx *c = p;
    int64_t N = c->N, E = c->E;
    double L = 0.0, s[64], P[64] = {0};
    for (int64_t n = 0; n < N; n++) {
        const double *l = c->l + n * E;
        ref_scores(s, l, E, c->sig);
        if (c->kind == 0) {
            double sum = 0.0;
            for (int j = 0; j < c->K; j++)
                sum += s[tri_moe_expert_of(c->kept[n * c->K + j])];
            for (int j = 0; j < c->K; j++) {
                int32_t e = c->kept[n * c->K + j];
                if (e >= 0)
                    L += (c->norm ? s[e] / (sum + (c->sig ? 1e-20 : 0.0)) : s[e]) * c->R[n * c->K + j];
            }
        } else if (c->kind == 1) {
            double Z = 0.0;
            for (int64_t e = 0; e < E; e++)
                Z += s[e];
            for (int64_t e = 0; e < E; e++)
                P[e] += c->sig ? s[e] / (Z + 1e-20) : s[e];
        } else {
            double mx = l[0], sum = 0.0;
            for (int64_t e = 0; e < E; e++)
                mx = l[e] > mx ? l[e] : mx;
            for (int64_t e = 0; e < E; e++)
                sum += exp(l[e] - mx);
            double lse = mx + log(sum);
            L += c->coeff * lse * lse / (double)N;
        }
    }
    if (c->kind == 1)
        for (int64_t e = 0; e < E; e++)
            L += c->coeff * (double)E / ((double)c->K * N * N) * c->counts[e] * P[e];
    return L;
}

/* The losses' gradients in closed form, float64: aux (kind 1) with g_e = scale c_e,
 * softmax p_e (g_e - sum_i p_i g_i), sigmoid ((g_e - sum_i q_i g_i) / Z) s_e (1 - s_e) with q = s / Z;
 * z-loss (kind 2) 2 coeff / N lse_n softmax_e. */
static void ref_loss_grad(double *grad, const fd_ctx *c)
{
    int64_t N = c->N, E = c->E;
    double s[64], scale = c->coeff * (double)E / ((double)c->K * N * N);
    for (int64_t n = 0; n < N; n++) {
        const double *l = c->l + n * E;
        double *g = grad + n * E;
        if (c->kind == 2) {
            double mx = l[0], sum = 0.0;
            for (int64_t e = 0; e < E; e++)
                mx = l[e] > mx ? l[e] : mx;
            for (int64_t e = 0; e < E; e++)
                sum += exp(l[e] - mx);
            for (int64_t e = 0; e < E; e++)
                g[e] = 2.0 * c->coeff / (double)N * (mx + log(sum)) * exp(l[e] - mx) / sum;
            continue;
        }
        ref_scores(s, l, E, c->sig);
        double Z = 1e-20, dot = 0.0;
        for (int64_t e = 0; e < E; e++)
            Z += s[e];
        for (int64_t e = 0; e < E; e++)
            dot += (c->sig ? s[e] / Z : s[e]) * scale * c->counts[e];
        for (int64_t e = 0; e < E; e++) {
            double t = scale * c->counts[e] - dot;
            g[e] = c->sig ? t / Z * s[e] * (1.0 - s[e]) : s[e] * t;
        }
    }
}

Test(moe_router, backward_against_finite_differences)
{
    tri_device *d = dev();
    int64_t N = 23, E = 8;
    int Ks[3] = {1, 2, 8};
    for (int sig = 0; sig < 2; sig++)
        for (int k = 0; k < 3; k++)
            for (int norm = 0; norm < 2; norm++)
                for (int drop = 0; drop < 2; drop++) {
                    int K = Ks[k];
                    router_case c = {.N = N, .E = E, .K = K, .sig = sig, .norm = norm,
                                     .logits = ot_uniform((size_t)(N * E), -2, 2, 100 + k)};
                    run_forward(&c);
                    float *R = ot_uniform((size_t)(N * K), -1, 1, 7);
                    /* with drop: capacity factor 0.5 drops some selections (not with K = E: every
                     * expert then holds N selections, a capacity of N / 2 drops half) */
                    int64_t cap = drop ? tri_moe_capacity(N, K, E, 0.5) : 0;
                    tri_tensor idx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), c.idx);
                    tri_tensor w = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, K), c.w);
                    tri_tensor kept = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), NULL);
                    tri_tensor t = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), NULL);
                    tri_tensor r = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), NULL);
                    OK(tri_op_moe_router_capacity(d, kept, t, r, idx, w, cap, TRI_MOE_DROP_PROBS));
                    int32_t *kept_h = ot_ints((size_t)(N * K));
                    ot_download(d, kept_h, kept);
                    tri_tensor scores = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), c.scores);
                    tri_tensor dw = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, K), R);
                    tri_tensor dl = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), NULL);
                    OK(tri_op_moe_router_backward(d, dl, dw, kept, scores, sig ? TRI_MOE_SIGMOID : TRI_MOE_SOFTMAX,
                                                  norm));
                    float *got = ot_read(d, dl);
                    fd_ctx f = {.N = N, .E = E, .K = K, .sig = sig, .norm = norm, .kind = 0, .kept = kept_h,
                                .R = ot_widen(R, (size_t)(N * K)), .l = ot_widen(c.logits, (size_t)(N * E))};
                    double *want = ot_doubles((size_t)(N * E));
                    ot_fd_grad(want, f.l, (size_t)(N * E), fd_loss, &f);
                    char what[96];
                    snprintf(what, sizeof what, "router backward %s K %d norm %d drop %d", sig ? "sigmoid" : "softmax",
                             K, norm, drop);
                    cr_assert(ot_close(what, got, want, (size_t)(N * E), 1e-2, rel(E)), "%s", what);
                }
}

/* The aux loss (value and gradient) and the z-loss against the reference and finite differences. */
Test(moe_router, losses_against_float64_and_finite_differences)
{
    tri_device *d = dev();
    int64_t N = 150, E = 8; /* 150 rows: three chunks of TRI_COL_CHUNK, the last short */
    int K = 2;
    for (int sig = 0; sig < 2; sig++) {
        router_case c = {.N = N, .E = E, .K = K, .sig = sig, .norm = 1,
                         .logits = ot_uniform((size_t)(N * E), -2, 2, 31 + sig)};
        run_forward(&c);
        int32_t counts[8] = {0};
        for (int64_t i = 0; i < N * K; i++)
            counts[c.idx[i]]++;
        double dcounts[8];
        for (int e = 0; e < 8; e++)
            dcounts[e] = counts[e];
        tri_tensor scores = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), c.scores);
        tri_tensor logits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), c.logits);
        tri_tensor cnt = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), counts);
        tri_tensor loss = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 1), NULL);
        /* dlogits += : from 0, then from base (the same values added to it, bit for bit) */
        float *base = ot_uniform((size_t)(N * E), -1e-5f, 1e-5f, 3);
        for (int kind = 1; kind <= 2; kind++) {
            if (kind == 2 && sig)
                continue; /* the z-loss reads the logits: no score function */
            double coeff = kind == 1 ? 0.01 : 0.001;
            float dloss = 0.5f;
            int fn = sig ? TRI_MOE_SIGMOID : TRI_MOE_SOFTMAX;
            float *got = NULL, *got_base = NULL, got_loss = 0.0f;
            for (int from_base = 0; from_base < 2; from_base++) {
                tri_tensor dl = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), from_base ? base : NULL);
                if (!from_base)
                    OK(tri_op_fill(d, dl, 0.0f));
                if (kind == 1)
                    OK(tri_op_moe_aux_loss(d, loss, dl, scores, cnt, K, fn, (float)coeff, dloss));
                else
                    OK(tri_op_moe_z_loss(d, loss, dl, logits, (float)coeff, dloss));
                ot_download(d, &got_loss, loss);
                *(from_base ? &got_base : &got) = ot_read(d, dl);
            }
            fd_ctx f = {.N = N, .E = E, .K = K, .sig = sig, .kind = kind, .counts = dcounts,
                        .l = ot_widen(c.logits, (size_t)(N * E)), .coeff = (float)coeff};
            double want_loss = fd_loss(&f);
            /* the closed-form float64 gradient, itself held to the finite differences: their rounding
             * noise is a few ulps of |L| over h (8 DBL_EPSILON |L| / h, 2e-12 for the aux loss), plus
             * a normwise 1e-6 for the truncation (h^2 |L'''|) */
            double *want = ot_doubles((size_t)(N * E)), *fd = ot_doubles((size_t)(N * E));
            ref_loss_grad(want, &f);
            ot_fd_grad(fd, f.l, (size_t)(N * E), fd_loss, &f);
            double mx = 0.0, err = 0.0;
            for (int64_t i = 0; i < N * E; i++) {
                mx = fmax(mx, fabs(fd[i]));
                err = fmax(err, fabs(fd[i] - want[i]));
            }
            cr_assert(err <= 1e-6 * mx + 8 * DBL_EPSILON * fabs(want_loss) / OT_FD_H,
                      "%s: the closed form is %.3g from the finite differences (max %.3g)",
                      kind == 1 ? "aux" : "z", err, mx);
            char what[64];
            snprintf(what, sizeof what, "%s %s", kind == 1 ? "aux loss" : "z-loss", sig ? "sigmoid" : "softmax");
            cr_assert(fabs(got_loss - want_loss) <= rel(E) * fabs(want_loss), "%s: %.9g, reference %.9g", what,
                      got_loss, want_loss);
            /* per element against dloss * the finite differences, within REL(E) of the terms it is made
             * of: the aux gradient p_e (g_e - dot) cancels where g_e is near dot, so its bound is
             * p_e (|g_e| + |dot|) (sigmoid: / Z * s_e (1 - s_e)); the z-loss's terms do not cancel */
            double scale = kind == 1 ? coeff * E / ((double)K * N * N) : 0.0;
            for (int64_t n = 0; n < N; n++) {
                const float *sr = c.scores + n * E;
                double Z = 0.0, dot = 0.0;
                for (int64_t e = 0; e < E; e++)
                    Z += sig ? sr[e] : 0.0;
                for (int64_t e = 0; e < E; e++)
                    dot += fabs((sig ? sr[e] / Z : sr[e]) * scale * dloss * dcounts[e]);
                for (int64_t e = 0; e < E; e++) {
                    double wv = dloss * want[n * E + e], bound;
                    if (kind == 2)
                        bound = fabs(wv);
                    else {
                        double t = scale * dloss * dcounts[e] + dot;
                        bound = sig ? t / Z * sr[e] * (1.0 - sr[e]) : sr[e] * t;
                    }
                    cr_assert(fabs(got[n * E + e] - wv) <= rel(E) * bound,
                              "%s gradient [%lld, %lld]: %.9g, reference %.9g (bound %.3g)", what, (long long)n,
                              (long long)e, got[n * E + e], wv, rel(E) * bound);
                    float sum = base[n * E + e] + got[n * E + e];
                    cr_assert(!memcmp(&got_base[n * E + e], &sum, sizeof sum), "%s: dlogits += from a base", what);
                }
            }
            /* without dlogits: the same loss, nothing else written */
            float again;
            if (kind == 1)
                OK(tri_op_moe_aux_loss(d, loss, tri_tensor_none(), scores, cnt, K, fn, (float)coeff, dloss));
            else
                OK(tri_op_moe_z_loss(d, loss, tri_tensor_none(), logits, (float)coeff, dloss));
            ot_download(d, &again, loss);
            cr_assert_eq(again, got_loss);
        }
    }
}

Test(moe_router, expert_bias_update_is_the_sign_rule)
{
    tri_device *d = dev();
    int32_t counts[5] = {6, 2, 4, 4, 4}; /* mean 4 */
    float bias0[5] = {0.0f, 0.5f, -0.25f, 1.0f, 0.0f};
    tri_tensor b = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 5), bias0);
    tri_tensor c = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, 5), counts);
    OK(tri_op_moe_expert_bias_update(d, b, c, 0.001f));
    float got[5];
    ot_download(d, got, b);
    float want[5] = {0.0f - 0.001f, 0.5f + 0.001f, -0.25f, 1.0f, 0.0f};
    cr_assert(ot_same_bits("bias update", got, want, 5));
    /* a mean that is not an integer: 7 tokens over 3 experts (mean 2.33) */
    int32_t c2[3] = {3, 2, 2};
    tri_tensor b2 = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 3), NULL), cc2 = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, 3), c2);
    OK(tri_op_fill(d, b2, 0.0f));
    OK(tri_op_moe_expert_bias_update(d, b2, cc2, 0.5f));
    float got2[3], want2[3] = {-0.5f, 0.5f, 0.5f};
    ot_download(d, got2, b2);
    cr_assert(ot_same_bits("bias update, fractional mean", got2, want2, 3));
}

/* 1 and 3 threads: the same bits for every op */
Test(moe_router, thread_count_does_not_change_bits)
{
    int64_t N = 131, E = 16;
    int K = 4;
    float *logits_h = ot_uniform((size_t)(N * E), -3, 3, 77), *R = ot_uniform((size_t)(N * K), -1, 1, 78);
    float *out[2][6];
    for (int v = 0; v < 2; v++) {
        tri_device *d = ot_device(v ? 3 : 1);
        tri_tensor logits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), logits_h);
        tri_tensor scores = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), NULL);
        tri_tensor idx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), NULL);
        tri_tensor kept = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), NULL);
        tri_tensor w = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, K), NULL);
        tri_tensor t = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), NULL), r = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), NULL);
        tri_tensor dw = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, K), R);
        tri_tensor dl = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), NULL);
        tri_tensor loss = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 2), NULL);
        tri_tensor l0 = tri_tensor_1d(loss.data, TRI_F32, 1), l1 = tri_tensor_1d((float *)loss.data + 1, TRI_F32, 1);
        OK(tri_op_moe_router_forward(d, idx, w, scores, logits, tri_tensor_none(), TRI_MOE_SOFTMAX, true));
        OK(tri_op_moe_router_capacity(d, kept, t, r, idx, w, tri_moe_capacity(N, K, E, 0.8), TRI_MOE_DROP_PROBS));
        OK(tri_op_moe_router_backward(d, dl, dw, kept, scores, TRI_MOE_SOFTMAX, true));
        OK(tri_op_moe_aux_loss(d, l0, dl, scores, r, K, TRI_MOE_SOFTMAX, 0.01f, 1.0f));
        OK(tri_op_moe_z_loss(d, l1, dl, logits, 0.001f, 1.0f));
        out[v][0] = ot_read(d, scores);
        out[v][1] = ot_read(d, w);
        out[v][2] = ot_read(d, dl);
        out[v][3] = ot_read(d, loss);
        out[v][4] = ot_floats((size_t)(N * K));
        ot_download(d, out[v][4], kept);
        out[v][5] = ot_floats((size_t)E);
        ot_download(d, out[v][5], t);
    }
    size_t n[6] = {(size_t)(N * E), (size_t)(N * K), (size_t)(N * E), 2, (size_t)(N * K), (size_t)E};
    const char *names[6] = {"scores", "weights", "dlogits", "losses", "kept_idx", "tokens_per_expert"};
    for (int i = 0; i < 6; i++)
        cr_assert(ot_same_bits(names[i], out[1][i], out[0][i], n[i]));
}

static void expect_refused(int rc, const char *needle)
{
    cr_assert_eq(rc, TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), needle), "message '%s' does not name '%s'", tri_error_message(), needle);
}

Test(moe_router, refusals_name_the_argument)
{
    tri_device *d = dev();
    tri_tensor logits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 4, 3), NULL);
    tri_tensor scores = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 4, 3), NULL);
    tri_tensor idx4 = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, 4, 4), NULL);
    tri_tensor w4 = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 4, 4), NULL);
    tri_tensor idx2 = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, 4, 2), NULL);
    tri_tensor w2 = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, 4, 2), NULL);
    tri_tensor bias2 = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 2), NULL);
    tri_tensor none = tri_tensor_none();
    expect_refused(tri_op_moe_router_forward(d, idx4, w4, scores, logits, none, TRI_MOE_SOFTMAX, true), "K = 4");
    expect_refused(tri_op_moe_router_forward(d, idx2, w2, scores, logits, none, 7, true), "score_func 7");
    expect_refused(tri_op_moe_router_forward(d, idx2, w2, scores, logits, bias2, TRI_MOE_SIGMOID, true), "expert_bias");
    expect_refused(tri_op_moe_router_forward(d, w2, w2, scores, logits, none, TRI_MOE_SOFTMAX, true), "expert_idx");
    tri_tensor t3 = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, 3), NULL), t2 = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, 2), NULL);
    tri_tensor kept2 = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, 4, 2), NULL);
    expect_refused(tri_op_moe_router_capacity(d, kept2, t3, t2, idx2, w2, 2, TRI_MOE_DROP_PROBS), "routed_per_expert");
    expect_refused(tri_op_moe_router_capacity(d, kept2, t3, t3, idx2, w2, 2, 5), "drop_policy 5");
    tri_tensor loss = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 1), NULL);
    expect_refused(tri_op_moe_aux_loss(d, loss, none, scores, t3, 4, TRI_MOE_SOFTMAX, 0.01f, 1.0f), "K 4");
    expect_refused(tri_op_moe_aux_loss(d, loss, w2, scores, t3, 2, TRI_MOE_SOFTMAX, 0.01f, 1.0f), "dlogits");
    expect_refused(tri_op_moe_z_loss(d, scores, none, logits, 0.01f, 1.0f), "loss");
    expect_refused(tri_op_moe_router_backward(d, scores, w4, idx2, scores, TRI_MOE_SOFTMAX, true), "d_expert_w");
    expect_refused(tri_op_moe_expert_bias_update(d, bias2, t3, 0.1f), "tokens_per_expert");
}

/* ---- PyTorch (Debian's python3-torch, float64): Hugging Face's routing and aux loss ---- */

/* One model's comparison with tests/moe_router_torch.py: our forward, backward (d_expert_w = R) and
 * losses, and the script's input and output files. HF's load_balancing_loss_func is K times
 * Megatron's (its f_e sums to K), so our aux coefficient is a K. */
typedef struct torch_job {
    const char *model;
    router_case c; /* its N, E, K and score function */
    float *got_dl, *got_losses;
    char dir[32], in[64], out[64];
} torch_job;

/* Runs our ops and writes the script's input; *arg: the script's arguments for it. */
static void torch_prepare(torch_job *j, tu_torch_job *arg, const char *model, int sig, int norm, int with_bias,
                          uint64_t seed)
{
    tri_device *d = dev();
    int64_t N = 29, E = 8;
    int K = 2;
    double a = 0.02, zc = 0.001;
    *j = (torch_job){.model = model,
                     .c = {.N = N, .E = E, .K = K, .sig = sig, .norm = norm,
                           .logits = ot_uniform((size_t)(N * E), -2, 2, seed)}};
    router_case *c = &j->c;
    float *bias = with_bias ? ot_uniform((size_t)E, -0.3f, 0.3f, seed + 1) : NULL;
    c->bias = bias;
    run_forward(c);
    float *R = ot_uniform((size_t)(N * K), -1, 1, seed + 2);
    int32_t counts[8] = {0};
    for (int64_t i = 0; i < N * K; i++)
        counts[c->idx[i]]++;
    tri_tensor logits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), c->logits);
    tri_tensor scores = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), c->scores);
    tri_tensor idx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), c->idx);
    tri_tensor dw = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, K), R);
    tri_tensor dl = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, E), NULL);
    tri_tensor cnt = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E), counts);
    tri_tensor losses = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 2), NULL);
    tri_tensor aux = tri_tensor_1d(losses.data, TRI_F32, 1), z = tri_tensor_1d((float *)losses.data + 1, TRI_F32, 1);
    int fn = sig ? TRI_MOE_SIGMOID : TRI_MOE_SOFTMAX;
    OK(tri_op_moe_router_backward(d, dl, dw, idx, scores, fn, norm));
    if (!sig) /* HF's aux loss is defined on the softmax probabilities */
        OK(tri_op_moe_aux_loss(d, aux, dl, scores, cnt, K, fn, (float)(a * K), 1.0f));
    OK(tri_op_moe_z_loss(d, z, dl, logits, (float)zc, 1.0f));
    j->got_dl = ot_read(d, dl);
    j->got_losses = ot_read(d, losses);

    snprintf(j->dir, sizeof j->dir, "/tmp/trident-moe-router-XXXXXX");
    cr_assert(mkdtemp(j->dir), "mkdtemp");
    snprintf(j->in, sizeof j->in, "%s/in.bin", j->dir);
    snprintf(j->out, sizeof j->out, "%s/out.bin", j->dir);
    FILE *f = fopen(j->in, "wb");
    cr_assert(f);
    double meta[6] = {(double)N, (double)E, K, a, zc, with_bias};
    int64_t n6 = 6, sl[2] = {N, E}, sr[2] = {N, K}, se = E;
    cr_assert_eq(tu_rec_write(f, "meta", 1, &n6, meta), 0);
    cr_assert_eq(tu_rec_write_f32(f, "logits", 2, sl, c->logits), 0);
    cr_assert_eq(tu_rec_write_f32(f, "R", 2, sr, R), 0);
    if (bias)
        cr_assert_eq(tu_rec_write_f32(f, "bias", 1, &se, bias), 0);
    fclose(f);
    *arg = (tu_torch_job){model, j->in, j->out};
}

/* Compares ours with the script's output and removes the files. */
static void torch_check(const torch_job *j)
{
    const char *model = j->model;
    int64_t N = j->c.N, E = j->c.E;
    int K = j->c.K;
    tu_records ref;
    cr_assert_eq(tu_rec_read(j->out, &ref), 0, "cannot read %s", j->out);
    const tu_record *ridx = tu_rec_find(&ref, "idx"), *rw = tu_rec_find(&ref, "w"), *rdl = tu_rec_find(&ref, "d_logits");
    const tu_record *raux = tu_rec_find(&ref, "aux"), *rz = tu_rec_find(&ref, "z");
    cr_assert(ridx && rw && rdl && raux && rz, "%s: a record is missing", model);
    for (int64_t i = 0; i < N * K; i++)
        cr_assert_eq(j->c.idx[i], (int32_t)ridx->data[i], "%s: selection %lld", model, (long long)i);
    cr_assert(ot_close(model, j->c.w, rw->data, (size_t)(N * K), 1e-3, rel(E)), "%s: weights", model);
    cr_assert(ot_close(model, j->got_dl, rdl->data, (size_t)(N * E), 1e-2, rel(E)), "%s: d_logits", model);
    if (!j->c.sig)
        cr_assert(fabs(j->got_losses[0] - raux->data[0]) <= rel(E) * fabs(raux->data[0]), "%s: aux %.9g, HF %.9g",
                  model, j->got_losses[0], raux->data[0]);
    cr_assert(fabs(j->got_losses[1] - rz->data[0]) <= rel(E) * fabs(rz->data[0]), "%s: z %.9g, torch %.9g", model,
              j->got_losses[1], rz->data[0]);
    tu_rec_free(&ref);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", j->dir);
    tu_run(cmd);
}

Test(moe_router, against_pytorch_hf_routing, .timeout = 120)
{
    if (!tu_have_torch())
        cr_skip_test("/usr/bin/python3 has no torch (Debian's python3-torch): the PyTorch comparison is skipped");
    torch_job jobs[3];
    tu_torch_job args[3]; /* one script run for all (tu_torch_jobs) */
    torch_prepare(&jobs[0], &args[0], "mixtral", 0, 1, 0, 201);
    torch_prepare(&jobs[1], &args[1], "qwen3_moe", 0, 0, 0, 202);
    torch_prepare(&jobs[2], &args[2], "deepseek_v3", 1, 1, 1, 203);
    char cmd[4096];
    cr_assert_eq(tu_torch_jobs("tests/moe_router_torch.py", args, 3, cmd, sizeof cmd), 0,
                 "the PyTorch reference failed: %s", cmd);
    for (int i = 0; i < 3; i++)
        torch_check(&jobs[i]);
}
