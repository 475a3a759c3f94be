/* tests/harness.h - runs a small GPT in any layout on thread ranks and collects what the parallel
 * equivalence tests compare: the losses of a few AdamW steps, the first step's gradients gathered
 * into global tensors, and the comm traffic of that step. */
#ifndef TRIDENT_TESTS_HARNESS_H
#define TRIDENT_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm.h"
#include "models/config.h"

#define TU_MAX_PARAMS 128
#define TU_MAX_STEPS 64

typedef struct tu_layout {
    int tp;
    bool sp;
    int n_micro;               /* micro-batches per step and replica (>= 1) */
} tu_layout;

typedef struct tu_result {
    double grad_loss;                       /* loss of the gradient-only pass on batch 0 */
    int steps;
    double losses[TU_MAX_STEPS];            /* loss before each update */
    double norms[TU_MAX_STEPS];             /* gradient norm of each update */
    int n;                                  /* parameters */
    char names[TU_MAX_PARAMS][64];
    int64_t numel[TU_MAX_PARAMS];           /* global elements (padded vocab for wte) */
    int64_t rows[TU_MAX_PARAMS], cols[TU_MAX_PARAMS];  /* global shape as (dim 0, the rest) */
    float *grads[TU_MAX_PARAMS];            /* batch 0's gradients, global tensors */
    uint64_t tp_bytes[TRI_COMM_KINDS];      /* TP traffic of rank 0 during the gradient pass */
} tu_result;

/* Trains `steps` AdamW steps of cfg (micro-batch B, sequence T) in `layout` on thread ranks from
 * the same initial weights (seed 1234), after one gradient-only pass on batch 0. windows holds
 * (steps * B * n_micro, T + 1) tokens: global batch k is rows [k * B * n_micro, ...). Returns a
 * status (the failing rank's message via tri_error_message). */
int tu_run_gpt(const tri_gpt_config *cfg, int64_t B, int64_t T, const tu_layout *layout,
               const int32_t *windows, int steps, tu_result *out);
/* The same run as one rank of an existing world comm (e.g. MPI): every rank of `world` calls it;
 * results land on world rank 0. */
int tu_run_gpt_rank(tri_comm *world, const tri_gpt_config *cfg, int64_t B, int64_t T,
                    const tu_layout *layout, const int32_t *windows, int steps, tu_result *out);
void tu_result_free(tu_result *r);
const float *tu_result_grad(const tu_result *r, const char *name, int *index);

/* A small config for parallel tests: 2 layers, 12 heads, n_embd 48, vocab 100, 16 positions. */
tri_gpt_config tu_tiny_config(void);
/* Deterministic learnable token windows (n, T + 1) for vocab V. Caller frees. */
int32_t *tu_make_windows(int64_t n, int64_t T, int V, uint64_t seed);

#endif
