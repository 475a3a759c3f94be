/* layers/moe_buffers.c - the MoE block's buffers (see moe.h): one walk over them that sizes them
 * (tri_moe_acts_bytes, tri_moe_scratch_bytes: what the partitioner and the model plan) and, given
 * memory, places them (tri_moe_bind). Apart from the block's passes, so the sizes need no device op. */
#include "layers/moe.h"

/* ---- buffers: one walk that sizes and, given memory, places them ---- */

tri_tensor tri_moe_carve(tri_moe_carver *cv, tri_dtype dtype, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols < 0)
        return tri_tensor_none();
    size_t bytes = (size_t)rows * (size_t)(cols ? cols : 1) * tri_dtype_size(dtype);
    void *p = cv->base ? cv->base + cv->off : NULL;
    cv->off += (bytes + TRI_MOE_ALIGN - 1) / TRI_MOE_ALIGN * TRI_MOE_ALIGN;
    return cols ? tri_tensor_2d(p, dtype, rows, cols) : tri_tensor_1d(p, dtype, rows);
}

int tri_moe_check_shape(const tri_moe_shape *s)
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
    if (s->dtype != TRI_F32 && s->dtype != TRI_BF16)
        return TRI_ERR(TRI_EINVAL, "moe: dtype %d, expected TRI_F32 or TRI_BF16", (int)s->dtype);
    if (s->I_shared < 0)
        return TRI_ERR(TRI_EINVAL, "moe: I_shared (shared_expert_intermediate_size) %lld, expected >= 0 (0: none)",
                       (long long)s->I_shared);
    return TRI_OK;
}

static void layout_acts(const tri_moe_shape *s, tri_moe_acts *a, tri_moe_carver *cv)
{
    int64_t N = s->N, E = s->E, K = s->K, P = s->N * s->K;
    tri_dtype dt = s->dtype;
    a->logits = tri_moe_carve(cv, TRI_F32, N, E);
    a->scores = tri_moe_carve(cv, TRI_F32, N, E);
    a->expert_idx = tri_moe_carve(cv, TRI_I32, N, K);
    a->expert_w = tri_moe_carve(cv, TRI_F32, N, K);
    a->kept_idx = tri_moe_carve(cv, TRI_I32, N, K);
    a->tokens_per_expert = tri_moe_carve(cv, TRI_I32, E, 0);
    a->routed_per_expert = tri_moe_carve(cv, TRI_I32, E, 0);
    a->row_id_map = tri_moe_carve(cv, TRI_I32, N, K);
    a->sorted_indices = tri_moe_carve(cv, TRI_I32, P, 0);
    a->x_perm = tri_moe_carve(cv, dt, P, s->C);
    a->gate_up = tri_moe_carve(cv, dt, P, 2 * s->I);
    a->h = tri_moe_carve(cv, dt, P, s->I);
    a->o = tri_moe_carve(cv, dt, P, s->C);
    a->shared_gate_up = tri_moe_carve(cv, dt, s->I_shared ? N : 0, 2 * s->I_shared);
    a->shared_h = tri_moe_carve(cv, dt, s->I_shared ? N : 0, s->I_shared);
    a->losses = tri_moe_carve(cv, TRI_F32, 2, 0);
    a->routed_global = tri_moe_carve(cv, TRI_I32, s->sp > 1 ? E : 0, 0);
}

static void layout_scratch(const tri_moe_shape *s, tri_moe_scratch *sc, tri_moe_carver *cv)
{
    int64_t N = s->N, P = s->N * s->K;
    tri_dtype dt = s->dtype;
    bool bf16 = dt == TRI_BF16;
    sc->dlogits = tri_moe_carve(cv, TRI_F32, N, s->E);
    sc->d_expert_w = tri_moe_carve(cv, TRI_F32, N, s->K);
    sc->d_o = tri_moe_carve(cv, dt, P, s->C);
    sc->dh = tri_moe_carve(cv, dt, P, s->I);
    sc->dgate_up = tri_moe_carve(cv, dt, P, 2 * s->I);
    sc->shared_dh = tri_moe_carve(cv, dt, s->I_shared ? N : 0, s->I_shared);
    sc->shared_dgate_up = tri_moe_carve(cv, dt, s->I_shared ? N : 0, 2 * s->I_shared);
    sc->losses = tri_moe_carve(cv, TRI_F32, 2, 0);
    /* bf16: the router's backward in fp32 (x and Wr widened; the first then holds dlogits @ Wr) */
    sc->router_x = tri_moe_carve(cv, TRI_F32, bf16 ? N : 0, s->C);
    sc->router_w32 = tri_moe_carve(cv, TRI_F32, bf16 ? s->E : 0, s->C);
}

size_t tri_moe_acts_bytes(const tri_moe_shape *s)
{
    if (tri_moe_check_shape(s))
        return 0;
    tri_moe_acts a;
    tri_moe_carver cv = {NULL, 0};
    layout_acts(s, &a, &cv);
    return cv.off;
}

size_t tri_moe_scratch_bytes(const tri_moe_shape *s)
{
    if (tri_moe_check_shape(s))
        return 0;
    tri_moe_scratch sc;
    tri_moe_carver cv = {NULL, 0};
    layout_scratch(s, &sc, &cv);
    return cv.off;
}

int tri_moe_bind(const tri_moe_shape *s, tri_moe_acts *acts, void *acts_mem, tri_moe_scratch *scratch,
                 void *scratch_mem)
{
    int rc = tri_moe_check_shape(s);
    if (rc)
        return rc;
    if (!acts || !acts_mem)
        return TRI_ERR(TRI_EINVAL, "moe: tri_moe_bind needs acts and acts_mem");
    tri_moe_carver cv = {acts_mem, 0};
    layout_acts(s, acts, &cv);
    acts->R = 0;
    if (scratch && scratch_mem) {
        tri_moe_carver cs = {scratch_mem, 0};
        layout_scratch(s, scratch, &cs);
    }
    return TRI_OK;
}
