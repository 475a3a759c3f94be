/* engine/train/state_shards.h - the training state a rank holds, listed by its owners as named
 * shards, for whatever stores it (checkpoints/), after Megatron-Core's sharded_state_dict.
 *
 * Each entry names a global tensor (its parameter's description: name, global shape, this rank's
 * tensor-parallel shard as global offsets and a local shape), the state it is of (the weights, or
 * one of Adam's moments, or the momentum buffer of SGD and LARS), the flat range [lo, hi) of the TP shard this rank holds (the whole shard
 * for weights; under ZeRO the piece its optimizer owns for moments) and whether this rank's copy is
 * the one to store (replicas are stored once). Reading and writing go through the owner (ZeRO for
 * the weights, the optimizer for the moments), so a consumer needs neither: the checkpoint library
 * writes and reads boxes and knows no owner. New state (error feedback, expert bias) is a new
 * group and its owner's entries. */
#ifndef TRIDENT_ENGINE_TRAIN_STATE_SHARDS_H
#define TRIDENT_ENGINE_TRAIN_STATE_SHARDS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/train/param.h"
#include "engine/train/train.h"

typedef enum tri_state_group {
    TRI_STATE_WEIGHTS = 0,  /* the parameters (fp32 master weights under bf16) */
    TRI_STATE_EXP_AVG,      /* Adam's first moment */
    TRI_STATE_EXP_AVG_SQ,   /* Adam's second moment */
    TRI_STATE_MOMENTUM,     /* SGD's and LARS's momentum buffer (PyTorch's momentum_buffer) */
    /* local SGD / DiLoCo only (engine/train/local_sgd.h), listed after the groups above: */
    TRI_STATE_OUTER_ANCHOR,   /* the parameters at the last outer synchronisation (fp32): each dp
                                 rank's slice of every unit, stored by every dp rank (the holders) */
    TRI_STATE_OUTER_MOMENTUM, /* the outer Nesterov momentum, the same slices (nesterov only) */
    TRI_STATE_REPLICA_WEIGHTS,    /* this replica's own weights, */
    TRI_STATE_REPLICA_EXP_AVG,    /* its AdamW moments (they differ per replica between and across */
    TRI_STATE_REPLICA_EXP_AVG_SQ, /* synchronisations): the whole TP shard, stored by every dp rank */
    TRI_STATE_REPLICA_MOMENTUM,   /* or its SGD / LARS momentum buffer, in place of the moments */
    /* compressed dp reduction only (--grad-compression, engine/train/dp_compress.h): */
    TRI_STATE_EF_RESIDUAL,        /* the error-feedback residual (fp32, parameter-shaped, different on each
                                     dp rank): the whole TP shard, stored by every dp rank in its replica
                                     file, like local SGD's replica groups */
    TRI_STATE_EF_SERVER_RESIDUAL, /* two-phase only (--grad-compression-reduce two-phase): the server's
                                     residual of this dp rank's chunk of every unit, listed like the
                                     residual (whole TP shards, zero outside the rank's chunks) */
    TRI_STATE_OUTER_EF_RESIDUAL,  /* local SGD with compression: the compressed outer reduction's own residual
                                     (local_sgd.h; what this replica's parameter change did not send), laid
                                     out and stored like the error feedback above */
    TRI_STATE_EF_COPY,            /* the residual of a copy that is not the holder (another TP rank's
                                     replicated parameter, a shared shard's other holders, the last
                                     stage's tied embedding): its own under sequence parallelism, shared
                                     shards and the tied copy, whose gradients are summed after the dp
                                     reduction; stored by every dp rank in its own replica file and read
                                     back from that file only (not a box of the tensor: the holder's is) */
    TRI_STATE_EF_SERVER_COPY,     /* two-phase: the server residual of such a copy (its own where its
                                     residual is: its gradient is reduced over dp on its own), stored
                                     and read back like error_feedback_copy, each dp rank's zero outside
                                     its chunks */
    TRI_STATE_POWERSGD_Q,         /* PowerSGD's warm-started Q^T of a matrix parameter (fp32, rank x cols
                                     of this rank's shard, row-major: not parameter-shaped; PyTorch's
                                     PowerSGDState.q_memory_dict): all-reduced, so the same bits on every
                                     dp rank, stored once per (tp, pp) shard by dp rank 0 in its replica
                                     file, every copy's own (holder or not) */
    TRI_STATE_OUTER_POWERSGD_Q,   /* local SGD with --grad-compression powersgd: the compressed outer
                                     reduction's own Q^T of a matrix parameter, warm-started from one outer
                                     step to the next; laid out and stored like powersgd_q */
    TRI_STATE_OUTER_EF_SERVER_RESIDUAL, /* local SGD with --grad-compression-reduce two-phase: the
                                     compressed outer reduction's server residual, laid out and
                                     stored like server_error_feedback (the holder's; local SGD
                                     aligns every copy's to it) */
    TRI_STATE_GROUPS
} tri_state_group;

/* The group's name in a checkpoint ("exp_avg", "outer_anchor", "replica_weights", ...; NULL for
 * the weights, which live in the model files). */
const char *tri_state_group_name(tri_state_group g);

/* PowerSGD's Q of a matrix: the gradient reduction's (powersgd_q) or local SGD's outer reduction's
 * (outer_powersgd_q). */
bool tri_state_group_is_q(tri_state_group g);

/* State of local SGD's compressed outer reduction (outer_error_feedback, outer_powersgd_q,
 * outer_server_error_feedback), not of the gradient reduction. */
bool tri_state_group_is_outer_compression(tri_state_group g);

/* A two-phase server residual (server_error_feedback, server_error_feedback_copy,
 * outer_server_error_feedback): stored at a parameter's flat offset, held only over this rank's
 * chunk (tri_dp_compress_server_read). */
bool tri_state_group_is_server(tri_state_group g);

typedef struct tri_state_shard {
    const tri_param *param;  /* name, global shape, this rank's TP shard (global_offset, local_shape) */
    tri_state_group group;
    int64_t lo, hi;          /* the flat range of the TP shard this rank holds */
    bool holder;             /* this tensor-parallel rank's shard is the one kept (replicated
                                parameters on TP rank 0 and one holder of a shared shard; never the
                                last stage's tied copy of the embedding) */
    bool stored;             /* holder, and this data-parallel rank stores it (weights: dp rank 0;
                                moments: the owner under ZeRO 1-3, dp rank 0 at ZeRO 0; local SGD's
                                groups and the error feedback: every dp rank); the per-copy groups
                                (error_feedback_copy, server_error_feedback_copy, powersgd_q,
                                outer_powersgd_q) are stored by
                                non-holders too */
    bool collective;         /* reading it is collective over the data-parallel group: every rank
                                reads every holder entry of this group in the same order */
    int chunk;               /* the model chunk holding it */
    bool buffer;             /* a model buffer (tri_chunk_model.buffers; group weights, .at its index):
                                state without gradient or optimizer state, read and written locally */
    int64_t at;              /* moments: the piece's offset in the chunk's optimizer state; outer
                                groups: in the chunk's outer state; error feedback (every kind): in
                                the residual; powersgd_q, outer_powersgd_q: in its reduction's Q */
} tri_state_shard;

/* Every shard of state this rank holds, for each model chunk in order: first the weights of each
 * parameter and of each of the model's buffers (tri_chunk_model.buffers), then, for each parameter, each owned piece's optimizer state: Adam's first and second
 * moment (adjacent; AdamW, LAMB) or the momentum buffer (SGD, LARS). Under local SGD then, per
 * chunk, for each parameter each piece of this dp rank's outer slices (anchor, and momentum
 * adjacent for nesterov), and each parameter's replica weights and optimizer state (first and
 * second moment, or the momentum buffer; adjacent). With a compressed dp reduction (and dp > 1)
 * then, per chunk, each parameter's error-feedback residual (.at: its flat offset; the holder's
 * TRI_STATE_EF_RESIDUAL, another copy's TRI_STATE_EF_COPY), with two-phase its server residual
 * (another copy's TRI_STATE_EF_SERVER_COPY) and under local SGD its outer residual after it
 * (adjacent; with two-phase then the outer server residual), and, under PowerSGD, each matrix
 * parameter's Q (.at: its offset in Q, [lo, hi) = [0, rank x cols)), then under local SGD each
 * matrix parameter's Q of the outer reduction (TRI_STATE_OUTER_POWERSGD_Q, the same layout).
 * *shards is malloc'd (n of them). TRI_ENOMEM. */
int tri_trainer_state_shards(const tri_trainer *t, tri_state_shard **shards, int *n);

/* Entry s's values (hi - lo floats) into host; for a collective entry every data-parallel rank
 * calls it, in the same order. Device errors. */
int tri_trainer_state_read(tri_trainer *t, const tri_state_shard *s, float *host);

/* Entry s's values from host (hi - lo floats; weights: every data-parallel rank passes the same
 * values of the whole TP shard). Device errors. */
int tri_trainer_state_write(tri_trainer *t, const tri_state_shard *s, const float *host);

#endif
