/* tests/test_memory_plan.c - memory is planned, not discovered (DESIGN.md §7).
 *
 * For sixteen fp32 layouts (tp, pp, schedule, interleaving, sequence parallelism, data parallelism,
 * ZeRO) and seven bf16 mixed-precision ones (engine_train --bf16: bf16 parameters and activations,
 * fp32 gradients and master weights; tp, pp, sequence parallelism, ZeRO 0-3, interleaving),
 * every rank builds its training set-up on thread ranks and checks that
 *  - the planner's prediction for its coordinates (tri_model_rank_plan, which allocates nothing)
 *    equals, category by category, what its arenas allocated, and
 *  - after two training steps the device's measured peak is within 5% of the planned total (in
 *    fact equal: every buffer comes from the planned arenas).
 * Five of the layouts again with a Llama (models/llama.h), one with a Mixtral (its MoE layers).
 * Context parallelism (docs/context_parallel.md): the p2p ring at cp 2 (GPT-2 fp32; Llama tp 2 SP bf16),
 * and with --cp-comm-type all_gather cp 2 alone, with tp 2 SP, with dp 2 at ZeRO 3 in
 * deterministic mode (the exact backward's larger scratch), bf16, and a Llama at cp 2 x pp 2, at T 256
 * (chunks of 64): the chunks' local layout and the attention's scratch (layers/cp_attention.h, planned
 * through the same count function as the partitioner's tri_cp_scratch_bytes) planned as allocated. Every rank's second step also waits for its
 * device exactly once (tri_device.waits: the gradient norm's copy; the losses are read after it). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/gpt.h"
#include "models/session.h"
#include "tests/harness.h"

typedef struct mem_case {
    int tp, pp, dp;
    bool sp;
    const char *schedule;
    int per_chunk;
    int micro;
    int zero;
    bool bf16;
    tri_gpt_config cfg;
    int cp;                     /* --context-parallel-size (0: none; then T 256) */
    bool det;                   /* --deterministic-mode */
    const char *cp_comm;        /* --cp-comm-type (NULL: all_gather) */
    int moe_reads;              /* host reads of a step beyond the one: the MoE block's count read-back, one per
                                   sparse layer and micro-batch forward (layers/moe.h) */
    tri_model llama;            /* a Llama (models/llama.h) when its family is set, else cfg's GPT */
    char failure[512];
} mem_case;

static int fill(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    for (int64_t i = 0; i < n * 9; i++)
        w[i] = (int32_t)((first * 31 + i * 7) % 100);
    return TRI_OK;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    mem_case *c = arg;
    tri_device *dev = NULL;
    tri_session ss;
    tri_model m = c->llama.family ? c->llama : tri_gpt_model(&c->cfg);
    tri_session_options o = {.run = {.seed = 1}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
    tu_layout l = {.tp = c->tp, .pp = c->pp, .sp = c->sp, .n_micro = c->micro, .schedule = c->schedule,
                   .layers_per_virtual_stage = c->per_chunk, .zero = c->zero, .bf16 = c->bf16, .cp = c->cp,
                   .deterministic = c->det, .cp_comm_type = c->cp_comm};
    int rc = tu_model_layout_resolve(&m, 2, c->cp > 1 ? 256 : 8, &l, size, &o.run.layout);
    if (rc)
        return rc;
    rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&ss, world, dev, &m, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    size_t planned[TRI_MEM_KINDS], model[TRI_MEM_KINDS], total = 0;
    /* the rank in dp x cp (the dp rank at cp 1) */
    rc = tri_model_rank_plan(&m, &o.run, ss.grid.tp_rank, ss.grid.pp_rank, ss.grid.cp_rank + ss.grid.cp * ss.grid.dp_rank,
                             planned);
    tri_model_rank_memory(&ss.model, model);
    for (int k = 0; k < TRI_MEM_KINDS && !rc; k++) {
        size_t have = model[k] + ss.trainer.arena.by_kind[k];
        total += have;
        if (have != planned[k] && !c->failure[0])
            snprintf(c->failure, sizeof c->failure, "rank %d: %s planned %zu bytes, allocated %zu", rank,
                     tri_mem_kind_name((tri_mem_kind)k), planned[k], have);
    }
    tri_batch_source src = {.ctx = c, .fill = fill};
    for (int s = 0; s < 2 && !rc; s++) {
        tri_step_result res;
        uint64_t waits = dev->waits;
        rc = tri_trainer_step(&ss.trainer, &src, s, 1e-3f, &res);
        /* deterministic mode also reads the chunk's non-finite flag before the norm's limbs (train.c) */
        int want = 1 + c->moe_reads + (c->det ? 1 : 0);
        if (!rc && s == 1 && dev->waits - waits != (uint64_t)want && !c->failure[0])
            snprintf(c->failure, sizeof c->failure, "rank %d: a step waited for the device %llu times (want %d)", rank,
                     (unsigned long long)(dev->waits - waits), want);
    }
    double off = total ? ((double)dev->peak_bytes - (double)total) / (double)total : 1.0;
    if (!rc && (off > 0.05 || off < -0.05) && !c->failure[0])
        snprintf(c->failure, sizeof c->failure, "rank %d: measured peak %zu bytes, planned %zu (%+.1f%%)", rank,
                 dev->peak_bytes, total, 100.0 * off);
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

/* The Llama family's JSON (llama), a Mixtral's (mixtral; layers/moe.h's buffers), or GPT-2 (neither). */
static const char *const LLAMA_JSON =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"num_hidden_layers\": 8, \"vocab_size\": 100, \"max_position_embeddings\": 16}";
static const char *const MIXTRAL_JSON =
    "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"num_hidden_layers\": 8, \"vocab_size\": 100, \"max_position_embeddings\": 16, "
    "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"output_router_logits\": true}";

static void check_json(const char *json, int tp, int pp, int dp, bool sp, const char *schedule, int per_chunk, int micro,
                        int zero, bool bf16)
{
    mem_case c = {.tp = tp, .pp = pp, .dp = dp, .sp = sp, .schedule = schedule, .per_chunk = per_chunk,
                  .micro = micro, .zero = zero, .bf16 = bf16, .cfg = tu_tiny_config()};
    c.cfg.n_layer = 8;
    bool llama = json != NULL;
    if (llama) /* 8 layers, 4 query and 2 key/value heads, an untied head */
        cr_assert_eq(tri_model_parse(&c.llama, json, "tiny-llama"), TRI_OK, "%s", tri_error_message());
    if (json == MIXTRAL_JSON) /* every layer sparse: 8 / pp on a stage, each read once per micro-batch */
        c.moe_reads = 8 / pp * micro;
    int rc = tri_run_thread_ranks(tp * pp * dp, run_rank, &c);
    tri_model_free(&c.llama);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_expect(!c.failure[0], "%s%s tp %d pp %d dp %d %s ZeRO %d: %s", llama ? "llama " : "", bf16 ? "bf16" : "fp32",
              tp, pp, dp, schedule, zero, c.failure);
}

static const char *const LLAMA_CP_JSON =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"num_hidden_layers\": 8, \"vocab_size\": 100, \"max_position_embeddings\": 256}";

/* cp 2 (T 256), tp x cp x dp x pp thread ranks, all_gather (comm NULL) or the p2p ring. */
static void check_cp_comm(const char *json, int tp, int pp, int dp, bool sp, int zero, bool det, bool bf16,
                          const char *comm)
{
    mem_case c = {.tp = tp, .pp = pp, .dp = dp, .sp = sp, .schedule = "1f1b", .micro = 2, .zero = zero, .bf16 = bf16,
                  .cfg = tu_tiny_config(), .cp = 2, .det = det, .cp_comm = comm};
    c.cfg.n_layer = 8;
    c.cfg.n_positions = 256;
    if (json)
        cr_assert_eq(tri_model_parse(&c.llama, json, "tiny-llama"), TRI_OK, "%s", tri_error_message());
    int rc = tri_run_thread_ranks(tp * 2 * pp * dp, run_rank, &c);
    tri_model_free(&c.llama);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_expect(!c.failure[0], "%scp 2 tp %d pp %d dp %d ZeRO %d%s%s: %s", json ? "llama " : "", tp, pp, dp, zero,
              det ? " deterministic" : "", bf16 ? " bf16" : "", c.failure);
}

static void check_cp(const char *json, int tp, int pp, int dp, bool sp, int zero, bool det, bool bf16)
{
    check_cp_comm(json, tp, pp, dp, sp, zero, det, bf16, NULL);
}

static void check_precision(int tp, int pp, int dp, bool sp, const char *schedule, int per_chunk, int micro,
                            int zero, bool bf16)
{
    check_json(NULL, tp, pp, dp, sp, schedule, per_chunk, micro, zero, bf16);
}

static void check_zero(int tp, int pp, int dp, bool sp, const char *schedule, int per_chunk, int micro, int zero)
{
    check_precision(tp, pp, dp, sp, schedule, per_chunk, micro, zero, false);
}

static void check_bf16(int tp, int pp, int dp, bool sp, const char *schedule, int per_chunk, int micro, int zero)
{
    check_precision(tp, pp, dp, sp, schedule, per_chunk, micro, zero, true);
}

static void check(int tp, int pp, int dp, bool sp, const char *schedule, int per_chunk, int micro)
{
    check_zero(tp, pp, dp, sp, schedule, per_chunk, micro, 0);
}

Test(memory_plan, one_rank) { check(1, 1, 1, false, "1f1b", 0, 1); }
Test(memory_plan, tp2) { check(2, 1, 1, false, "1f1b", 0, 2); }
Test(memory_plan, tp2_sp) { check(2, 1, 1, true, "1f1b", 0, 2); }
Test(memory_plan, tp4) { check(4, 1, 1, false, "1f1b", 0, 1); }
Test(memory_plan, pp2_1f1b) { check(1, 2, 1, false, "1f1b", 0, 4); }
Test(memory_plan, pp2_gpipe) { check(1, 2, 1, false, "gpipe", 0, 4); }
Test(memory_plan, pp4_1f1b) { check(1, 4, 1, false, "1f1b", 0, 8); }
Test(memory_plan, pp2_interleaved) { check(1, 2, 1, false, "interleaved", 2, 4); }
Test(memory_plan, tp2_pp2) { check(2, 2, 1, false, "1f1b", 0, 4); }
Test(memory_plan, tp2_pp2_sp) { check(2, 2, 1, true, "1f1b", 0, 4); }
Test(memory_plan, dp2) { check(1, 1, 2, false, "1f1b", 0, 2); }
Test(memory_plan, tp2_pp2_dp2) { check(2, 2, 2, false, "1f1b", 0, 2); }
Test(memory_plan, dp2_zero1) { check_zero(1, 1, 2, false, "1f1b", 0, 2, 1); }
Test(memory_plan, dp2_zero2) { check_zero(1, 1, 2, false, "1f1b", 0, 2, 2); }
Test(memory_plan, dp4_zero3) { check_zero(1, 1, 4, false, "1f1b", 0, 2, 3); }
Test(memory_plan, tp2_pp2_dp2_zero3) { check_zero(2, 2, 2, false, "1f1b", 0, 2, 3); }
Test(memory_plan, bf16_one_rank) { check_bf16(1, 1, 1, false, "1f1b", 0, 1, 0); }
Test(memory_plan, bf16_tp2_pp2) { check_bf16(2, 2, 1, false, "1f1b", 0, 4, 0); }
Test(memory_plan, bf16_tp2_sp) { check_bf16(2, 1, 1, true, "1f1b", 0, 2, 0); }
Test(memory_plan, bf16_pp2_interleaved) { check_bf16(1, 2, 1, false, "interleaved", 2, 4, 0); }
Test(memory_plan, bf16_dp2_zero1) { check_bf16(1, 1, 2, false, "1f1b", 0, 2, 1); }
Test(memory_plan, bf16_dp2_zero2) { check_bf16(1, 1, 2, false, "1f1b", 0, 2, 2); }
Test(memory_plan, bf16_tp2_pp2_dp2_zero3) { check_bf16(2, 2, 2, false, "1f1b", 0, 2, 3); }

/* The Llama family: its own buffers (RMSNorm statistics, q|k|v of grouped-query heads, SwiGLU, the
 * rotary tables), split and shared key/value heads, its untied head. */
Test(memory_plan, llama_tp2_pp2) { check_json(LLAMA_JSON, 2, 2, 1, false, "1f1b", 0, 4, 0, false); }
Test(memory_plan, llama_tp4_sp) { check_json(LLAMA_JSON, 4, 1, 1, true, "1f1b", 0, 1, 0, false); }
Test(memory_plan, llama_pp2_interleaved) { check_json(LLAMA_JSON, 1, 2, 1, false, "interleaved", 2, 4, 0, false); }
Test(memory_plan, llama_tp2_pp2_dp2_zero3) { check_json(LLAMA_JSON, 2, 2, 2, false, "1f1b", 0, 2, 3, false); }
Test(memory_plan, llama_bf16_tp2_dp2_zero2) { check_json(LLAMA_JSON, 2, 1, 2, false, "1f1b", 0, 2, 2, true); }
/* The MoE block's buffers (layers/moe.h, per sparse layer and micro-batch, and its shared scratch). */
Test(memory_plan, mixtral_pp2_dp2_zero1) { check_json(MIXTRAL_JSON, 1, 2, 2, false, "1f1b", 0, 2, 1, false); }
Test(memory_plan, mixtral_bf16_pp2_dp2_zero3) { check_json(MIXTRAL_JSON, 1, 2, 2, false, "1f1b", 0, 2, 3, true); }

Test(memory_plan, cp2) { check_cp(NULL, 1, 1, 1, false, 0, false, false); }
Test(memory_plan, cp2_tp2_sp) { check_cp(NULL, 2, 1, 1, true, 1, false, false); }
Test(memory_plan, cp2_dp2_zero3_deterministic) { check_cp(NULL, 1, 1, 2, false, 3, true, false); }
Test(memory_plan, cp2_bf16) { check_cp(NULL, 1, 1, 1, false, 0, false, true); }
Test(memory_plan, llama_cp2_pp2) { check_cp(LLAMA_CP_JSON, 1, 2, 1, false, 0, false, false); }
/* the p2p ring (two k|v blocks in flight, the f32 accumulators: layers/cp_attention.h) */
Test(memory_plan, cp2_p2p) { check_cp_comm(NULL, 1, 1, 1, false, 0, false, false, "p2p"); }
Test(memory_plan, llama_cp2_tp2_sp_p2p_bf16) { check_cp_comm(LLAMA_CP_JSON, 2, 1, 1, true, 1, false, true, "p2p"); }
