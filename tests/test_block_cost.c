/* tests/test_block_cost.c - each family's answer for its block (partitioner/transformer.h
 * tri_block_cost, models/block_cost.h) against the closed forms, written here independently of it,
 * and against the family's own parameter list.
 *
 * The closed forms are the test oracle the partitioner once computed from flags:
 *   GPT-2 (Narayanan et al. 2021 eq. 3; Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2):
 *     parameters on a TP rank (12 C^2 + 7 C) / t + 6 C, of which 6 C whole (ln_1, ln_2, the two
 *     row-parallel biases); forward FLOPs 24 B T C^2 + 4 B T^2 C, the attention core's 4 B T^2 C;
 *     TP traffic two all-reduces of B T C each way, under sequence parallelism two all-gathers and two
 *     reduce-scatters forward, four and two backward;
 *   a Llama block (C, NH, NH_kv, HS, F): q|k|v C (Q / t + 2 max(KV / t, HS)), o Q C / t, SwiGLU
 *     3 C F / t, two RMSNorms 2 C; FLOPs 2 B T (C (Q + 2 KV) + Q C + 3 C F) + 4 B T^2 Q; kept
 *     e (4 N_l C + N (2 Q_l + 2 KV_l + 3 F_l)) + 8 N_l + 4 (NH / t) T B with the fused attention.
 * The activation bytes of GPT-2 against Korthikanti's Table 2 are tests/test_partitioner_model.c's,
 * and both families' memory formulas against the engine's exact plan too. Parameters, the whole
 * ones and the tensor count are also held against the family's parameter list of one block (every
 * spec of a chunk holding block 0 alone, its shard on TP rank 0), which is exact by construction. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/model.h"
#include "partitioner/flops.h"
#include "partitioner/memory_model.h"
#include "partitioner/traffic.h"
#include "tests/gpt_outline.h"
#include "tests/testutil.h"

static void load(tri_model *m, const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.json", name);
    cr_assert_eq(tri_model_load(m, tu_source_path(rel)), TRI_OK, "%s", tri_error_message());
}

static void parse(tri_model *m, const char *json)
{
    cr_assert_eq(tri_model_parse(m, json, "test"), TRI_OK, "%s", tri_error_message());
}

static tri_train_layout layout(int tp, bool sp, int64_t B, int64_t T, tri_precision p, tri_attention_backend a,
                               tri_recompute r)
{
    return (tri_train_layout){.tp = tp, .pp = 1, .dp = 1, .v = 1, .B = B, .T = T, .sequence_parallel = sp,
                              .precision = p, .attention = a, .recompute = r, .n_micro = 1};
}

/* The block's parameters on TP rank 0 from the family's list for a chunk of block 0 alone: *whole
 * of them replicated, *tensors how many. */
static double listed_params(const tri_model *m, int tp, double *whole, int *tensors)
{
    tri_param_spec *specs = NULL;
    int n = 0;
    tri_chunk_place block0 = {.layer_start = 0, .layer_end = 1, .n_slots = 1};
    cr_assert_eq(m->family->param_specs(m->cfg, tp, &block0, &specs, &n), TRI_OK, "%s", tri_error_message());
    double local = 0.0;
    *whole = 0.0;
    for (int i = 0; i < n; i++) {
        double numel = 1.0;
        for (int d = 0; d < specs[i].ndim; d++)
            numel *= (double)specs[i].shape[d];
        if (specs[i].split_dim < 0) {
            *whole += numel;
            local += numel;
            continue;
        }
        int shards = specs[i].max_shards > 0 && specs[i].max_shards < tp ? specs[i].max_shards : tp;
        local += numel / shards;
    }
    *tensors = n;
    free(specs);
    return local;
}

static void expect_params_listed(const tri_model *m, int tp)
{
    tri_transformer d = tri_model_dims(m);
    tri_train_layout l = layout(tp, false, 1, 8, TRI_PRECISION_FP32, TRI_ATTENTION_FLASH, TRI_RECOMPUTE_NONE);
    tri_block_cost b = tri_transformer_block(&d, &l);
    double whole = 0.0;
    int tensors = 0;
    double listed = listed_params(m, tp, &whole, &tensors);
    cr_expect_eq(b.params, listed, "%s at tp %d: the block states %.0f parameters, its list holds %.0f",
                 tri_model_name(m), tp, b.params, listed);
    cr_expect_eq(b.replicated, whole, "%s at tp %d: %.0f whole, listed %.0f", tri_model_name(m), tp, b.replicated,
                 whole);
    cr_expect_eq(b.tensors, tensors, "%s: %d tensors, listed %d", tri_model_name(m), b.tensors, tensors);
}

Test(block_cost, parameters_equal_the_family_list)
{
    const char *names[] = {"gpt2",        "gpt2-tiny-byte", "llama-3.1-8b", "llama-tiny-byte",
                           "smollm-135m", "qwen3-0.6b",     "qwen3-tiny-byte"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        tri_model m;
        load(&m, names[i]);
        for (int tp = 1; tp <= 8; tp *= 2)
            if (tri_model_dims(&m).n_head % tp == 0)
                expect_params_listed(&m, tp);
        tri_model_free(&m);
    }
    /* biases on, and one key/value head replicated over tp > 1 */
    tri_model m;
    parse(&m, "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_attention_heads\": 4, "
              "\"num_key_value_heads\": 1, \"num_hidden_layers\": 2, \"vocab_size\": 300, "
              "\"max_position_embeddings\": 64, \"attention_bias\": true, \"mlp_bias\": true}");
    for (int tp = 1; tp <= 4; tp *= 2)
        expect_params_listed(&m, tp);
    tri_model_free(&m);
}

/* The test's GPT-2 outline (tests/gpt_outline.h) is the family's. */
TU_GPT_MODEL(GPT2, 12, 12, 768, 50257, 1024);

Test(block_cost, gpt_outline_is_the_family_outline)
{
    tri_transformer d = tri_gpt_dims(&GPT2_config);
    cr_expect(d.n_layer == GPT2.n_layer && d.n_head == GPT2.n_head && d.n_embd == GPT2.n_embd &&
              d.vocab_size == GPT2.vocab_size && d.n_positions == GPT2.n_positions && d.n_kv_head == GPT2.n_kv_head &&
              d.position_table == GPT2.position_table && d.final_norm == GPT2.final_norm &&
              d.untied_head == GPT2.untied_head && d.block_cost == GPT2.block_cost && d.cfg == GPT2.cfg &&
              strcmp(d.block_text, GPT2.block_text) == 0);
}

Test(block_cost, gpt2_closed_forms)
{
    double C = 768, B = 4, T = 1024, N = B * T;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int sp = 0; sp < 2; sp++) {
            if (sp && tp == 1)
                continue;
            tri_train_layout l = layout(tp, sp, 4, 1024, TRI_PRECISION_BF16, TRI_ATTENTION_FLASH, TRI_RECOMPUTE_NONE);
            tri_block_cost b = tri_transformer_block(&GPT2, &l);
            cr_expect_eq(b.params, (12 * C * C + 7 * C) / tp + 6 * C, "tp %d: %.0f", tp, b.params);
            cr_expect_eq(b.replicated, 6 * C);
            cr_expect_eq(b.tensors, 12);
            cr_expect_eq(b.fwd_flops, 24 * B * T * C * C + 4 * B * T * T * C);
            cr_expect_eq(b.core_flops, 4 * B * T * T * C);
            int64_t c = 768, linear[4][2] = {{c, 3 * c / tp}, {c / tp, c}, {c, 4 * c / tp}, {4 * c / tp, c}};
            cr_assert_eq(b.n_linear, 4);
            for (int i = 0; i < 4; i++)
                cr_expect(b.linear[i][0] == linear[i][0] && b.linear[i][1] == linear[i][1], "tp %d: matmul %d is %lld -> %lld",
                          tp, i, (long long)b.linear[i][0], (long long)b.linear[i][1]);
            double act = N * C, fwd[TRI_COMM_KINDS] = {0}, bwd[TRI_COMM_KINDS] = {0};
            if (tp > 1 && !sp) {
                fwd[TRI_COMM_ALL_REDUCE] = bwd[TRI_COMM_ALL_REDUCE] = 2 * act;
            } else if (tp > 1) {
                fwd[TRI_COMM_ALL_GATHER] = fwd[TRI_COMM_REDUCE_SCATTER] = 2 * act;
                bwd[TRI_COMM_ALL_GATHER] = 4 * act;
                bwd[TRI_COMM_REDUCE_SCATTER] = 2 * act;
            }
            for (int k = 0; k < TRI_COMM_KINDS; k++)
                cr_expect(b.tp_fwd[k] == fwd[k] && b.tp_bwd[k] == bwd[k], "tp %d sp %d kind %d: %.0f / %.0f, want "
                          "%.0f / %.0f", tp, sp, k, b.tp_fwd[k], b.tp_bwd[k], fwd[k], bwd[k]);
            cr_expect_eq(b.comm, sp ? 2 * 2 * N * C : 0.0, "sequence parallelism's two gathered inputs (bf16)");
        }
    /* Narayanan et al. eq. 3 from the blocks: 72 B s l h^2 (1 + s / (6h) + V / (12 l h)) */
    double l = 12, V = 50257, eq3 = 72 * B * T * l * C * C * (1 + T / (6 * C) + V / (12 * l * C));
    cr_expect_float_eq(tri_iteration_flops(&GPT2, 4, 1024, false), eq3, 1e-12 * eq3);
}

Test(block_cost, llama_closed_forms)
{
    tri_model m;
    load(&m, "llama-3.1-8b");
    tri_transformer d = tri_model_dims(&m);
    double C = 4096, NH = 32, KVH = 8, HS = 128, F = 14336, Q = NH * HS, KV = KVH * HS, B = 1, T = 8192, N = B * T;
    for (int tp = 1; tp <= 16; tp *= 2)
        for (int sp = 0; sp < 2; sp++) {
            if ((sp && tp == 1) || (int)NH % tp)
                continue;
            tri_train_layout l = layout(tp, sp, 1, 8192, TRI_PRECISION_BF16, TRI_ATTENTION_FLASH, TRI_RECOMPUTE_NONE);
            tri_block_cost b = tri_transformer_block(&d, &l);
            double KV_l = KV / tp > HS ? KV / tp : HS, Q_l = Q / tp, F_l = F / tp, N_l = sp ? N / tp : N;
            cr_expect_eq(b.params, C * (Q_l + 2 * KV_l) + Q_l * C + 3 * C * F_l + 2 * C, "tp %d: %.0f", tp, b.params);
            cr_expect_eq(b.replicated, 2 * C);
            cr_expect_eq(b.tensors, 9);
            cr_expect_eq(b.fwd_flops, 2 * N * (C * (Q + 2 * KV) + Q * C + 3 * C * F) + 4 * N * T * Q);
            double linear[4][2] = {{C, Q_l + 2 * KV_l}, {Q_l, C}, {C, 2 * F_l}, {F_l, C}};  /* q|k|v, o, [gate | up], down */
            cr_assert_eq(b.n_linear, 4);
            for (int i = 0; i < 4; i++)
                cr_expect(b.linear[i][0] == linear[i][0] && b.linear[i][1] == linear[i][1], "tp %d: matmul %d", tp, i);
            double kept = 2 * (4 * N_l * C + N * (2 * Q_l + 2 * KV_l + 3 * F_l)) + 8 * N_l + 4 * NH / tp * T * B;
            cr_expect_eq(b.kept, kept, "tp %d sp %d: kept %.0f, want %.0f", tp, sp, b.kept, kept);
            /* rotary tables and the fused backward's row statistics in the workspace */
            double work = 2 * (2 * N_l * C + N * (2 * Q_l + 2 * KV_l + 3 * F_l)) + 4 * B * NH / tp * T + 4 * T * HS;
            cr_expect_eq(b.work, work, "tp %d sp %d: work %.0f, want %.0f", tp, sp, b.work, work);
            l.recompute = TRI_RECOMPUTE_FULL;
            tri_block_cost full = tri_transformer_block(&d, &l);
            cr_expect_eq(full.kept, 2 * N_l * C, "full recomputation keeps the block's input");
            cr_expect_eq(full.recompute, kept, "and rebuilds one block's activations");
        }
    tri_model_free(&m);
}

/* The memory formulas, the FLOPs and the traffic compose the block's answers: a model whose block
 * states twice the costs plans twice the block terms, with nothing in partitioner/ knowing why. */
static void doubled_gpt(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    tri_gpt_block_cost(cfg, l, out);
    out->params *= 2;
    out->replicated *= 2;
    out->tensors *= 2;
    out->fwd_flops *= 2;
    out->core_flops *= 2;
    out->kept *= 2;
    for (int k = 0; k < TRI_COMM_KINDS; k++) {
        out->tp_fwd[k] *= 2;
        out->tp_bwd[k] *= 2;
    }
}

Test(block_cost, the_partitioner_composes_what_the_family_states)
{
    tri_transformer twice = GPT2;
    twice.block_cost = doubled_gpt;
    tri_train_layout l = layout(2, false, 4, 1024, TRI_PRECISION_FP32, TRI_ATTENTION_FLASH, TRI_RECOMPUTE_NONE);
    tri_stage_place mid = {.layer_start = 2, .layer_end = 5};
    double d_acts = tri_mem_chunk_activations(&twice, &l, &mid) - tri_mem_chunk_activations(&GPT2, &l, &mid);
    cr_expect_eq(d_acts, 3 * tri_mem_block_activations(&GPT2, &l));
    double d_params = tri_mem_chunk_params(&twice, &l, &mid, 4) - tri_mem_chunk_params(&GPT2, &l, &mid, 4);
    cr_expect_eq(d_params, 3 * tri_transformer_block(&GPT2, &l).params);
    double d_flops = tri_iteration_flops(&twice, 4, 1024, false) - tri_iteration_flops(&GPT2, 4, 1024, false);
    cr_expect_eq(d_flops, 3 * 12 * tri_transformer_block(&GPT2, &l).fwd_flops);  /* 3 passes, 12 blocks */
    tri_layout_shape s = {.tp = 2, .pp = 1, .dp = 1, .B = 4, .T = 1024, .n_micro = 1};
    uint64_t f1[TRI_COMM_KINDS], b1[TRI_COMM_KINDS], f2[TRI_COMM_KINDS], b2[TRI_COMM_KINDS];
    tri_tp_microbatch_traffic(&GPT2, &s, &mid, 4, f1, b1);
    tri_tp_microbatch_traffic(&twice, &s, &mid, 4, f2, b2);
    cr_expect_eq(f2[TRI_COMM_ALL_REDUCE] - f1[TRI_COMM_ALL_REDUCE], 3ull * 2 * 4 * 1024 * 768 * 4);
    cr_expect_eq(tri_transformer_tensors(&twice) - tri_transformer_tensors(&GPT2), 12 * 12);
}
