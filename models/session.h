/* models/session.h - everything one rank needs to train a model, of any family, in a (tp, pp, dp)
 * layout.
 *
 * From the model (models/model.h), the process grid and the run: the stage placement of the whole
 * model (partitioner/stages.h), this rank's model chunks (the family's, each with its engine side,
 * engine/train/chunk.h; v > 1 with the interleaved schedule), the training schedule, the forward-only
 * schedules for evaluation and sampling, a pipeline for sampling, and the trainer. Each chunk gets
 * exactly as many activation slots as the schedules keep micro-batches in flight on it (DESIGN.md
 * §7). Nothing here knows a model family. */
#ifndef TRIDENT_MODELS_SESSION_H
#define TRIDENT_MODELS_SESSION_H

#include "engine/comm/grid.h"
#include "engine/train/pipeline.h"
#include "engine/train/schedule.h"
#include "engine/train/train.h"
#include "models/model.h"
#include "partitioner/stages.h"

/* What a run adds to its layout (engine/train/train_layout.h) for the model's chunks. */
typedef struct tri_model_run {
    tri_train_layout layout;      /* tp, pp, dp, batch, schedule, ZeRO, precision... (resolved:
                                     partitioner/constraints.h) */
    int eval_micro;               /* micro-batches per evaluation batch (0: n_micro) */
    uint64_t seed;                /* initialisation (and the caller's data order) */
} tri_model_run;

typedef struct tri_model_rank {
    const tri_model *model;              /* not owned */
    int v;                               /* model chunks on this rank */
    void *impl[TRI_MAX_CHUNKS];          /* the family's chunks (tri_gpt for gpt2) */
    tri_chunk *chunk[TRI_MAX_CHUNKS];    /* their engine sides */
    tri_stage_plan plan;                 /* placement of the whole model */
    tri_train_layout layout;             /* the run's */
    tri_train_layout local;              /* what the chunks build (they keep copies): the run's, or under
                                            context parallelism its rank's view (tri_layout_cp_local: T / cp
                                            rows a sequence, dp x cp replicas) */
    tri_schedule train, eval, sample;    /* sample: forward-only, one micro-batch */
    tri_pipeline sample_pipe;
    const tri_grid *grid;
    const int32_t *sample_windows;       /* what the sampling pipeline loads */
    int sample_slot[TRI_MAX_CHUNKS];     /* where each chunk got it */
    tri_comm *tokens_comm;               /* cp > 1 and tp > 1: the tp x cp ranks of one micro-batch's tokens
                                            (tri_chunk_place.tokens_comm), owned; else NULL */
} tri_model_rank;

/* Checks what the model needs beyond the layout rules (partitioner/constraints.h resolved the
 * layout): every chunk's family check, the stage split, the schedule. No communication, so every
 * rank reaches the same verdict. TRI_EINVAL with a message naming the flags and values. */
int tri_model_rank_check(const tri_model *m, const tri_model_run *o);

/* Builds this rank's chunks on dev (collective only through the family's chunk initialisation, which
 * needs none) and the schedules; the grid's sizes are the layout's. */
int tri_model_rank_create(tri_model_rank *r, const tri_model *m, const tri_grid *g, const tri_model_run *o,
                          tri_device *dev);
void tri_model_rank_destroy(tri_model_rank *r);

/* Runs one forward of `windows` ((B, T+1) tokens, host) through the pipeline; on ranks holding the
 * last chunk *have is set and logits (vocab_size floats) receives the logits of token row `row`,
 * gathered over TP. Collective over the model replica. */
int tri_model_rank_logits(tri_model_rank *r, const int32_t *windows, int64_t row, float *logits, bool *have);

/* Bytes of the plan per memory category on this rank, summed over chunks. */
void tri_model_rank_memory(const tri_model_rank *r, size_t bytes[TRI_MEM_KINDS]);

/* The bytes per memory category that world rank (tp_rank, pp_rank, dp_rank) of the layout would
 * allocate for its model chunks and its trainer (the same plan tri_session_create allocates),
 * computed without allocating or communicating: the partitioner's memory prediction. Under context
 * parallelism dp_rank is the rank in dp x cp, cp_rank + cp dp_rank (the grid's dp_cp_comm rank). */
int tri_model_rank_plan(const tri_model *m, const tri_model_run *o, int tp_rank, int pp_rank, int dp_rank,
                        size_t bytes[TRI_MEM_KINDS]);

/* One rank's whole training set-up: the process grid, its model chunks and the trainer. */
typedef struct tri_session {
    tri_grid grid;
    tri_model_rank model;
    tri_trainer trainer;
    bool have_grid, have_model, have_trainer;
} tri_session;

typedef struct tri_session_options {
    tri_model_run run;             /* its layout's tp x pp x dp must be the world's size */
    float clip_grad;             /* maximum global gradient norm; <= 0 disables clipping */
    tri_adamw_config adamw;
    tri_local_sgd_config local_sgd; /* local SGD / DiLoCo (engine/train/local_sgd.h); steps 0: off */
    bool cuda_graph;               /* --enable-cuda-graph (engine/train/step_graph.h) */
} tri_session_options;

/* Builds the grid over world (collective; its sizes from the layout), this rank's chunks on dev and
 * the trainer. On failure everything built so far is released. */
int tri_session_create(tri_session *s, tri_comm *world, tri_device *dev, const tri_model *m,
                       const tri_session_options *o);
void tri_session_destroy(tri_session *s);

#endif
