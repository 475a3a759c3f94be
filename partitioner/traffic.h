/* partitioner/traffic.h - communication volume of one training step, by group and kind.
 *
 * Counted in the payload convention of engine/comm.h (all-reduce: the buffer; reduce-scatter and
 * all-gather: the full buffer; p2p: bytes sent), for fp32 activations, so that the comm byte
 * counters of a run can be checked against these numbers exactly.
 *
 * Tensor parallelism (Shoeybi et al. 2019 §3; per micro-batch, N = B*T token rows, C = n_embd,
 * 4-byte values): each block all-reduces N*C twice forward (attention and MLP outputs, row-parallel)
 * and twice backward (their inputs' gradients, column-parallel); the first stage all-reduces the
 * vocab-parallel embedding's output, the last stage all-reduces the LM head's input gradient and the
 * loss's row max (N) and sum-exp/target logit (2N). With sequence parallelism (Korthikanti et al.
 * 2022 §4.2.2) each all-reduce becomes a reduce-scatter forward and an all-gather backward, plus
 * the all-gathers that re-gather column-parallel inputs for the weight gradients, and once per step
 * the replicated parameters' gradients are all-reduced. */
#ifndef TRIDENT_PARTITIONER_TRAFFIC_H
#define TRIDENT_PARTITIONER_TRAFFIC_H

#include "engine/comm.h"
#include "partitioner/transformer.h"

/* bytes[kind] = tensor-parallel traffic of one training step of the stage on one rank. */
void tri_tp_step_traffic(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_place *s,
                         uint64_t bytes[TRI_COMM_KINDS]);

#endif
