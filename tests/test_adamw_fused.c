/* tests/test_adamw_fused.c - AdamW, the bf16 publish and the gradient zeroing in one pass
 * (tri_op_adamw_fused_multi; Loshchilov & Hutter 2019 for the update, Micikevicius et al. 2018 for
 * the fp32 master weights rounded into the bf16 model weights) against the three passes it replaces.
 *
 * The fused op's contract is bit-identity with adamw_multi, convert and fill run in turn, so the
 * reference is that sequence on the same inputs, compared bit for bit: param, m, v, the bf16 model
 * weights and the (zeroed) gradients, on 1 and 3 CPU threads, with and without bf16 outputs, with v
 * updated and frozen (1-bit Adam), pieces of awkward lengths (one empty), decay on and off, and
 * gradients holding a NaN, an infinity and -0; the wrapper's stand-in on a device without the slot
 * too. Independently of the reference: every gradient is
 * +0.0 afterwards, every model weight is its parameter rounded (tri_float_to_bf16), the model
 * buffer's NaN fill was overwritten, and most parameters moved (the update was not skipped).
 *
 * In training (engine/train/optimizer.c), the fused pass runs where the layout allows it
 * (tri_zero_update_zeroes_grads) and the next step's gradient fill is skipped. A run with it and one
 * with tri_adamw_config.unfused_update must give the same losses and final weights, bit for bit,
 * in every layout kind: fp32 and bf16, ZeRO 0-3, dp 1 and 2 (stage 1 at dp 2 keeps the separate
 * passes), tp and pp with the tied embedding, overlap, deterministic mode, a compressed reduction
 * (separate passes), local SGD, and LAMB (separate passes). Each run also says whether its last
 * update zeroed the gradients itself (tu_result.grads_zeroed): the test asserts the fused pass ran
 * exactly where it is valid, so it could not pass with the fusion never taken. The emulated CUDA
 * build checks the kernel against the CPU (tests/test_cuda_kernels_cpu.c, tests/gpu/test_gpu_ops.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/dp_compress.h"
#include "engine/train/optimizer.h"
#include "tests/harness.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"
#include "tools/cli/compression_flags.h"

TestSuite(adamw_fused, .fini = ot_teardown);

enum { P = 5 };
static const int64_t LENS[P] = {1001, 0, 63, 70001, 1};
static const float WDS[P] = {0.1f, 0.1f, 0.0f, 0.1f, 0.0f};

typedef struct state {
    float *p, *g, *m, *v;
    uint16_t *model;
    tri_adamw_piece pieces[P];
    tri_tensor models[P];
} state;

static void make_state(state *s, const float *p0, const float *g0, const float *m0, const float *v0, int64_t total)
{
    size_t b = (size_t)total * sizeof(float);
    s->p = ot_floats((size_t)total), s->g = ot_floats((size_t)total);
    s->m = ot_floats((size_t)total), s->v = ot_floats((size_t)total);
    s->model = (uint16_t *)ot_floats((size_t)total); /* half of it used */
    memcpy(s->p, p0, b), memcpy(s->g, g0, b), memcpy(s->m, m0, b), memcpy(s->v, v0, b);
    memset(s->model, 0xFF, (size_t)total * sizeof(uint16_t)); /* NaN: every element must be written */
    for (int k = 0, at = 0; k < P; at += (int)LENS[k], k++) {
        int64_t n = LENS[k];
        s->pieces[k] = (tri_adamw_piece){tri_tensor_1d(s->p + at, TRI_F32, n), tri_tensor_1d(s->g + at, TRI_F32, n),
                                         tri_tensor_1d(s->m + at, TRI_F32, n), tri_tensor_1d(s->v + at, TRI_F32, n),
                                         WDS[k]};
        s->models[k] = tri_tensor_1d(s->model + at, TRI_BF16, n);
    }
}

static void same_u16(const char *what, const uint16_t *got, const uint16_t *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s: element %lld 0x%04x vs 0x%04x", what, (long long)i, got[i], want[i]);
}

static void fused_vs_three_passes(int threads, bool bf16, int64_t freeze)
{
    tri_device *d = ot_device(threads);
    int64_t total = 0;
    for (int k = 0; k < P; k++)
        total += LENS[k];
    float *p0 = ot_uniform((size_t)total, -1.0f, 1.0f, 200), *g0 = ot_uniform((size_t)total, -1.0f, 1.0f, 201);
    float *m0 = ot_uniform((size_t)total, -0.1f, 0.1f, 202), *v0 = ot_uniform((size_t)total, 0.0f, 0.01f, 203);
    g0[5] = NAN, g0[17] = INFINITY, g0[40] = -0.0f;
    tri_adamw_hparams hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.7f, .step = 4,
                            .freeze_step = freeze};
    state f, u;
    make_state(&f, p0, g0, m0, v0, total);
    make_state(&u, p0, g0, m0, v0, total);
    cr_assert_eq(tri_op_adamw_fused_multi(d, f.pieces, bf16 ? f.models : NULL, P, &hp), TRI_OK, "%s",
                 tri_error_message());
    /* the three passes the contract is defined by */
    cr_assert_eq(tri_op_adamw_multi(d, u.pieces, P, &hp), TRI_OK, "%s", tri_error_message());
    for (int k = 0; k < P; k++) {
        if (bf16) cr_assert_eq(tri_op_convert(d, u.models[k], u.pieces[k].param), TRI_OK, "%s", tri_error_message());
        cr_assert_eq(tri_op_fill(d, u.pieces[k].grad, 0.0f), TRI_OK, "%s", tri_error_message());
    }
    /* the wrapper's stand-in on a device without the slot (the three ops it is defined by) */
    state w;
    make_state(&w, p0, g0, m0, v0, total);
    const tri_device_ops *own = d->ops;
    tri_device_ops without = *own;
    without.adamw_fused_multi = NULL;
    d->ops = &without;
    cr_assert(!tri_device_has_adamw_fused(d));
    int wrc = tri_op_adamw_fused_multi(d, w.pieces, bf16 ? w.models : NULL, P, &hp);
    d->ops = own;
    cr_assert_eq(wrc, TRI_OK, "%s", tri_error_message());
    cr_assert(tri_device_has_adamw_fused(d), "the CPU fills the fused slot");
    char what[96];
    snprintf(what, sizeof what, "threads %d bf16 %d freeze %lld", threads, bf16, (long long)freeze);
    cr_assert(ot_same_bits(what, w.p, u.p, (size_t)total), "%s: stand-in param", what);
    cr_assert(ot_same_bits(what, w.m, u.m, (size_t)total), "%s: stand-in m", what);
    cr_assert(ot_same_bits(what, w.v, u.v, (size_t)total), "%s: stand-in v", what);
    cr_assert(ot_same_bits(what, w.g, u.g, (size_t)total), "%s: stand-in grad", what);
    same_u16(what, w.model, u.model, total);
    cr_assert(ot_same_bits(what, f.p, u.p, (size_t)total), "%s: param", what);
    cr_assert(ot_same_bits(what, f.m, u.m, (size_t)total), "%s: m", what);
    cr_assert(ot_same_bits(what, f.v, u.v, (size_t)total), "%s: v", what);
    cr_assert(ot_same_bits(what, f.g, u.g, (size_t)total), "%s: grad", what);
    same_u16(what, f.model, u.model, total);
    int64_t moved = 0;
    for (int64_t i = 0; i < total; i++) {
        uint32_t gb;
        memcpy(&gb, &f.g[i], sizeof gb);
        cr_assert_eq(gb, 0u, "%s: gradient %lld is 0x%08x, not +0", what, (long long)i, gb);
        cr_assert_eq(f.model[i], bf16 ? tri_float_to_bf16(f.p[i]) : (uint16_t)0xFFFF,
                     "%s: model weight %lld is not its parameter rounded (or was written without bf16)", what,
                     (long long)i);
        moved += f.p[i] != p0[i];
    }
    cr_assert(!isfinite(f.p[5]) && !isfinite(f.p[17]), "%s: a NaN or infinite gradient left its parameter finite", what);
    cr_assert_gt(moved, total * 9 / 10, "%s: only %lld of %lld parameters moved", what, (long long)moved,
                 (long long)total);
}

Test(adamw_fused, op_same_bits_as_three_passes)
{
    for (int threads = 1; threads <= 3; threads += 2)
        for (int bf16 = 0; bf16 < 2; bf16++)
            for (int64_t freeze = 0; freeze <= 2; freeze += 2)
                fused_vs_three_passes(threads, bf16, freeze);
}

Test(adamw_fused, op_refuses_bad_model_views)
{
    tri_device *d = ot_device(1);
    float *x = ot_floats(40);
    tri_adamw_piece pc = {tri_tensor_1d(x, TRI_F32, 8), tri_tensor_1d(x + 8, TRI_F32, 8),
                          tri_tensor_1d(x + 16, TRI_F32, 8), tri_tensor_1d(x + 24, TRI_F32, 8), 0.1f};
    tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1, .step = 1};
    tri_tensor fp32 = tri_tensor_1d(x + 32, TRI_F32, 8), short_ = tri_tensor_1d(x + 32, TRI_BF16, 7);
    cr_assert_eq(tri_op_adamw_fused_multi(d, &pc, &fp32, 1, &hp), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "adamw_fused_multi piece 0") && strstr(tri_error_message(), "model"), "%s",
              tri_error_message());
    cr_assert_eq(tri_op_adamw_fused_multi(d, &pc, &short_, 1, &hp), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "model"), "%s", tri_error_message());
    hp.step = 0;
    cr_assert_eq(tri_op_adamw_fused_multi(d, &pc, NULL, 1, &hp), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "step"), "%s", tri_error_message());
    tri_error_clear();
}

/* ---- training: the fused pass against the separate passes ---- */

typedef struct fused_case {
    const char *name;
    tu_layout layout;
    bool fused;            /* the fused pass is valid there (tri_zero_update_zeroes_grads, AdamW) */
} fused_case;

Test(adamw_fused, training_fused_equals_separate_passes, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, STEPS = 3 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 16, T, cfg.vocab_size, 31);
    tri_compression onebit = tri_compression_defaults();
    onebit.kind = TRI_COMPRESS_1BIT;
    onebit.block_size = 64;
    tri_local_sgd_config local = {.steps = 2, .outer = TRI_OUTER_NESTEROV, .outer_lr = 0.7f, .outer_momentum = 0.9f};
    const fused_case cases[] = {
        {"fp32 dp 1", {.n_micro = 2}, true},
        {"bf16 dp 1", {.n_micro = 2, .bf16 = true}, true},
        {"bf16 dp 1 zero 1", {.n_micro = 2, .zero = 1, .bf16 = true}, true},
        {"bf16 dp 2 zero 0 overlap", {.dp = 2, .n_micro = 2, .bf16 = true, .overlap = true}, true},
        {"bf16 dp 2 zero 1 (separate)", {.dp = 2, .n_micro = 2, .zero = 1, .bf16 = true}, false},
        {"fp32 dp 2 zero 2 overlap", {.dp = 2, .n_micro = 2, .zero = 2, .overlap = true}, true},
        {"bf16 dp 2 zero 3", {.dp = 2, .n_micro = 2, .zero = 3, .bf16 = true}, true},
        {"bf16 tp 2 pp 2 (tied embedding)", {.tp = 2, .pp = 2, .n_micro = 2, .bf16 = true}, true},
        {"fp32 dp 2 zero 0 deterministic", {.dp = 2, .n_micro = 2, .deterministic = true}, true},
        {"bf16 dp 2 1bit (separate)", {.dp = 2, .n_micro = 2, .bf16 = true, .compression = onebit}, false},
        {"fp32 dp 2 local SGD", {.dp = 2, .n_micro = 1, .local = local}, true},
        {"bf16 dp 1 lamb (separate)", {.n_micro = 2, .bf16 = true, .optimizer = TRI_OPT_LAMB}, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tu_layout sep = cases[c].layout;
        sep.unfused_update = true;
        tu_result rf, rs;
        cr_assert_eq(tu_run_gpt(&cfg, B, T, &cases[c].layout, w, STEPS, &rf), TRI_OK, "%s: %s", cases[c].name,
                     tri_error_message());
        cr_assert_eq(tu_run_gpt(&cfg, B, T, &sep, w, STEPS, &rs), TRI_OK, "%s: %s", cases[c].name,
                     tri_error_message());
        cr_expect_eq(rf.grads_zeroed, cases[c].fused, "%s: the last update %s the gradients itself", cases[c].name,
                     rf.grads_zeroed ? "zeroed" : "did not zero");
        cr_expect(!rs.grads_zeroed, "%s: the separate passes' run zeroed the gradients in the update", cases[c].name);
        for (int s = 0; s < STEPS; s++)
            cr_expect_eq(rf.losses[s], rs.losses[s], "%s: loss %d %.17g vs %.17g", cases[c].name, s, rf.losses[s],
                         rs.losses[s]);
        cr_expect(tu_weights_same(&rf, &rs), "%s: the weights differ from the separate passes'", cases[c].name);
        cr_expect_eq(rf.bf16_stale, 0, "%s: %lld bf16 weights are not their master rounded", cases[c].name,
                     (long long)rf.bf16_stale);
        tu_result_free(&rf);
        tu_result_free(&rs);
    }
    free(w);
}
