/* engine/device/ops/moe_dispatch.c - the Mixture-of-Experts dispatch ops' checked wrappers: the
 * counting sort of the selections by expert, the permutation of the tokens, the combine
 * (un-permutation weighted by the router's probabilities) and their backwards.
 *
 * Contracts in engine/device/ops_list.h, orders in moe_dispatch_math.h (after Megatron-Core's
 * moe_utils.permute / unpermute). Each wrapper checks the index tensors' dtype (i32) and every shape
 * against (N, K, C) read from them, widens bf16 for a backend without it, and dispatches. The CPU
 * loops are moe_dispatch_cpu.c; the CUDA kernels cuda/moe/dispatch.cu. */
#include <stdint.h>

#include "engine/device/ops_internal.h"

/* The permuted buffers hold N*K rows indexed by int32: N*K must fit. */
static int need_selections(const char *op, int64_t N, int64_t K)
{
    if (N < 0 || K < 1 || N * K > INT32_MAX)
        return TRI_ERR(TRI_EINVAL, "%s: %lld tokens x %lld selections: expected K >= 1 and N*K <= %d (int32 rows)",
                       op, (long long)N, (long long)K, INT32_MAX);
    return TRI_OK;
}

int tri_op_moe_permute_map(tri_device *d, tri_tensor row_id_map, tri_tensor sorted_indices,
                           tri_tensor tokens_per_expert, tri_tensor expert_idx)
{
    const char *op = "moe_permute_map";
    int rc = tri_need(op, "expert_idx", expert_idx, TRI_I32);
    if (!rc) rc = tri_need(op, "row_id_map", row_id_map, TRI_I32);
    if (!rc) rc = tri_need(op, "sorted_indices", sorted_indices, TRI_I32);
    if (!rc) rc = tri_need(op, "tokens_per_expert", tokens_per_expert, TRI_I32);
    if (rc)
        return rc;
    int64_t N = tri_tensor_rows(expert_idx), K = tri_tensor_cols(expert_idx), E = tri_tensor_numel(tokens_per_expert);
    rc = need_selections(op, N, K);
    if (!rc && (E < 1 || E > INT32_MAX))
        rc = TRI_ERR(TRI_EINVAL, "%s: tokens_per_expert has %lld elements: expected E in 1..%d experts", op,
                     (long long)E, INT32_MAX);
    if (!rc) rc = tri_need_matrix(op, "row_id_map", row_id_map, N, K);
    if (!rc) rc = tri_need_numel(op, "sorted_indices", sorted_indices, N * K);
    if (rc)
        return rc;
    return TRI_DISPATCH(d, moe_permute_map, row_id_map, sorted_indices, tokens_per_expert, expert_idx);
}

int tri_op_moe_permute(tri_device *d, tri_tensor x_perm, tri_tensor x, tri_tensor sorted_indices)
{
    const char *op = "moe_permute";
    char a[96], b[96];
    int rc = tri_need_float(op, "x", x);
    if (!rc) rc = tri_need_float(op, "x_perm", x_perm);
    if (!rc) rc = tri_need(op, "sorted_indices", sorted_indices, TRI_I32);
    if (rc)
        return rc;
    int64_t N = tri_tensor_rows(x), C = tri_tensor_cols(x), P = tri_tensor_numel(sorted_indices);
    rc = tri_need_matrix(op, "x_perm", x_perm, P, C);
    if (!rc && (N == 0 ? P != 0 : P % N != 0))
        rc = TRI_ERR(TRI_EINVAL, "%s: x_perm %s must have N*K rows for x %s (K selections a token)", op,
                     TRI_DESC(x_perm, a), TRI_DESC(x, b));
    if (!rc) rc = need_selections(op, N, N ? P / N : 1);
    if (rc || P == 0 || C == 0)
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &x_perm, true);
    tri_widen_arg(&w, &x, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, moe_permute, x_perm, x, sorted_indices));
}

/* row_id_map (N, K) i32 for out (N, C) and a permuted buffer perm (N*K, C); N, K from them. */
static int check_combine(const char *op, tri_tensor out, const char *out_name, tri_tensor perm, const char *perm_name,
                         tri_tensor row_id_map)
{
    int rc = tri_need_float(op, out_name, out);
    if (!rc) rc = tri_need_float(op, perm_name, perm);
    if (!rc) rc = tri_need(op, "row_id_map", row_id_map, TRI_I32);
    if (rc)
        return rc;
    int64_t N = tri_tensor_rows(out), K = tri_tensor_cols(row_id_map);
    rc = need_selections(op, N, K);
    if (!rc) rc = tri_need_matrix(op, "row_id_map", row_id_map, N, K);
    if (!rc) rc = tri_need_matrix(op, perm_name, perm, N * K, tri_tensor_cols(out));
    return rc;
}

int tri_op_moe_permute_backward(tri_device *d, tri_tensor dx, tri_tensor dx_perm, tri_tensor row_id_map)
{
    int rc = check_combine("moe_permute_backward", dx, "dx", dx_perm, "dx_perm", row_id_map);
    if (rc || tri_tensor_numel(dx) == 0)
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dx, true);
    tri_widen_arg(&w, &dx_perm, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, moe_permute_backward, dx, dx_perm, row_id_map));
}

int tri_op_moe_unpermute(tri_device *d, tri_tensor y, tri_tensor y_perm, tri_tensor row_id_map, tri_tensor w)
{
    const char *op = "moe_unpermute";
    int rc = check_combine(op, y, "y", y_perm, "y_perm", row_id_map);
    if (!rc) rc = tri_need(op, "w", w, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "w", w, tri_tensor_rows(row_id_map), tri_tensor_cols(row_id_map));
    if (rc || tri_tensor_numel(y) == 0)
        return rc;
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &y, true);
    tri_widen_arg(&wd, &y_perm, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, moe_unpermute, y, y_perm, row_id_map, w));
}

int tri_op_moe_unpermute_backward(tri_device *d, tri_tensor dy_perm, tri_tensor dw, tri_tensor dy, tri_tensor y_perm,
                                  tri_tensor sorted_indices, tri_tensor row_id_map, tri_tensor w)
{
    const char *op = "moe_unpermute_backward";
    int rc = check_combine(op, dy, "dy", y_perm, "y_perm", row_id_map);
    int64_t N = tri_tensor_rows(row_id_map), K = tri_tensor_cols(row_id_map);
    if (!rc) rc = tri_need_float(op, "dy_perm", dy_perm);
    if (!rc) rc = tri_need_matrix(op, "dy_perm", dy_perm, N * K, tri_tensor_cols(dy));
    if (!rc) rc = tri_need(op, "sorted_indices", sorted_indices, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "sorted_indices", sorted_indices, N * K);
    if (!rc) rc = tri_need(op, "w", w, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "w", w, N, K);
    if (!rc) rc = tri_need(op, "dw", dw, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "dw", dw, N, K);
    if (rc || N == 0)
        return rc;
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &dy_perm, true);
    tri_widen_arg(&wd, &dy, false);
    tri_widen_arg(&wd, &y_perm, false);
    return tri_widen_end(&wd, wd.rc ? 0
                                    : TRI_DISPATCH(d, moe_unpermute_backward, dy_perm, dw, dy, y_perm, sorted_indices,
                                                   row_id_map, w));
}
