/* tests/test_pp.c - pipeline parallelism against one stage, on thread ranks.
 *
 * A GPT of 8 layers trains 4 AdamW steps of 4 micro-batches at pp in {2, 4} x tp in {1, 2} with
 * each schedule (GPipe, 1F1B, interleaved with 2 chunks per rank), and at pp = 1 with the same tp
 * and global batch. Pipelining reorders no arithmetic: every schedule accumulates micro-batch
 * gradients in micro-batch order, the tied embedding's two shares are added as one stage adds them,
 * and the gradient norm is summed in the model's parameter order, so losses, gradients and the
 * final weights must be bit-identical. The executor's measured peak of activation slots per stage
 * must equal the simulator's (partitioner/simulate.h) for the same schedule. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/simulate.h"
#include "tests/harness.h"

enum { B = 2, T = 8, STEPS = 4, MICRO = 4 };

static tri_gpt_config config(void)
{
    tri_gpt_config c = tu_tiny_config();
    c.n_layer = 8;
    return c;
}

static void expect_identical(const char *what, const float *a, const float *b, int64_t n, const char *layout)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            cr_expect_fail("%s: %s differs at element %lld: %.9g vs %.9g (relative %.2g)", layout, what,
                           (long long)i, (double)a[i], (double)b[i], tu_tensor_rel(a, b, n));
            return;
        }
}

static void check(int pp, int tp, const char *schedule)
{
    char name[96];
    snprintf(name, sizeof name, "pp=%d tp=%d %s", pp, tp, schedule);
    tri_gpt_config cfg = config();
    int32_t *w = tu_make_windows((int64_t)STEPS * B * MICRO, T, cfg.vocab_size, 5);
    tu_layout one = {.tp = tp, .pp = 1, .n_micro = MICRO};
    tu_layout lay = {.tp = tp, .pp = pp, .n_micro = MICRO, .schedule = schedule,
                     .layers_per_virtual_stage = strcmp(schedule, "interleaved") == 0 ? cfg.n_layer / (2 * pp) : 0};
    tu_result ref, got;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &one, w, STEPS, &ref), TRI_OK, "pp=1 tp=%d: %s", tp, tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &lay, w, STEPS, &got), TRI_OK, "%s: %s", name, tri_error_message());
    cr_expect(memcmp(&got.grad_loss, &ref.grad_loss, sizeof(double)) == 0, "%s: loss %.17g vs %.17g", name,
              got.grad_loss, ref.grad_loss);
    cr_expect(memcmp(&got.grad_norm, &ref.grad_norm, sizeof(double)) == 0, "%s: grad norm %.17g vs %.17g",
              name, got.grad_norm, ref.grad_norm);
    for (int s = 0; s < STEPS; s++)
        cr_expect(memcmp(&got.losses[s], &ref.losses[s], sizeof(double)) == 0, "%s step %d: loss %.17g vs %.17g",
                  name, s + 1, got.losses[s], ref.losses[s]);
    cr_assert_eq(got.n, ref.n);
    for (int i = 0; i < ref.n; i++) {
        char what[96];
        snprintf(what, sizeof what, "gradient of %s", ref.names[i]);
        expect_identical(what, got.grads[i], ref.grads[i], ref.numel[i], name);
        snprintf(what, sizeof what, "final %s", ref.names[i]);
        expect_identical(what, got.weights[i], ref.weights[i], ref.numel[i], name);
    }
    /* activation slots: the executor's measured peak equals the simulator's, stage by stage */
    tri_schedule s;
    tri_sim_result sim;
    int v = lay.layers_per_virtual_stage ? cfg.n_layer / (pp * lay.layers_per_virtual_stage) : 1;
    cr_assert_eq(tri_schedule_make(&s, schedule, pp, v, MICRO), TRI_OK, "%s", tri_error_message());
    tri_sim_costs costs = {.fwd = 1, .bwd = 2};
    cr_assert_eq(tri_schedule_simulate(&s, &costs, &sim), TRI_OK, "%s", tri_error_message());
    char peaks[256] = "";
    for (int r = 0; r < pp; r++) {
        /* each chunk's arena holds its own peak: compare the sum over the rank's chunks */
        int want = 0;
        for (int c = 0; c < v; c++)
            want += sim.peak_slots_chunk[r * v + c];
        cr_expect_eq(got.peak_in_flight[r], want, "%s rank %d: %d activation slots in use at peak, the "
                     "simulator says %d", name, r, got.peak_in_flight[r], want);
        cr_expect_eq(got.planned_in_flight[r], want, "%s rank %d: planned %d slots, simulator %d", name, r,
                     got.planned_in_flight[r], want);
        snprintf(peaks + strlen(peaks), sizeof peaks - strlen(peaks), "%s%d", r ? "/" : "", got.peak_in_flight[r]);
    }
    cr_log_info("%s: losses, gradients and weights bit-identical to pp=1 over %d steps; peak activation "
                "slots per stage %s (= simulator, summed over chunks)", name, STEPS, peaks);
    tri_sim_result_free(&sim);
    tri_schedule_free(&s);
    tu_result_free(&ref);
    tu_result_free(&got);
    free(w);
}

Test(pp, pp2_1f1b, .timeout = 120) { check(2, 1, "1f1b"); }
Test(pp, pp2_gpipe, .timeout = 120) { check(2, 1, "gpipe"); }
Test(pp, pp2_interleaved, .timeout = 120) { check(2, 1, "interleaved"); }
Test(pp, pp4_1f1b, .timeout = 120) { check(4, 1, "1f1b"); }
Test(pp, pp4_gpipe, .timeout = 120) { check(4, 1, "gpipe"); }
Test(pp, pp4_interleaved, .timeout = 120) { check(4, 1, "interleaved"); }
Test(pp, pp2_tp2_1f1b, .timeout = 120) { check(2, 2, "1f1b"); }
Test(pp, pp2_tp2_gpipe, .timeout = 120) { check(2, 2, "gpipe"); }
Test(pp, pp2_tp2_interleaved, .timeout = 120) { check(2, 2, "interleaved"); }
Test(pp, pp4_tp2_1f1b, .timeout = 120) { check(4, 2, "1f1b"); }
Test(pp, pp4_tp2_gpipe, .timeout = 120) { check(4, 2, "gpipe"); }
Test(pp, pp4_tp2_interleaved, .timeout = 120) { check(4, 2, "interleaved"); }
