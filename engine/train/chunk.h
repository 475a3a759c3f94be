/* engine/train/chunk.h - a model chunk: the layers a rank runs for one pipeline stage (Megatron-LM's
 * "model chunk"; several per rank with the interleaved schedule), split between the engine and the
 * model.
 *
 * The engine owns the chunk's parameters: the layout (engine/train/param.h, from the model's
 * parameter descriptions), one arena for every buffer (engine/device/arena.h) and ZeRO
 * (engine/train/zero.h), which keeps the parameters, gradients and their data-parallel shards;
 * it initialises the parameters, reads and writes them for checkpoints, and runs the model's
 * passes. The model owns its activations and computes.
 *
 * A pass is one piece of the model's forward or backward (GPT-2's: the embedding, one block, the
 * head) with the units it reads and the units whose gradients it writes. The model declares its
 * passes once, in four lists: the training forward (a fused loss backward may write gradients
 * there), the evaluation forward, the backward, and the passes run once per step after the last
 * backward (folding a private gradient accumulator in). The engine runs each pass between acquiring
 * its units, in the order listed (ZeRO-3 all-gathers them, ZeRO-2 hands out a zeroed gradient
 * bucket), and releasing them in the reverse order (the bucket is reduced): Megatron-LM's DDP and
 * FSDP hooks do the same around modules. So the model's code never calls ZeRO, and a new model
 * inherits ZeRO 0-3, both overlaps, ZeRO-3 prefetch and deterministic mode. The pass lists also
 * give when each unit's gradient is complete in a step (overlapped reductions start then) and how
 * often a micro-batch uses each unit (the traffic model's input, partitioner/traffic.h).
 *
 * Token rows exchanged with neighbouring chunks are (N_l, C) tensors: N_l rows (B*T, or its
 * sequence shard under sequence parallelism). */
#ifndef TRIDENT_ENGINE_TRAIN_CHUNK_H
#define TRIDENT_ENGINE_TRAIN_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/core/tensor.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/moe_stats.h"
#include "engine/train/param.h"
#include "engine/train/train_layout.h"
#include "engine/train/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TRI_CHUNK_ACT_IN = 0,  /* input activation, received from the previous stage */
    TRI_CHUNK_ACT_OUT,     /* output activation, sent to the next stage */
    TRI_CHUNK_GRAD_OUT,    /* gradient of ACT_OUT, received from the next stage */
    TRI_CHUNK_GRAD_IN,     /* gradient of ACT_IN, sent to the previous stage */
    TRI_CHUNK_LOSSES,      /* last stage: the micro-batch's per-token losses, (B * T) f32, which
                              the engine sums in token order */
} tri_chunk_buffer;

#define TRI_PASS_MAX_UNITS 4

/* One piece of the model's forward or backward and the units it uses. */
typedef struct tri_pass {
    int kind, index;                    /* the model's own: which piece runs (e.g. a block, its number) */
    int n_units;
    int unit[TRI_PASS_MAX_UNITS];       /* acquired in this order, released in the reverse */
    bool grads[TRI_PASS_MAX_UNITS];     /* the pass writes unit[k]'s gradients */
} tri_pass;

typedef enum {
    TRI_PASSES_FORWARD = 0,   /* training forward (with the fused loss backward) */
    TRI_PASSES_FORWARD_EVAL,  /* forward without gradients */
    TRI_PASSES_BACKWARD,
    TRI_PASSES_FINISH,        /* once per step, after the last backward */
    TRI_PASS_LISTS
} tri_pass_list;

/* What the model implements (self is its own state). */
typedef struct tri_chunk_model {
    void *self;
    /* Takes the model's buffers (activations per slot, scratch, private accumulators) from the
     * chunk's arena; called twice like every take (engine/device/arena.h: planning, then for real). */
    int (*take_buffers)(void *self, tri_arena *a);
    /* Points the model's views of unit u's parameters at params (u->len elements in the unit's
     * flat layout) and, when present, of its gradients at grads. */
    void (*bind)(void *self, int unit, tri_tensor params, tri_tensor grads);
    /* Runs pass p: forward passes on the micro-batch in slot (train: a fused loss backward scales
     * by dloss, d(step loss)/d(token loss)), backward passes on slot (dloss: the step's training
     * forward's, for a loss backward that is not fused), finish passes (slot, train, dloss unused). */
    int (*run)(void *self, const tri_pass *p, int slot, bool train, float dloss);
    /* Copies one micro-batch, (B, T+1) token windows on the host, into slot. */
    int (*load_batch)(void *self, int slot, const int32_t *windows);
    tri_tensor (*buffer)(void *self, tri_chunk_buffer which, int slot);
    /* Optional: zeroes the model's private gradient accumulators at the start of a step. */
    int (*zero_private)(void *self);
    /* Optional, models with experts (engine/train/moe_stats.h): the whole model's decoder layers and
     * experts per sparse layer, the shape of the step's account (the same on every chunk). The
     * trainer then points the chunk's moe_stats at its account, and the model's backward of each
     * sparse layer adds that micro-batch's figures to it (in the backward, where the layer's
     * activations are at hand also under full recomputation). */
    void (*moe_shape)(void *self, int *n_layers, int *n_experts);
    /* Optional: state the model keeps beside its parameters, with no gradient and no optimizer state
     * (DeepSeek-V3's expert bias): *n entries, each described as a parameter replicated over tp
     * (spec.name the checkpoint key, local shape = global shape, numel) with its values in
     * (*values)[k] (numel f32, on the device). The trainer lists them with the weights
     * (engine/train/state_shards.h), so checkpoints save, load and reshard them as weights. */
    void (*buffers)(void *self, const tri_param **desc, const tri_tensor **values, int *n);
    /* Optional: after a step's optimizer update (not after a skipped step), with the step's MoE
     * account reduced over the ranks that share the routers (engine/train/moe_stats.h; the same on
     * each of them, so every replica makes the same change). */
    int (*after_update)(void *self, const tri_moe_stats *moe);
} tri_chunk_model;

/* What differs per chunk: its place in the model and the pipeline (the rest is the run's layout,
 * engine/train/train_layout.h). */
typedef struct tri_chunk_place {
    int layer_start, layer_end;   /* its blocks [start, end) */
    bool first, last;             /* holds the embedding / the head and loss */
    int n_slots;                  /* activation slots: micro-batches in flight on it */
    int dp_rank;                  /* data-parallel rank (its ZeRO shard of the layout); under context
                                     parallelism the rank in dp x cp, cp_rank + cp dp_rank */
    uint64_t seed;                /* initialisation */
    int ep, ep_rank;              /* expert parallelism (tri_grid_add_experts): this rank holds experts
                                     [ep_rank E/ep, (ep_rank+1) E/ep); ep 0 or 1: all */
    tri_comm *ep_comm, *edp_comm; /* the grid's expert groups (not owned); NULL at ep 1 */
    int etp, etp_rank;            /* expert tensor parallelism (tri_grid_add_experts_etp): this rank holds the
                                     I / etp slice etp_rank of each of its experts; 0 or 1: whole */
    tri_comm *etp_comm;           /* the grid's etp group (not owned); NULL at etp 1 */
    int cp, cp_rank;              /* context parallelism (docs/context_parallel.md): the run's layout is then
                                     the rank's local one (tri_layout_cp_local: T_l = seq_T / cp rows a
                                     sequence, dp x cp replicas), and this rank holds chunks cp_rank and
                                     2cp-1-cp_rank of every sequence; 0 or 1: none */
    int64_t seq_T;                /* cp > 1: the whole sequence's length T */
    tri_comm *cp_comm;            /* the grid's cp group (not owned); NULL at cp 1 */
    tri_comm *tokens_comm;        /* cp > 1: the ranks sharing one micro-batch's tokens, the sequence-parallel
                                     tp x cp of the same (dp, pp) (cp_comm at tp 1; the MoE aux loss's
                                     counts, Megatron-Core's tp-cp group); not owned; NULL at cp 1 */
} tri_chunk_place;

typedef struct tri_chunk {
    bool first, last;
    int n_slots;
    int64_t tokens_per_mb;        /* B * T */
    int64_t window;               /* T + 1: tokens per sample read from the data (the whole sequence's
                                     T under context parallelism; a rank keeps its chunks' rows) */
    int64_t samples_per_mb;       /* B */
    int n_micro;
    int n_global_params;
    uint64_t seed;
    tri_device *dev;              /* NULL: planned only */
    tri_param_layout layout;
    tri_arena arena;
    tri_zero zero;                /* where the parameters and gradients live */
    tri_train_layout run;         /* the run's layout (a copy) */
    tri_chunk_model model;
    float dloss;                  /* the step's, from the training forward, for the backward passes */
    tri_moe_stats *moe_stats;     /* the trainer's account the model's sparse layers add to in their
                                     backward (NULL: not counted; tri_chunk_model.moe_shape) */
    tri_pass *passes[TRI_PASS_LISTS];
    int n_passes[TRI_PASS_LISTS], cap_passes[TRI_PASS_LISTS];
} tri_chunk;

/* Step 1 of making a chunk: its options and its parameter layout, made by the model from its
 * parameter descriptions (partitioner/layout.h; n_global_params: the whole model's parameter
 * count); the chunk takes the layout over (it frees its arrays). The model then declares its
 * passes (tri_chunk_add_pass), knowing the units, and calls tri_chunk_build. */
void tri_chunk_begin(tri_chunk *c, const tri_train_layout *run, const tri_chunk_place *place, int n_global_params,
                     const tri_param_layout *layout);
/* Appends pass p to one of the lists. TRI_EINVAL for a unit outside the layout. */
int tri_chunk_add_pass(tri_chunk *c, tri_pass_list list, const tri_pass *p);
/* Step 2: plans every buffer (ZeRO's, then the model's); with dev NULL stops there (planning:
 * c->arena.by_kind holds the bytes). Otherwise allocates them, binds ZeRO to dev and dp_comm,
 * initialises the parameters (normal, ones or zeros per description; element values depend only on
 * the seed, the name and the global index, so every layout starts from the same weights) and zeroes
 * the gradients. */
int tri_chunk_build(tri_chunk *c, const tri_chunk_model *model, tri_device *dev, tri_comm *dp_comm);
/* Waits for anything ZeRO has in flight, frees the buffers and the layout. */
void tri_chunk_destroy(tri_chunk *c);

/* The forward of the micro-batch in slot: every pass of the training (train) or evaluation list. */
int tri_chunk_forward(tri_chunk *c, int slot, bool train, float dloss);
/* The backward of the micro-batch in slot; gradients accumulate. */
int tri_chunk_backward(tri_chunk *c, int slot);
/* Last stage: the sum, in token order in double, of slot's per-token losses (the model's
 * TRI_CHUNK_LOSSES buffer, read to the host). TRI_ENOMEM or the copy's error. */
int tri_chunk_loss_sum(tri_chunk *c, int slot, double *sum);
/* The same sum of n per-token losses already on the host (the pipeline reads them asynchronously). */
double tri_chunk_loss_sum_host(const float *losses, int64_t n);
/* Sets every gradient (and the model's private accumulators) to zero before a step. */
int tri_chunk_zero_grads(tri_chunk *c);
/* After the step's last backward: the finish passes. */
int tri_chunk_finish_grads(tri_chunk *c);

/* How one micro-batch's training forward and backward use each unit (out[u] for every unit). */
void tri_chunk_unit_uses(const tri_chunk *c, tri_unit_uses *out);

#ifdef __cplusplus
}
#endif

#endif
