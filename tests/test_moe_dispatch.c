/* tests/test_moe_dispatch.c - the Mixture-of-Experts dispatch ops and the grouped GEMM on the CPU.
 *
 * The counting sort against a naive stable sort by expert (exact integers); the permutation, the
 * combine and their backwards bit for bit against plain fp32 loops in the orders ops_list.h defines
 * and within derived bounds of fp64 loops; the grouped GEMM bit for bit against tri_op_matmul on each
 * group's views and within γ_K bounds of fp64; and the expert MLP composed of them (SwiGLU experts,
 * Mixtral's / Qwen3-MoE's) against a float64 per-token loop, forward within a bound derived from the
 * fp32 roundings and backward against central finite differences of that loop.
 * Edge cases: an expert with no tokens, every token to one expert, dropped selections (-1), K = 1,
 * K = E, N = 1. Rounding bounds use u = 2^-24 and γ_n = n u / (1 - n u) (Higham, "Accuracy and
 * Stability of Numerical Algorithms", §3.1): a sum of n products computed in fp32 in any order is
 * within γ_n Σ|terms| of the exact one. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

#define U 5.9604644775390625e-8 /* 2^-24 */

static double gamma_n(double n)
{
    return n * U / (1 - n * U);
}

static tri_device *dev;

static void setup(void)
{
    dev = ot_device(3); /* several threads: the loops' bits do not depend on them */
}

TestSuite(moe_dispatch, .init = setup, .fini = ot_teardown);

#define OK(call) cr_assert_eq((call), TRI_OK, "%s", tri_error_message())

/* ---- helpers ---- */

static tri_tensor i32_2d(int64_t r, int64_t c, const int32_t *host)
{
    return ot_tensor(dev, tri_tensor_2d(NULL, TRI_I32, r, c), host);
}

static int32_t *read_i32(tri_tensor t)
{
    int32_t *h = ot_ints((size_t)tri_tensor_numel(t) + 1);
    ot_download(dev, h, t);
    return h;
}

static tri_tensor f32(int64_t r, int64_t c, const float *host)
{
    return ot_tensor(dev, tri_tensor_2d(NULL, TRI_F32, r, c), host);
}

/* expert_idx (N, K): K distinct experts a token (top-k), each dropped (-1) with probability drop
 * (per mille); experts drawn from [0, E_used) so the others get no token. */
static int32_t *random_selection(int64_t N, int64_t K, int64_t E_used, int drop, uint64_t seed)
{
    int32_t *idx = ot_ints((size_t)(N * K));
    float *r = ot_uniform((size_t)(N * (E_used + K)), 0, 1, seed);
    for (int64_t n = 0; n < N; n++) {
        int32_t perm[64];
        for (int64_t e = 0; e < E_used; e++)
            perm[e] = (int32_t)e;
        for (int64_t e = E_used - 1; e > 0; e--) { /* Fisher-Yates */
            int64_t j = (int64_t)(r[n * (E_used + K) + e] * (float)(e + 1)) % (e + 1);
            int32_t t = perm[e];
            perm[e] = perm[j], perm[j] = t;
        }
        for (int64_t k = 0; k < K; k++)
            idx[n * K + k] = r[n * (E_used + K) + E_used + k] * 1000 < (float)drop ? -1 : perm[k % E_used];
    }
    return idx;
}

typedef struct maps {
    tri_tensor idx, rows, sorted, tpe;
    int32_t *h_idx, *h_rows, *h_sorted, *h_tpe;
    int64_t N, K, E, R;
} maps;

/* The counting sort on the device, checked against the naive stable sort by expert. */
static maps permute_map_checked(const int32_t *idx, int64_t N, int64_t K, int64_t E)
{
    maps m = {.N = N, .K = K, .E = E};
    m.idx = i32_2d(N, K, idx);
    m.rows = i32_2d(N, K, NULL);
    m.sorted = ot_tensor(dev, tri_tensor_1d(NULL, TRI_I32, N * K), NULL);
    m.tpe = ot_tensor(dev, tri_tensor_1d(NULL, TRI_I32, E), NULL);
    OK(tri_op_moe_permute_map(dev, m.rows, m.sorted, m.tpe, m.idx));
    m.h_idx = read_i32(m.idx), m.h_rows = read_i32(m.rows), m.h_sorted = read_i32(m.sorted), m.h_tpe = read_i32(m.tpe);
    int64_t r = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t first = r;
        for (int64_t i = 0; i < N * K; i++)
            if (idx[i] == e) {
                cr_assert_eq(m.h_sorted[r], i, "N %lld K %lld E %lld: row %lld holds selection %d, expected %lld",
                             (long long)N, (long long)K, (long long)E, (long long)r, m.h_sorted[r], (long long)i);
                cr_assert_eq(m.h_rows[i], r, "selection %lld is at row %d, expected %lld", (long long)i, m.h_rows[i],
                             (long long)r);
                r++;
            }
        cr_assert_eq(m.h_tpe[e], r - first, "expert %lld: %d tokens, expected %lld", (long long)e, m.h_tpe[e],
                     (long long)(r - first));
    }
    for (int64_t i = 0; i < N * K; i++) {
        if (idx[i] < 0 || idx[i] >= E)
            cr_assert_eq(m.h_rows[i], -1, "dropped selection %lld has row %d", (long long)i, m.h_rows[i]);
        if (i >= r)
            cr_assert_eq(m.h_sorted[i], -1, "row %lld past R = %lld holds %d", (long long)i, (long long)r,
                         m.h_sorted[i]);
    }
    m.R = r;
    return m;
}

/* ---- the counting sort ---- */

/* (N, K, E, experts used, drop per mille): the edge cases first */
static const int64_t MAP_CASES[][5] = {
    {1, 1, 1, 1, 0},     /* N = 1, K = 1, E = 1 */
    {1, 4, 4, 4, 0},     /* N = 1, K = E */
    {9, 1, 5, 5, 0},     /* K = 1 */
    {7, 3, 3, 3, 0},     /* K = E: every token to every expert */
    {13, 1, 6, 1, 0},    /* every token to expert 0, five experts empty */
    {11, 2, 8, 3, 0},    /* experts 3..7 get no token */
    {17, 2, 8, 8, 300},  /* dropped selections */
    {5, 2, 4, 4, 1000},  /* every selection dropped: R = 0 */
    {301, 2, 8, 8, 100}, /* more than one chunk's worth of work per expert on the GPU's sizes */
};

Test(moe_dispatch, permute_map_is_the_stable_sort_by_expert)
{
    for (size_t c = 0; c < sizeof MAP_CASES / sizeof MAP_CASES[0]; c++) {
        const int64_t *p = MAP_CASES[c];
        int32_t *idx = random_selection(p[0], p[1], p[3], (int)p[4], 100 + c);
        maps m = permute_map_checked(idx, p[0], p[1], p[2]);
        if (p[4] == 1000)
            cr_assert_eq(m.R, 0);
    }
}

Test(moe_dispatch, permute_map_counts_out_of_range_experts_as_dropped)
{
    int32_t idx[] = {0, 5, -7, 1, 1, -1}; /* E = 2: 5 and -7 are not experts */
    maps m = permute_map_checked(idx, 3, 2, 2);
    cr_assert_eq(m.R, 3);
}

/* ---- permutation and combine ---- */

static void permute_combine_case(const int64_t *p, int64_t C, uint64_t seed)
{
    int64_t N = p[0], K = p[1], E = p[2], P = N * K;
    maps m = permute_map_checked(random_selection(N, K, p[3], (int)p[4], seed), N, K, E);
    float *hx = ot_uniform((size_t)(N * C), -2, 2, seed + 1), *hw = ot_uniform((size_t)(N * K), 0, 1, seed + 2);
    float *hyp = ot_uniform((size_t)(P * C), -2, 2, seed + 3), *hdy = ot_uniform((size_t)(N * C), -1, 1, seed + 4);
    tri_tensor x = f32(N, C, hx), w = f32(N, K, hw), y_perm = f32(P, C, hyp), dy = f32(N, C, hdy);
    tri_tensor x_perm = f32(P, C, NULL), y = f32(N, C, NULL), dx = f32(N, C, NULL);
    tri_tensor dy_perm = f32(P, C, NULL), dw = f32(N, K, NULL);
    OK(tri_op_moe_permute(dev, x_perm, x, m.sorted));
    OK(tri_op_moe_unpermute(dev, y, y_perm, m.rows, w));
    OK(tri_op_moe_permute_backward(dev, dx, y_perm, m.rows)); /* y_perm as the permuted gradient */
    OK(tri_op_moe_unpermute_backward(dev, dy_perm, dw, dy, y_perm, m.sorted, m.rows, w));

    /* the definitions in fp32, in their orders; fp64 with the bounds */
    float *xp_f = ot_floats((size_t)(P * C)), *y_f = ot_floats((size_t)(N * C)), *dx_f = ot_floats((size_t)(N * C));
    float *dyp_f = ot_floats((size_t)(P * C));
    double *y_d = ot_doubles((size_t)(N * C)), *dw_d = ot_doubles((size_t)(N * K));
    for (int64_t r = 0; r < P; r++) {
        int32_t s = m.h_sorted[r];
        for (int64_t c = 0; c < C; c++) {
            xp_f[r * C + c] = s < 0 ? 0.0f : hx[(s / K) * C + c];
            dyp_f[r * C + c] = s < 0 ? 0.0f : hw[s] * hdy[(s / K) * C + c];
        }
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            float acc = 0.0f, acc1 = 0.0f;
            double acc_d = 0, abs_d = 0;
            for (int64_t k = 0; k < K; k++) {
                int32_t r = m.h_rows[n * K + k];
                if (r < 0)
                    continue;
                float v = hyp[r * C + c];
                acc += hw[n * K + k] * v;
                acc1 += v;
                acc_d += (double)hw[n * K + k] * v;
                abs_d += fabs((double)hw[n * K + k] * v);
            }
            y_f[n * C + c] = acc, dx_f[n * C + c] = acc1, y_d[n * C + c] = acc_d;
            (void)abs_d;
        }
    char what[128];
    snprintf(what, sizeof what, "N %lld K %lld E %lld C %lld", (long long)N, (long long)K, (long long)E, (long long)C);
    cr_assert(ot_same_bits("moe_permute x_perm", ot_read(dev, x_perm), xp_f, (size_t)(P * C)), "%s", what);
    cr_assert(ot_same_bits("moe_unpermute y", ot_read(dev, y), y_f, (size_t)(N * C)), "%s", what);
    cr_assert(ot_same_bits("moe_permute_backward dx", ot_read(dev, dx), dx_f, (size_t)(N * C)), "%s", what);
    cr_assert(ot_same_bits("moe_unpermute_backward dy_perm", ot_read(dev, dy_perm), dyp_f, (size_t)(P * C)), "%s",
              what);
    /* y: K products and K - 1 additions, |y - y64| <= γ_K Σ_k |w v| */
    float *gy = ot_read(dev, y), *gdw = ot_read(dev, dw);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            double abs_d = 0;
            for (int64_t k = 0; k < K; k++)
                if (m.h_rows[n * K + k] >= 0)
                    abs_d += fabs((double)hw[n * K + k] * hyp[m.h_rows[n * K + k] * C + c]);
            cr_assert_leq(fabs(gy[n * C + c] - y_d[n * C + c]), gamma_n((double)K) * abs_d, "%s: y[%lld,%lld]", what,
                          (long long)n, (long long)c);
        }
    /* dw: a dot of C products, |dw - dw64| <= γ_C Σ_c |dy y_perm|; 0 for a dropped selection */
    for (int64_t i = 0; i < N * K; i++) {
        int32_t r = m.h_rows[i];
        double acc = 0, abs_d = 0;
        for (int64_t c = 0; r >= 0 && c < C; c++) {
            double t = (double)hdy[(i / K) * C + c] * hyp[r * C + c];
            acc += t, abs_d += fabs(t);
        }
        dw_d[i] = acc;
        if (r < 0)
            cr_assert_eq(gdw[i], 0.0f, "%s: dropped selection %lld has dw %g", what, (long long)i, gdw[i]);
        cr_assert_leq(fabs(gdw[i] - dw_d[i]), gamma_n((double)C) * abs_d, "%s: dw[%lld] %.9g, fp64 %.9g", what,
                      (long long)i, gdw[i], dw_d[i]);
    }
}

Test(moe_dispatch, permute_and_combine_forward_and_backward)
{
    static const int64_t Cs[] = {1, 7, 300}; /* 300: more than the 256 slots of the dot's row order */
    for (size_t c = 0; c < sizeof MAP_CASES / sizeof MAP_CASES[0]; c++)
        for (size_t j = 0; j < 3; j++)
            permute_combine_case(MAP_CASES[c], Cs[j], 1000 + 10 * c + j);
}

/* ---- the grouped GEMM ---- */

static void grouped_case(const int32_t *counts, int64_t G, int64_t P, int64_t N_out, int64_t C, uint64_t seed)
{
    float *hx = ot_uniform((size_t)(P * C), -1, 1, seed), *hw = ot_uniform((size_t)(G * N_out * C), -1, 1, seed + 1);
    float *hdo = ot_uniform((size_t)(P * N_out), -1, 1, seed + 2), *hdw = ot_uniform((size_t)(G * N_out * C), -1, 1, seed + 3);
    tri_tensor x = f32(P, C, hx), dout = f32(P, N_out, hdo);
    tri_tensor w = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, G, N_out, C), hw);
    tri_tensor dw = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, G, N_out, C), hdw);
    tri_tensor dw_ref = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, G, N_out, C), hdw);
    float *pad = ot_uniform((size_t)(P * (N_out > C ? N_out : C)), 5, 6, seed + 4); /* rows past R untouched */
    tri_tensor out = f32(P, N_out, pad), out_ref = f32(P, N_out, pad), dx = f32(P, C, pad), dx_ref = f32(P, C, pad);
    OK(tri_op_grouped_matmul_forward(dev, out, x, w, counts));
    OK(tri_op_grouped_matmul_backward_input(dev, dx, dout, w, counts, 0.0f));
    OK(tri_op_grouped_matmul_backward_weight(dev, dw, dout, x, counts, 1.0f));
    int64_t row0 = 0;
    for (int64_t g = 0; g < G; g++) { /* the ordinary matmul on each group's views */
        tri_tensor xg = tri_tensor_slice0(x, row0, counts[g]), dog = tri_tensor_slice0(dout, row0, counts[g]);
        tri_tensor wg = tri_tensor_2d((float *)w.data + g * N_out * C, TRI_F32, N_out, C);
        tri_tensor dwg = tri_tensor_2d((float *)dw_ref.data + g * N_out * C, TRI_F32, N_out, C);
        OK(tri_op_matmul(dev, tri_tensor_slice0(out_ref, row0, counts[g]), xg, wg, tri_tensor_none(), false, true, 0));
        OK(tri_op_matmul(dev, tri_tensor_slice0(dx_ref, row0, counts[g]), dog, wg, tri_tensor_none(), false, false, 0));
        OK(tri_op_matmul(dev, dwg, dog, xg, tri_tensor_none(), true, false, 1.0f));
        row0 += counts[g];
    }
    cr_assert(ot_same_bits("grouped forward = matmul per group", ot_read(dev, out), ot_read(dev, out_ref),
                           (size_t)(P * N_out)));
    cr_assert(ot_same_bits("grouped dinp = matmul per group", ot_read(dev, dx), ot_read(dev, dx_ref), (size_t)(P * C)));
    cr_assert(ot_same_bits("grouped dweight = matmul per group", ot_read(dev, dw), ot_read(dev, dw_ref),
                           (size_t)(G * N_out * C)));
    /* against fp64: each element a sum of (C, N_out or the group's rows) products, within γ_n Σ|terms| */
    float *go = ot_read(dev, out), *gx = ot_read(dev, dx), *gw = ot_read(dev, dw);
    row0 = 0;
    for (int64_t g = 0; g < G; g++) {
        const float *wg = hw + g * N_out * C;
        for (int64_t i = row0; i < row0 + counts[g]; i++) {
            for (int64_t o = 0; o < N_out; o++) {
                double s = 0, a = 0;
                for (int64_t c = 0; c < C; c++)
                    s += (double)hx[i * C + c] * wg[o * C + c], a += fabs((double)hx[i * C + c] * wg[o * C + c]);
                cr_assert_leq(fabs(go[i * N_out + o] - s), gamma_n((double)C) * a, "out[%lld,%lld]", (long long)i,
                              (long long)o);
            }
            for (int64_t c = 0; c < C; c++) {
                double s = 0, a = 0;
                for (int64_t o = 0; o < N_out; o++)
                    s += (double)hdo[i * N_out + o] * wg[o * C + c], a += fabs((double)hdo[i * N_out + o] * wg[o * C + c]);
                cr_assert_leq(fabs(gx[i * C + c] - s), gamma_n((double)N_out) * a, "dx[%lld,%lld]", (long long)i,
                              (long long)c);
            }
        }
        for (int64_t o = 0; o < N_out; o++)
            for (int64_t c = 0; c < C; c++) {
                double s = hdw[(g * N_out + o) * C + c], a = fabs(s);
                for (int64_t i = row0; i < row0 + counts[g]; i++)
                    s += (double)hdo[i * N_out + o] * hx[i * C + c], a += fabs((double)hdo[i * N_out + o] * hx[i * C + c]);
                cr_assert_leq(fabs(gw[(g * N_out + o) * C + c] - s), gamma_n((double)counts[g] + 1) * a,
                              "dw[%lld,%lld,%lld]", (long long)g, (long long)o, (long long)c);
            }
        row0 += counts[g];
    }
    for (int64_t i = row0; i < P; i++) /* rows past the counts' sum: neither read nor written */
        for (int64_t o = 0; o < N_out; o++)
            cr_assert_eq(go[i * N_out + o], pad[i * N_out + o], "out row %lld past R was written", (long long)i);
}

Test(moe_dispatch, grouped_matmul_is_matmul_per_group)
{
    static const int32_t c1[] = {3, 0, 5, 1}, c2[] = {9}, c3[] = {0, 0, 7}, c4[] = {1}, c5[] = {0, 0};
    grouped_case(c1, 4, 9, 6, 5, 1);    /* an expert with no rows */
    grouped_case(c1, 4, 12, 17, 33, 2); /* rows past R */
    grouped_case(c2, 1, 9, 4, 3, 3);    /* one expert */
    grouped_case(c3, 3, 7, 5, 8, 4);    /* every row to the last expert */
    grouped_case(c4, 1, 1, 1, 1, 5);    /* N = 1 */
    grouped_case(c5, 2, 3, 4, 2, 6);    /* no rows at all: the weight gradient stays (beta 1) */
}

Test(moe_dispatch, grouped_matmul_weight_gradient_of_an_empty_group_is_scaled_by_beta)
{
    int32_t counts[] = {2, 0};
    float hw[2 * 3 * 2] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    tri_tensor dw = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, 2, 3, 2), hw);
    tri_tensor dout = f32(2, 3, ot_uniform(6, -1, 1, 7)), x = f32(2, 2, ot_uniform(4, -1, 1, 8));
    OK(tri_op_grouped_matmul_backward_weight(dev, dw, dout, x, counts, 0.0f));
    float *g = ot_read(dev, dw);
    for (int i = 6; i < 12; i++)
        cr_assert_eq(g[i], 0.0f, "empty group's dw[%d] = %g with beta 0", i, g[i]);
}

Test(moe_dispatch, grouped_matmul_refuses_bad_counts)
{
    tri_tensor x = f32(4, 3, ot_uniform(12, -1, 1, 1)), out = f32(4, 5, NULL);
    tri_tensor w = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, 2, 5, 3), ot_uniform(30, -1, 1, 2));
    int32_t too_many[] = {3, 2}, negative[] = {-1, 2};
    cr_assert_eq(tri_op_grouped_matmul_forward(dev, out, x, w, too_many), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "counts sum to 5 rows"), "%s", tri_error_message());
    cr_assert_eq(tri_op_grouped_matmul_forward(dev, out, x, w, negative), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "counts[0] = -1"), "%s", tri_error_message());
    cr_assert_eq(tri_op_grouped_matmul_forward(dev, out, x, w, NULL), TRI_EINVAL);
    cr_assert_eq(tri_op_grouped_matmul_forward(dev, out, x, x, too_many), TRI_EINVAL); /* w not 3-d */
    cr_assert(strstr(tri_error_message(), "must be 3-d"), "%s", tri_error_message());
}

Test(moe_dispatch, dispatch_refuses_bad_shapes)
{
    tri_tensor idx = i32_2d(3, 2, (int32_t[]){0, 1, 1, 0, 0, 1}), rows = i32_2d(3, 2, NULL);
    tri_tensor sorted = ot_tensor(dev, tri_tensor_1d(NULL, TRI_I32, 6), NULL);
    tri_tensor tpe = ot_tensor(dev, tri_tensor_1d(NULL, TRI_I32, 2), NULL), bad = f32(3, 2, NULL);
    cr_assert_eq(tri_op_moe_permute_map(dev, rows, sorted, tpe, bad), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "'expert_idx'"), "%s", tri_error_message());
    cr_assert_eq(tri_op_moe_permute_map(dev, rows, tri_tensor_1d(sorted.data, TRI_I32, 5), tpe, idx), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "'sorted_indices'"), "%s", tri_error_message());
    OK(tri_op_moe_permute_map(dev, rows, sorted, tpe, idx));
    tri_tensor x = f32(3, 4, ot_uniform(12, -1, 1, 3)), xp = f32(5, 4, NULL), w = f32(3, 2, ot_uniform(6, 0, 1, 4));
    cr_assert_eq(tri_op_moe_permute(dev, xp, x, sorted), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "'x_perm'"), "%s", tri_error_message());
    cr_assert_eq(tri_op_moe_unpermute(dev, x, f32(6, 4, NULL), rows, f32(3, 3, NULL)), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "'w'"), "%s", tri_error_message());
    cr_assert_eq(tri_op_moe_unpermute_backward(dev, f32(6, 4, NULL), f32(3, 2, NULL), x, f32(6, 4, NULL), sorted,
                                               rows, ot_tensor(dev, tri_tensor_2d(NULL, TRI_I32, 3, 2), NULL)),
                 TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "'w'"), "%s", tri_error_message());
    (void)w;
}

/* ---- the expert MLP as a composition: SwiGLU experts over the permuted tokens ---- */

/* N tokens of width C, K of E experts, F the experts' intermediate width */
enum { MN = 5, MC = 8, MF = 6, ME = 4, MK = 2 };

/* expert 3 gets no token, token 2's second selection is dropped */
static const int32_t MLP_IDX[MN * MK] = {0, 2, 2, 0, 0, -1, 2, 1, 1, 0};

typedef struct mlp_ref {
    double x[MN * MC], wgu[ME * 2 * MF * MC], wd[ME * MC * MF], rw[MN * MK], g[MN * MC];
} mlp_ref;

static double silu(double v)
{
    return v / (1 + exp(-v));
}

/* y(N, C) of the float64 per-token loop: each token through its K experts, weighted sum. When bound
 * is given, bound[n*C + c] receives the derived fp32 error bound of y (see the test). */
static void mlp_forward64(const mlp_ref *m, double *y, double *bound)
{
    for (int n = 0; n < MN; n++) {
        for (int c = 0; c < MC; c++)
            y[n * MC + c] = 0, bound ? bound[n * MC + c] = 0 : 0;
        double absy[MC] = {0};
        for (int k = 0; k < MK; k++) {
            int e = MLP_IDX[n * MK + k];
            if (e < 0)
                continue;
            double h[MF], dh[MF];
            for (int j = 0; j < MF; j++) {
                double gt = 0, up = 0, ag = 0, au = 0;
                for (int c = 0; c < MC; c++) {
                    gt += m->wgu[(e * 2 * MF + j) * MC + c] * m->x[n * MC + c];
                    up += m->wgu[(e * 2 * MF + MF + j) * MC + c] * m->x[n * MC + c];
                    ag += fabs(m->wgu[(e * 2 * MF + j) * MC + c] * m->x[n * MC + c]);
                    au += fabs(m->wgu[(e * 2 * MF + MF + j) * MC + c] * m->x[n * MC + c]);
                }
                h[j] = silu(gt) * up;
                /* |silu'| <= 1.1: the gate's and up's sum errors through the product, and 8 u of
                 * silu's own exp, division and product */
                dh[j] = 1.1 * fabs(up) * gamma_n(MC) * ag + fabs(silu(gt)) * gamma_n(MC) * au + 8 * U * fabs(h[j]);
            }
            for (int c = 0; c < MC; c++) {
                double o = 0, ao = 0, prop = 0;
                for (int j = 0; j < MF; j++) {
                    o += m->wd[(e * MC + c) * MF + j] * h[j];
                    ao += fabs(m->wd[(e * MC + c) * MF + j] * h[j]);
                    prop += fabs(m->wd[(e * MC + c) * MF + j]) * dh[j];
                }
                y[n * MC + c] += m->rw[n * MK + k] * o;
                absy[c] += fabs(m->rw[n * MK + k] * o);
                if (bound)
                    bound[n * MC + c] += fabs(m->rw[n * MK + k]) * (gamma_n(MF) * ao + prop);
            }
        }
        for (int c = 0; bound && c < MC; c++)
            bound[n * MC + c] = (bound[n * MC + c] + gamma_n(MK) * absy[c]) * (1 + 4 * MK * U);
    }
}

static double mlp_loss64(void *ctx)
{
    const mlp_ref *m = ctx;
    double y[MN * MC];
    mlp_forward64(m, y, NULL);
    return ot_dot(y, m->g, MN * MC);
}

static void widen_into(double *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
}

Test(moe_dispatch, swiglu_experts_against_a_float64_token_loop)
{
    size_t n_gu = ME * 2 * MF * MC, n_d = ME * MC * MF;
    float *hx = ot_uniform(MN * MC, -1, 1, 11), *hgu = ot_uniform(n_gu, -0.5f, 0.5f, 12);
    float *hd = ot_uniform(n_d, -0.5f, 0.5f, 13), *hrw = ot_uniform(MN * MK, 0.1f, 1, 14);
    float *hg = ot_uniform(MN * MC, -1, 1, 15);
    mlp_ref *m = (mlp_ref *)ot_doubles(sizeof(mlp_ref) / sizeof(double));
    widen_into(m->x, hx, MN * MC), widen_into(m->wgu, hgu, n_gu), widen_into(m->wd, hd, n_d);
    widen_into(m->rw, hrw, MN * MK), widen_into(m->g, hg, MN * MC);

    /* forward: map, permute, gate|up, SwiGLU, down, combine */
    maps mp = permute_map_checked(MLP_IDX, MN, MK, ME);
    int32_t counts[ME];
    memcpy(counts, mp.h_tpe, sizeof counts); /* the one read-back of tokens_per_expert a layer needs */
    cr_assert_eq(counts[3], 0);
    int64_t P = MN * MK, R = mp.R;
    tri_tensor x = f32(MN, MC, hx), rw = f32(MN, MK, hrw), g = f32(MN, MC, hg);
    tri_tensor wgu = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, ME, 2 * MF, MC), hgu);
    tri_tensor wd = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, ME, MC, MF), hd);
    tri_tensor x_perm = f32(P, MC, NULL), gu = f32(P, 2 * MF, NULL), h = f32(P, MF, NULL), o = f32(P, MC, NULL);
    tri_tensor y = f32(MN, MC, NULL);
    OK(tri_op_moe_permute(dev, x_perm, x, mp.sorted));
    OK(tri_op_grouped_matmul_forward(dev, gu, x_perm, wgu, counts));
    OK(tri_op_swiglu_forward(dev, tri_tensor_slice0(h, 0, R), tri_tensor_slice0(gu, 0, R)));
    OK(tri_op_grouped_matmul_forward(dev, o, h, wd, counts));
    OK(tri_op_fill(dev, tri_tensor_slice0(o, R, P - R), 0.0f)); /* rows past R: never read by the combine */
    OK(tri_op_moe_unpermute(dev, y, o, mp.rows, rw));

    /* backward of L = sum(y * g) */
    tri_tensor do_ = f32(P, MC, NULL), drw = f32(MN, MK, NULL), dh = f32(P, MF, NULL), dgu = f32(P, 2 * MF, NULL);
    tri_tensor dxp = f32(P, MC, NULL), dx = f32(MN, MC, NULL);
    tri_tensor dwgu = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, ME, 2 * MF, MC), ot_floats(n_gu));
    tri_tensor dwd = ot_tensor(dev, tri_tensor_3d(NULL, TRI_F32, ME, MC, MF), ot_floats(n_d));
    OK(tri_op_moe_unpermute_backward(dev, do_, drw, g, o, mp.sorted, mp.rows, rw));
    OK(tri_op_grouped_matmul_backward_weight(dev, dwd, do_, h, counts, 1.0f));
    OK(tri_op_grouped_matmul_backward_input(dev, dh, do_, wd, counts, 0.0f));
    OK(tri_op_swiglu_backward(dev, tri_tensor_slice0(dgu, 0, R), tri_tensor_slice0(gu, 0, R), tri_tensor_slice0(dh, 0, R)));
    OK(tri_op_fill(dev, tri_tensor_slice0(dgu, R, P - R), 0.0f));
    OK(tri_op_grouped_matmul_backward_weight(dev, dwgu, dgu, x_perm, counts, 1.0f));
    OK(tri_op_grouped_matmul_backward_input(dev, dxp, dgu, wgu, counts, 0.0f));
    OK(tri_op_fill(dev, tri_tensor_slice0(dxp, R, P - R), 0.0f));
    OK(tri_op_moe_permute_backward(dev, dx, dxp, mp.rows));

    /* Forward: y within the bound derived along the fp32 path (mlp_forward64): the gate and up sums
     * of C products (γ_C), SwiGLU (|silu'| <= 1.1, 8 u of its own), the down sum of F products (γ_F)
     * with the propagated error, the combine of K weighted terms (γ_K), and 4 K u for the products
     * with the rounded weights. */
    double y64[MN * MC], bound[MN * MC];
    mlp_forward64(m, y64, bound);
    float *gy = ot_read(dev, y);
    for (int i = 0; i < MN * MC; i++)
        cr_assert_leq(fabs(gy[i] - y64[i]), bound[i], "y[%d] %.9g, fp64 %.9g, bound %.3g", i, gy[i], y64[i], bound[i]);

    /* Backward against central differences of the fp64 loop (exact to ~1e-9, OT_FD_H). Each fp32
     * gradient element is a chain of the same sums transposed: within a few γ_(C+F+K) of the sum of
     * its terms' magnitudes, which here are at most the tensor's largest gradient times the fan-in;
     * 32 (C + F + K) u = 3.1e-5 of the tensor's largest element bounds them (the measured error is
     * ~1e-7: TRIDENT_TEST_VERBOSE=1), and a wrong index or order of a term shows as O(1). */
    double tol = 32.0 * (MC + MF + MK) * U;
    struct {
        const char *what;
        double *x;
        size_t n;
        tri_tensor got;
    } grads[] = {{"dx", m->x, MN * MC, dx}, {"d router weights", m->rw, MN * MK, drw},
                 {"d gate|up weights", m->wgu, n_gu, dwgu}, {"d down weights", m->wd, n_d, dwd}};
    for (size_t t = 0; t < sizeof grads / sizeof grads[0]; t++) {
        double *fd = ot_doubles(grads[t].n), big = 0;
        ot_fd_grad(fd, grads[t].x, grads[t].n, mlp_loss64, m);
        float *got = ot_read(dev, grads[t].got);
        for (size_t i = 0; i < grads[t].n; i++)
            big = fmax(big, fabs(fd[i]));
        cr_assert_gt(big, 0.01, "%s: the check needs gradients of size", grads[t].what);
        for (size_t i = 0; i < grads[t].n; i++)
            cr_assert_leq(fabs(got[i] - fd[i]), tol * big, "%s[%zu]: %.9g, finite differences %.9g", grads[t].what, i,
                          got[i], fd[i]);
    }
    /* the empty expert's weights get no gradient, and token 2's dropped selection none either */
    float *gwd = ot_read(dev, dwd), *grw = ot_read(dev, drw);
    for (int i = 3 * MC * MF; i < ME * MC * MF; i++)
        cr_assert_eq(gwd[i], 0.0f, "expert 3 has no token but a down-weight gradient %g", gwd[i]);
    cr_assert_eq(grw[2 * MK + 1], 0.0f);
}
