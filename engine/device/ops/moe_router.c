/* engine/device/ops/moe_router.c - the Mixture-of-Experts router ops' checked wrappers: the forward
 * (scores, top-k with the optional expert bias, weights), expert capacity, the backward through the
 * weights, the auxiliary load-balancing loss, the router z-loss and DeepSeek-V3's expert-bias update.
 *
 * Contracts in engine/device/ops_list.h, the math in moe_router_math.h. The router runs in fp32 (as
 * Megatron-Core's, which casts the logits to fp32), so nothing here is widened. The CPU loops are
 * moe_router_cpu.c; the CUDA ones cuda/moe/router.cu. */
#include <stdbool.h>

#include "engine/device/ops_internal.h"

static int check_score_func(const char *op, int score_func)
{
    if (score_func != TRI_MOE_SOFTMAX && score_func != TRI_MOE_SIGMOID)
        return TRI_ERR(TRI_EINVAL, "%s: score_func %d is neither TRI_MOE_SOFTMAX (0) nor TRI_MOE_SIGMOID (1)", op,
                       score_func);
    return TRI_OK;
}

/* rows (N, E) f32 with E >= 1 */
static int check_rows(const char *op, const char *arg, tri_tensor t)
{
    int rc = tri_need(op, arg, t, TRI_F32);
    if (!rc && (t.ndim < 1 || tri_tensor_cols(t) < 1))
        rc = TRI_ERR(TRI_EINVAL, "%s: '%s' needs at least one expert column", op, arg);
    return rc;
}

/* sel (N, K) of dtype with 1 <= K <= E */
static int check_selection(const char *op, const char *arg, tri_tensor sel, tri_dtype dtype, int64_t N, int64_t E)
{
    int rc = tri_need(op, arg, sel, dtype);
    if (!rc && sel.ndim >= 1 && (tri_tensor_cols(sel) < 1 || tri_tensor_cols(sel) > E))
        rc = TRI_ERR(TRI_EINVAL, "%s: '%s' has K = %lld selections per token, expected 1 <= K <= E = %lld", op, arg,
                     (long long)tri_tensor_cols(sel), (long long)E);
    if (!rc) rc = tri_need_matrix(op, arg, sel, N, tri_tensor_cols(sel));
    return rc;
}

/* the losses sum N rows in chunks of TRI_COL_CHUNK, at most TRI_MOE_MAX_CHUNKS of them */
static int check_loss_rows(const char *op, int64_t N)
{
    if (tri_col_chunks(N) > TRI_MOE_MAX_CHUNKS)
        return TRI_ERR(TRI_EINVAL, "%s: %lld tokens, expected at most %lld (%d chunks of %d)", op, (long long)N,
                       (long long)TRI_MOE_MAX_CHUNKS * TRI_COL_CHUNK, TRI_MOE_MAX_CHUNKS, TRI_COL_CHUNK);
    return TRI_OK;
}

int tri_op_moe_router_forward(tri_device *d, tri_tensor expert_idx, tri_tensor expert_w, tri_tensor scores,
                              tri_tensor logits, tri_tensor expert_bias, int score_func, bool norm_topk)
{
    const char *op = "moe_router_forward";
    int rc = check_score_func(op, score_func);
    if (!rc) rc = check_rows(op, "logits", logits);
    int64_t N = rc ? 0 : tri_tensor_rows(logits), E = rc ? 0 : tri_tensor_cols(logits);
    if (!rc) rc = tri_need(op, "scores", scores, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "scores", scores, N, E);
    if (!rc) rc = check_selection(op, "expert_idx", expert_idx, TRI_I32, N, E);
    if (!rc) rc = check_selection(op, "expert_w", expert_w, TRI_F32, N, E);
    if (!rc && tri_tensor_cols(expert_w) != tri_tensor_cols(expert_idx))
        rc = TRI_ERR(TRI_EINVAL, "%s: 'expert_w' has K = %lld, 'expert_idx' K = %lld", op,
                     (long long)tri_tensor_cols(expert_w), (long long)tri_tensor_cols(expert_idx));
    if (!rc && tri_tensor_present(expert_bias)) {
        rc = tri_need(op, "expert_bias", expert_bias, TRI_F32);
        if (!rc) rc = tri_need_numel(op, "expert_bias", expert_bias, E);
    }
    return rc ? rc
              : TRI_DISPATCH(d, moe_router_forward, expert_idx, expert_w, scores, logits, expert_bias, score_func,
                             norm_topk);
}

int tri_op_moe_router_capacity(tri_device *d, tri_tensor kept_idx, tri_tensor tokens_per_expert,
                               tri_tensor routed_per_expert, tri_tensor expert_idx, tri_tensor expert_w,
                               int64_t capacity, int drop_policy)
{
    const char *op = "moe_router_capacity";
    int rc = TRI_OK;
    if (drop_policy != TRI_MOE_DROP_PROBS && drop_policy != TRI_MOE_DROP_POSITION)
        rc = TRI_ERR(TRI_EINVAL, "%s: drop_policy %d is neither TRI_MOE_DROP_PROBS (0) nor TRI_MOE_DROP_POSITION (1)",
                     op, drop_policy);
    if (!rc) rc = tri_need(op, "tokens_per_expert", tokens_per_expert, TRI_I32);
    int64_t E = rc ? 0 : tri_tensor_numel(tokens_per_expert);
    if (!rc && E < 1)
        rc = TRI_ERR(TRI_EINVAL, "%s: 'tokens_per_expert' is empty, expected one count per expert", op);
    if (!rc) rc = tri_need(op, "routed_per_expert", routed_per_expert, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "routed_per_expert", routed_per_expert, E);
    if (!rc) rc = tri_need(op, "expert_idx", expert_idx, TRI_I32);
    int64_t N = rc ? 0 : tri_tensor_rows(expert_idx);
    if (!rc) rc = check_selection(op, "expert_idx", expert_idx, TRI_I32, N, E);
    int64_t K = rc ? 0 : tri_tensor_cols(expert_idx);
    if (!rc) rc = tri_need(op, "kept_idx", kept_idx, TRI_I32);
    if (!rc) rc = tri_need_matrix(op, "kept_idx", kept_idx, N, K);
    if (!rc) rc = tri_need(op, "expert_w", expert_w, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "expert_w", expert_w, N, K);
    return rc ? rc
              : TRI_DISPATCH(d, moe_router_capacity, kept_idx, tokens_per_expert, routed_per_expert, expert_idx,
                             expert_w, capacity, drop_policy);
}

int tri_op_moe_router_backward(tri_device *d, tri_tensor dlogits, tri_tensor d_expert_w, tri_tensor kept_idx,
                               tri_tensor scores, int score_func, bool norm_topk)
{
    const char *op = "moe_router_backward";
    int rc = check_score_func(op, score_func);
    if (!rc) rc = check_rows(op, "scores", scores);
    int64_t N = rc ? 0 : tri_tensor_rows(scores), E = rc ? 0 : tri_tensor_cols(scores);
    if (!rc) rc = tri_need(op, "dlogits", dlogits, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "dlogits", dlogits, N, E);
    if (!rc) rc = check_selection(op, "kept_idx", kept_idx, TRI_I32, N, E);
    if (!rc) rc = tri_need(op, "d_expert_w", d_expert_w, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "d_expert_w", d_expert_w, N, tri_tensor_cols(kept_idx));
    return rc ? rc : TRI_DISPATCH(d, moe_router_backward, dlogits, d_expert_w, kept_idx, scores, score_func, norm_topk);
}

/* loss (1) f32, and dlogits (N, E) f32 when present */
static int check_loss(const char *op, tri_tensor loss, tri_tensor dlogits, int64_t N, int64_t E)
{
    int rc = tri_need(op, "loss", loss, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "loss", loss, 1);
    if (!rc && tri_tensor_present(dlogits)) {
        rc = tri_need(op, "dlogits", dlogits, TRI_F32);
        if (!rc) rc = tri_need_matrix(op, "dlogits", dlogits, N, E);
    }
    if (!rc) rc = check_loss_rows(op, N);
    return rc;
}

int tri_op_moe_aux_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor scores,
                        tri_tensor routed_per_expert, int64_t K, int score_func, float coeff, float dloss)
{
    const char *op = "moe_aux_loss";
    int rc = check_score_func(op, score_func);
    if (!rc) rc = check_rows(op, "scores", scores);
    int64_t N = rc ? 0 : tri_tensor_rows(scores), E = rc ? 0 : tri_tensor_cols(scores);
    if (!rc) rc = tri_need(op, "routed_per_expert", routed_per_expert, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "routed_per_expert", routed_per_expert, E);
    if (!rc && (K < 1 || K > E))
        rc = TRI_ERR(TRI_EINVAL, "%s: K %lld, expected 1 <= K <= E = %lld", op, (long long)K, (long long)E);
    if (!rc) rc = check_loss(op, loss, dlogits, N, E);
    return rc ? rc
              : TRI_DISPATCH(d, moe_aux_loss, loss, dlogits, scores, routed_per_expert, K, score_func, coeff, dloss);
}

int tri_op_moe_z_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor logits, float coeff, float dloss)
{
    const char *op = "moe_z_loss";
    int rc = check_rows(op, "logits", logits);
    if (!rc) rc = check_loss(op, loss, dlogits, tri_tensor_rows(logits), tri_tensor_cols(logits));
    return rc ? rc : TRI_DISPATCH(d, moe_z_loss, loss, dlogits, logits, coeff, dloss);
}

int tri_op_moe_expert_bias_update(tri_device *d, tri_tensor expert_bias, tri_tensor tokens_per_expert, float rate)
{
    const char *op = "moe_expert_bias_update";
    int rc = tri_need(op, "expert_bias", expert_bias, TRI_F32);
    if (!rc) rc = tri_need(op, "tokens_per_expert", tokens_per_expert, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "tokens_per_expert", tokens_per_expert, tri_tensor_numel(expert_bias));
    return rc ? rc : TRI_DISPATCH(d, moe_expert_bias_update, expert_bias, tokens_per_expert, rate);
}
