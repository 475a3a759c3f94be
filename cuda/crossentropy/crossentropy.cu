/* cuda/crossentropy/crossentropy.cu - the softmax cross-entropy on the GPU: the vocab-parallel pieces and the fused
 * classifier (one launch for a row's loss and gradient when no vocab-parallel split needs an
 * all-reduce between the pieces).
 *
 * The simple kernels of cuda/crossentropy/crossentropy.kern.h, tested on the CPU against the CPU
 * backend: row statistics one thread per row with engine/device/ops/crossentropy_math.h's lane-wise row max
 * and sum-exp (the same arithmetic, so the loss pieces agree with the CPU backend to FMA rounding), the logit
 * gradient one thread per element, in place over the logits when the caller asks. The fast kernels
 * (cuda/crossentropy/crossentropy_fast.cuh, also run on the CPU) follow math.h's orders a warp (the max)
 * or a block (the sum, the gradient, the fused classifier) per row with whole-sector loads and stores: the
 * simple kernels' bits. logits and dlogits are fp32 or bf16 as their dtypes say; maxes, stats and
 * losses are fp32. */
#include "cuda/crossentropy/crossentropy.kern.h"
#include "cuda/crossentropy/crossentropy_fast.cuh"
#include "cuda/launch.cuh"

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
    return TRI_CUDA_LAUNCH_STRIDED(ce_sumexp_target_fast_kernel, tri_row_blocks(N), TRI_CE_THREADS, cu->stream,
                                   tri_fp(stats), tri_data(logits), tri_is_bf16(logits), tri_fp(maxes), tri_ip(targets),
                                   N, V_l, vocab_start, V_valid);
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
    tri_cuda *cu = tri_cuda_of(d);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(ce_backward_kernel, N * V_l, cu->stream, tri_data(dlogits), tri_is_bf16(dlogits),
                                 tri_data(logits), tri_is_bf16(logits), tri_fp(maxes), tri_fp(stats), tri_ip(targets),
                                 N, V_l, vocab_start, V_valid, dloss);
    return TRI_CUDA_LAUNCH_STRIDED(ce_backward_fast_kernel, tri_row_blocks(N), TRI_CE_THREADS, cu->stream,
                                   tri_data(dlogits), tri_is_bf16(dlogits), tri_data(logits), tri_is_bf16(logits),
                                   tri_fp(maxes), tri_fp(stats), tri_ip(targets), N, V_l, vocab_start, V_valid, dloss);
}

extern "C" int tri_cuda_ce_fused(tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits,
                                 tri_tensor targets, int64_t V_valid, float dloss)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
    tri_cuda *cu = tri_cuda_of(d);
    void *dl = tri_tensor_present(dlogits) ? tri_data(dlogits) : NULL;
    int dl_bf16 = tri_tensor_present(dlogits) && tri_is_bf16(dlogits);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(ce_fused_kernel, N, cu->stream, tri_fp(losses), dl, dl_bf16, tri_data(logits),
                                 tri_is_bf16(logits), tri_ip(targets), N, V_l, V_valid, dloss);
    return TRI_CUDA_LAUNCH_STRIDED(ce_fused_fast_kernel, tri_row_blocks(N), TRI_CE_THREADS, cu->stream, tri_fp(losses),
                                   dl, dl_bf16, tri_data(logits), tri_is_bf16(logits), tri_ip(targets), N, V_l, V_valid,
                                   dloss);
}
