/* models/gpt_rank.h - everything one rank needs to train a GPT in a (tp, pp, dp) layout.
 *
 * From the config, the process grid and the run options: the stage placement of the whole model
 * (partitioner/stages.h), this rank's model chunks (one tri_gpt per chunk; v > 1 with the
 * interleaved schedule), the training schedule, the forward-only schedules for evaluation and
 * sampling, and a pipeline for sampling. Each chunk gets exactly as many activation slots as the
 * schedules keep micro-batches in flight on it (DESIGN.md §7). */
#ifndef TRIDENT_MODELS_GPT_RANK_H
#define TRIDENT_MODELS_GPT_RANK_H

#include "engine/grid.h"
#include "engine/pipeline.h"
#include "engine/schedule.h"
#include "engine/train.h"
#include "models/gpt.h"
#include "partitioner/stages.h"

/* What a run adds to its layout (engine/train_layout.h) for the model's chunks. */
typedef struct tri_gpt_run {
    tri_train_layout layout;      /* tp, pp, dp, batch, schedule, ZeRO, precision... (resolved:
                                     partitioner/constraints.h) */
    int eval_micro;               /* micro-batches per evaluation batch (0: n_micro) */
    uint64_t seed;                /* initialisation (and the caller's data order) */
} tri_gpt_run;

typedef struct tri_gpt_rank {
    int v;                               /* model chunks on this rank */
    tri_gpt *chunk[TRI_MAX_CHUNKS];
    tri_chunk *stage[TRI_MAX_CHUNKS];     /* the engine's side of each (&chunk[c]->chunk) */
    tri_stage_plan plan;                 /* placement of the whole model */
    tri_train_layout layout;             /* the run's (the chunks keep copies) */
    tri_schedule train, eval, sample;    /* sample: forward-only, one micro-batch */
    tri_pipeline sample_pipe;
    const tri_grid *grid;
    const int32_t *sample_windows;       /* what the sampling pipeline loads */
} tri_gpt_rank;

/* Checks what the model needs beyond the layout rules (partitioner/constraints.h resolved the
 * layout): every chunk's tri_gpt_check, the stage split, the schedule. No communication, so every
 * rank reaches the same verdict. TRI_EINVAL with a message naming the flags and values. */
int tri_gpt_rank_check(const tri_gpt_config *cfg, const tri_gpt_run *o);

/* Builds this rank's chunks on dev (collective only through tri_gpt_create's initialisation, which
 * needs none) and the schedules; the grid's sizes are the layout's. */
int tri_gpt_rank_create(tri_gpt_rank *r, const tri_gpt_config *cfg, const tri_grid *g, const tri_gpt_run *o,
                        tri_device *dev);
void tri_gpt_rank_destroy(tri_gpt_rank *r);

/* Runs one forward of `windows` ((B, T+1) tokens, host) through the pipeline; on ranks holding the
 * last chunk *have is set and logits (vocab_size floats) receives the logits of token row `row`,
 * gathered over TP. Collective over the model replica. */
int tri_gpt_rank_logits(tri_gpt_rank *r, const int32_t *windows, int64_t row, float *logits, bool *have);

/* Bytes of the plan per memory category on this rank, summed over chunks. */
void tri_gpt_rank_memory(const tri_gpt_rank *r, size_t bytes[TRI_MEM_KINDS]);

/* The bytes per memory category that world rank (tp_rank, pp_rank, dp_rank) of the layout would
 * allocate for its model chunks and its trainer (the same plan tri_gpt_session_create allocates),
 * computed without allocating or communicating: the partitioner's memory prediction. */
int tri_gpt_rank_plan(const tri_gpt_config *cfg, const tri_gpt_run *o, int tp_rank, int pp_rank, int dp_rank,
                      size_t bytes[TRI_MEM_KINDS]);

/* One rank's whole training set-up: the process grid, its model chunks and the trainer. */
typedef struct tri_gpt_session {
    tri_grid grid;
    tri_gpt_rank model;
    tri_trainer trainer;
    bool have_grid, have_model, have_trainer;
} tri_gpt_session;

typedef struct tri_gpt_session_options {
    tri_gpt_run run;             /* its layout's tp x pp x dp must be the world's size */
    float clip_grad;             /* maximum global gradient norm; <= 0 disables clipping */
    tri_adamw_config adamw;
} tri_gpt_session_options;

/* Builds the grid over world (collective; its sizes from the layout), this rank's chunks on dev and
 * the trainer. On failure everything built so far is released. */
int tri_gpt_session_create(tri_gpt_session *s, tri_comm *world, tri_device *dev, const tri_gpt_config *cfg,
                           const tri_gpt_session_options *o);
void tri_gpt_session_destroy(tri_gpt_session *s);

#endif
