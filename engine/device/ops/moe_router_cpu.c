/* engine/device/ops/moe_router_cpu.c - the Mixture-of-Experts router on the CPU backend: OpenMP loops
 * over tokens calling moe_router_math.h's row functions (each output row written by one iteration,
 * so any thread count gives the same bits); the losses' scalars from per-chunk partials totalled in
 * engine/core/math.h's order, as the CUDA kernels total them.
 *
 * Capacity ranks each expert's selections by moe_router_math.h's queue order: the CUDA kernel scans
 * all N*K selections per selection (tri_moe_queue_rank); here each expert first gathers its
 * selections in token order and ranks them among themselves (the same count, a strict order, in
 * sum_e c_e^2 instead of (N K)^2 steps). */
#include <stdlib.h>

#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"
#include "engine/device/ops/moe_router_math.h"

static int32_t *ip(tri_tensor t)
{
    return (int32_t *)t.data;
}

static void forward_loop(tri_tensor expert_idx, tri_tensor expert_w, tri_tensor scores, tri_tensor logits,
                         tri_tensor expert_bias, int score_func, bool norm_topk)
{
    int64_t N = tri_tensor_rows(logits), E = tri_tensor_cols(logits);
    int K = (int)tri_tensor_cols(expert_idx);
    const float *bias = tri_tensor_present(expert_bias) ? fp(expert_bias) : NULL;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        tri_moe_scores_row(fp(scores) + n * E, fp(logits) + n * E, E, score_func);
        tri_moe_topk_row(ip(expert_idx) + n * K, fp(expert_w) + n * K, fp(scores) + n * E, bias, E, K, norm_topk,
                         score_func);
    }
}

int tri_cpu_moe_router_forward(tri_device *d, tri_tensor expert_idx, tri_tensor expert_w, tri_tensor scores,
                               tri_tensor logits, tri_tensor expert_bias, int score_func, bool norm_topk)
{
    TRI_ON_THREADS(nthreads(d), forward_loop(expert_idx, expert_w, scores, logits, expert_bias, score_func, norm_topk));
    return TRI_OK;
}

/* Expert e's selections: their flat positions n*K + j in token order (list, routed[e] long), each
 * kept when fewer than `capacity` of them precede it. */
static void capacity_loop(int32_t *kept, int32_t *tokens, int32_t *routed, const int32_t *idx, const float *w,
                          int64_t N, int K, int64_t E, int64_t capacity, int policy, int64_t *list)
{
#pragma omp for schedule(dynamic, 1)
    for (int64_t e = 0; e < E; e++) {
        int64_t *mine = list + e * N, c = 0;
        for (int64_t s = 0; s < N * K; s++)
            if (idx[s] == (int32_t)e)
                mine[c++] = s;
        int64_t keep = 0;
        for (int64_t a = 0; a < c; a++) {
            int64_t rank = 0;
            if (capacity > 0)
                for (int64_t b = 0; b < c; b++)
                    rank += tri_moe_precedes(mine[b] / K, w[mine[b]], mine[a] / K, w[mine[a]], policy);
            bool ok = capacity <= 0 || rank < capacity;
            kept[mine[a]] = ok ? (int32_t)e : -1 - (int32_t)e;
            keep += ok;
        }
        routed[e] = (int32_t)c;
        tokens[e] = (int32_t)keep;
    }
}

int tri_cpu_moe_router_capacity(tri_device *d, tri_tensor kept_idx, tri_tensor tokens_per_expert,
                                tri_tensor routed_per_expert, tri_tensor expert_idx, tri_tensor expert_w,
                                int64_t capacity, int drop_policy)
{
    int64_t N = tri_tensor_rows(expert_idx), E = tri_tensor_numel(tokens_per_expert);
    int K = (int)tri_tensor_cols(expert_idx);
    /* a token selects an expert at most once: an expert's list holds at most N positions */
    int64_t *list = malloc((size_t)(E * (N > 0 ? N : 1)) * sizeof *list);
    if (!list)
        return TRI_ERR(TRI_ENOMEM, "moe_router_capacity: %lld x %lld positions of host scratch", (long long)E,
                       (long long)N);
    TRI_ON_THREADS(nthreads(d), capacity_loop(ip(kept_idx), ip(tokens_per_expert), ip(routed_per_expert),
                                              ip(expert_idx), fp(expert_w), N, K, E, capacity, drop_policy, list));
    free(list);
    return TRI_OK;
}

static void backward_loop(tri_tensor dlogits, tri_tensor d_expert_w, tri_tensor kept_idx, tri_tensor scores,
                          int score_func, bool norm_topk)
{
    int64_t N = tri_tensor_rows(scores), E = tri_tensor_cols(scores);
    int K = (int)tri_tensor_cols(kept_idx);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        tri_moe_router_backward_row(fp(dlogits) + n * E, fp(d_expert_w) + n * K, ip(kept_idx) + n * K,
                                    fp(scores) + n * E, E, K, norm_topk, score_func);
}

int tri_cpu_moe_router_backward(tri_device *d, tri_tensor dlogits, tri_tensor d_expert_w, tri_tensor kept_idx,
                                tri_tensor scores, int score_func, bool norm_topk)
{
    TRI_ON_THREADS(nthreads(d), backward_loop(dlogits, d_expert_w, kept_idx, scores, score_func, norm_topk));
    return TRI_OK;
}

/* partial[c] = chunk c's part of a loss; then, when dlogits is present, each row's gradient */
static void loss_loop(double *partial, tri_tensor dlogits, const float *rows, const int32_t *counts, int64_t N,
                      int64_t E, int score_func, int z_loss, float g)
{
    int64_t n_chunks = tri_col_chunks(N);
#pragma omp for schedule(static)
    for (int64_t c = 0; c < n_chunks; c++)
        partial[c] = tri_moe_loss_chunk(rows, counts, N, E, score_func, z_loss, c);
    if (!tri_tensor_present(dlogits))
        return;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        if (z_loss)
            tri_moe_z_backward_row(fp(dlogits) + n * E, rows + n * E, E, g);
        else
            tri_moe_aux_backward_row(fp(dlogits) + n * E, rows + n * E, counts, E, score_func, g);
    }
}

static int run_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor rows, const int32_t *counts,
                    int score_func, int z_loss, double scale, float g)
{
    int64_t N = tri_tensor_rows(rows), E = tri_tensor_cols(rows), n_chunks = tri_col_chunks(N);
    double *partial = malloc((size_t)(n_chunks > 0 ? n_chunks : 1) * sizeof *partial);
    if (!partial)
        return TRI_ERR(TRI_ENOMEM, "%s: %lld chunk sums of host scratch", z_loss ? "moe_z_loss" : "moe_aux_loss",
                       (long long)n_chunks);
    TRI_ON_THREADS(nthreads(d), loss_loop(partial, dlogits, fp(rows), counts, N, E, score_func, z_loss, g));
    fp(loss)[0] = (float)(scale * tri_chunks_total(partial, n_chunks));
    free(partial);
    return TRI_OK;
}

int tri_cpu_moe_aux_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor scores,
                         tri_tensor routed_per_expert, int64_t K, int score_func, float coeff, float dloss)
{
    int64_t N = tri_tensor_rows(scores), E = tri_tensor_cols(scores);
    double scale = tri_moe_aux_scale(coeff, E, K, N);
    return run_loss(d, loss, dlogits, scores, ip(routed_per_expert), score_func, 0, scale,
                    tri_moe_loss_grad(scale, dloss, 0));
}

int tri_cpu_moe_z_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor logits, float coeff, float dloss)
{
    double scale = tri_moe_z_scale(coeff, tri_tensor_rows(logits));
    return run_loss(d, loss, dlogits, logits, NULL, TRI_MOE_SOFTMAX, 1, scale, tri_moe_loss_grad(scale, dloss, 1));
}

int tri_cpu_moe_expert_bias_update(tri_device *d, tri_tensor expert_bias, tri_tensor tokens_per_expert, float rate)
{
    (void)d;
    int64_t E = tri_tensor_numel(expert_bias);
    /* every step reads all the counts and writes only its own bias: one pass, any order */
    for (int64_t e = 0; e < E; e++)
        fp(expert_bias)[e] += tri_moe_bias_step(ip(tokens_per_expert), E, e, rate);
    return TRI_OK;
}
