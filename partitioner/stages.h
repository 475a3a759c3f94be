/* partitioner/stages.h - the pipeline stage split: which transformer blocks each stage holds.
 *
 * The n_layer blocks are cut into pp * v model chunks of consecutive blocks, in model order; chunk
 * c runs on pipeline rank c % pp as its local chunk c / pp (engine/train/schedule.h). The first chunk
 * also holds the token and position embeddings, the last the final layernorm, the LM head and the
 * loss.
 *
 * Without interleaving (v = 1) and without overrides, the split minimises the largest stage cost
 * exactly (dynamic program over (stage, first block), O(pp * n_layer^2)). The cost of a stage is
 *
 *     cost = max(FLOP share, memory share)
 *
 * its fraction of the whole model's training FLOPs and its fraction of the whole model's memory, so
 * 1/pp is a perfect balance of both and the largest cost bounds both the slowest stage's time
 * (pipeline throughput) and the fullest device's memory. Both are counted per TP rank and per
 * micro-batch of B x T tokens (N = B*T rows, C = n_embd, Vp the vocab padded to 128*tp):
 *   FLOPs (Narayanan et al. 2021 §3.3.1, backward = 2 x forward): a block 3 (24 B T C^2 + 4 B T^2 C)
 *     / tp; the LM head and loss 6 B T C Vp / tp; the embedding 3 N C (lookup and position add).
 *   memory, in bytes: 16 per parameter (fp32 value, gradient, AdamW m and v) plus 4 per fp32
 *     activation value one micro-batch keeps for its backward (models/gpt.h's slot: per block
 *     4 N_l (C + 1) + 12 N C/tp + B (NH/tp) T^2, N_l = N/tp under sequence parallelism, else N).
 *     A block has (12 C^2 + 7 C)/tp + 6 C parameters; the first stage adds wte (Vp/tp x C) and wpe
 *     (n_positions x C) and the tokens and targets; the last adds its copy of the tied wte (when it
 *     is not also the first), ln_f, the final layernorm's activations and the (N x Vp/tp) logits.
 *   Activations are counted for one micro-batch in flight; how many a schedule keeps (1F1B: pp - r
 *   on rank r) is not part of the cost, so the split does not depend on the schedule.
 * Among the splits with the smallest largest cost, the one with the smallest sum of squared stage
 * costs is taken (a second exact program), and among those the one with more blocks on later
 * stages (they keep fewer micro-batches in flight under 1F1B).
 *
 * Megatron-LM's overrides --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
 * give the first / last stage exactly that many blocks; the other stages share the rest as evenly
 * as possible (the later ones taking one more when it does not divide). With v > 1
 * (--num-layers-per-virtual-pipeline-stage), n_layer must divide by pp * v and every chunk gets
 * n_layer / (pp * v) blocks.
 *
 * Errors (TRI_EINVAL, the message names Megatron-LM's flags and the values): n_layer < pp * v, a
 * layer count not divisible by pp * v with v > 1, an override below 1, overrides with v > 1 or
 * pp = 1, overrides that exceed n_layer or leave a stage without a block. Pure planning. */
#ifndef TRIDENT_PARTITIONER_STAGES_H
#define TRIDENT_PARTITIONER_STAGES_H

#include <stdbool.h>
#include <stdio.h>

#include "partitioner/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_stage_options {
    int v;             /* model chunks per pipeline rank; 1 = no interleaving */
    int first_layers;  /* --decoder-first-pipeline-num-layers, or -1 */
    int last_layers;   /* --decoder-last-pipeline-num-layers, or -1 */
} tri_stage_options;

/* What one model chunk costs, per TP rank and micro-batch (see the top comment). */
typedef struct tri_stage_cost {
    double flops;        /* training FLOPs (forward + backward) */
    double bytes;        /* parameters with gradients and AdamW state, plus one micro-batch's
                            activations */
    double flop_share;   /* flops / the whole model's */
    double mem_share;    /* bytes / the whole model's */
    double cost;         /* max(flop_share, mem_share) */
} tri_stage_cost;

typedef struct tri_stage_plan {
    int n_layer, pp, v, tp, dp;
    int n_chunks;              /* pp * v */
    tri_stage_place *chunks;   /* [n_chunks] in model order; chunk c on pipeline rank c % pp */
    tri_stage_cost *costs;     /* [n_chunks] */
    double max_cost;           /* the largest chunk cost */
    const char *method;        /* "balanced", "overrides", "interleaved" or "single stage" */
} tri_stage_plan;

/* Splits model m for layout l (l->pp stages; l->tp, l->dp, l->B, l->T, l->sequence_parallel for
 * costs and ranks) with options o. TRI_OK, TRI_EINVAL (see the top comment), TRI_ENOMEM. On failure
 * *out is empty (safe to free). */
int tri_stage_split(tri_stage_plan *out, const tri_transformer *m, const tri_layout_shape *l,
                    const tri_stage_options *o);

void tri_stage_plan_free(tri_stage_plan *p);

/* The cost of a chunk of `layers` blocks (holding the embedding if first, the LM head and loss if
 * last) of model m under layout l, when the model is cut into n_chunks chunks in all (the last
 * chunk keeps its own copy of the tied wte when n_chunks > 1). */
tri_stage_cost tri_stage_chunk_cost(const tri_transformer *m, const tri_layout_shape *l, int n_chunks,
                                    int layers, bool first, bool last);

/* v from Megatron-LM's --num-layers-per-virtual-pipeline-stage: n_layer / (pp * per_chunk).
 * TRI_EINVAL when per_chunk < 1 or n_layer does not divide by pp * per_chunk. */
int tri_stage_virtual_size(int n_layer, int pp, int per_chunk, int *v);

/* The world ranks holding pipeline rank pp_rank: [*lo, *hi], as
 * world_rank = tp_rank + tp * (dp_rank + dp * pp_rank) (DESIGN.md §3). */
void tri_stage_world_ranks(int pp_rank, int tp, int dp, int *lo, int *hi);

/* Prints "stage -> layers -> ranks" with each chunk's FLOPs, memory and shares, one chunk a line. */
void tri_stage_plan_print(FILE *f, const tri_stage_plan *p);

#ifdef __cplusplus
}
#endif

#endif
