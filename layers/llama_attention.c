/* layers/llama_attention.c - the Llama attention sub-block (see llama_attention.h). */
#include "layers/llama_attention.h"

#include "layers/linear.h"

/* The (B T, W_l) rows of a (B, T, W_l) q|k|v buffer. */
static tri_tensor rows_of(tri_tensor qkv)
{
    return tri_tensor_2d(qkv.data, qkv.dtype, qkv.shape[0] * qkv.shape[1], qkv.shape[2]);
}

/* Rotary embedding on the q and k heads of every qkv row, at the rows' global positions: t of (B, T)
 * rows, or this rank's chunks' under context parallelism (s->seq; a zeroed seq: T = qkv's rows). */
static int rotate(const tri_tp *tp, tri_tensor qkv, const tri_llama_attention_scratch *s, bool backward)
{
    tri_seq q = s->seq.cp > 1 ? s->seq : (tri_seq){.T = qkv.shape[1], .cp = 1};
    tri_tensor rows = rows_of(qkv);
    int64_t heads = s->NH_l + s->NH_kv_l;
    return backward ? tri_op_rope_backward(tp->dev, rows, s->cos, s->sin, heads, q.T, 0, q.cp, q.cp_rank)
                    : tri_op_rope_forward(tp->dev, rows, s->cos, s->sin, heads, q.T, 0, q.cp, q.cp_rank);
}

int tri_llama_attention_forward(const tri_tp *tp, tri_tensor y, tri_llama_attention_acts *a, tri_tensor x,
                                const tri_llama_attention_weights *w, const tri_llama_attention_scratch *s)
{
    bool qk_norm = tri_tensor_present(w->q_norm);
    int rc = tri_column_linear_forward(tp, qk_norm ? a->qkv_in : a->qkv, x, s->full_a, w->qkv_w, w->qkv_b);
    if (!rc && qk_norm) /* Qwen3: q_norm, k_norm per head, v copied */
        rc = tri_op_rmsnorm_heads_forward(tp->dev, rows_of(a->qkv), a->qk_rstd, rows_of(a->qkv_in), w->q_norm,
                                          w->k_norm, s->NH_l, s->NH_kv_l, s->qk_norm_eps);
    if (!rc) rc = rotate(tp, a->qkv, s, false);
    if (!rc) rc = tri_cp_active(s->cp) ? tri_cp_attention_forward(tp->dev, s->cp, a->atty, a->lse, a->qkv, &s->cps)
                                       : tri_op_flash_attention_forward(tp->dev, a->atty, a->lse, a->qkv);
    if (!rc) rc = tri_row_linear_forward(tp, y, a->atty, w->o_w, w->o_b, s->full_a);
    return rc;
}

int tri_llama_attention_backward(const tri_tp *tp, tri_tensor dx, const tri_llama_attention_weights *g,
                                 tri_tensor dy, const tri_llama_attention_acts *a, tri_tensor x,
                                 const tri_llama_attention_weights *w, const tri_llama_attention_scratch *s)
{
    int rc = tri_row_linear_backward(tp, s->datty, g->o_w, g->o_b, dy, s->full_a, a->atty, w->o_w);
    if (!rc) rc = tri_cp_active(s->cp) ? tri_cp_attention_backward(tp->dev, s->cp, s->dqkv, s->delta, s->datty, a->qkv,
                                                                   a->atty, a->lse, &s->cps)
                                       : tri_op_flash_attention_backward(tp->dev, s->dqkv, s->delta, s->datty, a->qkv,
                                                                         a->atty, a->lse);
    if (!rc) rc = rotate(tp, s->dqkv, s, true);
    if (!rc && tri_tensor_present(w->q_norm)) /* through the per-head norm, in place */
        rc = tri_op_rmsnorm_heads_backward(tp->dev, rows_of(s->dqkv), g->q_norm, g->k_norm, rows_of(s->dqkv),
                                           rows_of(a->qkv_in), w->q_norm, w->k_norm, a->qk_rstd, s->NH_l, s->NH_kv_l);
    if (!rc) rc = tri_column_linear_backward(tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, s->full_a, s->full_b, w->qkv_w);
    return rc;
}
