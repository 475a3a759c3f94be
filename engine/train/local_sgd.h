/* engine/train/local_sgd.h - local SGD and DiLoCo: the semi-synchronous form of data parallelism.
 *
 * Each data-parallel replica runs H inner steps on its own share of every global batch with no
 * data-parallel communication at all (its gradients are still reduced over tp, pp's tied embedding
 * and the TP ranks sharing a shard, inside the replica), then the replicas synchronise once: the
 * outer gradient of replica r is delta_r = anchor - theta_r (anchor: the parameters at the last
 * synchronisation, fp32), averaged over dp, and an outer optimizer moves the anchor:
 *
 *   average   theta = anchor - outer_lr * mean(delta)                (outer_lr 1: parameter averaging,
 *             local SGD; Lin et al. 2020, "Don't use large mini-batches, use local SGD")
 *   nesterov  b = mu * b + mean(delta); theta = anchor - outer_lr * (mean(delta) + mu * b)
 *             (PyTorch's SGD with nesterov=True and dampening 0, as DiLoCo's Algorithm 1 uses:
 *             Douillard et al. 2023; the paper's outer lr 0.7, momentum 0.9)
 *
 * and every replica continues from theta (the new anchor). The inner optimizer's state (AdamW's m
 * and v, its step count) stays per replica and is never averaged, as DiLoCo keeps it.
 *
 * The outer state (anchor, momentum) is fp32 and sharded like a ZeRO-1 optimizer: data-parallel
 * rank r keeps its 1/dp slice of every unit (engine/train/param.h tri_unit_slice), so a rank holds
 * dp times less of it. An outer step, unit after unit, through one scratch buffer of the largest
 * unit: all-gather the anchor slices (the whole anchor, which exists on no rank), subtract this
 * replica's parameters (fp32 master weights under bf16), reduce-scatter the deltas into the owned
 * slice as their mean (tri_outer_reduce: the one function a compressed reduction replaces), update
 * the owned anchor (and momentum), and all-gather the new parameters; under bf16 the model's bf16
 * weights are then re-published from the master weights. Bytes per synchronisation, as the comm
 * counts them (engine/comm/comm.h: the payload): 3 x 4 bytes x the stage's padded elements (anchor
 * all-gather, delta reduce-scatter, parameter all-gather), against 4 bytes x those elements per step
 * for synchronous data parallelism's all-reduce: 3/H of its bytes over H steps, and H times fewer
 * synchronisations. (Keeping the whole anchor on every rank would save the first all-gather, 2/H,
 * at dp times the anchor's memory.)
 *
 * Compressed outer synchronisation (--grad-compression with --local-sgd-steps): the deltas'
 * reduce-scatter is replaced by engine/train/dp_compress.h's compressed reduction, unit after unit,
 * at its ZeRO-1 form (each rank decodes only its owned slice of the sum): the delta scaled by 1/dp
 * (so the decoded sum is the mean, as a gradient scaled by the loss's 1/dp is) is the reduction's
 * input, with an error-feedback residual of its own (the outer one, per replica, parameter-shaped:
 * what the compressor did not send of the replicas' change is added to the next synchronisation's,
 * Seide et al. 2014; Karimireddy et al. 2019) and, for PowerSGD, a Q of its own warm-started from one
 * outer step to the next (Vogels et al. 2019; the deltas of one window are matrices as gradients
 * are); with --grad-compression-reduce two-phase (1-bit Adam's compressed allreduce, Tang et al.
 * 2021 §4) a server residual of its own too. Two rules keep the state what checkpoints hold: what
 * is not a model element (the layout's padding, vocabulary padding rows) keeps no decoded mean and
 * no residual (1bit decodes a zero as +scale), so it stays zero as uncompressed; and a parameter
 * several TP ranks hold takes its holder's decoded mean, residual and server residual
 * (tri_outer_copies). The outer optimizer then runs on the decoded mean exactly as on the plain one. The
 * compressor's clock is the iteration: an outer step at update i (1-based) reduces as iteration
 * i - 1, so --powersgd-start-iter counts iterations (the outer steps within the first that many
 * iterations reduce uncompressed) and QSGD's rounding draws from the iteration's stream. The
 * anchor's and the parameters' all-gathers stay fp32 (they carry values, not a reduction), so a
 * synchronisation sends 2 x 4 bytes x the padded elements plus the compressor's payloads.
 *
 * Inner steps need each replica's whole optimizer state, so only ZeRO stage 0 composes (the trainer
 * binds ZeRO to a group of this rank alone, so every gradient reduction over dp is a no-op). */
#ifndef TRIDENT_ENGINE_TRAIN_LOCAL_SGD_H
#define TRIDENT_ENGINE_TRAIN_LOCAL_SGD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/dp_compress.h"
#include "engine/train/param.h"
#include "engine/train/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tri_outer_kind { TRI_OUTER_AVERAGE = 0, TRI_OUTER_NESTEROV } tri_outer_kind;

typedef struct tri_local_sgd_config {
    int steps;                /* H, inner steps per outer synchronisation (--local-sgd-steps);
                                 0: off, synchronous data parallelism */
    tri_outer_kind outer;     /* --outer-optimizer */
    float outer_lr;           /* --outer-lr, > 0 */
    float outer_momentum;     /* --outer-momentum, [0, 1); nesterov only */
    int64_t final_iter;       /* this iteration (1-based) synchronises too, whatever H: the end of
                                 training, so the run ends with one model; 0: none */
    int64_t warmup_iters;     /* --local-sgd-warmup-iters: updates 1..W are synchronous data
                                 parallelism, local steps start after (post-local SGD, Lin et al.
                                 2020 §3); the anchor is the parameters after update W */
} tri_local_sgd_config;

/* "average" or "nesterov". */
const char *tri_outer_kind_name(tri_outer_kind k);
/* *k from a name; TRI_EINVAL naming --outer-optimizer and the value. */
int tri_outer_kind_parse(const char *name, tri_outer_kind *k);
/* The config's values and its composition with ZeRO stage zero_stage: TRI_EINVAL naming the flag
 * and the value (H < 0, outer lr <= 0 or not finite, momentum outside [0, 1), ZeRO stage > 0). */
int tri_local_sgd_check(const tri_local_sgd_config *c, int zero_stage);
/* Whether update number iter (1-based) ends with an outer synchronisation: every H-th update after
 * the warm-up, and final_iter. */
bool tri_local_sgd_syncs_at(const tri_local_sgd_config *c, int64_t iter);
/* Whether update number iter (1-based) is an inner (local) step: local SGD on and past the warm-up. */
bool tri_local_sgd_inner(const tri_local_sgd_config *c, int64_t iter);

/* One chunk's outer state: this data-parallel rank's slice of every unit, laid out unit after unit
 * (unit u's slice at u->start / dp). */
typedef struct tri_outer_state {
    tri_tensor anchor;        /* f32 (padded_numel / dp) the parameters at the last synchronisation */
    tri_tensor momentum;      /* f32 (padded_numel / dp) nesterov's buffer b; 1 element for average */
    tri_dp_compress comp;     /* the compressed outer reduction (comp.on: a compressor and dp > 1): its
                                 residual (f32, padded_numel, the outer error feedback) and PowerSGD's Q */
} tri_outer_state;

/* Takes the outer state of a chunk with layout L from arena a (planned like every buffer), with the
 * compressed outer reduction's buffers when compression (NULL: none) names a compressor and
 * L->dp > 1. TRI_EINVAL from tri_compression_check. */
int tri_outer_take(tri_outer_state *o, tri_arena *a, const tri_param_layout *L, const tri_local_sgd_config *c,
                   const tri_compression *compression);
/* Frees what tri_outer_take allocated off the arena (PowerSGD's offsets). */
void tri_outer_free(tri_outer_state *o);
/* Elements of the scratch an outer step needs: the largest unit of L, and its 1/dp for the mean. */
int64_t tri_outer_scratch_numel(const tri_param_layout *L);
/* Starts the outer state from the parameters z holds now (fp32 master weights under bf16): the
 * anchor is this rank's slice of them, the momentum zero, the outer error feedback zero (and
 * PowerSGD's Q drawn afresh). Every replica must hold the same parameters. Device errors. */
int tri_outer_reset(tri_device *d, tri_outer_state *o, const tri_zero *z);

/* The outer gradient's plain reduction: mine (n) = the mean over dp's ranks of their whole
 * (dp->size * n) slice [rank * n, (rank + 1) * n), fp32. whole is left undefined. A reduce-scatter
 * and a scale by 1/dp (without compression; tri_outer_step's compressed form replaces it). Comm and
 * device errors. */
int tri_outer_reduce(tri_device *d, tri_comm *dp, tri_tensor mine, tri_tensor whole);

/* The TP ranks that hold the same parameter (engine/train/param.h): the tensor-parallel group for
 * the replicated ones (tp_replicated), the group of ranks sharing a shard for those split into fewer
 * shards than tp (replicas > 1); NULL where there is none. A compressed outer reduction packs each
 * TP rank's unit, whose other parameters are that rank's own shards, so blocks (1bit, qsgd) and top-k
 * selections that mix them decode a held-alike parameter differently on each TP rank; the holder's
 * (rank 0 of the group, the copy checkpoints keep) decoded mean and outer residual of those
 * parameters are broadcast to its group, so the copies stay one parameter, bit for bit. */
typedef struct tri_outer_copies {
    tri_comm *tp;             /* the tensor-parallel group (size > 1), or NULL */
    tri_comm *shared;         /* the ranks sharing a shard, or NULL */
} tri_outer_copies;

/* The outer step of one chunk (see the top comment), collective over dp (and, compressed, over
 * copies' groups): every replica's parameters become the new anchor, in z's parameters (and master
 * weights, re-published to bf16). scratch: f32 (tri_outer_scratch_numel). iter: the 0-based
 * iteration whose update ends the window (the compressor's clock). copies: NULL at tp 1. ZeRO
 * stage 0 only. */
int tri_outer_step(tri_device *d, tri_comm *dp, tri_zero *z, tri_outer_state *o, tri_tensor scratch,
                   const tri_local_sgd_config *c, int64_t iter, const tri_outer_copies *copies);

#ifdef __cplusplus
}
#endif

#endif
