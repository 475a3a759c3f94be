/* tests/test_ops_optimizers.c - SGD with momentum, LARS and LAMB on the CPU backend against float64
 * loops of the papers' algorithms, over several steps, with tensors cut into pieces as ZeRO and TP
 * cut them.
 *
 * Three tensors (37, 50 and 23 elements): the first two decayed (matrices: weight decay and, for
 * LARS and LAMB, the trust ratio), the third not (a bias: neither), each cut into two pieces at an
 * odd offset as two ranks would own them. The whole-tensor norms go the trainer's way
 * (engine/train/trust_ratio.c): each piece's sum of squares into its own (tensor, rank) slot in one
 * tri_op_sum_squares_multi, tri_op_trust_ratio adding each tensor's two slots; the update ops then
 * run on the pieces. The references, on the whole tensors in double:
 *   SGD (torch.optim.SGD, dampening 0): d = g + wd p; b = mu b + d; p -= lr (nesterov ? d + mu b : b)
 *   LARS (You et al. 2017, Alg. 1): l = eta ||p|| / (||g|| + wd ||p||); d = lr l (g + wd p);
 *        b = mu b + d; p -= b
 *   LAMB (You et al. 2020, Alg. 2): m, v as Adam; r = m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p;
 *        p -= lr ||p|| / ||r|| r
 * with g = grad * grad_scale, fresh gradients each step.
 *
 * Tolerance, derived: each step's float update is a chain of at most ~8 roundings (2^-24 each) of
 * terms no larger than the update, plus the trust ratio's (two fp32 partial sums, a division: ~4
 * roundings) and the rounding of p itself (|p| 2^-24 a step); over S steps the change p - p0 is
 * off by at most S (12 2^-24 |dp| + 2^-24 max|p|); ot_close measures each element relative to
 * max(|dp|, floor) with floor = 0.1 rms(dp), so tol = S 2^-24 (12 + max|p| / floor). A
 * reference that dropped the trust ratio or used a per-piece norm is off by the ratio (1e-2 .. 1e1),
 * a wrong decay coupling by lr wd p ~ 1e-3 relative: far outside. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_optimizers, .fini = ot_teardown);

#define STEPS 5
#define NT 3

static const size_t sizes[NT] = {37, 50, 23};
static const size_t cut[NT] = {17, 29, 11};     /* the second rank's piece starts here */
static const bool decayed[NT] = {true, true, false};

typedef enum { SGD, LARS, LAMB } kind;

typedef struct {
    kind k;
    bool nesterov;
    float lr, mu, wd, eta, gs;
} setup;

static double norm2(const double *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return sqrt(s);
}

/* One float64 step of tensor t. */
static void ref_step(const setup *s, int t, int step, double *p, double *b, double *m, double *v, const float *grad)
{
    size_t n = sizes[t];
    double wd = decayed[t] ? s->wd : 0.0, lr = s->lr, mu = s->mu;
    double *g = malloc(n * sizeof *g), *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++)
        g[i] = (double)grad[i] * s->gs;
    if (s->k == SGD) {
        for (size_t i = 0; i < n; i++) {
            double d = g[i] + wd * p[i];
            b[i] = mu * b[i] + d;
            p[i] -= lr * (s->nesterov ? d + mu * b[i] : b[i]);
        }
    } else if (s->k == LARS) {
        double wn = norm2(p, n), gn = norm2(g, n);
        double l = decayed[t] && wn > 0 && gn > 0 ? s->eta * wn / (gn + wd * wn) : 1.0;
        for (size_t i = 0; i < n; i++) {
            double d = lr * l * (g[i] + wd * p[i]);
            b[i] = mu * b[i] + d;
            p[i] -= s->nesterov ? d + mu * b[i] : b[i];
        }
    } else {
        double b1 = 0.9, b2 = 0.999, eps = 1e-6;
        double bc1 = 1.0 - pow((double)0.9f, step), bc2 = 1.0 - pow((double)0.999f, step);
        b1 = 0.9f;
        b2 = 0.999f;
        eps = 1e-6f;
        for (size_t i = 0; i < n; i++) {
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
            r[i] = m[i] / bc1 / (sqrt(v[i] / bc2) + eps) + wd * p[i];
        }
        double wn = norm2(p, n), rn = norm2(r, n);
        double l = decayed[t] && wn > 0 && rn > 0 ? wn / rn : 1.0;
        for (size_t i = 0; i < n; i++)
            p[i] -= lr * l * r[i];
    }
    free(g);
    free(r);
}

static void check(const setup *s, uint64_t seed, const char *name)
{
    tri_device *d = ot_device(1);
    tri_tensor P[NT], G[NT], B[NT], V[NT];
    float *p0[NT];
    double *p[NT], *b[NT], *m[NT], *v[NT];
    for (int t = 0; t < NT; t++) {
        size_t n = sizes[t];
        p0[t] = ot_uniform(n, -1.0f, 1.0f, seed + (uint64_t)t);
        p[t] = ot_widen(p0[t], n);
        b[t] = ot_doubles(n);
        m[t] = ot_doubles(n);
        v[t] = ot_doubles(n);
        P[t] = ot_tensor(d, ot_v1((int64_t)n), p0[t]);
        G[t] = ot_tensor(d, ot_v1((int64_t)n), NULL);
        B[t] = ot_tensor(d, ot_v1((int64_t)n), ot_floats(n));
        V[t] = ot_tensor(d, ot_v1((int64_t)n), ot_floats(n));
    }
    tri_tensor sums = ot_tensor(d, ot_v1(2 * NT * 2), NULL), ratios = ot_tensor(d, ot_v1(NT), NULL);
    for (int step = 1; step <= STEPS; step++) {
        tri_sgd_piece sp[2 * NT];
        tri_adamw_piece ap[2 * NT];
        tri_tensor xs[4 * NT];
        int64_t slots[4 * NT];
        int nx = 0;
        for (int t = 0; t < NT; t++) {
            float *grad = ot_uniform(sizes[t], -1.0f, 1.0f, seed * 31 + (uint64_t)(step * NT + t));
            cr_assert_eq(tri_device_copy_from_host(d, G[t], grad), TRI_OK);
            ref_step(s, t, step, p[t], b[t], m[t], v[t], grad);
            for (int h = 0; h < 2; h++) {
                int64_t at = h ? (int64_t)cut[t] : 0, len = h ? (int64_t)(sizes[t] - cut[t]) : (int64_t)cut[t];
                float wd = decayed[t] ? s->wd : 0.0f;
                sp[2 * t + h] = (tri_sgd_piece){.param = tri_tensor_range(P[t], at, len),
                                                .grad = tri_tensor_range(G[t], at, len),
                                                .buf = tri_tensor_range(B[t], at, len), .weight_decay = wd,
                                                .ratio = s->k != SGD && decayed[t] ? t : -1};
                ap[2 * t + h] = (tri_adamw_piece){.param = sp[2 * t + h].param, .grad = sp[2 * t + h].grad,
                                                  .m = sp[2 * t + h].buf, .v = tri_tensor_range(V[t], at, len),
                                                  .weight_decay = wd};
            }
        }
        tri_adamw_hparams ah = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .grad_scale = s->gs, .step = step};
        if (s->k == LAMB)
            cr_assert_eq(tri_op_lamb_direction_multi(d, ap, 2 * NT, &ah), TRI_OK, "%s", tri_error_message());
        /* the slots: weights' (tensor t, rank h) at t * 2 + h, the second quantity's after NT * 2 */
        for (int q = 0; q < 2; q++)
            for (int k = 0; k < 2 * NT; k++) {
                xs[nx] = q ? sp[k].grad : sp[k].param;
                slots[nx++] = q * 2 * NT + k;
            }
        tri_trust_hparams th = {.kind = s->k == LAMB ? TRI_TRUST_LAMB : TRI_TRUST_LARS, .eta = s->eta,
                                .weight_decay = s->wd, .u_scale = s->k == LAMB ? 1.0f : s->gs};
        tri_sgd_hparams sh = {.lr = s->lr, .momentum = s->mu, .grad_scale = s->gs, .nesterov = s->nesterov,
                              .lars = s->k == LARS};
        int rc = tri_op_fill(d, sums, 0.0f);
        if (!rc && s->k != SGD) rc = tri_op_sum_squares_multi(d, sums, xs, slots, nx);
        if (!rc && s->k != SGD) rc = tri_op_trust_ratio(d, ratios, sums, 2, &th);
        if (!rc) rc = s->k == LAMB ? tri_op_lamb_update_multi(d, sp, 2 * NT, ratios, s->lr)
                                   : tri_op_sgd_multi(d, sp, 2 * NT, ratios, &sh);
        cr_assert_eq(rc, TRI_OK, "%s: %s", name, tri_error_message());
    }
    for (int t = 0; t < NT; t++) {
        size_t n = sizes[t];
        float *got = ot_read(d, P[t]), *dp = ot_floats(n);
        double *want = ot_doubles(n), maxp = 0.0, rms = 0.0;
        for (size_t i = 0; i < n; i++) {
            dp[i] = got[i] - p0[t][i];
            want[i] = p[t][i] - p0[t][i];
            maxp = fmax(maxp, fabs(p[t][i]));
            rms += want[i] * want[i];
        }
        rms = sqrt(rms / (double)n);
        double tol = STEPS * ldexp(1.0, -24) * (12.0 + maxp / (0.1 * rms));
        char what[96];
        snprintf(what, sizeof what, "%s tensor %d: p - p0 (tol %.2g)", name, t, tol);
        cr_expect(ot_close(what, dp, want, n, 0.1, tol), "%s", what);
    }
}

Test(ops_optimizers, sgd_momentum_matches_torch)
{
    check(&(setup){.k = SGD, .lr = 0.05f, .mu = 0.9f, .wd = 0.01f, .gs = 0.5f}, 11, "sgd");
    check(&(setup){.k = SGD, .nesterov = true, .lr = 0.05f, .mu = 0.9f, .wd = 0.01f, .gs = 1.0f}, 12, "sgd nesterov");
}

Test(ops_optimizers, lars_matches_you_2017)
{
    check(&(setup){.k = LARS, .lr = 0.5f, .mu = 0.9f, .wd = 0.01f, .eta = 0.02f, .gs = 0.5f}, 21, "lars");
    check(&(setup){.k = LARS, .nesterov = true, .lr = 0.5f, .mu = 0.9f, .wd = 0.0f, .eta = 0.02f, .gs = 1.0f}, 22,
          "lars nesterov no decay");
}

Test(ops_optimizers, lamb_matches_you_2020)
{
    check(&(setup){.k = LAMB, .lr = 0.01f, .wd = 0.01f, .gs = 0.5f}, 31, "lamb");
    check(&(setup){.k = LAMB, .lr = 0.01f, .wd = 0.0f, .gs = 1.0f}, 32, "lamb no decay");
}

/* The trust ratio is 1 when a norm is 0 (a zero-initialised tensor, a zero gradient). */
Test(ops_optimizers, trust_ratio_of_zero_norms_is_one)
{
    tri_device *d = ot_device(1);
    float host[8] = {4.0f, 0.0f, 0.0f, 0.0f, /* ||w||^2: 4, 0 */ 0.0f, 0.0f, 9.0f, 0.0f /* ||u||^2: 0, 9 */};
    tri_tensor sums = ot_tensor(d, ot_v1(8), host), ratios = ot_tensor(d, ot_v1(2), NULL);
    for (int k = 0; k < 2; k++) {
        tri_trust_hparams hp = {.kind = (tri_trust_kind)k, .eta = 0.001f, .weight_decay = 0.1f, .u_scale = 1.0f};
        cr_assert_eq(tri_op_trust_ratio(d, ratios, sums, 2, &hp), TRI_OK);
        float *r = ot_read(d, ratios);
        cr_expect(r[0] == 1.0f && r[1] == 1.0f, "kind %d: ratios %g %g, expected 1 1", k, (double)r[0], (double)r[1]);
    }
}

/* Refusals name the argument. */
Test(ops_optimizers, refusals_name_the_argument)
{
    tri_device *d = ot_device(1);
    tri_tensor a = ot_tensor(d, ot_v1(4), NULL), b = ot_tensor(d, ot_v1(5), NULL), r = ot_tensor(d, ot_v1(2), NULL);
    tri_sgd_piece p = {.param = a, .grad = a, .buf = b, .ratio = -1};
    tri_sgd_hparams hp = {.lr = 0.1f};
    cr_expect_eq(tri_op_sgd_multi(d, &p, 1, tri_tensor_none(), &hp), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "buf") != NULL, "%s", tri_error_message());
    p.buf = a;
    p.ratio = 2;
    cr_expect_eq(tri_op_sgd_multi(d, &p, 1, r, &hp), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "ratio index 2") != NULL, "%s", tri_error_message());
    tri_trust_hparams th = {.kind = TRI_TRUST_LARS, .u_scale = 1.0f};
    cr_expect_eq(tri_op_trust_ratio(d, r, b, 0, &th), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "span 0") != NULL, "%s", tri_error_message());
    cr_expect_eq(tri_op_trust_ratio(d, r, b, 1, &th), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "sums") != NULL, "%s", tri_error_message());
}
