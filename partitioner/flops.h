/* partitioner/flops.h - model FLOPs of a training iteration.
 *
 * Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
 * Megatron-LM"), eq. 3: F = 72 B s l h^2 (1 + s / (6h) + V / (12 l h)) for B sequences of length
 * s through l layers of hidden size h and a vocabulary of V, counting the forward and the backward
 * (2x the forward) of every matmul including attention's and the LM head; with full activation
 * recomputation the forward runs twice: 96 B s l h^2 (1 + s / (6h) + V / (16 l h)). Model FLOPs
 * (not hardware FLOPs) are what achieved TFLOP/s and MFU divide. Written per block, the same count is
 * 3 l F_b + 6 B s h V with F_b one block's forward FLOPs as its family states them
 * (tri_block_cost.fwd_flops; a decoder block's 2 B s P + 4 B s^2 Q, models/block_cost.h, with P its
 * matmul weights, 12 h^2 for GPT-2, and Q the attention width): the 6 N + 6 L C T per token of llm.c
 * and of the Llama papers' MFU. Full recomputation runs the blocks' forward a fourth time.
 *
 * Hardware FLOPs (what the device executes) add the recomputation: full recomputation the blocks'
 * forward again (the 96 formula: the LM head is not recomputed), selective recomputation
 * (Korthikanti et al. 2022 §5) the attention core's forward, QK^T and softmax x V: 4 B s^2 h per
 * layer. (Korthikanti's HFU figures count 12 B s^2 h per layer for it, the attention core's forward
 * and backward; docs/partitioner-validation.md compares both.) */
#ifndef TRIDENT_PARTITIONER_FLOPS_H
#define TRIDENT_PARTITIONER_FLOPS_H

#include <stdbool.h>
#include <stdint.h>

#include "partitioner/train_layout.h"
#include "partitioner/transformer.h"

/* FLOPs of one iteration over B sequences of length s (recompute: full activation recomputation). */
double tri_iteration_flops(const tri_transformer *m, int64_t B, int64_t s, bool recompute);

/* FLOPs the devices execute in one iteration over B sequences of length s with recomputation r:
 * model FLOPs (eq. 3) plus the recomputed forward work (see the top comment). */
double tri_iteration_hw_flops(const tri_transformer *m, int64_t B, int64_t s, tri_recompute r);

/* Forward FLOPs one block recomputes for one micro-batch of B x s on one of tp ranks: full the
 * block's forward (GPT-2: 24 B s h^2 + 4 B s^2 h), selective its attention core (4 B s^2 Q), none 0
 * (all divided by tp). */
double tri_block_recompute_flops(const tri_transformer *m, int64_t B, int64_t s, int tp, tri_recompute r);

#endif
