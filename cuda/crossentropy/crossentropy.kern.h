/* cuda/crossentropy/crossentropy.kern.h - simple kernels of the vocab-parallel cross-entropy pieces
 * (CUDA and C): one thread per row for the row statistics (engine/device/ops/crossentropy_math.h's lane-wise
 * row max and sum-exp, the CPU backend's arithmetic), one thread per element for the logit gradient, one thread
 * per row for the fused classifier. The
 * gradient may overwrite the logits in place (same dtype): each element is read before it is
 * written. logits and dlogits are fp32 or bf16 (their `_bf16` flags); maxes, stats and losses are
 * fp32. */
#ifndef TRIDENT_CUDA_CROSSENTROPY_CROSSENTROPY_KERN_H
#define TRIDENT_CUDA_CROSSENTROPY_CROSSENTROPY_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/crossentropy_math.h"

/* maxes[n] = max over the first V_valid logits of row n (of V_l) */
TRI_KERNEL ce_row_max_kernel(float *maxes, const void *logits, int logits_bf16, int64_t N, int64_t V_l,
                             int64_t V_valid)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        maxes[n] = tri_ce_row_max_mixed(tri_at(logits, logits_bf16, n * V_l), logits_bf16, V_valid);
}

/* stats[2n] = sum exp(logit - max) over valid columns; stats[2n+1] = target logit or 0 */
TRI_KERNEL ce_sumexp_target_kernel(float *stats, const void *logits, int logits_bf16, const float *maxes,
                                   const int32_t *targets, int64_t N, int64_t V_l, int64_t vocab_start,
                                   int64_t V_valid)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE) {
        const void *row = tri_at(logits, logits_bf16, n * V_l);
        int64_t r = (int64_t)targets[n] - vocab_start;
        stats[2 * n] = tri_ce_row_sumexp_mixed(row, logits_bf16, maxes[n], V_valid);
        stats[2 * n + 1] = (r >= 0 && r < V_valid) ? tri_load(row, logits_bf16, r) : 0.0f;
    }
}

/* losses[n] = log(sumexp) + max - target logit */
TRI_KERNEL ce_loss_kernel(float *losses, const float *maxes, const float *stats, int64_t N)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        losses[n] = tri_ce_loss(maxes[n], stats[2 * n], stats[2 * n + 1]);
}

/* dlogits(N,V_l) = dloss * (softmax - onehot) on valid columns, 0 on padding */
TRI_KERNEL ce_backward_kernel(void *dlogits, int dlogits_bf16, const void *logits, int logits_bf16,
                              const float *maxes, const float *stats, const int32_t *targets, int64_t N,
                              int64_t V_l, int64_t vocab_start, int64_t V_valid, float dloss)
{
    for (int64_t i = TRI_GLOBAL_ID; i < N * V_l; i += TRI_GLOBAL_STRIDE) {
        int64_t n = i / V_l, j = i % V_l;
        int64_t r = (int64_t)targets[n] - vocab_start;
        tri_store(dlogits, dlogits_bf16, i,
                  j < V_valid ? tri_ce_dlogit(tri_load(logits, logits_bf16, i), maxes[n], stats[2 * n], j == r, dloss)
                              : 0.0f);
    }
}

/* The fused classifier (tri_op_ce_fused), a thread per row: the pieces above one after another on
 * the row, the loss from the target logit read before the row is overwritten (in place). */
TRI_KERNEL ce_fused_kernel(float *losses, void *dlogits, int dlogits_bf16, const void *logits, int logits_bf16,
                           const int32_t *targets, int64_t N, int64_t V_l, int64_t V_valid, float dloss)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE) {
        const void *row = tri_at(logits, logits_bf16, n * V_l);
        int64_t r = targets[n];
        float mx = tri_ce_row_max_mixed(row, logits_bf16, V_valid);
        float sum = tri_ce_row_sumexp_mixed(row, logits_bf16, mx, V_valid);
        losses[n] = tri_ce_loss(mx, sum, (r >= 0 && r < V_valid) ? tri_load(row, logits_bf16, r) : 0.0f);
        if (!dlogits)
            continue;
        void *drow = tri_at(dlogits, dlogits_bf16, n * V_l);
        for (int64_t j = 0; j < V_l; j++)
            tri_store(drow, dlogits_bf16, j,
                      j < V_valid ? tri_ce_dlogit(tri_load(row, logits_bf16, j), mx, sum, j == r, dloss) : 0.0f);
    }
}

#endif
