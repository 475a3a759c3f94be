/* tests/test_moe_ep_layouts.c - expert parallelism in the engine (docs/moe.md "Expert parallelism in
 * the engine"): the tiny Mixtral (4 layers, 4 experts, top-2) trained on thread ranks with
 * --expert-model-parallel-size against one rank (tests/test_mixtral.c's layout pattern, tu_run_model):
 * ep 2 of dp 2, ep 4 of dp 4, ep 2 of dp 4 (edp 2: the experts' gradients reduce over two replicas)
 * and ep 2 with pp 2, at ZeRO 0; and ZeRO 1, 2 and 3 over the expert-data-parallel group (dp 2 ep 2,
 * dp 4 ep 2 at each stage, pp 2 x dp 2 ep 2 at stage 3, and dp 4 ep 2 at stages 1 and 3 with
 * --overlap-grad-reduce and --overlap-param-gather: the experts' parts of each block unit are
 * reduce-scattered, updated and all-gathered over edp, the rest over dp). Each ep rank lists only its experts, by their Hugging Face names, and
 * the harness collects every expert from its holder, so the comparison is tensor by tensor and name by
 * name. Bound: as the dense layouts (tests/test_mixtral.c), 1e-5 relative on the first pass's
 * gradients and 1e-4 on the step losses: the data-parallel all-reduce sums the replicas' fp32
 * gradients in another grouping than one rank's micro-batch accumulation (each a few ulps, u = 6e-8,
 * of the terms' magnitudes, over 4 micro-batch terms and 4 layers: far below 1e-5), while a token
 * sent to the wrong rank, a wrong expert slice or a gradient reduced over the wrong group changes the
 * gradients by O(1) (reducing the experts over dp instead of edp fails it). In deterministic mode
 * every layout above (and pp 2 x dp 2 ep 2 with full recomputation) is bit-identical to one rank, and
 * so is LAMB (its trust ratios from the owned pieces) at dp 4 ep 2 ZeRO 1 and dp 2 ep 2 ZeRO 3, and
 * the interleaved schedule (two model chunks a rank) at pp 2 x dp 2 ep 2 ZeRO 2; dp 2 ep 2 and
 * pp 2 x dp 2 ep 2 under --bf16 are bit-identical to one rank's bf16 run.
 * The refusal: gradient compression with ep names both. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/train/optimizer.h"
#include "models/llama.h"
#include "models/model.h"
#include "tests/harness.h"
#include "tests/moe_layouts.h"
#include "tests/testutil.h"

enum { B = TU_MOE_B, T = TU_MOE_T, GLOBAL = TU_MOE_GLOBAL, STEPS = TU_MOE_STEPS };

static void make_tiny(tri_model *m)
{
    cr_assert_eq(tu_moe_tiny(m, ""), TRI_OK, "%s", tri_error_message());
}

Test(moe_ep_layouts, expert_parallel_matches_one_rank, .timeout = 300)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 53);
    static const struct { const char *name; tu_layout l; } layouts[] = {
        {"dp2 ep2", {.dp = 2, .ep = 2}},
        {"dp4 ep4", {.dp = 4, .ep = 4}},
        {"dp4 ep2", {.dp = 4, .ep = 2}},
        {"pp2 dp2 ep2", {.pp = 2, .dp = 2, .ep = 2}},
        {"dp2 ep2 zero1", {.dp = 2, .ep = 2, .zero = 1}},
        {"dp4 ep2 zero1", {.dp = 4, .ep = 2, .zero = 1}},
        {"dp2 ep2 zero2", {.dp = 2, .ep = 2, .zero = 2}},
        {"dp4 ep2 zero2", {.dp = 4, .ep = 2, .zero = 2}},
        {"dp2 ep2 zero3", {.dp = 2, .ep = 2, .zero = 3}},
        {"dp4 ep2 zero3", {.dp = 4, .ep = 2, .zero = 3}},
        {"pp2 dp2 ep2 zero3", {.pp = 2, .dp = 2, .ep = 2, .zero = 3}},
        {"dp4 ep2 zero1 overlap", {.dp = 4, .ep = 2, .zero = 1, .overlap = true}},
        {"dp4 ep2 zero3 overlap", {.dp = 4, .ep = 2, .zero = 3, .overlap = true}},
    };
    tu_result ref, got;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.tp = 1}, &ref, w), TRI_OK, "%s", tri_error_message());
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        cr_assert_eq(tu_moe_run(&m, &layouts[k].l, &got, w), TRI_OK, "%s: %s", layouts[k].name, tri_error_message());
        const char *name = layouts[k].name;
        tu_moe_diff d;
        char why[256];
        cr_assert_eq(tu_moe_diff_of(&got, &ref, &d), TRI_OK, "%s: %s", name, tri_error_message());
        cr_expect(tu_moe_close(&d, 1e-4, why, sizeof why), "%s against one rank: %s", name, why);
        tu_moe_diff_log(name, &d);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

Test(moe_ep_layouts, compression_with_ep_refused)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 53);
    tu_result got;
    tu_layout l = {.dp = 2, .ep = 2, .zero = 1, .compression = tri_compression_defaults()};
    l.compression.kind = TRI_COMPRESS_1BIT;
    cr_assert_eq(tu_moe_run(&m, &l, &got, w), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--expert-model-parallel-size 2 with gradient compression") != NULL, "%s",
              tri_error_message());
    free(w);
    tri_model_free(&m);
}

/* Runs layout l and expects it bit-identical to ref: the first pass's loss and gradients, every step's
 * loss and norm, the final weights. */
static void expect_bit_identical(const tri_model *m, const char *name, const tu_layout *l, const tu_result *ref,
                                 const int32_t *w)
{
    tu_result got;
    cr_assert_eq(tu_moe_run(m, l, &got, w), TRI_OK, "%s: %s", name, tri_error_message());
    char why[256];
    cr_expect(tu_moe_identical(name, &got, ref, why, sizeof why), "%s: %s", name, why);
    tu_result_free(&got);
}

/* Deterministic mode: bit-identical to one rank. The forward is one rank's bits (each expert's GEMM
 * batch is one source micro-batch's rows, tests/test_moe_ep.c); an expert weight's gradient is each
 * source's GEMM converted to fixed point and added exactly (layers/moe_ep.h tri_moe_ep_exact), the
 * sums one rank makes of its micro-batches' GEMMs; everything else is the dense layouts' exact path.
 * So the first pass's loss and gradients, every step's loss and norm, and the final weights are the
 * same bits. */
Test(moe_ep_layouts, deterministic_bit_identical, .timeout = 300)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 59);
    static const struct { const char *name; tu_layout l; } layouts[] = {
        {"dp2 ep2", {.dp = 2, .ep = 2, .deterministic = true}},
        {"dp4 ep4", {.dp = 4, .ep = 4, .deterministic = true}},
        {"dp4 ep2", {.dp = 4, .ep = 2, .deterministic = true}},
        {"pp2 dp2 ep2 recompute full", {.pp = 2, .dp = 2, .ep = 2, .recompute = TRI_RECOMPUTE_FULL,
                                        .deterministic = true}},
        {"dp2 ep2 zero1", {.dp = 2, .ep = 2, .zero = 1, .deterministic = true}},
        {"dp4 ep2 zero1", {.dp = 4, .ep = 2, .zero = 1, .deterministic = true}},
        {"dp2 ep2 zero2", {.dp = 2, .ep = 2, .zero = 2, .deterministic = true}},
        {"dp4 ep2 zero2", {.dp = 4, .ep = 2, .zero = 2, .deterministic = true}},
        {"dp2 ep2 zero3", {.dp = 2, .ep = 2, .zero = 3, .deterministic = true}},
        {"dp4 ep2 zero3", {.dp = 4, .ep = 2, .zero = 3, .deterministic = true}},
        {"pp2 dp2 ep2 zero3", {.pp = 2, .dp = 2, .ep = 2, .zero = 3, .deterministic = true}},
        {"dp4 ep2 zero2 overlap", {.dp = 4, .ep = 2, .zero = 2, .overlap = true, .deterministic = true}},
        {"dp4 ep2 zero3 overlap", {.dp = 4, .ep = 2, .zero = 3, .overlap = true, .deterministic = true}},
        {"pp2 interleaved dp2 ep2 zero2", {.pp = 2, .dp = 2, .ep = 2, .zero = 2, .schedule = "interleaved",
                                           .layers_per_virtual_stage = 1, .deterministic = true}},
    };
    tu_result ref;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.deterministic = true}, &ref, w), TRI_OK, "%s", tri_error_message());
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++)
        expect_bit_identical(&m, layouts[k].name, &layouts[k].l, &ref, w);
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

/* LAMB's trust ratios (engine/train/trust_ratio.c) take every tensor's weight and update norms from the
 * owned pieces: under ZeRO over edp an expert's pieces are its edp group's slices, so the ratios, and
 * with them the steps, stay one rank's bits. */
Test(moe_ep_layouts, deterministic_lamb_bit_identical, .timeout = 300)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    tu_result ref;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.deterministic = true, .optimizer = TRI_OPT_LAMB}, &ref, w), TRI_OK,
                 "%s", tri_error_message());
    expect_bit_identical(&m, "lamb dp4 ep2 zero1",
                         &(tu_layout){.dp = 4, .ep = 2, .zero = 1, .deterministic = true, .optimizer = TRI_OPT_LAMB},
                         &ref, w);
    expect_bit_identical(&m, "lamb dp2 ep2 zero3",
                         &(tu_layout){.dp = 2, .ep = 2, .zero = 3, .deterministic = true, .optimizer = TRI_OPT_LAMB},
                         &ref, w);
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

/* bf16 mixed precision (--bf16: bf16 activations and weight copies, fp32 gradients, master weights and
 * moments) under expert parallelism: the rows travel in bf16 (layers/moe_ep.h). In deterministic mode
 * the bf16 path is bit-identical to one rank's bf16 run for the same reasons as the fp32 path: each
 * expert's GEMM batch is one source micro-batch's bf16 rows (the same bits as one rank's), its weight
 * gradient goes through the fixed-point sums per source, and the rest is the dense layouts' exact
 * bf16 path. So the first pass's loss and gradients, the step losses and norms and the final (fp32
 * master) weights are the same bits. The bf16 run must differ from the fp32 one (it did round). */
Test(moe_ep_layouts, bf16_deterministic_bit_identical, .timeout = 300)
{
    tri_model m;
    make_tiny(&m);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    static const struct { const char *name; tu_layout l; } layouts[] = {
        {"bf16 dp2 ep2", {.dp = 2, .ep = 2, .deterministic = true, .bf16 = true}},
        {"bf16 pp2 dp2 ep2", {.pp = 2, .dp = 2, .ep = 2, .deterministic = true, .bf16 = true}},
    };
    tu_result ref, got, f32;
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.deterministic = true, .bf16 = true}, &ref, w), TRI_OK, "%s",
                 tri_error_message());
    cr_assert_eq(tu_moe_run(&m, &(tu_layout){.deterministic = true}, &f32, w), TRI_OK, "%s", tri_error_message());
    cr_assert(ref.grad_loss != f32.grad_loss, "the bf16 run's loss %.17g is the fp32 run's: nothing rounded",
              ref.grad_loss);
    tu_result_free(&f32);
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        const char *name = layouts[k].name;
        cr_assert_eq(tu_moe_run(&m, &layouts[k].l, &got, w), TRI_OK, "%s: %s", name, tri_error_message());
        char why[256];
        cr_expect(tu_moe_identical(name, &got, &ref, why, sizeof why), "%s: %s", name, why);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}
