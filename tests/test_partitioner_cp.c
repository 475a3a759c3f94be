/* tests/test_partitioner_cp.c - the partitioner plans context parallelism (partitioner/context_parallel.h):
 * the cp scratch and the key/value traffic of both comm types against hand derivations for a small
 * case; p2p's exposure per ring step; a rank's activations, compute and messages those of T / cp rows
 * (exactly half at cp 2 for a model whose activations are linear in T), ZeRO over dp x cp, FLOPs and MFU
 * unchanged in total; and --search proposing cp > 1 for a Llama 3 8B-like model at 131072 tokens that
 * does not fit at cp 1. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/block_cost.h"
#include "partitioner/constraints.h"
#include "partitioner/context_parallel.h"
#include "partitioner/hardware.h"
#include "partitioner/memory_model.h"
#include "partitioner/preview.h"
#include "partitioner/search.h"
#include "partitioner/time_model.h"
#include "tests/gpt_outline.h"

TU_GPT_MODEL(GPT, 4, 4, 256, 256, 8192);

/* The long-context search: 16 H100s (80 GB) without tensor parallelism. Why cp 1 cannot fit, derived:
 * at T = 131072, tp 1, bf16, one rank holds the last stage's logits 2 N V = 2 x 131072 x 128256 =
 * 33.6 GB, even under full recomputation one block's recomputed activations 2 N (4 C + 2 Q + 2 KV + 3 F)
 * = 18.3 GB and its backward's transients about 16 GB: 68 GB before any model state, output gradient
 * or kept layer outputs, so no pp, ZeRO or recomputation fits it in 80 GB; at cp 2 each of these halves.
 * (With tp up to 8 cp 1 fits too, and the search's best is still tp 4 x cp 4: docs/context_parallel.md.) */
#define SEARCH_GPUS 16
#define SEARCH_MAX_TP 1

/* B 2, T 1024, cp 4 (T_l 256), C 256, 4 heads of 64, 2 key/value heads (C_kv 128), tp 1, fp32 */
static tri_cp_dims small(tri_cp_comm_type type, bool det)
{
    return (tri_cp_dims){.B = 2, .T = 1024, .cp = 4, .C_l = 256, .C_kv_l = 128, .NH_l = 4, .e = 4, .type = type,
                         .deterministic = det};
}

Test(partitioner_cp, scratch_by_hand)
{
    int64_t f, b;
    tri_cp_dims d = small(TRI_CP_COMM_ALL_GATHER, false);
    tri_cp_scratch_bytes(&d, &f, &b);
    /* the engine's layer (layers/cp_attention.h), k|v 2 C_kv = 256 columns: its own block kv_l (2, 256, 256),
     * the gathered blocks in rank order kv_r (4, 2, 256, 256) and in global order kv_g (2, 1024, 256):
     * 131072 + 524288 + 524288 = 1179648 fp32 values = 4.5 MiB; the backward adds the f32 dk|dv
     * partials dkv_g, dkv_r, dkv_l of the same three shapes: 9 MiB */
    cr_expect_eq(f, 1179648 * 4);
    cr_expect_eq(b, 2 * 1179648 * 4);
    /* deterministic: qkv_r (4, 2, 256, 512), qkv_g (2, 1024, 512), dout_r (4, 2, 256, 256), dout_g (2, 1024,
     * 256) = 2 x 1048576 + 2 x 524288 = 3145728 values (more than the k|v's, which share them), and f32
     * stat_r (4, 2, 4, 256), lse_g and delta_g (2, 4, 1024): 3 x 8192 */
    d.deterministic = true;
    tri_cp_scratch_bytes(&d, &f, &b);
    cr_expect_eq(b, 3145728 * 4 + 3 * 8192 * 4);
    d.type = TRI_CP_COMM_P2P; /* deterministic mode runs the same exact backward for p2p */
    tri_cp_scratch_bytes(&d, &f, &b);
    cr_expect_eq(b, 3145728 * 4 + 3 * 8192 * 4);
    /* the ring: k|v blocks (2, 256, 256) of 131072 values, two in flight, and a block's partial out
       (2, 256, 256) and lse (2, 4, 256) f32; the backward's two f32 dk|dv accumulators and the rank's
       share of a block (131072 each) reuse the f32 part */
    d = small(TRI_CP_COMM_P2P, false);
    tri_cp_scratch_bytes(&d, &f, &b);
    cr_expect_eq(f, (2 * 131072 + 131072) * 4 + 2048 * 4);
    cr_expect_eq(b, (2 * 131072 + 131072) * 4 + 3 * 131072 * 4);
    d.cp = 1;
    tri_cp_scratch_bytes(&d, &f, &b);
    cr_expect(f == 0 && b == 0);
}

Test(partitioner_cp, traffic_and_exposure_by_hand)
{
    uint64_t f[TRI_COMM_KINDS], b[TRI_COMM_KINDS];
    int steps;
    tri_cp_dims d = small(TRI_CP_COMM_ALL_GATHER, false);
    tri_cp_layer_traffic(&d, f, b, &steps);
    cr_expect_eq(steps, 0);
    cr_expect_eq(f[TRI_COMM_ALL_GATHER], 2097152u); /* the full gathered buffer (payload convention) */
    cr_expect_eq(b[TRI_COMM_ALL_GATHER], 2097152u);
    cr_expect_eq(b[TRI_COMM_REDUCE_SCATTER], 2097152u);
    /* all exposed: an all-gather moves (cp-1)/cp of its payload: 3/4 x 2 MiB at 1 GB/s */
    cr_expect_float_eq(tri_cp_exposed_seconds(&d, f, 1e9, 1.0), 0.75 * 2097152 / 1e9, 1e-15);
    d = small(TRI_CP_COMM_P2P, false);
    tri_cp_layer_traffic(&d, f, b, &steps);
    cr_expect_eq(steps, 3);
    cr_expect_eq(f[TRI_COMM_P2P], 3u * 131072 * 4);       /* cp-1 k|v blocks sent */
    /* the k|v block 3 times, its f32 dk|dv accumulator after each of the 4 steps (the last returns it) */
    cr_expect_eq(b[TRI_COMM_P2P], 3u * 131072 * 4 + 4u * 131072 * 4);
    cr_expect_eq(f[TRI_COMM_ALL_GATHER] + b[TRI_COMM_REDUCE_SCATTER], 0u);
    /* a step sends 524288 B (0.524288 ms at 1 GB/s) and computes attn / cp: 1 ms of attention leaves
       0.274288 ms a step exposed, 3 steps; 4 ms hides it all */
    cr_expect_float_eq(tri_cp_exposed_seconds(&d, f, 1e9, 1e-3), 3 * (524288e-9 - 0.25e-3), 1e-15);
    cr_expect_eq(tri_cp_exposed_seconds(&d, f, 1e9, 4e-3), 0.0);
    /* deterministic mode, both types: the all-gather forward (2 MiB) and the owner-computes backward's
       gathers of qkv and dout (2, 1024, 512 + 256) fp32 and lse, delta (2, 4, 1024) f32; all exposed */
    for (int t = 0; t < 2; t++) {
        d = small(t ? TRI_CP_COMM_P2P : TRI_CP_COMM_ALL_GATHER, true);
        tri_cp_layer_traffic(&d, f, b, &steps);
        cr_expect_eq(steps, 0);
        cr_expect_eq(f[TRI_COMM_ALL_GATHER], 2097152u);
        cr_expect_eq(b[TRI_COMM_ALL_GATHER], 2u * 1024 * 768 * 4 + 2u * 2 * 4 * 1024 * 4);
        cr_expect_eq(f[TRI_COMM_P2P] + b[TRI_COMM_P2P] + b[TRI_COMM_REDUCE_SCATTER], 0u);
        cr_expect_float_eq(tri_cp_exposed_seconds(&d, f, 1e9, 1.0), 0.75 * 2097152 / 1e9, 1e-15);
    }
}

static tri_train_layout resolve(int gpus, int tp, int cp, int pp, int64_t T, int zero)
{
    tri_layout_request r = {.num_gpus = gpus, .tp = tp, .cp = cp, .pp = pp, .micro_batch = 2, .global_batch = 0,
                            .seq_length = T, .zero_stage = zero, .first_layers = -1, .last_layers = -1};
    tri_train_layout l;
    cr_assert_eq(tri_layout_resolve(&GPT, &r, &l), TRI_OK, "%s", tri_error_message());
    return l;
}

static tri_cluster h100(int gpus)
{
    const tri_hardware *hw = tri_hardware_find("h100-sxm");
    return (tri_cluster){.hw = hw, .num_gpus = gpus, .gpus_per_node = 8, .eff = hw->eff};
}

/* GPT-2's activations are linear in T (fused attention: no T^2 term), so a cp 2 rank keeps exactly half
   of a cp 1 rank's; its scratch is the p2p plan's; ZeRO 3 over dp x cp = 2 halves the model states as
   dp 2 does; each micro-batch's compute halves; FLOPs and MFU count the same model */
Test(partitioner_cp, a_rank_holds_and_computes_its_share)
{
    tri_train_layout one = resolve(1, 1, 1, 1, 2048, 0), two = resolve(2, 1, 2, 1, 2048, 0);
    tri_train_layout z_cp = resolve(2, 1, 2, 1, 2048, 3), z_dp = resolve(2, 1, 1, 1, 2048, 3);
    tri_layout_shape shape = tri_train_layout_shape(&one);
    tri_stage_options so = {.v = 1, .first_layers = -1, .last_layers = -1};
    tri_stage_plan plan;
    cr_assert_eq(tri_stage_split(&plan, &GPT, &shape, &so), TRI_OK);
    int slots = 1;
    double a[TRI_MEM_KINDS], b[TRI_MEM_KINDS], zc[TRI_MEM_KINDS], zd[TRI_MEM_KINDS];
    tri_mem_model_rank(&GPT, &one, &plan, 0, &slots, a);
    tri_mem_model_rank(&GPT, &two, &plan, 0, &slots, b);
    cr_expect_float_eq(b[TRI_MEM_ACTIVATIONS], a[TRI_MEM_ACTIVATIONS] / 2, 1e-9 * a[TRI_MEM_ACTIVATIONS]);
    int64_t f, bw;
    tri_cp_dims d = tri_cp_dims_of(&GPT, &two);
    tri_cp_scratch_bytes(&d, &f, &bw);
    /* the ring: two (B, T_l, 2C) blocks and the partial out (B, T_l, C), e bytes; two f32 accumulators
       and the rank's share of a block */
    cr_expect_eq(bw, 4 * (2 * (2 * 1024 * 512) + 2 * 1024 * 256) + 4 * 3 * (2 * 1024 * 512));
    tri_mem_model_rank(&GPT, &z_cp, &plan, 0, &slots, zc);
    tri_mem_model_rank(&GPT, &z_dp, &plan, 0, &slots, zd);
    for (int k = TRI_MEM_PARAMS; k <= TRI_MEM_OPTIMIZER; k++)
        cr_expect_float_eq(zc[k], zd[k], 1e-9 * zd[k], "kind %d: ZeRO 3 over dp x cp %g, over dp %g", k, zc[k], zd[k]);
    tri_cluster c1 = h100(1), c2 = h100(2);
    tri_chunk_time t1 = tri_time_chunk(&GPT, &one, &c1, &plan, 0), t2 = tri_time_chunk(&GPT, &two, &c2, &plan, 0);
    cr_expect_float_eq(t2.fwd_compute, t1.fwd_compute / 2, 1e-12 * t1.fwd_compute);
    cr_expect_float_eq(t2.bwd_compute, t1.bwd_compute / 2, 1e-12 * t1.bwd_compute);
    cr_expect(t1.fwd_cp == 0 && t1.bwd_cp == 0);
    tri_stage_plan_free(&plan);
    tri_preview p1, p2;
    cr_assert_eq(tri_preview_create(&p1, &GPT, &one, &c1, NULL, NULL), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_preview_create(&p2, &GPT, &two, &c2, NULL, NULL), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(p2.time.model_flops, p1.time.model_flops);
    /* per step: one micro-batch, 4 layers of the p2p traffic (hand: 1 step of (2, 1024, 512) fp32
       forward, k|v + dk|dv backward) */
    cr_expect_float_eq(p2.time.cp_bytes, 4.0 * (4.0 * 1048576 + 12.0 * 1048576), 1e-6);
    cr_expect(p2.time.cp_s >= 0 && p1.time.cp_s == 0 && p1.time.cp_bytes == 0);
    double parts = p2.time.compute_s + p2.time.tp_s + p2.time.ep_s + p2.time.cp_s + p2.time.bubble_s + p2.time.pp_s +
                   p2.time.dp_s + p2.time.optimizer_s;
    cr_expect_float_eq(parts, p2.time.iteration_s, 1e-12 * parts);
    tri_preview_destroy(&p1);
    tri_preview_destroy(&p2);
}

/* Llama 3 8B (32 layers, C 4096, 32 heads of 128, 8 key/value heads, SwiGLU 14336, vocabulary 128256)
   at 131072 tokens a sequence */
static void llama_block(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    tri_decoder_block_cost(cfg, l, out);
}

Test(partitioner_cp, search_proposes_cp_for_a_long_sequence)
{
    static const tri_decoder_block blk = {.C = 4096, .NH = 32, .NH_kv = 8, .HS = 128, .F = 14336, .gated_mlp = true,
                                          .norm = TRI_NORM_RMSNORM, .rotary = true, .tensors = 9};
    tri_transformer m = {.n_layer = 32, .n_head = 32, .n_embd = 4096, .vocab_size = 128256, .n_positions = 131072,
                         .n_kv_head = 8, .final_norm = TRI_NORM_RMSNORM, .untied_head = true,
                         .fused_attention_only = true, .block_cost = llama_block, .cfg = &blk};
    tri_cluster c = h100(SEARCH_GPUS);
    tri_search_space sp = {.base = {.num_gpus = SEARCH_GPUS, .global_batch = SEARCH_GPUS, .seq_length = 131072,
                                    .precision = TRI_PRECISION_BF16},
                           .max_tp = SEARCH_MAX_TP, .max_micro_batch = 1, .max_v = 1, .max_cp = 1};
    tri_search_entry best[4];
    int n = -1;
    tri_search_stats st;
    cr_assert_eq(tri_search_layouts(&m, &c, &sp, NULL, NULL, best, 4, &n, &st), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(n, 0, "cp 1 fits: %d layouts (%ld valid, %ld screened)", n, st.valid, st.screened);
    sp.max_cp = SEARCH_GPUS;
    cr_assert_eq(tri_search_layouts(&m, &c, &sp, NULL, NULL, best, 4, &n, &st), TRI_OK, "%s", tri_error_message());
    cr_assert_gt(n, 0, "no layout fits at any cp (%ld valid, %ld screened)", st.valid, st.screened);
    cr_expect_gt(best[0].layout.cp, 1);
    cr_expect(best[0].max_bytes <= tri_cluster_usable_bytes(&c));
    cr_log_info("Llama 3 8B at 131072 tokens on %d H100s: best tp %d cp %d pp %d dp %d sp %d zero %d recompute %s: "
                "%.3f s, MFU %.1f%%, max %.1f GB, cp %.3f s (%.3g GB)", SEARCH_GPUS, best[0].layout.tp, best[0].layout.cp,
                best[0].layout.pp, best[0].layout.dp, best[0].layout.sequence_parallel, best[0].layout.zero_stage,
                tri_recompute_name(best[0].layout.recompute), best[0].time.iteration_s, 100 * best[0].time.mfu,
                best[0].max_bytes / 1e9, best[0].time.cp_s, best[0].time.cp_bytes / 1e9);
}
