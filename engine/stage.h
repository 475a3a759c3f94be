/* engine/stage.h - the stage interface: what the pipeline runs.
 *
 * A model implements one stage (a contiguous range of its layers on one pipeline rank) behind this
 * table; the engine's step and pipeline executor drive it without knowing the model. A stage keeps
 * n_slots activation slots, one per micro-batch in flight; slot buffers exchanged with neighbouring
 * stages are (N_l, C) tensors: N_l token rows (B*T, or its sequence shard under SP). */
#ifndef TRIDENT_ENGINE_STAGE_H
#define TRIDENT_ENGINE_STAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/param.h"
#include "engine/tensor.h"
#include "engine/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TRI_STAGE_ACT_IN = 0,  /* input activation, received from the previous stage */
    TRI_STAGE_ACT_OUT,     /* output activation, sent to the next stage */
    TRI_STAGE_GRAD_OUT,    /* gradient of ACT_OUT, received from the next stage */
    TRI_STAGE_GRAD_IN,     /* gradient of ACT_IN, sent to the previous stage */
} tri_stage_buffer;

typedef struct tri_stage {
    void *self;
    bool first, last;            /* holds the embedding / the LM head and loss */
    int n_slots;
    int64_t tokens_per_mb;       /* B * T */
    int64_t window;              /* T + 1: tokens per sample read from the data */
    int64_t samples_per_mb;      /* B */
    const tri_param_layout *layout;
    tri_zero *zero;              /* where the parameters and gradients live (engine/zero.h) */
    int n_global_params;         /* parameters of the whole model (tri_param_spec.global_index < it) */
    /* Sets every gradient (and any private gradient accumulator) to zero before a step. */
    int (*zero_grads)(void *self);
    /* After the step's last backward, folds private accumulators into grads (see models). */
    int (*finish_grads)(void *self);
    /* Copies one micro-batch of samples, (B, T+1) token windows on the host, into `slot`. */
    int (*load_batch)(void *self, int slot, const int32_t *windows);
    /* Forward of the micro-batch in `slot`. The last stage computes the per-token losses and, when
     * train is set, the backward of the loss and LM head (scaled by dloss). */
    int (*forward)(void *self, int slot, bool train, float dloss);
    /* Backward of the micro-batch in `slot`; gradients accumulate into grads. */
    int (*backward)(void *self, int slot);
    tri_tensor (*buffer)(void *self, tri_stage_buffer which, int slot);
    /* Last stage: sum of the slot's per-token losses (host, double). */
    int (*loss_sum)(void *self, int slot, double *sum);
} tri_stage;

#ifdef __cplusplus
}
#endif

#endif
