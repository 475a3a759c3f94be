/* cuda/moe/dispatch.cu - the Mixture-of-Experts dispatch on the GPU: the counting sort of the
 * selections by expert, the permutation, the combine and their backwards (cuda/moe/dispatch.kern.h,
 * engine/device/ops/moe_dispatch_math.h's orders, so the CPU's bits).
 *
 * The counting sort is four launches with no host sync: both index maps filled with -1, the counts
 * of each (expert, chunk of TRI_MOE_CHUNK selections) into the cuBLASLt workspace (E x chunks int32;
 * the chunk doubles until they fit its 32 MiB, which changes no result), their exclusive scan (one
 * thread: E x chunks values, 64 K for 64 experts and 1 M selections) with tokens_per_expert, and the
 * placement. tokens_per_expert stays on the device: the caller reads it back once per layer for the
 * grouped GEMM (engine/device/ops/grouped_matmul.h). The permutation and the combine are a thread
 * per element (consecutive threads, consecutive columns: coalesced). The combine weight's gradient
 * is a warp per selection (cuda/moe/dispatch_fast.cuh), or with the simple switch its twin, a thread
 * per selection: the same bits. */
#include "cuda/launch.cuh"
#include "cuda/moe/dispatch.kern.h"
#include "cuda/moe/dispatch_fast.cuh"

extern "C" int tri_cuda_moe_permute_map(tri_device *d, tri_tensor row_id_map, tri_tensor sorted_indices,
                                        tri_tensor tokens_per_expert, tri_tensor expert_idx)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t NK = tri_tensor_numel(expert_idx), E = tri_tensor_numel(tokens_per_expert), chunk = TRI_MOE_CHUNK;
    while ((size_t)(E * tri_moe_chunks(NK, chunk)) * sizeof(int32_t) > cu->workspace_bytes)
        chunk *= 2;
    int64_t nch = tri_moe_chunks(NK, chunk);
    int32_t *rows = (int32_t *)row_id_map.data, *sorted = (int32_t *)sorted_indices.data;
    int32_t *tpe = (int32_t *)tokens_per_expert.data, *first = (int32_t *)cu->workspace;
    const int32_t *idx = (const int32_t *)expert_idx.data;
    int rc = NK ? TRI_CUDA_LAUNCH_N(moe_fill_i32_kernel, NK, cu->stream, rows, NK, -1) : TRI_OK;
    if (!rc && NK) rc = TRI_CUDA_LAUNCH_N(moe_fill_i32_kernel, NK, cu->stream, sorted, NK, -1);
    if (!rc && nch) rc = TRI_CUDA_LAUNCH_N(moe_count_kernel, E * nch, cu->stream, first, idx, NK, E, nch, chunk);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(moe_scan_kernel, 1, cu->stream, first, tpe, E, nch);
    if (!rc && nch)
        rc = TRI_CUDA_LAUNCH_N(moe_place_kernel, E * nch, cu->stream, rows, sorted, idx, first, NK, E, nch, chunk);
    return rc;
}

extern "C" int tri_cuda_moe_permute(tri_device *d, tri_tensor x_perm, tri_tensor x, tri_tensor sorted_indices)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t P = tri_tensor_rows(x_perm), C = tri_tensor_cols(x_perm), K = P / tri_tensor_rows(x);
    return TRI_CUDA_LAUNCH_N(moe_spread_kernel, P * C, cu->stream, tri_data(x_perm), tri_is_bf16(x_perm), tri_data(x),
                             tri_is_bf16(x), (const int32_t *)sorted_indices.data, (const float *)NULL, P, C, K);
}

extern "C" int tri_cuda_moe_permute_backward(tri_device *d, tri_tensor dx, tri_tensor dx_perm, tri_tensor row_id_map)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(dx), C = tri_tensor_cols(dx), K = tri_tensor_cols(row_id_map);
    return TRI_CUDA_LAUNCH_N(moe_combine_kernel, N * C, cu->stream, tri_data(dx), tri_is_bf16(dx), tri_data(dx_perm),
                             tri_is_bf16(dx_perm), (const int32_t *)row_id_map.data, (const float *)NULL, N, C, K);
}

extern "C" int tri_cuda_moe_unpermute(tri_device *d, tri_tensor y, tri_tensor y_perm, tri_tensor row_id_map,
                                      tri_tensor w)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(y), C = tri_tensor_cols(y), K = tri_tensor_cols(row_id_map);
    return TRI_CUDA_LAUNCH_N(moe_combine_kernel, N * C, cu->stream, tri_data(y), tri_is_bf16(y), tri_data(y_perm),
                             tri_is_bf16(y_perm), (const int32_t *)row_id_map.data, (const float *)w.data, N, C, K);
}

extern "C" int tri_cuda_moe_unpermute_backward(tri_device *d, tri_tensor dy_perm, tri_tensor dw, tri_tensor dy,
                                               tri_tensor y_perm, tri_tensor sorted_indices, tri_tensor row_id_map,
                                               tri_tensor w)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t P = tri_tensor_rows(dy_perm), C = tri_tensor_cols(dy), K = tri_tensor_cols(row_id_map);
    int64_t NK = tri_tensor_numel(row_id_map);
    int rc = P * C != 0 ? TRI_CUDA_LAUNCH_N(moe_spread_kernel, P * C, cu->stream, tri_data(dy_perm), tri_is_bf16(dy_perm),
                                       tri_data(dy), tri_is_bf16(dy), (const int32_t *)sorted_indices.data,
                                       (const float *)w.data, P, C, K)
                   : TRI_OK;
    if (rc)
        return rc;
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(moe_weight_grad_kernel, NK, cu->stream, (float *)dw.data, tri_data(dy), tri_is_bf16(dy),
                                 tri_data(y_perm), tri_is_bf16(y_perm), (const int32_t *)row_id_map.data, NK, K, C);
    return TRI_CUDA_LAUNCH(moe_weight_grad_fast_kernel, tri_warp_grid(NK), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           (float *)dw.data, tri_data(dy), tri_is_bf16(dy), tri_data(y_perm), tri_is_bf16(y_perm),
                           (const int32_t *)row_id_map.data, NK, K, C);
}
