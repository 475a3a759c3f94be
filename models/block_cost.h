/* models/block_cost.h - what a decoder block costs, stated once for every family built of one.
 *
 * A decoder family (GPT-2, Llama) answers the partitioner's question "what does one block hold and do
 * on one TP rank under this layout" (partitioner/transformer.h tri_block_cost) by describing its block
 * here: widths, biases, norm, positions. The formulas follow the buffers the decoder takes
 * (models/gpt_buffers.c, models/llama_buffers.c: take_block_acts, take_scratch) and the matmuls it
 * runs; tests/test_block_cost.c holds them against the published closed forms (Korthikanti et al.
 * 2022 Table 2, Narayanan et al. 2021 eq. 3) and against the family's parameter list, and
 * tests/test_partitioner_model.c against the engine's exact memory plan. A block of another shape (a
 * mixture of experts) states its own costs in its family's files. */
#ifndef TRIDENT_MODELS_BLOCK_COST_H
#define TRIDENT_MODELS_BLOCK_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "layers/moe.h"
#include "partitioner/transformer.h"

typedef struct tri_decoder_block {
    int64_t C, NH, NH_kv, HS, F;  /* hidden size, query and key/value heads, head size, MLP width */
    bool gated_mlp;               /* SwiGLU: gate and up (C -> F each) and down (F -> C); else C -> F -> C */
    bool attention_bias;          /* q|k|v biases (split) and the output projection's (whole) */
    bool mlp_bias;                /* the MLP's first biases (split) and its second's (whole) */
    tri_norm_kind norm;           /* the two pre-norms: LayerNorm (weight, bias) or RMSNorm (weight) */
    bool rotary;                  /* rotary positions: fp32 (T, HS / 2) cos and sin tables */
    bool qk_norm;                 /* Qwen3's per-head q/k RMSNorm: two (HS) weights (whole), q|k|v kept
                                     before it, e N W_l, and its rstd, 4 N (NH_l + NH_kv_l) */
    int tensors;                  /* parameter tensors of one block, as the family lists them */
    /* A mixture of experts in place of the MLP (Mixtral, Qwen3-MoE; layers/moe.h), when sparse: a
       router (E, C) without bias, E SwiGLU experts of width I (gate and up C -> I, down I -> C), K of
       them per token, and an always-on SwiGLU shared expert of width I_shared (0: none). F and
       mlp_bias then do not apply; a dense block of a sparse model (decoder_sparse_step,
       mlp_only_layers) keeps sparse false and F. */
    bool sparse;
    int64_t E, K, I, I_shared;
} tri_decoder_block;

/* One decoder block's costs under layout l (see partitioner/transformer.h tri_block_cost):
 *   parameters on a TP rank: the norms (whole), q|k|v C (Q_l + 2 KV_l) with KV_l = KV / tp or one head
 *     when tp > NH_kv, the output Q_l C, the MLP (2 or 3) C F_l, their biases; GPT-2: (12 C^2 + 7 C) / tp + 6 C;
 *   forward FLOPs over B x T tokens: 2 B T P (P the matmul weights) + 4 B T^2 Q, GPT-2's 24 B T C^2 + 4 B T^2 C;
 *   activations kept (e bytes an element, N = B T, N_l = N / tp under sequence parallelism):
 *     e (4 N_l C + N (W_l + Q_l + k F_l)) + 4 s N_l with k = 2 (GPT-2's fch, fch_gelu) or 3 (SwiGLU's
 *     [gate | up] and h), s = 4 (two LayerNorms' mean and rstd) or 2 (two RMSNorms' rstd); plus the
 *     fused attention's fp32 logsumexp 4 B (NH / tp) T, or the unfused softmax e B (NH / tp) T^2 when not
 *     recomputed; full recomputation keeps e N_l C;
 *   backward transients e (2 N_l C + N (W_l + Q_l + k' F_l)), k' = 1 (dh) or 3 (dh and dgate_up), and
 *     the fused backward's 4 B (NH / tp) T row statistics or the unfused e B (NH / tp) T^2 score
 *     gradient, and rotary tables 4 T HS;
 *   TP traffic per micro-batch (tp > 1): two all-reduces of N C each way; under sequence parallelism
 *     two all-gathers and two reduce-scatters forward, four all-gathers (two re-gathered inputs for
 *     dW) and two reduce-scatters backward (Korthikanti et al. 2022 §4.2.2).
 *
 * A sparse block (b->sparse; Megatron-Core's MoELayer under parallel folding, E_l = E / ep experts a
 * rank, each split over etp; N_r = N_l tokens a rank routes, its sequence shard under sequence
 * parallelism; tri_moe_block_shape):
 *   parameters on a rank: the attention and norms as above; the router E C whole (replicated); the
 *     shared expert 3 C I_s / tp; the routed experts E_l 3 C I / etp (expert_params: sharded over the
 *     expert-data-parallel group, not dp). total_params = attention + norms + E C + 3 C (E I + I_s),
 *     active_params = attention + norms + E C + 3 C (K I + I_s) (Mixtral 8x7B: 46.7B / 12.9B);
 *   forward FLOPs: 2 N (attention weights + E C + 3 C (K I + I_s)) + 4 B T^2 Q, active parameters only;
 *   activations kept: the dense formula without the MLP's hidden tensors, plus what layers/moe.c
 *     takes for the rank's shape, tri_moe_acts_bytes(tri_moe_block_shape) (in the layout's precision:
 *     the router's buffers fp32, the rows bf16 under --bf16; the shape's I is the slice I / etp), dropless
 *     with N_r K permuted rows; under sequence parallelism the shared expert runs
 *     tensor-parallel outside that shape, its 4 N 3 I_s / tp bytes added; the backward's transients
 *     likewise with tri_moe_scratch_bytes (4 N 3 I_s / tp for the shared expert's gradients);
 *     under ep > 1 the received rows' buffers the engine takes, tri_moe_ep_acts_bytes (kept) and
 *     tri_moe_ep_scratch_bytes (transients) for tri_moe_ep_max_rows rows: dropless the worst case ep N_r
 *     min(K, E_l), with --moe-expert-capacity-factor (the shape's capacity) at most ep E_l capacity; in
 *     deterministic mode the fp32 copy of one source's expert GEMMs, 4 E_l 3 I C (transients); under
 *     etp > 1 instead the etp group's buffers, tri_moe_etp_acts_bytes / _scratch_bytes for
 *     etp tri_moe_ep_max_rows rows (layers/moe_etp.h), and in deterministic mode 4 E_l 3 (I / etp) C;
 *   the expert bias (--moe-router-enable-expert-bias): 4 E bytes a sparse layer (buffers, beside the
 *     parameters, no gradient or optimizer state) and its E int32 counts (one arena take, transients);
 *   TP traffic: the attention's collectives, and the MLP's only with a shared expert (the routed
 *     experts' tokens are the rank's own, Megatron-Core's alltoall dispatcher);
 *   EP traffic (ep_fwd / ep_bwd), in expectation under uniform routing: each rank sends the
 *     (ep - 1) / ep share of its N_r K C dispatched elements to the other ep ranks and receives as
 *     many back in the combine; forward 2 N_r K C (ep - 1) / ep elements by all-to-all (dispatch and
 *     combine), backward the same (the combine's and the dispatch's gradients); under etp > 1 the
 *     expert-tensor-parallel group all-gathers the N_r etp K dispatched rows (C each) and
 *     reduce-scatters their outputs forward, and the reverse backward. */
void tri_decoder_block_cost(const tri_decoder_block *b, const tri_train_layout *l, tri_block_cost *out);

/* The shape layers/moe.c takes for sparse block b on one rank under layout l (tri_moe_acts_bytes,
 * tri_moe_scratch_bytes): N_r etp tokens (N_r = B T / tp under sequence parallelism, else B T), C,
 * all E router columns, K, width I / etp, and the shared expert's I_s / tp when the rank runs it on
 * the same tokens (no sequence parallelism), else 0; dtype bf16 under l's bf16 precision, else fp32;
 * capacity tri_moe_capacity of l->moe.capacity_factor over those tokens (0: dropless), as the engine's
 * tri_llama_moe_config. */
tri_moe_shape tri_moe_block_shape(const tri_decoder_block *b, const tri_train_layout *l);

#endif
