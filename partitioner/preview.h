/* partitioner/preview.h - everything the partitioner CLI reports about one layout on one cluster.
 *
 * From a model, a resolved layout (partitioner/constraints.h) and a cluster: the stage placement
 * (partitioner/stages.h), the training schedule and its simulation (partitioner/simulate.h), the
 * predicted iteration time (partitioner/time_model.h) and per pipeline rank the memory by category
 * and whether it fits the device.
 *
 * Memory comes from one of two places, and the preview says which:
 *   the engine's own plan, when the caller passes one (models/preview.h passes
 *     tri_model_rank_plan): the exact bytes the engine allocates, computed without allocating, for
 *     every layout the engine runs (fp32 and bf16 mixed precision, any ZeRO stage and
 *     recomputation);
 *   the formulas of partitioner/memory_model.h (the same buffers in closed form) when no engine
 *     plan is given.
 * The formulas are computed in every case (model_mem) so the two can be compared. Micro-batches in
 * flight, in both: the engine's activation slots (the executor's rule, tri_sched_slots_needed over
 * the training and evaluation schedules). Pure planning: no device, no comm. */
#ifndef TRIDENT_PARTITIONER_PREVIEW_H
#define TRIDENT_PARTITIONER_PREVIEW_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/device/arena.h"
#include "engine/train/schedule.h"
#include "partitioner/hardware.h"
#include "partitioner/simulate.h"
#include "partitioner/stages.h"
#include "partitioner/time_model.h"
#include "partitioner/train_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's plan of pipeline rank pp_rank (TP rank 0, DP rank 0) of layout l: bytes per
 * category. TRI_OK or an error with a message. */
typedef int (*tri_engine_plan_fn)(void *ctx, const tri_train_layout *l, int pp_rank, size_t bytes[TRI_MEM_KINDS]);

typedef struct tri_preview {
    tri_transformer model;               /* (its block's cfg borrowed: the model outlives the preview) */
    tri_train_layout layout;
    tri_cluster cluster;
    tri_stage_plan plan;
    tri_schedule sched;                  /* training schedule */
    tri_sim_result sim;                  /* its simulation with message times (the timeline) */
    tri_time_result time;
    int pp;
    double (*mem)[TRI_MEM_KINDS];        /* [pp] reported bytes per category */
    double (*model_mem)[TRI_MEM_KINDS];  /* [pp] the formulas' bytes per category */
    double *total;                       /* [pp] sum of mem */
    double *model_total;                 /* [pp] sum of model_mem */
    int *in_flight;                      /* [pp] micro-batches kept, summed over the rank's chunks */
    bool *fits;                          /* [pp] total <= usable */
    double usable_bytes;                 /* per rank (partitioner/hardware.h) */
    bool all_fit;
    bool from_engine_plan;               /* mem is the engine's plan */
} tri_preview;

/* Builds the preview. engine_plan (may be NULL) and ctx give the engine's memory plan. TRI_EINVAL
 * when the layout cannot be split or scheduled (the message says why), TRI_ENOMEM. On failure *p
 * is empty (safe to destroy). */
int tri_preview_create(tri_preview *p, const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                       tri_engine_plan_fn engine_plan, void *ctx);
void tri_preview_destroy(tri_preview *p);

/* The world ranks and nodes of pipeline rank r: ranks [*lo, *hi], nodes [*node_lo, *node_hi]. */
void tri_preview_stage_ranks(const tri_preview *p, int r, int *lo, int *hi, int *node_lo, int *node_hi);

/* Micro-batches each local chunk of rank r keeps (in_flight[c], c < v) under layout l: the engine's
 * activation slots for training schedule train and the evaluation schedule. */
int tri_preview_chunk_in_flight(const tri_train_layout *l, const tri_schedule *train, int r, int *in_flight);

#ifdef __cplusplus
}
#endif

#endif
