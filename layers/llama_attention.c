/* layers/llama_attention.c - the Llama attention sub-block (see llama_attention.h). */
#include "layers/llama_attention.h"

#include "layers/linear.h"

/* Rotary embedding on the q and k heads of every qkv row (positions t of (B, T) rows). */
static int rotate(const tri_tp *tp, tri_tensor qkv, const tri_llama_attention_scratch *s, bool backward)
{
    int64_t B = qkv.shape[0], T = qkv.shape[1];
    tri_tensor rows = tri_tensor_2d(qkv.data, qkv.dtype, B * T, qkv.shape[2]);
    int64_t heads = s->NH_l + s->NH_kv_l;
    return backward ? tri_op_rope_backward(tp->dev, rows, s->cos, s->sin, heads, T, 0)
                    : tri_op_rope_forward(tp->dev, rows, s->cos, s->sin, heads, T, 0);
}

int tri_llama_attention_forward(const tri_tp *tp, tri_tensor y, tri_llama_attention_acts *a, tri_tensor x,
                                const tri_llama_attention_weights *w, const tri_llama_attention_scratch *s)
{
    int rc = tri_column_linear_forward(tp, a->qkv, x, s->full_a, w->qkv_w, w->qkv_b);
    if (!rc) rc = rotate(tp, a->qkv, s, false);
    if (!rc) rc = tri_op_flash_attention_forward(tp->dev, a->atty, a->lse, a->qkv);
    if (!rc) rc = tri_row_linear_forward(tp, y, a->atty, w->o_w, w->o_b, s->full_a);
    return rc;
}

int tri_llama_attention_backward(const tri_tp *tp, tri_tensor dx, const tri_llama_attention_weights *g,
                                 tri_tensor dy, const tri_llama_attention_acts *a, tri_tensor x,
                                 const tri_llama_attention_weights *w, const tri_llama_attention_scratch *s)
{
    int rc = tri_row_linear_backward(tp, s->datty, g->o_w, g->o_b, dy, s->full_a, a->atty, w->o_w);
    if (!rc) rc = tri_op_flash_attention_backward(tp->dev, s->dqkv, s->delta, s->datty, a->qkv, a->atty, a->lse);
    if (!rc) rc = rotate(tp, s->dqkv, s, true);
    if (!rc) rc = tri_column_linear_backward(tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, s->full_a, s->full_b, w->qkv_w);
    return rc;
}
