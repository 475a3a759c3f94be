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
 *     dW) and two reduce-scatters backward (Korthikanti et al. 2022 §4.2.2). */
void tri_decoder_block_cost(const tri_decoder_block *b, const tri_train_layout *l, tri_block_cost *out);

#endif
