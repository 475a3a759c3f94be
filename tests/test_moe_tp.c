/* tests/test_moe_tp.c - MoE with tensor parallelism under sequence parallelism, and expert parallelism
 * folded over tp x dp (docs/moe.md "MoE with tensor parallelism"; Megatron-Core's parallel folding,
 * Liu et al. 2025, etp 1): the tiny Mixtral (4 layers, 4 experts, top-2, aux loss on) on thread ranks
 * (tu_run_model) at tp 2 SP (ep 1: every TP rank routes its own 4 of the 8 tokens through the
 * replicated router and all experts; the router's gradient sums over dp then tp, the experts' over
 * the expert-data-parallel group, here the stage's tp x dp ranks),
 * tp 2 SP x dp 2 with ep 2 (the ep group is a TP pair, the edp group the dp pair), tp 2 SP x dp 2 with
 * ep 4 (the ep group spans both tp and dp; edp 1) and tp 2 SP with pp 2 at ZeRO 0, and ZeRO 1-3
 * (below), against one rank; --bf16 at tp 2 SP against fp32.
 *
 * Bounds (as tests/test_moe_ep_layouts.c and the dense layouts): 1e-5 relative on the first pass's
 * loss and gradients, 1e-4 on the step losses and the weights after 4 AdamW steps, and every weight
 * element within AdamW's drift bound (tu_adamw_drift_bound at lr 1e-3: AdamW's normalised step turns
 * a near-zero gradient's rounding into up to a full step, which is where the weights' differences
 * come from: largest in layer 3's o_proj, 6.8e-5 relative, 6e-4 of the bound). Under tp the
 * attention's GEMMs split their columns and rows and the row-parallel outputs are summed over two
 * ranks, the router's and experts' gradients are summed over the sequence shards (two partial GEMMs
 * of 4 rows each) instead of one 8-row GEMM, and the aux loss's sums over tokens run in two shards:
 * each a few ulps (u = 6e-8) of the terms' magnitudes per layer, over 4 layers and 4 micro-batch terms,
 * far below 1e-5; while a token routed twice or not at all, the aux loss's f taken from one shard's
 * counts, a router gradient not summed over tp, or an expert gradient summed over the wrong group
 * changes the gradients by O(1e-2) or more (checked by hand: dropping the counts' all-reduce
 * gives relative gradient errors of about 2e-2).
 *
 * Deterministic mode: the dense layouts promise bit-identity across layouts of the same tp
 * (tests/test_deterministic.c with_tensor_parallelism: tp 2 vs tp 2 pp 2 dp 2), since tp changes the
 * GEMM shapes; so here tp 2 SP dp 2 ep 2, tp 2 SP dp 2 ep 4 and tp 2 SP pp 2 dp 2 ep 2 with full
 * recomputation are bit-identical to tp 2 SP at ep 1 (first-pass loss and gradients, step losses and
 * norms, final weights): an expert's GEMM batch is one sequence shard's rows on every layout, and the
 * gradients are exact fixed-point sums.
 *
 * The step's MoE account (routed and kept counts per layer and expert) equals one rank's integers in
 * every layout, and with DeepSeek-V3's expert bias on, tp 2 SP x dp 2 ep 2 moves the bias exactly as
 * one rank does (the kept counts summed over tp, dp and pp).
 *
 * Checkpoints: saved at tp 2 SP x dp 2 ep 2 after 3 steps (every expert in it, stored by its ep rank's
 * edp rank 0, whichever TP rank that is), resumed on one rank to step 6: the resumed losses equal one
 * rank's uninterrupted run within the bounds above.
 *
 * ZeRO 1-3 (docs/moe.md "ZeRO 1-3 at tp > 1"): the experts' gradients, optimizer state and (stage 3)
 * weights shard over the expert-data-parallel group of tp dp / ep ranks (at ep 1 the whole stage, 4
 * ranks at tp 2 dp 2: more than dp), everything else over dp: tp 2 SP x dp 2 at ep 1 and ep 2, ZeRO 1,
 * 2 and 3, and tp 2 SP x pp 2 at ZeRO 3 against one rank within the bounds above, and in deterministic
 * mode bit-identical to tp 2 SP at ZeRO 0 (AdamW, and LAMB whose trust ratios sum the experts' slices
 * on both TP ranks). Checked by hand: also all-reducing the experts over tp (the SP path) as well as
 * over edp fails every layout (gradients off by 1 to 5.5 relative); the stage-1 fused update that
 * zeroes the whole gradient buffer at dp 1 (tp 2 pp 2, edp 2) fails it (weights off by 7e-2); stage 0
 * at dp 1 without the experts' edp reduction fails it (gradients off by 1). A checkpoint saved at
 * tp 2 SP x dp 2 ep 2 ZeRO 3 resumes on one rank and at tp 1 dp 2 ep 2 ZeRO 1.
 *
 * Refusals: tp 2 without --sequence-parallel (Megatron's rule, named by the one validator), ep not
 * dividing tp x dp, local SGD at tp 2 (the experts reduce over tp x dp). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "engine/core/status.h"
#include "engine/train/optimizer.h"
#include "models/llama.h"
#include "models/model.h"
#include "tests/ckpt_harness.h"
#include "tests/harness.h"
#include "tests/moe_layouts.h"
#include "tests/testutil.h"

enum { B = TU_MOE_B, T = TU_MOE_T, GLOBAL = TU_MOE_GLOBAL, STEPS = TU_MOE_STEPS };
enum { SEED_BF16 = 61 };

static void make_tiny(tri_model *m, const char *extra)
{
    cr_assert_eq(tu_moe_tiny(m, extra), TRI_OK, "%s", tri_error_message());
}

Test(moe_tp, tensor_and_expert_parallel_match_one_rank, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, "");
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    static const tu_named_layout layouts[] = {
        {"tp2 sp", {.tp = 2, .sp = true}},
        {"tp2 sp dp2 ep2", {.tp = 2, .dp = 2, .sp = true, .ep = 2}},
        {"tp2 sp dp2 ep4", {.tp = 2, .dp = 2, .sp = true, .ep = 4}},
        {"tp2 sp pp2", {.tp = 2, .pp = 2, .sp = true}},
        /* ZeRO over the expert-data-parallel group: at ep 1 the stage's 4 ranks (edp 4 > dp 2), at ep 2
         * the 2 ranks s = tp_rank + 2 dp_rank of the same s % 2, at pp 2 (dp 1) the TP pair (edp 2) */
        {"tp2 sp dp2 zero1", {.tp = 2, .dp = 2, .sp = true, .zero = 1}},
        {"tp2 sp dp2 zero2", {.tp = 2, .dp = 2, .sp = true, .zero = 2}},
        {"tp2 sp dp2 zero3", {.tp = 2, .dp = 2, .sp = true, .zero = 3}},
        {"tp2 sp dp2 ep2 zero1", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 1}},
        {"tp2 sp dp2 ep2 zero2", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 2}},
        {"tp2 sp dp2 ep2 zero3 overlap", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 3, .overlap = true}},
        {"tp2 sp pp2 zero1", {.tp = 2, .pp = 2, .sp = true, .zero = 1}},
        {"tp2 sp pp2 zero3", {.tp = 2, .pp = 2, .sp = true, .zero = 3}},
    };
    tu_result ref, got;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 1}, &ref, w), TRI_OK, "%s", tri_error_message());
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        const char *name = layouts[k].name;
        cr_assert_eq(tu_moe_run(&m, &layouts[k].l, &got, w), TRI_OK, "%s: %s", name, tri_error_message());
        tu_moe_diff d;
        char why[256];
        cr_assert_eq(tu_moe_diff_of(&got, &ref, &d), TRI_OK, "%s: %s", name, tri_error_message());
        cr_expect(tu_moe_close(&d, 1e-4, why, sizeof why), "%s against one rank: %s", name, why);
        tu_moe_diff_log(name, &d);
        /* the step's MoE account (engine/train/moe_stats.h), summed over tp as well as dp and pp: the
         * routed and kept counts are one rank's integers; the aux loss (fixed point 2^-32) within 1e-5 */
        int counts = ref.moe_layers * 2 * ref.moe_E;
        cr_expect_eq(got.moe_micro, ref.moe_micro, "%s: account over %lld micro-batches, one rank's %lld", name,
                     (long long)got.moe_micro, (long long)ref.moe_micro);
        cr_expect(counts > 0 && memcmp(got.moe_sums, ref.moe_sums, (size_t)counts * sizeof *ref.moe_sums) == 0,
                  "%s: the routed and kept counts differ from one rank's", name);
        double aux = (double)got.moe_sums[counts], aux1 = (double)ref.moe_sums[counts];
        cr_expect_lt(fabs(aux - aux1) / aux1, 1e-5, "%s: the account's aux loss %.9g vs one rank's %.9g", name, aux,
                     aux1);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

/* Runs each layout and expects it bit-identical to ref_layout: first-pass loss, every gradient, the
 * step losses and norms, the final weights. */
static void expect_bit_identical(const tri_model *m, const int32_t *w, tu_layout ref_layout,
                                 const tu_named_layout *layouts, size_t n)
{
    tu_result ref, got;
    cr_assert_eq(tu_moe_run(m, &ref_layout, &ref, w), TRI_OK, "%s", tri_error_message());
    for (size_t k = 0; k < n; k++) {
        const char *name = layouts[k].name;
        cr_assert_eq(tu_moe_run(m, &layouts[k].l, &got, w), TRI_OK, "%s: %s", name, tri_error_message());
        char why[256];
        cr_expect(tu_moe_identical(name, &got, &ref, why, sizeof why), "%s: %s", name, why);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
}

Test(moe_tp, deterministic_bit_identical_to_tp2, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, "");
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 67);
    static const tu_named_layout layouts[] = {
        {"tp2 sp dp2 ep2", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .deterministic = true}},
        {"tp2 sp dp2 ep4", {.tp = 2, .dp = 2, .sp = true, .ep = 4, .deterministic = true}},
        {"tp2 sp pp2 dp2 ep2 recompute full", {.tp = 2, .pp = 2, .dp = 2, .sp = true, .ep = 2,
                                               .recompute = TRI_RECOMPUTE_FULL, .deterministic = true}},
        /* ZeRO 1-3 over the expert-data-parallel group keep the promise: the same exact sums, cut
         * into other slices */
        {"tp2 sp dp2 zero1", {.tp = 2, .dp = 2, .sp = true, .zero = 1, .deterministic = true}},
        {"tp2 sp dp2 zero2 overlap", {.tp = 2, .dp = 2, .sp = true, .zero = 2, .overlap = true, .deterministic = true}},
        {"tp2 sp dp2 zero3", {.tp = 2, .dp = 2, .sp = true, .zero = 3, .deterministic = true}},
        {"tp2 sp dp2 ep2 zero1", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 1, .deterministic = true}},
        {"tp2 sp dp2 ep2 zero2", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 2, .deterministic = true}},
        {"tp2 sp dp2 ep2 zero3 overlap", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 3, .overlap = true,
                                          .deterministic = true}},
        {"tp2 sp pp2 zero3", {.tp = 2, .pp = 2, .sp = true, .zero = 3, .deterministic = true}},
    };
    expect_bit_identical(&m, w, (tu_layout){.tp = 2, .sp = true, .deterministic = true}, layouts,
                         sizeof layouts / sizeof *layouts);
    free(w);
    tri_model_free(&m);
}

/* LAMB's trust ratios over the owned pieces: at tp 2 an expert part's slices are on every rank of the
 * stage (TP rank 1's too), each counted once in the whole-tensor sums (tri_trainer_norm_holder). */
Test(moe_tp, deterministic_lamb_zero_over_edp, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, "");
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 67);
    static const tu_named_layout layouts[] = {
        {"lamb tp2 sp dp2 zero1", {.tp = 2, .dp = 2, .sp = true, .zero = 1, .optimizer = TRI_OPT_LAMB,
                                   .deterministic = true}},
        {"lamb tp2 sp dp2 ep2 zero3", {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 3, .optimizer = TRI_OPT_LAMB,
                                       .deterministic = true}},
    };
    expect_bit_identical(&m, w, (tu_layout){.tp = 2, .sp = true, .optimizer = TRI_OPT_LAMB, .deterministic = true},
                         layouts, sizeof layouts / sizeof *layouts);
    free(w);
    tri_model_free(&m);
}

/* --bf16 at tp 2 SP (ep 1; ep > 1 with bf16 is piece C's): tracks fp32 one rank within
 * tests/test_mixtral.c's bf16 bounds (losses 2e-3 relative, first gradients 5e-2 of each tensor's
 * largest) on its batches (seed 61), and every bf16 parameter is its rounded master weight after each
 * update. The batches matter: bf16's rounding of the router's input can flip a near-tie of the top-2
 * and send a token to another expert, an O(1) change of that expert's gradient (seed 79: 0.49 on one
 * expert's w1, the same for bf16 on one rank: bf16 routing, not tp). */
Test(moe_tp, bf16_tp2_tracks_fp32, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, "");
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, SEED_BF16);
    tu_result fp, got;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 1}, &fp, w), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .sp = true, .bf16 = true}, &got, w), TRI_OK, "%s",
                 tri_error_message());
    char why[256];
    cr_expect(tu_moe_bf16_tracks("bf16 tp2 sp", &got, &fp, why, sizeof why), "bf16 tp2 sp: %s", why);
    tu_result_free(&fp);
    tu_result_free(&got);
    free(w);
    tri_model_free(&m);
}

/* DeepSeek-V3's expert bias moves by the kept counts summed over every rank that routed (now tp too):
 * the same integers as one rank's, so the same bias after each step, bit for bit. */
Test(moe_tp, expert_bias_counts_over_tp, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, "");
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 73);
    tri_moe_run bias = {.expert_bias = true, .bias_update_rate = 0.01f};
    tu_result ref, got;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.moe = bias}, &ref, w), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .dp = 2, .sp = true, .ep = 2, .moe = bias}, &got, w), TRI_OK,
                 "%s", tri_error_message());
    int n = ref.moe_layers * ref.moe_E, moved = 0;
    for (int s = 0; s < TU_BIAS_STEPS && s < STEPS; s++) {
        cr_expect(memcmp(got.moe_kept[s], ref.moe_kept[s], (size_t)n * sizeof **ref.moe_kept) == 0,
                  "step %d: kept counts differ from one rank's", s + 1);
        cr_expect(memcmp(got.moe_bias[s], ref.moe_bias[s], (size_t)n * sizeof **ref.moe_bias) == 0,
                  "step %d: the expert bias differs from one rank's", s + 1);
        for (int i = 0; i < n; i++)
            moved += ref.moe_bias[s][i] != 0.0f;
    }
    cr_expect_gt(moved, 0, "the bias never moved");
    tu_result_free(&ref);
    tu_result_free(&got);
    free(w);
    tri_model_free(&m);
}

Test(moe_tp, checkpoint_at_tp2_ep2_resumes_on_one_rank, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, "");
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, 100, 71);
    char *root = tu_ckpt_tmpdir("moe-tp");
    char full[4200], part[4200];
    snprintf(full, sizeof full, "%s/full", root);
    snprintf(part, sizeof part, "%s/part", root);
    tu_layout one = {0}, folded = {.tp = 2, .dp = 2, .sp = true, .ep = 2};
    tu_ckpt_run a = tu_moe_ckpt_run(&m, w, one, 6, NULL, full);
    cr_assert_eq(tu_ckpt_train(&a), TRI_OK, "%s", tri_error_message());
    tu_ckpt_run b1 = tu_moe_ckpt_run(&m, w, folded, 3, NULL, part);
    cr_assert_eq(tu_ckpt_train(&b1), TRI_OK, "%s", tri_error_message());
    /* every expert of a layer is in the checkpoint once, from whichever TP rank held it */
    for (int e = 0; e < 4; e++) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.1.block_sparse_moe.experts.%d.w2.weight", e);
        int64_t n = 0;
        float *x = tu_ckpt_tensor(part, TRI_CKPT_MODEL, -1, NULL, name, &n);
        cr_assert(x, "%s: %s", name, tri_error_message());
        cr_expect_eq(n, 64 * 64, "%s: %lld elements", name, (long long)n);
        free(x);
    }
    tu_ckpt_run b2 = tu_moe_ckpt_run(&m, w, one, 6, part, NULL);
    cr_assert_eq(tu_ckpt_train(&b2), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(b2.start, 3);
    const char *what = "saved at tp2 sp dp2 ep2, resumed on one rank";
    double worst = tu_moe_resume_diff(what, &b2, &a);
    cr_expect_lt(worst, 1e-4, "%s: steps 4-6 differ from the uninterrupted run's by %g", what, worst);
    tri_fs_remove_tree(root);
    free(root);
    free(w);
    tri_model_free(&m);
}

/* ZeRO 3 at tp 2 SP x dp 2 ep 2: the experts' weights and moments in slices over their edp pairs (each
 * stored by its owner, whichever TP rank), the rest over dp; resumed on one rank (ZeRO 0) and at tp 1
 * dp 2 ep 2 ZeRO 1 (other edp groups, other slices): steps 4-6 within the bounds above of one rank's
 * uninterrupted run. */
Test(moe_tp, checkpoint_at_tp2_ep2_zero3_resumes_elsewhere, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, "");
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, 100, 71);
    char *root = tu_ckpt_tmpdir("moe-tp-zero3");
    char full[4200], part[4200];
    snprintf(full, sizeof full, "%s/full", root);
    snprintf(part, sizeof part, "%s/part", root);
    tu_layout one = {0}, folded = {.tp = 2, .dp = 2, .sp = true, .ep = 2, .zero = 3};
    tu_ckpt_run a = tu_moe_ckpt_run(&m, w, one, 6, NULL, full);
    cr_assert_eq(tu_ckpt_train(&a), TRI_OK, "%s", tri_error_message());
    tu_ckpt_run b1 = tu_moe_ckpt_run(&m, w, folded, 3, NULL, part);
    cr_assert_eq(tu_ckpt_train(&b1), TRI_OK, "%s", tri_error_message());
    static const struct {
        const char *name;
        tu_layout l;
    } resumes[] = {{"one rank", {0}}, {"tp1 dp2 ep2 zero1", {.dp = 2, .ep = 2, .zero = 1}}};
    for (size_t k = 0; k < sizeof resumes / sizeof *resumes; k++) {
        tu_ckpt_run b2 = tu_moe_ckpt_run(&m, w, resumes[k].l, 6, part, NULL);
        cr_assert_eq(tu_ckpt_train(&b2), TRI_OK, "%s: %s", resumes[k].name, tri_error_message());
        cr_expect_eq(b2.start, 3);
        double worst = tu_moe_resume_diff(resumes[k].name, &b2, &a);
        cr_expect_lt(worst, 1e-4, "saved at tp2 sp dp2 ep2 zero3, resumed at %s: steps 4-6 differ by %g",
                     resumes[k].name, worst);
    }
    tri_fs_remove_tree(root);
    free(root);
    free(w);
    tri_model_free(&m);
}

static void expect_refused(const tri_model *m, tu_layout l, const char *want)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 53);
    tu_result got;
    cr_expect_eq(tu_moe_run(m, &l, &got, w), TRI_EINVAL, "expected a refusal naming \"%s\"", want);
    cr_expect(strstr(tri_error_message(), want) != NULL, "got \"%s\", expected \"%s\"", tri_error_message(), want);
    free(w);
}

Test(moe_tp, refusals)
{
    tri_model m;
    make_tiny(&m, "");
    expect_refused(&m, (tu_layout){.tp = 2},
                   "--tensor-model-parallel-size 2 with a mixture-of-experts model (num_experts 4) needs "
                   "--sequence-parallel");
    expect_refused(&m, (tu_layout){.tp = 2, .sp = true, .dp = 1, .ep = 4},
                   "--expert-tensor-parallel-size 1 x --expert-model-parallel-size 4 = 4 does not divide a pipeline "
                   "stage's tp x dp = 2 x 1 = 2 ranks");
    /* the experts reduce over tp x dp at ep 1 too: compression and local SGD code whole units over dp */
    tri_local_sgd_config local = {.steps = 2, .outer = TRI_OUTER_NESTEROV, .outer_lr = 0.7f, .outer_momentum = 0.9f};
    expect_refused(&m, (tu_layout){.tp = 2, .sp = true, .dp = 2, .local = local},
                   "--local-sgd-steps 2 with --expert-model-parallel-size 1 (--tensor-model-parallel-size 2)");
    tri_model_free(&m);
}
