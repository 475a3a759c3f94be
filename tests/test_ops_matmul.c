/* tests/test_ops_matmul.c - matmul and bias_backward on the CPU backend, against fp64 loops.
 *
 * Matmul carries every linear layer, the LM head and every weight gradient, in all four transpose
 * combinations (forward inp @ w^T, dinp = dout @ w, dw += dout^T @ inp). So each combination is
 * checked forward - plain, with a bias, and accumulating with beta - against a naive fp64 loop, and
 * backward: the gradients of a and b, computed with matmul itself as a layer's backward does, must
 * match central finite differences of that loop. Shapes are odd (N = 67, K = 7, M = 5, ...) so no
 * vector width or block size divides them. a and c are 3-d views (B, T, .) where they can be, since
 * the op sees any tensor as a matrix of rows.
 *
 * Tolerances (errors relative, except that elements below 1/10 of the tensor's RMS are measured
 * against that floor; see ot_close). Forward 1e-5: fp32 sums of K <= 130 products measure at most
 * 2.7e-6. Backward 1e-4 against fp64 central differences, which are exact to ~1e-9, so the margin
 * only covers fp32 rounding of the analytic gradients (measured at most 2.3e-6). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_matmul, .fini = ot_teardown);

#define FWD_TOL 1e-5
#define FWD_FLOOR 0.1
#define BWD_TOL 1e-4
#define BWD_FLOOR 0.1

/* One problem c(M,N) = op(a) op(b) [+ bias] + beta c0, with a (M,K) or (K,M) if ta, b (K,N) or
 * (N,K) if tb; fp64 inputs, so finite differences can perturb them. R weighs the loss sum(c R). */
typedef struct mm_problem {
    int64_t M, N, K;
    bool ta, tb;
    double *a, *b, *bias; /* bias may be NULL */
    double beta;
    const double *c0, *R;
    double *c;            /* output of mm_ref */
} mm_problem;

static double a_at(const mm_problem *p, int64_t i, int64_t k)
{
    return p->ta ? p->a[k * p->M + i] : p->a[i * p->K + k];
}

static double b_at(const mm_problem *p, int64_t k, int64_t j)
{
    return p->tb ? p->b[j * p->K + k] : p->b[k * p->N + j];
}

/* The definition: c[i][j] = sum_k op(a)[i][k] op(b)[k][j] + bias[j] + beta c0[i][j]. */
static void mm_ref(mm_problem *p)
{
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = 0; j < p->N; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < p->K; k++)
                s += a_at(p, i, k) * b_at(p, k, j);
            if (p->bias)
                s += p->bias[j];
            if (p->beta != 0.0)
                s += p->beta * p->c0[i * p->N + j];
            p->c[i * p->N + j] = s;
        }
}

static double mm_loss(void *ctx)
{
    mm_problem *p = ctx;
    mm_ref(p);
    return ot_dot(p->c, p->R, (size_t)(p->M * p->N));
}

/* Device views of a, b and c: a (B, T, K) when not transposed with M = B*T, c always (B, T, N). */
static tri_tensor a_view(const mm_problem *p, int64_t B)
{
    return p->ta ? tri_tensor_2d(NULL, TRI_F32, p->K, p->M)
                 : tri_tensor_3d(NULL, TRI_F32, B, p->M / B, p->K);
}

static tri_tensor b_view(const mm_problem *p)
{
    return p->tb ? tri_tensor_2d(NULL, TRI_F32, p->N, p->K)
                 : tri_tensor_2d(NULL, TRI_F32, p->K, p->N);
}

static const char *combo_name(bool ta, bool tb)
{
    return ta ? (tb ? "a^T b^T" : "a^T b") : (tb ? "a b^T" : "a b");
}

/* Forward of one combination and variant against mm_ref. variant: 0 plain (beta 0, c full of NaN,
 * which must be overwritten, never read), 1 bias (c NaN too), 2 beta = 1, 3 beta = 0.5. */
static void check_forward(int64_t B, int64_t M, int64_t N, int64_t K, bool ta, bool tb, int variant,
                          uint64_t seed)
{
    tri_device *d = ot_device(1);
    float *a = ot_uniform((size_t)(M * K), -1.0f, 1.0f, seed);
    float *b = ot_uniform((size_t)(K * N), -1.0f, 1.0f, seed + 1);
    float *bias = ot_uniform((size_t)N, -1.0f, 1.0f, seed + 2);
    float *c0 = ot_uniform((size_t)(M * N), -1.0f, 1.0f, seed + 3);
    if (variant <= 1)
        for (int64_t i = 0; i < M * N; i++)
            c0[i] = NAN;
    float beta = variant == 2 ? 1.0f : variant == 3 ? 0.5f : 0.0f;

    mm_problem p = {M, N, K, ta, tb, ot_widen(a, (size_t)(M * K)), ot_widen(b, (size_t)(K * N)),
                    variant == 1 ? ot_widen(bias, (size_t)N) : NULL, beta,
                    ot_widen(c0, (size_t)(M * N)), NULL, ot_doubles((size_t)(M * N))};
    mm_ref(&p);

    tri_tensor ta_ = ot_tensor(d, a_view(&p, B), a);
    tri_tensor tb_ = ot_tensor(d, b_view(&p), b);
    tri_tensor tbias = variant == 1 ? ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), bias)
                                    : tri_tensor_none();
    tri_tensor tc = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, M / B, N), c0);
    cr_assert_eq(tri_op_matmul(d, tc, ta_, tb_, tbias, ta, tb, beta), TRI_OK);

    char what[96];
    static const char *variants[] = {"beta 0", "bias", "beta 1", "beta 0.5"};
    snprintf(what, sizeof what, "matmul fwd %s %s M%lld N%lld K%lld", combo_name(ta, tb),
             variants[variant], (long long)M, (long long)N, (long long)K);
    cr_assert(ot_close(what, ot_read(d, tc), p.c, (size_t)(M * N), FWD_FLOOR, FWD_TOL), "%s", what);
}

Test(ops_matmul, forward_all_transposes_bias_and_beta)
{
    /* (B, M = B*T, N, K): N > 64 and odd; K = 130 spans several of OpenBLAS's K blocks */
    static const int64_t shapes[][4] = {{2, 10, 67, 7}, {1, 5, 3, 130}};
    for (int s = 0; s < 2; s++)
        for (int combo = 0; combo < 4; combo++)
            for (int variant = 0; variant < 4; variant++)
                check_forward(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], combo & 1,
                              combo & 2, variant, 100 + 10 * (uint64_t)combo + (uint64_t)variant);
}

/* K == 0: op(a) op(b) is the zero matrix, so c = bias + beta c. This is dw += dout^T @ inp over a
 * shard of zero rows, hence a transposed: a (K, M) = (0, 3). (An untransposed a (3, 0) cannot
 * express M: tri_tensor_rows of a (3, 0) view is 0, not 3.) */
Test(ops_matmul, empty_inner_dimension)
{
    tri_device *d = ot_device(1);
    const int64_t M = 3, N = 5;
    float *c0 = ot_uniform((size_t)(M * N), -1.0f, 1.0f, 7);
    float *bias = ot_uniform((size_t)N, -1.0f, 1.0f, 8);
    float dummy[1] = {0.0f};
    tri_tensor a = tri_tensor_2d(dummy, TRI_F32, 0, M), b = tri_tensor_2d(dummy, TRI_F32, 0, N);
    tri_tensor tbias = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), bias);
    static const float betas[] = {0.0f, 1.0f, 0.5f, -1.0f};
    for (int v = 0; v < 5; v++) {
        bool with_bias = v == 4;
        float beta = with_bias ? 0.0f : betas[v];
        tri_tensor c = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, M, N), c0);
        cr_assert_eq(tri_op_matmul(d, c, a, b, with_bias ? tbias : tri_tensor_none(), true, false,
                                   beta), TRI_OK, "%s", tri_error_message());
        float *got = ot_read(d, c);
        double *want = ot_doubles((size_t)(M * N));
        for (int64_t i = 0; i < M * N; i++)
            want[i] = with_bias ? (double)bias[i % N] : (double)beta * c0[i];
        char what[64];
        snprintf(what, sizeof what, "matmul K=0 %s %g", with_bias ? "bias" : "beta", (double)beta);
        cr_assert(ot_close(what, got, want, (size_t)(M * N), FWD_FLOOR, 0.0), "%s", what);
    }
}

/* Gradients of a and b through matmuls, as a layer's backward computes them, accumulated (beta 1)
 * onto random existing values; dC = R is the gradient of L = sum(c R).
 *   da = dC op(b)^T, stored transposed when ta;   db = op(a)^T dC, stored transposed when tb. */
static void check_backward(int64_t B, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                           uint64_t seed)
{
    tri_device *d = ot_device(1);
    size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = (size_t)(M * N);
    float *a = ot_uniform(na, -1.0f, 1.0f, seed), *b = ot_uniform(nb, -1.0f, 1.0f, seed + 1);
    float *R = ot_uniform(nc, -1.0f, 1.0f, seed + 2);
    float *da0 = ot_uniform(na, -1.0f, 1.0f, seed + 3),
          *db0 = ot_uniform(nb, -1.0f, 1.0f, seed + 4);
    mm_problem p = {M, N, K, ta, tb, ot_widen(a, na), ot_widen(b, nb), NULL, 0.0, NULL,
                    ot_widen(R, nc), ot_doubles(nc)};

    tri_tensor ta_ = ot_tensor(d, a_view(&p, B), a), tb_ = ot_tensor(d, b_view(&p), b);
    tri_tensor dc = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, M / B, N), R);
    tri_tensor da = ot_tensor(d, a_view(&p, B), da0), db = ot_tensor(d, b_view(&p), db0);
    tri_tensor none = tri_tensor_none();
    if (!ta)
        cr_assert_eq(tri_op_matmul(d, da, dc, tb_, none, false, !tb, 1.0f), TRI_OK);
    else
        cr_assert_eq(tri_op_matmul(d, da, tb_, dc, none, tb, true, 1.0f), TRI_OK);
    if (!tb)
        cr_assert_eq(tri_op_matmul(d, db, ta_, dc, none, !ta, false, 1.0f), TRI_OK);
    else
        cr_assert_eq(tri_op_matmul(d, db, dc, ta_, none, true, ta, 1.0f), TRI_OK);

    double *ga = ot_doubles(na), *gb = ot_doubles(nb);
    ot_fd_grad(ga, p.a, na, mm_loss, &p);
    ot_fd_grad(gb, p.b, nb, mm_loss, &p);
    for (size_t i = 0; i < na; i++)
        ga[i] += da0[i];
    for (size_t i = 0; i < nb; i++)
        gb[i] += db0[i];
    char what[96];
    snprintf(what, sizeof what, "matmul bwd %s da", combo_name(ta, tb));
    cr_assert(ot_close(what, ot_read(d, da), ga, na, BWD_FLOOR, BWD_TOL), "%s", what);
    snprintf(what, sizeof what, "matmul bwd %s db", combo_name(ta, tb));
    cr_assert(ot_close(what, ot_read(d, db), gb, nb, BWD_FLOOR, BWD_TOL), "%s", what);
}

Test(ops_matmul, backward_all_transposes_vs_finite_differences)
{
    for (int combo = 0; combo < 4; combo++)
        check_backward(2, 10, 67, 7, combo & 1, combo & 2, 200 + 10 * (uint64_t)combo);
}

/* A linear layer's forward and backward, exactly as layers/ will call them (weights (OC, C)):
 *   out = inp @ w^T + bias;  dinp = dout @ w;  dw += dout^T @ inp;  dbias += colsum(dout). */
typedef struct linear_problem {
    int64_t N, C, OC;
    double *inp, *w, *bias;
    const double *R;
    double *out;
} linear_problem;

static double linear_loss(void *ctx)
{
    linear_problem *p = ctx;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t o = 0; o < p->OC; o++) {
            double s = p->bias[o];
            for (int64_t c = 0; c < p->C; c++)
                s += p->inp[n * p->C + c] * p->w[o * p->C + c];
            p->out[n * p->OC + o] = s;
        }
    return ot_dot(p->out, p->R, (size_t)(p->N * p->OC));
}

Test(ops_matmul, linear_layer_backward_vs_finite_differences)
{
    tri_device *d = ot_device(1);
    const int64_t B = 2, T = 5, C = 7, OC = 67, N = B * T;
    size_t ni = (size_t)(N * C), nw = (size_t)(OC * C), no = (size_t)(N * OC);
    float *inp = ot_uniform(ni, -1.0f, 1.0f, 301), *w = ot_uniform(nw, -1.0f, 1.0f, 302);
    float *bias = ot_uniform((size_t)OC, -1.0f, 1.0f, 303), *R = ot_uniform(no, -1.0f, 1.0f, 304);
    float *dw0 = ot_uniform(nw, -1.0f, 1.0f, 305), *db0 = ot_uniform((size_t)OC, -1.0f, 1.0f, 306);
    float *nan = ot_floats(ni);
    for (size_t i = 0; i < ni; i++)
        nan[i] = NAN;
    linear_problem p = {N, C, OC, ot_widen(inp, ni), ot_widen(w, nw), ot_widen(bias, (size_t)OC),
                        ot_widen(R, no), ot_doubles(no)};

    tri_tensor tinp = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, C), inp);
    tri_tensor tw = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, OC, C), w);
    tri_tensor tbias = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, OC), bias);
    tri_tensor tout = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, OC), NULL);
    tri_tensor tdout = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, OC), R);
    tri_tensor tdinp = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, C), nan);
    tri_tensor tdw = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, OC, C), dw0);
    tri_tensor tdb = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, OC), db0);
    tri_tensor none = tri_tensor_none();
    cr_assert_eq(tri_op_matmul(d, tout, tinp, tw, tbias, false, true, 0.0f), TRI_OK);
    cr_assert_eq(tri_op_matmul(d, tdinp, tdout, tw, none, false, false, 0.0f), TRI_OK);
    cr_assert_eq(tri_op_matmul(d, tdw, tdout, tinp, none, true, false, 1.0f), TRI_OK);
    cr_assert_eq(tri_op_bias_backward(d, tdb, tdout), TRI_OK);

    linear_loss(&p);
    cr_assert(ot_close("linear fwd out", ot_read(d, tout), p.out, no, FWD_FLOOR, FWD_TOL));
    double *g_inp = ot_doubles(ni), *g_w = ot_doubles(nw), *g_b = ot_doubles((size_t)OC);
    ot_fd_grad(g_inp, p.inp, ni, linear_loss, &p);
    ot_fd_grad(g_w, p.w, nw, linear_loss, &p);
    ot_fd_grad(g_b, p.bias, (size_t)OC, linear_loss, &p);
    for (size_t i = 0; i < nw; i++)
        g_w[i] += dw0[i];
    for (int64_t i = 0; i < OC; i++)
        g_b[i] += db0[i];
    cr_assert(ot_close("linear bwd dinp", ot_read(d, tdinp), g_inp, ni, BWD_FLOOR, BWD_TOL));
    cr_assert(ot_close("linear bwd dw (+=)", ot_read(d, tdw), g_w, nw, BWD_FLOOR, BWD_TOL));
    cr_assert(
        ot_close("linear bwd dbias (+=)", ot_read(d, tdb), g_b, (size_t)OC, BWD_FLOOR, BWD_TOL));
}

/* bias_backward alone on a wider shape: several column blocks, the last one partial. */
Test(ops_matmul, bias_backward_column_sums_accumulate)
{
    tri_device *d = ot_device(1);
    const int64_t N = 37, OC = 131;
    float *dout = ot_uniform((size_t)(N * OC), -1.0f, 1.0f, 401);
    float *db0 = ot_uniform((size_t)OC, -1.0f, 1.0f, 402);
    double *want = ot_widen(db0, (size_t)OC);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < OC; j++)
            want[j] += dout[n * OC + j];
    tri_tensor tdout = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, OC), dout);
    tri_tensor tdb = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, OC), db0);
    cr_assert_eq(tri_op_bias_backward(d, tdb, tdout), TRI_OK);
    cr_assert(
        ot_close("bias_backward (+=)", ot_read(d, tdb), want, (size_t)OC, FWD_FLOOR, FWD_TOL));
}
