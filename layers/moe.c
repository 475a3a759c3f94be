/* layers/moe.c - the Mixture-of-Experts block on one rank as a sequence of device ops (see moe.h;
 * docs/moe.md "The MoE block" gives the sequence, the buffers and where the counts are read back). */
#include "layers/moe.h"

#include "engine/device/ops/moe_router_math.h"

/* ---- buffers: one walk that sizes and, given memory, places them ---- */

typedef struct carver {
    char *base;   /* NULL: only count */
    size_t off;
} carver;

/* The next buffer of rows x cols (cols 0: a vector of rows) of dtype; rows 0: absent. */
static tri_tensor carve(carver *cv, tri_dtype dtype, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols < 0)
        return tri_tensor_none();
    size_t bytes = (size_t)rows * (size_t)(cols ? cols : 1) * tri_dtype_size(dtype);
    void *p = cv->base ? cv->base + cv->off : NULL;
    cv->off += (bytes + TRI_MOE_ALIGN - 1) / TRI_MOE_ALIGN * TRI_MOE_ALIGN;
    return cols ? tri_tensor_2d(p, dtype, rows, cols) : tri_tensor_1d(p, dtype, rows);
}

static int check_shape(const tri_moe_shape *s)
{
    if (s->N <= 0 || s->C <= 0 || s->E <= 0 || s->I <= 0)
        return TRI_ERR(TRI_EINVAL,
                       "moe: shape N %lld, C %lld, E %lld, I (moe_intermediate_size) %lld: each must be > 0",
                       (long long)s->N, (long long)s->C, (long long)s->E, (long long)s->I);
    if (s->E > TRI_MOE_MAX_EXPERTS)
        return TRI_ERR(TRI_EINVAL, "moe: E (num_experts) %lld, at most %d", (long long)s->E, TRI_MOE_MAX_EXPERTS);
    if (s->K < 1 || s->K > s->E)
        return TRI_ERR(TRI_EINVAL, "moe: K (num_experts_per_tok) %lld, expected 1..E = %lld", (long long)s->K,
                       (long long)s->E);
    if (s->I_shared < 0)
        return TRI_ERR(TRI_EINVAL, "moe: I_shared (shared_expert_intermediate_size) %lld, expected >= 0 (0: none)",
                       (long long)s->I_shared);
    return TRI_OK;
}

static void layout_acts(const tri_moe_shape *s, tri_moe_acts *a, carver *cv)
{
    int64_t N = s->N, E = s->E, K = s->K, P = s->N * s->K;
    a->logits = carve(cv, TRI_F32, N, E);
    a->scores = carve(cv, TRI_F32, N, E);
    a->expert_idx = carve(cv, TRI_I32, N, K);
    a->expert_w = carve(cv, TRI_F32, N, K);
    a->kept_idx = carve(cv, TRI_I32, N, K);
    a->tokens_per_expert = carve(cv, TRI_I32, E, 0);
    a->routed_per_expert = carve(cv, TRI_I32, E, 0);
    a->row_id_map = carve(cv, TRI_I32, N, K);
    a->sorted_indices = carve(cv, TRI_I32, P, 0);
    a->x_perm = carve(cv, TRI_F32, P, s->C);
    a->gate_up = carve(cv, TRI_F32, P, 2 * s->I);
    a->h = carve(cv, TRI_F32, P, s->I);
    a->o = carve(cv, TRI_F32, P, s->C);
    a->shared_gate_up = carve(cv, TRI_F32, s->I_shared ? N : 0, 2 * s->I_shared);
    a->shared_h = carve(cv, TRI_F32, s->I_shared ? N : 0, s->I_shared);
    a->losses = carve(cv, TRI_F32, 2, 0);
}

static void layout_scratch(const tri_moe_shape *s, tri_moe_scratch *sc, carver *cv)
{
    int64_t N = s->N, P = s->N * s->K;
    sc->dlogits = carve(cv, TRI_F32, N, s->E);
    sc->d_expert_w = carve(cv, TRI_F32, N, s->K);
    sc->d_o = carve(cv, TRI_F32, P, s->C);
    sc->dh = carve(cv, TRI_F32, P, s->I);
    sc->dgate_up = carve(cv, TRI_F32, P, 2 * s->I);
    sc->shared_dh = carve(cv, TRI_F32, s->I_shared ? N : 0, s->I_shared);
    sc->shared_dgate_up = carve(cv, TRI_F32, s->I_shared ? N : 0, 2 * s->I_shared);
    sc->losses = carve(cv, TRI_F32, 2, 0);
}

size_t tri_moe_acts_bytes(const tri_moe_shape *s)
{
    if (check_shape(s))
        return 0;
    tri_moe_acts a;
    carver cv = {NULL, 0};
    layout_acts(s, &a, &cv);
    return cv.off;
}

size_t tri_moe_scratch_bytes(const tri_moe_shape *s)
{
    if (check_shape(s))
        return 0;
    tri_moe_scratch sc;
    carver cv = {NULL, 0};
    layout_scratch(s, &sc, &cv);
    return cv.off;
}

int tri_moe_bind(const tri_moe_shape *s, tri_moe_acts *acts, void *acts_mem, tri_moe_scratch *scratch,
                 void *scratch_mem)
{
    int rc = check_shape(s);
    if (rc)
        return rc;
    if (!acts || !acts_mem)
        return TRI_ERR(TRI_EINVAL, "moe: tri_moe_bind needs acts and acts_mem");
    carver cv = {acts_mem, 0};
    layout_acts(s, acts, &cv);
    acts->R = 0;
    if (scratch && scratch_mem) {
        carver cs = {scratch_mem, 0};
        layout_scratch(s, scratch, &cs);
    }
    return TRI_OK;
}

/* ---- forward and backward ---- */

static bool present(tri_tensor t)
{
    return t.data != NULL;
}

/* The checks the ops cannot make: the dtype the router needs and the config against the tensors. */
static int check_call(const tri_moe_config *cfg, tri_tensor x, tri_tensor y_or_dy, const char *yname,
                      const tri_moe_weights *w)
{
    const tri_moe_shape *s = &cfg->shape;
    int rc = check_shape(s);
    if (rc)
        return rc;
    if (x.dtype != TRI_F32 || y_or_dy.dtype != TRI_F32)
        return TRI_ERR(TRI_EINVAL, "moe: x and %s must be fp32 (the router runs in fp32; a bf16 MoE block is not "
                       "built), got dtypes %d and %d", yname, (int)x.dtype, (int)y_or_dy.dtype);
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

int tri_moe_forward(tri_device *d, tri_tensor y, tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w,
                    const tri_moe_config *cfg)
{
    const tri_moe_shape *s = &cfg->shape;
    tri_tensor none = tri_tensor_none();
    int rc = check_call(cfg, x, y, "y", w);
    /* router: logits(N,E) = x @ Wr^T, scores, top-k, weights; capacity (dropless: a copy and the counts) */
    if (!rc) rc = tri_op_matmul(d, a->logits, x, w->router_w, none, false, true, 0.0f);
    if (!rc) rc = tri_op_moe_router_forward(d, a->expert_idx, a->expert_w, a->scores, a->logits, w->expert_bias,
                                            cfg->score_func, cfg->norm_topk);
    if (!rc) rc = tri_op_moe_router_capacity(d, a->kept_idx, a->tokens_per_expert, a->routed_per_expert,
                                             a->expert_idx, a->expert_w, cfg->capacity, cfg->drop_policy);
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
    /* experts: gate|up (R, 2I), SwiGLU (R, I), down (R, C), one GEMM per expert over its rows */
    if (!rc) rc = tri_op_grouped_matmul_forward(d, a->gate_up, a->x_perm, w->gate_up_w, a->counts);
    if (!rc && a->R > 0)
        rc = tri_op_swiglu_forward(d, tri_tensor_slice0(a->h, 0, a->R), tri_tensor_slice0(a->gate_up, 0, a->R));
    if (!rc) rc = tri_op_grouped_matmul_forward(d, a->o, a->h, w->down_w, a->counts);
    /* combine: y[n] = sum over the token's kept selections in k order of w * o (overwrites y) */
    if (!rc) rc = tri_op_moe_unpermute(d, y, a->o, a->row_id_map, a->expert_w);
    /* the losses' scalars, apart from y */
    tri_tensor aux = tri_tensor_slice0(a->losses, 0, 1), z = tri_tensor_slice0(a->losses, 1, 1);
    if (!rc) rc = tri_op_fill(d, a->losses, 0.0f);
    if (!rc && cfg->aux_loss_coeff != 0.0f)
        rc = tri_op_moe_aux_loss(d, aux, none, a->scores, a->routed_per_expert, s->K, cfg->score_func,
                                 cfg->aux_loss_coeff, 0.0f);
    if (!rc && cfg->z_loss_coeff != 0.0f)
        rc = tri_op_moe_z_loss(d, z, none, a->logits, cfg->z_loss_coeff, 0.0f);
    /* shared expert: y += down_s(silu(gate_s x) * up_s x) */
    if (!rc && s->I_shared > 0) {
        rc = tri_op_matmul(d, a->shared_gate_up, x, w->shared_gate_up_w, none, false, true, 0.0f);
        if (!rc) rc = tri_op_swiglu_forward(d, a->shared_h, a->shared_gate_up);
        if (!rc) rc = tri_op_matmul(d, y, a->shared_h, w->shared_down_w, none, false, true, 1.0f);
    }
    return rc;
}

int tri_moe_backward(tri_device *d, tri_tensor dx, const tri_moe_weights *g, tri_tensor dy, const tri_moe_acts *a,
                     tri_tensor x, const tri_moe_weights *w, const tri_moe_scratch *sc,
                     const tri_moe_config *cfg, float loss_scale)
{
    const tri_moe_shape *s = &cfg->shape;
    tri_tensor none = tri_tensor_none();
    int rc = check_call(cfg, x, dy, "dy", w);
    if (!rc && (dx.dtype != TRI_F32 || tri_tensor_rows(dx) != s->N || tri_tensor_cols(dx) != s->C))
        rc = TRI_ERR(TRI_EINVAL, "moe: dx must be fp32 (N, C) = (%lld, %lld)", (long long)s->N, (long long)s->C);
    if (!rc && present(g->shared_gate_up_w) != (s->I_shared > 0))
        rc = TRI_ERR(TRI_EINVAL, "moe: I_shared %lld but the shared expert's gradients are %s", (long long)s->I_shared,
                     s->I_shared > 0 ? "missing" : "given");
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
    /* the gather's backward: dx[n] = sum of the token's kept rows in k order (overwrites dx) */
    if (!rc) rc = tri_op_moe_permute_backward(d, dx, dx_perm, a->row_id_map);
    /* router: dlogits from d_expert_w, then the losses' gradients added, then the linear's backward */
    if (!rc) rc = tri_op_moe_router_backward(d, sc->dlogits, sc->d_expert_w, a->kept_idx, a->scores, cfg->score_func,
                                             cfg->norm_topk);
    tri_tensor aux = tri_tensor_slice0(sc->losses, 0, 1), z = tri_tensor_slice0(sc->losses, 1, 1);
    if (!rc && cfg->aux_loss_coeff != 0.0f)
        rc = tri_op_moe_aux_loss(d, aux, sc->dlogits, a->scores, a->routed_per_expert, s->K, cfg->score_func,
                                 cfg->aux_loss_coeff, loss_scale);
    if (!rc && cfg->z_loss_coeff != 0.0f)
        rc = tri_op_moe_z_loss(d, z, sc->dlogits, a->logits, cfg->z_loss_coeff, loss_scale);
    if (!rc) rc = tri_op_matmul(d, g->router_w, sc->dlogits, x, none, true, false, 1.0f);
    if (!rc) rc = tri_op_matmul(d, dx, sc->dlogits, w->router_w, none, false, false, 1.0f);
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
