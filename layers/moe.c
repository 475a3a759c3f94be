/* layers/moe.c - the Mixture-of-Experts block on one rank as a sequence of device ops (see moe.h;
 * docs/moe.md "The MoE block" gives the sequence, the buffers and where the counts are read back). */
#include "layers/moe.h"

#include "engine/device/ops/moe_router_math.h"

/* ---- forward and backward ---- */

static bool present(tri_tensor t)
{
    return t.data != NULL;
}

/* w's tensor t, when present, in the block's dtype (the ops check the shapes). */
static int need_dtype(tri_tensor t, const char *name, tri_dtype dt)
{
    if (present(t) && t.dtype != dt)
        return TRI_ERR(TRI_EINVAL, "moe: %s is %s, expected the block's dtype %s (shape.dtype)", name,
                       tri_dtype_name(t.dtype), tri_dtype_name(dt));
    return TRI_OK;
}

int tri_moe_check_call(const tri_moe_config *cfg, tri_tensor x, tri_tensor y_or_dy, const char *yname,
                       const tri_moe_weights *w)
{
    const tri_moe_shape *s = &cfg->shape;
    tri_dtype dt = s->dtype;
    int rc = tri_moe_check_shape(s);
    if (!rc) rc = need_dtype(x, "x", dt);
    if (!rc) rc = need_dtype(y_or_dy, yname, dt);
    if (!rc) rc = need_dtype(w->router_w, "router_w", dt);
    if (!rc) rc = need_dtype(w->gate_up_w, "gate_up_w", dt);
    if (!rc) rc = need_dtype(w->down_w, "down_w", dt);
    if (!rc) rc = need_dtype(w->shared_gate_up_w, "shared_gate_up_w", dt);
    if (!rc) rc = need_dtype(w->shared_down_w, "shared_down_w", dt);
    if (!rc) rc = need_dtype(w->expert_bias, "expert_bias", TRI_F32);
    if (rc)
        return rc;
    if (tri_tensor_rows(x) != s->N || tri_tensor_cols(x) != s->C || tri_tensor_rows(y_or_dy) != s->N ||
        tri_tensor_cols(y_or_dy) != s->C)
        return TRI_ERR(TRI_EINVAL, "moe: x (%lld, %lld) and %s (%lld, %lld), expected (N, C) = (%lld, %lld)",
                       (long long)tri_tensor_rows(x), (long long)tri_tensor_cols(x), yname,
                       (long long)tri_tensor_rows(y_or_dy), (long long)tri_tensor_cols(y_or_dy), (long long)s->N,
                       (long long)s->C);
    if (present(w->shared_gate_up_w) != (s->I_shared > 0) || present(w->shared_down_w) != (s->I_shared > 0))
        return TRI_ERR(TRI_EINVAL, "moe: I_shared %lld but the shared expert's weights are %s", (long long)s->I_shared,
                       s->I_shared > 0 ? "missing" : "given");
    if (cfg->capacity > 0 && cfg->drop_policy != TRI_MOE_DROP_PROBS && cfg->drop_policy != TRI_MOE_DROP_POSITION)
        return TRI_ERR(TRI_EINVAL, "moe: drop_policy %d, expected TRI_MOE_DROP_PROBS or TRI_MOE_DROP_POSITION",
                       cfg->drop_policy);
    return TRI_OK;
}

int tri_moe_check_backward(const tri_moe_config *cfg, tri_tensor dx, const tri_moe_weights *g, tri_tensor dy,
                           tri_tensor x, const tri_moe_weights *w, const tri_moe_scratch *sc)
{
    const tri_moe_shape *s = &cfg->shape;
    int rc = tri_moe_check_call(cfg, x, dy, "dy", w);
    if (!rc && (dx.dtype != s->dtype || tri_tensor_rows(dx) != s->N || tri_tensor_cols(dx) != s->C))
        rc = TRI_ERR(TRI_EINVAL, "moe: dx must be %s (N, C) = (%lld, %lld)", tri_dtype_name(s->dtype),
                     (long long)s->N, (long long)s->C);
    if (!rc && s->dtype == TRI_BF16 && (!present(sc->router_x) || !present(sc->router_w32)))
        rc = TRI_ERR(TRI_EINVAL, "moe: bf16 needs the scratch's router_x and router_w32 (bind the scratch with "
                     "shape.dtype TRI_BF16)");
    if (!rc && present(g->shared_gate_up_w) != (s->I_shared > 0))
        rc = TRI_ERR(TRI_EINVAL, "moe: I_shared %lld but the shared expert's gradients are %s", (long long)s->I_shared,
                     s->I_shared > 0 ? "missing" : "given");
    return rc;
}

/* The router linear's backward from dlogits (N, E) f32: g->router_w += dlogits^T x and dx +=
 * dlogits Wr. fp32: two matmuls. bf16: in fp32 as Megatron-Core's router (x and Wr widened exactly,
 * the weight gradient and the input's share summed in fp32, the share rounded once as it is added
 * to dx). */
static int router_backward(tri_device *d, tri_tensor dx, const tri_moe_weights *g, const tri_moe_scratch *sc,
                           tri_tensor x, const tri_moe_weights *w)
{
    tri_tensor none = tri_tensor_none();
    if (x.dtype == TRI_F32) {
        int rc = tri_op_matmul(d, g->router_w, sc->dlogits, x, none, true, false, 1.0f);
        return rc ? rc : tri_op_matmul(d, dx, sc->dlogits, w->router_w, none, false, false, 1.0f);
    }
    int rc = tri_op_convert(d, sc->router_x, x);
    if (!rc) rc = tri_op_matmul(d, g->router_w, sc->dlogits, sc->router_x, none, true, false, 1.0f);
    if (!rc) rc = tri_op_convert(d, sc->router_w32, w->router_w);
    if (!rc) rc = tri_op_matmul(d, sc->router_x, sc->dlogits, sc->router_w32, none, false, false, 0.0f);
    if (!rc) rc = tri_op_add(d, dx, dx, sc->router_x);
    return rc;
}

/* The losses' coefficients and counts on this rank: under sequence parallelism (shape.sp > 1) each
 * rank's aux loss is coeff E / (K (sp N)^2) sum_e c_e(whole sequence) sum_{its n} p_ne and its z-loss
 * coeff / (sp N) sum_{its n} lse_n^2, so the group's sum is one rank's loss over all sp N tokens
 * (Megatron-Core's switch_load_balancing_loss_func with total_num_tokens = sp N). */
static float aux_coeff(const tri_moe_config *cfg)
{
    float sp = cfg->shape.sp > 1 ? (float)cfg->shape.sp : 1.0f;
    return cfg->aux_loss_coeff / (sp * sp);
}

static float z_coeff(const tri_moe_config *cfg)
{
    return cfg->shape.sp > 1 ? cfg->z_loss_coeff / (float)cfg->shape.sp : cfg->z_loss_coeff;
}

static tri_tensor aux_counts(const tri_moe_acts *a, const tri_moe_config *cfg)
{
    return cfg->shape.sp > 1 ? a->routed_global : a->routed_per_expert;
}

int tri_moe_route(tri_device *d, tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w, const tri_moe_config *cfg)
{
    const tri_moe_shape *s = &cfg->shape;
    tri_tensor none = tri_tensor_none();
    if (s->sp > 1 && !cfg->sp_comm) /* both blocks route here */
        return TRI_ERR(TRI_EINVAL, "moe: shape.sp %lld (sequence parallelism) needs cfg->sp_comm, the group whose "
                       "routed counts the aux loss sums", (long long)s->sp);
    int rc = TRI_OK;
    /* router: logits(N,E) f32 = x @ Wr^T (bf16 x and Wr: fp32 sums into fp32), scores, top-k, weights;
     * capacity (dropless: a copy and the counts) */
    if (!rc) rc = tri_op_matmul(d, a->logits, x, w->router_w, none, false, true, 0.0f);
    if (!rc) rc = tri_op_moe_router_forward(d, a->expert_idx, a->expert_w, a->scores, a->logits, w->expert_bias,
                                            cfg->score_func, cfg->norm_topk);
    if (!rc) rc = tri_op_moe_router_capacity(d, a->kept_idx, a->tokens_per_expert, a->routed_per_expert,
                                             a->expert_idx, a->expert_w, cfg->capacity, cfg->drop_policy);
    /* sequence parallelism: the aux loss's f counts the whole sequence's selections (integers: the
     * same sum in any order) */
    if (!rc && s->sp > 1 && cfg->aux_loss_coeff != 0.0f) {
        rc = tri_op_copy(d, a->routed_global, a->routed_per_expert);
        if (!rc) rc = tri_comm_all_reduce(cfg->sp_comm, a->routed_global, TRI_REDUCE_SUM);
    }
    /* dispatch: the counting sort of the kept selections by expert, then the one read-back of the
     * counts the grouped GEMM needs on the host (forward and backward use this copy) */
    if (!rc) rc = tri_op_moe_permute_map(d, a->row_id_map, a->sorted_indices, a->tokens_per_expert, a->kept_idx);
    if (!rc) rc = tri_device_copy_to_host(d, a->counts, a->tokens_per_expert);
    if (rc)
        return rc;
    a->R = 0;
    for (int64_t e = 0; e < s->E; e++)
        a->R += a->counts[e];
    rc = tri_op_moe_permute(d, a->x_perm, x, a->sorted_indices);
    return rc;
}

int tri_moe_combine(tri_device *d, tri_tensor y, tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w,
                    const tri_moe_config *cfg)
{
    const tri_moe_shape *s = &cfg->shape;
    tri_tensor none = tri_tensor_none();
    int rc = TRI_OK;
    /* combine: y[n] = sum over the token's kept selections in k order of w * o (overwrites y) */
    if (!rc) rc = tri_op_moe_unpermute(d, y, a->o, a->row_id_map, a->expert_w);
    /* the losses' scalars, apart from y */
    tri_tensor aux = tri_tensor_slice0(a->losses, 0, 1), z = tri_tensor_slice0(a->losses, 1, 1);
    if (!rc) rc = tri_op_fill(d, a->losses, 0.0f);
    if (!rc && cfg->aux_loss_coeff != 0.0f)
        rc = tri_op_moe_aux_loss(d, aux, none, a->scores, aux_counts(a, cfg), s->K, cfg->score_func, aux_coeff(cfg),
                                 0.0f);
    if (!rc && cfg->z_loss_coeff != 0.0f)
        rc = tri_op_moe_z_loss(d, z, none, a->logits, z_coeff(cfg), 0.0f);
    /* shared expert: y += down_s(silu(gate_s x) * up_s x) */
    if (!rc && s->I_shared > 0) {
        rc = tri_op_matmul(d, a->shared_gate_up, x, w->shared_gate_up_w, none, false, true, 0.0f);
        if (!rc) rc = tri_op_swiglu_forward(d, a->shared_h, a->shared_gate_up);
        if (!rc) rc = tri_op_matmul(d, y, a->shared_h, w->shared_down_w, none, false, true, 1.0f);
    }
    return rc;
}

int tri_moe_route_backward(tri_device *d, tri_tensor dx, tri_tensor dx_perm, const tri_moe_weights *g,
                           tri_tensor dy, const tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w,
                           const tri_moe_scratch *sc, const tri_moe_config *cfg, float loss_scale)
{
    const tri_moe_shape *s = &cfg->shape;
    tri_tensor none = tri_tensor_none();
    int rc = TRI_OK;
    /* the gather's backward: dx[n] = sum of the token's kept rows in k order (overwrites dx) */
    if (!rc) rc = tri_op_moe_permute_backward(d, dx, dx_perm, a->row_id_map);
    /* router: dlogits from d_expert_w, then the losses' gradients added, then the linear's backward */
    if (!rc) rc = tri_op_moe_router_backward(d, sc->dlogits, sc->d_expert_w, a->kept_idx, a->scores, cfg->score_func,
                                             cfg->norm_topk);
    tri_tensor aux = tri_tensor_slice0(sc->losses, 0, 1), z = tri_tensor_slice0(sc->losses, 1, 1);
    if (!rc && cfg->aux_loss_coeff != 0.0f)
        rc = tri_op_moe_aux_loss(d, aux, sc->dlogits, a->scores, aux_counts(a, cfg), s->K, cfg->score_func,
                                 aux_coeff(cfg), loss_scale);
    if (!rc && cfg->z_loss_coeff != 0.0f)
        rc = tri_op_moe_z_loss(d, z, sc->dlogits, a->logits, z_coeff(cfg), loss_scale);
    if (!rc) rc = router_backward(d, dx, g, sc, x, w);
    /* shared expert */
    if (!rc && s->I_shared > 0) {
        rc = tri_op_matmul(d, g->shared_down_w, dy, a->shared_h, none, true, false, 1.0f);
        if (!rc) rc = tri_op_matmul(d, sc->shared_dh, dy, w->shared_down_w, none, false, false, 0.0f);
        if (!rc) rc = tri_op_swiglu_backward(d, sc->shared_dgate_up, a->shared_gate_up, sc->shared_dh);
        if (!rc) rc = tri_op_matmul(d, g->shared_gate_up_w, sc->shared_dgate_up, x, none, true, false, 1.0f);
        if (!rc) rc = tri_op_matmul(d, dx, sc->shared_dgate_up, w->shared_gate_up_w, none, false, false, 1.0f);
    }
    return rc;
}

int tri_moe_forward(tri_device *d, tri_tensor y, tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w,
                    const tri_moe_config *cfg)
{
    int rc = tri_moe_check_call(cfg, x, y, "y", w);
    if (!rc) rc = tri_moe_route(d, a, x, w, cfg);
    /* experts: gate|up (R, 2I), SwiGLU (R, I), down (R, C), one GEMM per expert over its rows */
    if (!rc) rc = tri_op_grouped_matmul_forward(d, a->gate_up, a->x_perm, w->gate_up_w, a->counts);
    if (!rc && a->R > 0)
        rc = tri_op_swiglu_forward(d, tri_tensor_slice0(a->h, 0, a->R), tri_tensor_slice0(a->gate_up, 0, a->R));
    if (!rc) rc = tri_op_grouped_matmul_forward(d, a->o, a->h, w->down_w, a->counts);
    if (!rc) rc = tri_moe_combine(d, y, a, x, w, cfg);
    return rc;
}

int tri_moe_backward(tri_device *d, tri_tensor dx, const tri_moe_weights *g, tri_tensor dy, const tri_moe_acts *a,
                     tri_tensor x, const tri_moe_weights *w, const tri_moe_scratch *sc,
                     const tri_moe_config *cfg, float loss_scale)
{
    int rc = tri_moe_check_backward(cfg, dx, g, dy, x, w, sc);
    /* combine's backward: d_o (R, C) = w * dy at each selection's row, d_expert_w = dot(dy, o) */
    if (!rc) rc = tri_op_moe_unpermute_backward(d, sc->d_o, sc->d_expert_w, dy, a->o, a->sorted_indices,
                                                a->row_id_map, a->expert_w);
    /* experts, reversed, with the forward's host counts */
    if (!rc) rc = tri_op_grouped_matmul_backward_weight(d, g->down_w, sc->d_o, a->h, a->counts, 1.0f);
    if (!rc) rc = tri_op_grouped_matmul_backward_input(d, sc->dh, sc->d_o, w->down_w, a->counts, 0.0f);
    if (!rc && a->R > 0)
        rc = tri_op_swiglu_backward(d, tri_tensor_slice0(sc->dgate_up, 0, a->R), tri_tensor_slice0(a->gate_up, 0, a->R),
                                    tri_tensor_slice0(sc->dh, 0, a->R));
    if (!rc) rc = tri_op_grouped_matmul_backward_weight(d, g->gate_up_w, sc->dgate_up, a->x_perm, a->counts, 1.0f);
    tri_tensor dx_perm = sc->d_o; /* (N*K, C): d_o is dead once the down weights' gradients are taken */
    if (!rc) rc = tri_op_grouped_matmul_backward_input(d, dx_perm, sc->dgate_up, w->gate_up_w, a->counts, 0.0f);
    if (!rc) rc = tri_moe_route_backward(d, dx, dx_perm, g, dy, a, x, w, sc, cfg, loss_scale);
    return rc;
}
