/* engine/train/step_time.h - where a rank's training step time went: compute, each communication group,
 * and the pipeline bubble.
 *
 * Every comm adds the wall time a rank is blocked in it, per operation kind (engine/comm/comm.h). A
 * snapshot of the grid's comms taken before and after a step gives the step's split:
 *   tp_s     blocked in the tensor-parallel group (layer all-reduces / SP reduce-scatter+gathers)
 *   pp_s     blocked in pipeline-group collectives (the loss broadcast)
 *   bubble_s blocked in pipeline send/receive: waiting for the neighbour stage (the bubble of the
 *            schedule) plus the transfer itself, which on shared memory is the small part
 *   dp_s     blocked in the data-parallel group (gradient reduce-scatter/all-reduce, ZeRO gathers),
 *            and under expert parallelism in the expert-data-parallel group (the experts' gradients)
 *   ep_s     blocked in the expert-parallel group (the MoE token exchange and its counts; 0 at ep 1)
 *   cp_s     blocked in the context-parallel group (docs/context_parallel.md): the exposed cp
 *            communication, the attention's all-gathers and reduce-scatters and the p2p ring's waits
 *            (an asynchronous transfer counts its start and its wait, not what overlaps the block
 *            compute); 0 at cp 1
 *   other_s  the model-parallel, embedding and world groups (gradient norm, tied embedding)
 *   compute_s the rest of the step: step_s - all of the above (never negative)
 * so compute_s + tp_s + pp_s + bubble_s + dp_s + ep_s + cp_s + other_s == step_s. All values are seconds.
 * Measured on the host: with the MPI and thread comms a blocked call is the wait itself; with NCCL,
 * which enqueues on a stream, the wait shows where the host next synchronises (the device's
 * time split then needs CUDA events, not done here). */
#ifndef TRIDENT_ENGINE_TRAIN_STEP_TIME_H
#define TRIDENT_ENGINE_TRAIN_STEP_TIME_H

#include "engine/comm/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_step_time {
    double step_s, compute_s, tp_s, pp_s, bubble_s, dp_s, other_s, ep_s;
    /* wire bytes this rank sent (engine/comm/comm.h "Wire bytes") by group: tensor-parallel,
     * pipeline (p2p and the pipeline group's collectives), data-parallel (with the
     * expert-data-parallel group), expert-parallel (all-to-all tokens and the count exchange) */
    double tp_bytes, pp_bytes, dp_bytes, ep_bytes;
    /* context parallelism (grid's cp_comm; 0 at cp 1): blocked seconds, and the payload bytes this rank
     * sent (engine/comm/comm.h's payload convention, partitioner/context_parallel.h's
     * tri_cp_layer_traffic: all-gathers and reduce-scatters count the full buffer, p2p the bytes sent) */
    double cp_s, cp_bytes;
} tri_step_time;

/* Blocked seconds and wire bytes per group so far (step_s and compute_s are left 0): a snapshot. */
tri_step_time tri_step_time_snapshot(const tri_grid *g);

/* The split of a step of step_s seconds between snapshots before and after it. */
tri_step_time tri_step_time_split(const tri_step_time *before, const tri_step_time *after, double step_s);

/* Seconds blocked in communication (everything but compute), the "wait" of straggler detection. */
double tri_step_time_wait(const tri_step_time *t);

/* a += b, field by field (to sum steps over a log interval). */
void tri_step_time_add(tri_step_time *a, const tri_step_time *b);

#ifdef __cplusplus
}
#endif

#endif
