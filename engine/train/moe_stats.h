/* engine/train/moe_stats.h - a Mixture-of-Experts step's figures for the logs: the auxiliary
 * (Switch Transformer, Fedus et al. 2021 §2.2) and z- (ST-MoE, Zoph et al. 2022 §3.1) losses apart
 * from the language-model loss, and each sparse layer's expert load and dropped selections
 * (Megatron-Core's "load_balancing_loss" / "z_loss" logging and its tokens_per_expert tracking).
 *
 * A model with experts gives the account's shape through its chunk's optional moe_shape hook
 * (engine/train/chunk.h) and stages each training micro-batch's figures in each sparse layer's
 * backward (chunk->moe_stats, tri_moe_stats_stage: the device's values copied without waiting into
 * a page-locked record); the trainer, after the step's one wait for the device, folds the records
 * in (tri_moe_stats_collect), so the figures cost the step no extra wait. The trainer resets the account at the
 * start of a step and, once the step's micro-batches are done, sums it over the data-parallel ranks
 * that share the routers (not under local SGD's inner steps: each replica's own) and over the
 * pipeline stages (which hold disjoint layers), so every rank holds the whole model's figures.
 * Integers throughout (counts, and the losses in fixed point, 2^-TRI_MOE_STATS_BITS): the sums do
 * not depend on their order, so every layout logs the same bits. Tensor parallelism is refused for
 * MoE models (models/llama.c); with it, a router replicated over tp counts once per tp rank. */
#ifndef TRIDENT_ENGINE_TRAIN_MOE_STATS_H
#define TRIDENT_ENGINE_TRAIN_MOE_STATS_H

#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRI_MOE_STATS_BITS 32 /* the losses' fixed point: 2^-32 (a micro-batch's loss below 2^31) */

typedef struct tri_moe_stats {
    int n_layers;      /* decoder layers of the whole model (the global layer index) */
    int E;             /* experts per sparse layer; 0: the model has no experts (nothing counted) */
    int64_t micro;     /* micro-batches the losses average over (per step: micro-batches x replicas) */
    int64_t *sums;     /* (n_layers * 2 * E + 2): per layer the selections per expert before dropping
                          (routed, E) then the kept ones (E), summed over micro-batches; then the aux
                          and z losses (summed over layers and micro-batches) in fixed point */
    tri_device *dev;   /* the staging's owner (NULL: no staging) */
    int32_t *stage;    /* (cap, 2E + 3) records: layer, routed (E), kept (E), aux and z (f32 bits) */
    int n_staged, cap;
} tri_moe_stats;

/* Prepares an account for n_layers layers of E experts (E 0: an empty account, no memory) with
 * room for `records` staged layer figures a step (tri_moe_stats_stage; 0: none) in dev's host
 * staging memory. TRI_EINVAL for E < 0 or n_layers < 1 with E > 0; TRI_ENOMEM. */
int tri_moe_stats_init(tri_moe_stats *s, int n_layers, int E, tri_device *dev, int records);
void tri_moe_stats_free(tri_moe_stats *s);
/* Zeroes the sums for a new step of `micro` micro-batches (over the replicas it will be summed over). */
void tri_moe_stats_reset(tri_moe_stats *s, int64_t micro);

/* Adds one micro-batch of global layer `layer`: routed[E] and kept[E] selections per expert (i32,
 * the router's routed_per_expert and tokens_per_expert) and its aux and z losses. TRI_EINVAL for a
 * layer outside [0, n_layers). A loss that is not finite (or not below 2^31) leaves the micro-batch
 * out: a non-finite router makes the step non-finite, which the step's guard handles. */
int tri_moe_stats_add(tri_moe_stats *s, int layer, const int32_t *routed, const int32_t *kept, float aux, float z);

/* Stages one micro-batch of global layer `layer` from the device without waiting: routed (E) i32
 * and losses (2) f32 device tensors copied into the next record, kept (E, host) copied at once.
 * TRI_EINVAL when the step's records are used up or the layer is outside the account; device
 * errors. The record holds its values after the device's next wait. */
int tri_moe_stats_stage(tri_moe_stats *s, int layer, tri_tensor routed, const int32_t *kept, tri_tensor losses);
/* After a wait for the device: adds every staged record (tri_moe_stats_add) and empties the staging. */
int tri_moe_stats_collect(tri_moe_stats *s);

/* Sums the account over comm (host all-reduce, i64; collective: every rank of comm calls it with an
 * account of the same shape). NULL or a comm of one rank: nothing. */
int tri_moe_stats_reduce(tri_moe_stats *s, tri_comm *comm);

/* What the logs show of a reduced account. */
typedef struct tri_moe_summary {
    double aux, z;       /* the step's aux and z losses: each layer's, summed over layers, averaged over
                            micro-batches and replicas (as the LM loss is) */
    int n_sparse;        /* sparse layers (those that routed anything) */
    double max_load;     /* the largest of the layers' loads */
    double drop_frac;    /* dropped selections / routed selections over every sparse layer */
} tri_moe_summary;

/* Layer l's load: its busiest expert's routed selections over the mean per expert (1: perfectly
 * even, E / K: every token to the same K experts); 0 for a layer that routed nothing. */
double tri_moe_stats_load(const tri_moe_stats *s, int layer);
/* Layer l's routed and kept selections (all experts). */
void tri_moe_stats_totals(const tri_moe_stats *s, int layer, int64_t *routed, int64_t *kept);
tri_moe_summary tri_moe_stats_summary(const tri_moe_stats *s);

#ifdef __cplusplus
}
#endif

#endif
