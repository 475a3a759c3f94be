/* tests/test_tp.c - tensor parallelism (and sequence parallelism) against one rank, on thread ranks.
 *
 * A tiny GPT runs at tp = 1 and at tp in {2, 3, 4}, with and without sequence parallelism, from the
 * same global initial weights on the same batches. Splitting matmuls over ranks changes only the
 * order of floating-point sums, so: the loss and every parameter's gradient (gathered over TP into
 * the global tensor) after one step agree within 1e-5 relative (per tensor: max |a - b| / max |b|),
 * the losses of 20 AdamW steps within 1e-4, the vocab padding's gradient is exactly zero, and the TP
 * group's byte counters equal the analytic traffic of partitioner/traffic.h exactly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/traffic.h"
#include "tests/harness.h"

#define STEPS 20
enum { B = 2, T = 12 };

static double tensor_rel(const float *a, const float *b, int64_t n)
{
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        ref = fmax(ref, fabs((double)b[i]));
    }
    return ref > 0 ? diff / ref : diff;
}

static void check_layout(int tp, bool sp)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows(STEPS * B, T, cfg.vocab_size, 99);
    tu_result ref, got;
    tu_layout one = {.tp = 1}, lay = {.tp = tp, .sp = sp};
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &one, w, STEPS, &ref), TRI_OK, "tp=1: %s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &lay, w, STEPS, &got), TRI_OK, "tp=%d sp=%d: %s", tp, sp,
                 tri_error_message());
    double loss_err = fabs(got.grad_loss - ref.grad_loss) / ref.grad_loss;
    cr_expect_lt(loss_err, 1e-5, "loss %g vs %g", got.grad_loss, ref.grad_loss);

    cr_assert_eq(got.n, ref.n);
    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < ref.n; i++) {
        cr_assert_str_eq(got.names[i], ref.names[i]);
        int64_t n = ref.numel[i];
        if (strcmp(ref.names[i], "wte") == 0) {
            /* the vocab is padded to 128 * tp: compare the real rows, padding rows must be zero */
            n = (int64_t)cfg.vocab_size * ref.cols[i];
            for (int64_t k = n; k < got.numel[i]; k++)
                cr_assert_eq(got.grads[i][k], 0.0f, "wte padding gradient at %lld", (long long)k);
        } else {
            cr_assert_eq(got.numel[i], n, "%s: %lld vs %lld elements", ref.names[i],
                         (long long)got.numel[i], (long long)n);
        }
        double e = tensor_rel(got.grads[i], ref.grads[i], n);
        cr_expect_lt(e, 1e-5, "tp=%d sp=%d: gradient of %s differs by %g", tp, sp, ref.names[i], e);
        if (e > worst) {
            worst = e;
            worst_name = ref.names[i];
        }
    }
    double worst_step = 0.0;
    for (int s = 0; s < STEPS; s++) {
        double e = fabs(got.losses[s] - ref.losses[s]) / ref.losses[s];
        worst_step = fmax(worst_step, e);
        cr_expect_lt(e, 1e-4, "tp=%d sp=%d step %d: loss %g vs %g", tp, sp, s + 1, got.losses[s], ref.losses[s]);
    }
    cr_expect_lt(ref.losses[STEPS - 1], ref.losses[0] - 0.1, "training should lower the loss");

    tri_transformer dims = tri_gpt_dims(&cfg);
    tri_layout_shape shape = {.tp = tp, .pp = 1, .dp = 1, .sequence_parallel = sp, .B = (int64_t)B, .T = (int64_t)T, .n_micro = 1};
    tri_stage_place place = {.layer_start = 0, .layer_end = cfg.n_layer, .first = true, .last = true};
    uint64_t want[TRI_COMM_KINDS];
    tri_tp_step_traffic(&dims, &shape, &place, want);
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        cr_expect_eq(got.tp_bytes[k], want[k], "tp=%d sp=%d: %s moved %llu bytes, analytic %llu", tp, sp,
                     tri_comm_kind_name((tri_comm_kind)k), (unsigned long long)got.tp_bytes[k],
                     (unsigned long long)want[k]);
    cr_log_info("tp=%d sp=%d: loss diff %.2g, max gradient diff %.2g (%s), max loss diff over %d AdamW "
                "steps %.2g; TP bytes all-reduce %llu, reduce-scatter %llu, all-gather %llu (= analytic)",
                tp, sp, loss_err, worst, worst_name, STEPS, worst_step,
                (unsigned long long)got.tp_bytes[TRI_COMM_ALL_REDUCE],
                (unsigned long long)got.tp_bytes[TRI_COMM_REDUCE_SCATTER],
                (unsigned long long)got.tp_bytes[TRI_COMM_ALL_GATHER]);
    tu_result_free(&ref);
    tu_result_free(&got);
    free(w);
}

Test(tp, tp2_matches_one_rank, .timeout = 120) { check_layout(2, false); }
Test(tp, tp2_sequence_parallel_matches_one_rank, .timeout = 120) { check_layout(2, true); }
Test(tp, tp3_matches_one_rank, .timeout = 120) { check_layout(3, false); }
Test(tp, tp3_sequence_parallel_matches_one_rank, .timeout = 120) { check_layout(3, true); }
Test(tp, tp4_matches_one_rank, .timeout = 120) { check_layout(4, false); }
Test(tp, tp4_sequence_parallel_matches_one_rank, .timeout = 120) { check_layout(4, true); }

/* bf16 mixed precision: the activations the TP group reduces and gathers are bf16 (2 bytes), the
 * loss statistics and, under sequence parallelism, the replicated parameters' gradients stay fp32:
 * the byte counters equal partitioner/traffic.h's per-micro-batch traffic with elem = 2 plus the
 * fp32 fixed part (what the partitioner's time model charges). */
static void check_bf16_traffic(int tp, bool sp)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows(B, T, cfg.vocab_size, 7);
    tu_layout lay = {.tp = tp, .sp = sp, .bf16 = true};
    tu_result got;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &lay, w, 1, &got), TRI_OK, "bf16 tp=%d sp=%d: %s", tp, sp,
                 tri_error_message());
    tri_transformer dims = tri_gpt_dims(&cfg);
    tri_layout_shape shape = {.tp = tp, .pp = 1, .dp = 1, .sequence_parallel = sp, .B = (int64_t)B, .T = (int64_t)T,
                              .n_micro = 1};
    tri_stage_place place = {.layer_start = 0, .layer_end = cfg.n_layer, .first = true, .last = true};
    uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
    tri_tp_microbatch_traffic(&dims, &shape, &place, 2, fwd, bwd);
    for (int k = 0; k < TRI_COMM_KINDS; k++) {
        uint64_t want = fwd[k] + bwd[k];
        if (k == TRI_COMM_ALL_REDUCE)
            want += tri_tp_step_fixed_traffic(&dims, &shape, &place, 4);
        cr_expect_eq(got.tp_bytes[k], want, "bf16 tp=%d sp=%d: %s moved %llu bytes, analytic %llu", tp, sp,
                     tri_comm_kind_name((tri_comm_kind)k), (unsigned long long)got.tp_bytes[k],
                     (unsigned long long)want);
    }
    cr_expect(isfinite(got.grad_loss) && got.grad_loss > 0, "bf16 tp=%d sp=%d: loss %g", tp, sp, got.grad_loss);
    cr_log_info("bf16 tp=%d sp=%d: TP bytes all-reduce %llu, reduce-scatter %llu, all-gather %llu (= analytic)", tp,
                sp, (unsigned long long)got.tp_bytes[TRI_COMM_ALL_REDUCE],
                (unsigned long long)got.tp_bytes[TRI_COMM_REDUCE_SCATTER],
                (unsigned long long)got.tp_bytes[TRI_COMM_ALL_GATHER]);
    tu_result_free(&got);
    free(w);
}

Test(tp, bf16_tp2_traffic, .timeout = 120) { check_bf16_traffic(2, false); }
Test(tp, bf16_tp2_sequence_parallel_traffic, .timeout = 120) { check_bf16_traffic(2, true); }
