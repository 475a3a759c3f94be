/* partitioner/traffic.c - communication volume of one training step (see traffic.h). */
#include "partitioner/traffic.h"

#include <string.h>

/* Elements of the parameters every TP rank holds whole (their gradients are partial under SP). */
static uint64_t replicated_numel(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_place *s)
{
    tri_train_layout shape = tri_shape_layout(l);
    uint64_t n = (uint64_t)(s->layer_end - s->layer_start) * (uint64_t)tri_transformer_block(m, &shape).replicated;
    if (s->first)
        n += (uint64_t)tri_position_params(m);    /* wpe */
    if (s->last)
        n += (uint64_t)tri_final_norm_params(m);  /* ln_f */
    return n;
}

void tri_tp_microbatch_traffic(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_place *s,
                               int elem, uint64_t fwd[TRI_COMM_KINDS], uint64_t bwd[TRI_COMM_KINDS])
{
    memset(fwd, 0, TRI_COMM_KINDS * sizeof *fwd);
    memset(bwd, 0, TRI_COMM_KINDS * sizeof *bwd);
    if (l->tp == 1)
        return;
    const uint64_t N = (uint64_t)(l->B * l->T), C = (uint64_t)m->n_embd;
    const uint64_t act = N * C * (uint64_t)elem, stats = 3 * N * 4;  /* loss statistics stay fp32 */
    uint64_t layers = (uint64_t)(s->layer_end - s->layer_start);
    const int AR = TRI_COMM_ALL_REDUCE, RS = TRI_COMM_REDUCE_SCATTER, AG = TRI_COMM_ALL_GATHER;
    tri_train_layout shape = tri_shape_layout(l);
    tri_block_cost b = tri_transformer_block(m, &shape);   /* the blocks' collectives, as their family states */
    for (int k = 0; k < TRI_COMM_KINDS; k++) {
        fwd[k] += layers * (uint64_t)b.tp_fwd[k] * (uint64_t)elem;
        bwd[k] += layers * (uint64_t)b.tp_bwd[k] * (uint64_t)elem;
    }
    if (!l->sequence_parallel) {
        if (s->first)
            fwd[AR] += act;                         /* embedding output */
        if (s->last) {
            fwd[AR] += stats;                       /* max, sum-exp + target */
            bwd[AR] += act;                         /* LM-head input gradient */
        }
        return;
    }
    if (s->first) {
        fwd[RS] += act;                             /* embedding output */
        bwd[AG] += act;                             /* its gradient, gathered for the lookup rows */
    }
    if (s->last) {
        fwd[AG] += act;                             /* LM-head input */
        bwd[AG] += act;                             /* LM-head input again, for dW */
        bwd[RS] += act;                             /* LM-head input gradient */
        fwd[AR] += stats;                           /* max, sum-exp + target */
    }
}

void tri_ep_microbatch_traffic(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *s,
                               int elem, uint64_t fwd[TRI_COMM_KINDS], uint64_t bwd[TRI_COMM_KINDS])
{
    tri_block_cost b = tri_transformer_blocks(m, l, s->layer_start, s->layer_end);
    for (int k = 0; k < TRI_COMM_KINDS; k++) {
        fwd[k] = (uint64_t)(b.ep_fwd[k] + 0.5) * (uint64_t)elem;
        bwd[k] = (uint64_t)(b.ep_bwd[k] + 0.5) * (uint64_t)elem;
    }
}

uint64_t tri_tp_step_fixed_traffic(const tri_transformer *m, const tri_layout_shape *l,
                                   const tri_stage_place *s, int elem)
{
    if (l->tp == 1)
        return 0;
    if (l->sequence_parallel)
        return replicated_numel(m, l, s) * (uint64_t)elem;
    /* without SP only the gradients each TP rank computes a part of (tri_param_spec.tp_partial_grad) */
    tri_train_layout shape = tri_shape_layout(l);
    return (uint64_t)(s->layer_end - s->layer_start) * (uint64_t)tri_transformer_block(m, &shape).replicated_partial *
           (uint64_t)elem;
}

void tri_tp_step_traffic(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_place *s,
                         uint64_t bytes[TRI_COMM_KINDS])
{
    uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
    tri_tp_microbatch_traffic(m, l, s, 4, fwd, bwd);
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        bytes[k] = (uint64_t)l->n_micro * (fwd[k] + bwd[k]);
    bytes[TRI_COMM_ALL_REDUCE] += tri_tp_step_fixed_traffic(m, l, s, 4);
}

uint64_t tri_pp_message_bytes(const tri_transformer *m, const tri_layout_shape *l, int elem)
{
    uint64_t N = (uint64_t)(l->B * l->T), C = (uint64_t)m->n_embd;
    uint64_t N_l = l->sequence_parallel && l->tp > 1 ? N / (uint64_t)l->tp : N;
    return N_l * C * (uint64_t)elem;
}

void tri_dp_step_traffic(const tri_unit_uses *units, int n, int zero_stage, int n_micro, int dp,
                         uint64_t bytes[TRI_COMM_KINDS])
{
    tri_dp_step_traffic_sized(units, n, zero_stage, n_micro, dp, 4, 4, bytes);
}

void tri_dp_step_traffic_sized(const tri_unit_uses *units, int n, int zero_stage, int n_micro, int dp,
                               int grad_bytes, int param_bytes, uint64_t bytes[TRI_COMM_KINDS])
{
    memset(bytes, 0, TRI_COMM_KINDS * sizeof *bytes);
    if (dp == 1)
        return;
    const uint64_t f = (uint64_t)param_bytes, g = (uint64_t)grad_bytes, mb = (uint64_t)n_micro;
    uint64_t *ar = &bytes[TRI_COMM_ALL_REDUCE], *rs = &bytes[TRI_COMM_REDUCE_SCATTER];
    uint64_t *ag = &bytes[TRI_COMM_ALL_GATHER];
    *ar += 8; /* the step's loss: an int64 in fixed point (engine/train/pipeline.h) */
    for (int u = 0; u < n; u++) {
        uint64_t len = (uint64_t)units[u].len * f, glen = (uint64_t)units[u].len * g;
        uint64_t writes = (uint64_t)(units[u].fwd_writes + units[u].bwd_writes);
        uint64_t reads = (uint64_t)(units[u].fwd_reads + units[u].bwd_reads);
        switch (zero_stage) {
        case 0: *ar += glen; break;
        case 1: *rs += glen; *ag += len; break;
        case 2: *rs += mb * writes * glen; *ag += len; break;
        default: *rs += mb * writes * glen; *ag += mb * reads * len; break;
        }
    }
}
