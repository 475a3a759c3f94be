/* engine/optimizer.h - AdamW over a range of a stage's flat buffers, the global gradient norm, and
 * the learning-rate schedule.
 *
 * The optimizer owns Adam's m and v for one contiguous range [lo, hi) of the flat buffers: the
 * whole buffer without ZeRO, this data-parallel rank's shard with it (Rajbhandari et al. 2020).
 * It walks the parameters overlapping the range (shards ignore tensor boundaries) and applies each
 * parameter's own weight decay. AdamW: Loshchilov & Hutter 2019; clipping by global norm:
 * Pascanu et al. 2013; warm-up + cosine decay as Megatron-LM's OptimizerParamScheduler. */
#ifndef TRIDENT_ENGINE_OPTIMIZER_H
#define TRIDENT_ENGINE_OPTIMIZER_H

#include "engine/arena.h"
#include "engine/device.h"
#include "engine/param.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_adamw_config {
    float beta1, beta2, eps;
    float weight_decay;       /* applied to parameters whose spec says weight_decay */
} tri_adamw_config;

typedef struct tri_optimizer {
    tri_adamw_config cfg;
    int64_t lo, hi;           /* the range of the flat buffers this optimizer updates */
    tri_tensor m, v;          /* (hi - lo) f32 */
    tri_tensor scalar;        /* (1) f32 scratch for reductions */
    int64_t step;             /* updates done */
} tri_optimizer;

/* Takes m, v and scratch for the range [lo, hi) from an arena (planned like every buffer). */
int tri_optimizer_take(tri_optimizer *o, tri_arena *a, const tri_adamw_config *cfg, int64_t lo,
                       int64_t hi);
/* Zeroes the state (after the arena is committed). */
int tri_optimizer_reset(tri_device *d, tri_optimizer *o);

/* *sumsq = sum of squared gradients of the parameters in [lo, hi) that this rank counts in the
 * global norm (tri_param.count_in_norm). The caller sums it over the ranks holding other parts. */
int tri_grad_sumsq(tri_device *d, const tri_param_layout *L, tri_tensor grads, int64_t lo, int64_t hi,
                   tri_tensor scalar, double *sumsq);

/* One AdamW update of the range, gradients first multiplied by grad_scale (clipping). */
int tri_optimizer_step(tri_device *d, tri_optimizer *o, const tri_param_layout *L, tri_tensor params,
                       tri_tensor grads, float lr, float grad_scale);

typedef enum { TRI_LR_COSINE = 0, TRI_LR_LINEAR, TRI_LR_CONSTANT } tri_lr_style;

typedef struct tri_lr_schedule {
    float lr, min_lr;
    int64_t warmup_iters;     /* linear warm-up from 0 to lr over these updates */
    int64_t decay_iters;      /* decay ends at this update; min_lr after it */
    tri_lr_style style;
} tri_lr_schedule;

/* Learning rate of update number `iter` (1-based). */
float tri_lr_at(const tri_lr_schedule *s, int64_t iter);

#ifdef __cplusplus
}
#endif

#endif
