/* partitioner/flops.c - model FLOPs of a training iteration (see flops.h). */
#include "partitioner/flops.h"

double tri_iteration_flops(const tri_transformer *m, int64_t B, int64_t s, bool recompute)
{
    double l = (double)m->n_layer, h = (double)m->n_embd, V = (double)m->vocab_size;
    double bs = (double)B * (double)s;
    if (recompute)
        return 96.0 * bs * l * h * h * (1.0 + (double)s / (6.0 * h) + V / (16.0 * l * h));
    return 72.0 * bs * l * h * h * (1.0 + (double)s / (6.0 * h) + V / (12.0 * l * h));
}

double tri_block_recompute_flops(const tri_transformer *m, int64_t B, int64_t s, int tp, tri_recompute r)
{
    double h = (double)m->n_embd, Bd = (double)B, sd = (double)s;
    double attention = 4.0 * Bd * sd * sd * h;
    if (r == TRI_RECOMPUTE_FULL)
        return (24.0 * Bd * sd * h * h + attention) / tp;
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
