/* tests/test_cp_compose.c - context parallelism composed with what issue 34 item 3 lists beside tp, dp,
 * ZeRO and 1F1B (those are in tests/test_cp_layouts.c): the GPipe and interleaved pipeline schedules,
 * bf16 mixed precision, and the staged comm of ranks that share a GPU (engine/train/comm_staged.h).
 * GPT-2 and the tiny Llama (grouped-query attention) train on thread ranks (tests/harness.h
 * tu_run_model), each sequence cut in 2 cp chunks (docs/context_parallel.md).
 *
 * What must hold and why:
 *  - cp 2 x pp 2 with GPipe and with the interleaved 1F1B (two virtual stages of one layer a rank)
 *    against one rank, within test_cp_layouts.c's bounds (derived there: 1e-5 relative for the first
 *    loss and every gradient, 1e-4 for the step losses, AdamW's drift bound for the final weights). A
 *    schedule only reorders whole micro-batches' forward and backward on a stage, the same arithmetic;
 *    what it could get wrong under cp is O(1) (a virtual stage's layers built without the cp group or
 *    the chunks' positions: the attention of that stage would see only its own rows);
 *  - bf16 at cp 2 and cp 2 x tp 2 with sequence parallelism against the one-rank bf16 run, within the
 *    bounds tests/test_bf16.c derives for the layouts that change the same sums:
 *    cp alone changes only fp32 sums (the weight gradients' GEMMs over T / cp rows summed over dp x cp,
 *    the all_gather backward's fp32 dk|dv partials reduce-scattered; the gathered bf16 keys and values
 *    are copies), as data parallelism does: test_bf16's DP bounds (first gradients 1e-5, step losses
 *    1e-4). The difference of an fp32 order can still cross a bf16 rounding boundary where an fp32 sum
 *    is stored as bf16 (dk|dv), which moves that element by 2^-8 relative; those elements are few and
 *    each weight gradient sums T of them, so the first gradients stay at fp32-sum noise
 *    (measured below). With tp 2 the row-parallel partial sums are rounded to bf16 before the
 *    reduction: test_bf16's TP bounds (losses 1e-3, gradients 5e-2);
 *  - the staged comm (device buffers through host memory, forwarded to the inner thread comm)
 *    bit-identical to the plain thread comm at cp 2 for both --cp-comm-type all_gather (collectives)
 *    and p2p (the ring's p2p_start / wait): comm_staged.h promises the inner comm's results bit for bit,
 *    and every other operation of a rank is the same. Losses, gradient norms, first gradients and final
 *    weights are compared; the result records that the cp comm did take device buffers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/gpt.h"
#include "models/model.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/simulate.h"
#include "tests/cp_models.h"
#include "tests/harness.h"

/* T 256: cp 2 chunks of 64 rows (the fused attention's tile). GLOBAL 2: pp 2 runs 2 micro-batches, as
 * many as stages (the interleaved schedule's minimum). */
enum { B = 1, T = 256, GLOBAL = 2, STEPS = 3, V = 100, LAYERS = 4 /* both models' */ };

/* check(m) on the small GPT-2 (llama false) or the tiny Llama (tests/cp_models.h) */
static void on_model(bool llama, void (*check)(const tri_model *m))
{
    cr_assert_eq(tu_on_cp_model(llama, check), TRI_OK, "%s", tri_error_message());
}

static void run(const tri_model *m, tu_layout l, const int32_t *w, tu_result *r)
{
    int dp = l.dp > 0 ? l.dp : 1;
    l.n_micro = GLOBAL / (B * dp);
    cr_assert_eq(tu_run_model(m, B, T, &l, w, STEPS, r), TRI_OK, "%s", tri_error_message());
}

/* bounds: the first pass's loss and gradients, the step losses (relative); weights: AdamW's drift */
typedef struct bound {
    double loss, grad, step;
} bound;

/* test_cp_layouts.c's fp32 bounds */
static const bound FP32 = {.loss = 1e-5, .grad = 1e-5, .step = 1e-4};
/* bf16, all_gather: the forward is one rank's (the gathered bf16 keys and values are copies: the
 * first loss stays at fp32 noise, 1e-5) and the backward reorders fp32 sums only (test_bf16.c's DP:
 * step losses 1e-4), but the reordered fp32 dk|dv is stored as bf16 (dqkv), where a value near a
 * rounding boundary moves by one bf16 ulp (2^-8 relative); a weight gradient sums the B T = 256 rows
 * of such values, so each flipped row moves it by up to 2^-8 / 256 = 1.5e-5 of its magnitude: 1e-4
 * allows about 6 flips aligned in one tensor (measured 5.1e-7 GPT-2, 8.5e-6 Llama) */
static const bound BF16_GATHER = {.loss = 1e-5, .grad = 1e-4, .step = 1e-4};
/* bf16-rounded partial sums, test_bf16.c's TP bound: tensor parallelism's row-parallel partials, and
 * the p2p ring's, whose block outputs (o2) are bf16 before the log-sum-exp merge into the bf16 output
 * and whose dq accumulates block by block in bf16 (layers/cp_attention.c) - the same kind of rounding
 * at each of the cp steps (measured: ring 6.9e-3 to 1.5e-2 gradients, 5e-6 losses) */
static const bound BF16_TP = {.loss = 1e-3, .grad = 5e-2, .step = 1e-3};

static void expect_within(const tu_result *ref, const tu_result *got, bound b, const char *name)
{
    tu_result_gap g;
    cr_assert_eq(tu_result_gap_of(ref, got, V, 1e-3, &g), TRI_OK, "%s: %s", name, tri_error_message());
    cr_expect_lt(g.loss, b.loss, "%s: loss %.9g vs one rank's %.9g", name, got->grad_loss, ref->grad_loss);
    cr_expect_lt(g.grad, b.grad, "%s: gradient of %s differs from one rank's by %g", name, ref->names[g.grad_at],
                 g.grad);
    cr_expect_leq(g.drift, 1.0, "%s: final %s beyond AdamW's drift bound (ratio %g)", name, ref->names[g.drift_at],
                  g.drift);
    cr_expect_lt(g.step, b.step, "%s: step %d loss %.9g vs one rank's %.9g", name, g.step_at + 1,
                 got->losses[g.step_at], ref->losses[g.step_at]);
    cr_log_info("%s: loss diff %.2g, max gradient diff %.2g (%s), max step-loss diff %.2g, weight drift ratio %.2g",
                name, g.loss, g.grad, ref->names[g.grad_at], g.step, g.drift);
}

typedef struct named {
    const char *name;
    tu_layout l;
} named;

/* The schedule ran as planned: each pipeline rank's activation slots at peak (summed over its virtual
 * stages) equal the schedule simulator's for that schedule (at 2 micro-batches GPipe holds 2 on the
 * last stage where 1F1B holds 1; interleaved counts two chunks a rank). */
static void expect_schedule(const tu_layout *l, const tu_result *got, const char *name)
{
    int pp = l->pp, v = l->layers_per_virtual_stage ? LAYERS / (pp * l->layers_per_virtual_stage) : 1;
    tri_schedule s;
    tri_sim_result sim;
    cr_assert_eq(tri_schedule_make(&s, l->schedule, pp, v, GLOBAL / B), TRI_OK, "%s", tri_error_message());
    tri_sim_costs costs = {.fwd = 1, .bwd = 2};
    cr_assert_eq(tri_schedule_simulate(&s, &costs, &sim), TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < pp; r++) {
        int want = 0;
        for (int c = 0; c < v; c++)
            want += sim.peak_slots_chunk[r * v + c];
        cr_expect_eq(got->peak_in_flight[r], want, "%s rank %d: %d activation slots at peak, the simulator says %d",
                     name, r, got->peak_in_flight[r], want);
        cr_expect_eq(got->planned_in_flight[r], want, "%s rank %d: planned %d slots, the simulator %d", name, r,
                     got->planned_in_flight[r], want);
    }
    cr_log_info("%s: activation slots at peak %d/%d (= the simulator's)", name, got->peak_in_flight[0],
                got->peak_in_flight[1]);
    tri_sim_result_free(&sim);
    tri_schedule_free(&s);
}

/* 1. the GPipe and interleaved schedules at cp 2 x pp 2, both comm types */
static void schedules(const tri_model *m)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, V, 83);
    tu_result ref, got;
    run(m, (tu_layout){0}, w, &ref);
    const named lay[] = {
        {"cp 2 x pp 2 gpipe", {.cp = 2, .pp = 2, .schedule = "gpipe"}},
        {"cp 2 x pp 2 interleaved", {.cp = 2, .pp = 2, .schedule = "interleaved", .layers_per_virtual_stage = 1}},
        {"cp 2 x pp 2 interleaved p2p",
         {.cp = 2, .pp = 2, .schedule = "interleaved", .layers_per_virtual_stage = 1, .cp_comm_type = "p2p"}},
    };
    for (size_t k = 0; k < sizeof lay / sizeof *lay; k++) {
        run(m, lay[k].l, w, &got);
        expect_within(&ref, &got, FP32, lay[k].name);
        expect_schedule(&lay[k].l, &got, lay[k].name);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
}

Test(cp_compose, gpt2_gpipe_and_interleaved, .timeout = 300)
{
    on_model(false, schedules);
}

Test(cp_compose, llama_gpipe_and_interleaved, .timeout = 300)
{
    on_model(true, schedules);
}

/* 2. bf16 at cp 2 (both comm types) and cp 2 x tp 2 SP against one bf16 rank */
static void bf16(const tri_model *m)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, V, 89);
    tu_result ref, got;
    run(m, (tu_layout){.bf16 = true}, w, &ref);
    cr_expect_eq(ref.bf16_stale, 0, "one rank: %lld stale bf16 parameters", (long long)ref.bf16_stale);
    const struct {
        named n;
        bound b;
    } lay[] = {
        {{"bf16 cp 2", {.cp = 2, .bf16 = true}}, BF16_GATHER},
        {{"bf16 cp 2 p2p", {.cp = 2, .cp_comm_type = "p2p", .bf16 = true}}, BF16_TP},
        {{"bf16 cp 2 x tp 2 sp", {.cp = 2, .tp = 2, .sp = true, .bf16 = true}}, BF16_TP},
    };
    for (size_t k = 0; k < sizeof lay / sizeof *lay; k++) {
        run(m, lay[k].n.l, w, &got);
        expect_within(&ref, &got, lay[k].b, lay[k].n.name);
        cr_expect_gt(got.bf16_checked, 0, "%s: no bf16 parameters compared", lay[k].n.name);
        cr_expect_eq(got.bf16_stale, 0, "%s: %lld bf16 parameters are not their rounded master weight",
                     lay[k].n.name, (long long)got.bf16_stale);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
}

Test(cp_compose, gpt2_bf16, .timeout = 300)
{
    on_model(false, bf16);
}

Test(cp_compose, llama_bf16, .timeout = 300)
{
    on_model(true, bf16);
}

/* 3. the staged comm bit for bit against the thread comm, both comm types */
static void staged(const tri_model *m)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, V, 97);
    const char *types[] = {"all_gather", "p2p"};
    for (int k = 0; k < 2; k++) {
        tu_result plain, st;
        char why[256];
        run(m, (tu_layout){.cp = 2, .cp_comm_type = types[k]}, w, &plain);
        run(m, (tu_layout){.cp = 2, .cp_comm_type = types[k], .staged = true}, w, &st);
        cr_expect(!plain.staged && st.staged, "cp 2 %s: the staged run's cp comm should take device buffers "
                  "(plain %d, staged %d)", types[k], plain.staged, st.staged);
        cr_expect(plain.grad_loss == st.grad_loss, "cp 2 %s staged: first loss %.17g vs %.17g", types[k],
                  st.grad_loss, plain.grad_loss);
        for (int i = 0; i < plain.n; i++)
            cr_expect(memcmp(plain.grads[i], st.grads[i], (size_t)tu_result_compared(&plain, i, V) * sizeof(float)) == 0,
                      "cp 2 %s staged: gradient of %s differs from the thread comm's", types[k], plain.names[i]);
        cr_expect(tu_results_same(&plain, &st, V, why, sizeof why), "cp 2 %s staged: %s", types[k], why);
        cr_log_info("cp 2 %s staged: losses %.9g .. %.9g equal to the thread comm's", types[k], st.losses[0],
                    st.losses[STEPS - 1]);
        tu_result_free(&plain);
        tu_result_free(&st);
    }
    free(w);
}

Test(cp_compose, gpt2_staged_comm_bit_identical, .timeout = 300)
{
    on_model(false, staged);
}

Test(cp_compose, llama_staged_comm_bit_identical, .timeout = 300)
{
    on_model(true, staged);
}
