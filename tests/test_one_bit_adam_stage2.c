/* tests/test_one_bit_adam_stage2.c - 1-bit Adam's compression stage as Tang et al. 2021 run it
 * ("1-bit Adam: Communication Efficient Large-Scale Training with Adam's Convergence Speed", §3-4,
 * Algorithm 1), --onebit-adam (engine/train/onebit_adam.h): after --adam-freeze-step N plain AdamW
 * updates, each worker updates the momentum with its own gradient and the momentum is all-reduced
 * compressed with error feedback; the update uses the frozen v.
 * What the tests show:
 *   - the exchange and the update on 2 and 4 thread ranks, over 3 stage-2 steps of a two-unit
 *     layout with padding, equal a host reference of Algorithm 1 with the 1bit compressor (block
 *     means in double rounded once, signs, the worker residual, the decoded sum in rank order, the
 *     frozen-v AdamW element) bit for bit: the arithmetic is the same fp32 operations in the same
 *     order (C11 without FMA contraction), so any difference is a defect. Clipping (grad_scale)
 *     applies to the worker's own gradient. Every rank holds the same m and weights.
 *   - with PowerSGD as the compressor, the exchange is Algorithm 1 composed with the library's PowerSGD
 *     reduction (checked against float64 in test_grad_compression): m and the residuals are, bit for
 *     bit, what that reduction decodes from the host's u, and the weights the frozen-v update of m.
 *   - the warm-up is plain AdamW: with freeze K, the losses before updates 0..K and the weights after
 *     K updates have the bits of an uncompressed, unfrozen run; from update K + 1 on they differ,
 *     and differ from 1bit on the gradient with the same freeze (the momentum, not the gradient, is
 *     compressed).
 *   - tp 2 x dp 2 (with and without sequence parallelism) and pp 2 x dp 2 (the tied embedding)
 *     train; the harness refuses TP copies, and a tied copy and its parameter, that differ, which
 *     without the copies' broadcast of m they would (each TP rank and each stage compresses its own
 *     unit: without the tied embedding's broadcast the pp 2 run fails on wte).
 *   - saved in stage 2 and resumed, a run is bit-identical to the uninterrupted one (losses, weights,
 *     each dp rank's residual), allgather, two-phase and PowerSGD (its Q); without that state it is not.
 *   - the refusals name the flags. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/fsutil.h"
#include "engine/core/status.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/dp_compress.h"
#include "engine/train/onebit_adam.h"
#include "engine/train/optimizer.h"
#include "engine/train/train_layout.h"
#include "engine/train/zero.h"
#include "partitioner/layout.h"
#include "tests/ckpt_harness.h"
#include "tests/harness.h"
#include "tests/testutil.h"

/* ---- the stage-2 step against a host reference of Algorithm 1 ---- */

enum { MAXD = 4, STEPS = 3, BLOCK = 64, FREEZE = 1, MAXN = 4096 };
static const float B1 = 0.9f, B2 = 0.95f, EPS = 1e-8f, WD = 0.1f, LR = 0.01f;
static const float SCALES[STEPS] = {1.0f, 0.7f, 1.0f}; /* the clipping scale of each step */

typedef struct ref_job {
    int D;
    tri_compression_kind kind;           /* 1bit (the host reference below) or powersgd (composed) */
    int64_t padded;                      /* the layout's padded length (every rank's) */
    bool real[MAXN];                     /* element is a parameter's (not padding) */
    float wd[MAXN];                      /* its weight decay */
    int64_t unit_start[2], unit_len[2];
    float grads[STEPS][MAXD][MAXN];      /* each rank's gradient of each step (divided by D) */
    float p0[MAXN], m0[MAXN], v0[MAXN];  /* the state after the warm-up */
    float got_m[STEPS][MAXD][MAXN], got_p[STEPS][MAXD][MAXN], got_r[STEPS][MAXD][MAXN];
    /* powersgd: each worker's u = beta1 / D m + (1 - beta1) s g on the host, then reduced by a second
     * compressor instance as a gradient would be (tri_dp_compress_unit): the decoded sum and residual */
    float want_m[STEPS][MAXD][MAXN], want_r[STEPS][MAXD][MAXN];
} ref_job;

static void specs(tri_param_spec *s)
{
    memset(s, 0, 3 * sizeof *s);
    const char *names[3] = {"w", "b", "u"};
    int64_t shapes[3][2] = {{24, 41}, {100, 0}, {300, 0}};
    for (int i = 0; i < 3; i++) {
        snprintf(s[i].name, sizeof s[i].name, "%s", names[i]);
        s[i].ndim = shapes[i][1] ? 2 : 1;
        s[i].shape[0] = shapes[i][0];
        s[i].shape[1] = shapes[i][1];
        s[i].split_dim = -1;
        s[i].weight_decay = i != 1;
        s[i].init_rows = shapes[i][0];
        s[i].global_index = i;
        s[i].unit = i == 2; /* w and b in unit 0, u in unit 1 */
    }
}

static int ref_rank(int rank, int size, tri_comm *comm, void *arg)
{
    ref_job *j = arg;
    tri_param_spec s[3];
    specs(s);
    tri_param_layout L;
    int rc = tri_layout_create(&L, s, 3, 1, 0, size, rank);
    if (rc)
        return rc;
    tri_train_layout run;
    memset(&run, 0, sizeof run);
    run.tp = run.pp = 1;
    run.dp = size;
    run.zero_stage = 0;
    run.compression = tri_compression_defaults();
    run.compression.kind = j->kind;
    run.compression.block_size = BLOCK;
    run.compression.start_iter = FREEZE;
    run.compression.powersgd_rank = 2;
    run.compression.powersgd_start_iter = FREEZE;
    run.compression.seed = 7;
    tri_adamw_config cfg = {.beta1 = B1, .beta2 = B2, .eps = EPS, .weight_decay = WD, .kind = TRI_OPT_ADAM,
                            .freeze_step = FREEZE, .onebit_adam = true, .unfused_update = false};
    tri_device *d = NULL;
    tri_zero z;
    tri_optimizer o;
    tri_dp_compress x2; /* the same compressor, reducing the host's u as a gradient */
    bool composed = j->kind != TRI_COMPRESS_1BIT;
    memset(&z, 0, sizeof z);
    memset(&o, 0, sizeof o);
    memset(&x2, 0, sizeof x2);
    tri_arena a;
    tri_arena_plan(&a);
    rc = tri_device_cpu_create(&d, 1);
    for (int pass = 0; pass < 2 && !rc; pass++) { /* plan, then take from the committed arena */
        if (pass == 1) {
            tri_zero_destroy(&z);
            rc = tri_arena_commit(&a, d);
        }
        if (!rc) rc = tri_zero_take(&z, &a, &L, &run);
        if (!rc) rc = tri_optimizer_take(&o, &a, &cfg, tri_zero_owned_numel(&z));
        if (!rc && composed) rc = tri_dp_compress_take(&x2, &a, &L, &run.compression, 0, false);
    }
    if (!rc) tri_zero_bind(&z, d, comm);
    if (!rc) rc = tri_optimizer_reset(d, &o);
    /* the warm-up's end state (the same on every rank): weights, m, v > 0; FREEZE updates done */
    if (!rc) rc = tri_device_copy_from_host(d, tri_tensor_range(z.params, 0, L.padded_numel), j->p0);
    if (!rc) rc = tri_device_copy_from_host(d, tri_tensor_range(o.m, 0, L.padded_numel), j->m0);
    if (!rc) rc = tri_device_copy_from_host(d, tri_tensor_range(o.v, 0, L.padded_numel), j->v0);
    o.step = FREEZE;
    for (int st = 0; st < STEPS && !rc; st++) {
        rc = tri_device_copy_from_host(d, tri_tensor_range(z.grads, 0, L.padded_numel), j->grads[st][rank]);
        z.iteration = o.step;
        if (!rc && composed) { /* u from this rank's m before the step, in the exchange's fp32 operations */
            float *u = j->want_m[st][rank];
            float sa = B1 / (float)size, sc = (1.0f - B1) * SCALES[st];
            rc = tri_device_copy_to_host(d, u, tri_tensor_range(o.m, 0, L.padded_numel));
            for (int64_t i = 0; i < L.padded_numel && !rc; i++) {
                float v = sc * j->grads[st][rank][i];
                u[i] = v + sa * u[i];
            }
            for (int un = 0; un < L.n_units && !rc; un++)
                rc = tri_dp_compress_unit(&x2, d, comm, tri_tensor_1d(u, TRI_F32, L.padded_numel), un, o.step);
            if (!rc) rc = tri_dp_compress_residual_read(&x2, d, 0, L.padded_numel, j->want_r[st][rank]);
        }
        if (!rc && !tri_optimizer_onebit_stage(&o, &z))
            rc = TRI_ERR(TRI_EINTERNAL, "test: step %lld is not the compression stage", (long long)o.step);
        if (!rc) rc = tri_onebit_adam_exchange(d, &o, &z, SCALES[st]);
        if (!rc) rc = tri_optimizer_step(d, &o, &z, LR, 1.0f, tri_tensor_none());
        if (!rc) rc = tri_device_copy_to_host(d, j->got_m[st][rank], tri_tensor_range(o.m, 0, L.padded_numel));
        if (!rc) rc = tri_device_copy_to_host(d, j->got_p[st][rank], tri_tensor_range(z.params, 0, L.padded_numel));
        if (!rc) rc = tri_dp_compress_residual_read(&z.comp, d, 0, L.padded_numel, j->got_r[st][rank]);
    }
    tri_zero_destroy(&z);
    tri_dp_compress_free(&x2);
    tri_arena_release(&a);
    tri_device_destroy(d);
    tri_layout_destroy(&L);
    return rc;
}

/* The update of Algorithm 1 after the exchange, on the host: tri_adamw_element with beta1 0 (its m is
 * the averaged momentum m exactly), bc1 1, v frozen with its bias correction 1 - beta2^FREEZE. */
static float frozen_v_update(float p, float m, float v, float wd)
{
    float pp = p * (1.0f - LR * wd);
    return pp - (LR / 1.0f) * m / (sqrtf(v) / sqrtf(1.0f - powf(B2, (float)FREEZE)) + EPS);
}

/* Algorithm 1's stage 2 on the host, in the library's fp32 operations and order. */
static void reference(const ref_job *j, float ref_m[STEPS][MAXN], float ref_p[STEPS][MAXN],
                      float ref_r[STEPS][MAXD][MAXN])
{
    static float m[MAXN], p[MAXN], r[MAXD][MAXN], e[MAXD][MAXN], sum[MAXN];
    int D = j->D;
    int64_t n = j->padded;
    memcpy(m, j->m0, sizeof m);
    memcpy(p, j->p0, sizeof p);
    memset(r, 0, sizeof r);
    float a = B1 / (float)D;
    for (int st = 0; st < STEPS; st++) {
        float c = (1.0f - B1) * SCALES[st];
        /* each worker: u = beta1 / D m + (1 - beta1) s g (scale, then axpy), e = r + u */
        for (int k = 0; k < D; k++)
            for (int64_t i = 0; i < n; i++) {
                float u = c * j->grads[st][k][i];
                u = u + a * m[i];
                e[k][i] = r[k][i] + u;
            }
        memset(sum, 0, sizeof sum);
        for (int un = 0; un < 2; un++) {
            int64_t s0 = j->unit_start[un], len = j->unit_len[un];
            for (int k = 0; k < D; k++) /* 1bit: mean |e| per block in double, rounded once; the sign */
                for (int64_t b0 = 0; b0 < len; b0 += BLOCK) {
                    int64_t hi = b0 + BLOCK < len ? b0 + BLOCK : len;
                    double acc = 0.0;
                    for (int64_t i = b0; i < hi; i++)
                        acc += fabs((double)e[k][s0 + i]);
                    float scale = (float)(acc / (double)(hi - b0));
                    for (int64_t i = b0; i < hi; i++) {
                        float dec = e[k][s0 + i] < 0.0f ? -scale : scale;
                        r[k][s0 + i] = e[k][s0 + i] + -1.0f * dec;
                        e[k][s0 + i] = dec; /* now the decoded value */
                    }
                }
            for (int k = 0; k < D; k++) /* the decoded sum in rank order */
                for (int64_t i = s0; i < s0 + len; i++)
                    sum[i] = sum[i] + 1.0f * e[k][i];
        }
        for (int64_t i = 0; i < n; i++) {
            if (!j->real[i]) { /* padding: no residual, no update */
                for (int k = 0; k < D; k++)
                    r[k][i] = 0.0f;
                continue;
            }
            m[i] = sum[i];
            p[i] = frozen_v_update(p[i], sum[i], j->v0[i], j->wd[i]);
        }
        memcpy(ref_m[st], m, sizeof m);
        memcpy(ref_p[st], p, sizeof p);
        memcpy(ref_r[st], r, sizeof r);
    }
}

/* PowerSGD as the compressor (Algorithm 1 with C = the library's PowerSGD reduction, which
 * test_grad_compression checks against float64): each rank's exchanged m is, bit for bit, what a
 * second instance of the compressor decodes from the host's u = beta1 / D m + (1 - beta1) s g
 * reduced as a gradient; the residual likewise; the weights are the frozen-v update of that m. */
static void check_composed(const ref_job *j)
{
    static float p[MAXN];
    memcpy(p, j->p0, sizeof p);
    int64_t differ_plain = 0;
    for (int st = 0; st < STEPS; st++) {
        for (int64_t i = 0; i < j->padded; i++) {
            if (!j->real[i])
                continue;
            /* the uncompressed sum of the workers' u, for "it did compress" */
            float sum = B1 * (st == 0 ? j->m0[i] : j->got_m[st - 1][0][i]);
            for (int k = 0; k < j->D; k++) {
                cr_assert_eq(j->got_m[st][k][i], j->want_m[st][k][i], "powersgd D %d step %d rank %d: m[%lld] %.9g, "
                             "the compressor on u %.9g", j->D, st, k, (long long)i, (double)j->got_m[st][k][i],
                             (double)j->want_m[st][k][i]);
                cr_assert_eq(j->got_r[st][k][i], j->want_r[st][k][i], "powersgd D %d step %d rank %d: residual[%lld]",
                             j->D, st, k, (long long)i);
                cr_assert_eq(j->got_m[st][k][i], j->got_m[st][0][i], "powersgd: ranks %d and 0 hold another m", k);
                sum += (1.0f - B1) * SCALES[st] * j->grads[st][k][i];
            }
            differ_plain += fabsf(j->got_m[st][0][i] - sum) > 1e-3f * fabsf(sum) + 1e-7f;
            p[i] = frozen_v_update(p[i], j->got_m[st][0][i], j->v0[i], j->wd[i]);
            for (int k = 0; k < j->D; k++)
                cr_assert_eq(j->got_p[st][k][i], p[i], "powersgd D %d step %d rank %d: w[%lld] %.9g, the frozen-v "
                             "update %.9g", j->D, st, k, (long long)i, (double)j->got_p[st][k][i], (double)p[i]);
        }
    }
    /* rank 2 of the 24 x 41 matrix is not exact: the momentum was compressed, not summed */
    cr_expect_gt(differ_plain, 100, "powersgd D %d: m is the plain sum in all but %lld elements", j->D,
                 (long long)differ_plain);
}

static void stage2_matches_algorithm1(int D, tri_compression_kind kind)
{
    static ref_job j;
    static float ref_m[STEPS][MAXN], ref_p[STEPS][MAXN], ref_r[STEPS][MAXD][MAXN];
    memset(&j, 0, sizeof j);
    j.D = D;
    j.kind = kind;
    tu_fill_uniform(j.p0, MAXN, -0.5f, 0.5f, 11);
    tu_fill_uniform(j.m0, MAXN, -0.02f, 0.02f, 12);
    tu_fill_uniform(j.v0, MAXN, 1e-5f, 1e-3f, 13);
    for (int st = 0; st < STEPS; st++)
        for (int k = 0; k < D; k++)
            tu_fill_uniform(j.grads[st][k], MAXN, -0.1f, 0.1f, 100 + 10 * (uint64_t)st + (uint64_t)k);
    /* the layout (every rank's is the same at stage 0): where the parameters and units are */
    tri_param_spec s[3];
    specs(s);
    tri_param_layout L;
    cr_assert_eq(tri_layout_create(&L, s, 3, 1, 0, D, 0), TRI_OK, "%s", tri_error_message());
    j.padded = L.padded_numel;
    cr_assert(L.n_units == 2 && j.padded <= MAXN, "%d units, %lld elements", L.n_units, (long long)j.padded);
    for (int u = 0; u < 2; u++) {
        j.unit_start[u] = L.units[u].start;
        j.unit_len[u] = L.units[u].len;
    }
    for (int i = 0; i < L.n; i++)
        for (int64_t k = 0; k < L.params[i].numel; k++) {
            j.real[L.params[i].offset + k] = true;
            j.wd[L.params[i].offset + k] = L.params[i].spec.weight_decay ? WD : 0.0f;
        }
    cr_assert_lt(L.params[0].numel, L.params[1].offset, "no layout padding after w");
    tri_layout_destroy(&L);
    /* padding holds zeros in every buffer, as the library keeps it */
    for (int64_t i = 0; i < MAXN; i++)
        if (i >= j.padded || !j.real[i]) {
            j.p0[i] = j.m0[i] = j.v0[i] = 0.0f;
            for (int st = 0; st < STEPS; st++)
                for (int k = 0; k < D; k++)
                    j.grads[st][k][i] = 0.0f;
        }
    cr_assert_eq(tri_run_thread_ranks(D, ref_rank, &j), TRI_OK, "%s", tri_error_message());
    if (kind != TRI_COMPRESS_1BIT) {
        check_composed(&j);
        return;
    }
    reference(&j, ref_m, ref_p, ref_r);
    int64_t checked = 0;
    for (int st = 0; st < STEPS; st++)
        for (int k = 0; k < D; k++)
            for (int64_t i = 0; i < j.padded; i++) {
                if (!j.real[i])
                    continue;
                checked++;
                cr_assert_eq(j.got_m[st][k][i], ref_m[st][i], "D %d step %d rank %d: m[%lld] %.9g, Algorithm 1 %.9g", D,
                             st, k, (long long)i, (double)j.got_m[st][k][i], (double)ref_m[st][i]);
                cr_assert_eq(j.got_p[st][k][i], ref_p[st][i], "D %d step %d rank %d: w[%lld] %.9g, Algorithm 1 %.9g", D,
                             st, k, (long long)i, (double)j.got_p[st][k][i], (double)ref_p[st][i]);
                cr_assert_eq(j.got_r[st][k][i], ref_r[st][k][i], "D %d step %d rank %d: residual[%lld] %.9g, "
                             "Algorithm 1 %.9g", D, st, k, (long long)i, (double)j.got_r[st][k][i],
                             (double)ref_r[st][k][i]);
            }
    cr_expect_gt(checked, 0);
    /* the momentum moved by the compressed exchange, not left at m0, and the residuals are the workers' own */
    int moved = 0, differ = 0;
    for (int64_t i = 0; i < j.padded; i++) {
        moved += j.real[i] && j.got_m[0][0][i] != j.m0[i];
        differ += j.real[i] && j.got_r[0][0][i] != j.got_r[0][1][i];
    }
    cr_expect_gt(moved, 1000, "D %d: m changed in %d elements", D, moved);
    cr_expect_gt(differ, 1000, "D %d: ranks 0 and 1 share their residual in all but %d elements", D, differ);
}

Test(one_bit_adam_stage2, exchange_and_update_equal_algorithm1_dp2) { stage2_matches_algorithm1(2, TRI_COMPRESS_1BIT); }
Test(one_bit_adam_stage2, exchange_and_update_equal_algorithm1_dp4) { stage2_matches_algorithm1(4, TRI_COMPRESS_1BIT); }
Test(one_bit_adam_stage2, powersgd_exchange_is_algorithm1_with_powersgd)
{
    stage2_matches_algorithm1(2, TRI_COMPRESS_POWERSGD);
    stage2_matches_algorithm1(4, TRI_COMPRESS_POWERSGD);
}

/* ---- training: the warm-up is plain AdamW, then the momentum is compressed ---- */

static tu_layout onebit_layout(int tp, int pp, int dp, bool sp, tri_compression_kind kind,
                               tri_compression_reduce reduce, int64_t freeze)
{
    tu_layout l = {.tp = tp, .pp = pp, .dp = dp, .sp = sp, .n_micro = 2, .zero = 0,
                   .compression = tu_small_compressor(kind, reduce, freeze), .adam_freeze_step = freeze,
                   .onebit_adam = true};
    l.compression.powersgd_start_iter = freeze; /* powersgd's own start (engine_train sets it so) */
    l.compression.powersgd_rank = 2;
    return l;
}

static void warmup_then_momentum(tri_compression_kind kind, tri_compression_reduce reduce, int dp)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, K = 2, N_STEPS = 5 };
    int32_t *w = tu_make_windows((int64_t)N_STEPS * 16, T, cfg.vocab_size, 41);
    tu_layout ob = onebit_layout(1, 1, dp, false, kind, reduce, K);
    tu_layout plain = {.tp = 1, .pp = 1, .dp = dp, .n_micro = 2}; /* AdamW, fp32 reduction, never frozen */
    tu_layout grad = ob; /* the gradient compressed after the same freeze (the path before --onebit-adam) */
    grad.onebit_adam = false;
    const char *name = tri_compression_name(kind);
    tu_result ro, rp, rg, rok, rpk;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &ob, w, N_STEPS, &ro), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &plain, w, N_STEPS, &rp), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &grad, w, N_STEPS, &rg), TRI_OK, "%s", tri_error_message());
    /* losses[s]: the loss before update s; updates 1..K are plain AdamW */
    for (int s = 0; s <= K; s++)
        cr_expect_eq(ro.losses[s], rp.losses[s], "%s dp %d: loss %d %.17g, plain AdamW %.17g", name, dp, s,
                     ro.losses[s], rp.losses[s]);
    for (int s = K + 1; s < N_STEPS; s++) {
        cr_expect_neq(ro.losses[s], rp.losses[s], "%s dp %d: loss %d is plain AdamW's: stage 2 did not start", name,
                      dp, s);
        cr_expect_neq(ro.losses[s], rg.losses[s], "%s dp %d: loss %d is the compressed gradient's", name, dp, s);
        cr_expect(isfinite(ro.losses[s]) && fabs(ro.losses[s] - rp.losses[s]) < 0.05 * rp.losses[s],
                  "%s dp %d: loss %d %.6g strays from plain AdamW's %.6g", name, dp, s, ro.losses[s], rp.losses[s]);
    }
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &ob, w, K, &rok), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &plain, w, K, &rpk), TRI_OK, "%s", tri_error_message());
    cr_expect(tu_weights_same(&rok, &rpk), "%s dp %d: the weights after the %d warm-up updates are not AdamW's", name,
              dp, K);
    cr_expect(!tu_weights_same(&ro, &rp), "%s dp %d: the weights after stage 2 are AdamW's", name, dp);
    tu_result_free(&ro);
    tu_result_free(&rp);
    tu_result_free(&rg);
    tu_result_free(&rok);
    tu_result_free(&rpk);
    free(w);
}

Test(one_bit_adam_stage2, warmup_is_plain_adamw_then_the_momentum_is_compressed, .timeout = 300)
{
    warmup_then_momentum(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER, 2);
    warmup_then_momentum(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_TWO_PHASE, 4);
    warmup_then_momentum(TRI_COMPRESS_QSGD, TRI_COMPRESS_REDUCE_ALLGATHER, 2);
    warmup_then_momentum(TRI_COMPRESS_TOPK, TRI_COMPRESS_REDUCE_ALLGATHER, 2);
    warmup_then_momentum(TRI_COMPRESS_POWERSGD, TRI_COMPRESS_REDUCE_ALLGATHER, 2);
}

/* tp 2 x dp 2 (with and without SP: each TP rank compresses its own unit, whose blocks of 100 mix a
 * replicated parameter with the rank's own shards, so TP rank 0's m is given to the copies of
 * replicated parameters; the harness refuses copies that differ, as it does without that copy) and pp 2 x dp 2
 * (the tied embedding's two stages get the first stage's m; the harness refuses a last-stage copy of
 * wte that differs from the first stage's) train through stage 2. */
Test(one_bit_adam_stage2, composes_with_tp_and_pp, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, K = 2, N_STEPS = 5 };
    int32_t *w = tu_make_windows((int64_t)N_STEPS * 16, T, cfg.vocab_size, 42);
    struct { int tp, pp; bool sp; tri_compression_kind kind; } ls[] = {
        {2, 1, false, TRI_COMPRESS_1BIT}, {2, 1, true, TRI_COMPRESS_1BIT}, {1, 2, false, TRI_COMPRESS_1BIT},
        {2, 1, true, TRI_COMPRESS_POWERSGD}, {1, 2, false, TRI_COMPRESS_POWERSGD}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        tu_layout ob = onebit_layout(ls[i].tp, ls[i].pp, 2, ls[i].sp, ls[i].kind, TRI_COMPRESS_REDUCE_ALLGATHER, K);
        ob.compression.block_size = 100; /* blocks straddle parameters (64-aligned): TP ranks' scales differ */
        tu_layout plain = {.tp = ls[i].tp, .pp = ls[i].pp, .dp = 2, .sp = ls[i].sp, .n_micro = 2};
        tu_result ro, rp;
        cr_assert_eq(tu_run_gpt(&cfg, B, T, &ob, w, N_STEPS, &ro), TRI_OK, "tp %d pp %d sp %d: %s", ls[i].tp,
                     ls[i].pp, ls[i].sp, tri_error_message());
        cr_assert_eq(tu_run_gpt(&cfg, B, T, &plain, w, N_STEPS, &rp), TRI_OK, "%s", tri_error_message());
        for (int s = 0; s <= K; s++)
            cr_expect_eq(ro.losses[s], rp.losses[s], "tp %d pp %d sp %d: warm-up loss %d differs", ls[i].tp, ls[i].pp,
                         ls[i].sp, s);
        for (int s = K + 1; s < N_STEPS; s++)
            cr_expect(ro.losses[s] != rp.losses[s] && fabs(ro.losses[s] - rp.losses[s]) < 0.05 * rp.losses[s],
                      "tp %d pp %d sp %d: stage-2 loss %d %.9g vs AdamW %.9g", ls[i].tp, ls[i].pp, ls[i].sp, s,
                      ro.losses[s], rp.losses[s]);
        tu_result_free(&ro);
        tu_result_free(&rp);
    }
    free(w);
}

/* ---- the refusals name the flags ---- */

static void refused(tu_layout l, const char *a, const char *b)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows(32, 8, cfg.vocab_size, 43);
    tu_result r;
    int rc = tu_run_gpt(&cfg, 1, 8, &l, w, 2, &r);
    const char *msg = tri_error_message();
    cr_expect_eq(rc, TRI_EINVAL, "expected a refusal naming %s and %s; got %d: %s", a, b, rc, msg);
    cr_expect(strstr(msg, a) && strstr(msg, b), "the refusal names neither %s nor %s: %s", a, b, msg);
    if (rc == TRI_OK)
        tu_result_free(&r);
    free(w);
}

Test(one_bit_adam_stage2, refusals_name_the_flags, .timeout = 120)
{
    tu_layout ok = onebit_layout(1, 1, 2, false, TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER, 2);
    tu_layout l = ok;
    l.zero = 1;
    refused(l, "--onebit-adam", "--zero-stage 1");
    l = ok;
    l.adam_freeze_step = 0;
    l.compression.start_iter = 0;
    refused(l, "--onebit-adam", "--adam-freeze-step 0");
    l = onebit_layout(1, 1, 2, false, TRI_COMPRESS_POWERSGD, TRI_COMPRESS_REDUCE_ALLGATHER, 2);
    l.compression.powersgd_start_iter = 3;
    refused(l, "--powersgd-start-iter 3", "--adam-freeze-step 2");
    l = ok;
    l.compression = tri_compression_defaults();
    refused(l, "--onebit-adam", "--grad-compression none");
    l = ok;
    l.compression.start_iter = 1;
    refused(l, "--grad-compression-start-iter 1", "--adam-freeze-step 2");
    l = ok;
    l.deterministic = true;
    refused(l, "--onebit-adam", "--deterministic-mode");
    l = ok;
    l.optimizer = TRI_OPT_LAMB;
    refused(l, "--onebit-adam", "--optimizer lamb");
    l = ok;
    l.local = (tri_local_sgd_config){.steps = 4, .outer = TRI_OUTER_AVERAGE, .outer_lr = 1.0f};
    refused(l, "--onebit-adam", "--local-sgd-steps 4");
}

/* ---- checkpoints: saved in stage 2 and resumed, bit for bit ---- */

enum { CB = 1, CT = 8, CGLOBAL = 4, CHALF = 10, CFREEZE = 4 };

static tu_ckpt_run ckpt_run(const tri_gpt_config *cfg, const int32_t *w, tri_compression_kind kind,
                            tri_compression_reduce reduce)
{
    tu_layout l = onebit_layout(1, 1, 2, false, kind, reduce, CFREEZE);
    l.compression.seed = 1234;
    return (tu_ckpt_run){.cfg = cfg, .B = CB, .T = CT, .layout = l, .global_batch = CGLOBAL, .windows = w,
                         .until = TU_CKPT_TOTAL};
}

static void same_tensor(const char *a, const char *b, tri_ckpt_file_kind kind, int dp, const char *group,
                        const char *name, const char *what)
{
    int64_t n = 0, m = 0;
    float *x = tu_ckpt_tensor(a, kind, dp, group, name, &n), *y = tu_ckpt_tensor(b, kind, dp, group, name, &m);
    cr_assert(x && y, "%s %s: %s", group ? group : "weights", name, tri_error_message());
    cr_expect(n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0, "%s: final %s %s (dp %d) differs", what,
              group ? group : "weights", name, dp);
    free(x);
    free(y);
}

/* powersgd: Q (the power iteration's warm start) is saved and restored with the residuals; without
 * either, the run is another one. */
static void resumes_bit_for_bit(tri_compression_kind kind, tri_compression_reduce reduce)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * CGLOBAL, CT, cfg.vocab_size, 44);
    char *dir = tu_ckpt_tmpdir(kind == TRI_COMPRESS_POWERSGD              ? "onebit-powersgd"
                               : reduce == TRI_COMPRESS_REDUCE_TWO_PHASE ? "onebit-2ph"
                                                                         : "onebit");
    char ref_dir[4200], mid[4300], ref_final[4300], out[4300], fin[4400];
    snprintf(ref_dir, sizeof ref_dir, "%s/uninterrupted", dir);
    snprintf(mid, sizeof mid, "%s/iter_%07d", ref_dir, CHALF);
    snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);
    tu_ckpt_run ref = ckpt_run(&cfg, w, kind, reduce);
    ref.save_dir = ref_dir;
    ref.save_interval = CHALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted: %s", tri_error_message());

    snprintf(out, sizeof out, "%s/resumed", dir);
    tu_ckpt_run r = ckpt_run(&cfg, w, kind, reduce);
    r.load = mid;
    r.save_dir = out;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "resume: %s", tri_error_message());
    cr_assert_eq(r.start, CHALF);
    for (int k = 0; k < TU_CKPT_TOTAL - CHALF; k++)
        cr_expect(r.losses[k] == ref.losses[CHALF + k], "iteration %d loss %.17g, uninterrupted %.17g", CHALF + k + 1,
                  r.losses[k], ref.losses[CHALF + k]);
    snprintf(fin, sizeof fin, "%s/iter_%07d", out, TU_CKPT_TOTAL);
    const char *names[] = {"wte", "h.0.attn.c_attn.w", "ln_f.w"};
    for (int i = 0; i < 3; i++) {
        same_tensor(fin, ref_final, TRI_CKPT_MODEL, -1, NULL, names[i], "resumed");
        for (int dp = 0; dp < 2; dp++) {
            same_tensor(fin, ref_final, TRI_CKPT_REPLICA, dp, "error_feedback", names[i], "resumed");
            if (reduce == TRI_COMPRESS_REDUCE_TWO_PHASE)
                same_tensor(fin, ref_final, TRI_CKPT_REPLICA, dp, "server_error_feedback", names[i], "resumed");
        }
    }
    /* without the residuals the run is another one: they carry the equality */
    tu_ckpt_run z = ckpt_run(&cfg, w, kind, reduce);
    z.load = mid;
    z.reset_compression_state = true;
    cr_assert_eq(tu_ckpt_train(&z), TRI_OK, "reset: %s", tri_error_message());
    int differ = 0;
    for (int k = 0; k < TU_CKPT_TOTAL - CHALF; k++)
        differ += z.losses[k] != ref.losses[CHALF + k];
    cr_expect_gt(differ, 0, "resumed without the momentum's residuals, the losses are the uninterrupted run's");
    /* resumed without --onebit-adam: refused naming it */
    tu_ckpt_run g = ckpt_run(&cfg, w, kind, reduce);
    g.layout.onebit_adam = false;
    g.load = mid;
    cr_expect_eq(tu_ckpt_train(&g), TRI_EINVAL, "a --onebit-adam checkpoint resumed without it");
    cr_expect(strstr(tri_error_message(), "--onebit-adam") && strstr(tri_error_message(), "--no-load-optim"),
              "the refusal: %s", tri_error_message());
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

Test(one_bit_adam_stage2, resumes_bit_for_bit, .timeout = 300)
{
    resumes_bit_for_bit(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER);
}
Test(one_bit_adam_stage2, two_phase_resumes_bit_for_bit, .timeout = 300)
{
    resumes_bit_for_bit(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_TWO_PHASE);
}
Test(one_bit_adam_stage2, powersgd_resumes_bit_for_bit, .timeout = 300)
{
    resumes_bit_for_bit(TRI_COMPRESS_POWERSGD, TRI_COMPRESS_REDUCE_ALLGATHER);
}
