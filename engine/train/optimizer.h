/* engine/train/optimizer.h - the optimizer over the parameters a rank owns (AdamW, SGD with
 * momentum, LARS, LAMB) and the learning-rate schedule.
 *
 * The optimizer keeps its state for what this rank owns under ZeRO (engine/train/zero.h): the whole
 * stage without ZeRO, its slice of every unit with it (Rajbhandari et al. 2020): Adam's m and v
 * (AdamW, LAMB) or one momentum buffer (SGD, LARS). It walks the parameters overlapping each owned
 * range (shards ignore tensor boundaries) and applies each parameter's own weight decay.
 * AdamW: Loshchilov & Hutter 2019; SGD with momentum as torch.optim.SGD (Sutskever et al. 2013 for
 * Nesterov); LARS: You et al. 2017; LAMB: You et al. 2020; clipping by global norm: Pascanu et al.
 * 2013; warm-up + cosine decay as Megatron-LM's OptimizerParamScheduler. LARS and LAMB scale each
 * tensor's update by a trust ratio of whole-tensor norms, which engine/train/trust_ratio.h computes
 * across the ranks before tri_optimizer_step. Parameters whose spec has weight_decay false (biases,
 * norm weights) are excluded from the decay and from the trust ratio (ratio 1), as in both papers. */
#ifndef TRIDENT_ENGINE_TRAIN_OPTIMIZER_H
#define TRIDENT_ENGINE_TRAIN_OPTIMIZER_H

#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/param.h"
#include "engine/train/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The optimizers, by Megatron-LM's --optimizer names (adam is AdamW). */
typedef enum { TRI_OPT_ADAM = 0, TRI_OPT_SGD, TRI_OPT_LARS, TRI_OPT_LAMB } tri_optimizer_kind;

/* The optimizer's settings (the name is AdamW's, the first optimizer; a zeroed config is AdamW). */
typedef struct tri_adamw_config {
    float beta1, beta2, eps;  /* AdamW and LAMB */
    float weight_decay;       /* applied to parameters whose spec says weight_decay */
    tri_optimizer_kind kind;
    float momentum;           /* SGD and LARS: mu */
    bool nesterov;            /* SGD and LARS: Nesterov momentum */
    float lars_eta;           /* LARS trust coefficient */
    int64_t freeze_step;      /* AdamW: 0, or v frozen after this many steps (1-bit Adam's freeze_step,
                                 Tang et al. 2021 §3; tri_adamw_hparams.freeze_step) */
    bool onebit_adam;         /* AdamW with freeze_step > 0 and a compressor over dp > 1: after the
                                 freeze the optimizer owns the dp exchange, 1-bit Adam's compression
                                 stage (engine/train/onebit_adam.h, --onebit-adam) */
    bool unfused_update;      /* AdamW: the update, the bf16 publish and the gradient zeroing as three
                                 passes even where one fused pass may do them (the same bits; tests
                                 compare the two) */
} tri_adamw_config;

/* "adam", "sgd", "lars", "lamb"; tri_optimizer_parse: the kind of a name, TRI_EINVAL naming it. */
const char *tri_optimizer_name(tri_optimizer_kind k);
int tri_optimizer_parse(const char *name, tri_optimizer_kind *k);
/* Whether kind k keeps Adam's two moments (else one momentum buffer), and whether it scales updates
 * by a layer-wise trust ratio. */
bool tri_optimizer_has_moments(tri_optimizer_kind k);
bool tri_optimizer_has_trust_ratio(tri_optimizer_kind k);

typedef struct tri_optimizer {
    tri_adamw_config cfg;
    tri_tensor m, v;          /* (tri_zero_owned_numel) f32, by the owned ranges' local offsets: Adam's
                                 moments; SGD and LARS: m is the momentum buffer, v is absent */
    tri_tensor scalar;        /* (1) f32 scratch for reductions */
    int64_t step;             /* updates done */
} tri_optimizer;

/* Takes the state and scratch for `owned` elements from an arena (planned like every buffer). */
int tri_optimizer_take(tri_optimizer *o, tri_arena *a, const tri_adamw_config *cfg, int64_t owned);
/* Zeroes the state (after the arena is committed). */
int tri_optimizer_reset(tri_device *d, tri_optimizer *o);

/* LAMB's first phase on every owned range (tri_op_lamb_direction_multi): m and v updated, the owned
 * gradients overwritten with the update direction r, ready for the per-tensor norms. */
int tri_optimizer_lamb_direction(tri_device *d, tri_optimizer *o, const tri_zero *z, float grad_scale);

/* Whether the next update is 1-bit Adam's compression stage (engine/train/onebit_adam.h): AdamW with
 * onebit_adam, a compressor on over dp > 1 (z->comp.on) and freeze_step updates done. The owned
 * gradients then hold the averaged momentum (tri_onebit_adam_exchange), and tri_optimizer_step takes
 * it as m (beta1 0: m = the gradient buffer, no first-moment bias correction, v frozen). */
bool tri_optimizer_onebit_stage(const tri_optimizer *o, const tri_zero *z);

/* One update of every owned range, gradients first multiplied by grad_scale (clipping), in one
 * multi-tensor call (each parameter's weight decay per piece): AdamW, SGD, LARS, or LAMB's second
 * phase (after tri_optimizer_lamb_direction); then, under bf16, the master weights published into
 * the model's (tri_zero_publish_owned). AdamW does the publish and the next step's gradient zeroing
 * in the update's own pass (tri_op_adamw_fused_multi) where the layout allows it
 * (tri_zero_update_zeroes_grads; then z->grads_zeroed is set): the same bits as the three passes.
 * ratios (f32, one per global parameter index, on the device) holds the trust ratios for LARS and
 * LAMB (engine/train/trust_ratio.h); absent otherwise. TRI_ENOMEM or the op's. */
int tri_optimizer_step(tri_device *d, tri_optimizer *o, tri_zero *z, float lr, float grad_scale,
                       tri_tensor ratios);

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
