/* tests/test_moe_bf16.c - the MoE block (layers/moe.h) under bf16 mixed precision on the CPU: the
 * same inputs through the fp32 block and the bf16 block, the bf16 block held to a float64 walk of the
 * block within a bound derived along its bf16 path.
 *
 * The inputs (x, dy, every weight) are bf16 values, so both blocks see the same numbers. The router
 * is fp32 in both (its logits are the same exact products summed by the same sgemm on the CPU), so
 * the selections, weights and logits are asserted bit-identical between the two runs; the float64
 * walk then takes that routing and follows the bf16 path's roundings with a running error bound
 * (first order; Higham, "Accuracy and Stability of Numerical Algorithms", §3.1 and the running error
 * analysis of §3.3): u_b = 2^-8 for each value stored as bf16 (gate|up, h, the experts' outputs o,
 * y, d_o, dh, dgate|up, the permuted input gradient, dx: |fl(v) - v| <= u_b |v|), γ_n = n u / (1 - n
 * u) with u = 2^-24 times the sum of |terms| for each fp32 sum of n terms, |silu'| <= 1.1, |silu''|
 * <= 0.5, 8 u for SwiGLU's own fp32 roundings; a product's bound is |a| b_b + |b| b_a; the weight
 * gradients' fp32 sums over a group's rows add γ_N of their terms, and their += onto the starting
 * value 0.25 one u of the result. The router's backward (softmax, renormalised: dl_j = w_j (g_j -
 * sum_i w_i g_i), g = d_expert_w = dot(dy, o)) carries the bound of o into dlogits, then into the
 * router weight's gradient and dx's share. The first-order bounds are multiplied by 1.1: the
 * neglected second-order terms are products of two bounds, each below 2^-8 relative times the fan-in
 * ratio, so below 10% of the first-order ones for these shapes. Every element of y, dx and each
 * gradient must lie within its bound; a wrong row or a missing rounding shows as O(1) or as a
 * bf16-sized error past a bound that has none there. The bf16 block must differ from the fp32 block
 * (it did round) and the fp32 block must lie within the same bounds (it is the same walk with fewer
 * roundings). Cases: Mixtral's routing with a shared expert (Megatron's), and a capacity that drops
 * selections (Qwen3's routing without renormalisation is not walked: its backward is the fp32
 * block's, tested in test_moe_block). TRIDENT_TEST_VERBOSE=1 prints the worst error / bound ratios. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device/ops/moe_router_math.h"
#include "layers/moe.h"
#include "tests/opsutil.h"

#define U 5.9604644775390625e-8 /* 2^-24 */
#define UB 0.00390625           /* 2^-8, bf16's unit roundoff */
#define G0 0.25f                /* the parameter gradients' starting value (+= is checked) */

static tri_device *dev;

static void setup(void)
{
    dev = ot_device(2);
}

TestSuite(moe_bf16, .init = setup, .fini = ot_teardown);

#define OK(call) cr_assert_eq((call), TRI_OK, "%s", tri_error_message())

static double gam(double n)
{
    return n * U / (1 - n * U);
}

/* ---- one run of the block in a dtype ---- */

typedef struct host_in {
    int64_t N, C, E, K, I, Is;
    float *x, *dy, *wr, *wgu, *wd, *sgu, *sd;
} host_in;

typedef struct run {
    tri_moe_acts a;
    tri_moe_scratch sc;
    tri_moe_weights w, g;
    tri_tensor y, dx;
} run;

static tri_tensor grad_of(tri_tensor shape)
{
    size_t n = (size_t)tri_tensor_numel(shape);
    float *h = ot_floats(n);
    for (size_t i = 0; i < n; i++)
        h[i] = G0;
    return ot_put_f32(dev, shape, h);
}

static void run_block(run *r, const host_in *h, const tri_moe_config *cfg0, tri_dtype dt)
{
    tri_moe_config cfg = *cfg0;
    cfg.shape.dtype = dt;
    int64_t N = h->N, C = h->C, E = h->E, I = h->I, Is = h->Is;
    tri_tensor x = ot_tensor_as(dev, dt, ot_m2(N, C), h->x), dy = ot_tensor_as(dev, dt, ot_m2(N, C), h->dy);
    r->y = ot_tensor_as(dev, dt, ot_m2(N, C), NULL);
    r->dx = ot_tensor_as(dev, dt, ot_m2(N, C), NULL);
    tri_tensor swgu = tri_tensor_3d(NULL, TRI_F32, E, 2 * I, C), swd = tri_tensor_3d(NULL, TRI_F32, E, C, I);
    r->w = (tri_moe_weights){.router_w = ot_tensor_as(dev, dt, ot_m2(E, C), h->wr),
                             .gate_up_w = ot_tensor_as(dev, dt, swgu, h->wgu),
                             .down_w = ot_tensor_as(dev, dt, swd, h->wd)};
    r->g = (tri_moe_weights){.router_w = grad_of(ot_m2(E, C)), .gate_up_w = grad_of(swgu), .down_w = grad_of(swd)};
    if (Is) {
        r->w.shared_gate_up_w = ot_tensor_as(dev, dt, ot_m2(2 * Is, C), h->sgu);
        r->w.shared_down_w = ot_tensor_as(dev, dt, ot_m2(C, Is), h->sd);
        r->g.shared_gate_up_w = grad_of(ot_m2(2 * Is, C));
        r->g.shared_down_w = grad_of(ot_m2(C, Is));
    }
    size_t ab = tri_moe_acts_bytes(&cfg.shape), sb = tri_moe_scratch_bytes(&cfg.shape);
    cr_assert(ab > 0 && sb > 0, "%s", tri_error_message());
    tri_tensor am = ot_tensor(dev, tri_tensor_1d(NULL, TRI_F32, (int64_t)(ab / 4)), NULL);
    tri_tensor sm = ot_tensor(dev, tri_tensor_1d(NULL, TRI_F32, (int64_t)(sb / 4)), NULL);
    OK(tri_moe_bind(&cfg.shape, &r->a, am.data, &r->sc, sm.data));
    cr_assert_eq(r->a.x_perm.dtype, dt);
    cr_assert_eq(r->a.logits.dtype, TRI_F32, "the router's logits stay fp32");
    OK(tri_moe_forward(dev, r->y, &r->a, x, &r->w, &cfg));
    OK(tri_moe_backward(dev, r->dx, &r->g, dy, &r->a, x, &r->w, &r->sc, &cfg, 1.0f));
}

/* ---- the float64 walk with running bounds ---- */

typedef struct walk {
    double *y, *by, *dx, *bdx, *dwr, *bdwr, *dwgu, *bdwgu, *dwd, *bdwd, *dsgu, *bdsgu, *dsd, *bdsd;
} walk;

static double silu(double v)
{
    return v / (1 + exp(-v));
}

static double dsilu(double v)
{
    double s = 1 / (1 + exp(-v));
    return s * (1 + v * (1 - s));
}

/* One expert (or the shared one) on token x (C) with weight w: adds its share of y and of the input
 * and weight gradients; returns dot(dy, o) and its bound in *g, *bg. rounded_do: d_o = w dy stored
 * bf16 (a routed expert) or dy itself (the shared one). */
static void expert64(const host_in *h, int64_t I, const float *wgu, const float *wd, const float *x, const float *dy,
                     double w, bool rounded_do, double *y, double *by, double *sy, double *dx, double *bdx,
                     double *dwgu, double *bdwgu, double *dwd, double *bdwd, double *g, double *bg)
{
    int64_t C = h->C;
    double *gt = calloc((size_t)(8 * I + 6 * C), sizeof(double));
    double *bgt = gt + I, *up = bgt + I, *bup = up + I, *hh = bup + I, *bh = hh + I, *dh = bh + I, *bdh = dh + I;
    double *o = bdh + I, *bo = o + C, *dO = bo + C, *bdO = dO + C, *dxr = bdO + C, *bdxr = dxr + C;
    for (int64_t i = 0; i < I; i++) {
        double a = 0, sa = 0, b = 0, sb = 0;
        for (int64_t c = 0; c < C; c++) {
            a += (double)wgu[i * C + c] * x[c], sa += fabs((double)wgu[i * C + c] * x[c]);
            b += (double)wgu[(I + i) * C + c] * x[c], sb += fabs((double)wgu[(I + i) * C + c] * x[c]);
        }
        gt[i] = a, bgt[i] = gam((double)C) * sa + UB * (fabs(a) + gam((double)C) * sa);
        up[i] = b, bup[i] = gam((double)C) * sb + UB * (fabs(b) + gam((double)C) * sb);
        hh[i] = silu(a) * b;
        double bpre = 1.1 * bgt[i] * fabs(b) + fabs(silu(a)) * bup[i] + 1.1 * bgt[i] * bup[i] + 8 * U * fabs(hh[i]);
        bh[i] = bpre + UB * (fabs(hh[i]) + bpre);
    }
    *g = 0, *bg = 0;
    double sg = 0;
    for (int64_t c = 0; c < C; c++) {
        double v = 0, sv = 0, bv = 0;
        for (int64_t i = 0; i < I; i++)
            v += (double)wd[c * I + i] * hh[i], sv += fabs((double)wd[c * I + i] * hh[i]),
                bv += fabs((double)wd[c * I + i]) * bh[i];
        bv += gam((double)I) * sv;
        o[c] = v, bo[c] = bv + UB * (fabs(v) + bv);
        y[c] += w * v, by[c] += w * bo[c], sy[c] += fabs(w * v);
        *g += (double)dy[c] * v, sg += fabs((double)dy[c] * v), *bg += fabs((double)dy[c]) * bo[c];
        dO[c] = w * dy[c], bdO[c] = rounded_do ? UB * fabs(dO[c]) : 0;
    }
    *bg += gam((double)C) * sg;
    for (int64_t i = 0; i < I; i++) {
        double v = 0, sv = 0, bv = 0;
        for (int64_t c = 0; c < C; c++)
            v += (double)wd[c * I + i] * dO[c], sv += fabs((double)wd[c * I + i] * dO[c]),
                bv += fabs((double)wd[c * I + i]) * bdO[c];
        bv += gam((double)C) * sv;
        dh[i] = v, bdh[i] = bv + UB * (fabs(v) + bv);
    }
    for (int64_t i = 0; i < I; i++) {
        double s = silu(gt[i]), ds = dsilu(gt[i]);
        double dg = dh[i] * up[i] * ds, du = dh[i] * s;
        double bdg = fabs(up[i] * ds) * bdh[i] + fabs(dh[i] * ds) * bup[i] + 0.5 * fabs(dh[i] * up[i]) * bgt[i] +
                     8 * U * fabs(dg);
        double bdu = fabs(s) * bdh[i] + 1.1 * fabs(dh[i]) * bgt[i] + 8 * U * fabs(du);
        bdg += UB * (fabs(dg) + bdg), bdu += UB * (fabs(du) + bdu);
        for (int64_t c = 0; c < C; c++) {
            dwgu[i * C + c] += dg * x[c], bdwgu[i * C + c] += bdg * fabs(x[c]) + gam((double)h->N) * fabs(dg * x[c]);
            dwgu[(I + i) * C + c] += du * x[c],
                bdwgu[(I + i) * C + c] += bdu * fabs(x[c]) + gam((double)h->N) * fabs(du * x[c]);
            dxr[c] += (double)wgu[i * C + c] * dg + (double)wgu[(I + i) * C + c] * du;
            bdxr[c] += fabs((double)wgu[i * C + c]) * bdg + fabs((double)wgu[(I + i) * C + c]) * bdu +
                       gam(2.0 * (double)I) * (fabs((double)wgu[i * C + c] * dg) + fabs((double)wgu[(I + i) * C + c] * du));
        }
        for (int64_t c = 0; c < C; c++)
            dwd[c * I + i] += dO[c] * hh[i],
                bdwd[c * I + i] += fabs(dO[c]) * bh[i] + fabs(hh[i]) * bdO[c] + gam((double)h->N) * fabs(dO[c] * hh[i]);
    }
    /* a routed expert's input-gradient row is stored bf16 (the permuted rows), the shared one's not;
     * the K <= 8 rows' fp32 sum adds at most γ_8 of each */
    for (int64_t c = 0; c < C; c++)
        dx[c] += dxr[c], bdx[c] += bdxr[c] + (rounded_do ? UB * (fabs(dxr[c]) + bdxr[c]) + gam(8) * fabs(dxr[c]) : 0);
    free(gt);
}

/* The walk over the tokens with the runs' routing (kept (N, K), weights (N, K)). */
static void walk64(const host_in *h, const int32_t *kept, const float *ew, bool norm_topk, walk *W)
{
    int64_t N = h->N, C = h->C, E = h->E, K = h->K, I = h->I, Is = h->Is;
    double *sy = calloc((size_t)C, sizeof(double)), *dxe = calloc((size_t)C, sizeof(double));
    double *bdxe = calloc((size_t)C, sizeof(double));
    for (int64_t n = 0; n < N; n++) {
        const float *x = h->x + n * C, *dy = h->dy + n * C;
        double *y = W->y + n * C, *by = W->by + n * C, *dx = W->dx + n * C, *bdx = W->bdx + n * C;
        double g[8] = {0}, bg[8] = {0};
        memset(sy, 0, sizeof(double) * (size_t)C);
        memset(dxe, 0, sizeof(double) * (size_t)C), memset(bdxe, 0, sizeof(double) * (size_t)C);
        for (int64_t k = 0; k < K; k++) {
            int32_t e = kept[n * K + k];
            if (e < 0)
                continue; /* dropped: nothing in y, its d_expert_w not read */
            expert64(h, I, h->wgu + e * 2 * I * C, h->wd + e * C * I, x, dy, ew[n * K + k], true, y, by, sy, dxe, bdxe,
                     W->dwgu + e * 2 * I * C, W->bdwgu + e * 2 * I * C, W->dwd + e * C * I, W->bdwd + e * C * I, &g[k],
                     &bg[k]);
        }
        /* the permuted input's gradient rows were bf16, then summed in k order and rounded into dx */
        for (int64_t c = 0; c < C; c++) {
            double b = bdxe[c] + UB * (fabs(dxe[c]) + bdxe[c]);
            dx[c] += dxe[c], bdx[c] += b;
            by[c] += gam((double)K + 1) * sy[c];
        }
        /* the combine rounded y once; the shared expert's matmul adds and rounds again */
        for (int64_t c = 0; c < C; c++)
            by[c] += UB * (fabs(y[c]) + by[c]);
        if (Is) {
            double gs, bgs;
            memset(sy, 0, sizeof(double) * (size_t)C);
            expert64(h, Is, h->sgu, h->sd, x, dy, 1.0, false, y, by, sy, dx, bdx, W->dsgu, W->bdsgu, W->dsd, W->bdsd,
                     &gs, &bgs);
            for (int64_t c = 0; c < C; c++)
                by[c] += gam(2) * sy[c] + UB * (fabs(y[c]) + by[c]);
        }
        /* router: dl_j = w_j (g_j - sum_i w_i g_i) (softmax, renormalised) or w_j g_j - (s_e) ... only
         * the renormalised softmax is walked; dropped selections give g = 0 */
        cr_assert(norm_topk);
        double dot = 0, bdot = 0, sdot = 0;
        for (int64_t k = 0; k < K; k++)
            dot += ew[n * K + k] * g[k], bdot += ew[n * K + k] * bg[k], sdot += fabs(ew[n * K + k] * g[k]);
        for (int64_t k = 0; k < K; k++) {
            int32_t e = kept[n * K + k] >= 0 ? kept[n * K + k] : -1 - kept[n * K + k];
            double w = ew[n * K + k], dl = w * (g[k] - dot);
            double bdl = w * (bg[k] + bdot) + gam((double)K + 2) * w * (fabs(g[k]) + sdot);
            for (int64_t c = 0; c < C; c++) {
                W->dwr[e * C + c] += dl * x[c];
                W->bdwr[e * C + c] += bdl * fabs(x[c]) + gam((double)N) * fabs(dl * x[c]);
                dx[c] += dl * h->wr[e * C + c];
                bdx[c] += bdl * fabs((double)h->wr[e * C + c]) + gam((double)E) * fabs(dl * h->wr[e * C + c]);
            }
        }
        /* dx: the router's share and the shared expert's each added and rounded once more */
        for (int64_t c = 0; c < C; c++)
            bdx[c] += 2 * UB * (fabs(dx[c]) + bdx[c]);
    }
    free(sy), free(dxe), free(bdxe);
}

/* got (with start subtracted) within 1.1 bound (+ u of the fp32 result when start != 0) of want. */
static double check(const char *what, const float *got, const double *want, const double *bound, size_t n,
                    float start)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double b = 1.1 * bound[i] + (start != 0 ? 2 * U * (fabs(want[i]) + start) : 0) + 1e-30;
        double err = fabs((double)got[i] - start - want[i]);
        cr_assert_leq(err, b, "%s[%zu]: %.9g, float64 walk %.9g, bound %.3g", what, i, (double)got[i] - start,
                      want[i], b);
        worst = fmax(worst, err / b);
    }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s: worst error / bound %.3f\n", what, worst);
    return worst;
}

static double *dz(size_t n)
{
    return ot_doubles(n);
}

static void bf16_case(int64_t N, int64_t E, int64_t K, int64_t Is, int64_t capacity, uint64_t seed)
{
    host_in h = {.N = N, .C = 16, .E = E, .K = K, .I = 12, .Is = Is};
    int64_t C = h.C, I = h.I;
    size_t nx = (size_t)(N * C), nwr = (size_t)(E * C), nwgu = (size_t)(E * 2 * I * C), nwd = (size_t)(E * C * I);
    size_t nsgu = (size_t)(2 * Is * C), nsd = (size_t)(C * Is);
    h.x = ot_bf16_uniform(nx, -1, 1, seed), h.dy = ot_bf16_uniform(nx, -1, 1, seed + 1);
    h.wr = ot_bf16_uniform(nwr, -1, 1, seed + 2), h.wgu = ot_bf16_uniform(nwgu, -0.5f, 0.5f, seed + 3);
    h.wd = ot_bf16_uniform(nwd, -0.5f, 0.5f, seed + 4);
    h.sgu = Is ? ot_bf16_uniform(nsgu, -0.5f, 0.5f, seed + 5) : NULL;
    h.sd = Is ? ot_bf16_uniform(nsd, -0.5f, 0.5f, seed + 6) : NULL;
    tri_moe_config cfg = {.shape = {.N = N, .C = C, .E = E, .K = K, .I = I, .I_shared = Is},
                          .score_func = TRI_MOE_SOFTMAX, .norm_topk = true, .capacity = capacity,
                          .drop_policy = TRI_MOE_DROP_PROBS};
    run f, b;
    run_block(&f, &h, &cfg, TRI_F32);
    run_block(&b, &h, &cfg, TRI_BF16);

    /* the router is fp32 in both: the same logits, selections and weights, bit for bit */
    float *lf = ot_read(dev, f.a.logits), *lb = ot_read(dev, b.a.logits);
    cr_assert(ot_same_bits("logits", lb, lf, (size_t)(N * E)));
    int32_t *kf = ot_ints((size_t)(N * K)), *kb = ot_ints((size_t)(N * K));
    ot_download(dev, kf, f.a.kept_idx), ot_download(dev, kb, b.a.kept_idx);
    cr_assert_eq(memcmp(kf, kb, sizeof(int32_t) * (size_t)(N * K)), 0, "the bf16 block routed differently");
    float *ew = ot_read(dev, b.a.expert_w);
    cr_assert(ot_same_bits("expert_w", ew, ot_read(dev, f.a.expert_w), (size_t)(N * K)));
    int64_t dropped = 0;
    for (int64_t i = 0; i < N * K; i++)
        dropped += kb[i] < 0;
    cr_assert_eq(dropped > 0, capacity > 0, "%lld dropped selections with capacity %lld", (long long)dropped,
                 (long long)capacity);

    walk W = {dz(nx), dz(nx), dz(nx), dz(nx), dz(nwr), dz(nwr), dz(nwgu), dz(nwgu), dz(nwd), dz(nwd),
              dz(nsgu + 1), dz(nsgu + 1), dz(nsd + 1), dz(nsd + 1)};
    walk64(&h, kb, ew, true, &W);
    run *rs[2] = {&b, &f};
    for (int which = 0; which < 2; which++) {
        run *r = rs[which];
        check("y", ot_read(dev, r->y), W.y, W.by, nx, 0);
        check("dx", ot_read(dev, r->dx), W.dx, W.bdx, nx, 0);
        check("d router", ot_read(dev, r->g.router_w), W.dwr, W.bdwr, nwr, G0);
        check("d gate|up", ot_read(dev, r->g.gate_up_w), W.dwgu, W.bdwgu, nwgu, G0);
        check("d down", ot_read(dev, r->g.down_w), W.dwd, W.bdwd, nwd, G0);
        if (Is) {
            check("d shared gate|up", ot_read(dev, r->g.shared_gate_up_w), W.dsgu, W.bdsgu, nsgu, G0);
            check("d shared down", ot_read(dev, r->g.shared_down_w), W.dsd, W.bdsd, nsd, G0);
        }
    }
    /* the bf16 block did round: y differs from the fp32 block's by a bf16-sized amount somewhere */
    float *yb = ot_read(dev, b.y), *yf = ot_read(dev, f.y);
    double most = 0;
    for (size_t i = 0; i < nx; i++)
        most = fmax(most, fabs((double)yb[i] - yf[i]) / (fabs((double)yf[i]) + 1e-3));
    cr_assert_gt(most, 1e-4, "the bf16 block's y equals the fp32 block's (largest relative difference %.3g)", most);
}

Test(moe_bf16, mixtral_routing_with_a_shared_expert)
{
    bf16_case(11, 4, 2, 8, 0, 700);
}

Test(moe_bf16, capacity_drops_under_bf16)
{
    bf16_case(12, 4, 2, 0, tri_moe_capacity(12, 2, 4, 0.5), 800);
}

Test(moe_bf16, buffers_carry_the_dtype_and_the_router_scratch)
{
    tri_moe_shape s = {.N = 37, .C = 24, .E = 8, .K = 2, .I = 40, .I_shared = 16};
    size_t a32 = tri_moe_acts_bytes(&s), s32 = tri_moe_scratch_bytes(&s);
    s.dtype = TRI_BF16;
    size_t a16 = tri_moe_acts_bytes(&s), s16 = tri_moe_scratch_bytes(&s);
    /* the rows halve (x_perm, gate_up, h, o and the shared expert's); the router's stay fp32; the
     * scratch halves its rows and gains x (N, C) and Wr (E, C) in fp32 */
    size_t P = 74, al = TRI_MOE_ALIGN;
#define A(b) (((b) + al - 1) / al * al)
    size_t rows32 = A(4 * P * 24) * 2 + A(4 * P * 80) + A(4 * P * 40) + A(4 * 37 * 32) + A(4 * 37 * 16);
    size_t rows16 = A(2 * P * 24) * 2 + A(2 * P * 80) + A(2 * P * 40) + A(2 * 37 * 32) + A(2 * 37 * 16);
    cr_assert_eq(a32 - a16, rows32 - rows16);
    size_t sr32 = A(4 * P * 24) + A(4 * P * 40) + A(4 * P * 80) + A(4 * 37 * 16) + A(4 * 37 * 32);
    size_t sr16 = A(2 * P * 24) + A(2 * P * 40) + A(2 * P * 80) + A(2 * 37 * 16) + A(2 * 37 * 32);
    cr_assert_eq(s16, s32 - sr32 + sr16 + A(4 * 37 * 24) + A(4 * 8 * 24));
#undef A
    s.dtype = TRI_I32;
    cr_assert_eq(tri_moe_acts_bytes(&s), 0);
    tri_moe_acts a;
    char mem[64];
    cr_assert_eq(tri_moe_bind(&s, &a, mem, NULL, NULL), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "dtype"), "%s", tri_error_message());
}

Test(moe_bf16, a_weight_in_another_dtype_is_refused_by_name)
{
    host_in h = {.N = 4, .C = 16, .E = 4, .K = 2, .I = 12};
    h.x = ot_bf16_uniform(64, -1, 1, 1), h.dy = h.x;
    h.wr = ot_bf16_uniform(64, -1, 1, 2), h.wgu = ot_bf16_uniform(4 * 24 * 16, -1, 1, 3);
    h.wd = ot_bf16_uniform(4 * 16 * 12, -1, 1, 4);
    tri_moe_config cfg = {.shape = {.N = 4, .C = 16, .E = 4, .K = 2, .I = 12}, .norm_topk = true};
    run r;
    run_block(&r, &h, &cfg, TRI_BF16);
    cfg.shape.dtype = TRI_BF16;
    tri_moe_weights w = r.w;
    w.down_w = ot_put_f32(dev, tri_tensor_3d(NULL, TRI_F32, 4, 16, 12), h.wd);
    tri_tensor x = ot_put_bf16(dev, ot_m2(4, 16), h.x);
    cr_assert_eq(tri_moe_forward(dev, r.y, &r.a, x, &w, &cfg), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "down_w") && strstr(tri_error_message(), "bf16"), "%s",
              tri_error_message());
    cfg.shape.dtype = TRI_F32; /* bf16 x against an fp32 block */
    cr_assert_eq(tri_moe_forward(dev, r.y, &r.a, x, &r.w, &cfg), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "shape.dtype"), "%s", tri_error_message());
}
