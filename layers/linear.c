/* layers/linear.c - column- and row-parallel linear layers (see linear.h). */
#include "layers/linear.h"

#include "engine/core/status.h"

int tri_column_linear_forward(const tri_tp *tp, tri_tensor out, tri_tensor x, tri_tensor x_full,
                              tri_tensor w, tri_tensor b)
{
    tri_tensor xin;
    int rc = tri_tp_gather_input(tp, &xin, x, x_full);
    if (rc)
        return rc;
    return tri_op_matmul(tp->dev, out, xin, w, b, false, true, 0.0f);
}

int tri_column_linear_backward(const tri_tp *tp, tri_tensor dx, tri_tensor dw, tri_tensor db,
                               tri_tensor dout, tri_tensor x, tri_tensor x_full, tri_tensor dx_full,
                               tri_tensor w)
{
    tri_tensor xin;
    int rc = tri_tp_gather_input(tp, &xin, x, x_full);
    if (!rc) rc = tri_op_matmul(tp->dev, dw, dout, xin, tri_tensor_none(), true, false, 1.0f);
    if (!rc && tri_tensor_present(db)) rc = tri_op_bias_backward(tp->dev, db, dout);
    if (rc)
        return rc;
    /* the input gradient: a partial sum on each TP rank (f's backward) */
    tri_tensor partial = tp->sp && tri_tp_size(tp) > 1 ? dx_full : dx;
    rc = tri_op_matmul(tp->dev, partial, dout, w, tri_tensor_none(), false, false, 0.0f);
    return rc ? rc : tri_tp_reduce_output(tp, dx, partial);
}

int tri_row_linear_forward(const tri_tp *tp, tri_tensor out, tri_tensor x, tri_tensor w,
                           tri_tensor b, tri_tensor partial)
{
    tri_tensor dst = tp->sp && tri_tp_size(tp) > 1 ? partial : out;
    tri_tensor bias = tri_tp_rank(tp) == 0 ? b : tri_tensor_none();
    int rc = tri_op_matmul(tp->dev, dst, x, w, bias, false, true, 0.0f);
    return rc ? rc : tri_tp_reduce_output(tp, out, dst);
}

int tri_row_linear_backward(const tri_tp *tp, tri_tensor dx, tri_tensor dw, tri_tensor db,
                            tri_tensor dout, tri_tensor dout_full, tri_tensor x, tri_tensor w)
{
    int rc = TRI_OK;
    if (tri_tensor_present(db))
        rc = tri_op_bias_backward(tp->dev, db, dout);
    tri_tensor g;
    if (!rc) rc = tri_tp_gather_input(tp, &g, dout, dout_full);
    if (!rc) rc = tri_op_matmul(tp->dev, dw, g, x, tri_tensor_none(), true, false, 1.0f);
    if (!rc) rc = tri_op_matmul(tp->dev, dx, g, w, tri_tensor_none(), false, false, 0.0f);
    return rc;
}
