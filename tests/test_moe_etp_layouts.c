/* tests/test_moe_etp_layouts.c - expert tensor parallelism in the whole model (docs/moe.md "Expert tensor
 * parallelism"; Megatron-Core's --expert-tensor-parallel-size and parallel folding, Liu et al. 2025):
 * the tiny Mixtral (4 layers, 4 experts, top-2, moe_intermediate_size 64, aux loss on) on thread ranks
 * (tu_run_model), each expert's SwiGLU split in etp slices of I / etp (gate_proj / w1 and up_proj / w3
 * rows, down_proj / w2 columns; the Hugging Face names and global shapes unchanged):
 *   tp 2 SP etp 2 (ep 1: the etp group is the TP pair, each routing its own 4 tokens),
 *   tp 2 SP x dp 2 etp 2 ep 2 (4 ranks: etp the TP pairs, ep across dp, edp 1),
 *   dp 4 etp 2 ep 2 (tp 1: etp and ep over the dp ranks),
 *   dp 2 etp 2 (tp 1, ep 1: the etp pair is the dp pair, so the gradient norm sums over the world),
 * at ZeRO 0, and at tp 1 with ZeRO 1-3 over the expert-data-parallel group (dp 4 etp 2 ep 2 ZeRO 1,
 * dp 4 etp 2 ZeRO 3, dp 4 etp 2 ZeRO 2 with both overlaps), against one rank.
 *
 * Bounds (as tests/test_moe_tp.c, whose reasoning carries over): 1e-5 relative on the first pass's loss
 * and every gradient, 1e-4 on the step losses, and each final weight after 4 AdamW steps within AdamW's
 * drift bound (tu_adamw_drift_bound at lr 1e-3: its normalised step turns a near-zero gradient's
 * rounding into up to a full step), with 1e-3 relative as a coarse check beside it (measured: 2.5e-4,
 * layer 3's o_proj at dp 4 etp 2 ep 2, 0.23% of the drift bound; tp 2 SP etp 2 4.7e-5). What etp adds to tp / dp's split sums: the down projection's sum over
 * I = 64 runs as etp partial sums of 32 terms added in etp order, and the input gradient's over 2I the
 * same; each a few ulps (u = 6e-8) of the terms' magnitudes per layer (tests/test_moe_etp.c bounds the
 * block's differences from float64: at most 1% of the first-order bound there), far below 1e-5; a slice
 * placed at the wrong offset, a missing partial sum, or an expert gradient reduced over the wrong group
 * changes outputs or gradients by O(1) relative (the block test fails on a dropped partial).
 *
 * Deterministic mode: the promise of the dense tp layouts (bit-identical across layouts of the same tp):
 * tp 2 SP x dp 2 etp 2 ep 2 and tp 2 SP x pp 2 etp 2 with full recomputation are bit-identical to tp 2 SP
 * etp 2 (ep 1): every expert GEMM batch is one sequence shard's rows for one slice in each, the partial
 * sums are added in etp order, the gradients are exact fixed-point sums; so are tp 2 SP x dp 2 etp 2
 * ZeRO 1 and tp 2 SP x dp 2 etp 2 ep 2 ZeRO 3 with both overlaps (the slices sharded over the
 * expert-data-parallel group of tp dp / (etp ep) ranks). At tp 1: dp 4 etp 2 ep 2 ZeRO 1 and
 * dp 4 etp 2 ZeRO 3 with both overlaps are bit-identical to dp 2 etp 2 (ZeRO 0). The same under --bf16 (tp 2 SP
 * x dp 2 etp 2 ep 2 against tp 2 SP etp 2), whose losses stay within 2e-3 of the fp32 run's.
 *
 * Checkpoints: saved at tp 2 SP etp 2 after 3 steps (each rank stores its slices as boxes of the Hugging
 * Face tensors), resumed on one rank (etp 1: the slices joined by name and box) to step 6 within 1e-4
 * of the uninterrupted one-rank run. Refusal: etp x ep not dividing tp x dp. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "engine/core/status.h"
#include "models/llama.h"
#include "models/model.h"
#include "tests/ckpt_harness.h"
#include "tests/harness.h"
#include "tests/moe_layouts.h"
#include "tests/testutil.h"

enum { B = TU_MOE_B, T = TU_MOE_T, GLOBAL = TU_MOE_GLOBAL, STEPS = TU_MOE_STEPS };

static void make_tiny(tri_model *m)
{
    cr_assert_eq(tu_moe_tiny(m, ""), TRI_OK, "%s", tri_error_message());
}

Test(moe_etp_layouts, expert_tensor_parallel_matches_one_rank, .timeout = 300)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    static const tu_named_layout layouts[] = {
        {"tp2 sp etp2", {.tp = 2, .sp = true, .etp = 2}},
        {"tp2 sp dp2 etp2 ep2", {.tp = 2, .dp = 2, .sp = true, .etp = 2, .ep = 2}},
        {"dp4 etp2 ep2", {.dp = 4, .etp = 2, .ep = 2}},
        {"dp2 etp2", {.dp = 2, .etp = 2}},
        {"dp4 etp2 ep2 zero1", {.dp = 4, .etp = 2, .ep = 2, .zero = 1}},
        {"dp4 etp2 zero3", {.dp = 4, .etp = 2, .zero = 3}},
        {"dp4 etp2 zero2 overlap", {.dp = 4, .etp = 2, .zero = 2, .overlap = true}},
    };
    tu_result ref, got;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 1}, &ref, w), TRI_OK, "%s", tri_error_message());
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        const char *name = layouts[k].name;
        cr_assert_eq(tu_moe_run(&m, &layouts[k].l, &got, w), TRI_OK, "%s: %s", name, tri_error_message());
        tu_moe_diff d;
        char why[256];
        cr_assert_eq(tu_moe_diff_of(&got, &ref, &d), TRI_OK, "%s: %s", name, tri_error_message());
        cr_expect(tu_moe_close(&d, 1e-3, why, sizeof why), "%s against one rank: %s", name, why);
        tu_moe_diff_log(name, &d);
        int counts = ref.moe_layers * 2 * ref.moe_E;
        cr_expect(counts > 0 && memcmp(got.moe_sums, ref.moe_sums, (size_t)counts * sizeof *ref.moe_sums) == 0,
                  "%s: the routed and kept counts differ from one rank's", name);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

static void expect_identical(const tu_result *a, const tu_result *b, const char *name)
{
    char why[256];
    cr_expect(tu_moe_identical(name, a, b, why, sizeof why), "%s: %s", name, why);
}

Test(moe_etp_layouts, deterministic_bit_identical_at_the_same_etp, .timeout = 300)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    tu_result ref, got;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .sp = true, .etp = 2, .deterministic = true}, &ref, w), TRI_OK,
                 "%s", tri_error_message());
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .dp = 2, .sp = true, .etp = 2, .ep = 2, .deterministic = true},
                            &got, w),
                 TRI_OK, "%s", tri_error_message());
    expect_identical(&got, &ref, "tp2 sp dp2 etp2 ep2");
    tu_result_free(&got);
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .pp = 2, .sp = true, .etp = 2, .deterministic = true,
                                             .recompute = TRI_RECOMPUTE_FULL},
                            &got, w),
                 TRI_OK, "%s", tri_error_message());
    expect_identical(&got, &ref, "tp2 sp pp2 etp2 full recompute");
    tu_result_free(&got);
    /* at tp 2: ZeRO over the expert-data-parallel group (tp dp / (etp ep) ranks) with the slices */
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .dp = 2, .sp = true, .etp = 2, .zero = 1, .deterministic = true},
                            &got, w),
                 TRI_OK, "%s", tri_error_message());
    expect_identical(&got, &ref, "tp2 sp dp2 etp2 zero1");
    tu_result_free(&got);
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .dp = 2, .sp = true, .etp = 2, .ep = 2, .zero = 3,
                                             .overlap = true, .deterministic = true},
                            &got, w),
                 TRI_OK, "%s", tri_error_message());
    expect_identical(&got, &ref, "tp2 sp dp2 etp2 ep2 zero3 overlap");
    tu_result_free(&got);
    tu_result_free(&ref);
    /* at tp 1: ZeRO over the expert-data-parallel group with the slices (1 and 3, with the overlaps) */
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.dp = 2, .etp = 2, .deterministic = true}, &ref, w), TRI_OK, "%s",
                 tri_error_message());
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.dp = 4, .etp = 2, .ep = 2, .zero = 1, .deterministic = true}, &got, w),
                 TRI_OK, "%s", tri_error_message());
    expect_identical(&got, &ref, "dp4 etp2 ep2 zero1");
    tu_result_free(&got);
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.dp = 4, .etp = 2, .zero = 3, .overlap = true, .deterministic = true},
                            &got, w),
                 TRI_OK, "%s", tri_error_message());
    expect_identical(&got, &ref, "dp4 etp2 zero3 overlap");
    tu_result_free(&got);
    tu_result_free(&ref);
    /* bf16 (the gathered rows, the slices' outputs and the partial sums in bf16): the same promise */
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .sp = true, .etp = 2, .deterministic = true, .bf16 = true}, &ref,
                            w),
                 TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .dp = 2, .sp = true, .etp = 2, .ep = 2, .deterministic = true,
                                             .bf16 = true},
                            &got, w),
                 TRI_OK, "%s", tri_error_message());
    expect_identical(&got, &ref, "bf16 tp2 sp dp2 etp2 ep2");
    /* and within bf16's rounding of the fp32 run at the same layout: losses within 2e-3 relative
     * (tests/test_bf16.c's bound, which tests/test_mixtral.c holds a bf16 Mixtral to) */
    tu_result f32;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .sp = true, .etp = 2}, &f32, w), TRI_OK, "%s",
                 tri_error_message());
    for (int s = 0; s < STEPS; s++)
        cr_expect_lt(fabs(ref.losses[s] - f32.losses[s]) / f32.losses[s], 2e-3, "bf16 step %d loss %g vs fp32 %g",
                     s + 1, ref.losses[s], f32.losses[s]);
    cr_expect(ref.losses[0] != f32.losses[0], "the bf16 run gave the fp32 loss: bf16 not in effect");
    tu_result_free(&f32);
    tu_result_free(&got);
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

Test(moe_etp_layouts, checkpoint_at_etp2_resumes_on_one_rank, .timeout = 300)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, 100, 71);
    char *root = tu_ckpt_tmpdir("moe-etp");
    char full[4200], part[4200];
    snprintf(full, sizeof full, "%s/full", root);
    snprintf(part, sizeof part, "%s/part", root);
    tu_layout one = {0}, sliced = {.tp = 2, .sp = true, .etp = 2};
    tu_ckpt_run a = tu_moe_ckpt_run(&m, w, one, 6, NULL, full);
    cr_assert_eq(tu_ckpt_train(&a), TRI_OK, "%s", tri_error_message());
    tu_ckpt_run b1 = tu_moe_ckpt_run(&m, w, sliced, 3, NULL, part);
    cr_assert_eq(tu_ckpt_train(&b1), TRI_OK, "%s", tri_error_message());
    tu_ckpt_run b2 = tu_moe_ckpt_run(&m, w, one, 6, part, NULL);
    cr_assert_eq(tu_ckpt_train(&b2), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(b2.start, 3);
    const char *what = "saved at tp2 sp etp2, resumed on one rank";
    double worst = tu_moe_resume_diff(what, &b2, &a);
    cr_expect_lt(worst, 1e-4, "%s: steps 4-6 differ from the uninterrupted run's by %g", what, worst);
    tri_fs_remove_tree(root);
    free(root);
    free(w);
    tri_model_free(&m);
}

Test(moe_etp_layouts, refusals)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    tu_result r;
    /* etp x ep = 4 does not divide a stage of tp 2 x dp 1 */
    cr_expect_eq(tu_moe_run(&m, &(tu_layout){.tp = 2, .sp = true, .etp = 2, .ep = 2}, &r, w), TRI_EINVAL);
    free(w);
    tri_model_free(&m);
}
