/* partitioner/train_layout.h - everything a user chooses about how a model trains, in one value.
 *
 * The parallel sizes and batch shape (tri_layout_shape), the pipeline schedule and its model
 * chunks per rank, the ZeRO stage (Rajbhandari et al. 2020), activation recomputation (Korthikanti
 * et al. 2022: none, selective = the attention core, full = every layer from its input) and the
 * precision: fp32 or bf16 mixed precision (Micikevicius et al. 2018; engine_train --bf16, as
 * Megatron-LM's --bf16: bf16 weights and activations, fp32 gradients, an fp32 master copy and fp32
 * AdamW moments; engine/zero.h). The memory model, the time model and the layout search all read this. */
#ifndef TRIDENT_PARTITIONER_TRAIN_LAYOUT_H
#define TRIDENT_PARTITIONER_TRAIN_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "partitioner/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation recomputation (the engine's models/gpt.h and the planner share it). */
typedef enum { TRI_RECOMPUTE_NONE = 0, TRI_RECOMPUTE_SELECTIVE, TRI_RECOMPUTE_FULL } tri_recompute;
typedef enum { TRI_PRECISION_FP32 = 0, TRI_PRECISION_BF16 } tri_precision;

typedef struct tri_train_layout {
    int tp, pp, dp;
    int v;                     /* model chunks per pipeline rank (> 1 only with "interleaved") */
    bool sequence_parallel;
    int64_t B, T;              /* micro-batch size, sequence length */
    int64_t global_batch;      /* sequences per iteration = B * n_micro * dp */
    int n_micro;               /* micro-batches per iteration and data-parallel replica */
    int zero_stage;            /* 0..3 */
    tri_recompute recompute;
    tri_precision precision;
    const char *schedule;      /* "1f1b", "gpipe", "interleaved", "zb-h1" */
    int first_layers, last_layers; /* Megatron-LM's first/last stage overrides, -1: balanced */
    bool deterministic;        /* the engine's fixed-point gradient sums (engine/zero.h): its plan
                                  counts their buffers, the formulas do not */
    bool overlap_grad_reduce;  /* Megatron-LM's --overlap-grad-reduce / --overlap-param-gather: the */
    bool overlap_param_gather; /* engine's plan counts their buffers; the time model takes the share
                                  of DP communication left exposed from tri_efficiency.dp_exposed */
} tri_train_layout;

/* The shape the stage split and the traffic functions take. */
static inline tri_layout_shape tri_train_layout_shape(const tri_train_layout *l)
{
    tri_layout_shape s = {.tp = l->tp, .pp = l->pp, .dp = l->dp, .sequence_parallel = l->sequence_parallel,
                          .B = l->B, .T = l->T, .n_micro = l->n_micro};
    return s;
}

/* Bytes of one activation / gradient element: 4 (fp32) or 2 (bf16). */
static inline int tri_precision_bytes(tri_precision p)
{
    return p == TRI_PRECISION_BF16 ? 2 : 4;
}

/* "none", "selective", "full" / "fp32", "bf16". */
const char *tri_recompute_name(tri_recompute r);
const char *tri_precision_name(tri_precision p);

#ifdef __cplusplus
}
#endif

#endif
