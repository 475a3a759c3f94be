/* cuda/moe/router.kern.h - the Mixture-of-Experts router's kernels (CUDA and C): a thread per token
 * for the forward, the backward and the losses' row gradients; a thread per selection for the
 * capacity ranks and a thread per expert for the counts (integers, no atomics); a thread per chunk of
 * TRI_COL_CHUNK tokens for the losses' partials and one thread for their total. Each calls
 * engine/device/ops/moe_router_math.h's functions as the CPU loops do, so the outputs are the CPU
 * backend's bits. A token's row (E scores, K selections; E is 8 to 256 in the published models) is
 * small work beside the router's matmul and the experts', so one thread owns it: no warp form. */
#ifndef TRIDENT_CUDA_MOE_ROUTER_KERN_H
#define TRIDENT_CUDA_MOE_ROUTER_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/moe_router_math.h"

/* scores, idx and w of each token n < N (bias NULL: no expert bias) */
TRI_KERNEL moe_router_forward_kernel(int32_t *idx, float *w, float *scores, const float *logits, const float *bias,
                                     int64_t N, int64_t E, int K, int norm_topk, int score_func)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE) {
        tri_moe_scores_row(scores + n * E, logits + n * E, E, score_func);
        tri_moe_topk_row(idx + n * K, w + n * K, scores + n * E, bias, E, K, norm_topk, score_func);
    }
}

/* kept[s] for each selection s = n K + j: its expert, or -1 - expert when `capacity` selections of
 * that expert precede it (capacity <= 0: kept) */
TRI_KERNEL moe_router_keep_kernel(int32_t *kept, const int32_t *idx, const float *w, int64_t N, int K,
                                  int64_t capacity, int policy)
{
    for (int64_t s = TRI_GLOBAL_ID; s < N * K; s += TRI_GLOBAL_STRIDE) {
        int32_t e = idx[s];
        int ok = capacity <= 0 || tri_moe_queue_rank(idx, w, N, K, s / K, (int)(s % K), policy) < capacity;
        kept[s] = ok ? e : -1 - e;
    }
}

/* routed[e], tokens[e]: expert e's selections before and after dropping (kept written before) */
TRI_KERNEL moe_router_count_kernel(int32_t *tokens, int32_t *routed, const int32_t *idx, const int32_t *kept,
                                   int64_t N, int K, int64_t E)
{
    for (int64_t e = TRI_GLOBAL_ID; e < E; e += TRI_GLOBAL_STRIDE) {
        int32_t r = 0, t = 0;
        for (int64_t s = 0; s < N * K; s++) {
            r += idx[s] == (int32_t)e;
            t += kept[s] == (int32_t)e;
        }
        routed[e] = r;
        tokens[e] = t;
    }
}

TRI_KERNEL moe_router_backward_kernel(float *dlogits, const float *dw, const int32_t *kept, const float *scores,
                                      int64_t N, int64_t E, int K, int norm_topk, int score_func)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE)
        tri_moe_router_backward_row(dlogits + n * E, dw + n * K, kept + n * K, scores + n * E, E, K, norm_topk,
                                    score_func);
}

/* partial[c] = chunk c's part of the aux loss (z_loss 0: rows are the scores) or the z-loss (1: the
 * logits) */
TRI_KERNEL moe_loss_partial_kernel(double *partial, const float *rows, const int32_t *counts, int64_t N, int64_t E,
                                   int score_func, int z_loss)
{
    int64_t n_chunks = tri_col_chunks(N);
    for (int64_t c = TRI_GLOBAL_ID; c < n_chunks; c += TRI_GLOBAL_STRIDE)
        partial[c] = tri_moe_loss_chunk(rows, counts, N, E, score_func, z_loss, c);
}

/* loss[0] = scale * the chunks' total (engine/core/math.h's order), by thread 0 */
TRI_KERNEL moe_loss_finish_kernel(float *loss, const double *partial, int64_t n_chunks, double scale)
{
    if (TRI_GLOBAL_ID == 0)
        loss[0] = (float)(scale * tri_chunks_total(partial, n_chunks));
}

/* dlogits row n += the loss's gradient (g: tri_moe_loss_grad) */
TRI_KERNEL moe_loss_backward_kernel(float *dlogits, const float *rows, const int32_t *counts, int64_t N, int64_t E,
                                    int score_func, int z_loss, float g)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE) {
        if (z_loss)
            tri_moe_z_backward_row(dlogits + n * E, rows + n * E, E, g);
        else
            tri_moe_aux_backward_row(dlogits + n * E, rows + n * E, counts, E, score_func, g);
    }
}

TRI_KERNEL moe_expert_bias_update_kernel(float *bias, const int32_t *counts, int64_t E, float rate)
{
    for (int64_t e = TRI_GLOBAL_ID; e < E; e += TRI_GLOBAL_STRIDE)
        bias[e] = bias[e] + tri_moe_bias_step(counts, E, e, rate);
}

#endif
