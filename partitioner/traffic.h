/* partitioner/traffic.h - communication volume of one training step, by group and kind.
 *
 * Counted in the payload convention of engine/comm/comm.h (all-reduce: the buffer; reduce-scatter and
 * all-gather: the full buffer; p2p: bytes sent), so that the comm byte counters of a run can be
 * checked against these numbers exactly (fp32: tri_tp_step_traffic), and the time model can turn
 * them into seconds (partitioner/hardware.h, tri_collective_seconds).
 *
 * Tensor parallelism (Shoeybi et al. 2019 §3; per micro-batch, N = B*T token rows, C = n_embd,
 * e-byte activation values): each block's collectives are its family's answer (tri_block_cost
 * tp_fwd / tp_bwd, partitioner/transformer.h); a decoder block (models/block_cost.h) all-reduces N*C twice forward (attention and MLP outputs,
 * row-parallel) and twice backward (their inputs' gradients, column-parallel); the first stage
 * all-reduces the vocab-parallel embedding's output, the last stage all-reduces the LM head's input
 * gradient and the loss's row max (N) and sum-exp/target logit (2N, always fp32). With sequence
 * parallelism (Korthikanti et al. 2022 §4.2.2) each all-reduce becomes a reduce-scatter forward and
 * an all-gather backward, plus the all-gathers that re-gather column-parallel inputs for the weight
 * gradients, and once per step the replicated parameters' gradients are all-reduced.
 *
 * Pipeline parallelism: one message per micro-batch and stage boundary each way, the boundary
 * activation (N_l x C values, N_l = N/tp under sequence parallelism, as the engine sends it) forward
 * and its gradient backward (Narayanan et al. 2021 §4.1: B*s*h per boundary).
 *
 * Expert parallelism (Megatron-Core's alltoall dispatcher): each sparse block's all-to-alls are its
 * family's answer (tri_block_cost ep_fwd / ep_bwd; for a decoder block models/block_cost.h: the
 * (ep - 1) / ep share of a rank's N_r K C dispatched elements each way, forward and backward, in
 * expectation under uniform routing), counted as comm.h counts tri_comm_all_to_all_v: the bytes sent
 * to the other ranks.
 *
 * Data parallelism: tri_dp_step_traffic below, per unit of parameters and how a pass uses it
 * (Rajbhandari et al. 2020 §7).
 *
 * bf16 mixed precision (engine/train/zero.h, models/gpt.c): activations and their gradients are bf16, so
 * TP and PP messages take elem = 2 (the loss statistics stay fp32); parameter gradients stay fp32,
 * so the replicated gradients' all-reduce under sequence parallelism and the DP gradient reductions
 * move 4 bytes a value, while the DP parameter all-gathers move the bf16 parameters (2). */
#ifndef TRIDENT_PARTITIONER_TRAFFIC_H
#define TRIDENT_PARTITIONER_TRAFFIC_H

#include "engine/comm/comm.h"
#include "engine/train/param.h"
#include "partitioner/transformer.h"

/* Expert-parallel traffic of one micro-batch of stage s on one rank, bytes by kind (all-to-all:
 * bytes sent to the other ep ranks; the etp group's all-gather and reduce-scatter: the full buffer),
 * `elem` bytes per activation value; l's ep and etp. The sum of the stage's blocks' ep_fwd / ep_bwd. */
void tri_ep_microbatch_traffic(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *s,
                               int elem, uint64_t fwd[TRI_COMM_KINDS], uint64_t bwd[TRI_COMM_KINDS]);

/* bytes[kind] = tensor-parallel traffic of one training step of the stage on one rank, fp32. */
void tri_tp_step_traffic(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_place *s,
                         uint64_t bytes[TRI_COMM_KINDS]);

/* Tensor-parallel traffic of ONE micro-batch through stage s on one rank, forward and backward
 * apart, with `elem` bytes per activation value (4 fp32, 2 bf16). */
void tri_tp_microbatch_traffic(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_place *s,
                               int elem, uint64_t fwd[TRI_COMM_KINDS], uint64_t bwd[TRI_COMM_KINDS]);

/* All-reduce bytes once per step for the replicated parameters' gradients under sequence
 * parallelism (`elem` bytes per gradient value: 4, as gradients are fp32 in both precisions); without
 * it only those each TP rank computes a part of (tri_block_cost.replicated_partial); 0 with tp = 1. */
uint64_t tri_tp_step_fixed_traffic(const tri_transformer *m, const tri_layout_shape *l,
                                   const tri_stage_place *s, int elem);

/* Bytes of one pipeline message (an activation or its gradient at a stage boundary). */
uint64_t tri_pp_message_bytes(const tri_transformer *m, const tri_layout_shape *l, int elem);

/* bytes[kind] = data-parallel traffic of one training step on one rank's group (the ZeRO paper's
 * volumes, Rajbhandari et al. 2020 §7, as payload), for n units of fp32 values, n_micro
 * micro-batches per step: ZeRO 0 all-reduces the gradients (P = sum of unit lengths); ZeRO 1
 * reduce-scatters them and all-gathers the updated parameters once per step; ZeRO 2 reduce-scatters
 * a unit's gradient bucket after every pass that writes it and all-gathers the parameters once;
 * ZeRO 3 also all-gathers a unit's parameters for every read (no all-gather after the update).
 * For blocks ZeRO 0-2 move 2P per step and ZeRO 3 3P: the paper's 1.5x. The loss all-reduce
 * (an 8-byte integer per step) is included. */
void tri_dp_step_traffic(const tri_unit_uses *units, int n, int zero_stage, int n_micro, int dp,
                         uint64_t bytes[TRI_COMM_KINDS]);
/* The same with gradients of grad_bytes and parameters of param_bytes per value (engine/train/zero.c):
 * gradients are reduced as fp32 (4) in both precisions - bf16 mixed precision keeps fp32 gradients
 * (engine/train/zero.h), as Megatron-LM's --bf16 reduces its fp32 main gradients - or as int64
 * fixed-point sums (8) in deterministic mode, doubling the gradient traffic; parameters are
 * all-gathered (after the update at ZeRO 1-2, before each use at ZeRO 3) in the model's dtype:
 * fp32 (4) or bf16 (2) under mixed precision. */
void tri_dp_step_traffic_sized(const tri_unit_uses *units, int n, int zero_stage, int n_micro, int dp,
                               int grad_bytes, int param_bytes, uint64_t bytes[TRI_COMM_KINDS]);

#endif
