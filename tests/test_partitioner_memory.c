/* tests/test_partitioner_memory.c - the partitioner's memory prediction against measured peaks.
 *
 * For 17 fp32 layouts of the small byte-level GPT (tp 1-4, pp 1-4, GPipe / 1F1B / interleaved,
 * sequence parallelism, data parallelism, ZeRO stages 0-3, selective and full recomputation, the
 * deterministic mode) and 8 bf16 mixed-precision ones (engine_train --bf16: tp x pp, sequence
 * parallelism, ZeRO 1-3, selective and full recomputation), all with the fused attention (the
 * default), and 3 with the unfused one (its (T, T) probabilities), the prediction is made exactly as the
 * partitioner CLI makes it (tri_preview_create with the engine's plan, models/preview.h), then
 * every rank trains two steps on thread ranks and its device's measured peak (dev->peak_bytes) must
 * equal its stage's predicted total to the byte (every engine buffer comes from the planned arenas,
 * DESIGN.md §7), and be within 5% of the formulas' total (partitioner/memory_model.h) too (the
 * deterministic mode's int64 buckets and sums and its exact scratch included). The CPU backend's
 * transient fp32 copies of bf16 arguments (engine/device/device.c, widen) come from the backend's
 * allocator outside the measured device memory, as a GPU with native bf16 needs none. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/config.h"
#include "models/gpt.h"
#include "models/preview.h"
#include "partitioner/constraints.h"
#include "partitioner/preview.h"
#include "tests/harness.h"

#define MAX_PP 8
#define MAX_RANKS 16

typedef struct mem_case {
    tri_gpt_config cfg;
    tri_train_layout l;
    double predicted[MAX_PP], formulas[MAX_PP];
    double measured[MAX_RANKS];         /* each rank's device peak after two steps */
    int stage[MAX_RANKS];               /* its pipeline stage */
    char failure[512];
} mem_case;

static int fill(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const mem_case *c = ctx;
    for (int64_t i = 0; i < n * (c->l.T + 1); i++)
        w[i] = (int32_t)((first * 31 + i * 7) % 250);
    return TRI_OK;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    mem_case *c = arg;
    tri_device *dev = NULL;
    tri_session ss;
    tri_model m = tri_gpt_model(&c->cfg);
    tri_session_options o = {.run = {.layout = c->l, .seed = 1}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
    int rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&ss, world, dev, &m, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_batch_source src = {.ctx = c, .fill = fill};
    for (int s = 0; s < 2 && !rc; s++) {
        tri_step_result res;
        rc = tri_trainer_step(&ss.trainer, &src, s, 1e-3f, &res);
    }
    int r = ss.grid.pp_rank;
    double measured = (double)dev->peak_bytes;
    double off_formula = measured / c->formulas[r] - 1;
    bool formula_bad = fabs(off_formula) > 0.05;
    /* every engine buffer comes from the planned arenas (DESIGN.md §7): the peak is the plan, to the byte */
    if (!rc && (measured != c->predicted[r] || formula_bad) && !c->failure[0])
        snprintf(c->failure, sizeof c->failure, "rank %d (stage %d): measured peak %.0f bytes, predicted %.0f "
                 "(%+.0f bytes), formulas %.0f (%+.2f%%)", rank, r, measured, c->predicted[r],
                 measured - c->predicted[r], c->formulas[r], 100 * off_formula);
    c->measured[rank] = measured;
    c->stage[rank] = r;
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

/* One layout: tp x pp x dp ranks, the schedule (per_chunk > 0: interleaved chunks of that many
 * layers), micro-batch B x T, m micro-batches, ZeRO stage, recomputation and the precision. */
typedef struct mem_layout {
    int tp, pp, dp;
    bool sp;
    const char *schedule;
    int per_chunk, B, T, m, zero;
    tri_recompute rec;
    bool deterministic, bf16;
    bool unfused;   /* --attention-backend unfused (default: flash) */
} mem_layout;

/* Logs, per pipeline stage, the largest measured peak of its ranks beside the prediction and the
 * formulas (docs/partitioner-validation.md's table). */
static void report(const mem_case *c, const mem_layout *x)
{
    char line[1024];
    int used = snprintf(line, sizeof line, "%s tp %d pp %d dp %d %s v %d sp %d zero %d recompute %s B %d T %d m %d:",
                        tri_precision_name(c->l.precision), x->tp, x->pp, x->dp, c->l.schedule, c->l.v, x->sp,
                        x->zero, tri_recompute_name(x->rec), x->B, x->T, x->m);
    for (int r = 0; r < x->pp && used > 0 && (size_t)used < sizeof line; r++) {
        double peak = 0.0;
        for (int k = 0; k < x->tp * x->pp * x->dp; k++)
            if (c->stage[k] == r && c->measured[k] > peak)
                peak = c->measured[k];
        used += snprintf(line + used, sizeof line - (size_t)used, " stage %d measured %.0f B, predicted %.0f B "
                         "(%+.2f%%), formulas %.0f B (%+.2f%%);", r, peak, c->predicted[r],
                         100 * (peak / c->predicted[r] - 1), c->formulas[r], 100 * (c->formulas[r] / peak - 1));
    }
    cr_log_info("%s", line);
}

static void check_layout(mem_layout x)
{
    static mem_case c;
    memset(&c, 0, sizeof c);
    const char *src = getenv("TRIDENT_SOURCE_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/models/gpt2-tiny-byte.json", src ? src : ".");
    int rc = tri_gpt_config_load(&c.cfg, path);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    tri_transformer dims = tri_gpt_dims(&c.cfg);
    int n = x.tp * x.pp * x.dp;
    tri_layout_request req = {.num_gpus = n, .tp = x.tp, .pp = x.pp, .layers_per_virtual_stage = x.per_chunk,
                              .micro_batch = x.B, .global_batch = (int64_t)x.B * x.m * x.dp, .seq_length = x.T,
                              .sequence_parallel = x.sp, .zero_stage = x.zero, .schedule = x.schedule,
                              .recompute = x.rec, .deterministic = x.deterministic,
                              .attention = x.unfused ? TRI_ATTENTION_UNFUSED : TRI_ATTENTION_FLASH,
                              .precision = x.bf16 ? TRI_PRECISION_BF16 : TRI_PRECISION_FP32, .cpu = true,
                              .first_layers = -1, .last_layers = -1};
    rc = tri_layout_resolve(&dims, &req, &c.l);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    const tri_hardware *hw = tri_hardware_find("cpu");
    tri_cluster cl = {.hw = hw, .num_gpus = n, .gpus_per_node = n, .cpu_cores = 2, .eff = hw->eff};
    tri_preview p;
    tri_model model = tri_gpt_model(&c.cfg);
    rc = tri_preview_create(&p, &dims, &c.l, &cl, tri_model_preview_plan, &model);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_assert(p.from_engine_plan, "every layout takes the engine's plan (fp32 and bf16)");
    for (int r = 0; r < x.pp; r++) {
        c.predicted[r] = p.total[r];
        c.formulas[r] = p.model_total[r];
    }
    tri_preview_destroy(&p);
    cr_assert_leq(n, MAX_RANKS);
    rc = tri_run_thread_ranks(n, run_rank, &c);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_expect(!c.failure[0], "%s tp %d pp %d dp %d %s v %d sp %d zero %d recompute %s attention %s: %s",
              tri_precision_name(c.l.precision), x.tp, x.pp, x.dp, c.l.schedule, c.l.v, x.sp, x.zero,
              tri_recompute_name(x.rec), tri_attention_backend_name(c.l.attention), c.failure);
    report(&c, &x);
}

static void check_r(int tp, int pp, int dp, bool sp, const char *schedule, int per_chunk, int B, int T, int m, int zero,
                    tri_recompute rec)
{
    check_layout((mem_layout){tp, pp, dp, sp, schedule, per_chunk, B, T, m, zero, rec, false, false, false});
}

static void check(int tp, int pp, int dp, bool sp, const char *schedule, int per_chunk, int B, int T, int m, int zero)
{
    check_r(tp, pp, dp, sp, schedule, per_chunk, B, T, m, zero, TRI_RECOMPUTE_NONE);
}

/* bf16 mixed precision (engine_train --bf16) */
static void check_bf16(int tp, int pp, int dp, bool sp, int B, int T, int m, int zero, tri_recompute rec)
{
    check_layout((mem_layout){tp, pp, dp, sp, "1f1b", 0, B, T, m, zero, rec, false, true, false});
}

Test(partitioner_memory, one_rank) { check(1, 1, 1, false, "1f1b", 0, 4, 64, 1, 0); }
Test(partitioner_memory, tp2) { check(2, 1, 1, false, "1f1b", 0, 4, 64, 2, 0); }
Test(partitioner_memory, tp4_sp) { check(4, 1, 1, true, "1f1b", 0, 2, 128, 2, 0); }
Test(partitioner_memory, pp2_1f1b) { check(1, 2, 1, false, "1f1b", 0, 2, 64, 4, 0); }
Test(partitioner_memory, pp2_gpipe) { check(1, 2, 1, false, "gpipe", 0, 2, 64, 4, 0); }
Test(partitioner_memory, pp4_1f1b) { check(1, 4, 1, false, "1f1b", 0, 2, 32, 8, 0); }
Test(partitioner_memory, pp2_interleaved) { check(1, 2, 1, false, "interleaved", 1, 2, 64, 4, 0); }
Test(partitioner_memory, tp2_pp2_default_run) { check(2, 2, 1, false, "1f1b", 0, 4, 128, 4, 0); }
Test(partitioner_memory, tp2_pp2_sp) { check(2, 2, 1, true, "1f1b", 0, 2, 64, 4, 0); }
Test(partitioner_memory, dp2) { check(1, 1, 2, false, "1f1b", 0, 4, 64, 2, 0); }
Test(partitioner_memory, tp2_pp2_dp2) { check(2, 2, 2, false, "1f1b", 0, 2, 64, 2, 0); }
Test(partitioner_memory, dp2_zero1) { check(1, 1, 2, false, "1f1b", 0, 4, 64, 2, 1); }
Test(partitioner_memory, pp2_dp2_zero2) { check(1, 2, 2, false, "1f1b", 0, 2, 64, 4, 2); }
Test(partitioner_memory, tp2_dp2_zero3) { check(2, 1, 2, false, "1f1b", 0, 2, 64, 2, 3); }
Test(partitioner_memory, pp2_selective) { check_r(1, 2, 1, false, "1f1b", 0, 2, 128, 4, 0, TRI_RECOMPUTE_SELECTIVE); }
Test(partitioner_memory, tp2_pp2_sp_full) { check_r(2, 2, 1, true, "1f1b", 0, 2, 128, 4, 0, TRI_RECOMPUTE_FULL); }
Test(partitioner_memory, dp2_zero1_deterministic)
{
    check_layout((mem_layout){1, 2, 2, false, "1f1b", 0, 2, 64, 4, 1, TRI_RECOMPUTE_NONE, true, false, false});
}
Test(partitioner_memory, tp2_dp2_zero3_deterministic)
{
    check_layout((mem_layout){2, 1, 2, false, "1f1b", 0, 2, 64, 2, 3, TRI_RECOMPUTE_NONE, true, false, false});
}
Test(partitioner_memory, bf16_one_rank) { check_bf16(1, 1, 1, false, 4, 64, 1, 0, TRI_RECOMPUTE_NONE); }
Test(partitioner_memory, bf16_tp2_pp2) { check_bf16(2, 2, 1, false, 4, 128, 4, 0, TRI_RECOMPUTE_NONE); }
Test(partitioner_memory, bf16_tp2_pp2_sp) { check_bf16(2, 2, 1, true, 2, 64, 4, 0, TRI_RECOMPUTE_NONE); }
Test(partitioner_memory, bf16_dp2_zero1) { check_bf16(1, 1, 2, false, 4, 64, 2, 1, TRI_RECOMPUTE_NONE); }
Test(partitioner_memory, bf16_pp2_dp2_zero2) { check_bf16(1, 2, 2, false, 2, 64, 4, 2, TRI_RECOMPUTE_NONE); }
Test(partitioner_memory, bf16_tp2_dp2_zero3) { check_bf16(2, 1, 2, false, 2, 64, 2, 3, TRI_RECOMPUTE_NONE); }
Test(partitioner_memory, bf16_pp2_selective) { check_bf16(1, 2, 1, false, 2, 128, 4, 0, TRI_RECOMPUTE_SELECTIVE); }
/* the unfused attention (its (T, T) probabilities and their gradient) */
static void check_unfused(int tp, int pp, bool sp, int T, tri_recompute rec, bool bf16)
{
    check_layout((mem_layout){tp, pp, 1, sp, "1f1b", 0, 2, T, 4, 0, rec, false, bf16, true});
}

Test(partitioner_memory, unfused_tp2_pp2) { check_unfused(2, 2, false, 128, TRI_RECOMPUTE_NONE, false); }
Test(partitioner_memory, unfused_pp2_selective) { check_unfused(1, 2, false, 128, TRI_RECOMPUTE_SELECTIVE, false); }
Test(partitioner_memory, unfused_bf16_tp2_sp_selective) { check_unfused(2, 1, true, 128, TRI_RECOMPUTE_SELECTIVE, true); }
Test(partitioner_memory, bf16_tp2_pp2_sp_full) { check_bf16(2, 2, 1, true, 2, 128, 4, 0, TRI_RECOMPUTE_FULL); }
