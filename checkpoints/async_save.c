/* checkpoints/async_save.c - checkpoints written in the background (see async_save.h).
 *
 * Every rank walks the same phases, changed only inside collective calls, so every rank knows
 * alike whether a poll needs its all-reduce:
 *   IDLE        nothing in flight
 *   WRITING     each rank's thread writes its files from its snapshot
 *   PUBLISHING  every rank's files are complete; rank 0's thread publishes the step
 * A rank's part is done when its thread (if it has one in this phase) has finished. */
#include "checkpoints/async_save.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/save_steps.h"
#include "checkpoints/snapshot.h"
#include "engine/core/clock.h"
#include "engine/core/status.h"

typedef enum { IDLE = 0, WRITING, PUBLISHING } phase;

struct tri_ckpt_async {
    tri_trainer *t;
    tri_ckpt_snapshot snap;     /* this rank's part; its host pool is kept from save to save */
    tri_ckpt_pending pending;   /* the step in flight (valid unless IDLE) */
    phase phase;
    pthread_t thread;
    bool thread_live;           /* started and not yet joined */
    atomic_bool thread_done;    /* the thread has finished its job */
    int thread_rc;              /* its status, read after the join */
    char thread_msg[1024];      /* its error message (status messages are per thread) */
    bool part_done;             /* this rank's part of the phase is finished (thread joined, or none) */
    int part_rc;                /* ... with this status */
    char part_msg[1024];        /* ... and this message */
    double started;             /* when the save in flight started (tri_now_s) */
    double blocked_s;           /* training-loop time it has taken so far */
};

/* ---- the background thread: one job, then done ---- */

static void *thread_main(void *arg)
{
    tri_ckpt_async *a = arg;
    int rc = a->phase == WRITING ? tri_ckpt_write_rank_files(&a->snap, &a->pending) : tri_ckpt_publish(&a->pending);
    a->thread_rc = rc;
    snprintf(a->thread_msg, sizeof a->thread_msg, "%s", rc ? tri_error_message() : "");
    atomic_store(&a->thread_done, true);
    return NULL;
}

/* This rank's part of the phase: its thread's job. */
static int start_thread(tri_ckpt_async *a)
{
    atomic_store(&a->thread_done, false);
    a->thread_rc = TRI_OK;
    a->part_done = false;
    int e = pthread_create(&a->thread, NULL, thread_main, a);
    if (e != 0) {
        a->part_done = true;
        a->part_rc = TRI_ERR(TRI_ENOMEM, "checkpoint: cannot start the background writer thread "
                             "(pthread_create: %s)", strerror(e));
        snprintf(a->part_msg, sizeof a->part_msg, "%s", tri_error_message());
        return a->part_rc;
    }
    a->thread_live = true;
    return TRI_OK;
}

/* Joins the thread once it has finished (with block: waits for it), recording its outcome as this
 * rank's part of the phase. */
static void reap(tri_ckpt_async *a, bool block)
{
    if (!a->thread_live || (!block && !atomic_load(&a->thread_done)))
        return;
    pthread_join(a->thread, NULL);
    a->thread_live = false;
    a->part_done = true;
    a->part_rc = a->thread_rc;
    snprintf(a->part_msg, sizeof a->part_msg, "%s", a->thread_msg);
}

/* ---- the collective steps ---- */

int tri_ckpt_async_create(tri_ckpt_async **out, tri_trainer *t)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for the asynchronous saver");
    (*out)->t = t;
    atomic_init(&(*out)->thread_done, false);
    int rc = tri_ckpt_snapshot_reserve(&(*out)->snap, t); /* not in the training loop */
    if (rc) {
        tri_ckpt_snapshot_free(&(*out)->snap);
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* Ends the save in flight (phase IDLE), failed or complete, after this rank's thread is done with
 * it; fills *done when it completed. */
static void finish(tri_ckpt_async *a, bool completed, tri_ckpt_async_report *done)
{
    reap(a, true);
    if (completed) {
        done->completed = true;
        done->iteration = a->pending.iteration;
        done->blocked_s = a->blocked_s;
        done->total_s = tri_now_s() - a->started;
    }
    a->phase = IDLE;
    tri_ckpt_pending_free(&a->pending);
}

void tri_ckpt_async_destroy(tri_ckpt_async *a)
{
    if (!a)
        return;
    tri_ckpt_async_report ignored;
    finish(a, false, &ignored);
    tri_ckpt_snapshot_free(&a->snap);
    free(a);
}

bool tri_ckpt_async_busy(const tri_ckpt_async *a)
{
    return a->phase != IDLE;
}

int tri_ckpt_async_poll(tri_ckpt_async *a, tri_ckpt_async_report *done)
{
    memset(done, 0, sizeof *done);
    if (a->phase == IDLE)
        return TRI_OK;
    double t0 = tri_now_s();
    reap(a, false);
    int mine = a->part_done && a->part_rc ? tri_error_restore(a->part_rc, a->part_msg) : TRI_OK;
    /* max over ranks: some part pending; some part failed */
    int32_t state[2] = {a->part_done ? 0 : 1, mine ? 1 : 0};
    int rc = tri_comm_host_all_reduce(a->t->grid->world, state, TRI_I32, 2, TRI_REDUCE_MAX);
    if (!rc && state[1])
        rc = tri_comm_agree(a->t->grid->world, mine); /* the lowest failing rank's message, on every rank */
    if (!rc && !state[0]) {
        if (a->phase == PUBLISHING) {
            a->blocked_s += tri_now_s() - t0;
            finish(a, true, done);
            return TRI_OK;
        }
        /* every rank's files are complete and sealed: rank 0 publishes */
        a->phase = PUBLISHING;
        a->part_done = true;
        a->part_rc = TRI_OK;
        rc = tri_comm_agree(a->t->grid->world, a->pending.lead ? start_thread(a) : TRI_OK);
    }
    a->blocked_s += tri_now_s() - t0;
    if (rc) {
        rc = tri_error_context(rc, "asynchronous checkpoint %s/%s", a->pending.save_dir, a->pending.name);
        reap(a, true); /* this rank's writer is done with iter_N.tmp before rank 0 removes it */
        rc = tri_ckpt_pending_abandon(&a->pending, rc);
        finish(a, false, done);
    }
    return rc;
}

int tri_ckpt_async_wait(tri_ckpt_async *a, tri_ckpt_async_report *done)
{
    memset(done, 0, sizeof *done);
    int rc = TRI_OK;
    while (a->phase != IDLE && !rc) {
        double t0 = tri_now_s();
        reap(a, true); /* this rank's part, finished: the poll below then moves on */
        a->blocked_s += tri_now_s() - t0;
        rc = tri_ckpt_async_poll(a, done);
    }
    return rc;
}

int tri_ckpt_async_start(tri_ckpt_async *a, const char *save_dir, const tri_ckpt_save_info *info,
                         tri_ckpt_async_report *prev)
{
    int rc = tri_ckpt_async_wait(a, prev);
    if (rc)
        return rc;
    double t0 = tri_now_s();
    a->started = t0;
    a->blocked_s = 0.0;
    rc = tri_ckpt_pending_begin(&a->pending, a->t, save_dir, info); /* agreed */
    if (!rc) rc = tri_comm_agree(a->t->grid->world, tri_ckpt_snapshot_take(&a->snap, a->t, &a->pending.base, info->iteration));
    if (!rc) {
        a->phase = WRITING;
        rc = tri_comm_agree(a->t->grid->world, start_thread(a));
    }
    a->blocked_s = tri_now_s() - t0;
    if (rc) {
        tri_ckpt_async_report ignored;
        rc = tri_error_context(rc, "saving checkpoint %s/%s", save_dir, a->pending.name);
        reap(a, true);
        rc = tri_ckpt_pending_abandon(&a->pending, rc);
        finish(a, false, &ignored);
    }
    return rc;
}
