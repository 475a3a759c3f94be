/* partitioner/flops.c - model FLOPs of a training iteration (see flops.h). */
#include "partitioner/flops.h"

/* The block's costs over B sequences of s tokens at tp = 1 (its FLOPs are the whole block's). */
static tri_block_cost block_over(const tri_transformer *m, int64_t B, int64_t s)
{
    tri_train_layout l = tri_shape_layout(&(tri_layout_shape){.tp = 1, .pp = 1, .dp = 1, .B = B, .T = s, .n_micro = 1});
    return tri_transformer_block(m, &l);
}

double tri_iteration_flops(const tri_transformer *m, int64_t B, int64_t s, bool recompute)
{
    double h = (double)m->n_embd, V = (double)m->vocab_size;
    double bs = (double)B * (double)s, passes = recompute ? 4.0 : 3.0;
    tri_train_layout l = tri_shape_layout(&(tri_layout_shape){.tp = 1, .pp = 1, .dp = 1, .B = B, .T = s, .n_micro = 1});
    /* every block's (a sparse block's: its active parameters', models/block_cost.h) */
    return passes * tri_transformer_blocks(m, &l, 0, (int)m->n_layer).fwd_flops + 6.0 * bs * h * V;
}

double tri_block_recompute_flops(const tri_transformer *m, int64_t B, int64_t s, int tp, tri_recompute r)
{
    if (r == TRI_RECOMPUTE_FULL)
        return block_over(m, B, s).fwd_flops / tp;
    if (r == TRI_RECOMPUTE_SELECTIVE)
        return block_over(m, B, s).core_flops / tp;
    return 0.0;
}

double tri_iteration_hw_flops(const tri_transformer *m, int64_t B, int64_t s, tri_recompute r)
{
    if (r == TRI_RECOMPUTE_FULL)
        return tri_iteration_flops(m, B, s, true);
    return tri_iteration_flops(m, B, s, false) + (double)m->n_layer * tri_block_recompute_flops(m, B, s, 1, r);
}
