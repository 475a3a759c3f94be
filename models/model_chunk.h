/* models/model_chunk.h - the parts of a model chunk (engine/train/chunk.h) every family writes the
 * same way: views of a unit's parameters, a micro-batch's tokens and targets, and one row of the
 * vocab-parallel logits for sampling. Shared by GPT-2 (models/gpt.c) and Llama (models/llama.c). */
#ifndef TRIDENT_MODELS_MODEL_CHUNK_H
#define TRIDENT_MODELS_MODEL_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/device/device.h"
#include "engine/train/param.h"
#include "layers/parallel.h"

/* A growing list of parameter descriptions, as a family's param_specs builds it: each added one
 * belongs to unit `unit` (the caller advances it between units). */
typedef struct tri_spec_list {
    tri_param_spec *v;
    int n, cap;
    int unit;
} tri_spec_list;

/* Appends a description (name, global shape, TP split dimension or -1, weight decay, initialisation
 * and its std; init_rows = shape[0]; everything else zero) and returns it, or NULL when out of
 * memory (the list stays valid: free l->v). */
tri_param_spec *tri_spec_list_add(tri_spec_list *l, const char *name, int ndim, const int64_t *shape, int split,
                                  bool decay, tri_init_kind init, float std);

/* Points *wslot[i] (and *gslot[i] when gflat is present) at parameter i's local shard, for every
 * parameter i of unit u: views of pflat / gflat, which hold the unit's u->len elements. */
void tri_model_bind_views(const tri_param_layout *L, tri_tensor **wslot, tri_tensor **gslot, int u,
                          tri_tensor pflat, tri_tensor gflat);

/* Copies B windows of T + 1 tokens (host) into tokens (B T) i32, the first T of each, and targets
 * (B T) i32, the last T. TRI_ENOMEM or the copy's error. */
int tri_model_load_windows(tri_device *dev, int64_t B, int64_t T, const int32_t *windows, tri_tensor tokens,
                           tri_tensor targets);

/* The last forward's logits of token row `row` (vocab_size floats, host), from logits (N, V_l),
 * this TP rank's vocab shard of every row (f32 or bf16), gathered over the TP group (collective;
 * the buffer's last row is used as the staging row). */
int tri_model_logits_row(const tri_tp *tp, tri_tensor logits, int64_t N, int64_t V_l, int64_t vocab_size,
                         int64_t row, float *out);

#endif
