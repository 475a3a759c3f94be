/* partitioner/forward_schedule.h - the forward-only pipeline schedule (evaluation and sampling).
 *
 * Every rank runs, for each micro-batch in order and each of its chunks in model order: receive
 * the activation (unless it holds the first chunk), forward, send it on (unless the last chunk).
 * No backward, so each micro-batch is alive on a rank only from its receive to its send. */
#ifndef TRIDENT_PARTITIONER_FORWARD_SCHEDULE_H
#define TRIDENT_PARTITIONER_FORWARD_SCHEDULE_H

#include "engine/train/schedule.h"

/* Fills `out` for pp ranks, v chunks per rank and m micro-batches. TRI_EINVAL on sizes < 1,
 * TRI_ENOMEM on allocation failure. */
int tri_schedule_forward_only(tri_schedule *out, int pp, int v, int m);

#endif
