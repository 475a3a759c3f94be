/* layers/parallel.h - the tensor-parallel context and Megatron's communication mappings.
 *
 * Shoeybi et al. 2019 §3 ("f" and "g"): a column-parallel layer's input needs no communication
 * forward and an all-reduce of its gradient backward (f); a row-parallel layer's output is
 * all-reduced forward and needs nothing backward (g). With sequence parallelism (Korthikanti et
 * al. 2022 §4.2.2) activations between those layers are sharded along the token dimension: the
 * column-parallel input is all-gathered forward (its gradient reduce-scattered backward), and the
 * row-parallel output is reduce-scattered forward (its gradient all-gathered backward).
 *
 * Tokens are the rows of a (B*T, C) matrix; the sequence shard of TP rank r is rows
 * [r*N/tp, (r+1)*N/tp), contiguous in memory (equivalent to Megatron's [s, b, h] split for every
 * per-token op, and no transpose is needed). */
#ifndef TRIDENT_LAYERS_PARALLEL_H
#define TRIDENT_LAYERS_PARALLEL_H

#include <stdbool.h>

#include "engine/comm/comm.h"
#include "engine/device/device.h"

typedef struct tri_tp {
    tri_device *dev;
    tri_comm *comm;    /* the tensor-parallel group (one rank without TP) */
    bool sp;           /* sequence parallelism */
} tri_tp;

/* Where a rank's token rows sit in their sequences. A micro-batch's rows are (B, T_l) with T_l = T / cp:
 * the whole sequences at cp 1; under context parallelism (docs/context_parallel.md) chunks cp_rank and
 * 2cp-1-cp_rank of each sequence of T tokens (engine/device/ops/positions_math.h maps a row to its
 * global position). */
typedef struct tri_seq {
    int64_t T;         /* the whole sequence's length */
    int cp, cp_rank;   /* context-parallel size (1: none) and this rank's place in it */
} tri_seq;

static inline int tri_tp_size(const tri_tp *tp)
{
    return tp->comm->size;
}

static inline int tri_tp_rank(const tri_tp *tp)
{
    return tp->comm->rank;
}

/* Rows of this rank's sequence shard out of N token rows (N without SP). */
static inline int64_t tri_tp_rows(const tri_tp *tp, int64_t N)
{
    return tp->sp ? N / tri_tp_size(tp) : N;
}

/* Index of this rank's first token row (0 without SP). */
static inline int64_t tri_tp_row0(const tri_tp *tp, int64_t N)
{
    return tp->sp ? tri_tp_rank(tp) * (N / tri_tp_size(tp)) : 0;
}

/* Input of a column-parallel layer: under SP all-gathers the (N/tp, C) shard into full (N, C) and
 * returns full; otherwise returns x itself (already full). */
int tri_tp_gather_input(const tri_tp *tp, tri_tensor *result, tri_tensor x, tri_tensor full);

/* Sums partial (N, C) products over TP into out: all-reduce in place (out must be partial) or,
 * under SP, reduce-scatter into the (N/tp, C) shard out. */
int tri_tp_reduce_output(const tri_tp *tp, tri_tensor out, tri_tensor partial);

#endif
