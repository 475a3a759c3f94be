/* checkpoints/save_steps.h - the steps of a save, shared by the synchronous save (save.c) and the
 * asynchronous one (async_save.c); internal to checkpoints/.
 *
 *   begin     collective: the step's metadata; rank 0 makes SAVE_DIR/iter_N.tmp; agreed
 *   snapshot  collective over dp: this rank's tensors to host memory (snapshot.h)
 *   write     this rank's files from its snapshot into iter_N.tmp, fsynced and checksummed, and its
 *             manifest fragment: no device, no comm, so any thread
 *   publish   rank 0 only, once every rank's write succeeded: the manifest from the fragments, the
 *             index, the rename to iter_N, then `latest`, then pruning (--keep-last)
 *
 * The order is the guarantee: iter_N appears only when every file of every rank is complete,
 * fsynced and checksummed, `latest` moves last, and a process killed at any moment leaves the
 * previous step named by `latest` intact. */
#ifndef TRIDENT_CHECKPOINTS_SAVE_STEPS_H
#define TRIDENT_CHECKPOINTS_SAVE_STEPS_H

#include "checkpoints/checkpoint.h"
#include "checkpoints/snapshot.h"

/* A save in progress: everything the write and publish steps need, owned (no pointer into the
 * caller's data or the trainer), so they can run on another thread. */
typedef struct tri_ckpt_pending {
    tri_ckpt_manifest base;           /* metadata and tensors, no files yet (config_json owned) */
    char save_dir[TRI_CKPT_PATH_MAX];
    char name[64];                    /* iter_N */
    char tmp[TRI_CKPT_PATH_MAX];      /* SAVE_DIR/iter_N.tmp */
    int64_t iteration;
    int keep_last;
    int tp, pp, dp, zero_stage;       /* the layout, to collect the fragments (dp: the replicas, dp x cp) */
    bool lead;                        /* world rank 0: publishes */
} tri_ckpt_pending;

/* Collective: fills p for step info->iteration of save_dir; rank 0 creates an empty iter_N.tmp.
 * Every rank returns the same status. */
int tri_ckpt_pending_begin(tri_ckpt_pending *p, tri_trainer *t, const char *save_dir,
                           const tri_ckpt_save_info *info);
void tri_ckpt_pending_free(tri_ckpt_pending *p);

/* After a failed save (rc, agreed): rank 0 removes the step's temporary directory iter_N.tmp and adds
 * to the message that it did, or why it could not (e.g. a file system that went read-only). A full
 * disk keeps nothing of the failed step; the previous step and `latest` are untouched either way.
 * Returns rc. */
int tri_ckpt_pending_abandon(const tri_ckpt_pending *p, int rc);

/* This rank's model and optimizer files from s into p->tmp, each fsynced with its size and
 * SHA-256 recorded in this rank's manifest fragment. No device, no comm. */
int tri_ckpt_write_rank_files(const tri_ckpt_snapshot *s, const tri_ckpt_pending *p);

/* Rank 0, after every rank's write succeeded: the manifest, the index, the rename to iter_N, then
 * `latest`, then pruning. No device, no comm. */
int tri_ckpt_publish(const tri_ckpt_pending *p);

#endif
