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
