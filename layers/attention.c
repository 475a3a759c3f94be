/* layers/attention.c - tensor-parallel causal self-attention sub-block (see attention.h). */
#include "layers/attention.h"

#include "layers/linear.h"

int tri_attention_core_forward(const tri_tp *tp, tri_attention_acts *a, const tri_attention_scratch *s)
{
    if (tri_cp_active(s->cp))
        return tri_cp_attention_forward(tp->dev, s->cp, a->atty, a->lse, a->qkv, &s->cps);
    if (s->flash)
        return tri_op_flash_attention_forward(tp->dev, a->atty, a->lse, a->qkv);
    return tri_op_attention_forward(tp->dev, a->atty, a->att, a->qkv);
}

int tri_attention_forward(const tri_tp *tp, tri_tensor y, tri_attention_acts *a, tri_tensor x,
                          const tri_attention_weights *w, const tri_attention_scratch *s)
{
    int rc = tri_column_linear_forward(tp, a->qkv, x, s->full_a, w->qkv_w, w->qkv_b);
    if (!rc) rc = tri_attention_core_forward(tp, a, s);
    if (!rc) rc = tri_row_linear_forward(tp, y, a->atty, w->proj_w, w->proj_b, s->full_a);
    return rc;
}

int tri_attention_backward(const tri_tp *tp, tri_tensor dx, const tri_attention_weights *g,
                           tri_tensor dy, const tri_attention_acts *a, tri_tensor x,
                           const tri_attention_weights *w, const tri_attention_scratch *s)
{
    int rc = tri_row_linear_backward(tp, s->datty, g->proj_w, g->proj_b, dy, s->full_a, a->atty,
                                     w->proj_w);
    if (!rc && tri_cp_active(s->cp))
        rc = tri_cp_attention_backward(tp->dev, s->cp, s->dqkv, s->delta, s->datty, a->qkv, a->atty, a->lse, &s->cps);
    else if (!rc && s->flash)
        rc = tri_op_flash_attention_backward(tp->dev, s->dqkv, s->delta, s->datty, a->qkv, a->atty, a->lse);
    else if (!rc)
        rc = tri_op_attention_backward(tp->dev, s->dqkv, s->datt, s->datty, a->qkv, a->att);
    if (!rc) rc = tri_column_linear_backward(tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, s->full_a,
                                             s->full_b, w->qkv_w);
    return rc;
}
