/* models/preview.h - the engine's memory plan of a model, as the partitioner uses it.
 *
 * One code path (DESIGN.md §7): the partitioner CLI's memory figures (fp32 or bf16 mixed
 * precision, any ZeRO stage and recomputation) and the plan engine_train prints at start both come
 * from tri_model_rank_plan (models/session.h), the very plan the engine allocates, for a model of
 * any family. */
#ifndef TRIDENT_MODELS_PREVIEW_H
#define TRIDENT_MODELS_PREVIEW_H

#include <stdio.h>

#include "models/session.h"
#include "partitioner/train_layout.h"

/* A partitioner/preview.h tri_engine_plan_fn: ctx is the const tri_model *. Bytes per category
 * of pipeline rank pp_rank (TP rank 0, DP rank 0). */
int tri_model_preview_plan(void *ctx, const tri_train_layout *l, int pp_rank, size_t bytes[TRI_MEM_KINDS]);

/* Prints the engine's planned memory of every pipeline stage of a tp x pp x dp layout as
 * partitioner/memory_table.h's table (what engine_train prints at start). */
int tri_model_print_stage_memory(FILE *f, const tri_model *m, const tri_train_layout *l);

#endif
