/* layers/swiglu_mlp.c - the SwiGLU MLP sub-block (see swiglu_mlp.h). */
#include "layers/swiglu_mlp.h"

#include "layers/linear.h"

int tri_swiglu_mlp_forward(const tri_tp *tp, tri_tensor y, tri_swiglu_mlp_acts *a, tri_tensor x,
                           const tri_swiglu_mlp_weights *w, const tri_swiglu_mlp_scratch *s)
{
    int rc = tri_column_linear_forward(tp, a->gate_up, x, s->full_a, w->gate_up_w, w->gate_up_b);
    if (!rc) rc = tri_op_swiglu_forward(tp->dev, a->h, a->gate_up);
    if (!rc) rc = tri_row_linear_forward(tp, y, a->h, w->down_w, w->down_b, s->full_a);
    return rc;
}

int tri_swiglu_mlp_backward(const tri_tp *tp, tri_tensor dx, const tri_swiglu_mlp_weights *g, tri_tensor dy,
                            const tri_swiglu_mlp_acts *a, tri_tensor x, const tri_swiglu_mlp_weights *w,
                            const tri_swiglu_mlp_scratch *s)
{
    int rc = tri_row_linear_backward(tp, s->dh, g->down_w, g->down_b, dy, s->full_a, a->h, w->down_w);
    if (!rc) rc = tri_op_swiglu_backward(tp->dev, s->dgate_up, a->gate_up, s->dh);
    if (!rc) rc = tri_column_linear_backward(tp, dx, g->gate_up_w, g->gate_up_b, s->dgate_up, x, s->full_a,
                                             s->full_b, w->gate_up_w);
    return rc;
}
