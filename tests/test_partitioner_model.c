/* tests/test_partitioner_model.c - the memory formulas against the engine's plan and the papers.
 *
 * partitioner/memory_model.h gives the engine's buffers in closed form (for the search's screening
 * and layouts without an engine plan); it must agree with the engine's own plan (tri_model_rank_plan,
 * the bytes the engine allocates) so the two cannot drift apart silently: here, per pipeline rank,
 * the total within 5% and every category within 5% (or within 1% of the total for tiny
 * categories), over GPT-2 124M and the small byte-level GPT in a range of (tp, pp, schedule, v,
 * sequence parallelism, dp) layouts, with every ZeRO stage and both kinds of recomputation, in fp32
 * and in bf16 mixed precision.
 * The published model-state figures are checked too: Megatron-LM's distributed-optimizer table
 * (docs/api-guide/dist_optimizer.md: bf16 parameters with fp32 gradients, 18 bytes a parameter,
 * 6 + 12/d with the distributed optimizer; fp32 16 and 8 + 8/d), Rajbhandari et al. 2020's Figure
 * 1 (7.5B parameters, 64-way data parallelism: 120, 31.4, 16.6 and 1.9 GB with fp16 gradients,
 * which the fp32 gradients raise by 2 bytes a held gradient), and Korthikanti et al. 2022's
 * Table 2 forms without dropout. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "layers/moe_ep.h"
#include "models/config.h"
#include "models/gpt.h"
#include "models/preview.h"
#include "partitioner/constraints.h"
#include "partitioner/flops.h"
#include "partitioner/memory_model.h"
#include "partitioner/preview.h"
#include "tests/gpt_outline.h"

static tri_gpt_config load(const char *name)
{
    char path[512];
    const char *src = getenv("TRIDENT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/%s.json", src ? src : ".", name);
    tri_gpt_config cfg;
    int rc = tri_gpt_config_load(&cfg, path);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    return cfg;
}

static tri_cluster cpu_cluster(int n)
{
    return (tri_cluster){.hw = tri_hardware_find("cpu"), .num_gpus = n, .gpus_per_node = n, .cpu_cores = 2,
                         .eff = tri_hardware_find("cpu")->eff};
}

/* Resolves a layout for cfg on tp x pp x dp ranks. */
static tri_train_layout layout_m(const tri_model *model, int tp, int pp, int dp, bool sp, int per_chunk,
                                 int64_t B, int64_t T, int n_micro, int zero, tri_recompute rec, tri_precision p)
{
    tri_transformer m = tri_model_dims(model);
    tri_layout_request r = {.num_gpus = tp * pp * dp, .tp = tp, .pp = pp, .layers_per_virtual_stage = per_chunk,
                            .micro_batch = B, .global_batch = B * n_micro * dp, .seq_length = T,
                            .sequence_parallel = sp, .zero_stage = zero, .recompute = rec, .precision = p,
                            .cpu = true, .first_layers = -1, .last_layers = -1};
    tri_train_layout l;
    int rc = tri_layout_resolve(&m, &r, &l);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    return l;
}

static tri_train_layout layout_p(const tri_gpt_config *cfg, int tp, int pp, int dp, bool sp, int per_chunk,
                                 int64_t B, int64_t T, int n_micro, int zero, tri_recompute rec, tri_precision p)
{
    tri_model model = tri_gpt_model(cfg);
    return layout_m(&model, tp, pp, dp, sp, per_chunk, B, T, n_micro, zero, rec, p);
}

static tri_train_layout layout_r(const tri_gpt_config *cfg, int tp, int pp, int dp, bool sp, int per_chunk,
                                 int64_t B, int64_t T, int n_micro, int zero, tri_recompute rec)
{
    return layout_p(cfg, tp, pp, dp, sp, per_chunk, B, T, n_micro, zero, rec, TRI_PRECISION_FP32);
}

static tri_train_layout layout(const tri_gpt_config *cfg, int tp, int pp, int dp, bool sp, int per_chunk,
                               int64_t B, int64_t T, int n_micro, int zero)
{
    return layout_r(cfg, tp, pp, dp, sp, per_chunk, B, T, n_micro, zero, TRI_RECOMPUTE_NONE);
}

static const char *kinds[TRI_MEM_KINDS] = {"params", "grads", "optimizer", "activations", "comm", "workspace"};
static double worst[2];   /* largest |formulas / plan - 1| of a rank's total, per precision (for the log) */

/* Formulas vs the engine's plan on every pipeline rank. */
static bool agree_model(const tri_model *model, const tri_train_layout *l)
{
    const char *name = tri_model_name(model);
    tri_transformer m = tri_model_dims(model);
    tri_cluster c = cpu_cluster(l->tp * l->pp * l->dp);
    tri_preview p;
    int rc = tri_preview_create(&p, &m, l, &c, tri_model_preview_plan, (void *)model);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_assert(p.from_engine_plan);
    bool compared = true;
    for (int r = 0; r < p.pp; r++) {
        double off = (p.model_total[r] - p.total[r]) / p.total[r];
        compared = compared && fabs(off) <= 0.05;
        worst[l->precision] = fabs(off) > worst[l->precision] ? fabs(off) : worst[l->precision];
        cr_expect(fabs(off) <= 0.05, "%s %s tp %d pp %d v %d dp %d sp %d zero %d recompute %s stage %d: formulas "
                  "%.0f bytes, engine plan %.0f (%+.2f%%)", name, tri_precision_name(l->precision), l->tp, l->pp,
                  l->v, l->dp, l->sequence_parallel, l->zero_stage, tri_recompute_name(l->recompute), r,
                  p.model_total[r], p.total[r], 100 * off);
        for (int k = 0; k < TRI_MEM_KINDS; k++) {
            double d = fabs(p.model_mem[r][k] - p.mem[r][k]);
            cr_expect(d <= 0.05 * p.mem[r][k] || d <= 0.01 * p.total[r],
                      "%s %s tp %d pp %d v %d dp %d sp %d zero %d recompute %s stage %d %s: formulas %.0f, engine "
                      "plan %.0f", name, tri_precision_name(l->precision), l->tp, l->pp, l->v, l->dp,
                      l->sequence_parallel, l->zero_stage, tri_recompute_name(l->recompute), r, kinds[k],
                      p.model_mem[r][k], p.mem[r][k]);
        }
    }
    tri_preview_destroy(&p);
    return compared;
}

static bool agree(const tri_gpt_config *cfg, const tri_train_layout *l)
{
    tri_model model = tri_gpt_model(cfg);
    return agree_model(&model, l);
}

Test(partitioner_model, fp32_formulas_agree_with_the_engine_plan_gpt2)
{
    tri_gpt_config cfg = load("gpt2");
    struct { int tp, pp, dp; bool sp; int per_chunk, B, T, m; } cases[] = {
        {1, 1, 1, false, 0, 4, 64, 1},  {2, 1, 1, false, 0, 4, 64, 2},  {4, 1, 1, true, 0, 4, 128, 2},
        {1, 2, 1, false, 0, 4, 64, 4},  {1, 4, 1, false, 0, 2, 256, 8}, {2, 2, 1, true, 0, 4, 64, 4},
        {1, 2, 1, false, 3, 4, 64, 4},  {2, 3, 1, false, 2, 2, 128, 6}, {1, 1, 4, false, 0, 8, 1024, 2},
        {2, 2, 2, false, 0, 1, 1024, 8}, {4, 4, 1, true, 0, 1, 1024, 16}, {1, 12, 1, false, 0, 4, 64, 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_train_layout l = layout(&cfg, cases[i].tp, cases[i].pp, cases[i].dp, cases[i].sp, cases[i].per_chunk,
                                    cases[i].B, cases[i].T, cases[i].m, 0);
        cr_assert(agree(&cfg, &l));
    }
}

Test(partitioner_model, fp32_formulas_agree_with_the_engine_plan_tiny)
{
    tri_gpt_config cfg = load("gpt2-tiny-byte");
    struct { int tp, pp, dp; bool sp; int per_chunk, B, T, m; const char *sched; } cases[] = {
        {2, 2, 1, false, 0, 4, 128, 4, NULL}, {1, 4, 1, false, 0, 4, 128, 4, NULL}, {4, 1, 1, true, 0, 8, 256, 1, NULL},
        {1, 2, 1, false, 1, 4, 64, 4, NULL},  {2, 1, 2, true, 0, 2, 128, 2, NULL},  {1, 1, 1, false, 0, 16, 256, 1, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_train_layout l = layout(&cfg, cases[i].tp, cases[i].pp, cases[i].dp, cases[i].sp, cases[i].per_chunk,
                                    cases[i].B, cases[i].T, cases[i].m, 0);
        cr_assert(agree(&cfg, &l));
    }
}

Test(partitioner_model, zero_stages_and_recomputation_agree_with_the_engine_plan)
{
    const char *names[2] = {"gpt2", "gpt2-tiny-byte"};
    for (int i = 0; i < 2; i++) {
        tri_gpt_config cfg = load(names[i]);
        for (int prec = 0; prec < 2; prec++)
            for (int z = 0; z <= 3; z++)
                for (int rec = 0; rec < 3; rec++) {
                    tri_precision p = (tri_precision)prec;
                    tri_train_layout l = layout_p(&cfg, 2, 2, 4, z % 2 == 1, 0, 2, 128, 4, z, (tri_recompute)rec, p);
                    cr_expect(agree(&cfg, &l));
                    l = layout_p(&cfg, 1, 1, 2, false, 0, 4, 64, 2, z, (tri_recompute)rec, p);
                    cr_expect(agree(&cfg, &l));
                }
    }
    cr_log_info("ZeRO 0-3 x recomputation: formulas vs the engine's plan within %.3f%% (fp32), %.3f%% (bf16)",
                100 * worst[TRI_PRECISION_FP32], 100 * worst[TRI_PRECISION_BF16]);
}

Test(partitioner_model, bf16_formulas_agree_with_the_engine_plan)
{
    tri_gpt_config gpt2 = load("gpt2"), tiny = load("gpt2-tiny-byte");
    struct { const tri_gpt_config *cfg; int tp, pp, dp; bool sp; int per_chunk, B, T, m; } cases[] = {
        {&gpt2, 1, 1, 1, false, 0, 4, 64, 1},    {&gpt2, 2, 1, 1, false, 0, 4, 64, 2},
        {&gpt2, 4, 1, 1, true, 0, 4, 128, 2},    {&gpt2, 1, 4, 1, false, 0, 2, 256, 8},
        {&gpt2, 1, 2, 1, false, 3, 4, 64, 4},    {&gpt2, 2, 3, 1, false, 2, 2, 128, 6},
        {&gpt2, 2, 2, 2, false, 0, 1, 1024, 8},  {&gpt2, 4, 4, 1, true, 0, 1, 1024, 16},
        {&gpt2, 1, 12, 1, false, 0, 4, 64, 12},  {&tiny, 2, 2, 1, false, 0, 4, 128, 4},
        {&tiny, 1, 2, 1, false, 1, 4, 64, 4},    {&tiny, 2, 1, 2, true, 0, 2, 128, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_train_layout l = layout_p(cases[i].cfg, cases[i].tp, cases[i].pp, cases[i].dp, cases[i].sp,
                                      cases[i].per_chunk, cases[i].B, cases[i].T, cases[i].m, 0, TRI_RECOMPUTE_NONE,
                                      TRI_PRECISION_BF16);
        cr_assert(agree(cases[i].cfg, &l));
    }
    cr_log_info("bf16 formulas vs the engine's plan: totals within %.3f%%", 100 * worst[TRI_PRECISION_BF16]);
}

/* Model states per parameter: Megatron-LM's distributed-optimizer table (docs/api-guide/
 * dist_optimizer.md), whose bf16 row is what engine/train/zero.h keeps: bf16 parameters, fp32 gradients,
 * 18 bytes without sharding and 6 + 12/d with the distributed optimizer (ZeRO 1); fp32 16 and
 * 8 + 8/d. */
Test(partitioner_model, model_states_match_megatron_lm)
{
    const double d = 8;
    double p, g, o;
    tri_mem_model_states(1.0, 8, 0, TRI_PRECISION_BF16, &p, &g, &o);
    cr_expect_float_eq(p + g + o, 18.0, 1e-12, "bf16 parameters, fp32 gradients: 18 bytes, got %g", p + g + o);
    cr_expect_float_eq(g, 4.0, 1e-12, "fp32 gradients (accumulate_allreduce_grads_in_fp32)");
    tri_mem_model_states(1.0, 8, 1, TRI_PRECISION_BF16, &p, &g, &o);
    cr_expect_float_eq(p + g + o, 6.0 + 12.0 / d, 1e-12, "distributed optimizer: 6 + 12/d, got %g", p + g + o);
    tri_mem_model_states(1.0, 8, 0, TRI_PRECISION_FP32, &p, &g, &o);
    cr_expect_float_eq(p + g + o, 16.0, 1e-12, "fp32 AdamW: 4 + 4 + 8 bytes per parameter");
    tri_mem_model_states(1.0, 8, 1, TRI_PRECISION_FP32, &p, &g, &o);
    cr_expect_float_eq(p + g + o, 8.0 + 8.0 / d, 1e-12, "fp32 distributed optimizer: 8 + 8/d");
}

/* Rajbhandari et al. 2020, Figure 1: model states per device for Psi = 7.5B, N_d = 64, K = 12, with
 * fp16 gradients (2 bytes): ours keep them in fp32, 2 bytes more per gradient held (Psi at ZeRO
 * 0-1, Psi / N_d at ZeRO 2-3); the rest is the paper's. */
Test(partitioner_model, zero_model_states_match_the_paper)
{
    const double psi = 7.5e9, n_d = 64, want[4] = {120e9, 31.4e9, 16.6e9, 1.9e9};
    for (int z = 0; z <= 3; z++) {
        double p, g, o;
        tri_mem_model_states(psi, 64, z, TRI_PRECISION_BF16, &p, &g, &o);
        double fp16_grads = p + g + o - 2.0 * psi / (z >= 2 ? n_d : 1.0);
        cr_expect(fabs(fp16_grads - want[z]) <= 0.05e9, "ZeRO %d: %.3g GB with 2-byte gradients, the paper %.3g GB",
                  z, fp16_grads / 1e9, want[z] / 1e9);
    }
}

/* Korthikanti et al. 2022 Table 2, per layer, bf16: s b h (34 + 5 a s / h) without parallelism;
 * with tensor parallelism s b h (10 + 24/t + 5 a s / (h t)); with sequence parallelism s b h / t
 * (34 + 5 a s / h); selective recomputation drops the 5 a s / h term; full keeps 2 s b h. The engine
 * has no dropout: it keeps their terms less the two 1-byte dropout masks (2 s b h) and the
 * attention dropout's mask and output (3 a s^2 b / t), and adds the fp32 layernorm statistics they
 * leave out (2 layernorms x mean and rstd x 4 bytes = 16 s b, / t with sequence parallelism).
 * That is the unfused attention, which stores the probabilities as the paper's Megatron-LM did. */
Test(partitioner_model, activation_formulas_follow_korthikanti_table_2_without_dropout)
{
    tri_gpt_config gpt3;
    tri_transformer m = tu_gpt(&gpt3, 96, 96, 12288, 51200, 2048);
    double s = 2048, b = 1, h = 12288, a = 96, sbh = s * b * h, sb = s * b, t = 8;
    double masks = 2 * sbh, dropout_scores = 3 * a * s * s * b;   /* per layer, without parallelism */
    tri_train_layout l = {.tp = 1, .pp = 1, .dp = 1, .v = 1, .B = 1, .T = 2048, .precision = TRI_PRECISION_BF16,
                          .attention = TRI_ATTENTION_UNFUSED};
    cr_expect_float_eq(tri_mem_block_activations(&m, &l), sbh * (34 + 5 * a * s / h) - masks - dropout_scores + 16 * sb,
                       1e-6);
    l.tp = 8;
    cr_expect_float_eq(tri_mem_block_activations(&m, &l),
                       sbh * (10 + 24 / t + 5 * a * s / (h * t)) - masks - dropout_scores / t + 16 * sb, 1e-6);
    l.sequence_parallel = true;
    cr_expect_float_eq(tri_mem_block_activations(&m, &l),
                       (sbh * (34 + 5 * a * s / h) - masks - dropout_scores + 16 * sb) / t, 1e-6);
    l.recompute = TRI_RECOMPUTE_SELECTIVE;
    cr_expect_float_eq(tri_mem_block_activations(&m, &l), (sbh * 34 - masks + 16 * sb) / t, 1e-6);
    l.recompute = TRI_RECOMPUTE_FULL;
    cr_expect_float_eq(tri_mem_block_activations(&m, &l), 2 * sbh / t, 1e-6);
    /* GPT-3 175B, t 8: sequence parallelism + selective recomputation keep 32 s b h / t (+ the
     * statistics) = 101 MB a layer, (8 + 24/8 + 2 a s / (8 h)) / (32 / 8) = 3.75x less than tensor
     * parallelism alone (the paper's "5x" with dropout) */
    l.recompute = TRI_RECOMPUTE_NONE;
    l.sequence_parallel = false;
    double tp_only = tri_mem_block_activations(&m, &l);
    l.sequence_parallel = true;
    l.recompute = TRI_RECOMPUTE_SELECTIVE;
    double kept = tri_mem_block_activations(&m, &l);
    cr_expect_float_eq(kept, (32 * sbh + 16 * sb) / t, 1e-6);
    cr_expect(fabs(tp_only / kept - 15.0 / 4.0) < 1e-3, "reduction %.4f", tp_only / kept);
    /* fp32: the same buffers at 4 bytes, the statistics unchanged */
    l.precision = TRI_PRECISION_FP32;
    cr_expect_float_eq(tri_mem_block_activations(&m, &l), (64 * sbh + 16 * sb) / t, 1e-6);
}

/* The fused attention keeps each row's fp32 logsumexp (4 a s b / t bytes a layer) instead of the
 * probabilities: the s^2 term goes, selective recomputation keeps the same, and the per-layer
 * activations are linear in s (Dao 2023; Korthikanti et al.'s selective line plus the statistics). */
Test(partitioner_model, flash_attention_activations_are_linear_in_seq_length)
{
    tri_gpt_config gpt3;
    tri_transformer m = tu_gpt(&gpt3, 96, 96, 12288, 51200, 2048);
    double s = 2048, b = 1, h = 12288, a = 96, sbh = s * b * h, sb = s * b, t = 8;
    double masks = 2 * sbh, lse = 4 * a * s * b;
    tri_train_layout l = {.tp = 8, .pp = 1, .dp = 1, .v = 1, .B = 1, .T = 2048, .precision = TRI_PRECISION_BF16,
                          .sequence_parallel = true};
    double none = tri_mem_block_activations(&m, &l);
    cr_expect_float_eq(none, (sbh * 34 - masks + 16 * sb + lse) / t, 1e-6);
    l.recompute = TRI_RECOMPUTE_SELECTIVE;
    cr_expect_float_eq(tri_mem_block_activations(&m, &l), none, 1e-6);
    l.recompute = TRI_RECOMPUTE_NONE;
    l.T = 4096;
    cr_expect_float_eq(tri_mem_block_activations(&m, &l), 2 * none, 1e-6);
}

/* The Llama family (models/llama.h): the formulas' SwiGLU, grouped-query (split and shared key/value
 * heads), RMSNorm, rotary, untied-head and Qwen3's per-head norm terms against its engine plan, fp32 and bf16, every ZeRO
 * stage and full recomputation. */
Test(partitioner_model, llama_formulas_agree_with_the_engine_plan)
{
    const char *names[] = {"llama-tiny-byte", "smollm-135m", "qwen3-tiny-byte", "moe-tiny-byte"};
    struct { int model, tp, pp, dp; bool sp; int B, T, m, zero; tri_recompute rec; tri_precision p; } cases[] = {
        {0, 1, 1, 1, false, 4, 128, 1, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {0, 2, 2, 1, false, 4, 128, 4, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {0, 4, 1, 1, true, 4, 128, 2, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_BF16},  /* shared kv heads */
        {0, 1, 2, 2, false, 2, 256, 4, 3, TRI_RECOMPUTE_FULL, TRI_PRECISION_FP32},
        {0, 2, 1, 2, true, 2, 128, 2, 2, TRI_RECOMPUTE_NONE, TRI_PRECISION_BF16},
        {1, 3, 2, 1, false, 2, 512, 4, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_BF16},
        {1, 1, 1, 4, false, 4, 1024, 2, 1, TRI_RECOMPUTE_NONE, TRI_PRECISION_BF16},
        {1, 3, 1, 1, true, 1, 1152, 1, 0, TRI_RECOMPUTE_FULL, TRI_PRECISION_FP32},
        /* Qwen3: the per-head norm's kept input and rstd, its two weights */
        {2, 1, 1, 1, false, 4, 128, 1, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {2, 4, 1, 1, true, 4, 128, 2, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_BF16}, /* shared kv heads */
        {2, 2, 2, 2, false, 2, 128, 4, 3, TRI_RECOMPUTE_FULL, TRI_PRECISION_FP32},
        /* the tiny Mixtral (ep 1): the MoE block's buffers (layers/moe_buffers.c) in place of the MLP's */
        {3, 1, 1, 1, false, 4, 128, 1, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {3, 1, 2, 2, false, 4, 128, 4, 1, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {3, 1, 2, 2, false, 2, 128, 4, 3, TRI_RECOMPUTE_FULL, TRI_PRECISION_BF16},
        /* tp 2 under sequence parallelism: each rank routes N / tp tokens (the shape's sp, routed_global) */
        {3, 2, 1, 2, true, 4, 128, 2, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {3, 2, 2, 1, true, 2, 128, 4, 0, TRI_RECOMPUTE_FULL, TRI_PRECISION_BF16},
        /* ZeRO at tp 2: the experts sharded over the stage's tp x dp ranks, the rest over dp */
        {3, 2, 1, 2, true, 4, 128, 2, 1, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {3, 2, 2, 2, true, 2, 128, 4, 3, TRI_RECOMPUTE_FULL, TRI_PRECISION_BF16},
    };
    tri_model models[4];
    for (int i = 0; i < 4; i++) {
        char path[512];
        const char *src = getenv("TRIDENT_SOURCE_DIR");
        snprintf(path, sizeof path, "%s/models/%s.json", src ? src : ".", names[i]);
        cr_assert_eq(tri_model_load(&models[i], path), TRI_OK, "%s", tri_error_message());
    }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_train_layout l = layout_m(&models[cases[i].model], cases[i].tp, cases[i].pp, cases[i].dp, cases[i].sp, 0,
                                      cases[i].B, cases[i].T, cases[i].m, cases[i].zero, cases[i].rec, cases[i].p);
        cr_assert(agree_model(&models[cases[i].model], &l));
    }
    for (int i = 0; i < 4; i++)
        tri_model_free(&models[i]);
}

/* Expert parallelism's model states: at dp 4 ep 2 (edp 2) the engine plans each block's experts'
 * part over edp and the rest over dp (engine/train/param.h tri_param_part, zero.h) and the formulas
 * (tri_mem_model_rank) shard the routed experts over tri_expert_dp: the parameters, gradients and
 * optimizer state of every stage agree within 1% at ZeRO 0, 1, 2 and 3 (measured: within 0.01%, the
 * engine's alignment padding, each part rounded to dp x 64 elements; the ZeRO 2-3 whole-unit buffers
 * are the largest block's, its experts included). Sharding the rank's experts (4 layers x 4 experts x
 * 3 C I = 1.57M elements at ep 2) over dp instead would put the ZeRO 1 optimizer 46% low. At ZeRO 2-3
 * the comm buffers too (within 0.03%): they are dominated by the reduce-scatter's result, the largest
 * unit's owned slices, a sparse block's experts over edp (it was 47% low as len / dp). The activation
 * and receive-buffer categories at ep > 1 are not compared here, nor the comm at ZeRO 0-1 (a few
 * hundred bytes of gradient-norm slots). */
Test(partitioner_model, mixtral_ep_model_states_agree_with_the_engine_plan)
{
    char path[512];
    const char *src = getenv("TRIDENT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/moe-tiny-byte.json", src ? src : ".");
    tri_model model;
    cr_assert_eq(tri_model_load(&model, path), TRI_OK, "%s", tri_error_message());
    tri_transformer m = tri_model_dims(&model);
    /* and at tp 2 under sequence parallelism (ep 1: edp = the stage's 4 ranks; ep 2: edp 2), where the
     * engine pads an expert part to tp dp x 64 elements */
    struct { int tp, pp, dp, ep, zero; } cases[] = {{1, 1, 4, 2, 0}, {1, 1, 4, 2, 1}, {1, 1, 4, 2, 2}, {1, 1, 4, 2, 3},
                                                    {1, 2, 2, 2, 3}, {1, 1, 4, 4, 1}, {2, 1, 2, 1, 1}, {2, 1, 2, 1, 3},
                                                    {2, 1, 2, 2, 1}, {2, 1, 2, 2, 3}, {2, 2, 2, 2, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int tp = cases[i].tp, pp = cases[i].pp, dp = cases[i].dp;
        tri_layout_request r = {.num_gpus = tp * pp * dp, .tp = tp, .pp = pp, .ep = cases[i].ep, .micro_batch = 2,
                                .global_batch = 2 * 4 * dp, .seq_length = 64, .zero_stage = cases[i].zero,
                                .sequence_parallel = tp > 1, .precision = TRI_PRECISION_FP32, .cpu = true,
                                .first_layers = -1, .last_layers = -1};
        tri_train_layout l;
        cr_assert_eq(tri_layout_resolve(&m, &r, &l), TRI_OK, "%s", tri_error_message());
        tri_cluster c = cpu_cluster(tp * pp * dp);
        tri_preview p;
        cr_assert_eq(tri_preview_create(&p, &m, &l, &c, tri_model_preview_plan, (void *)&model), TRI_OK, "%s",
                     tri_error_message());
        cr_assert(p.from_engine_plan);
        for (int s = 0; s < p.pp; s++)
            for (int k = TRI_MEM_PARAMS; k <= TRI_MEM_COMM; k++) {
                if (k == TRI_MEM_ACTIVATIONS || (k == TRI_MEM_COMM && cases[i].zero < 2))
                    continue;
                double off = p.model_mem[s][k] / p.mem[s][k] - 1.0;
                cr_expect(fabs(off) <= 0.01, "moe-tiny-byte tp %d pp %d dp %d ep %d zero %d stage %d %s: formulas "
                          "%.0f, engine plan %.0f (%+.2f%%)", tp, pp, dp, cases[i].ep, cases[i].zero, s, kinds[k],
                          p.model_mem[s][k], p.mem[s][k], 100 * off);
                if (getenv("TRIDENT_TEST_VERBOSE"))
                    printf("tp %d pp %d dp %d ep %d zero %d stage %d %-9s formulas %9.0f plan %9.0f (%+.2f%%)\n", tp,
                           pp, dp, cases[i].ep, cases[i].zero, s, kinds[k], p.model_mem[s][k], p.mem[s][k], 100 * off);
            }
        tri_preview_destroy(&p);
    }
    tri_model_free(&model);
}

/* Model FLOPs of a Llama (partitioner/flops.h) are PaLM's (Chowdhery et al. 2022, appendix B) and the
 * Llama 3 report's count: 6 N per token for the N weights that multiply (all but the input
 * embedding and the norms: the blocks' 6.98e9 and the untied head's 0.525e9 for Llama 3.1 8B) plus
 * 12 L Q T for the attention core, Q the query width: 6 x 7.50e9 + 12 x 32 x 4096 x 8192 per token
 * at T 8192. */
Test(partitioner_model, llama_flops_are_6n_plus_attention)
{
    char path[512];
    const char *src = getenv("TRIDENT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/llama-3.1-8b.json", src ? src : ".");
    tri_model model;
    cr_assert_eq(tri_model_load(&model, path), TRI_OK, "%s", tri_error_message());
    tri_transformer m = tri_model_dims(&model);
    int64_t B = 2, T = 8192;
    double C = 4096, V = 128256, L = 32, tokens = (double)(B * T);
    double n_matmul = (double)model.family->num_params(model.cfg) - V * C - L * 2.0 * C - C; /* less the
                                                                     embedding table and the norms */
    double want = tokens * (6.0 * n_matmul + 12.0 * L * 4096.0 * (double)T);
    double got = tri_iteration_flops(&m, B, T, false);
    cr_expect(fabs(got / want - 1.0) < 1e-12, "Llama 3.1 8B FLOPs %.6e, 6N + 12 L Q T gives %.6e", got, want);
    cr_expect(fabs(n_matmul / 7.505e9 - 1.0) < 0.001, "Llama 3.1 8B's multiplying weights %.4g (8.03e9 less its "
              "0.525e9 input embedding)", n_matmul);
    /* full recomputation adds one forward of the blocks, not of the head */
    double head = 6.0 * tokens * C * V;
    double rec = tri_iteration_flops(&m, B, T, true);
    cr_expect(fabs((rec - head) / (got - head) - 4.0 / 3.0) < 1e-12, "recomputation: %.6e vs %.6e", rec, got);
    tri_model_free(&model);
}

/* The tiny Mixtral under expert parallelism (ep 2, ZeRO 0: what engine_train runs): every category
 * within 5% as above, and what expert parallelism changes exactly: against the same layout at ep 1,
 * each category moves by the same bytes in the formulas as in the engine's plan (the experts' states
 * halve; the received rows' buffers, layers/moe_ep.h tri_moe_ep_max_rows, are added to the
 * activations and the workspace), dropless and with a capacity factor, which bounds the received rows
 * (layers/moe_ep.h). The expert bias (E fp32 a sparse layer, and its E int32 counts once per chunk)
 * moves the parameters and the workspace by the same bytes in both too. */
typedef struct mem_pp {
    double formula[2][TRI_MEM_KINDS], plan[2][TRI_MEM_KINDS];  /* [pp rank][category] */
    int pp;
} mem_pp;

static mem_pp plan_both(const tri_model *model, const tri_train_layout *l)
{
    cr_assert(agree_model(model, l));
    tri_transformer m = tri_model_dims(model);
    tri_cluster c = cpu_cluster(l->tp * l->pp * l->dp);
    tri_preview p;
    cr_assert_eq(tri_preview_create(&p, &m, l, &c, tri_model_preview_plan, (void *)model), TRI_OK, "%s",
                 tri_error_message());
    mem_pp out = {.pp = p.pp};
    cr_assert(p.pp <= 2);
    for (int r = 0; r < p.pp; r++)
        for (int k = 0; k < TRI_MEM_KINDS; k++) {
            out.formula[r][k] = p.model_mem[r][k];
            out.plan[r][k] = p.mem[r][k];
        }
    tri_preview_destroy(&p);
    return out;
}

/* a's categories minus b's agree between the formulas and the plan to the byte; returns the activation
   and workspace moves of stage 0 (the plan's) in moved[0], moved[1] */
static void same_moves(const char *what, const mem_pp *a, const mem_pp *b, double moved[2])
{
    for (int r = 0; r < a->pp; r++)
        for (int k = 0; k < TRI_MEM_KINDS; k++) {
            double f = a->formula[r][k] - b->formula[r][k], e = a->plan[r][k] - b->plan[r][k];
            cr_expect(fabs(f - e) <= 0.5, "%s stage %d %s: the formulas move %.0f bytes, the engine's plan %.0f",
                      what, r, kinds[k], f, e);
        }
    moved[0] = a->plan[0][TRI_MEM_ACTIVATIONS] - b->plan[0][TRI_MEM_ACTIVATIONS];
    moved[1] = a->plan[0][TRI_MEM_WORKSPACE] - b->plan[0][TRI_MEM_WORKSPACE];
}

Test(partitioner_model, moe_expert_parallel_formulas_equal_the_engine_plan)
{
    char path[512];
    const char *src = getenv("TRIDENT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/moe-tiny-byte.json", src ? src : ".");
    tri_model model;
    cr_assert_eq(tri_model_load(&model, path), TRI_OK, "%s", tri_error_message());
    tri_transformer m = tri_model_dims(&model);
    const int64_t C = 128, E = 8, K = 2, I = 256;
    struct { int pp, dp, ep; int64_t B, T; int n_micro; float cf; bool bias; } cases[] = {
        {1, 2, 2, 4, 64, 2, 0.0f, false},  /* dp 2 ep 2, dropless */
        {2, 2, 2, 2, 64, 4, 0.0f, false},  /* pp 2 x dp 2 ep 2 */
        {1, 4, 4, 4, 64, 1, 0.0f, false},  /* ep 4: E_l 2 = K, still ep N K */
        {1, 2, 2, 4, 64, 2, 1.0f, false},  /* a capacity factor bounds the received rows */
        {2, 2, 2, 2, 64, 4, 1.5f, false},
        {1, 2, 2, 4, 64, 2, 0.0f, true},   /* the expert bias */
        {2, 2, 2, 2, 64, 4, 1.0f, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_layout_request r = {.num_gpus = cases[i].pp * cases[i].dp, .tp = 1, .pp = cases[i].pp,
                                .ep = cases[i].ep, .micro_batch = cases[i].B,
                                .global_batch = cases[i].B * cases[i].n_micro * cases[i].dp,
                                .seq_length = cases[i].T, .precision = TRI_PRECISION_FP32, .cpu = true,
                                .first_layers = -1, .last_layers = -1};
        tri_train_layout l;
        cr_assert_eq(tri_layout_resolve(&m, &r, &l), TRI_OK, "%s", tri_error_message());
        l.moe.capacity_factor = cases[i].cf;
        l.moe.expert_bias = cases[i].bias;
        l.moe.bias_update_rate = cases[i].bias ? 1e-3f : 0.0f;
        tri_train_layout one = l, plain = l;
        one.ep = 1;
        plain.moe.expert_bias = false;
        char what[128];
        snprintf(what, sizeof what, "pp %d dp %d ep %d capacity factor %g%s", l.pp, l.dp, l.ep, (double)cases[i].cf,
                 cases[i].bias ? " with the expert bias" : "");
        mem_pp at_ep = plan_both(&model, &l), at_one = plan_both(&model, &one);
        double moved[2];
        same_moves(what, &at_ep, &at_one, moved);
        /* the received rows' buffers by hand (layers/moe_ep.c: x, gate|up, h kept; o, dh, dgate|up
           scratch; fp32, each 64-byte aligned, these sizes already are): per sparse layer and micro-batch
           in flight, and one scratch per chunk */
        int64_t N = cases[i].B * cases[i].T, El = E / l.ep;
        int64_t cap = cases[i].cf > 0 ? tri_moe_capacity(N, K, E, cases[i].cf) : 0;
        int64_t per_src = N * (K < El ? K : El);
        if (cap > 0 && El * cap < per_src)
            per_src = El * cap;
        int64_t rows = l.ep * per_src;
        double layers = 4.0 / l.pp, ep_scratch = 4.0 * rows * (C + 3 * I);
        cr_expect_eq(tri_moe_ep_max_rows(&(tri_moe_shape){.N = N, .C = C, .E = E, .K = K, .I = I, .capacity = cap},
                                         l.ep), rows, "%s", what);
        /* at ep 1 none of these exist: the activations move by the kept rows (x, gate|up, h) of each
           layer and micro-batch in flight, the workspace by the scratch (ZeRO 0, not deterministic) */
        cr_expect(moved[1] == ep_scratch, "%s: the ep scratch %.0f bytes, by hand %.0f", what, moved[1], ep_scratch);
        double per_slot = 4.0 * rows * (C + 3 * I) * layers;
        cr_expect(fmod(moved[0], per_slot) == 0.0 && moved[0] > 0, "%s: the ep activations %.0f bytes, a multiple "
                  "of %.0f (x, gate|up, h of %lld rows in %g layers)", what, moved[0], per_slot, (long long)rows,
                  layers);
        if (cases[i].bias) {
            mem_pp without = plan_both(&model, &plain);
            same_moves(what, &at_ep, &without, moved);
            /* one arena take each (TRI_ARENA_ALIGN bytes at the least): E int32 counts, (layers, E) fp32 */
            double counts = ceil(4.0 * E / TRI_ARENA_ALIGN) * TRI_ARENA_ALIGN;
            double values = ceil(4.0 * E * layers / TRI_ARENA_ALIGN) * TRI_ARENA_ALIGN;
            cr_expect(moved[1] == counts, "%s: the bias's counts %.0f bytes, by hand %.0f", what, moved[1], counts);
            double bias = at_ep.plan[0][TRI_MEM_PARAMS] - without.plan[0][TRI_MEM_PARAMS];
            cr_expect(bias == values, "%s: the bias %.0f bytes, by hand %.0f", what, bias, values);
        }
    }
    tri_model_free(&model);
}

/* The shared expert at tp > 1 (models/moe-tiny-shared-byte.json: I_s 256, a tensor-parallel SwiGLU
 * under sequence parallelism, models/llama_moe.c): the formulas (models/block_cost.c: 3 C I_s / tp
 * parameters, 3 N I_s / tp kept activations and as much backward scratch, the gathered input) agree
 * with the engine's plan at tp 2 SP (dp 2; dp 2 ep 2; pp 2 bf16 with full recomputation) as the
 * tiny Mixtral's do, and what the shared expert adds is the same in both, to the byte, in the
 * parameters, gradients, activations and workspace: against the same layout of moe-tiny-byte.json
 * (measured: equal in every case; at tp 2 SP dp 2 fp32 the shared expert adds 786,432 parameter bytes
 * a rank, 4 layers x 3 C I_s / tp = 49,152 values x 4 bytes, and 3,145,728 activation bytes, 4 layers
 * x 3 N I_s / tp x 4 with N = 512 gathered tokens; at tp 1 it is inside the MoE block, twice that). */
Test(partitioner_model, shared_expert_under_tp_agrees_with_the_engine_plan)
{
    const char *names[] = {"moe-tiny-byte", "moe-tiny-shared-byte"};
    tri_model models[2];
    for (int i = 0; i < 2; i++) {
        char path[512];
        const char *src = getenv("TRIDENT_SOURCE_DIR");
        snprintf(path, sizeof path, "%s/models/%s.json", src ? src : ".", names[i]);
        cr_assert_eq(tri_model_load(&models[i], path), TRI_OK, "%s", tri_error_message());
    }
    struct { int tp, pp, dp, ep; int B, T, m; tri_recompute rec; tri_precision p; } cases[] = {
        {2, 1, 2, 1, 4, 128, 2, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {2, 1, 2, 2, 4, 128, 2, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {2, 2, 1, 1, 2, 128, 4, TRI_RECOMPUTE_FULL, TRI_PRECISION_BF16},
        {1, 1, 1, 1, 4, 128, 1, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32}, /* tp 1: inside the MoE block */
    };
    static const int exact[] = {TRI_MEM_PARAMS, TRI_MEM_GRADS, TRI_MEM_ACTIVATIONS, TRI_MEM_WORKSPACE};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_preview p[2];
        for (int k = 0; k < 2; k++) {
            tri_train_layout l = layout_m(&models[k], cases[i].tp, cases[i].pp, cases[i].dp, cases[i].tp > 1, 0,
                                          cases[i].B, cases[i].T, cases[i].m, 0, cases[i].rec, cases[i].p);
            l.ep = cases[i].ep;
            cr_assert(agree_model(&models[k], &l), "%s tp %d ep %d", names[k], cases[i].tp, cases[i].ep);
            tri_transformer m = tri_model_dims(&models[k]);
            tri_cluster c = cpu_cluster(l.tp * l.pp * l.dp);
            cr_assert_eq(tri_preview_create(&p[k], &m, &l, &c, tri_model_preview_plan, (void *)&models[k]), TRI_OK,
                         "%s", tri_error_message());
        }
        for (int r = 0; r < p[0].pp; r++)
            for (size_t j = 0; j < sizeof exact / sizeof *exact; j++) {
                int k = exact[j];
                double plan = p[1].mem[r][k] - p[0].mem[r][k], formula = p[1].model_mem[r][k] - p[0].model_mem[r][k];
                cr_expect(plan > 0, "case %zu stage %d %s: the shared expert adds %.0f bytes to the plan", i, r,
                          kinds[k], plan);
                cr_expect(plan == formula, "case %zu stage %d %s: the shared expert adds %.0f bytes to the plan, "
                          "%.0f to the formulas", i, r, kinds[k], plan, formula);
                if (getenv("TRIDENT_TEST_VERBOSE"))
                    printf("shared expert, case %zu stage %d %s: +%.0f bytes (plan), +%.0f (formulas)\n", i, r,
                           kinds[k], plan, formula);
            }
        tri_preview_destroy(&p[0]);
        tri_preview_destroy(&p[1]);
    }
    for (int i = 0; i < 2; i++)
        tri_model_free(&models[i]);
}

/* Expert tensor parallelism (layers/moe_etp.h): the tiny Mixtral at tp 2 SP etp 2 (ep 1), tp 2 SP x dp 2
 * etp 2 ep 2, dp 2 etp 2 and pp 2 x dp 2 etp 2 bf16 with full recomputation: the formulas (each expert
 * E_l 3 C I / etp, the rank's shape with I / etp, the etp group's buffers tri_moe_etp_acts_bytes /
 * _scratch_bytes for etp tri_moe_ep_max_rows rows) against the engine's plan, every category within 5%
 * as for the other layouts, the parameters (at ZeRO 0) and activations to the byte (measured: the
 * workspace 512 bytes, one arena alignment, above the formulas); and at tp 1 dp 4 etp 2 ep 2 ZeRO 1 and
 * dp 4 etp 2 ZeRO 3 bf16 the slices' parts sharded over edp (tri_expert_dp = tp dp / (etp ep)): every
 * category within 5% (the parameters 192-512 bytes apart, the parts' alignment padding); the expert
 * parameters on a rank exactly 1 / etp of etp 1's. */
Test(partitioner_model, mixtral_etp_formulas_agree_with_the_engine_plan)
{
    char path[512];
    const char *src = getenv("TRIDENT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/moe-tiny-byte.json", src ? src : ".");
    tri_model model;
    cr_assert_eq(tri_model_load(&model, path), TRI_OK, "%s", tri_error_message());
    struct { int tp, pp, dp, ep, etp; bool sp; int m, zero; tri_recompute rec; tri_precision p; } cases[] = {
        {2, 1, 1, 1, 2, true, 2, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {2, 1, 2, 2, 2, true, 2, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {1, 1, 2, 1, 2, false, 2, 0, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32},
        {1, 2, 2, 1, 2, false, 4, 0, TRI_RECOMPUTE_FULL, TRI_PRECISION_BF16},
        {1, 1, 4, 2, 2, false, 2, 1, TRI_RECOMPUTE_NONE, TRI_PRECISION_FP32}, /* ZeRO over edp 1 */
        {1, 1, 4, 1, 2, false, 2, 3, TRI_RECOMPUTE_NONE, TRI_PRECISION_BF16}, /* edp 2 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_train_layout l = layout_m(&model, cases[i].tp, cases[i].pp, cases[i].dp, cases[i].sp, 0, 4, 64, cases[i].m,
                                      cases[i].zero, cases[i].rec, cases[i].p);
        l.ep = cases[i].ep;
        l.etp = cases[i].etp;
        cr_assert(agree_model(&model, &l), "tp %d pp %d dp %d ep %d etp %d", l.tp, l.pp, l.dp, l.ep, l.etp);
        tri_transformer m = tri_model_dims(&model);
        {
            /* the parameters and activations to the byte (the etp buffers are the engine's functions) */
            tri_cluster c = cpu_cluster(l.tp * l.pp * l.dp);
            tri_preview p;
            cr_assert_eq(tri_preview_create(&p, &m, &l, &c, tri_model_preview_plan, (void *)&model), TRI_OK);
            for (int r = 0; r < p.pp; r++)
                for (int k = cases[i].zero ? TRI_MEM_ACTIVATIONS : TRI_MEM_PARAMS; k <= TRI_MEM_ACTIVATIONS;
                     k += TRI_MEM_ACTIVATIONS - TRI_MEM_PARAMS)
                    cr_expect_eq(p.model_mem[r][k], p.mem[r][k], "etp %d stage %d %s: formulas %.0f, plan %.0f", l.etp,
                                 r, kinds[k], p.model_mem[r][k], p.mem[r][k]);
            for (int k = 0; getenv("TRIDENT_TEST_VERBOSE") && k < TRI_MEM_KINDS; k++)
                printf("tp %d pp %d dp %d ep %d etp %d %s: formulas %.0f, engine plan %.0f\n", l.tp, l.pp, l.dp, l.ep,
                       l.etp, kinds[k], p.model_mem[0][k], p.mem[0][k]);
            tri_preview_destroy(&p);
        }
        tri_train_layout one = l;
        one.etp = 1;
        tri_block_cost a = tri_transformer_block_at(&m, &l, 0), b = tri_transformer_block_at(&m, &one, 0);
        cr_expect(a.expert_params > 0 && a.expert_params * l.etp == b.expert_params,
                  "the expert parameters split over etp: %.0f x %d vs %.0f", a.expert_params, l.etp, b.expert_params);
    }
    tri_model_free(&model);
}

/* Context parallelism (docs/context_parallel.md): the tiny Llama at cp 2 and cp 4 (T 512: chunks of 128 and
 * 64 rows), alone, with tp 2 and sequence parallelism, with pp 2, dp 2 at ZeRO 3 and full recomputation,
 * all_gather, the p2p ring, and deterministic mode (whose buffers the formulas hold too). The rank's view is T / cp rows (tri_layout_cp_local), but
 * the rotary tables hold the whole sequence's positions, as the engine allocates them (models/llama_buffers.c:
 * a cp rank's chunks are any of them): with the tables at T / cp rows the workspace was 4 (T - T / cp) HS
 * bytes short a chunk (tp 2 x cp 2 at T 256: 0.11% of the total). Every category of every stage equals the
 * engine's plan within what the formulas leave to it elsewhere (5%, or 1% of the total), and the workspace's
 * difference is exactly the one of the same layout at cp 1 (measured: 512 bytes, the trainer's one-float
 * takes, each aligned, which the formulas leave out at every cp): cp adds nothing to it. */
Test(partitioner_model, llama_cp_formulas_agree_with_the_engine_plan)
{
    /* the tiny Llama of tests/test_cp_layouts.c: 4 heads of 16, 2 key/value heads, 512 positions */
    const char *json = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 4, "
                       "\"vocab_size\": 257, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5, "
                       "\"tie_word_embeddings\": false}";
    tri_model model;
    cr_assert_eq(tri_model_parse(&model, json, "tiny-llama"), TRI_OK, "%s", tri_error_message());
    tri_transformer m = tri_model_dims(&model);
    struct { int cp, tp, pp, dp; bool sp, det; int zero; tri_recompute rec; const char *type; } cases[] = {
        {2, 1, 1, 1, false, false, 0, TRI_RECOMPUTE_NONE, "all_gather"},
        {4, 1, 1, 1, false, false, 0, TRI_RECOMPUTE_NONE, "all_gather"},
        {2, 2, 1, 1, true, false, 1, TRI_RECOMPUTE_NONE, "all_gather"},
        {2, 1, 2, 1, false, false, 0, TRI_RECOMPUTE_NONE, "all_gather"},
        {2, 1, 1, 2, false, false, 3, TRI_RECOMPUTE_FULL, "all_gather"},
        {2, 1, 1, 1, false, false, 0, TRI_RECOMPUTE_NONE, "p2p"},
        {4, 1, 1, 1, false, false, 0, TRI_RECOMPUTE_NONE, "p2p"},
        {2, 2, 1, 1, true, false, 1, TRI_RECOMPUTE_NONE, "p2p"},
        {2, 1, 1, 2, false, true, 3, TRI_RECOMPUTE_NONE, "p2p"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_preview p, p1; /* the layout, and the same at cp 1 */
        for (int one = 0; one < 2; one++) {
            int cp = one ? 1 : cases[i].cp, n = cp * cases[i].tp * cases[i].pp * cases[i].dp;
            tri_layout_request r = {.num_gpus = n, .tp = cases[i].tp, .pp = cases[i].pp, .cp = cp,
                                    .cp_comm_type = cases[i].type, .micro_batch = 1, .global_batch = 2 * cases[i].dp,
                                    .seq_length = 512, .sequence_parallel = cases[i].sp, .zero_stage = cases[i].zero,
                                    .recompute = cases[i].rec, .deterministic = cases[i].det, .cpu = true,
                                    .first_layers = -1, .last_layers = -1};
            tri_train_layout l;
            cr_assert_eq(tri_layout_resolve(&m, &r, &l), TRI_OK, "%s", tri_error_message());
            tri_cluster c = cpu_cluster(n);
            cr_assert_eq(tri_preview_create(one ? &p1 : &p, &m, &l, &c, tri_model_preview_plan, &model), TRI_OK, "%s",
                         tri_error_message());
            cr_assert((one ? &p1 : &p)->from_engine_plan, "cp %d: the engine plans this layout", cp);
        }
        for (int s = 0; s < p.pp; s++) {
            double off = (p.model_total[s] - p.total[s]) / p.total[s];
            cr_expect(fabs(off) <= 0.05, "cp %d tp %d pp %d dp %d stage %d: formulas %.0f, plan %.0f", cases[i].cp,
                      cases[i].tp, cases[i].pp, cases[i].dp, s, p.model_total[s], p.total[s]);
            for (int k = 0; k < TRI_MEM_KINDS; k++) {
                double d = fabs(p.model_mem[s][k] - p.mem[s][k]);
                cr_expect(d <= 0.05 * p.mem[s][k] || d <= 0.01 * p.total[s],
                          "cp %d tp %d pp %d dp %d stage %d %s: formulas %.0f, engine plan %.0f", cases[i].cp,
                          cases[i].tp, cases[i].pp, cases[i].dp, s, kinds[k], p.model_mem[s][k], p.mem[s][k]);
            }
            double ws = p.mem[s][TRI_MEM_WORKSPACE] - p.model_mem[s][TRI_MEM_WORKSPACE];
            double ws1 = p1.mem[s][TRI_MEM_WORKSPACE] - p1.model_mem[s][TRI_MEM_WORKSPACE];
            cr_expect_eq(ws, ws1, "cp %d tp %d pp %d dp %d stage %d: the workspace formulas %.0f bytes under the "
                         "engine plan, at cp 1 %.0f", cases[i].cp, cases[i].tp, cases[i].pp, cases[i].dp, s, ws, ws1);
            cr_log_info("llama cp %d tp %d pp %d dp %d stage %d: formulas %+.4f%% of the engine plan, workspace "
                        "%.0f bytes under it (cp 1: %.0f)", cases[i].cp, cases[i].tp, cases[i].pp, cases[i].dp, s,
                        100 * off, ws, ws1);
        }
        tri_preview_destroy(&p);
        tri_preview_destroy(&p1);
    }
    tri_model_free(&model);
}
