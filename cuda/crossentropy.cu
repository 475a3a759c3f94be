/* cuda/crossentropy.cu - the vocab-parallel softmax cross-entropy pieces on the GPU.
 *
 * The simple kernels of cuda/kernels/crossentropy.kern.h, tested on the CPU against the CPU
 * backend: row statistics one thread per row with engine/core/math.h's lane-wise row max and sum-exp
 * (the same arithmetic, so the loss pieces agree with the CPU backend to FMA rounding), the logit
 * gradient one thread per element, in place over the logits when the caller asks. logits and
 * dlogits are fp32 or bf16 as their dtypes say; maxes, stats and losses are fp32. */
#include "cuda/kernels/crossentropy.kern.h"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_ce_row_max(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
    return TRI_CUDA_LAUNCH_N(ce_row_max_kernel, N, tri_cuda_of(d)->stream, tri_fp(maxes), tri_data(logits),
                             tri_is_bf16(logits), N, V_l, V_valid);
}

extern "C" int tri_cuda_ce_sumexp_target(tri_device *d, tri_tensor stats, tri_tensor logits,
                                         tri_tensor maxes, tri_tensor targets, int64_t vocab_start,
                                         int64_t V_valid)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
    return TRI_CUDA_LAUNCH_N(ce_sumexp_target_kernel, N, tri_cuda_of(d)->stream, tri_fp(stats), tri_data(logits),
                             tri_is_bf16(logits), tri_fp(maxes), tri_ip(targets), N, V_l, vocab_start, V_valid);
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
