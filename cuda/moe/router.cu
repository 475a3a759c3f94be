/* cuda/moe/router.cu - the Mixture-of-Experts router on the GPU: launches of cuda/moe/router.kern.h
 * (forward, capacity, backward, the two losses, the expert-bias update), tested against the CPU
 * backend bit for bit through the emulated build. The capacity sorts each expert's selections
 * (cuda/moe/capacity_fast.cuh; the O((NK)^2) moe_router_keep_kernel stays as its twin, taken with the
 * simple switch or when the keys do not fit). No host sync: the counts stay on the device for
 * the dispatch; the losses' chunk partials go through the device's partials buffer (TRI_MOE_MAX_CHUNKS
 * of them, which the wrapper checks), as sum_squares's do. */
#include "cuda/launch.cuh"
#include "cuda/moe/capacity_fast.cuh"
#include "cuda/moe/router.kern.h"

extern "C" int tri_cuda_moe_router_forward(tri_device *d, tri_tensor expert_idx, tri_tensor expert_w,
                                           tri_tensor scores, tri_tensor logits, tri_tensor expert_bias,
                                           int score_func, bool norm_topk)
{
    int64_t N = tri_tensor_rows(logits), E = tri_tensor_cols(logits);
    const float *bias = tri_tensor_present(expert_bias) ? tri_fp(expert_bias) : NULL;
    return TRI_CUDA_LAUNCH_N(moe_router_forward_kernel, N, tri_cuda_of(d)->stream, (int32_t *)expert_idx.data,
                             tri_fp(expert_w), tri_fp(scores), tri_fp(logits), bias, N, E,
                             (int)tri_tensor_cols(expert_idx), (int)norm_topk, score_func);
}

/* The capacity by a sort (cuda/moe/capacity_fast.cuh): the keys' tiles, the merge passes, the kept
 * selections and the counts; 2 NK uint64 keys of scratch in the workspace. */
static int capacity_sorted(tri_cuda *cu, tri_tensor kept_idx, tri_tensor tokens_per_expert,
                           tri_tensor routed_per_expert, tri_tensor expert_idx, tri_tensor expert_w, int64_t capacity,
                           int drop_policy)
{
    int64_t NK = tri_tensor_numel(expert_idx), E = tri_tensor_numel(tokens_per_expert);
    int pb = tri_moe_cap_pos_bits(NK);
    uint64_t *src = (uint64_t *)cu->workspace, *dst = src + NK;
    int rc = TRI_CUDA_LAUNCH_STRIDED(moe_capacity_tile_kernel, (NK + TRI_LINKS_TILE - 1) / TRI_LINKS_TILE,
                                     TRI_LINKS_THREADS, cu->stream, src, tri_ip(expert_idx), tri_fp(expert_w), NK,
                                     drop_policy, pb);
    for (int64_t w = TRI_LINKS_TILE; !rc && w < NK; w *= 2) {
        rc = TRI_CUDA_LAUNCH_N(moe_capacity_merge_kernel, NK, cu->stream, dst, (const uint64_t *)src, NK, w);
        uint64_t *s = src;
        src = dst;
        dst = s;
    }
    if (!rc) rc = TRI_CUDA_LAUNCH_N(moe_capacity_keep_kernel, NK, cu->stream, (int32_t *)kept_idx.data, src, NK,
                                    capacity, pb);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(moe_capacity_count_kernel, E, cu->stream, (int32_t *)tokens_per_expert.data,
                                    (int32_t *)routed_per_expert.data, src, NK, E, capacity, pb);
    return rc;
}

extern "C" int tri_cuda_moe_router_capacity(tri_device *d, tri_tensor kept_idx, tri_tensor tokens_per_expert,
                                            tri_tensor routed_per_expert, tri_tensor expert_idx, tri_tensor expert_w,
                                            int64_t capacity, int drop_policy)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(expert_idx), E = tri_tensor_numel(tokens_per_expert);
    int K = (int)tri_tensor_cols(expert_idx);
    int64_t NK = N * K;
    if (!cu->simple && tri_moe_cap_fits(NK, E) && (size_t)NK * 16 <= cu->workspace_bytes)
        return capacity_sorted(cu, kept_idx, tokens_per_expert, routed_per_expert, expert_idx, expert_w, capacity,
                               drop_policy);
    int rc = TRI_CUDA_LAUNCH_N(moe_router_keep_kernel, N * K, cu->stream, (int32_t *)kept_idx.data, tri_ip(expert_idx),
                               tri_fp(expert_w), N, K, capacity, drop_policy);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(moe_router_count_kernel, E, cu->stream, (int32_t *)tokens_per_expert.data,
                                    (int32_t *)routed_per_expert.data, tri_ip(expert_idx), tri_ip(kept_idx), N, K, E);
    return rc;
}

extern "C" int tri_cuda_moe_router_backward(tri_device *d, tri_tensor dlogits, tri_tensor d_expert_w,
                                            tri_tensor kept_idx, tri_tensor scores, int score_func, bool norm_topk)
{
    int64_t N = tri_tensor_rows(scores), E = tri_tensor_cols(scores);
    return TRI_CUDA_LAUNCH_N(moe_router_backward_kernel, N, tri_cuda_of(d)->stream, tri_fp(dlogits), tri_fp(d_expert_w),
                             tri_ip(kept_idx), tri_fp(scores), N, E, (int)tri_tensor_cols(kept_idx), (int)norm_topk,
                             score_func);
}

/* partials, their total into loss, then the rows' gradients when dlogits is present */
static int run_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor rows, const int32_t *counts,
                    int score_func, int z_loss, double scale, float g)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(rows), E = tri_tensor_cols(rows), n_chunks = tri_col_chunks(N);
    int rc = TRI_CUDA_LAUNCH_N(moe_loss_partial_kernel, n_chunks, cu->stream, cu->partials, tri_fp(rows), counts, N, E,
                               score_func, z_loss);
    if (!rc)
        rc = TRI_CUDA_LAUNCH(moe_loss_finish_kernel, 1, 1, cu->stream, tri_fp(loss), cu->partials, n_chunks, scale);
    if (!rc && tri_tensor_present(dlogits))
        rc = TRI_CUDA_LAUNCH_N(moe_loss_backward_kernel, N, cu->stream, tri_fp(dlogits), tri_fp(rows), counts, N, E,
                               score_func, z_loss, g);
    return rc;
}

extern "C" int tri_cuda_moe_aux_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor scores,
                                     tri_tensor routed_per_expert, int64_t K, int score_func, float coeff, float dloss)
{
    double scale = tri_moe_aux_scale(coeff, tri_tensor_cols(scores), K, tri_tensor_rows(scores));
    return run_loss(d, loss, dlogits, scores, tri_ip(routed_per_expert), score_func, 0, scale,
                    tri_moe_loss_grad(scale, dloss, 0));
}

extern "C" int tri_cuda_moe_z_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor logits, float coeff,
                                   float dloss)
{
    double scale = tri_moe_z_scale(coeff, tri_tensor_rows(logits));
    return run_loss(d, loss, dlogits, logits, NULL, TRI_MOE_SOFTMAX, 1, scale, tri_moe_loss_grad(scale, dloss, 1));
}

extern "C" int tri_cuda_moe_expert_bias_update(tri_device *d, tri_tensor expert_bias, tri_tensor tokens_per_expert,
                                               float rate)
{
    int64_t E = tri_tensor_numel(expert_bias);
    return TRI_CUDA_LAUNCH_N(moe_expert_bias_update_kernel, E, tri_cuda_of(d)->stream, tri_fp(expert_bias),
                             tri_ip(tokens_per_expert), E, rate);
}
