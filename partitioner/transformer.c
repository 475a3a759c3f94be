/* partitioner/transformer.c - a model's outline and its block's costs (see transformer.h). */
#include "partitioner/transformer.h"

#include <string.h>

int64_t tri_padded_vocab(int64_t vocab_size, int tp)
{
    int64_t m = 128 * (int64_t)tp;
    return (vocab_size + m - 1) / m * m;
}

tri_block_cost tri_transformer_block(const tri_transformer *m, const tri_train_layout *l)
{
    tri_block_cost c;
    memset(&c, 0, sizeof c);
    m->block_cost(m->cfg, l, &c);
    return c;
}

tri_train_layout tri_shape_layout(const tri_layout_shape *s)
{
    tri_train_layout l;
    memset(&l, 0, sizeof l);
    l.tp = s->tp;
    l.pp = s->pp;
    l.dp = s->dp;
    l.sequence_parallel = s->sequence_parallel;
    l.B = s->B;
    l.T = s->T;
    l.n_micro = s->n_micro;
    l.precision = TRI_PRECISION_FP32;
    l.attention = TRI_ATTENTION_UNFUSED;
    l.recompute = TRI_RECOMPUTE_NONE;
    return l;
}

double tri_position_params(const tri_transformer *m)
{
    return m->position_table ? (double)m->n_positions * (double)m->n_embd : 0.0;
}

int tri_final_norm_stats(const tri_transformer *m)
{
    return m->final_norm == TRI_NORM_LAYERNORM ? 2 : m->final_norm == TRI_NORM_RMSNORM ? 1 : 0;
}

double tri_final_norm_params(const tri_transformer *m)
{
    return tri_final_norm_stats(m) * (double)m->n_embd;
}

int64_t tri_transformer_tensors(const tri_transformer *m)
{
    tri_train_layout one = tri_shape_layout(&(tri_layout_shape){.tp = 1, .pp = 1, .dp = 1, .B = 1, .T = 1, .n_micro = 1});
    /* wte, wpe, the final norm's weight (and bias), the head */
    int64_t ends = 1 + m->position_table + tri_final_norm_stats(m) + m->untied_head;
    return m->n_layer * tri_transformer_block(m, &one).tensors + ends;
}
