/* engine/train/powersgd_q.h - PowerSGD's warm-started Q of a matrix carried to another tensor-
 * parallel split (a checkpoint resumed at another tp).
 *
 * PowerSGD (Vogels et al. 2019, Algorithm 1) keeps, per matrix gradient M (rows x cols: the last
 * dimension is cols, the others rows, engine/train/dp_compress.c), Q (cols x rank) from one step to
 * the next: P = M Q, P orthonormalised, Q = M^T P. Each TP rank runs it on its own shard of M. At
 * another tp a shard's Q is built from the saved shards' as the power iteration would have it:
 *   - where the split cuts rows (column-parallel weights, the vocabulary-parallel embedding), a shard
 *     of the new layout takes the sum of the Q's of the saved shards whose rows it meets: at a finer
 *     split that is its one parent's Q (P restricted to the shard's rows is M_shard Q); at a coarser
 *     one, Q = M^T P with P the saved shards' P's stacked = sum of M_k^T P_k = sum of their Q's;
 *   - where the split cuts cols (row-parallel weights), Q's rows follow the columns: a finer shard
 *     takes its slice, a coarser one the saved pieces side by side (P = M Q = sum of M_k Q_k).
 * Both are one rule over global boxes: column c of the new Q^T is the sum, over the saved shards
 * whose rows meet the new shard's and whose columns hold c, of their Q^T's column c, in the order
 * given (TP rank order). Q's scale does not matter (P is orthonormalised next), so shards held twice
 * (TP-replicated matrices) only scale it. */
#ifndef TRIDENT_ENGINE_TRAIN_POWERSGD_Q_H
#define TRIDENT_ENGINE_TRAIN_POWERSGD_Q_H

#include <stdint.h>

#include "engine/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One shard's Q^T: its box of the global tensor (ndim dims: offset and shape) and Q^T, rank x
 * shape[ndim - 1] floats, row-major (the layout of dp_compress's q and of checkpoints' powersgd_q). */
typedef struct tri_q_shard {
    int64_t off[TRI_MAX_DIMS], shape[TRI_MAX_DIMS];
    const float *qt;
} tri_q_shard;

/* Q^T (rank x want->shape[ndim - 1], row-major, overwritten) of shard `want` from the n saved shards
 * by the rule above; want->qt is ignored. Returns how many of want's columns no saved shard covered
 * (their Q^T columns are left zero; 0: complete). ndim >= 2. */
int64_t tri_powersgd_q_reshard(int ndim, int64_t rank, const tri_q_shard *saved, int n, const tri_q_shard *want,
                               float *qt);

#ifdef __cplusplus
}
#endif

#endif
