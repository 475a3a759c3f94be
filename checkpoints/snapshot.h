/* checkpoints/snapshot.h - one rank's part of a checkpoint step, copied to host memory.
 *
 * A save has two halves. Taking the snapshot reads what this rank's files will hold at a step
 * boundary, from the shards the trainer's owners list (engine/train/state_shards.h: the checkpoint
 * library walks no owner's insides): the stored weights of its (tp, pp) model file (every
 * data-parallel rank takes part in each holder's read, which is collective at ZeRO 3), and the
 * stored optimizer state (Adam's moments or the momentum buffer) of its optimizer file. Writing the files from a snapshot needs
 * neither the device nor the comm, so it can run on another thread while training goes on
 * (checkpoints/async_save.h): the training loop is blocked only for the copy.
 *
 * The host memory is one pool (page-locked on CUDA: tri_device_host_alloc) kept from one save to
 * the next, so later snapshots allocate nothing. */
#ifndef TRIDENT_CHECKPOINTS_SNAPSHOT_H
#define TRIDENT_CHECKPOINTS_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/manifest.h"
#include "engine/train/train.h"

/* A parameter's TP shard as this rank holds it (model entries: the local values; optimizer
 * entries: the owned flat range [lo, hi) of the shard's m and v). */
typedef struct tri_ckpt_snap_entry {
    char name[TRI_PARAM_NAME_MAX];
    int tensor;                /* index into the manifest's tensors */
    tri_box shard;             /* the TP shard in the global index space (vocabulary padding included) */
    int64_t lo, hi;            /* model entries: 0 .. shard elements; optimizer entries: the owned range */
    size_t data;               /* offset of the values in the pool (floats); optimizer: the groups in
                                  turn, group g at data + g (hi - lo) */
    int n_groups;              /* optimizer entries: m and v (2), or the momentum buffer (1) */
    const char *groups[2];     /* their dataset groups (tri_state_group_name) */
    int group;                 /* local entries: the tri_state_group (engine/train/state_shards.h) */
} tri_ckpt_snap_entry;

typedef struct tri_ckpt_snapshot {
    tri_device *dev;           /* owner of the pool */
    float *pool;               /* host staging memory (floats) */
    size_t pool_cap, pool_used;
    int n_model, n_optim, n_local;
    tri_ckpt_snap_entry *model, *optim;
    tri_ckpt_snap_entry *local;  /* local SGD: outer and replica entries, one per group (state_shards.h) */
    bool writes_local;         /* local SGD or a compressed dp reduction's error feedback: this rank writes
                                  its replica file (every dp rank) */
    bool writes_outer;         /* local SGD: this rank writes its outer file (every dp rank) */
    bool writes_model;         /* this rank writes its (tp, pp) model file (dp rank 0) */
    bool writes_optim;         /* this rank writes an optimizer file (ZeRO 1-3, or dp rank 0) */
    int tp_rank, pp_rank, dp_rank, world_rank; /* dp_rank: the replica rank in dp x cp, cp_rank + cp dp_rank */
    int optim_dp;              /* the dp index in the optimizer file's name (0 at ZeRO 0) */
    int model_ep;              /* expert parallelism: the ep rank whose experts its model file holds
                                  (ep ranks > 0 write model_tp.._pp.._ep...h5; 0: the usual name) */
    int64_t iteration;
    int64_t optimizer_step;    /* the optimizer's step count */
} tri_ckpt_snapshot;

/* Copies this rank's part of step `iteration` into s (tensors named and shaped as in the manifest
 * m): collective over each stage's data-parallel group; no file is touched. The pool grows on the
 * first call (TRI_ENOMEM naming the bytes) and is reused after. */
int tri_ckpt_snapshot_take(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, int64_t iteration);

/* Sizes and allocates the pool for trainer t ahead of the first snapshot, touching every page, so
 * that no snapshot taken in the training loop allocates (asynchronous saves do this at start-up). */
int tri_ckpt_snapshot_reserve(tri_ckpt_snapshot *s, tri_trainer *t);

/* Frees the pool and the entries (s may be zeroed or already freed). */
void tri_ckpt_snapshot_free(tri_ckpt_snapshot *s);

#endif
