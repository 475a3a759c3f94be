/* partitioner/flops.c - model FLOPs of a training iteration (see flops.h). */
#include "partitioner/flops.h"

/* One block's forward over B x s tokens: its matmuls (2 FLOPs a weight a token) and the attention
 * core (QK^T and softmax x V: 4 B s^2 Q), GPT-2's 24 B s h^2 + 4 B s^2 h. */
static double block_forward_flops(const tri_transformer *m, double bs, double s)
{
    return 2.0 * bs * tri_block_matmul_params(m) + 4.0 * bs * s * (double)tri_transformer_q_width(m);
}

double tri_iteration_flops(const tri_transformer *m, int64_t B, int64_t s, bool recompute)
{
    double l = (double)m->n_layer, h = (double)m->n_embd, V = (double)m->vocab_size;
    double bs = (double)B * (double)s, passes = recompute ? 4.0 : 3.0;
    return passes * l * block_forward_flops(m, bs, (double)s) + 6.0 * bs * h * V;
}

double tri_block_recompute_flops(const tri_transformer *m, int64_t B, int64_t s, int tp, tri_recompute r)
{
    double Bd = (double)B, sd = (double)s;
    double attention = 4.0 * Bd * sd * sd * (double)tri_transformer_q_width(m);
    if (r == TRI_RECOMPUTE_FULL)
        return block_forward_flops(m, Bd * sd, sd) / tp;
    if (r == TRI_RECOMPUTE_SELECTIVE)
        return attention / tp;
    return 0.0;
}

double tri_iteration_hw_flops(const tri_transformer *m, int64_t B, int64_t s, tri_recompute r)
{
    if (r == TRI_RECOMPUTE_FULL)
        return tri_iteration_flops(m, B, s, true);
    return tri_iteration_flops(m, B, s, false) + (double)m->n_layer * tri_block_recompute_flops(m, B, s, 1, r);
}
