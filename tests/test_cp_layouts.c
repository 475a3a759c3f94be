/* tests/test_cp_layouts.c - context parallelism in the training engine (docs/context_parallel.md, "cp in
 * the training engine"): GPT-2 and the tiny Llama (grouped-query attention) train on thread ranks
 * (tests/harness.h tu_run_model) with each sequence cut in 2 cp chunks (cp rank i: chunks i and
 * 2cp-1-i), against one rank on the same global batches:
 *   cp 2, cp 4, cp 2 x tp 2 with sequence parallelism, cp 2 x pp 2 (1F1B), cp 2 x dp 2 at ZeRO 3, cp 2
 *   with full recomputation (the block's forward, cp attention included, again in the backward),
 * with --cp-comm-type all_gather (layers/cp_attention.h).
 *
 * What must hold and why (the bounds are those of the other layout tests, derived there and here):
 *  - the first pass's loss and every gradient within 1e-5 relative (max |a - b| / max |b| per tensor)
 *    of one rank's. Under cp a rank's row-local work is the same arithmetic on fewer rows; what changes
 *    is the order of fp32 sums: a weight gradient is two GEMMs over T / cp rows each summed over dp x cp
 *    (instead of one over T rows), and the all_gather backward's dk|dv are cp partials reduce-scattered
 *    (layers/cp_attention.h). Each is a few ulps (u = 6e-8) of the terms' magnitude per layer; over 4 layers
 *    and two passes that stays below 1e-6 relative. What cp gets wrong instead is O(1): a row at the wrong
 *    position (a wrong chunk order moves 64 rows' position embeddings or rotary angles), a loss scaled by
 *    the local instead of the global token count (x cp), a gradient not summed over the cp ranks (x 1/cp
 *    of the rows), keys of another rank's chunk not seen or seen acausally; each changes the loss or
 *    gradients by 1e-4 or more (checked by hand at cp 2 on GPT-2: loading rows [i T_l, (i+1) T_l) instead of
 *    chunks i and 2cp-1-i moves the first loss by 4.1e-4 relative and the gradients by 0.16 to 1.1;
 *    building the chunks on dp_comm instead of dp x cp moves the gradients by 0.33 to 0.99);
 *  - the losses of 3 AdamW steps within 1e-4 relative, and every final weight element within AdamW's
 *    drift bound (tu_adamw_drift_ratio <= 1: a near-zero gradient whose sign flips with the sum order
 *    moves a weight by up to a whole normalised step, which no tighter bound can exclude);
 *  - deterministic mode: bit-identical (first loss, step losses, norms, final weights) to the run at the
 *    same tp without cp - cp 2 and cp 4 alone, cp 2 with tp 2 (with and without sequence parallelism),
 *    with pp 2, with dp 2 at ZeRO 0-3 (ZeRO 2 with overlapped reductions), and with --cp-comm-type p2p -
 *    because nothing a rank computes
 *    depends on how many rows it holds: every matmul runs its rows in chunks of 64 (the same GEMM shape
 *    in every layout), every parameter gradient is added exactly (int64 fixed point) one 64-row chunk of
 *    positions at a time (engine/device/ops/exact_grads.c), the attention's exact backward gathers the
 *    whole sequence (layers/cp_attention.h), and the chunks are whole 64-row pieces of one sequence's
 *    positions at every cp (the validator's rule). Checked by hand: adding a pass's weight gradient
 *    rounded once (the old rule) moves the cp 2 step losses by 5e-10 (GPT-2) and 2.7e-9 (Llama)
 *    relative; running the GEMMs over a rank's T / cp rows at once moves the first loss by 4.8e-9
 *    under OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE=Haswell; not under SkylakeX's). The cases pass
 *    with OPENBLAS_CORETYPE SkylakeX, Haswell, Zen, Sandybridge, Nehalem and Prescott. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/gpt.h"
#include "models/model.h"
#include "tests/cp_models.h"
#include "tests/harness.h"

/* T 256: cp 2 chunks of 64 rows (the fused attention's tile, the validator's rule); cp 4 needs T 512 */
enum { B = 1, GLOBAL = 2, STEPS = 3, V = 100 };

/* check(m) on the small GPT-2 (llama false) or the tiny Llama (tests/cp_models.h) */
static void on_model(bool llama, void (*check)(const tri_model *m))
{
    cr_assert_eq(tu_on_cp_model(llama, check), TRI_OK, "%s", tri_error_message());
}

static void run(const tri_model *m, int64_t T, tu_layout l, const int32_t *w, tu_result *r)
{
    int dp = l.dp > 0 ? l.dp : 1;
    l.n_micro = GLOBAL / (B * dp);
    cr_assert_eq(tu_run_model(m, B, T, &l, w, STEPS, r), TRI_OK, "%s", tri_error_message());
}

static void expect_close(const tu_result *ref, const tu_result *got, const char *name)
{
    tu_result_gap g;
    cr_assert_eq(tu_result_gap_of(ref, got, V, 1e-3, &g), TRI_OK, "%s: %s", name, tri_error_message());
    cr_expect_lt(g.loss, 1e-5, "%s: loss %.9g vs one rank's %.9g", name, got->grad_loss, ref->grad_loss);
    cr_expect_lt(g.grad, 1e-5, "%s: gradient of %s differs from one rank's by %g", name, ref->names[g.grad_at], g.grad);
    cr_expect_leq(g.drift, 1.0, "%s: final %s beyond AdamW's drift bound (ratio %g)", name, ref->names[g.drift_at],
                  g.drift);
    cr_expect_lt(g.step, 1e-4, "%s: step %d loss %.9g vs one rank's %.9g", name, g.step_at + 1, got->losses[g.step_at],
                 ref->losses[g.step_at]);
    cr_log_info("%s: loss diff %.2g, max gradient diff %.2g (%s), max step-loss diff %.2g, weight drift ratio %.2g",
                name, g.loss, g.grad, ref->names[g.grad_at], g.step, g.drift);
}

static void expect_same(const tu_result *a, const tu_result *b, const char *name)
{
    char why[256];
    cr_expect(a->grad_loss == b->grad_loss, "%s: first loss %.17g vs %.17g", name, a->grad_loss, b->grad_loss);
    cr_expect(tu_results_same(a, b, V, why, sizeof why), "%s: %s", name, why);
}

typedef struct named {
    const char *name;
    int64_t T;
    tu_layout l;
} named;

static const named LAYOUTS[] = {
    {"cp 2", 256, {.cp = 2}},
    {"cp 4", 512, {.cp = 4}},
    {"cp 2 x tp 2 sp", 256, {.cp = 2, .tp = 2, .sp = true}},
    {"cp 2 x pp 2", 256, {.cp = 2, .pp = 2}},
    {"cp 2 x dp 2 ZeRO 3", 256, {.cp = 2, .dp = 2, .zero = 3}},
    {"cp 2 full recomputation", 256, {.cp = 2, .recompute = TRI_RECOMPUTE_FULL}},
};

static void close_to_one_rank(const tri_model *m)
{
    int32_t *w256 = tu_make_windows((int64_t)STEPS * GLOBAL, 256, V, 71);
    int32_t *w512 = tu_make_windows((int64_t)STEPS * GLOBAL, 512, V, 71);
    tu_result ref[2], got;
    run(m, 256, (tu_layout){0}, w256, &ref[0]);
    run(m, 512, (tu_layout){0}, w512, &ref[1]);
    for (size_t k = 0; k < sizeof LAYOUTS / sizeof *LAYOUTS; k++) {
        bool long_seq = LAYOUTS[k].T == 512;
        run(m, LAYOUTS[k].T, LAYOUTS[k].l, long_seq ? w512 : w256, &got);
        expect_close(&ref[long_seq], &got, LAYOUTS[k].name);
        tu_result_free(&got);
    }
    tu_result_free(&ref[0]);
    tu_result_free(&ref[1]);
    free(w256);
    free(w512);
}

Test(cp_layouts, gpt2_matches_one_rank, .timeout = 300)
{
    on_model(false, close_to_one_rank);
}

Test(cp_layouts, llama_gqa_matches_one_rank, .timeout = 300)
{
    on_model(true, close_to_one_rank);
}

/* Deterministic mode: cp is invisible, alone and composed (the same bits as without cp at the same tp). */
static void deterministic_as_without_cp(const tri_model *m)
{
    int32_t *w256 = tu_make_windows((int64_t)STEPS * GLOBAL, 256, V, 73);
    int32_t *w512 = tu_make_windows((int64_t)STEPS * GLOBAL, 512, V, 73);
    /* the runs without cp each case is compared with */
    const named refs[] = {
        {"deterministic one rank T 256", 256, {.deterministic = true}},
        {"deterministic one rank T 512", 512, {.deterministic = true}},
        {"deterministic tp 2 sp", 256, {.tp = 2, .sp = true, .deterministic = true}},
        {"deterministic tp 2", 256, {.tp = 2, .deterministic = true}},
    };
    const struct {
        named l;
        int ref;
    } cases[] = {
        {{"deterministic cp 2", 256, {.cp = 2, .deterministic = true}}, 0},
        {{"deterministic cp 2 p2p", 256, {.cp = 2, .cp_comm_type = "p2p", .deterministic = true}}, 0},
        {{"deterministic cp 2 x dp 2 ZeRO 3", 256, {.cp = 2, .dp = 2, .zero = 3, .deterministic = true}}, 0},
        {{"deterministic cp 2 x dp 2 ZeRO 0", 256, {.cp = 2, .dp = 2, .deterministic = true}}, 0},
        {{"deterministic cp 2 x dp 2 ZeRO 1", 256, {.cp = 2, .dp = 2, .zero = 1, .deterministic = true}}, 0},
        {{"deterministic cp 2 x dp 2 ZeRO 2 overlapped", 256,
          {.cp = 2, .dp = 2, .zero = 2, .overlap = true, .deterministic = true}}, 0},
        {{"deterministic cp 2 x pp 2", 256, {.cp = 2, .pp = 2, .deterministic = true}}, 0},
        {{"deterministic cp 4", 512, {.cp = 4, .deterministic = true}}, 1},
        {{"deterministic cp 2 x tp 2 sp", 256, {.cp = 2, .tp = 2, .sp = true, .deterministic = true}}, 2},
        {{"deterministic cp 2 x tp 2", 256, {.cp = 2, .tp = 2, .deterministic = true}}, 3},
    };
    tu_result ref[4], got;
    for (int r = 0; r < 4; r++)
        run(m, refs[r].T, refs[r].l, refs[r].T == 512 ? w512 : w256, &ref[r]);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        run(m, cases[k].l.T, cases[k].l.l, cases[k].l.T == 512 ? w512 : w256, &got);
        expect_same(&ref[cases[k].ref], &got, cases[k].l.name);
        tu_result_free(&got);
    }
    /* and one rank's run without deterministic mode within the bounds above */
    tu_result plain;
    run(m, 256, (tu_layout){0}, w256, &plain);
    expect_close(&plain, &ref[0], "deterministic vs plain one rank");
    tu_result_free(&plain);
    for (int r = 0; r < 4; r++)
        tu_result_free(&ref[r]);
    free(w256);
    free(w512);
}

Test(cp_layouts, gpt2_deterministic_as_without_cp, .timeout = 300)
{
    on_model(false, deterministic_as_without_cp);
}

Test(cp_layouts, llama_deterministic_as_without_cp, .timeout = 300)
{
    on_model(true, deterministic_as_without_cp);
}

/* A mixture of experts composes: the MoE block is row-local, its experts fold cp into the
 * expert-data-parallel group (edp = tp cp dp / (etp ep), Megatron-Core's folding). The tiny Mixtral (4
 * experts, top-2, auxiliary loss on) at cp 2 with ep 1 (every rank all experts, their gradients over
 * dp x cp), ep 2 (each cp rank 2 experts, its tokens exchanged over the ep group) and tp 2 SP (the aux
 * loss's group tp x cp), against one rank within the bounds above: the routing is the same decisions on
 * the same rows, and the aux loss takes its counts over the micro-batch's tp x cp ranks and weighs as
 * one micro-batch's (checked by hand: each cp rank's aux loss over its own chunks' counts moves the
 * router's gradient by 2.2e-2 relative). */
Test(cp_layouts, mixtral_matches_one_rank, .timeout = 300)
{
    tri_model m;
    const char *json = "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 64, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2, "
                       "\"vocab_size\": 100, \"max_position_embeddings\": 256, \"num_local_experts\": 4, "
                       "\"num_experts_per_tok\": 2, \"output_router_logits\": true}";
    cr_assert_eq(tri_model_parse(&m, json, "tiny-mixtral"), TRI_OK, "%s", tri_error_message());
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, 256, V, 79);
    tu_result ref, got;
    run(&m, 256, (tu_layout){0}, w, &ref);
    const named moe[] = {
        {"mixtral cp 2", 256, {.cp = 2}},
        {"mixtral cp 2 ep 2", 256, {.cp = 2, .ep = 2}},
        {"mixtral cp 2 x tp 2 sp", 256, {.cp = 2, .tp = 2, .sp = true}},
    };
    for (size_t k = 0; k < sizeof moe / sizeof *moe; k++) {
        run(&m, 256, moe[k].l, w, &got);
        expect_close(&ref, &got, moe[k].name);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}
