/* engine/train/pipeline.h - the pipeline executor: runs one rank's op list of a schedule.
 *
 * DESIGN.md §6: the schedule is data; this interprets it. Each maximal run of adjacent send and
 * receive ops becomes one batched p2p exchange on the pipeline group (so send-forward/recv-backward
 * is one exchange and needs no even/odd ordering trick); FWD and BWD run the local model chunk
 * (engine/train/chunk.h). A micro-batch takes an activation slot of its chunk at its first op and
 * gives it back after its last op on this rank, so the stage holds activations for exactly the
 * micro-batches in flight; the executor records the peak it saw per chunk. */
#ifndef TRIDENT_ENGINE_TRAIN_PIPELINE_H
#define TRIDENT_ENGINE_TRAIN_PIPELINE_H

#include <stdbool.h>

#include "engine/comm/comm.h"
#include "engine/train/chunk.h"
#include "engine/train/schedule.h"
#include "engine/train/step_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where micro-batches come from: load(ctx, chunk, mb, slot) puts micro-batch mb's tokens and
 * targets into `slot` of local chunk `chunk` (called for the first and the last model chunk). */
typedef struct tri_pipeline_io {
    void *ctx;
    int (*load)(void *ctx, int chunk, int mb, int slot);
} tri_pipeline_io;

typedef struct tri_pipeline {
    const tri_schedule *sched;
    int rank;                  /* pipeline rank */
    tri_comm *pp_comm;         /* ranked by pipeline rank */
    tri_chunk **chunks;        /* the rank's sched->v model chunks, by local index */
    unsigned char *last_use;   /* per op: frees its micro-batch's slot */
    int *slot;                 /* [chunk * m + mb]: slot in use, or -1 */
    int *in_use, *peak;        /* per chunk: slots in use now, and the most seen */
    unsigned char **busy;      /* per chunk: which slots are taken */
    tri_p2p *batch;            /* scratch for one p2p exchange */
    /* the last chunk's per-token losses, read asynchronously: micro-batch mb's loss_n at
     * loss_host + mb * loss_n (host staging memory of loss_dev), loss_read[mb] once started */
    tri_device *loss_dev;
    float *loss_host;
    int64_t loss_n;
    unsigned char *loss_read;
    /* optional (not owned): a training run's FWD and BWD ops run through its device graphs
     * (engine/train/step_graph.h: --enable-cuda-graph); NULL: eagerly */
    tri_step_graph *graph;
    /* time of the last run (seconds, wall clock): computing (FWD/BWD ops) and in all */
    double busy_s, total_s;
} tri_pipeline;

/* Prepares to run rank `rank`'s ops of s over pp_comm with the given chunks (sched->v of them).
 * TRI_EINVAL when a chunk has fewer activation slots than the schedule needs. */
int tri_pipeline_create(tri_pipeline *p, const tri_schedule *s, int rank, tri_comm *pp_comm,
                        tri_chunk **chunks);

#define TRI_LOSS_BITS 32 /* loss sums in 2^-32 units: exact to add in any grouping */

/* Runs the ops once. train: forward with the fused loss backward (scaled by dloss) and backward;
 * otherwise the schedule must be forward-only. *loss_fixed = the sum over micro-batches of each
 * micro-batch's token-loss sum rounded to 2^-TRI_LOSS_BITS, on the rank holding the last chunk
 * (0 elsewhere): integers, so replicas' sums add exactly, in any order. Reading the losses waits
 * for the device; with loss_fixed NULL the run returns without waiting and tri_pipeline_losses reads
 * them later (a trainer step reads them after the gradient norm's copy, its one wait). */
int tri_pipeline_run(tri_pipeline *p, const tri_pipeline_io *io, bool train, float dloss,
                     int64_t *loss_fixed);

/* *loss_fixed of the last run (see tri_pipeline_run), after one wait for the device (none left to
 * wait for when something since has waited for it). */
int tri_pipeline_losses(tri_pipeline *p, int64_t *loss_fixed);

void tri_pipeline_destroy(tri_pipeline *p);

#ifdef __cplusplus
}
#endif

#endif
