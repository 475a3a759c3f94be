/* engine/train/fault.h - faults every rank must agree on: non-finite values, stop requests, loss spikes,
 * and the identity of the run.
 *
 * A fault seen by one rank must stop or skip the step on every rank at the same point, or the
 * ranks fall out of step and hang in their next collective. So each step ends (before the
 * optimizer update) with one small all-reduce (max) over the world of a flag per rank (its
 * gradients or loss were not finite) and a stop flag (a rank was asked to stop, e.g. by SIGTERM):
 * every rank gets the same verdict and takes the same decision (tri_step_guard_decide, pure).
 * The run's identity (config, layout, checkpoint) is compared the same way at start and on resume:
 * every rank hashes a canonical text (FNV-1a, 64 bits) and the hashes are exchanged. */
#ifndef TRIDENT_ENGINE_TRAIN_FAULT_H
#define TRIDENT_ENGINE_TRAIN_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRI_SPIKE_MAX_IN_ROW 5   /* loss spikes skipped in a row; the next is taken as the new level */

/* Per-run settings and state of the step checks. Zero-initialised by tri_step_guard_init. */
typedef struct tri_step_guard {
    int skip_nonfinite;       /* K: non-finite steps skipped in a row; the (K+1)-th fails (0: fail at once) */
    double spike_zscore;      /* skip a step whose loss is more than this many standard deviations above
                               * the mean of the last spike_window applied steps' losses (0: off) */
    int spike_window;         /* >= 2 when spike_zscore > 0 */
    bool stop_requested;      /* set by the caller before a step: every rank stops after that step */
    /* state */
    int nonfinite_in_row, spikes_in_row;
    int64_t skipped_nonfinite, skipped_spikes;
    double *window;           /* (spike_window) ring of losses of applied steps */
    int n_window, head;
} tri_step_guard;

/* The agreed outcome of a step's checks: the same on every rank. */
typedef struct tri_step_verdict {
    bool stop;                /* some rank asked to stop: finish this step, then stop */
    int n_bad;                /* ranks whose gradients or loss were not finite */
    char bad_ranks[160];      /* their world ranks, "1, 3" ("" none; "..." when too many) */
} tri_step_verdict;

typedef enum {
    TRI_STEP_APPLY = 0,       /* apply the update */
    TRI_STEP_SKIP_NONFINITE,  /* skip the update: non-finite values, within --skip-nonfinite */
    TRI_STEP_SKIP_SPIKE,      /* skip the update: a loss spike */
} tri_step_action;

/* Sets up the checks: K non-finite steps skipped in a row (0: none), loss-spike skipping at
 * z-score spike_zscore over a window of spike_window losses (0: off). TRI_EINVAL for a negative K
 * or z-score, or a window below 2 with spike skipping on. */
int tri_step_guard_init(tri_step_guard *g, int skip_nonfinite, double spike_zscore, int spike_window);
void tri_step_guard_destroy(tri_step_guard *g);

/* Collective over world (every rank, once per step, before the update): combines this rank's
 * local_bad flag and g->stop_requested with every other rank's (host values, any comm). */
int tri_step_guard_agree(tri_step_guard *g, tri_comm *world, bool local_bad, tri_step_verdict *v);

/* Decides what iteration `iter` (1-based) does given the agreed verdict and the step's loss
 * (identical on every rank, so every rank decides alike) and updates the counters and the loss
 * window. TRI_ENONFINITE, naming the iteration and the ranks, when non-finite values exceed the
 * --skip-nonfinite budget. Pure: no communication. */
int tri_step_guard_decide(tri_step_guard *g, int64_t iter, double loss, const tri_step_verdict *v,
                          tri_step_action *action);

/* 64-bit FNV-1a hash of n bytes. */
uint64_t tri_fnv1a64(const void *data, size_t n);

/* Collective over world (host buffers: the MPI or thread comm): checks that every rank has the same
 * canonical text (lines of key=value) for `what` ("config and layout", "checkpoint"). On a mismatch
 * every rank returns TRI_EINVAL naming the ranks whose text differs from rank 0's; a differing
 * rank's message also names its first line that differs from rank 0's. At most 4095 bytes of text
 * are compared line by line; the hash covers all of it. */
int tri_identity_agree(tri_comm *world, const char *what, const char *canonical);

#ifdef __cplusplus
}
#endif

#endif
