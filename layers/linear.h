/* layers/linear.h - column- and row-parallel linear layers (Megatron's ColumnParallelLinear and
 * RowParallelLinear, Shoeybi et al. 2019 §3).
 *
 * Weights are (out, in) as in Megatron and llm.c: y = x @ w^T + b. A column-parallel layer holds
 * OC_l = OC/tp output rows of w and of b; a row-parallel layer holds C_l = C/tp input columns of w
 * and the whole bias. N is B*T token rows, N_l its sequence shard (N without SP). */
#ifndef TRIDENT_LAYERS_LINEAR_H
#define TRIDENT_LAYERS_LINEAR_H

#include "layers/parallel.h"

/* out(N, OC_l) = gather(x) @ w(OC_l, C)^T + b(OC_l). x is (N_l, C); x_full (N, C) is scratch
 * used under SP for the all-gathered input. */
int tri_column_linear_forward(const tri_tp *tp, tri_tensor out, tri_tensor x, tri_tensor x_full,
                              tri_tensor w, tri_tensor b);

/* dw += dout^T @ gather(x); db += column sums of dout(N, OC_l); dx(N_l, C) = the sum over TP of
 * dout @ w (all-reduce, or reduce-scatter under SP). Scratch: x_full (N, C) for re-gathering the
 * input under SP, dx_full (N, C) for the partial input gradient under SP. */
int tri_column_linear_backward(const tri_tp *tp, tri_tensor dx, tri_tensor dw, tri_tensor db,
                               tri_tensor dout, tri_tensor x, tri_tensor x_full, tri_tensor dx_full,
                               tri_tensor w);

/* out(N_l, C) = reduce(x(N, C_l) @ w(C, C_l)^T) + b(C). TP rank 0 adds the bias in its partial
 * product, so it is counted once in the sum. Scratch: partial (N, C) under SP. */
int tri_row_linear_forward(const tri_tp *tp, tri_tensor out, tri_tensor x, tri_tensor w,
                           tri_tensor b, tri_tensor partial);

/* dx(N, C_l) = gather(dout) @ w; dw += gather(dout)^T @ x; db += column sums of dout(N_l, C)
 * (under SP a partial sum over this shard's rows: the caller sums replicated gradients over TP).
 * Scratch: dout_full (N, C) under SP. */
int tri_row_linear_backward(const tri_tp *tp, tri_tensor dx, tri_tensor dw, tri_tensor db,
                            tri_tensor dout, tri_tensor dout_full, tri_tensor x, tri_tensor w);

#endif
