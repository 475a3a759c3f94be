/* cuda/crossentropy.cu - the vocab-parallel softmax cross-entropy pieces on the GPU.
 *
 * The simple kernels of cuda/kernels/crossentropy.kern.h, tested on the CPU against the CPU
 * backend: row statistics one thread per row with engine/core/math.h's lane-wise row max and sum-exp
 * (the same arithmetic, so the loss pieces agree with the CPU backend to FMA rounding), the logit
 * gradient one thread per element, in place over the logits when the caller asks. logits and
 * dlogits are fp32 or bf16 as their dtypes say; maxes, stats and losses are fp32. */
#include "cuda/kernels/crossentropy.kern.h"
#include "cuda/launch.cuh"
#include "cuda/warp.cuh"

/* The row max and the sum of exponentials, a warp per row (cuda/warp.cuh): the max is exact in any
 * order (from -FLT_MAX, as math.h's tri_ce_row_max_mixed), the sum is math.h's row order, so both
 * are the simple kernels' bits. The simple twins run with the device's simple switch on. */
__global__ void ce_row_max_fast_kernel(float *maxes, const void *logits, int logits_bf16, int64_t N, int64_t V_l,
                                       int64_t V_valid)
{
    int64_t n = tri_warp_row();
    if (n >= N)
        return;
    const void *row = tri_at(logits, logits_bf16, n * V_l);
    bool vec = tri_aligned16(row);
    float v[8] = {0}, mx = -3.402823466e38f;
    for (int64_t i = 8 * tri_lane(); i < V_valid; i += TRI_ROW_SLOTS) {
        tri_load8(v, row, logits_bf16, i, V_valid, vec);
        for (int k = 0; k < 8 && i + k < V_valid; k++)
            mx = v[k] > mx ? v[k] : mx;
    }
    mx = tri_warp_max(mx);
    if (tri_lane() == 0)
        maxes[n] = mx;
}

__global__ void ce_sumexp_target_fast_kernel(float *stats, const void *logits, int logits_bf16, const float *maxes,
                                             const int32_t *targets, int64_t N, int64_t V_l, int64_t vocab_start,
                                             int64_t V_valid)
{
    int64_t n = tri_warp_row();
    if (n >= N)
        return;
    const void *row = tri_at(logits, logits_bf16, n * V_l);
    bool vec = tri_aligned16(row);
    float v[8] = {0}, acc[8] = {0}, mx = maxes[n];
    for (int64_t i = 8 * tri_lane(); i < V_valid; i += TRI_ROW_SLOTS) {
        tri_load8(v, row, logits_bf16, i, V_valid, vec);
        for (int k = 0; k < 8 && i + k < V_valid; k++)
            acc[k] += tri_expf(v[k] - mx);
    }
    float sum = tri_warp_row_sum(acc);
    if (tri_lane() == 0) {
        int64_t r = (int64_t)targets[n] - vocab_start;
        stats[2 * n] = sum;
        stats[2 * n + 1] = (r >= 0 && r < V_valid) ? tri_load(row, logits_bf16, r) : 0.0f;
    }
}

extern "C" int tri_cuda_ce_row_max(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(ce_row_max_kernel, N, cu->stream, tri_fp(maxes), tri_data(logits),
                                 tri_is_bf16(logits), N, V_l, V_valid);
    return TRI_CUDA_LAUNCH(ce_row_max_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_fp(maxes), tri_data(logits), tri_is_bf16(logits), N, V_l, V_valid);
}

extern "C" int tri_cuda_ce_sumexp_target(tri_device *d, tri_tensor stats, tri_tensor logits,
                                         tri_tensor maxes, tri_tensor targets, int64_t vocab_start,
                                         int64_t V_valid)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(ce_sumexp_target_kernel, N, cu->stream, tri_fp(stats), tri_data(logits),
                                 tri_is_bf16(logits), tri_fp(maxes), tri_ip(targets), N, V_l, vocab_start, V_valid);
    return TRI_CUDA_LAUNCH(ce_sumexp_target_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_fp(stats), tri_data(logits), tri_is_bf16(logits), tri_fp(maxes), tri_ip(targets), N,
                           V_l, vocab_start, V_valid);
}

extern "C" int tri_cuda_ce_loss(tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats)
{
    int64_t N = tri_tensor_numel(losses);
    return TRI_CUDA_LAUNCH_N(ce_loss_kernel, N, tri_cuda_of(d)->stream, tri_fp(losses), tri_fp(maxes),
                             tri_fp(stats), N);
}

extern "C" int tri_cuda_ce_backward(tri_device *d, tri_tensor dlogits, tri_tensor logits,
                                    tri_tensor maxes, tri_tensor stats, tri_tensor targets,
                                    int64_t vocab_start, int64_t V_valid, float dloss)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
    return TRI_CUDA_LAUNCH_N(ce_backward_kernel, N * V_l, tri_cuda_of(d)->stream, tri_data(dlogits),
                             tri_is_bf16(dlogits), tri_data(logits), tri_is_bf16(logits), tri_fp(maxes), tri_fp(stats),
                             tri_ip(targets), N, V_l, vocab_start, V_valid, dloss);
}
