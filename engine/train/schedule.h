/* engine/train/schedule.h - a pipeline schedule as data: one list of ops per pipeline rank.
 *
 * DESIGN.md §6: a generator (partitioner/pipeline_schedules.h: GPipe, 1F1B, interleaved 1F1B) returns, for
 * each pipeline rank, the ops it runs in order; the executor (engine/train/pipeline.h) interprets them,
 * fusing runs of adjacent send/receive ops into one batched p2p exchange; a simulator runs all
 * ranks' lists together before launch to prove that every send meets its receive (no deadlock),
 * to count in-flight micro-batches and to compute the bubble.
 *
 * Model chunks: with v virtual stages per rank (interleaved 1F1B, Narayanan et al. 2021 §2.2),
 * the model is cut into pp * v chunks; chunk c lives on pipeline rank c % pp as its local chunk
 * c / pp. Without interleaving v = 1 and chunk = pipeline rank. An op names the micro-batch and
 * the local chunk; the peer of a send or receive is the rank holding the neighbouring chunk. */
#ifndef TRIDENT_ENGINE_TRAIN_SCHEDULE_H
#define TRIDENT_ENGINE_TRAIN_SCHEDULE_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TRI_SCHED_RECV_ACT = 0,  /* receive the input activation of (mb, chunk) from the previous chunk */
    TRI_SCHED_FWD,           /* forward of (mb, chunk); the first chunk reads its tokens */
    TRI_SCHED_SEND_ACT,      /* send the output activation of (mb, chunk) to the next chunk */
    TRI_SCHED_RECV_GRAD,     /* receive the output gradient of (mb, chunk) from the next chunk */
    TRI_SCHED_BWD,           /* backward of (mb, chunk): input and weight gradients */
    TRI_SCHED_SEND_GRAD,     /* send the input gradient of (mb, chunk) to the previous chunk */
    TRI_SCHED_BWD_INPUT,     /* zero-bubble split: input gradient only (Qi et al. 2023) */
    TRI_SCHED_BWD_WEIGHT,    /* zero-bubble split: weight gradient only */
    TRI_SCHED_KINDS
} tri_sched_kind;

typedef struct tri_sched_op {
    int8_t kind;     /* tri_sched_kind */
    int8_t chunk;    /* local model chunk on this rank, 0..v-1 */
    int32_t mb;      /* micro-batch, 0..m-1 */
} tri_sched_op;

typedef struct tri_schedule {
    char name[32];       /* "gpipe", "1f1b", "interleaved", ... */
    int pp;              /* pipeline ranks */
    int v;               /* model chunks per rank */
    int m;               /* micro-batches per step */
    int *n_ops;          /* per rank */
    tri_sched_op **ops;  /* per rank, n_ops[r] ops */
} tri_schedule;

/* The global model chunk of local chunk `chunk` on pipeline rank `rank`. */
static inline int tri_sched_global_chunk(const tri_schedule *s, int rank, int chunk)
{
    return chunk * s->pp + rank;
}

/* True for the ops that move data between ranks. */
static inline int tri_sched_is_comm(int kind)
{
    return kind == TRI_SCHED_RECV_ACT || kind == TRI_SCHED_SEND_ACT || kind == TRI_SCHED_RECV_GRAD ||
           kind == TRI_SCHED_SEND_GRAD;
}

/* The pipeline rank a comm op talks to: the holder of the previous chunk for RECV_ACT and
 * SEND_GRAD, of the next chunk for SEND_ACT and RECV_GRAD; -1 when there is none (the first chunk
 * receives no activation, the last sends none) or for compute ops. */
int tri_sched_peer(const tri_schedule *s, int rank, const tri_sched_op *op);

/* Message tag of a comm op: activations and gradients travel with different tags, so a pair of
 * ranks may carry both (interleaved schedules wrap around) without mixing them up. */
static inline int tri_sched_tag(int kind)
{
    return kind == TRI_SCHED_RECV_ACT || kind == TRI_SCHED_SEND_ACT ? 1 : 2;
}

/* The executor's fusion rule, shared with the simulator: the maximal run of consecutive comm ops
 * starting at i forms one batched p2p exchange; returns the index after it (i + 1 for compute). */
int tri_sched_batch_end(const tri_sched_op *ops, int n, int i);

/* Activation slots local chunk `chunk` of `rank` needs: the most micro-batches alive at once,
 * a micro-batch being alive from its first op on this chunk to its last (DESIGN.md §7: the plan
 * sizes the arena from this, and the executor's measured peak must equal it). */
int tri_sched_slots_needed(const tri_schedule *s, int rank, int chunk);

/* For each op of `rank`, 1 when it is the last op touching its (chunk, mb), else 0 (last_use has
 * n_ops[rank] entries): the executor frees the micro-batch's slot after it. */
void tri_sched_last_uses(const tri_schedule *s, int rank, unsigned char *last_use);

/* "RECV_ACT", "FWD", ... */
const char *tri_sched_kind_name(int kind);

/* Prints every rank's op list, one rank per line ("rank 0: F0 S0 F1 ..."; long form with
 * verbose != 0). */
void tri_schedule_print(FILE *f, const tri_schedule *s, int verbose);

void tri_schedule_free(tri_schedule *s);

#ifdef __cplusplus
}
#endif

#endif
