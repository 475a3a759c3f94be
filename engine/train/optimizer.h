/* engine/train/optimizer.h - AdamW over the parameters a rank owns, the gradient norm's pieces, and the
 * learning-rate schedule.
 *
 * The optimizer keeps Adam's m and v for what this rank owns under ZeRO (engine/train/zero.h): the whole
 * stage without ZeRO, its slice of every unit with it (Rajbhandari et al. 2020). It walks the
 * parameters overlapping each owned range (shards ignore tensor boundaries) and applies each
 * parameter's own weight decay. AdamW: Loshchilov & Hutter 2019; clipping by global norm:
 * Pascanu et al. 2013; warm-up + cosine decay as Megatron-LM's OptimizerParamScheduler. */
#ifndef TRIDENT_ENGINE_TRAIN_OPTIMIZER_H
#define TRIDENT_ENGINE_TRAIN_OPTIMIZER_H

#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/param.h"
#include "engine/train/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_adamw_config {
    float beta1, beta2, eps;
    float weight_decay;       /* applied to parameters whose spec says weight_decay */
} tri_adamw_config;

typedef struct tri_optimizer {
    tri_adamw_config cfg;
    tri_tensor m, v;          /* (tri_zero_owned_numel) f32, by the owned ranges' local offsets */
    tri_tensor scalar;        /* (1) f32 scratch for reductions */
    int64_t step;             /* updates done */
} tri_optimizer;

/* Takes m, v and scratch for `owned` elements from an arena (planned like every buffer). */
int tri_optimizer_take(tri_optimizer *o, tri_arena *a, const tri_adamw_config *cfg, int64_t owned);
/* Zeroes the state (after the arena is committed). */
int tri_optimizer_reset(tri_device *d, tri_optimizer *o);

/* One AdamW update of every owned range, gradients first multiplied by grad_scale (clipping), in
 * one tri_op_adamw_multi call (each parameter's weight decay per piece). TRI_ENOMEM or the op's. */
int tri_optimizer_step(tri_device *d, tri_optimizer *o, const tri_zero *z, float lr, float grad_scale);

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
