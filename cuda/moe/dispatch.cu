/* cuda/moe/dispatch.cu - the Mixture-of-Experts dispatch on the GPU: the counting sort of the
 * selections by expert, the permutation, the combine and their backwards (cuda/moe/dispatch.kern.h,
 * engine/device/ops/moe_dispatch_math.h's orders, so the CPU's bits).
 *
 * The counting sort is five launches with no host sync: both index maps filled with -1, the counts
 * of each (expert, chunk of TRI_MOE_CHUNK selections) into the cuBLASLt workspace (E x chunks int32;
 * the chunk doubles until they fit its 32 MiB, which changes no result), their exclusive scan with
 * tokens_per_expert, and the placement. Fast forms (cuda/moe/dispatch_fast.cuh, E up to
 * TRI_MOE_FAST_MAX_E): the counts and the placement a warp per chunk, the scan one block; the simple
 * twins (cuda/moe/dispatch.kern.h, and above that E): a thread per (expert, chunk) and one thread.
 * tokens_per_expert stays on the device: the caller reads it back once per layer for the grouped
 * GEMM (engine/device/ops/grouped_matmul.h). The permutation, the combine and their backwards are a
 * warp per row with 16-byte accesses (twins: a thread per element); the combine weight's gradient a
 * warp per selection (twin: a thread per selection). Every fast form gives its twin's bits. */
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
    if (!cu->simple && E <= TRI_MOE_FAST_MAX_E) { /* cuda/moe/dispatch_fast.cuh: a warp per chunk */
        int64_t grid = (nch + TRI_ROWS_PER_BLOCK - 1) / TRI_ROWS_PER_BLOCK;
        if (!rc && nch)
            rc = TRI_CUDA_LAUNCH_STRIDED(moe_sort_fast_kernel, grid, 32 * TRI_ROWS_PER_BLOCK, cu->stream, first,
                                         (int32_t *)NULL, (int32_t *)NULL, (const int32_t *)NULL, idx, NK, E, nch,
                                         chunk);
        if (!rc) rc = TRI_CUDA_LAUNCH(moe_scan_fast_kernel, 1, TRI_MOE_SCAN_THREADS, cu->stream, first, tpe, E, nch);
        if (!rc && nch)
            rc = TRI_CUDA_LAUNCH_STRIDED(moe_sort_fast_kernel, grid, 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                                         (int32_t *)NULL, rows, sorted, (const int32_t *)first, idx, NK, E, nch,
                                         chunk);
        return rc;
    }
    if (!rc && nch) rc = TRI_CUDA_LAUNCH_N(moe_count_kernel, E * nch, cu->stream, first, idx, NK, E, nch, chunk);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(moe_scan_kernel, 1, cu->stream, first, tpe, E, nch);
    if (!rc && nch)
        rc = TRI_CUDA_LAUNCH_N(moe_place_kernel, E * nch, cu->stream, rows, sorted, idx, first, NK, E, nch, chunk);
    return rc;
}

/* out(P, C) rows spread from src(N, C) (times w when present): a warp per row, or the twin's thread
 * per element with the simple switch */
static int spread(tri_cuda *cu, tri_tensor out, tri_tensor src, tri_tensor sorted_indices, const float *w, int64_t P,
                  int64_t C, int64_t K)
{
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(moe_spread_kernel, P * C, cu->stream, tri_data(out), tri_is_bf16(out), tri_data(src),
                                 tri_is_bf16(src), (const int32_t *)sorted_indices.data, w, P, C, K);
    return TRI_CUDA_LAUNCH_STRIDED(moe_spread_fast_kernel, tri_warp_grid(P), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                                   tri_data(out), tri_is_bf16(out), tri_data(src), tri_is_bf16(src),
                                   (const int32_t *)sorted_indices.data, w, P, C, K);
}

/* out(N, C) rows combined from perm(N*K, C) (weighted by w when present), likewise */
static int combine(tri_cuda *cu, tri_tensor out, tri_tensor perm, tri_tensor row_id_map, const float *w, int64_t N,
                   int64_t C, int64_t K)
{
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(moe_combine_kernel, N * C, cu->stream, tri_data(out), tri_is_bf16(out),
                                 tri_data(perm), tri_is_bf16(perm), (const int32_t *)row_id_map.data, w, N, C, K);
    return TRI_CUDA_LAUNCH_STRIDED(moe_combine_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                                   tri_data(out), tri_is_bf16(out), tri_data(perm), tri_is_bf16(perm),
                                   (const int32_t *)row_id_map.data, w, N, C, K);
}

extern "C" int tri_cuda_moe_permute(tri_device *d, tri_tensor x_perm, tri_tensor x, tri_tensor sorted_indices)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t P = tri_tensor_rows(x_perm), C = tri_tensor_cols(x_perm), K = P / tri_tensor_rows(x);
    return spread(cu, x_perm, x, sorted_indices, (const float *)NULL, P, C, K);
}

extern "C" int tri_cuda_moe_permute_backward(tri_device *d, tri_tensor dx, tri_tensor dx_perm, tri_tensor row_id_map)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(dx), C = tri_tensor_cols(dx), K = tri_tensor_cols(row_id_map);
    return combine(cu, dx, dx_perm, row_id_map, (const float *)NULL, N, C, K);
}

extern "C" int tri_cuda_moe_unpermute(tri_device *d, tri_tensor y, tri_tensor y_perm, tri_tensor row_id_map,
                                      tri_tensor w)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(y), C = tri_tensor_cols(y), K = tri_tensor_cols(row_id_map);
    return combine(cu, y, y_perm, row_id_map, (const float *)w.data, N, C, K);
}

extern "C" int tri_cuda_moe_unpermute_backward(tri_device *d, tri_tensor dy_perm, tri_tensor dw, tri_tensor dy,
                                               tri_tensor y_perm, tri_tensor sorted_indices, tri_tensor row_id_map,
                                               tri_tensor w)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t P = tri_tensor_rows(dy_perm), C = tri_tensor_cols(dy), K = tri_tensor_cols(row_id_map);
    int64_t NK = tri_tensor_numel(row_id_map);
    int rc = P * C != 0 ? spread(cu, dy_perm, dy, sorted_indices, (const float *)w.data, P, C, K) : TRI_OK;
    if (rc)
        return rc;
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(moe_weight_grad_kernel, NK, cu->stream, (float *)dw.data, tri_data(dy), tri_is_bf16(dy),
                                 tri_data(y_perm), tri_is_bf16(y_perm), (const int32_t *)row_id_map.data, NK, K, C);
    return TRI_CUDA_LAUNCH(moe_weight_grad_fast_kernel, tri_warp_grid(NK), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           (float *)dw.data, tri_data(dy), tri_is_bf16(dy), tri_data(y_perm), tri_is_bf16(y_perm),
                           (const int32_t *)row_id_map.data, NK, K, C);
}
