/* tests/test_ops_adamw.c - the AdamW step on the CPU backend against torch.optim.AdamW's algorithm.
 *
 * The optimizer runs on every parameter shard of every step, so a wrong constant (bias correction,
 * eps placement, decay coupling) silently changes training. The reference is an fp64 loop of
 * torch.optim.AdamW's single-tensor algorithm (torch 1.13 `_single_tensor_adamw`), with Trident's
 * grad_scale first:
 *   g = grad * grad_scale;  p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * It is fed the same float hyper-parameters (widened) and run for five steps with fresh gradients,
 * with weight decay on and off and grad_scale 0.5 and 1. Some gradients are ~1e-9, so that eps
 * (1e-8) is a large part of their denominator, and some are exactly 0.
 *
 * Compared: m and v (tol 1e-5 relative, floor 1/10 of the RMS; measured at most 8.8e-7), and the
 * total change of p over the five steps rather than p itself, whose size would hide an error in
 * updates of ~lr (tol 1e-5; measured at most 1.3e-6). p starts small (|p| < 0.1, updates ~lr =
 * 0.05) because the float state rounds p to its ulp at every step: from |p| ~ 1 that alone is
 * ~1e-7 absolute after five steps, 1e-5 of the changes; from 0.1 it is ten times less. Weight
 * decay still moves p by lr wd p ~ 5e-4 per step, far above that.
 *
 * 1-bit Adam's frozen variance (hp.freeze_step N, Tang et al. 2021 §3): the same reference with v
 * updated only at steps t <= N and bias-corrected by 1 - b2^min(t, N), run for N = 3 steps before
 * the freeze and 3 after (six steps: the rounding bounds above grow by 6/5, still 10x below the
 * tolerances); v after the freeze keeps the bits it had at step N, and the frozen run's change of p
 * differs from plain AdamW's by far more than the tolerance, so the test would see a freeze that did
 * nothing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_adamw, .fini = ot_teardown);

#define TOL 1e-5
#define FLOOR 0.1
#define STEPS 5

/* One fp64 AdamW step of torch.optim.AdamW on n elements. */
static void adamw_ref(double *p, double *m, double *v, const float *grad, size_t n,
                      const tri_adamw_hparams *hp)
{
    double lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = hp->weight_decay;
    bool frozen = hp->freeze_step > 0 && hp->step > hp->freeze_step;
    double bc1 = 1.0 - pow(b1, (double)hp->step), bc2 = 1.0 - pow(b2, (double)(frozen ? hp->freeze_step : hp->step));
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * (double)hp->grad_scale;
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        if (!frozen)
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        double denom = sqrt(v[i]) / sqrt(bc2) + eps;
        p[i] -= lr / bc1 * m[i] / denom;
    }
}

static void check_adamw_steps(float weight_decay, float grad_scale, uint64_t seed, int steps, int64_t freeze)
{
    tri_device *d = ot_device(1);
    const size_t n = 37;
    tri_adamw_hparams hp = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                            .weight_decay = weight_decay, .grad_scale = grad_scale, .step = 0, .freeze_step = freeze};
    tri_adamw_hparams plain_hp = hp; /* plain AdamW's reference on the same gradients */
    plain_hp.freeze_step = 0;
    float *v_at_freeze = NULL;
    float *p0 = ot_uniform(n, -0.1f, 0.1f, seed);
    double *p = ot_widen(p0, n), *m = ot_doubles(n), *v = ot_doubles(n);
    double *plain_p = ot_widen(p0, n), *plain_m = ot_doubles(n), *plain_v = ot_doubles(n);
    tri_tensor tp = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)n), p0);
    tri_tensor tm = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)n), ot_floats(n));
    tri_tensor tv = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)n), ot_floats(n));
    tri_tensor tg = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)n), NULL);
    for (int step = 1; step <= steps; step++) {
        float *grad = ot_uniform(n, -1.0f, 1.0f, seed + 10 * (uint64_t)step);
        for (size_t i = 0; i < n; i += 5)
            grad[i] *= 1e-9f; /* eps-dominated */
        grad[3] = 0.0f;
        cr_assert_eq(tri_device_copy_from_host(d, tg, grad), TRI_OK);
        hp.step = step;
        cr_assert_eq(tri_op_adamw(d, tp, tg, tm, tv, &hp), TRI_OK);
        adamw_ref(p, m, v, grad, n, &hp);
        plain_hp.step = step;
        adamw_ref(plain_p, plain_m, plain_v, grad, n, &plain_hp);
        if (freeze > 0 && step == freeze)
            v_at_freeze = ot_read(d, tv);
    }
    float *gp = ot_read(d, tp), *dp = ot_floats(n);
    double *want_dp = ot_doubles(n);
    for (size_t i = 0; i < n; i++) {
        dp[i] = gp[i] - p0[i];
        want_dp[i] = p[i] - p0[i];
    }
    char what[96];
    snprintf(what, sizeof what, "adamw wd %g scale %g: p - p0", (double)weight_decay,
             (double)grad_scale);
    cr_assert(ot_close(what, dp, want_dp, n, FLOOR, TOL), "%s", what);
    snprintf(what, sizeof what, "adamw wd %g scale %g: m", (double)weight_decay,
             (double)grad_scale);
    cr_assert(ot_close(what, ot_read(d, tm), m, n, FLOOR, TOL), "%s", what);
    snprintf(what, sizeof what, "adamw wd %g scale %g: v", (double)weight_decay,
             (double)grad_scale);
    cr_assert(ot_close(what, ot_read(d, tv), v, n, FLOOR, TOL), "%s", what);
    if (freeze == 0)
        return;
    cr_assert(ot_same_bits("adamw frozen v: the bits of step freeze_step", ot_read(d, tv), v_at_freeze, n));
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(want_dp[i] - (plain_p[i] - p0[i])));
        scale = fmax(scale, fabs(want_dp[i]));
    }
    cr_assert_gt(worst, 100.0 * TOL * scale, "the frozen update should differ from AdamW's: %g of %g", worst, scale);
}

static void check_adamw(float weight_decay, float grad_scale, uint64_t seed)
{
    check_adamw_steps(weight_decay, grad_scale, seed, STEPS, 0);
}

Test(ops_adamw, with_weight_decay_and_grad_scale)
{
    check_adamw(0.1f, 0.5f, 1400);
}

Test(ops_adamw, without_weight_decay)
{
    check_adamw(0.0f, 0.5f, 1500);
}

Test(ops_adamw, unit_grad_scale)
{
    check_adamw(0.1f, 1.0f, 1600);
}

Test(ops_adamw, frozen_v_one_bit_adam)
{
    check_adamw_steps(0.1f, 0.5f, 1650, 6, 3);
    check_adamw_steps(0.0f, 1.0f, 1660, 6, 3);
}

/* tri_op_adamw_multi with freeze_step: each piece the bits of tri_op_adamw with the same freeze, v
 * untouched past it. */
Test(ops_adamw, multi_frozen_same_bits_as_piece_by_piece)
{
    tri_device *d = ot_device(2);
    const int64_t lens[] = {1000, 37};
    const int64_t n = 1037;
    float *p0 = ot_uniform((size_t)n, -1.0f, 1.0f, 1750), *g0 = ot_uniform((size_t)n, -1.0f, 1.0f, 1751);
    float *m0 = ot_uniform((size_t)n, -0.1f, 0.1f, 1752), *v0 = ot_uniform((size_t)n, 0.0f, 0.01f, 1753);
    tri_tensor shape = tri_tensor_1d(NULL, TRI_F32, n);
    tri_tensor p[2], m[2], v[2], g = ot_tensor(d, shape, g0);
    for (int r = 0; r < 2; r++) {
        p[r] = ot_tensor(d, shape, p0);
        m[r] = ot_tensor(d, shape, m0);
        v[r] = ot_tensor(d, shape, v0);
    }
    tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = 9,
                            .freeze_step = 4};
    tri_adamw_piece pieces[2];
    for (int k = 0, at = 0; k < 2; at += (int)lens[k], k++) {
        cr_assert_eq(tri_op_adamw(d, tri_tensor_range(p[0], at, lens[k]), tri_tensor_range(g, at, lens[k]),
                                  tri_tensor_range(m[0], at, lens[k]), tri_tensor_range(v[0], at, lens[k]), &hp),
                     TRI_OK);
        pieces[k] = (tri_adamw_piece){tri_tensor_range(p[1], at, lens[k]), tri_tensor_range(g, at, lens[k]),
                                      tri_tensor_range(m[1], at, lens[k]), tri_tensor_range(v[1], at, lens[k]), 0.0f};
    }
    cr_assert_eq(tri_op_adamw_multi(d, pieces, 2, &hp), TRI_OK, "%s", tri_error_message());
    cr_assert(ot_same_bits("adamw_multi frozen param", ot_read(d, p[1]), ot_read(d, p[0]), (size_t)n));
    cr_assert(ot_same_bits("adamw_multi frozen v", ot_read(d, v[1]), v0, (size_t)n));
    hp.freeze_step = -1;
    cr_assert_eq(tri_op_adamw_multi(d, pieces, 2, &hp), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "freeze_step") != NULL, "%s", tri_error_message());
}

/* tri_op_adamw_multi gives every piece the bits of tri_op_adamw with the piece's weight decay
 * (hp's own is ignored): three pieces of one buffer, decay on, off, on. */
Test(ops_adamw, multi_same_bits_as_piece_by_piece)
{
    tri_device *d = ot_device(2);
    const int64_t lens[] = {1000, 37, 4096};
    const float wds[] = {0.1f, 0.0f, 0.05f};
    const int64_t n = 1000 + 37 + 4096;
    float *p0 = ot_uniform((size_t)n, -1.0f, 1.0f, 1700), *g0 = ot_uniform((size_t)n, -1.0f, 1.0f, 1701);
    float *m0 = ot_uniform((size_t)n, -0.1f, 0.1f, 1702), *v0 = ot_uniform((size_t)n, 0.0f, 0.01f, 1703);
    tri_tensor shape = tri_tensor_1d(NULL, TRI_F32, n);
    tri_tensor p[2], m[2], v[2], g = ot_tensor(d, shape, g0);
    for (int r = 0; r < 2; r++) {
        p[r] = ot_tensor(d, shape, p0);
        m[r] = ot_tensor(d, shape, m0);
        v[r] = ot_tensor(d, shape, v0);
    }
    tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 7.0f,
                            .grad_scale = 0.5f, .step = 4};
    tri_adamw_piece pieces[3];
    for (int k = 0, at = 0; k < 3; at += (int)lens[k], k++) {
        tri_adamw_hparams h = hp;
        h.weight_decay = wds[k];
        cr_assert_eq(tri_op_adamw(d, tri_tensor_range(p[0], at, lens[k]), tri_tensor_range(g, at, lens[k]),
                                  tri_tensor_range(m[0], at, lens[k]), tri_tensor_range(v[0], at, lens[k]), &h),
                     TRI_OK);
        pieces[k] = (tri_adamw_piece){tri_tensor_range(p[1], at, lens[k]), tri_tensor_range(g, at, lens[k]),
                                      tri_tensor_range(m[1], at, lens[k]), tri_tensor_range(v[1], at, lens[k]), wds[k]};
    }
    cr_assert_eq(tri_op_adamw_multi(d, pieces, 3, &hp), TRI_OK, "%s", tri_error_message());
    cr_assert(ot_same_bits("adamw_multi param", ot_read(d, p[1]), ot_read(d, p[0]), (size_t)n));
    cr_assert(ot_same_bits("adamw_multi m", ot_read(d, m[1]), ot_read(d, m[0]), (size_t)n));
    cr_assert(ot_same_bits("adamw_multi v", ot_read(d, v[1]), ot_read(d, v[0]), (size_t)n));
}
