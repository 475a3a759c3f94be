/* partitioner/flops.h - model FLOPs of a training iteration.
 *
 * Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
 * Megatron-LM"), eq. 3: F = 72 B s l h^2 (1 + s / (6h) + V / (12 l h)) for B sequences of length
 * s through l layers of hidden size h and a vocabulary of V, counting the forward and the backward
 * (2x the forward) of every matmul including attention's and the LM head; with full activation
 * recomputation the forward runs twice: 96 B s l h^2 (1 + s / (6h) + V / (16 l h)). Model FLOPs
 * (not hardware FLOPs) are what achieved TFLOP/s and MFU divide. */
#ifndef TRIDENT_PARTITIONER_FLOPS_H
#define TRIDENT_PARTITIONER_FLOPS_H

#include <stdbool.h>
#include <stdint.h>

#include "partitioner/transformer.h"

/* FLOPs of one iteration over B sequences of length s (recompute: full activation recomputation). */
double tri_iteration_flops(const tri_transformer *m, int64_t B, int64_t s, bool recompute);

#endif
