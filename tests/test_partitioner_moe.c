/* tests/test_partitioner_moe.c - the partitioner plans mixture-of-experts models (docs/moe.md
 * "Expert parallelism in the layout and the partitioner").
 *
 * Hand-built MoE blocks (models/block_cost.h tri_decoder_block, sparse) with the published shapes
 * give the published total and active parameter counts (Mixtral 8x7B, Jiang et al. 2024: 46.7B /
 * 12.9B; Qwen3-30B-A3B: 30.5B / 3.3B; Qwen3-235B-A22B: 235B / 22B) and equal an independent int64
 * count; a rank's parameters follow the parallel folding (E / ep experts, / etp); the activation and
 * backward bytes are what layers/moe.c allocates (tri_moe_acts_bytes / tri_moe_scratch_bytes) for
 * the rank's shape; the all-to-all volume equals a direct count over a uniform routing; a dense layer
 * among sparse ones (Qwen3-MoE's decoder_sparse_step) plans exactly; the validator refuses each
 * broken rule naming it, its flag and values; ZeRO shards expert state over edp, and the data-parallel
 * time takes the experts' collectives over edp; the search picks an ep, and an etp > 1 where it pays. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/status.h"
#include "layers/moe.h"
#include "layers/moe_etp.h"
#include "models/block_cost.h"
#include "models/model.h"
#include "partitioner/constraints.h"
#include "partitioner/hardware.h"
#include "partitioner/memory_model.h"
#include "partitioner/search.h"
#include "partitioner/time_model.h"
#include "partitioner/traffic.h"
#include "tests/testutil.h"

/* A hand-built MoE decoder: its sparse block, and which layers are sparse (every sparse_step-th). */
typedef struct moe_model {
    tri_decoder_block sparse;   /* the MoE block */
    int sparse_step;            /* Qwen3-MoE's decoder_sparse_step (1: all) */
} moe_model;

static void block_at(const void *cfg, const tri_train_layout *l, int layer, tri_block_cost *out)
{
    const moe_model *mm = cfg;
    tri_decoder_block b = mm->sparse;
    if ((layer + 1) % mm->sparse_step != 0) {   /* a dense SwiGLU of width F */
        b.sparse = false;
        b.tensors = 9;
    }
    tri_decoder_block_cost(&b, l, out);
}

static void block(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    tri_decoder_block_cost(&((const moe_model *)cfg)->sparse, l, out);
}

/* Llama-style (RMSNorm, rotary, untied head, no biases) MoE decoder of L layers. */
static tri_transformer moe_dims(moe_model *mm, int64_t L, int64_t C, int64_t NH, int64_t NH_kv, int64_t HS, int64_t E,
                                int64_t K, int64_t I, int64_t F, int64_t V, int step)
{
    mm->sparse = (tri_decoder_block){.C = C, .NH = NH, .NH_kv = NH_kv, .HS = HS, .F = F, .gated_mlp = true,
                                     .norm = TRI_NORM_RMSNORM, .rotary = true, .tensors = 7 + 3, .sparse = true,
                                     .E = E, .K = K, .I = I};
    mm->sparse_step = step;
    return (tri_transformer){.n_layer = L, .n_head = NH, .n_embd = C, .vocab_size = V, .n_positions = 32768,
                             .n_kv_head = NH_kv, .n_experts = E, .experts_per_tok = K, .expert_ffn = I,
                             .final_norm = TRI_NORM_RMSNORM, .untied_head = true, .fused_attention_only = true,
                             .block_cost = block, .block_cost_at = block_at, .cfg = mm};
}

/* The published count by hand (int64): embedding and head V C each, the final norm C, per layer two
 * norms 2 C, q|k|v|o C (2 Q + 2 KV), the router E C and the experts 3 C I each (E of them, or K active). */
static int64_t by_hand(int64_t L, int64_t C, int64_t NH, int64_t NH_kv, int64_t HS, int64_t E, int64_t K, int64_t I,
                       int64_t V, bool active)
{
    int64_t attn = C * (2 * NH * HS + 2 * NH_kv * HS);
    return 2 * V * C + C + L * (2 * C + attn + E * C + (active ? K : E) * 3 * C * I);
}

static void published(const char *name, int64_t L, int64_t C, int64_t NH, int64_t NH_kv, int64_t HS, int64_t E,
                      int64_t K, int64_t I, int64_t V, double total_pub, double active_pub, double unit)
{
    moe_model mm;
    tri_transformer m = moe_dims(&mm, L, C, NH, NH_kv, HS, E, K, I, 0, V, 1);
    double total, active;
    tri_transformer_params(&m, &total, &active);
    cr_expect_eq(total, (double)by_hand(L, C, NH, NH_kv, HS, E, K, I, V, false), "%s total %.0f", name, total);
    cr_expect_eq(active, (double)by_hand(L, C, NH, NH_kv, HS, E, K, I, V, true), "%s active %.0f", name, active);
    /* the published precision: `unit` (0.1B or 1B), rounded (Mistral: 12.88 -> 12.9) or truncated
       (Qwen: 3.353 -> 3.3 activated) */
    cr_expect(round(total / unit) * unit == total_pub || floor(total / unit) * unit == total_pub,
              "%s: %.4gB total, published %.4gB", name, total / 1e9, total_pub / 1e9);
    cr_expect(round(active / unit) * unit == active_pub || floor(active / unit) * unit == active_pub,
              "%s: %.4gB active, published %.4gB", name, active / 1e9, active_pub / 1e9);
    cr_log_info("%s: %.4gB total, %.4gB active", name, total / 1e9, active / 1e9);
}

Test(partitioner_moe, published_total_and_active_parameters)
{
    /* config.json of mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B (qk-norm's
       2 HS per layer left out: 12k and 24k parameters, below the published precision) */
    published("Mixtral 8x7B", 32, 4096, 32, 8, 128, 8, 2, 14336, 32000, 46.7e9, 12.9e9, 1e8);
    published("Qwen3-30B-A3B", 48, 2048, 32, 4, 128, 128, 8, 768, 151936, 30.5e9, 3.3e9, 1e8);
    published("Qwen3-235B-A22B", 94, 4096, 64, 4, 128, 128, 8, 1536, 151936, 235e9, 22e9, 1e9);
}

/* A dense family's total = active = its own parameter count (the family's list). */
Test(partitioner_moe, dense_families_total_equals_active_equals_their_count)
{
    const char *names[] = {"gpt2", "llama-3.1-8b", "llama-3.2-1b"};
    for (int i = 0; i < 3; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s.json", names[i]);
        tri_model m;
        cr_assert_eq(tri_model_load(&m, tu_source_path(rel)), TRI_OK, "%s", tri_error_message());
        tri_transformer d = tri_model_dims(&m);
        double total, active;
        tri_transformer_params(&d, &total, &active);
        double count = (double)m.family->num_params(m.cfg);
        cr_expect_eq(total, count, "%s: %.0f, the family counts %.0f", names[i], total, count);
        cr_expect_eq(active, total, "%s: dense", names[i]);
        tri_model_free(&m);
    }
}

/* A rank under parallel folding holds the attention / tp, the router whole, E / ep experts / etp;
 * the model FLOPs count the active parameters only. */
Test(partitioner_moe, rank_parameters_and_active_flops)
{
    moe_model mm;
    const int64_t C = 4096, E = 8, K = 2, I = 14336, Q = 4096, KV = 1024;
    moe_dims(&mm, 32, C, 32, 8, 128, E, K, I, 0, 32000, 1);
    mm.sparse.I_shared = 2048;
    tri_train_layout l = {.tp = 2, .pp = 1, .dp = 4, .ep = 4, .etp = 2, .sequence_parallel = true, .B = 2, .T = 64};
    tri_block_cost b;
    tri_decoder_block_cost(&mm.sparse, &l, &b);
    double attn_l = (double)C * (Q + 2 * KV) / 2 + (double)Q / 2 * C, shared_l = 3.0 * C * 2048 / 2;
    double experts_l = (double)(E / 4) * 3.0 * C * I / 2;
    cr_expect_eq(b.expert_params, experts_l);
    cr_expect_eq(b.params, attn_l + 2.0 * C + (double)E * C + shared_l + experts_l);
    cr_expect_eq(b.replicated, 2.0 * C + (double)E * C, "the norms and the router");
    double attn = (double)C * (2 * Q + 2 * KV), shared = 3.0 * C * 2048;
    cr_expect_eq(b.total_params, attn + 2.0 * C + (double)E * C + shared + (double)E * 3 * C * I);
    cr_expect_eq(b.active_params, attn + 2.0 * C + (double)E * C + shared + (double)K * 3 * C * I);
    double N = 2.0 * 64;
    cr_expect_eq(b.fwd_flops, 2.0 * N * (attn + (double)E * C + shared + (double)K * 3 * C * I) + 4.0 * N * 64 * Q,
                 "6 x active parameters x tokens per pass of three, plus the attention core");
    cr_expect_eq(tri_expert_dp(&l), 1, "tp 2 x dp 4 = etp 2 x ep 4 x edp 1");
}

/* Planned = allocated: the sparse block's kept activations and backward transients are the dense
 * formula without the MLP plus exactly what layers/moe.c binds for the rank's shape. */
Test(partitioner_moe, activations_are_what_the_moe_layer_allocates)
{
    moe_model mm;
    const int64_t C = 64, NH = 4, KV = 2, HS = 16, B = 2, T = 24;
    moe_dims(&mm, 2, C, NH, KV, HS, 8, 2, 48, 0, 256, 1);
    for (int sh = 0; sh < 2; sh++) {
        mm.sparse.I_shared = sh ? 32 : 0;
        int ep_etp[3][2] = {{1, 1}, {2, 1}, {2, 2}};
        for (int i = 0; i < 3; i++) {
            tri_train_layout l = {.tp = 1, .pp = 1, .dp = 4, .ep = ep_etp[i][0], .etp = ep_etp[i][1], .B = B, .T = T};
            tri_block_cost b;
            tri_decoder_block_cost(&mm.sparse, &l, &b);
            double N = (double)(B * T), etp = ep_etp[i][1];
            tri_moe_shape s = {.N = B * T, .C = C, .E = 8, .K = 2, .I = 48 / ep_etp[i][1],
                               .I_shared = mm.sparse.I_shared};
            size_t acts = tri_moe_acts_bytes(&s), scratch = tri_moe_scratch_bytes(&s);
            cr_assert_gt(acts, 0);
            if (ep_etp[i][1] > 1) { /* the etp group's gathered rows (layers/moe_etp.h) */
                acts += tri_moe_etp_acts_bytes(&s, ep_etp[i][0], ep_etp[i][1]);
                scratch += tri_moe_etp_scratch_bytes(&s, ep_etp[i][0], ep_etp[i][1]);
            } else if (ep_etp[i][0] > 1) { /* the rows received from the ep group (layers/moe_ep.h) */
                acts += tri_moe_ep_acts_bytes(&s, ep_etp[i][0]);
                scratch += tri_moe_ep_scratch_bytes(&s, ep_etp[i][0]);
            }
            double q = (double)NH * HS, kv = (double)KV * HS;
            double kept = 4.0 * (4.0 * N * C + N * (2.0 * q + 2.0 * kv)) + 4.0 * 2.0 * N + 4.0 * NH * T * B +
                          (double)acts;
            double work = 4.0 * (2.0 * N * C + N * (2.0 * q + 2.0 * kv)) + 4.0 * B * NH * T + 4.0 * T * HS +
                          (double)scratch;
            cr_expect_eq(b.kept, kept, "shared %d ep %d etp %.0f: kept %.0f, expected %.0f", sh, ep_etp[i][0], etp,
                         b.kept, kept);
            cr_expect_eq(b.work, work, "shared %d ep %d: work %.0f, expected %.0f", sh, ep_etp[i][0], b.work, work);
            tri_moe_shape planned = tri_moe_block_shape(&mm.sparse, &l);
            cr_expect(planned.N == s.N && planned.C == s.C && planned.E == s.E && planned.K == s.K &&
                          planned.I == s.I && planned.I_shared == s.I_shared && planned.dtype == TRI_F32,
                      "the rank's shape"); /* fields: the struct has padding after dtype */
        }
    }
}

/* The rows an ep rank receives at most (layers/moe_ep.h tri_moe_ep_max_rows), by hand: from each of ep
 * sources N min(K, E_l) dropless (a token sends one copy to each of its K distinct experts, so at most
 * E_l of them land on one rank), E_l capacity with a capacity, whichever is less; and the sparse block
 * plans exactly the buffers of that many rows, the deterministic mode's fp32 copy of one source's expert
 * GEMMs (E_l 3 I C) and the expert bias (E fp32 a layer, replicated; its E int32 counts once a chunk, one
 * arena take). */
Test(partitioner_moe, expert_parallel_receive_buffers_follow_the_capacity)
{
    struct { int64_t N, E, K; int ep; int64_t cap, rows; } cases[] = {
        {64, 8, 2, 2, 0, 2 * 64 * 2},     /* dropless: every source's N K */
        {64, 8, 2, 8, 0, 8 * 64},         /* E_l 1 < K: one copy of each token */
        {64, 8, 4, 4, 0, 4 * 64 * 2},     /* E_l 2 < K 4 */
        {64, 8, 2, 2, 16, 2 * 4 * 16},    /* the capacity binds: E_l 4 x 16 < N K 128 */
        {64, 8, 2, 2, 40, 2 * 64 * 2},    /* it does not: 4 x 40 > 128 */
        {64, 8, 2, 4, 100, 4 * 64 * 2},   /* capacity above N */
        {64, 8, 2, 1, 16, 8 * 16},        /* ep 1: the E experts' capacities */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_moe_shape s = {.N = cases[i].N, .C = 16, .E = cases[i].E, .K = cases[i].K, .I = 8,
                           .capacity = cases[i].cap};
        cr_expect_eq(tri_moe_ep_max_rows(&s, cases[i].ep), cases[i].rows, "N %lld E %lld K %lld ep %d capacity %lld: "
                     "%lld rows, by hand %lld", (long long)s.N, (long long)s.E, (long long)s.K, cases[i].ep,
                     (long long)s.capacity, (long long)tri_moe_ep_max_rows(&s, cases[i].ep), (long long)cases[i].rows);
        /* x, gate|up, h kept and o, dh, dgate|up scratch, fp32 (sizes already 64-byte multiples) */
        cr_expect_eq(tri_moe_ep_acts_bytes(&s, cases[i].ep), (size_t)(4 * cases[i].rows * (16 + 3 * 8)));
        cr_expect_eq(tri_moe_ep_scratch_bytes(&s, cases[i].ep), (size_t)(4 * cases[i].rows * (16 + 3 * 8)));
    }
    tri_moe_shape bad = {.N = 64, .C = 16, .E = 8, .K = 2, .I = 8};
    cr_expect_eq(tri_moe_ep_max_rows(&bad, 3), 0, "ep 3 does not divide 8 experts");

    moe_model mm;
    const int64_t C = 64, E = 8, K = 2, I = 48, B = 2, T = 32, N = B * T;
    moe_dims(&mm, 2, C, 4, 2, 16, E, K, I, 0, 256, 1);
    tri_train_layout l = {.tp = 1, .pp = 1, .dp = 4, .ep = 4, .etp = 1, .B = B, .T = T};
    tri_block_cost dropless, capped, det, bias;
    tri_decoder_block_cost(&mm.sparse, &l, &dropless);
    l.moe.capacity_factor = 1.0f;   /* capacity N K / E = 16 an expert, E_l 2: 32 rows a source, not 64 */
    tri_decoder_block_cost(&mm.sparse, &l, &capped);
    double rows_saved = 4.0 * (N * 2 - 2 * 16);
    cr_expect_eq(dropless.kept - capped.kept, 4.0 * rows_saved * (C + 3 * I), "kept: x, gate|up, h of the rows saved");
    cr_expect_eq(dropless.work - capped.work, 4.0 * rows_saved * (C + 3 * I), "work: o, dh, dgate|up");
    l.moe.capacity_factor = 0.0f;
    l.deterministic = true;
    tri_decoder_block_cost(&mm.sparse, &l, &det);
    /* deterministic mode adds no block scratch: the experts' GEMMs add into the pass's int64 bucket through
       the chunk's exact scratch (engine/train/zero.c exact_tmp), a trainer buffer */
    cr_expect_eq(det.work, dropless.work, "deterministic mode: no expert scratch of its own");
    l.deterministic = false;
    l.moe.expert_bias = true;
    tri_decoder_block_cost(&mm.sparse, &l, &bias);
    cr_expect_eq(bias.buffers, 4.0 * E, "the bias, E fp32");
    cr_expect_eq(dropless.buffers, 0.0);
    cr_expect_eq(bias.work - dropless.work, 256.0, "E int32 counts, one 256-byte arena take");
    cr_expect_eq(bias.params, dropless.params, "the bias is no parameter");
}

/* Under tp 2 with sequence parallelism a rank routes its N / tp tokens; the tensor-parallel shared
 * expert (N tokens, I_s / tp) is planned beside the layer's shape; without a shared expert the MLP's
 * TP collectives go (the routed tokens are the rank's own), the attention's stay. */
Test(partitioner_moe, sequence_parallel_rank_shape_and_tp_traffic)
{
    moe_model mm;
    const int64_t C = 64, NH = 4, KV = 2, HS = 16, B = 2, T = 24, tp = 2;
    moe_dims(&mm, 2, C, NH, KV, HS, 8, 2, 48, 0, 256, 1);
    mm.sparse.I_shared = 32;
    tri_train_layout l = {.tp = tp, .pp = 1, .dp = 2, .ep = 2, .etp = 1, .sequence_parallel = true, .B = B, .T = T};
    tri_block_cost b;
    tri_decoder_block_cost(&mm.sparse, &l, &b);
    double N = (double)(B * T), N_l = N / tp, q = (double)NH * HS / tp, kv = (double)KV * HS / tp;
    tri_moe_shape s = {.N = B * T / tp, .C = C, .E = 8, .K = 2, .I = 48, .I_shared = 0, .sp = tp};
    double kept = 4.0 * (4.0 * N_l * C + N * (2.0 * q + 2.0 * kv)) + 4.0 * 2.0 * N_l + 4.0 * (NH / tp) * T * B +
                  (double)tri_moe_acts_bytes(&s) + (double)tri_moe_ep_acts_bytes(&s, 2) + 4.0 * N * 3.0 * 32 / tp;
    cr_expect_eq(b.kept, kept, "kept %.0f, expected %.0f", b.kept, kept);
    cr_expect_eq(b.tp_fwd[TRI_COMM_ALL_GATHER], 2.0 * N * C, "attention and shared expert inputs");
    cr_expect_eq(b.ep_fwd[TRI_COMM_ALL_TO_ALL], 2.0 * N_l * 2 * C * 1 / 2, "the rank's N / tp tokens, K 2, ep 2");
    mm.sparse.I_shared = 0;
    tri_decoder_block_cost(&mm.sparse, &l, &b);
    cr_expect_eq(b.tp_fwd[TRI_COMM_ALL_GATHER], 1.0 * N * C, "the attention's input only");
    cr_expect_eq(b.tp_fwd[TRI_COMM_REDUCE_SCATTER], 1.0 * N * C);
    cr_expect_eq(b.tp_bwd[TRI_COMM_ALL_GATHER], 2.0 * N * C);
    /* the decoder's two N x C gather buffers (models/model_chunk.c take_scratch) whatever the MLP: the
     * engine's plan, which test_partitioner_model's tp 2 ZeRO 3 comm category compares */
    cr_expect_eq(b.comm, 2.0 * 4.0 * N * C, "both gather buffers");
}

/* The all-to-all formula against a direct count: a routing where token n's k-th choice is expert
 * (n K + k) mod E loads every expert equally on every rank (uniform routing); the rows whose expert
 * lives on another ep rank (owner e / E_l) are sent in the dispatch and come back in the combine. */
Test(partitioner_moe, all_to_all_volume_matches_a_direct_count)
{
    moe_model mm;
    const int64_t C = 64, E = 8, K = 2, B = 2, T = 16;
    tri_transformer m = moe_dims(&mm, 3, C, 4, 4, 16, E, K, 32, 0, 256, 1);
    for (int ep = 1; ep <= 8; ep *= 2) {
        tri_train_layout l = {.tp = 1, .pp = 1, .dp = 8, .ep = ep, .etp = 1, .B = B, .T = T, .n_micro = 1};
        int64_t El = E / ep, off = 0;
        for (int rank = 0; rank < ep; rank++)          /* count rank `rank`'s rows leaving it */
            for (int64_t n = 0; n < B * T; n++)
                for (int64_t k = 0; k < K; k++)
                    off += ((n * K + k) % E) / El != rank;
        double per_rank = (double)off / ep;           /* the same on every rank */
        tri_block_cost b;
        tri_decoder_block_cost(&mm.sparse, &l, &b);
        cr_expect_eq(b.ep_fwd[TRI_COMM_ALL_TO_ALL], 2.0 * per_rank * C, "ep %d: dispatch + combine", ep);
        cr_expect_eq(b.ep_bwd[TRI_COMM_ALL_TO_ALL], 2.0 * per_rank * C, "ep %d: their gradients", ep);
        cr_expect_eq(b.ep_fwd[TRI_COMM_ALL_TO_ALL], 2.0 * (double)(B * T * K * C) * (ep - 1) / ep, "the formula");
        tri_stage_place all = {.layer_start = 0, .layer_end = 3, .first = true, .last = true};
        uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
        tri_ep_microbatch_traffic(&m, &l, &all, 4, fwd, bwd);
        cr_expect_eq(fwd[TRI_COMM_ALL_TO_ALL], (uint64_t)(3 * 4 * 2 * off / ep * C), "three layers, fp32 bytes");
        cr_expect_eq(bwd[TRI_COMM_ALL_TO_ALL], fwd[TRI_COMM_ALL_TO_ALL]);
    }
}

/* Qwen3-MoE's decoder_sparse_step 2: odd layers dense. Totals and a stage's parameters and
 * activations are the per-layer sums, not L x the sparse block. */
Test(partitioner_moe, dense_layers_among_sparse_ones_plan_exactly)
{
    moe_model mm;
    tri_transformer m = moe_dims(&mm, 4, 64, 4, 4, 16, 8, 2, 32, 96, 256, 2);
    tri_train_layout l = {.tp = 1, .pp = 1, .dp = 1, .ep = 1, .etp = 1, .B = 1, .T = 8};
    tri_block_cost sparse, dense;
    tri_decoder_block_cost(&mm.sparse, &l, &sparse);
    tri_decoder_block d = mm.sparse;
    d.sparse = false;
    d.tensors = 9;
    tri_decoder_block_cost(&d, &l, &dense);
    cr_expect_eq(dense.params, 2.0 * 64 + 4.0 * 64 * 64 + 3.0 * 64 * 96, "the dense SwiGLU block");
    tri_block_cost all = tri_transformer_blocks(&m, &l, 0, 4);
    cr_expect_eq(all.params, 2 * sparse.params + 2 * dense.params);
    cr_expect_eq(all.kept, 2 * sparse.kept + 2 * dense.kept);
    cr_expect_eq(all.fwd_flops, 2 * sparse.fwd_flops + 2 * dense.fwd_flops);
    tri_stage_place first = {.layer_start = 0, .layer_end = 1, .first = true};
    cr_expect_eq(tri_mem_chunk_params(&m, &l, &first, 1), dense.params + 256.0 * 64, "layer 0 is dense");
    double total, active;
    tri_transformer_params(&m, &total, &active);
    cr_expect_eq(total, 2 * sparse.total_params + 2 * dense.total_params + 2.0 * 256 * 64 + 64);
}

static tri_train_layout resolve_ok(const tri_transformer *m, int gpus, int tp, int ep, int etp, bool sp)
{
    tri_layout_request r = {.num_gpus = gpus, .tp = tp, .pp = 1, .ep = ep, .etp = etp, .micro_batch = 1,
                            .seq_length = 64, .sequence_parallel = sp, .first_layers = -1, .last_layers = -1};
    tri_train_layout l;
    cr_assert_eq(tri_layout_resolve(m, &r, &l), TRI_OK, "%s", tri_error_message());
    return l;
}

static void refused(const tri_transformer *m, int gpus, int tp, int ep, int etp, bool sp, const char *a, const char *b)
{
    tri_layout_request r = {.num_gpus = gpus, .tp = tp, .pp = 1, .ep = ep, .etp = etp, .micro_batch = 1,
                            .seq_length = 64, .sequence_parallel = sp, .first_layers = -1, .last_layers = -1};
    tri_train_layout l;
    cr_expect_eq(tri_layout_resolve(m, &r, &l), TRI_EINVAL, "tp %d ep %d etp %d on %d accepted", tp, ep, etp, gpus);
    cr_expect(strstr(tri_error_message(), a), "message '%s' lacks '%s'", tri_error_message(), a);
    cr_expect(strstr(tri_error_message(), b), "message '%s' lacks '%s'", tri_error_message(), b);
    tri_error_clear();
}

Test(partitioner_moe, layout_rules_of_expert_parallelism)
{
    moe_model mm;
    tri_transformer m = moe_dims(&mm, 4, 64, 4, 4, 16, 8, 2, 32, 0, 256, 1);
    tri_train_layout l = resolve_ok(&m, 8, 2, 4, 1, true);
    cr_expect_eq(l.ep, 4);
    cr_expect_eq(l.etp, 1);
    cr_expect_eq(tri_expert_dp(&l), 2, "tp 2 x dp 4 = etp 1 x ep 4 x edp 2");
    l = resolve_ok(&m, 8, 1, 2, 2, false);
    cr_expect_eq(tri_expert_dp(&l), 2, "8 = etp 2 x ep 2 x edp 2");
    l = resolve_ok(&m, 2, 1, 1, 1, false);
    cr_expect_eq(l.ep, 1, "defaults");
    refused(&m, 8, 1, 3, 1, false, "--expert-model-parallel-size 3 does not divide num_experts 8",
            "nearest valid: 2, 4");
    refused(&m, 2, 1, 4, 1, false,
            "--expert-model-parallel-size 4 = 4 does not divide a pipeline stage's tp x dp = 1 x 2",
            "nearest valid expert-model-parallel sizes: 2");
    refused(&m, 4, 1, 2, 3, false, "--expert-tensor-parallel-size 3 x --expert-model-parallel-size 2",
            "valid expert-tensor-parallel sizes: 2");
    refused(&m, 8, 2, 2, 1, false, "--tensor-model-parallel-size 2 with a mixture-of-experts model (num_experts 8) "
            "needs", "--sequence-parallel");
    /* Megatron's rule holds at ep 1 too: MoE with tp > 1 needs sequence parallelism */
    refused(&m, 2, 2, 1, 1, false, "--tensor-model-parallel-size 2 with a mixture-of-experts model (num_experts 8) "
            "needs", "--sequence-parallel");
    mm.sparse.K = 9;
    m.experts_per_tok = 9;
    refused(&m, 2, 1, 1, 1, false, "num_experts_per_tok 9", "num_experts 8");
    m.n_experts = m.experts_per_tok = 0;   /* dense */
    refused(&m, 2, 1, 2, 1, false, "--expert-model-parallel-size 2 needs a mixture-of-experts model",
            "nearest valid: 1");
    refused(&m, 2, 1, 1, 2, false, "--expert-tensor-parallel-size 2 needs a mixture-of-experts model",
            "nearest valid: 1");
}

/* ZeRO shards the routed experts' parameters, gradients and optimizer state over the
 * expert-data-parallel group (edp = tp dp / (etp ep)) and the rest over dp. */
Test(partitioner_moe, expert_states_shard_over_the_expert_data_parallel_group)
{
    moe_model mm;
    tri_transformer m = moe_dims(&mm, 4, 64, 4, 4, 16, 8, 2, 32, 0, 256, 1);
    tri_layout_request r = {.num_gpus = 8, .tp = 1, .pp = 1, .ep = 4, .etp = 1, .micro_batch = 1, .seq_length = 16,
                            .zero_stage = 3, .first_layers = -1, .last_layers = -1};
    tri_train_layout l;
    cr_assert_eq(tri_layout_resolve(&m, &r, &l), TRI_OK, "%s", tri_error_message());
    tri_stage_plan plan;
    tri_layout_shape shape = tri_train_layout_shape(&l);
    tri_stage_options so = {.v = 1, .first_layers = -1, .last_layers = -1};
    cr_assert_eq(tri_stage_split(&plan, &m, &shape, &so), TRI_OK, "%s", tri_error_message());
    int in_flight[1] = {1};
    double bytes[TRI_MEM_KINDS];
    tri_mem_model_rank(&m, &l, &plan, 0, in_flight, bytes);
    double psi = tri_mem_chunk_params(&m, &l, &plan.chunks[0], 1);
    double psi_e = tri_transformer_blocks(&m, &l, 0, 4).expert_params;
    cr_expect_eq(psi_e, 4.0 * 2 * 3 * 64 * 32, "4 layers of E / ep = 2 experts");
    double opt = 8.0 * (psi - psi_e) / 8 + 8.0 * psi_e / 2;   /* dp 8, edp 8 / 4 = 2 */
    cr_expect_eq(bytes[TRI_MEM_OPTIMIZER], opt, "optimizer %.0f, expected %.0f", bytes[TRI_MEM_OPTIMIZER], opt);
    tri_stage_plan_free(&plan);
}

/* The data-parallel time of the expert gradients (partitioner/time_model.c): the engine reduces,
 * reduce-scatters and all-gathers a sparse block's routed experts over the expert-data-parallel group
 * (engine/train/param.h's parts), so the time model takes them as a second group of units: each
 * collective at edp's ring factor (edp - 1) / edp and its ranks' link, the rest over dp at dp's; the
 * byte count stays payload bytes. By hand, 4 layers of C 64, E 8, I 32 on one node of H100s, dp 4 at
 * ZeRO 0, 1 and 3, fp32 (gradients and gathered parameters 4 bytes): at ep 4 = dp (edp 1) the experts
 * move nothing (0 s, and the step's bytes are the rest's); at ep 2 (edp 2) their all-reduce costs
 * 2 (1/2) 4 P_e / bw where dp's ring factor would have charged 2 (3/4) 4 P_e / bw (1.5x); the dp part
 * is 2 (3/4) (4 (P - P_e) + 8) / bw (the 8-byte loss all-reduce over dp). ZeRO 1: a reduce-scatter
 * and an all-gather of each group; ZeRO 3: per micro-batch one reduce-scatter per gradient write and
 * an all-gather per read (2 and 2 for a block). The overlap stream's total (dp_comm_s, the units the
 * simulation takes) equals the same sum. */
static double dp_time_case(const tri_transformer *m, int dp, int ep, int zero, int n_micro, tri_time_result *out,
                           double *psi, double *psi_e, double *bw)
{
    tri_layout_request r = {.num_gpus = dp, .tp = 1, .pp = 1, .ep = ep, .micro_batch = 1, .seq_length = 64,
                            .global_batch = dp * n_micro, .zero_stage = zero, .first_layers = -1,
                            .last_layers = -1};
    tri_train_layout l;
    cr_assert_eq(tri_layout_resolve(m, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(l.n_micro, n_micro);
    tri_stage_plan plan;
    tri_layout_shape shape = tri_train_layout_shape(&l);
    tri_stage_options so = {.v = 1, .first_layers = -1, .last_layers = -1};
    cr_assert_eq(tri_stage_split(&plan, m, &shape, &so), TRI_OK, "%s", tri_error_message());
    const tri_hardware *hw = tri_hardware_find("h100-sxm");
    tri_cluster c = {.hw = hw, .num_gpus = dp, .gpus_per_node = 8, .eff = hw->eff};
    memset(out, 0, sizeof *out);
    tri_time_model_quick(m, &l, &c, &plan, out);
    *psi = tri_time_rank_params(m, &l, &plan, 0);
    *psi_e = tri_transformer_blocks(m, &l, 0, (int)m->n_layer).expert_params;
    *bw = hw->intra_bw * c.eff.intra;
    tri_stage_plan_free(&plan);
    return c.eff.dp_exposed;
}

Test(partitioner_moe, expert_gradients_reduce_over_the_expert_data_parallel_group)
{
    moe_model mm;
    tri_transformer m = moe_dims(&mm, 4, 64, 4, 4, 16, 8, 2, 32, 0, 256, 1);
    tri_time_result t;
    double P, Pe, bw;
    /* ep = dp = 4: edp 1, the experts move nothing */
    double x = dp_time_case(&m, 4, 4, 0, 1, &t, &P, &Pe, &bw);
    cr_assert_eq(Pe, 4.0 * 2 * 3 * 64 * 32, "4 layers of E / ep = 2 experts");
    double rest = 4.0 * (P - Pe) + 8.0;
    cr_expect_eq(t.dp_expert_s, 0.0);
    cr_expect_eq(t.dp_expert_bytes, 0.0);
    cr_expect_eq(t.dp_bytes, rest, "dp bytes %.0f, the non-expert ones %.0f", t.dp_bytes, rest);
    cr_expect_float_eq(t.dp_s, x * 2.0 * 0.75 * rest / bw, 1e-12 * t.dp_s, "dp %.9g s", t.dp_s);
    /* ep 2 dp 4: edp 2 */
    x = dp_time_case(&m, 4, 2, 0, 1, &t, &P, &Pe, &bw);
    cr_assert_eq(Pe, 4.0 * 4 * 3 * 64 * 32, "4 layers of E / ep = 4 experts");
    rest = 4.0 * (P - Pe) + 8.0;
    double e_s = 2.0 * 0.5 * 4.0 * Pe / bw, dp_ring = 2.0 * 0.75 * 4.0 * Pe / bw, rest_s = 2.0 * 0.75 * rest / bw;
    cr_expect_eq(t.dp_bytes, rest + 4.0 * Pe, "payload bytes: every gradient once");
    cr_expect_eq(t.dp_expert_bytes, 4.0 * Pe);
    cr_expect_float_eq(t.dp_expert_s, x * e_s, 1e-12 * e_s, "experts %.9g s, by hand %.9g", t.dp_expert_s, x * e_s);
    cr_expect_float_eq(t.dp_s, x * (rest_s + e_s), 1e-12 * t.dp_s, "dp %.9g s, by hand %.9g", t.dp_s,
                       x * (rest_s + e_s));
    cr_expect_float_eq(t.dp_comm_s, rest_s + e_s, 1e-12 * t.dp_comm_s, "the overlap stream %.9g s", t.dp_comm_s);
    cr_expect_gt(fabs(t.dp_s - x * (rest_s + dp_ring)), 1e-3 * t.dp_s, "dp's ring factor would have given the same");
    if (getenv("TRIDENT_TEST_VERBOSE"))
        printf("ep 2 dp 4 ZeRO 0: dp %.4g us of which experts %.4g us (at dp's ring factor %.4g us)\n", 1e6 * t.dp_s,
               1e6 * t.dp_expert_s, 1e6 * x * dp_ring);
    /* ZeRO 1: reduce-scatter and all-gather of each group (parameters fp32) */
    x = dp_time_case(&m, 4, 2, 1, 1, &t, &P, &Pe, &bw);
    e_s = 2.0 * 0.5 * 4.0 * Pe / bw;
    rest_s = 2.0 * 0.75 * 4.0 * (P - Pe) / bw + 2.0 * 0.75 * 8.0 / bw;
    cr_expect_float_eq(t.dp_expert_s, x * e_s, 1e-12 * e_s, "ZeRO 1 experts %.9g s, by hand %.9g", t.dp_expert_s,
                       x * e_s);
    cr_expect_float_eq(t.dp_s, x * (rest_s + e_s), 1e-12 * t.dp_s, "ZeRO 1 dp %.9g s", t.dp_s);
    cr_expect_float_eq(t.dp_comm_s, rest_s + e_s, 1e-12 * t.dp_comm_s, "ZeRO 1 stream %.9g s", t.dp_comm_s);
    /* ZeRO 3, 2 micro-batches: a block's unit is written once (backward) and read twice (forward and
       backward) per micro-batch: 2 reduce-scatters and 4 all-gathers of the experts over edp */
    x = dp_time_case(&m, 4, 2, 3, 2, &t, &P, &Pe, &bw);
    e_s = (2.0 * 0.5 + 4.0 * 0.5) * 4.0 * Pe / bw;
    cr_expect_float_eq(t.dp_expert_s, x * e_s, 1e-12 * e_s, "ZeRO 3 experts %.9g s, by hand %.9g", t.dp_expert_s,
                       x * e_s);
    cr_expect_eq(t.dp_expert_bytes, (2.0 + 4.0) * 4.0 * Pe);
}

/* The search enumerates ep: an 8-expert model too large for one rank's expert copy fits with ep. */
/* Mixtral 8x7B on 16 H100s. Dropless, an ep rank's receive buffers are planned for the worst case
 * (tri_moe_ep_max_rows: every source's tokens routed to its experts, ep N_r min(K, E_l) rows, as the
 * engine allocates, N_r = N / tp the tokens a rank routes under sequence parallelism): folded over the
 * tensor-parallel ranks (tp 8 ep 8) the worst case is N rows, and the best layout is expert-parallel
 * over tp. With a capacity factor (Megatron's token dropping) each expert takes at most its capacity
 * from each source, the buffers shrink to about f N_r K, and a faster layout folds ep over tp and dp.
 * etp false: the search as it was before etp (moe_intermediate_size unstated: etp 1 only); the best
 * layouts (up to 10) into all when given. */
static tri_search_entry mixtral_search_etp(float capacity_factor, bool etp, long *considered, tri_search_entry *all,
                                           int *n_all)
{
    moe_model mm;
    tri_transformer m = moe_dims(&mm, 32, 4096, 32, 8, 128, 8, 2, 14336, 0, 32000, 1);   /* Mixtral 8x7B */
    if (!etp)
        m.expert_ffn = 0; /* moe_intermediate_size not stated: the search keeps etp 1 */
    const tri_hardware *hw = tri_hardware_find("h100-sxm");
    tri_cluster c = {.hw = hw, .num_gpus = 16, .gpus_per_node = 8, .eff = hw->eff};
    tri_search_space sp = {.base = {.num_gpus = 16, .global_batch = 64, .seq_length = 4096,
                                    .precision = TRI_PRECISION_BF16},
                           .max_tp = 8, .max_micro_batch = 1, .max_v = 1,
                           .moe = {.capacity_factor = capacity_factor}};
    tri_search_entry best[10];
    int n = 0;
    tri_search_stats st;
    cr_assert_eq(tri_search_layouts(&m, &c, &sp, NULL, NULL, best, 10, &n, &st), TRI_OK, "%s", tri_error_message());
    cr_assert_gt(n, 0);
    *considered = st.considered;
    if (all) {
        memcpy(all, best, sizeof best);
        *n_all = n;
    }
    cr_log_info("Mixtral 8x7B on 16 H100s, capacity factor %g, etp %s: %ld layouts considered; best tp %d pp %d dp %d "
                "ep %d etp %d zero %d sp %d recompute %s: %.3f s, MFU %.1f%%, EP %.3g GB per step",
                (double)capacity_factor, etp ? "searched" : "1", st.considered, best[0].layout.tp, best[0].layout.pp,
                best[0].layout.dp, best[0].layout.ep, best[0].layout.etp, best[0].layout.zero_stage,
                best[0].layout.sequence_parallel, tri_recompute_name(best[0].layout.recompute),
                best[0].time.iteration_s, 100 * best[0].time.mfu, best[0].time.ep_bytes / 1e9);
    return best[0];
}

Test(partitioner_moe, search_picks_an_expert_parallel_size)
{
    long considered;
    tri_search_entry dropless = mixtral_search_etp(0.0f, false, &considered, NULL, NULL); /* etp 1: the ep choice */
    cr_expect(dropless.layout.ep > dropless.layout.dp && dropless.layout.sequence_parallel,
              "dropless: the best layout folds ep over the tensor-parallel ranks (got tp %d dp %d ep %d sp %d)",
              dropless.layout.tp, dropless.layout.dp, dropless.layout.ep, dropless.layout.sequence_parallel);
    tri_search_entry capped = mixtral_search_etp(1.0f, false, &considered, NULL, NULL);
    cr_expect_gt(capped.layout.ep, 1, "capacity factor 1: the best layout is expert-parallel");
    cr_expect_lt(capped.time.iteration_s, dropless.time.iteration_s,
                 "capacity factor 1: the smaller receive buffers admit a faster layout");
    cr_expect_float_eq(capped.layout.moe.capacity_factor, 1.0f, 0.0f, "the candidates keep the capacity factor");
}

/* The search enumerates etp over the divisors of tp x dp / ep that divide moe_intermediate_size
 * (tri_transformer.expert_ffn). Dropless, an ep rank's receive buffers hold the worst case (ep N_r
 * min(K, E_l) rows, above), while etp's hold etp N_r K at ep 1 - the expected N K rows of the stage's
 * sequence shards - and split each expert's weights as ep does: the time model ranks etp > 1 first
 * (what Megatron-Core's etp = tp does), faster than every layout the etp-1 search finds. With a capacity
 * factor of 1 the ep buffers are the expectation too, and the best layout is no slower than before. */
Test(partitioner_moe, search_picks_an_expert_tensor_parallel_size)
{
    long considered, considered1;
    tri_search_entry all[10];
    int n = 0;
    tri_search_entry best = mixtral_search_etp(0.0f, true, &considered, all, &n);
    tri_search_entry only1 = mixtral_search_etp(0.0f, false, &considered1, NULL, NULL);
    cr_expect_gt(considered, considered1, "etp adds candidates (%ld against %ld)", considered, considered1);
    cr_expect_eq(only1.layout.etp, 1);
    cr_expect_gt(best.layout.etp, 1, "dropless: the best layout splits the experts over etp (got tp %d dp %d ep %d "
                 "etp %d)", best.layout.tp, best.layout.dp, best.layout.ep, best.layout.etp);
    cr_expect_lt(best.time.iteration_s, only1.time.iteration_s, "etp %d: %.4f s against the etp-1 search's %.4f s",
                 best.layout.etp, best.time.iteration_s, only1.time.iteration_s);
    for (int i = 0; i < n; i++) {
        const tri_train_layout *l = &all[i].layout;
        int ranks = l->tp * l->dp;
        cr_expect(l->etp >= 1 && 14336 % l->etp == 0 && ranks % (l->ep * l->etp) == 0,
                  "candidate %d: etp %d x ep %d over tp %d x dp %d, I 14336", i, l->etp, l->ep, l->tp, l->dp);
    }
    tri_search_entry capped = mixtral_search_etp(1.0f, true, &considered, NULL, NULL);
    tri_search_entry capped1 = mixtral_search_etp(1.0f, false, &considered1, NULL, NULL);
    cr_expect_leq(capped.time.iteration_s, capped1.time.iteration_s, "capacity factor 1: %.4f s against %.4f s",
                  capped.time.iteration_s, capped1.time.iteration_s);
}
