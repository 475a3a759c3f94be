/* tests/test_moe_block.c - the MoE block (layers/moe.h) on the CPU against a float64 per-token loop
 * and against PyTorch.
 *
 * The reference (moe64) is the block's math written per token in float64, not from the ops: the
 * router's logits, softmax or sigmoid scores, the top-k by a plain scan (ties to the lower index,
 * expert bias in the key only), the renormalisation, Megatron's capacity dropping by a rank count
 * over each expert's queue, each kept selection's SwiGLU expert weighted, the shared expert, the
 * Switch aux loss and the router z-loss. Forward: y within a bound derived along the fp32 path, with
 * u = 2^-24 and γ_n = n u / (1 - n u) (Higham, "Accuracy and Stability of Numerical Algorithms",
 * §3.1): a logit is a sum of C products, within δl = γ_C Σ|x_c Wr_ec|; a weight (softmax over E or
 * over the K, sigmoid, renormalised or not) moves by at most 2 δl relative plus (E + 8) u for its
 * exp, sum and division; each expert output as tests/test_moe_dispatch.c derives it (γ_C on the gate
 * and up sums, |silu'| <= 1.1, 8 u for SwiGLU's own roundings, γ_I on the down sum), the shared
 * expert likewise with I_s, and the K + 1 terms of y (the combine, then the shared expert's
 * addition) within γ_(K+1) of their magnitudes. The aux loss moves with its probabilities (2 δl +
 * (E + 16) u relative), the z-loss with logsumexp (δl + (E + 4) u + u |lse| absolute, squared).
 * Backward: every gradient (x, the router, both stacked expert weights, the shared expert's two)
 * against central finite differences of the float64 loop (exact to ~1e-9: OT_FD_H), starting the
 * gradients at 0.25 so that += is checked too; each fp32 gradient element is a chain of the sums
 * above transposed, within a few γ_(C+I+I_s+K+E) of its terms' magnitudes, which are at most the
 * tensor's largest gradient times the fan-in: 64 (C + I + I_s + K + E) u of the tensor's largest
 * element bounds them (a wrong index or order shows as O(1); TRIDENT_TEST_VERBOSE=1 prints the
 * measured errors). Cases: Mixtral's routing with a shared expert and both losses, an expert that
 * gets no token (an expert bias of -10 keeps it out), sigmoid with and without renormalisation,
 * capacity dropping by weight and by position, K = 1 and K = E, the buffers' sizes, the refusals
 * (bf16 x into an fp32 block, K > E, missing shared weights). PyTorch (tests/moe_block_torch.py, Debian's python3-torch in
 * float64): Hugging Face's MixtralSparseMoeBlock and Qwen3MoeSparseMoeBlock (norm_topk_prob false)
 * on the test's weights, y and every gradient (skipped when /usr/bin/python3 has no torch). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device/ops/moe_router_math.h"
#include "layers/moe.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

#define U 5.9604644775390625e-8 /* 2^-24 */

static double gamma_n(double n)
{
    return n * U / (1 - n * U);
}

static tri_device *dev;

static void setup(void)
{
    dev = ot_device(3);
}

TestSuite(moe_block, .init = setup, .fini = ot_teardown);

#define OK(call) cr_assert_eq((call), TRI_OK, "%s", tri_error_message())

/* ---- the float64 reference ---- */

typedef struct moe64 {
    tri_moe_config cfg;
    const float *bias;                       /* (E) or NULL */
    double *x, *wr, *wgu, *wd, *sgu, *sd, *g; /* as tri_moe_weights; g = dL/dy */
} moe64;

static double silu(double v)
{
    return v / (1 + exp(-v));
}

/* One SwiGLU MLP of x(C): out(C) = wd(C, I) (silu(wgu[0:I] x) * wgu[I:2I] x); when bound: bnd(C)
 * the fp32 path's error bound of out and abs(C) the magnitudes of its down sums' terms. */
static void swiglu64(const double *x, const double *wgu, const double *wd, int64_t C, int64_t I, double *out,
                     double *bnd, double *absv)
{
    double *h = malloc(sizeof(double) * (size_t)I), *dh = malloc(sizeof(double) * (size_t)I);
    for (int64_t j = 0; j < I; j++) {
        double gt = 0, up = 0, ag = 0, au = 0;
        for (int64_t c = 0; c < C; c++) {
            gt += wgu[j * C + c] * x[c], ag += fabs(wgu[j * C + c] * x[c]);
            up += wgu[(I + j) * C + c] * x[c], au += fabs(wgu[(I + j) * C + c] * x[c]);
        }
        h[j] = silu(gt) * up;
        double gc = gamma_n((double)C);
        dh[j] = 1.1 * fabs(up) * gc * ag + fabs(silu(gt)) * gc * au + 8 * U * fabs(h[j]);
    }
    for (int64_t c = 0; c < C; c++) {
        double o = 0, ao = 0, prop = 0;
        for (int64_t j = 0; j < I; j++) {
            o += wd[c * I + j] * h[j];
            ao += fabs(wd[c * I + j] * h[j]);
            prop += fabs(wd[c * I + j]) * dh[j];
        }
        out[c] = o;
        if (bnd)
            bnd[c] = gamma_n((double)I) * ao + prop, absv[c] = fabs(o);
    }
    free(h), free(dh);
}

/* The routing of token n: sel[K] experts, w[K] weights, the scores s[E]; logit error bound dl. */
static void route64(const moe64 *m, int64_t n, int32_t *sel, double *w, double *s, double *lse, double *dl)
{
    const tri_moe_shape *S = &m->cfg.shape;
    int64_t C = S->C, E = S->E, K = S->K;
    double l[TRI_MOE_MAX_EXPERTS], mx = -INFINITY, sum = 0;
    *dl = 0;
    for (int64_t e = 0; e < E; e++) {
        double v = 0, a = 0;
        for (int64_t c = 0; c < C; c++)
            v += m->x[n * C + c] * m->wr[e * C + c], a += fabs(m->x[n * C + c] * m->wr[e * C + c]);
        l[e] = v, mx = fmax(mx, v), *dl = fmax(*dl, gamma_n((double)C) * a);
    }
    for (int64_t e = 0; e < E; e++)
        sum += exp(l[e] - mx);
    *lse = mx + log(sum);
    for (int64_t e = 0; e < E; e++)
        s[e] = m->cfg.score_func == TRI_MOE_SIGMOID ? 1 / (1 + exp(-l[e])) : exp(l[e] - *lse);
    bool taken[TRI_MOE_MAX_EXPERTS] = {0};
    double wsum = 0;
    for (int64_t k = 0; k < K; k++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            double key = s[e] + (m->bias ? m->bias[e] : 0);
            if (!taken[e] && (best < 0 || key > s[best] + (m->bias ? m->bias[best] : 0)))
                best = e;
        }
        taken[best] = true, sel[k] = (int32_t)best, w[k] = s[best], wsum += s[best];
    }
    if (m->cfg.norm_topk)
        for (int64_t k = 0; k < K; k++)
            w[k] /= m->cfg.score_func == TRI_MOE_SIGMOID ? wsum + 1e-20 : wsum;
}

/* y(N, C), aux, z; kept[N*K] (1 kept, 0 dropped); when bound: the fp32 error bounds of y, aux, z. */
static void forward64(const moe64 *m, double *y, double *aux, double *z, int *kept, double *bound, double *aux_b,
                      double *z_b)
{
    const tri_moe_shape *S = &m->cfg.shape;
    int64_t N = S->N, C = S->C, E = S->E, K = S->K, I = S->I, Is = S->I_shared;
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)(N * K));
    double *w = malloc(sizeof(double) * (size_t)(N * K)), *s = malloc(sizeof(double) * (size_t)(N * E));
    double *lse = malloc(sizeof(double) * (size_t)N), *dl = malloc(sizeof(double) * (size_t)N);
    for (int64_t n = 0; n < N; n++)
        route64(m, n, sel + n * K, w + n * K, s + n * E, lse + n, dl + n);
    /* capacity: a selection is dropped when `capacity` others of its expert come before it */
    for (int64_t i = 0; i < N * K; i++) {
        int64_t ahead = 0;
        for (int64_t j = 0; j < N * K && m->cfg.capacity > 0; j++) {
            if (j == i || sel[j] != sel[i])
                continue;
            bool first = m->cfg.drop_policy == TRI_MOE_DROP_POSITION ? j < i : (w[j] > w[i] || (w[j] == w[i] && j < i));
            ahead += first;
        }
        kept[i] = m->cfg.capacity <= 0 || ahead < m->cfg.capacity;
    }
    double *o = malloc(sizeof(double) * (size_t)C), *ob = malloc(sizeof(double) * (size_t)C);
    double *oa = malloc(sizeof(double) * (size_t)C), *absy = malloc(sizeof(double) * (size_t)C);
    for (int64_t n = 0; n < N; n++) {
        double rho = 2 * dl[n] + (E + 8) * U; /* the weights' relative error */
        for (int64_t c = 0; c < C; c++)
            y[n * C + c] = 0, absy[c] = 0, bound ? bound[n * C + c] = 0 : 0;
        for (int64_t k = 0; k < K; k++) {
            if (!kept[n * K + k])
                continue;
            int64_t e = sel[n * K + k];
            swiglu64(m->x + n * C, m->wgu + e * 2 * I * C, m->wd + e * C * I, C, I, o, ob, oa);
            for (int64_t c = 0; c < C; c++) {
                y[n * C + c] += w[n * K + k] * o[c];
                absy[c] += fabs(w[n * K + k] * o[c]);
                if (bound)
                    bound[n * C + c] += fabs(w[n * K + k]) * (ob[c] + rho * oa[c]);
            }
        }
        if (Is > 0) {
            swiglu64(m->x + n * C, m->sgu, m->sd, C, Is, o, ob, oa);
            for (int64_t c = 0; c < C; c++) {
                y[n * C + c] += o[c], absy[c] += oa[c];
                if (bound)
                    bound[n * C + c] += ob[c];
            }
        }
        for (int64_t c = 0; bound && c < C; c++)
            bound[n * C + c] = (bound[n * C + c] + gamma_n((double)(K + 1)) * absy[c]) * (1 + 4 * (K + 1) * U);
    }
    /* Megatron's switch_load_balancing_loss_func over all selections, and the z-loss */
    double a = 0, zz = 0, zb = 0, dlmax = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t c_e = 0;
        double p = 0;
        for (int64_t i = 0; i < N * K; i++)
            c_e += sel[i] == e;
        for (int64_t n = 0; n < N; n++) {
            double tot = 0;
            for (int64_t f = 0; f < E; f++)
                tot += s[n * E + f];
            p += m->cfg.score_func == TRI_MOE_SIGMOID ? s[n * E + e] / (tot + 1e-20) : s[n * E + e];
        }
        a += (double)c_e * p;
    }
    for (int64_t n = 0; n < N; n++) {
        double eps = dl[n] + (E + 4) * U + U * fabs(lse[n]);
        zz += lse[n] * lse[n], zb += 2 * fabs(lse[n]) * eps + eps * eps;
        dlmax = fmax(dlmax, dl[n]);
    }
    *aux = m->cfg.aux_loss_coeff * (double)E / ((double)K * N * N) * a;
    *z = m->cfg.z_loss_coeff * zz / N;
    if (aux_b)
        *aux_b = fabs(*aux) * (2 * dlmax + (E + 16) * U);
    if (z_b)
        *z_b = fabs(m->cfg.z_loss_coeff) * zb / N + 4 * U * fabs(*z);
    free(sel), free(w), free(s), free(lse), free(dl), free(o), free(ob), free(oa), free(absy);
}

static double loss64(void *ctx)
{
    const moe64 *m = ctx;
    const tri_moe_shape *S = &m->cfg.shape;
    size_t ny = (size_t)(S->N * S->C);
    double *y = malloc(sizeof(double) * ny), aux, z;
    int *kept = malloc(sizeof(int) * (size_t)(S->N * S->K));
    forward64(m, y, &aux, &z, kept, NULL, NULL, NULL);
    double L = ot_dot(y, m->g, ny) + aux + z;
    free(y), free(kept);
    return L;
}

/* ---- one case on the device ---- */

typedef struct moe_case {
    tri_moe_config cfg;
    const float *bias;   /* (E) or NULL */
    uint64_t seed;
} moe_case;

/* The fp32 inputs and their device tensors; the gradients start at 0.25 (+= is checked). */
typedef struct run {
    float *hx, *hwr, *hwgu, *hwd, *hsgu, *hsd, *hg;
    size_t nx, nwr, nwgu, nwd, nsgu, nsd;
    tri_tensor x, y, dy, dx;
    tri_moe_weights w, gw;
    tri_moe_acts acts;
    tri_moe_scratch sc;
} run;

#define G0 0.25f

static tri_tensor dev_put(tri_tensor shape, const float *host)
{
    return ot_tensor(dev, shape, host);
}

static tri_tensor grad_of(tri_tensor shape)
{
    size_t n = (size_t)tri_tensor_numel(shape);
    float *h = ot_floats(n);
    for (size_t i = 0; i < n; i++)
        h[i] = G0;
    return ot_tensor(dev, shape, h);
}

static void setup_run(run *r, const moe_case *mc)
{
    const tri_moe_shape *S = &mc->cfg.shape;
    int64_t N = S->N, C = S->C, E = S->E, I = S->I, Is = S->I_shared;
    uint64_t sd = mc->seed;
    r->nx = (size_t)(N * C), r->nwr = (size_t)(E * C), r->nwgu = (size_t)(E * 2 * I * C), r->nwd = (size_t)(E * C * I);
    r->nsgu = (size_t)(2 * Is * C), r->nsd = (size_t)(C * Is);
    r->hx = ot_uniform(r->nx, -1, 1, sd), r->hwr = ot_uniform(r->nwr, -1, 1, sd + 1);
    r->hwgu = ot_uniform(r->nwgu, -0.5f, 0.5f, sd + 2), r->hwd = ot_uniform(r->nwd, -0.5f, 0.5f, sd + 3);
    r->hsgu = Is ? ot_uniform(r->nsgu, -0.5f, 0.5f, sd + 4) : NULL;
    r->hsd = Is ? ot_uniform(r->nsd, -0.5f, 0.5f, sd + 5) : NULL;
    r->hg = ot_uniform(r->nx, -1, 1, sd + 6);
    r->x = dev_put(tri_tensor_2d(NULL, TRI_F32, N, C), r->hx);
    r->y = dev_put(tri_tensor_2d(NULL, TRI_F32, N, C), NULL);
    r->dy = dev_put(tri_tensor_2d(NULL, TRI_F32, N, C), r->hg);
    r->dx = dev_put(tri_tensor_2d(NULL, TRI_F32, N, C), NULL);
    tri_tensor swr = tri_tensor_2d(NULL, TRI_F32, E, C), swgu = tri_tensor_3d(NULL, TRI_F32, E, 2 * I, C);
    tri_tensor swd = tri_tensor_3d(NULL, TRI_F32, E, C, I);
    r->w = (tri_moe_weights){.router_w = dev_put(swr, r->hwr), .gate_up_w = dev_put(swgu, r->hwgu),
                             .down_w = dev_put(swd, r->hwd), .expert_bias = tri_tensor_none(),
                             .shared_gate_up_w = tri_tensor_none(), .shared_down_w = tri_tensor_none()};
    r->gw = (tri_moe_weights){.router_w = grad_of(swr), .gate_up_w = grad_of(swgu), .down_w = grad_of(swd),
                              .expert_bias = tri_tensor_none(), .shared_gate_up_w = tri_tensor_none(),
                              .shared_down_w = tri_tensor_none()};
    if (mc->bias)
        r->w.expert_bias = dev_put(tri_tensor_1d(NULL, TRI_F32, E), mc->bias);
    if (Is) {
        tri_tensor ssgu = tri_tensor_2d(NULL, TRI_F32, 2 * Is, C), ssd = tri_tensor_2d(NULL, TRI_F32, C, Is);
        r->w.shared_gate_up_w = dev_put(ssgu, r->hsgu), r->w.shared_down_w = dev_put(ssd, r->hsd);
        r->gw.shared_gate_up_w = grad_of(ssgu), r->gw.shared_down_w = grad_of(ssd);
    }
    size_t ab = tri_moe_acts_bytes(S), sb = tri_moe_scratch_bytes(S);
    cr_assert(ab > 0 && sb > 0, "%s", tri_error_message());
    tri_tensor am = dev_put(tri_tensor_1d(NULL, TRI_F32, (int64_t)(ab / 4)), NULL);
    tri_tensor sm = dev_put(tri_tensor_1d(NULL, TRI_F32, (int64_t)(sb / 4)), NULL);
    OK(tri_moe_bind(S, &r->acts, am.data, &r->sc, sm.data));
    OK(tri_moe_forward(dev, r->y, &r->acts, r->x, &r->w, &mc->cfg));
    OK(tri_moe_backward(dev, r->dx, &r->gw, r->dy, &r->acts, r->x, &r->w, &r->sc, &mc->cfg, 1.0f));
}

static double *widen(const float *h, size_t n)
{
    return h ? ot_widen(h, n) : NULL;
}

static moe64 ref_of(const run *r, const moe_case *mc)
{
    return (moe64){.cfg = mc->cfg, .bias = mc->bias, .x = widen(r->hx, r->nx), .wr = widen(r->hwr, r->nwr),
                   .wgu = widen(r->hwgu, r->nwgu), .wd = widen(r->hwd, r->nwd), .sgu = widen(r->hsgu, r->nsgu),
                   .sd = widen(r->hsd, r->nsd), .g = widen(r->hg, r->nx)};
}

/* The gradient got (with G0 subtracted) against finite differences of the reference in p. */
static void check_grad(const char *what, moe64 *m, double *p, size_t n, tri_tensor got_t, float start, double tol)
{
    double *fd = ot_doubles(n), big = 0, worst = 0;
    ot_fd_grad(fd, p, n, loss64, m);
    float *got = ot_read(dev, got_t);
    for (size_t i = 0; i < n; i++)
        big = fmax(big, fabs(fd[i]));
    cr_assert_gt(big, 0.01, "%s: the check needs gradients of size", what);
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - start - fd[i]);
        worst = fmax(worst, err);
        cr_assert_leq(err, tol * big, "%s[%zu]: %.9g, finite differences %.9g (bound %.3g)", what, i,
                      (double)got[i] - start, fd[i], tol * big);
    }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s: max error %.3g of largest %.3g (bound %.3g)\n", what, worst, big, tol * big);
}

/* Runs the case, checks y, the losses, the kept selections and every gradient; returns the number of
 * dropped selections and (when empty_expert >= 0) checks that expert got nothing. */
static int64_t check_case(const moe_case *mc, int64_t empty_expert)
{
    const tri_moe_shape *S = &mc->cfg.shape;
    int64_t N = S->N, C = S->C, E = S->E, K = S->K, I = S->I, Is = S->I_shared;
    run r;
    setup_run(&r, mc);
    moe64 m = ref_of(&r, mc);
    double *y64 = ot_doubles((size_t)(N * C)), *bound = ot_doubles((size_t)(N * C)), aux, z, aux_b, z_b;
    int *kept = malloc(sizeof(int) * (size_t)(N * K));
    forward64(&m, y64, &aux, &z, kept, bound, &aux_b, &z_b);

    /* the selections: the device's kept_idx against the reference's routing and dropping */
    int32_t *kidx = ot_ints((size_t)(N * K));
    ot_download(dev, kidx, r.acts.kept_idx);
    int64_t dropped = 0, R = 0;
    for (int64_t i = 0; i < N * K; i++) {
        cr_assert_eq(kidx[i] >= 0, kept[i] != 0, "selection %lld: kept %d, reference %d", (long long)i, kidx[i] >= 0,
                     kept[i]);
        dropped += kidx[i] < 0, R += kidx[i] >= 0;
    }
    cr_assert_eq(r.acts.R, R, "R %lld, kept selections %lld", (long long)r.acts.R, (long long)R);
    if (empty_expert >= 0)
        cr_assert_eq(r.acts.counts[empty_expert], 0, "expert %lld got %d tokens", (long long)empty_expert,
                     r.acts.counts[empty_expert]);

    float *gy = ot_read(dev, r.y), *gl = ot_read(dev, r.acts.losses);
    for (int64_t i = 0; i < N * C; i++)
        cr_assert_leq(fabs(gy[i] - y64[i]), bound[i], "y[%lld] %.9g, fp64 %.9g, bound %.3g", (long long)i, gy[i],
                      y64[i], bound[i]);
    cr_assert_leq(fabs(gl[0] - aux), aux_b, "aux %.9g, fp64 %.9g", gl[0], aux);
    cr_assert_leq(fabs(gl[1] - z), z_b, "z %.9g, fp64 %.9g", gl[1], z);
    if (mc->cfg.aux_loss_coeff != 0)
        cr_assert_gt(aux, 0);
    if (mc->cfg.z_loss_coeff != 0)
        cr_assert_gt(z, 0);

    double tol = 64.0 * (double)(C + I + Is + K + E) * U;
    check_grad("dx", &m, m.x, r.nx, r.dx, 0.0f, tol);
    check_grad("d router", &m, m.wr, r.nwr, r.gw.router_w, G0, tol);
    check_grad("d gate|up", &m, m.wgu, r.nwgu, r.gw.gate_up_w, G0, tol);
    check_grad("d down", &m, m.wd, r.nwd, r.gw.down_w, G0, tol);
    if (Is) {
        check_grad("d shared gate|up", &m, m.sgu, r.nsgu, r.gw.shared_gate_up_w, G0, tol);
        check_grad("d shared down", &m, m.sd, r.nsd, r.gw.shared_down_w, G0, tol);
    }
    if (empty_expert >= 0) { /* its weights' gradients stay exactly at their start */
        float *gd = ot_read(dev, r.gw.down_w), *ggu = ot_read(dev, r.gw.gate_up_w);
        for (int64_t i = empty_expert * C * I; i < (empty_expert + 1) * C * I; i++)
            cr_assert_eq(gd[i], G0, "expert %lld has no token but a down gradient", (long long)empty_expert);
        for (int64_t i = empty_expert * 2 * I * C; i < (empty_expert + 1) * 2 * I * C; i++)
            cr_assert_eq(ggu[i], G0, "expert %lld has no token but a gate|up gradient", (long long)empty_expert);
    }
    free(kept);
    return dropped;
}

static tri_moe_config config(int64_t N, int64_t E, int64_t K, int64_t Is, int sf, bool norm)
{
    return (tri_moe_config){.shape = {.N = N, .C = 8, .E = E, .K = K, .I = 6, .I_shared = Is},
                            .score_func = sf, .norm_topk = norm, .capacity = 0, .drop_policy = TRI_MOE_DROP_PROBS,
                            .aux_loss_coeff = 0, .z_loss_coeff = 0};
}

/* ---- the cases ---- */

Test(moe_block, mixtral_routing_with_a_shared_expert_losses_and_an_empty_expert)
{
    static const float bias[4] = {0, 0, 0, -10}; /* expert 3 is never chosen (scores are in (0, 1)) */
    moe_case mc = {.cfg = config(7, 4, 2, 5, TRI_MOE_SOFTMAX, true), .bias = bias, .seed = 100};
    mc.cfg.aux_loss_coeff = 0.05f, mc.cfg.z_loss_coeff = 0.01f;
    cr_assert_eq(check_case(&mc, 3), 0);
}

Test(moe_block, qwen3_routing_without_renormalisation)
{
    moe_case mc = {.cfg = config(9, 4, 2, 0, TRI_MOE_SOFTMAX, false), .seed = 200};
    mc.cfg.aux_loss_coeff = 0.02f;
    check_case(&mc, -1);
}

Test(moe_block, sigmoid_scores_with_and_without_renormalisation)
{
    moe_case a = {.cfg = config(6, 5, 2, 3, TRI_MOE_SIGMOID, true), .seed = 300};
    a.cfg.aux_loss_coeff = 0.03f, a.cfg.z_loss_coeff = 0.001f;
    check_case(&a, -1);
    moe_case b = {.cfg = config(6, 5, 3, 0, TRI_MOE_SIGMOID, false), .seed = 310};
    check_case(&b, -1);
}

Test(moe_block, capacity_drops_selections_by_weight_and_by_position)
{
    for (int policy = 0; policy < 2; policy++) {
        moe_case mc = {.cfg = config(10, 4, 2, 0, TRI_MOE_SOFTMAX, true), .seed = 400 + (uint64_t)policy};
        mc.cfg.capacity = tri_moe_capacity(10, 2, 4, 0.5); /* ceil(5 * 0.5) = 3 of ~5 an expert */
        mc.cfg.drop_policy = policy ? TRI_MOE_DROP_POSITION : TRI_MOE_DROP_PROBS;
        mc.cfg.z_loss_coeff = 0.01f;
        cr_assert_eq(mc.cfg.capacity, 3);
        cr_assert_gt(check_case(&mc, -1), 0, "policy %d: the case must drop selections", policy);
        /* with a shared expert, a token whose selections are all dropped still gets the shared output */
        mc.cfg.shape.I_shared = 4, mc.cfg.capacity = 1, mc.seed += 10;
        cr_assert_gt(check_case(&mc, -1), 0);
    }
}

Test(moe_block, top_1_and_top_all)
{
    moe_case k1 = {.cfg = config(8, 4, 1, 0, TRI_MOE_SOFTMAX, false), .seed = 500};
    k1.cfg.aux_loss_coeff = 0.01f;
    check_case(&k1, -1);
    moe_case ke = {.cfg = config(5, 3, 3, 4, TRI_MOE_SOFTMAX, true), .seed = 510};
    ke.cfg.z_loss_coeff = 0.01f;
    check_case(&ke, -1);
}

static size_t align_up(size_t b)
{
    return (b + TRI_MOE_ALIGN - 1) / TRI_MOE_ALIGN * TRI_MOE_ALIGN;
}

Test(moe_block, buffer_sizes_are_the_worst_case_of_the_shape)
{
    /* Every buffer from (N, C, E, K, I, I_s) alone, dropless N*K permuted rows, 4-byte elements */
    tri_moe_shape s = {.N = 37, .C = 24, .E = 8, .K = 2, .I = 40, .I_shared = 16};
    size_t N = 37, C = 24, E = 8, K = 2, I = 40, Is = 16, P = N * K;
    size_t acts = 2 * align_up(4 * N * E) + 4 * align_up(4 * N * K) + 2 * align_up(4 * E) + align_up(4 * P) +
                  2 * align_up(4 * P * C) + align_up(4 * P * 2 * I) + align_up(4 * P * I) + align_up(4 * N * 2 * Is) +
                  align_up(4 * N * Is) + align_up(8);
    size_t scratch = align_up(4 * N * E) + align_up(4 * N * K) + align_up(4 * P * C) + align_up(4 * P * I) +
                     align_up(4 * P * 2 * I) + align_up(4 * N * Is) + align_up(4 * N * 2 * Is) + align_up(8);
    cr_assert_eq(tri_moe_acts_bytes(&s), acts);
    cr_assert_eq(tri_moe_scratch_bytes(&s), scratch);
    /* bind places them inside the block, disjoint, in that size */
    char *mem = malloc(acts);
    tri_moe_acts a;
    OK(tri_moe_bind(&s, &a, mem, NULL, NULL));
    tri_tensor all[] = {a.logits, a.scores, a.expert_idx, a.expert_w, a.kept_idx, a.tokens_per_expert,
                        a.routed_per_expert, a.row_id_map, a.sorted_indices, a.x_perm, a.gate_up, a.h, a.o,
                        a.shared_gate_up, a.shared_h, a.losses};
    char *end = mem;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        cr_assert_geq((char *)all[i].data, end, "buffer %zu overlaps the one before", i);
        end = (char *)all[i].data + tri_tensor_bytes(all[i]);
    }
    cr_assert_leq(end, mem + acts);
    cr_assert_eq(tri_tensor_numel(a.x_perm), (int64_t)(P * C));
    /* no shared expert: its buffers are absent */
    s.I_shared = 0;
    OK(tri_moe_bind(&s, &a, mem, NULL, NULL));
    cr_assert_null(a.shared_h.data);
    free(mem);
}

Test(moe_block, refusals_name_the_field)
{
    tri_moe_shape s = {.N = 4, .C = 8, .E = 4, .K = 5, .I = 6};
    cr_assert_eq(tri_moe_acts_bytes(&s), 0);
    tri_moe_acts a;
    char mem[64];
    cr_assert_eq(tri_moe_bind(&s, &a, mem, NULL, NULL), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "num_experts_per_tok"), "%s", tri_error_message());
    s.K = 2, s.I_shared = -1;
    cr_assert_eq(tri_moe_bind(&s, &a, mem, NULL, NULL), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "shared_expert_intermediate_size"), "%s", tri_error_message());

    /* bf16 activations into an fp32 block are refused (tests/test_moe_bf16.c runs the bf16 block); so is
     * a shared expert's shape without its weights */
    moe_case mc = {.cfg = config(4, 4, 2, 0, TRI_MOE_SOFTMAX, true), .seed = 600};
    run r;
    setup_run(&r, &mc);
    tri_tensor xb = dev_put(tri_tensor_2d(NULL, TRI_BF16, 4, 8), NULL);
    cr_assert_eq(tri_moe_forward(dev, r.y, &r.acts, xb, &r.w, &mc.cfg), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "shape.dtype"), "%s", tri_error_message());
    mc.cfg.shape.I_shared = 3;
    cr_assert_eq(tri_moe_forward(dev, r.y, &r.acts, r.x, &r.w, &mc.cfg), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "shared"), "%s", tri_error_message());
}

/* ---- PyTorch (Debian's python3-torch, float64): Hugging Face's sparse MoE blocks ---- */

/* One model's comparison with tests/moe_block_torch.py: our block's forward and backward, the float64
 * loop's y and bounds, and the script's input and output files. */
typedef struct torch_job {
    const char *model;
    moe_case mc;
    run r;
    double *y64, *bound;
    char dir[32], in[64], out[64];
} torch_job;

/* Runs our block and the float64 loop, and writes the script's input; *arg: the script's arguments for it. */
static void torch_prepare(torch_job *j, tu_torch_job *arg, const char *model, bool norm, uint64_t seed)
{
    *j = (torch_job){.model = model, .mc = {.cfg = config(11, 4, 2, 0, TRI_MOE_SOFTMAX, norm), .seed = seed}};
    const tri_moe_shape *S = &j->mc.cfg.shape;
    int64_t N = S->N, C = S->C, E = S->E, K = S->K, I = S->I;
    run *r = &j->r;
    setup_run(r, &j->mc);
    moe64 m = ref_of(r, &j->mc);
    j->y64 = ot_doubles((size_t)(N * C));
    j->bound = ot_doubles((size_t)(N * C));
    double aux, z;
    int *kept = malloc(sizeof(int) * (size_t)(N * K));
    forward64(&m, j->y64, &aux, &z, kept, j->bound, NULL, NULL);
    free(kept);

    snprintf(j->dir, sizeof j->dir, "/tmp/trident-moe-block-XXXXXX");
    cr_assert(mkdtemp(j->dir), "mkdtemp");
    snprintf(j->in, sizeof j->in, "%s/in.bin", j->dir);
    snprintf(j->out, sizeof j->out, "%s/out.bin", j->dir);
    FILE *f = fopen(j->in, "wb");
    cr_assert(f);
    double meta[6] = {(double)N, (double)C, (double)E, (double)K, (double)I, norm};
    int64_t n6 = 6, sx[2] = {N, C}, sr[2] = {E, C}, sgu[3] = {E, 2 * I, C}, sd[3] = {E, C, I};
    cr_assert_eq(tu_rec_write(f, "meta", 1, &n6, meta), 0);
    cr_assert_eq(tu_rec_write_f32(f, "x", 2, sx, r->hx), 0);
    cr_assert_eq(tu_rec_write_f32(f, "gate", 2, sr, r->hwr), 0);
    cr_assert_eq(tu_rec_write_f32(f, "gate_up", 3, sgu, r->hwgu), 0);
    cr_assert_eq(tu_rec_write_f32(f, "down", 3, sd, r->hwd), 0);
    cr_assert_eq(tu_rec_write_f32(f, "g", 2, sx, r->hg), 0);
    fclose(f);
    *arg = (tu_torch_job){model, j->in, j->out};
}

/* Compares ours with the script's output and removes the files. */
static void torch_check(const torch_job *j)
{
    const char *model = j->model;
    const tri_moe_shape *S = &j->mc.cfg.shape;
    int64_t N = S->N, C = S->C, E = S->E, K = S->K, I = S->I;
    const run *r = &j->r;
    tu_records ref;
    cr_assert_eq(tu_rec_read(j->out, &ref), 0, "cannot read %s", j->out);
    const tu_record *ry = tu_rec_find(&ref, "y");
    cr_assert(ry, "%s: y is missing", model);
    float *gy = ot_read(dev, r->y);
    for (int64_t i = 0; i < N * C; i++) {
        cr_assert_leq(fabs(ry->data[i] - j->y64[i]), 1e-12, "%s: torch y[%lld] %.15g, our fp64 loop %.15g", model,
                      (long long)i, ry->data[i], j->y64[i]);
        cr_assert_leq(fabs(gy[i] - ry->data[i]), j->bound[i], "%s: y[%lld] %.9g, torch %.9g", model, (long long)i,
                      gy[i], ry->data[i]);
    }
    double tol = 64.0 * (double)(C + I + K + E) * U;
    struct {
        const char *name;
        tri_tensor got;
        float start;
    } gr[] = {{"dx", r->dx, 0.0f}, {"d_gate", r->gw.router_w, G0}, {"d_gate_up", r->gw.gate_up_w, G0},
              {"d_down", r->gw.down_w, G0}};
    for (size_t t = 0; t < sizeof gr / sizeof gr[0]; t++) {
        const tu_record *rg = tu_rec_find(&ref, gr[t].name);
        cr_assert(rg, "%s: %s is missing", model, gr[t].name);
        size_t n = (size_t)tri_tensor_numel(gr[t].got);
        float *got = ot_read(dev, gr[t].got);
        double big = 0;
        for (size_t i = 0; i < n; i++)
            big = fmax(big, fabs(rg->data[i]));
        cr_assert_gt(big, 0.01);
        for (size_t i = 0; i < n; i++)
            cr_assert_leq(fabs((double)got[i] - gr[t].start - rg->data[i]), tol * big, "%s: %s[%zu] %.9g, torch %.9g",
                          model, gr[t].name, i, (double)got[i] - gr[t].start, rg->data[i]);
    }
    tu_rec_free(&ref);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", j->dir);
    tu_run(cmd);
}

Test(moe_block, against_pytorch_hf_sparse_moe_blocks, .timeout = 120)
{
    if (!tu_have_torch())
        cr_skip_test("/usr/bin/python3 has no torch (Debian's python3-torch): the PyTorch comparison is skipped");
    torch_job jobs[2];
    tu_torch_job args[2]; /* one script run for all (tu_torch_jobs) */
    torch_prepare(&jobs[0], &args[0], "mixtral", true, 700);
    torch_prepare(&jobs[1], &args[1], "qwen3_moe", false, 710);
    char cmd[4096];
    cr_assert_eq(tu_torch_jobs("tests/moe_block_torch.py", args, 2, cmd, sizeof cmd), 0,
                 "the PyTorch reference failed: %s", cmd);
    for (int i = 0; i < 2; i++)
        torch_check(&jobs[i]);
}
