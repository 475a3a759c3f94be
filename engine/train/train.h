/* engine/train/train.h - one training step and evaluation over a stage, the process grid and a data source.
 *
 * A step runs the global batch's micro-batches through the stage (forward, then backward; the
 * pipeline executor replaces this loop when there are several stages), then finishes the step:
 * sums replicated gradients over TP under sequence parallelism, sums the tied embedding's gradient
 * over the embedding group, averages gradients over data-parallel replicas, computes the global
 * gradient norm (each parameter counted once), clips (Pascanu et al. 2013) and applies the
 * optimizer (AdamW, SGD, LARS or LAMB: engine/train/optimizer.h).
 * The loss is the mean per-token cross-entropy over the global batch, identical on every rank.
 *
 * Local SGD / DiLoCo (cfg.local.steps = H > 0, engine/train/local_sgd.h): each data-parallel
 * replica steps on its own share of the global batch with its own gradients (no reduction over dp:
 * ZeRO is bound to a group of this rank alone), so the gradient norm for clipping is the replica's
 * own and the loss reported is the replica's own mean token loss (world rank 0's replica in logs);
 * every H updates (and at cfg.local.final_iter) an outer step synchronises the replicas. */
#ifndef TRIDENT_ENGINE_TRAIN_TRAIN_H
#define TRIDENT_ENGINE_TRAIN_TRAIN_H

#include "engine/comm/grid.h"
#include "engine/device/arena.h"
#include "engine/train/chunk.h"
#include "engine/train/fault.h"
#include "engine/train/local_sgd.h"
#include "engine/train/optimizer.h"
#include "engine/train/pipeline.h"
#include "engine/train/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where samples come from: fill(ctx, first, n, windows) writes samples [first, first + n) of the
 * global sample stream as (n, T+1) token windows. */
typedef struct tri_batch_source {
    void *ctx;
    int (*fill)(void *ctx, int64_t first, int64_t n, int32_t *windows);
} tri_batch_source;

typedef struct tri_step_config {
    int n_micro;               /* micro-batches per step on each data-parallel replica */
    bool sequence_parallel;
    float clip_grad;           /* maximum global gradient norm; <= 0 disables clipping */
    tri_local_sgd_config local; /* local SGD / DiLoCo (engine/train/local_sgd.h); steps 0: off */
    bool cuda_graph;           /* --enable-cuda-graph: the forward and backward passes as device graphs,
                                  captured in the second step (engine/train/step_graph.h) */
} tri_step_config;

typedef struct tri_step_result {
    double loss;               /* mean token loss over the global batch */
    double grad_norm;          /* global norm before clipping */
    float lr;
    tri_step_action action;    /* applied, or skipped (with a guard): the same on every rank */
    bool stop;                 /* with a guard: some rank asked to stop after this step */
    bool outer_sync;           /* local SGD: this step ended with an outer synchronisation */
    int64_t outer_syncs;       /* local SGD: outer synchronisations so far (checkpoints included) */
} tri_step_result;

#define TRI_MAX_CHUNKS 16

/* One rank's training state: its model chunks, their optimizers, the executor. */
struct tri_trainer;

/* A seam for fault injection (tools/cli/fault.h sets it from TRIDENT_INJECT_NAN; tests may set
 * their own): called on every rank once a step's gradients are reduced, before the step's checks
 * see them, with the 0-based iteration. Core objects carry no test state; a run without a hook pays
 * one NULL test. Returns a status like any action. */
typedef int (*tri_trainer_hook)(void *ctx, struct tri_trainer *t, int64_t iter);

typedef struct tri_trainer {
    int v;                               /* model chunks on this rank */
    tri_chunk *chunks[TRI_MAX_CHUNKS];
    const tri_grid *grid;
    tri_comm *replica_comm;              /* the TP ranks holding the same shard of a parameter split
                                            into fewer shards than tp (tri_param.replicas); NULL
                                            without such parameters */
    tri_device *dev;
    tri_step_config cfg;
    const tri_schedule *train_sched;     /* not owned */
    const tri_schedule *eval_sched;      /* forward-only, m = eval micro-batches; not owned */
    tri_pipeline train_pipe, eval_pipe;
    tri_optimizer opt[TRI_MAX_CHUNKS];
    tri_arena arena;                     /* optimizer state and reduction buffers */
    tri_tensor norm_slots;               /* (n_global_params * tp) per-parameter sums of squares */
    tri_tensor scalar;                   /* (1) */
    tri_tensor loss_fixed;               /* (8) i64: [2, 8) the norm limbs of deterministic mode */
    tri_tensor trust_sums;               /* LARS, LAMB: (2, norm_slots) f32 partial sums of squares of
                                            the weights, then of the gradients / directions; else absent */
    tri_tensor trust_limbs;              /* LARS, LAMB: (2, n_global_params, 6) i64, the same sums exact */
    tri_tensor trust_ratios;             /* LARS, LAMB: (n_global_params) f32 by global index */
    int32_t *windows;                    /* (B, T+1) host staging */
    const tri_batch_source *src;         /* data of the run in progress */
    int64_t first_sample;                /* sample index of micro-batch 0 of this replica */
    tri_step_guard *guard;               /* optional (not owned): agreed non-finite / stop checks */
    bool local_bad;                      /* this rank's gradients of the current step were not finite */
    tri_trainer_hook after_grads;        /* optional: the fault-injection seam (below) */
    void *after_grads_ctx;
    /* local SGD (cfg.local.steps > 0, engine/train/local_sgd.h) */
    tri_comm *self_comm;                 /* this rank alone: ZeRO's data-parallel group during inner steps
                                            (and 1-bit Adam's compression stage) */
    tri_outer_state outer[TRI_MAX_CHUNKS]; /* per chunk: this dp rank's slice of the anchor and momentum */
    tri_tensor outer_scratch;            /* (largest unit's tri_outer_scratch_numel) f32 */
    int64_t outer_syncs;                 /* outer synchronisations so far */
    bool replicas_apart;                 /* an update since the last synchronisation (the replicas differ) */
    bool local_step;                     /* the step in progress is an inner step (no dp reduction) */
    bool onebit_step;                    /* the step in progress is 1-bit Adam's compression stage (the
                                            optimizer exchanges the momentum; self_comm during the
                                            backward pass; engine/train/onebit_adam.h) */
    tri_step_graph graph;                /* cfg.cuda_graph: the captured passes (train_pipe.graph) */
    tri_moe_stats moe;                   /* models with experts: the last step's MoE figures, reduced
                                            (engine/train/moe_stats.h); E 0 otherwise */
} tri_trainer;

/* Plans and allocates the optimizer state of the v chunks and prepares the executor for the
 * training schedule and the forward-only evaluation schedule (both over the grid's pipeline
 * group; train_sched->m must equal cfg->n_micro). With cfg->cuda_graph, TRI_ENOTSUP naming
 * --enable-cuda-graph where the layout or the device cannot capture (tri_step_graph_check). */
int tri_trainer_create(tri_trainer *t, tri_chunk *const *chunks, int v, const tri_grid *grid,
                       tri_device *dev, const tri_step_config *cfg, const tri_adamw_config *adamw,
                       const tri_schedule *train_sched, const tri_schedule *eval_sched);
void tri_trainer_destroy(tri_trainer *t);

/* The bytes per memory category tri_trainer_create would allocate for chunks with these layouts
 * (n_global_params parameters in the model, tensor-parallel size tp, ZeRO stage zero_stage, the
 * optimizer opt; NULL: AdamW), without allocating. */
int tri_trainer_plan(const tri_param_layout *const *layouts, int v, int n_global_params, int tp,
                     int zero_stage, const tri_adamw_config *opt, size_t bytes[TRI_MEM_KINDS]);

/* The slot of parameter p's partial sum of squares in the gradient norm's slots: one per (global
 * parameter, TP rank), and per DP rank under ZeRO, so after one all-reduce each slot holds exactly
 * one rank's value (used by the gradient norm and the trust ratios). */
int64_t tri_trainer_norm_slot(const tri_trainer *t, const tri_param *p);
/* The ranks whose partial sums make whole tensors' norms: the world under ZeRO (pieces are cut over
 * dp too), else the model-parallel group (data-parallel replicas hold the same values). */
tri_comm *tri_trainer_norm_comm(const tri_trainer *t);
/* Whether this rank adds p's owned pieces to the whole-tensor sums (gradient norm, trust ratios): one
 * holder of each value summed over tri_trainer_norm_comm (TP rank 0 of a replicated tensor; an expert
 * part's every edp rank at ZeRO 1-3, its edp rank 0 at ZeRO 0 under ep > 1; docs/moe.md). */
bool tri_trainer_norm_holder(const tri_trainer *t, const tri_param *p);

/* Global batch size in samples: micro-batch size x micro-batches x dp. */
int64_t tri_trainer_global_batch(const tri_trainer *t);

/* The gradients of global batch `iter` (samples [iter * global, (iter + 1) * global)) in the
 * chunks' gradient buffers, complete for this rank's optimizer ranges: summed over TP for
 * replicated parameters under SP, over the embedding group for the tied embedding, over
 * data-parallel replicas. *loss = mean token loss of the global batch, on every rank; for a model
 * with experts t->moe holds the batch's MoE figures, reduced (the same on every rank). */
int tri_trainer_gradients(tri_trainer *t, const tri_batch_source *src, int64_t iter, double *loss);

/* The global gradient norm: every parameter counted once, summed in the model's parameter order
 * (the same value, to the bit, in every pipeline layout); the squares of all owned pieces in one
 * tri_op_sum_squares_multi call, one host copy. */
int tri_trainer_grad_norm(tri_trainer *t, double *norm);

/* Update number iter + 1 with learning rate lr on global batch `iter`: gradients, global norm,
 * clipping, the optimizer's update (LARS and LAMB: with their trust ratios, one all-reduce of
 * every tensor's partial norms; engine/train/trust_ratio.h). Without a guard: TRI_ENONFINITE (and
 * no update) when the norm is not finite.
 * With t->guard set: every rank's non-finite flag and stop request are agreed over the world before
 * the update (engine/train/fault.h), so every rank applies or skips the update alike (res->action), fails
 * alike with TRI_ENONFINITE naming the iteration and the ranks, and reports the stop alike. The host
 * waits for the device once (outside deterministic mode): the gradient norm's copy; the
 * micro-batches' losses, copied asynchronously as they come, are read after it (tri_device.waits). */
int tri_trainer_step(tri_trainer *t, const tri_batch_source *src, int64_t iter, float lr,
                     tri_step_result *res);

/* Local SGD: the outer synchronisation (engine/train/local_sgd.h) of every chunk, collective over
 * the data-parallel group; tri_trainer_step calls it after the updates tri_local_sgd_syncs_at names.
 * TRI_EINVAL without local SGD. */
int tri_trainer_outer_sync(tri_trainer *t);

/* Local SGD: restarts the outer state from the parameters held now (after a checkpoint without it,
 * or --reset-outer-state): the anchor is the current parameters, the momentum zero. */
int tri_trainer_outer_reset(tri_trainer *t);

/* Mean token loss over n_batches global batches of src starting at sample 0 (no gradients); the
 * evaluation schedule's m micro-batches make one global batch per replica. Under local SGD between
 * synchronisations the replicas differ: the result is then the mean over replicas of each one's
 * loss on its share of the batches (at a synchronisation they are one model). */
int tri_trainer_eval(tri_trainer *t, const tri_batch_source *src, int n_batches, double *loss);

#ifdef __cplusplus
}
#endif

#endif
