/* checkpoints/async_save.h - checkpoints written in the background while training goes on.
 *
 * A synchronous save (checkpoint.h) blocks every rank until the files are on disk: seconds for a
 * GPT-2 124M, growing with the model, while a step takes a fraction of a second on a GPU. An
 * asynchronous save (Megatron-LM's --async-save) blocks the training loop only while each rank
 * copies its part to host memory at the step boundary (checkpoints/snapshot.h); a background thread
 * per rank then writes, fsyncs and checksums its files, and the save is published (manifest, rename
 * to iter_N, `latest`, pruning: checkpoints/save_steps.h) once every rank's files are complete.
 *
 * The guarantees are the synchronous save's: iter_N becomes visible only when every rank's files
 * are complete, fsynced and checksummed; `latest` moves last; a process killed at any moment leaves
 * the previous checkpoint intact. At most one save is in flight: starting the next one waits for it.
 *
 * Progress is agreed, never assumed: the background threads use neither the device nor the comm,
 * and at each step boundary every rank calls tri_ckpt_async_poll, one small all-reduce (only while a
 * save is in flight) in which every rank says whether its part is done or failed. When all are done,
 * rank 0 publishes on its thread, and a later poll reports the save complete on every rank. A failed
 * write fails every rank's poll alike, naming the rank and file. The end of training and a stop
 * signal call tri_ckpt_async_wait. */
#ifndef TRIDENT_CHECKPOINTS_ASYNC_SAVE_H
#define TRIDENT_CHECKPOINTS_ASYNC_SAVE_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoints/checkpoint.h"

typedef struct tri_ckpt_async tri_ckpt_async;

/* What a call saw complete: a save of step `iteration`, how long it held up the training loop in
 * all (snapshot, polls and waits, seconds) and how long it took from its start to its completion. */
typedef struct tri_ckpt_async_report {
    bool completed;
    int64_t iteration;
    double blocked_s;
    double total_s;
} tri_ckpt_async_report;

/* An asynchronous saver for trainer t (one per rank), with the host memory of its snapshots
 * allocated and touched now, not in the training loop. TRI_ENOMEM naming the bytes. */
int tri_ckpt_async_create(tri_ckpt_async **out, tri_trainer *t);

/* Waits for a background thread still running (its step stays an unpublished iter_N.tmp, removed
 * by a later save) and frees everything. No comm. NULL is ignored. */
void tri_ckpt_async_destroy(tri_ckpt_async *a);

/* Collective over the trainer's world: starts saving step info->iteration into save_dir (info is
 * copied). First waits for a save still in flight (*prev reports it). Returns when this rank's
 * snapshot is taken; every rank returns the same status. */
int tri_ckpt_async_start(tri_ckpt_async *a, const char *save_dir, const tri_ckpt_save_info *info,
                         tri_ckpt_async_report *prev);

/* Collective over the world while a save is in flight (no communication otherwise; every rank
 * knows alike whether one is): advances it without waiting. *done says whether it completed in
 * this call. A failed write or publish fails every rank alike, naming the rank and file. */
int tri_ckpt_async_poll(tri_ckpt_async *a, tri_ckpt_async_report *done);

/* Collective: waits until the save in flight, if any, is published (*done reports it). */
int tri_ckpt_async_wait(tri_ckpt_async *a, tri_ckpt_async_report *done);

/* Whether a save is in flight (the same on every rank). */
bool tri_ckpt_async_busy(const tri_ckpt_async *a);

#endif
