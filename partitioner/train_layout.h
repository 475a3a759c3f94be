/* partitioner/train_layout.h - the layout value (engine/train/train_layout.h) and what the planner derives
 * from it: the shape the stage split and the traffic functions take, and element sizes. */
#ifndef TRIDENT_PARTITIONER_TRAIN_LAYOUT_H
#define TRIDENT_PARTITIONER_TRAIN_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/train/train_layout.h"
#include "partitioner/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape the stage split and the traffic functions take. */
static inline tri_layout_shape tri_train_layout_shape(const tri_train_layout *l)
{
    tri_layout_shape s = {.tp = l->tp, .pp = l->pp, .dp = l->dp, .sequence_parallel = l->sequence_parallel,
                          .B = l->B, .T = l->T, .n_micro = l->n_micro};
    return s;
}

/* Bytes of one activation / gradient element: 4 (fp32) or 2 (bf16). */
static inline int tri_precision_bytes(tri_precision p)
{
    return p == TRI_PRECISION_BF16 ? 2 : 4;
}


#ifdef __cplusplus
}
#endif

#endif
