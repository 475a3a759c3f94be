/* tests/test_zero.c - data parallelism with ZeRO stages 0-3 against one rank, on thread ranks.
 *
 * A GPT of 8 layers trains 5 AdamW steps of a global batch of 8 sequences at dp in {2, 4} and ZeRO
 * 0..3, alone and with tensor and pipeline parallelism (2 x 2 x 2 on 8 ranks), from the same
 * initial weights as one rank with one micro-batch of 8. Data parallelism changes only the order of
 * floating-point sums (per-replica sums, then over replicas), so the losses agree within 1e-5
 * relative and every gathered gradient within 1e-5 (per tensor max |a - b| / max |b|). Per rank the
 * optimizer keeps 2 x 4 bytes for each element it owns: the stage's padded elements / dp (ZeRO
 * >= 1), and the data-parallel group moves exactly the volume partitioner/traffic.h gives.
 *
 * Overlap (--overlap-grad-reduce, --overlap-param-gather) changes when reductions and gathers run,
 * not what they compute nor the order in which results are added: the same layouts with overlap give
 * bit-identical losses, gradients and weights, move the same bytes, and did start operations
 * non-blocking (at stage 3, all-gathers started ahead of use were used). On thread ranks a started
 * collective completes at its start; tests/mpi/parallel_equivalence.c runs them truly in flight. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/device/arena.h"
#include "tests/harness.h"

enum { B = 1, T = 8, GLOBAL = 8, STEPS = 5 };

static void check(int dp, int tp, int pp, int zero)
{
    tri_gpt_config cfg = tu_tiny_config();
    cfg.n_layer = 8;
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, cfg.vocab_size, 11);
    int micro = GLOBAL / (B * dp);
    tu_layout one = {.tp = 1, .pp = 1, .dp = 1, .n_micro = GLOBAL / B};
    tu_layout lay = {.tp = tp, .pp = pp, .dp = dp, .zero = zero, .n_micro = micro};
    tu_result ref, got;
    char name[64];
    snprintf(name, sizeof name, "dp=%d tp=%d pp=%d zero=%d", dp, tp, pp, zero);
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &one, w, STEPS, &ref), TRI_OK, "one rank: %s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &lay, w, STEPS, &got), TRI_OK, "%s: %s", name, tri_error_message());
    double worst_step = 0.0, worst_grad = 0.0;
    for (int s = 0; s < STEPS; s++) {
        double e = fabs(got.losses[s] - ref.losses[s]) / ref.losses[s];
        worst_step = fmax(worst_step, e);
        cr_expect_lt(e, 1e-5, "%s step %d: loss %.9g vs one rank's %.9g", name, s + 1, got.losses[s], ref.losses[s]);
    }
    for (int i = 0; i < ref.n; i++) {
        int64_t n = strcmp(ref.names[i], "wte") == 0 ? (int64_t)cfg.vocab_size * ref.cols[i] : ref.numel[i];
        double e = tu_tensor_rel(got.grads[i], ref.grads[i], n);
        worst_grad = fmax(worst_grad, e);
        cr_expect_lt(e, 1e-5, "%s: gradient of %s differs by %g", name, ref.names[i], e);
    }
    /* optimizer state: m and v for each owned element, each rounded up to the arena's alignment */
    size_t want = 0;
    if (zero > 0)
        cr_expect(got.owned_elements * dp <= ref.owned_elements + 8 * 64 * dp * 40,
                  "%s: owns %lld elements, a 1/%d share of the %lld is about %lld", name,
                  (long long)got.owned_elements, dp, (long long)ref.owned_elements,
                  (long long)(ref.owned_elements / dp));
    want = 2 * (((size_t)got.owned_elements * 4 + TRI_ARENA_ALIGN - 1) / TRI_ARENA_ALIGN * TRI_ARENA_ALIGN);
    if (pp == 1)
        cr_expect_eq(got.optimizer_bytes, want, "%s: optimizer state %zu bytes, expected 2 x 4 x %lld owned", name,
                     got.optimizer_bytes, (long long)got.owned_elements);
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        cr_expect_eq(got.dp_bytes[k], got.dp_expected[k], "%s: DP %s moved %llu bytes, analytic %llu", name,
                     tri_comm_kind_name((tri_comm_kind)k), (unsigned long long)got.dp_bytes[k],
                     (unsigned long long)got.dp_expected[k]);
    cr_log_info("%s: max loss diff %.2g over %d steps, max gradient diff %.2g; rank 0 owns %lld of %lld elements, "
                "optimizer %.2f MiB; DP bytes all-reduce %llu reduce-scatter %llu all-gather %llu (= analytic)",
                name, worst_step, STEPS, worst_grad, (long long)got.owned_elements, (long long)ref.owned_elements,
                (double)got.optimizer_bytes / 1048576.0, (unsigned long long)got.dp_bytes[TRI_COMM_ALL_REDUCE],
                (unsigned long long)got.dp_bytes[TRI_COMM_REDUCE_SCATTER],
                (unsigned long long)got.dp_bytes[TRI_COMM_ALL_GATHER]);
    tu_result_free(&ref);
    tu_result_free(&got);
    free(w);
}

Test(zero, dp2_zero0, .timeout = 120) { check(2, 1, 1, 0); }
Test(zero, dp2_zero1, .timeout = 120) { check(2, 1, 1, 1); }
Test(zero, dp2_zero2, .timeout = 120) { check(2, 1, 1, 2); }
Test(zero, dp2_zero3, .timeout = 120) { check(2, 1, 1, 3); }
Test(zero, dp4_zero0, .timeout = 120) { check(4, 1, 1, 0); }
Test(zero, dp4_zero1, .timeout = 120) { check(4, 1, 1, 1); }
Test(zero, dp4_zero2, .timeout = 120) { check(4, 1, 1, 2); }
Test(zero, dp4_zero3, .timeout = 120) { check(4, 1, 1, 3); }
Test(zero, tp2_pp2_dp2_zero0, .timeout = 200) { check(2, 2, 2, 0); }
Test(zero, tp2_pp2_dp2_zero1, .timeout = 200) { check(2, 2, 2, 1); }
Test(zero, tp2_pp2_dp2_zero2, .timeout = 200) { check(2, 2, 2, 2); }
Test(zero, tp2_pp2_dp2_zero3, .timeout = 200) { check(2, 2, 2, 3); }

static void same_bits(const tu_result *a, const tu_result *b, const char *name)
{
    cr_expect(memcmp(a->losses, b->losses, sizeof a->losses) == 0, "%s: losses differ: %.17g vs %.17g", name,
              a->losses[STEPS - 1], b->losses[STEPS - 1]);
    for (int i = 0; i < a->n; i++) {
        cr_expect(memcmp(a->grads[i], b->grads[i], (size_t)a->numel[i] * sizeof(float)) == 0,
                  "%s: gradient of %s differs", name, a->names[i]);
        cr_expect(memcmp(a->weights[i], b->weights[i], (size_t)a->numel[i] * sizeof(float)) == 0,
                  "%s: final %s differs", name, a->names[i]);
    }
}

static void check_overlap(int dp, int tp, int pp, int zero, int micro)
{
    tri_gpt_config cfg = tu_tiny_config();
    cfg.n_layer = 8;
    int32_t *w = tu_make_windows((int64_t)STEPS * dp * micro * B, T, cfg.vocab_size, 13);
    tu_layout plain = {.tp = tp, .pp = pp, .dp = dp, .zero = zero, .n_micro = micro};
    tu_layout over = plain;
    over.overlap = true;
    tu_result a, b;
    char name[80];
    snprintf(name, sizeof name, "dp=%d tp=%d pp=%d zero=%d micro=%d with overlap", dp, tp, pp, zero, micro);
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &plain, w, STEPS, &a), TRI_OK, "%s: %s", name, tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &over, w, STEPS, &b), TRI_OK, "%s: %s", name, tri_error_message());
    same_bits(&a, &b, name);
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        cr_expect_eq(b.dp_bytes[k], a.dp_bytes[k], "%s: DP %s moved %llu bytes, %llu without overlap", name,
                     tri_comm_kind_name((tri_comm_kind)k), (unsigned long long)b.dp_bytes[k],
                     (unsigned long long)a.dp_bytes[k]);
    cr_expect_eq(a.overlap_started, 0);
    cr_expect_gt(b.overlap_started, 0, "%s: nothing was started non-blocking", name);
    if (zero == 3)
        cr_expect_gt(b.prefetches_used, 0, "%s: no all-gather was prefetched", name);
    cr_log_info("%s: bit-identical; rank 0 started %llu operations non-blocking, used %llu prefetches", name,
                (unsigned long long)b.overlap_started, (unsigned long long)b.prefetches_used);
    tu_result_free(&a);
    tu_result_free(&b);
    free(w);
}

Test(zero, overlap_dp2_zero0, .timeout = 120) { check_overlap(2, 1, 1, 0, 2); }
Test(zero, overlap_dp2_zero1, .timeout = 120) { check_overlap(2, 1, 1, 1, 2); }
Test(zero, overlap_dp2_zero2, .timeout = 120) { check_overlap(2, 1, 1, 2, 2); }
Test(zero, overlap_dp2_zero3, .timeout = 120) { check_overlap(2, 1, 1, 3, 2); }
Test(zero, overlap_tp2_pp2_dp2_zero1, .timeout = 200) { check_overlap(2, 2, 2, 1, 4); }
Test(zero, overlap_tp2_pp2_dp2_zero3, .timeout = 200) { check_overlap(2, 2, 2, 3, 4); }

/* bf16 mixed precision (engine/train/zero.h): the gradients stay fp32, so the reductions move 4 bytes a
 * value as in fp32, while the parameters are all-gathered as bf16 (2 bytes): the data-parallel
 * group moves exactly partitioner/traffic.h's figure with those sizes (what the partitioner's time
 * model charges, partitioner/time_model.c). */
static void check_bf16_traffic(int dp, int tp, int pp, int zero)
{
    tri_gpt_config cfg = tu_tiny_config();
    cfg.n_layer = 8;
    int32_t *w = tu_make_windows(GLOBAL, T, cfg.vocab_size, 17);
    tu_layout lay = {.tp = tp, .pp = pp, .dp = dp, .zero = zero, .n_micro = GLOBAL / (B * dp), .bf16 = true};
    tu_result got;
    char name[64];
    snprintf(name, sizeof name, "bf16 dp=%d tp=%d pp=%d zero=%d", dp, tp, pp, zero);
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &lay, w, 1, &got), TRI_OK, "%s: %s", name, tri_error_message());
    cr_expect(isfinite(got.losses[0]) && got.losses[0] > 0, "%s: loss %g", name, got.losses[0]);
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        cr_expect_eq(got.dp_bytes[k], got.dp_expected[k], "%s: DP %s moved %llu bytes, analytic %llu", name,
                     tri_comm_kind_name((tri_comm_kind)k), (unsigned long long)got.dp_bytes[k],
                     (unsigned long long)got.dp_expected[k]);
    cr_log_info("%s: DP bytes all-reduce %llu reduce-scatter %llu all-gather %llu (= analytic: fp32 gradients, bf16 "
                "parameters)", name, (unsigned long long)got.dp_bytes[TRI_COMM_ALL_REDUCE],
                (unsigned long long)got.dp_bytes[TRI_COMM_REDUCE_SCATTER],
                (unsigned long long)got.dp_bytes[TRI_COMM_ALL_GATHER]);
    tu_result_free(&got);
    free(w);
}

Test(zero, bf16_traffic_dp2_zero0, .timeout = 120) { check_bf16_traffic(2, 1, 1, 0); }
Test(zero, bf16_traffic_dp2_zero1, .timeout = 120) { check_bf16_traffic(2, 1, 1, 1); }
Test(zero, bf16_traffic_dp2_zero2, .timeout = 120) { check_bf16_traffic(2, 1, 1, 2); }
Test(zero, bf16_traffic_dp2_zero3, .timeout = 120) { check_bf16_traffic(2, 1, 1, 3); }
Test(zero, bf16_traffic_tp2_pp2_dp2_zero1, .timeout = 200) { check_bf16_traffic(2, 2, 2, 1); }
Test(zero, bf16_traffic_tp2_pp2_dp2_zero3, .timeout = 200) { check_bf16_traffic(2, 2, 2, 3); }
