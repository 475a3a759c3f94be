/* layers/mlp.c - tensor-parallel MLP sub-block (see mlp.h). */
#include "layers/mlp.h"

#include "layers/linear.h"

int tri_mlp_forward(const tri_tp *tp, tri_tensor y, tri_mlp_acts *a, tri_tensor x,
                    const tri_mlp_weights *w, const tri_mlp_scratch *s)
{
    int rc = tri_column_linear_forward(tp, a->fch, x, s->full_a, w->fc_w, w->fc_b);
    if (!rc) rc = tri_op_gelu_forward(tp->dev, a->fch_gelu, a->fch);
    if (!rc) rc = tri_row_linear_forward(tp, y, a->fch_gelu, w->proj_w, w->proj_b, s->full_a);
    return rc;
}

int tri_mlp_backward(const tri_tp *tp, tri_tensor dx, const tri_mlp_weights *g, tri_tensor dy,
                     const tri_mlp_acts *a, tri_tensor x, const tri_mlp_weights *w,
                     const tri_mlp_scratch *s)
{
    int rc = tri_row_linear_backward(tp, s->dh, g->proj_w, g->proj_b, dy, s->full_a, a->fch_gelu,
                                     w->proj_w);
    if (!rc) rc = tri_op_gelu_backward(tp->dev, s->dh, a->fch, s->dh);
    if (!rc) rc = tri_column_linear_backward(tp, dx, g->fc_w, g->fc_b, s->dh, x, s->full_a, s->full_b,
                                             w->fc_w);
    return rc;
}
