/* tests/test_moe_etp.c - the MoE block with expert tensor parallelism (layers/moe_etp.h) on thread
 * ranks against the one-rank block (layers/moe.h) and a float64 reference of the experts.
 *
 * Ranks: etp x ep thread ranks, rank s = etp_rank + etp ep_rank (the grid's order at edp 1), each with
 * its own N tokens (micro-batch s); rank s holds experts [ep_rank E_l, (ep_rank + 1) E_l), of each
 * the I / etp slice etp_rank: gate and up rows [t I', (t+1) I'), down columns the same. The one-rank
 * reference runs the ranks' batches as micro-batches in rank order with whole experts (the experts'
 * gradients accumulate, the router's per micro-batch).
 *
 * What must be equal: the routing (kept_idx and expert_w: the same ops on the same tokens, bit for bit)
 * and the losses. What may differ, and by how much (u = 2^-24, first order; |silu'| <= 1.1, |silu''| <=
 * 0.5): per selection with gate a_i = x.Wg_i, up b_i, h_i = silu(a_i) b_i, o_c = sum_i h_i Wd_ci, the
 * float64 reference gives the magnitudes A_i = sum_c |x_c Wg_ic| (B_i for up), mh_i = 1.1 A_i |b_i| +
 * |silu(a_i)| B_i (h's rounding error <= (C + 3) u mh_i), mo_c = sum_i (|h_i| + mh_i) |Wd_ci|: each
 * fp32 o_c, however the sum over I is split (one rank: one sum; etp: etp partial sums then etp - 1
 * adds), is within (C + I + 4) u mo_c of exact, and y within Ly u my, my = sum_k |w_k| mo + |y|,
 * Ly = C + I + K + 8: both the etp and the one-rank y are held to that of the float64 y. Backward the
 * same way: dh_i = sum_c dO_c Wd_ci (dO = w dy), dgate, dup, the input rows dxp = sum_i dgate_i Wg_i +
 * dup_i Wu_i within (2C + 2I + 16) u of their magnitude sums; the slices' weight gradients (sums over
 * the rows of every rank) within (rows + 2C + I + 16) u of theirs, each held against the float64 value
 * on both sides. dx = the rows' sum plus the router's share, whose inputs differ through
 * d_expert_w = dy.o: |d d_expert_w| <= sum_c |dy_c| (e_etp(o_c) + e_ref(o_c)), |d dlogits| <= 2 max_k
 * |d d_expert_w| (softmax renormalised over the K), and the router's GEMMs spread it as sum_e |d dl_e|
 * |Wr_ec| (dx) and sum_n |d dl_ne| |x_nc| (router gradient), plus each side's own rounding of those
 * sums ((E + 4) u and (N + 4) u of the magnitudes): dx and the router gradient are compared etp against
 * one rank within those sums. The bounds are checked to be tight enough to fail: every case asserts that
 * y differs from the one-rank y somewhere (the split sum) and that the bounds are far below the values.
 * Cases: etp 2 (ep 1, 2 ranks), etp 2 x ep 2 (4 ranks), etp 4 (ep 1, I' 3); and the refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers/moe_etp.h"
#include "tests/moe_block_harness.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

#define OK(call) cr_assert_eq((call), TRI_OK, "%s", tri_error_message())
#define MAXR 4
#define U 5.9604644775390625e-8 /* 2^-24 */

TestSuite(moe_etp, .fini = ot_teardown);

typedef tu_moe_side side; /* tests/moe_block_harness.h */

typedef struct etp_case {
    tri_moe_config cfg; /* the slice's (I / etp) */
    int ep, etp;
    side rank[MAXR];
} etp_case;

typedef struct host_data {
    float *wr, *wgu, *wd; /* whole: (E, C), (E, 2I, C), (E, C, I) */
    float *x[MAXR], *dy[MAXR];
} host_data;

/* Side q on device d: experts [e0, e0 + El) of the host weights, slice t of T (T 1: whole experts);
 * cfg's shape.I is the slice width. etp_bind: bind the etp buffers for (ep, T). */
static void make_side(side *sd, tri_device *d, const tri_moe_config *cfg, const host_data *h, int q, int64_t e0,
                      int64_t El, int t, int T, int I_full, int ep, bool etp_bind)
{
    const tri_moe_shape *s = &cfg->shape;
    int64_t C = s->C, E = s->E, I = s->I;
    tu_moe_side_io(sd, d, s, h->x[q], h->dy[q]);
    sd->w.router_w = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, E, C), h->wr);
    sd->w.expert_bias = sd->w.shared_gate_up_w = sd->w.shared_down_w = tri_tensor_none();
    float *gu = malloc(sizeof(float) * (size_t)(El * 2 * I * C)), *dn = malloc(sizeof(float) * (size_t)(El * C * I));
    for (int64_t e = 0; e < El; e++) {
        const float *G = h->wgu + (e0 + e) * 2 * I_full * C, *D = h->wd + (e0 + e) * C * I_full;
        for (int64_t i = 0; i < I; i++) /* gate rows t I + i, up rows I_full + t I + i */
            for (int64_t c = 0; c < C; c++) {
                gu[(e * 2 * I + i) * C + c] = G[(t * I + i) * C + c];
                gu[(e * 2 * I + I + i) * C + c] = G[(I_full + t * I + i) * C + c];
            }
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < I; i++)
                dn[(e * C + c) * I + i] = D[c * I_full + t * I + i];
    }
    sd->w.gate_up_w = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, El, 2 * I, C), gu);
    sd->w.down_w = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, El, C, I), dn);
    free(gu), free(dn);
    tu_moe_side_grads(sd, s, El, 0.25f);
    OK(tu_moe_side_bind(sd, s, ep, etp_bind ? T : 0));
}

static int rank_fn(int rank, int size, tri_comm *world, void *arg)
{
    etp_case *c = arg;
    side *sd = &c->rank[rank];
    tri_comm *etp = NULL, *ep = NULL;
    (void)size;
    int rc = tri_comm_split(world, rank / c->etp, rank % c->etp, &etp);
    if (!rc) rc = tri_comm_split(world, rank % c->etp, rank / c->etp, &ep);
    if (!rc) rc = tri_moe_etp_forward(sd->dev, ep, etp, sd->y, &sd->acts, &sd->ta, &sd->ts, sd->x, &sd->w, &c->cfg);
    if (!rc)
        rc = tri_moe_etp_backward(sd->dev, ep, etp, sd->dx, &sd->g, sd->dy, &sd->acts, &sd->ta, sd->x, &sd->w,
                                  &sd->sc, &sd->ts, &c->cfg, 0.5f);
    tri_comm_destroy(ep);
    tri_comm_destroy(etp);
    return rc;
}

static double silu(double a)
{
    return a / (1.0 + exp(-a));
}

static double dsilu(double a)
{
    double sg = 1.0 / (1.0 + exp(-a));
    return sg * (1.0 + a * (1.0 - sg));
}

/* |a - b| <= bound, counting how close it came */
static void within(double a, double b, double bound, const char *what, int q, int64_t i, double *worst)
{
    cr_assert(fabs(a - b) <= bound, "rank %d: %s[%lld] = %.9g against %.9g: |difference| %.3g above the bound %.3g", q,
              what, (long long)i, a, b, fabs(a - b), bound);
    if (bound > 0 && fabs(a - b) / bound > *worst)
        *worst = fabs(a - b) / bound;
}

static void run_case(int64_t N, int64_t C, int64_t E, int64_t K, int64_t I, int ep, int etp)
{
    int R = ep * etp;
    int64_t El = E / ep, Is = I / etp;
    tri_moe_config full = {.shape = {.N = N, .C = C, .E = E, .K = K, .I = I}, .score_func = TRI_MOE_SOFTMAX,
                           .norm_topk = true, .aux_loss_coeff = 0.02f, .z_loss_coeff = 0.001f};
    tri_moe_config sl = full;
    sl.shape.I = Is;
    host_data h = {0};
    h.wr = tu_moe_uniform(E * C, -0.5f, 0.5f, 11);
    h.wgu = tu_moe_uniform(E * 2 * I * C, -0.3f, 0.3f, 12);
    h.wd = tu_moe_uniform(E * C * I, -0.3f, 0.3f, 13);
    for (int q = 0; q < R; q++) {
        h.x[q] = tu_moe_uniform(N * C, -1.0f, 1.0f, 100 + (uint64_t)q);
        h.dy[q] = tu_moe_uniform(N * C, -1.0f, 1.0f, 200 + (uint64_t)q);
    }
    /* one rank, whole experts, the ranks' batches as micro-batches */
    tri_device *rd = ot_device(1);
    side ref[MAXR];
    for (int q = 0; q < R; q++) {
        make_side(&ref[q], rd, &full, &h, q, 0, E, 0, 1, (int)I, 1, false);
        if (q > 0)
            ref[q].g.gate_up_w = ref[0].g.gate_up_w, ref[q].g.down_w = ref[0].g.down_w;
    }
    for (int q = 0; q < R; q++) {
        OK(tri_moe_forward(rd, ref[q].y, &ref[q].acts, ref[q].x, &ref[q].w, &full));
        OK(tri_moe_backward(rd, ref[q].dx, &ref[q].g, ref[q].dy, &ref[q].acts, ref[q].x, &ref[q].w, &ref[q].sc, &full,
                            0.5f));
    }
    etp_case *c = calloc(1, sizeof *c);
    c->cfg = sl, c->ep = ep, c->etp = etp;
    for (int s = 0; s < R; s++)
        make_side(&c->rank[s], ot_device(1), &sl, &h, s, (s / etp) * El, El, s % etp, etp, (int)I, ep, true);
    OK(tri_run_thread_ranks(R, rank_fn, c));

    /* float64: each rank's y and dx bounds, and the whole experts' gradients with their magnitudes */
    double *gWg = calloc((size_t)(E * 2 * I * C), sizeof(double)), *mWg = calloc((size_t)(E * 2 * I * C), sizeof(double));
    double *gWd = calloc((size_t)(E * C * I), sizeof(double)), *mWd = calloc((size_t)(E * C * I), sizeof(double));
    int64_t *rows = calloc((size_t)E, sizeof(int64_t));
    double worst_y = 0, worst_g = 0, worst_dx = 0, worst_r = 0;
    int64_t y_differs = 0;
    double *a = malloc(sizeof(double) * (size_t)I * 12), *b = a + I, *A = b + I, *B = A + I, *hh = B + I, *mh = hh + I;
    double *dh = mh + I, *mdh = dh + I, *dg = mdh + I, *du = dg + I, *mdg = du + I, *mdu = mdg + I;
    double *o = malloc(sizeof(double) * (size_t)C * 6), *mo = o + C, *y64 = mo + C, *my = y64 + C, *dxp = my + C,
           *mdx = dxp + C;
    for (int q = 0; q < R; q++) {
        side *r = &c->rank[q], *f = &ref[q];
        float *ry = ot_read(r->dev, r->y), *fy = ot_read(rd, f->y), *rdx = ot_read(r->dev, r->dx), *fdx = ot_read(rd, f->dx);
        float *rw = ot_read(r->dev, r->acts.expert_w), *fw = ot_read(rd, f->acts.expert_w);
        int32_t *rk = (int32_t *)ot_read(r->dev, r->acts.kept_idx), *fk = (int32_t *)ot_read(rd, f->acts.kept_idx);
        float *fdl = ot_read(rd, f->sc.dlogits), *rl = ot_read(r->dev, r->acts.losses), *fl = ot_read(rd, f->acts.losses);
        cr_assert(memcmp(rw, fw, sizeof(float) * (size_t)(N * K)) == 0 && memcmp(rk, fk, 4 * (size_t)(N * K)) == 0,
                  "rank %d: the routing differs from one rank's", q);
        cr_assert(memcmp(rl, fl, 2 * sizeof(float)) == 0, "rank %d: the losses differ from one rank's", q);
        double *ddw = calloc((size_t)(N * K), sizeof(double)); /* |d d_expert_w| bound per selection */
        const float *x = h.x[q], *dyv = h.dy[q];
        for (int64_t n = 0; n < N; n++) {
            for (int64_t cc = 0; cc < C; cc++)
                y64[cc] = my[cc] = mdx[cc] = 0;
            double dxrow[1024] = {0}; /* sum_k of dxp and its bound (C <= 512) */
            for (int64_t k = 0; k < K; k++) {
                int e = fk[n * K + k];
                double w = fw[n * K + k];
                if (e < 0)
                    continue;
                rows[e]++;
                const float *G = h.wgu + (int64_t)e * 2 * I * C, *D = h.wd + (int64_t)e * C * I;
                for (int64_t i = 0; i < I; i++) {
                    a[i] = b[i] = A[i] = B[i] = 0;
                    for (int64_t cc = 0; cc < C; cc++) {
                        a[i] += (double)x[n * C + cc] * G[i * C + cc], A[i] += fabs((double)x[n * C + cc] * G[i * C + cc]);
                        b[i] += (double)x[n * C + cc] * G[(I + i) * C + cc];
                        B[i] += fabs((double)x[n * C + cc] * G[(I + i) * C + cc]);
                    }
                    hh[i] = silu(a[i]) * b[i];
                    mh[i] = 1.1 * A[i] * fabs(b[i]) + fabs(silu(a[i])) * B[i];
                }
                double eo_dw = 0; /* sum_c |dy_c| (2 (C + I + 4) u mo_c) + 2 C u sum_c |dy_c o_c| */
                for (int64_t cc = 0; cc < C; cc++) {
                    o[cc] = mo[cc] = 0;
                    for (int64_t i = 0; i < I; i++)
                        o[cc] += hh[i] * D[cc * I + i], mo[cc] += (fabs(hh[i]) + mh[i]) * fabs(D[cc * I + i]);
                    y64[cc] += w * o[cc];
                    my[cc] += fabs(w) * mo[cc];
                    eo_dw += fabs(dyv[n * C + cc]) * 2 * (C + I + 4) * U * mo[cc] + 2 * (C + 2) * U * fabs(dyv[n * C + cc] * o[cc]);
                }
                ddw[n * K + k] = eo_dw;
                /* backward of the selection: dO = w dy */
                for (int64_t i = 0; i < I; i++) {
                    dh[i] = mdh[i] = 0;
                    for (int64_t cc = 0; cc < C; cc++) {
                        double dO = w * dyv[n * C + cc];
                        dh[i] += dO * D[cc * I + i], mdh[i] += fabs(dO * D[cc * I + i]);
                    }
                    dg[i] = dh[i] * b[i] * dsilu(a[i]);
                    du[i] = dh[i] * silu(a[i]);
                    mdg[i] = mdh[i] * fabs(b[i]) * 1.1 + fabs(dh[i]) * (1.1 * B[i] + 0.5 * A[i] * fabs(b[i]));
                    mdu[i] = mdh[i] * fabs(silu(a[i])) + fabs(dh[i]) * 1.1 * A[i];
                }
                for (int64_t cc = 0; cc < C; cc++) {
                    dxp[cc] = 0;
                    double m = 0;
                    for (int64_t i = 0; i < I; i++) {
                        dxp[cc] += dg[i] * G[i * C + cc] + du[i] * G[(I + i) * C + cc];
                        m += (fabs(dg[i]) + mdg[i]) * fabs(G[i * C + cc]) + (fabs(du[i]) + mdu[i]) * fabs(G[(I + i) * C + cc]);
                    }
                    dxrow[cc] += 2 * (2 * C + 2 * I + 16) * U * m;
                }
                /* the weight gradients' float64 sums and magnitudes */
                for (int64_t cc = 0; cc < C; cc++)
                    for (int64_t i = 0; i < I; i++) {
                        double dO = w * dyv[n * C + cc];
                        gWd[((int64_t)e * C + cc) * I + i] += dO * hh[i];
                        mWd[((int64_t)e * C + cc) * I + i] += fabs(dO) * (fabs(hh[i]) + mh[i]);
                    }
                for (int64_t i = 0; i < I; i++)
                    for (int64_t cc = 0; cc < C; cc++) {
                        double xc = x[n * C + cc];
                        gWg[((int64_t)e * 2 * I + i) * C + cc] += dg[i] * xc;
                        mWg[((int64_t)e * 2 * I + i) * C + cc] += (fabs(dg[i]) + mdg[i]) * fabs(xc);
                        gWg[((int64_t)e * 2 * I + I + i) * C + cc] += du[i] * xc;
                        mWg[((int64_t)e * 2 * I + I + i) * C + cc] += (fabs(du[i]) + mdu[i]) * fabs(xc);
                    }
            }
            for (int64_t cc = 0; cc < C; cc++) {
                double by = (C + I + K + 8) * U * (my[cc] + fabs(y64[cc]));
                within(ry[n * C + cc], y64[cc], by, "y (etp)", q, n * C + cc, &worst_y);
                within(fy[n * C + cc], y64[cc], by, "y (one rank)", q, n * C + cc, &worst_y);
                y_differs += ry[n * C + cc] != fy[n * C + cc];
            }
            /* dx: the rows' bound, the router's share through d_expert_w, each side's rounding */
            double ddl = 0;
            for (int64_t k = 0; k < K; k++)
                ddl = fmax(ddl, 2 * ddw[n * K + k]);
            for (int64_t cc = 0; cc < C; cc++) {
                double m = 0, bnd = dxrow[cc];
                for (int64_t e = 0; e < E; e++) {
                    bnd += ddl * fabs(h.wr[e * C + cc]);
                    m += fabs(fdl[n * E + e] * h.wr[e * C + cc]);
                }
                bnd += 2 * (E + 4) * U * m + 2 * (K + 2) * U * fabs(fdx[n * C + cc]);
                within(rdx[n * C + cc], fdx[n * C + cc], bnd, "dx", q, n * C + cc, &worst_dx);
            }
        }
        /* the router gradient: sum_n |d dl_ne| |x_nc| plus the sum's rounding */
        float *rg = ot_read(r->dev, r->g.router_w), *fg = ot_read(rd, f->g.router_w);
        for (int64_t e = 0; e < E; e++)
            for (int64_t cc = 0; cc < C; cc++) {
                double bnd = 0, m = 0.25;
                for (int64_t n = 0; n < N; n++) {
                    double ddl = 0;
                    for (int64_t k = 0; k < K; k++)
                        ddl = fmax(ddl, 2 * ddw[n * K + k]);
                    bnd += ddl * fabs(x[n * C + cc]);
                    m += fabs(fdl[n * E + e] * x[n * C + cc]);
                }
                bnd += 2 * (N + 4) * U * m;
                within(rg[e * C + cc], fg[e * C + cc], bnd, "router gradient", q, e * C + cc, &worst_r);
            }
        free(ddw);
    }
    /* the slices' weight gradients against float64 (0.25 + the sum over every rank's rows) */
    float *fgu = ot_read(rd, ref[0].g.gate_up_w), *fgd = ot_read(rd, ref[0].g.down_w);
    for (int s = 0; s < R; s++) {
        side *r = &c->rank[s];
        int t = s % etp;
        int64_t e0 = (s / etp) * El;
        float *gu = ot_read(r->dev, r->g.gate_up_w), *gd = ot_read(r->dev, r->g.down_w);
        for (int64_t e = 0; e < El; e++) {
            int64_t ge = e0 + e;
            double L = (double)rows[ge] + 2 * C + I + 16;
            for (int64_t j = 0; j < 2 * Is; j++) {
                int64_t gi = j < Is ? t * Is + j : I + t * Is + (j - Is); /* whole row of slice row j */
                for (int64_t cc = 0; cc < C; cc++) {
                    int64_t k = (ge * 2 * I + gi) * C + cc;
                    double v = 0.25 + gWg[k], bnd = L * U * (mWg[k] + 0.25);
                    within(gu[(e * 2 * Is + j) * C + cc], v, bnd, "gate_up gradient (etp)", s, k, &worst_g);
                    within(fgu[k], v, bnd, "gate_up gradient (one rank)", s, k, &worst_g);
                }
            }
            for (int64_t cc = 0; cc < C; cc++)
                for (int64_t j = 0; j < Is; j++) {
                    int64_t k = (ge * C + cc) * I + t * Is + j;
                    double v = 0.25 + gWd[k], bnd = L * U * (mWd[k] + 0.25);
                    within(gd[(e * C + cc) * Is + j], v, bnd, "down gradient (etp)", s, k, &worst_g);
                    within(fgd[k], v, bnd, "down gradient (one rank)", s, k, &worst_g);
                }
        }
    }
    /* the comparison can fail: the split sum changes y somewhere, and the bounds stay small */
    cr_assert_gt(y_differs, 0, "etp %d gave one rank's y bit for bit everywhere: the case does not test the split", etp);
    cr_log_info("etp %d ep %d: %lld of %lld y values differ from one rank; worst |diff| / bound: y %.3g, dx %.3g, "
                "router gradient %.3g, expert gradients %.3g", etp, ep, (long long)y_differs, (long long)(R * N * C),
                worst_y, worst_dx, worst_r, worst_g);
    for (int q = 0; q < R; q++)
        free(h.x[q]), free(h.dy[q]);
    free(h.wr), free(h.wgu), free(h.wd), free(c), free(gWg), free(mWg), free(gWd), free(mWd), free(rows), free(a),
        free(o);
}

Test(moe_etp, etp2)
{
    run_case(24, 16, 8, 2, 12, 1, 2);
}

Test(moe_etp, etp2_ep2)
{
    run_case(16, 16, 8, 2, 12, 2, 2);
}

Test(moe_etp, etp4_top3)
{
    run_case(12, 16, 4, 3, 12, 1, 4);
}

Test(moe_etp, buffers_and_refusals)
{
    tri_moe_shape s = {.N = 16, .C = 64, .E = 8, .K = 2, .I = 32};
    /* Pgmax = etp x ep N min(K, E_l) rows; acts C + 2I + I, scratch C + I + 2I + C columns, fp32 */
    cr_assert_eq(tri_moe_etp_max_rows(&s, 2, 2), 2 * 2 * 16 * 2);
    cr_assert_eq(tri_moe_etp_acts_bytes(&s, 2, 2), (size_t)(128 * (64 + 96) * 4));
    cr_assert_eq(tri_moe_etp_scratch_bytes(&s, 2, 2), (size_t)(128 * (128 + 96) * 4));
    cr_assert_eq(tri_moe_etp_check(&s, 2, 9), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--expert-tensor-parallel-size 9") != NULL, "%s", tri_error_message());
    cr_assert_eq(tri_moe_etp_acts_bytes(&s, 3, 2), 0);
    /* the weights must be the slice: (E_l, 2I, C) with I the shape's */
    tri_device *d = ot_device(1);
    tri_moe_config cfg = {.shape = {.N = 4, .C = 8, .E = 4, .K = 2, .I = 4}, .score_func = TRI_MOE_SOFTMAX};
    host_data h = {0};
    h.wr = tu_moe_uniform(4 * 8, -1, 1, 1), h.wgu = tu_moe_uniform(4 * 16 * 8, -1, 1, 2);
    h.wd = tu_moe_uniform(4 * 8 * 8, -1, 1, 3);
    h.x[0] = tu_moe_uniform(4 * 8, -1, 1, 4), h.dy[0] = tu_moe_uniform(4 * 8, -1, 1, 5);
    side sd;
    make_side(&sd, d, &cfg, &h, 0, 0, 4, 0, 2, 8, 1, true); /* slice 0 of I 8: I' 4 */
    tri_thread_group *grp;
    tri_comm *solo;
    OK(tri_thread_group_create(&grp, 1, 10.0));
    OK(tri_comm_thread_create(&solo, grp, 0));
    OK(tri_moe_etp_forward(d, NULL, solo, sd.y, &sd.acts, &sd.ta, &sd.ts, sd.x, &sd.w, &cfg)); /* a group of 1 */
    cr_assert_eq(tri_moe_etp_forward(d, NULL, NULL, sd.y, &sd.acts, &sd.ta, &sd.ts, sd.x, &sd.w, &cfg), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "needs its etp comm") != NULL, "%s", tri_error_message());
    sd.w.down_w.shape[2] = 8;
    cr_assert_eq(tri_moe_etp_forward(d, NULL, solo, sd.y, &sd.acts, &sd.ta, &sd.ts, sd.x, &sd.w, &cfg), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "with I the slice 4") != NULL, "%s", tri_error_message());
    tri_comm_destroy(solo);
    tri_thread_group_destroy(grp);
    free(h.wr), free(h.wgu), free(h.wd), free(h.x[0]), free(h.dy[0]);
}
