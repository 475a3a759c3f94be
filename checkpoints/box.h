/* checkpoints/box.h - the geometry of resharding: boxes of a global tensor and copies between them.
 *
 * Every stored piece of a checkpoint is a box of a parameter's global index space: a TP shard is
 * the box [offset, offset + local_shape), and a ZeRO optimizer piece is the flat range [lo, hi) of
 * such a box's row-major elements. A box may reach past the tensor's logical shape (the vocabulary
 * padding of wte): those elements are zero by construction and are never stored nor copied. Moving
 * values between any two layouts is then one operation: copy the elements two boxes share. */
#ifndef TRIDENT_CHECKPOINTS_BOX_H
#define TRIDENT_CHECKPOINTS_BOX_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/tensor.h"

typedef struct tri_box {
    int ndim;
    int64_t off[TRI_MAX_DIMS];     /* global index of the box's first element */
    int64_t shape[TRI_MAX_DIMS];
} tri_box;

/* Elements of a box. */
int64_t tri_box_numel(const tri_box *b);

/* The part of b inside the logical shape `limit` (the same ndim): b clipped dimension by dimension.
 * Returns false when nothing is left (then *out has a zero-sized dimension). */
bool tri_box_clip(const tri_box *b, const int64_t *limit, tri_box *out);

/* Whether boxes a and b share an element. */
bool tri_box_overlap(const tri_box *a, const tri_box *b);

/* Copies into dst (box db's elements, row-major) the elements of the flat range [lo, hi) of box
 * sb that lie in db and inside `limit` (NULL: no limit); src[0] is element lo of sb. Returns the
 * number of elements copied. Runs along the last dimension are copied with memcpy. */
int64_t tri_box_copy(const tri_box *sb, int64_t lo, int64_t hi, const float *src, const tri_box *db,
                     float *dst, const int64_t *limit);

#endif
