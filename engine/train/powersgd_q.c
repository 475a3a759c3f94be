/* engine/train/powersgd_q.c - PowerSGD's Q carried to another TP split (see powersgd_q.h). */
#include "engine/train/powersgd_q.h"

#include <stdbool.h>
#include <string.h>

/* Whether a's and b's boxes meet in every dimension but the last (the matrix's rows). */
static bool rows_meet(int ndim, const tri_q_shard *a, const tri_q_shard *b)
{
    for (int d = 0; d < ndim - 1; d++)
        if (a->off[d] >= b->off[d] + b->shape[d] || b->off[d] >= a->off[d] + a->shape[d])
            return false;
    return true;
}

int64_t tri_powersgd_q_reshard(int ndim, int64_t rank, const tri_q_shard *saved, int n, const tri_q_shard *want,
                               float *qt)
{
    int last = ndim - 1;
    int64_t cols = want->shape[last], c0 = want->off[last], uncovered = 0;
    memset(qt, 0, (size_t)(rank * cols) * sizeof *qt);
    for (int64_t c = 0; c < cols; c++) {
        bool covered = false;
        for (int k = 0; k < n; k++) {
            const tri_q_shard *s = &saved[k];
            int64_t at = c0 + c - s->off[last]; /* column c in shard k's Q^T */
            if (at < 0 || at >= s->shape[last] || !rows_meet(ndim, s, want))
                continue;
            covered = true;
            for (int64_t j = 0; j < rank; j++)
                qt[j * cols + c] += s->qt[j * s->shape[last] + at];
        }
        uncovered += !covered;
    }
    return uncovered;
}
