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

tri_block_cost tri_transformer_block_at(const tri_transformer *m, const tri_train_layout *l, int layer)
{
    if (!m->block_cost_at)
        return tri_transformer_block(m, l);
    tri_block_cost c;
    memset(&c, 0, sizeof c);
    m->block_cost_at(m->cfg, l, layer, &c);
    return c;
}

static double max2(double a, double b)
{
    return a > b ? a : b;
}

tri_block_cost tri_transformer_blocks(const tri_transformer *m, const tri_train_layout *l, int start, int end)
{
    tri_block_cost s;
    memset(&s, 0, sizeof s);
    for (int i = start; i < end; i++) {
        tri_block_cost b = tri_transformer_block_at(m, l, i);
        if (i == start) {
            s.n_linear = b.n_linear;
            memcpy(s.linear, b.linear, sizeof s.linear);
        }
        s.params += b.params;
        s.replicated += b.replicated;
        s.tensors += b.tensors;
        s.expert_params += b.expert_params;
        s.buffers += b.buffers;
        s.total_params += b.total_params;
        s.active_params += b.active_params;
        s.fwd_flops += b.fwd_flops;
        s.core_flops += b.core_flops;
        s.kept += b.kept;
        s.recompute = max2(s.recompute, b.recompute);
        s.work = max2(s.work, b.work);
        s.comm = max2(s.comm, b.comm);
        for (int k = 0; k < TRI_COMM_KINDS; k++) {
            s.tp_fwd[k] += b.tp_fwd[k];
            s.tp_bwd[k] += b.tp_bwd[k];
            s.ep_fwd[k] += b.ep_fwd[k];
            s.ep_bwd[k] += b.ep_bwd[k];
        }
    }
    return s;
}

void tri_transformer_params(const tri_transformer *m, double *total, double *active)
{
    tri_train_layout one;
    memset(&one, 0, sizeof one);
    one.tp = one.pp = one.dp = one.ep = one.etp = 1;
    one.B = 1;
    one.T = 1;
    tri_block_cost b = tri_transformer_blocks(m, &one, 0, (int)m->n_layer);
    double table = (double)m->vocab_size * (double)m->n_embd;
    double ends = table * (m->untied_head ? 2.0 : 1.0) + tri_position_params(m) + tri_final_norm_params(m);
    *total = b.total_params + ends;
    *active = b.active_params + ends;
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
