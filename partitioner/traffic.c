/* partitioner/traffic.c - communication volume of one training step (see traffic.h). */
#include "partitioner/traffic.h"

#include <string.h>

int64_t tri_padded_vocab(int64_t vocab_size, int tp)
{
    int64_t m = 128 * (int64_t)tp;
    return (vocab_size + m - 1) / m * m;
}

/* Elements of the parameters every TP rank holds whole (their gradients are partial under SP). */
static uint64_t replicated_numel(const tri_transformer *m, const tri_stage_place *s)
{
    uint64_t C = (uint64_t)m->n_embd;
    uint64_t n = (uint64_t)(s->layer_end - s->layer_start) * 6 * C; /* ln_1, ln_2 (w, b), 2 biases */
    if (s->first)
        n += (uint64_t)m->n_positions * C;  /* wpe */
    if (s->last)
        n += 2 * C;                         /* ln_f */
    return n;
}

void tri_tp_step_traffic(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_place *s,
                         uint64_t bytes[TRI_COMM_KINDS])
{
    memset(bytes, 0, TRI_COMM_KINDS * sizeof *bytes);
    if (l->tp == 1)
        return;
    const uint64_t f = 4, N = (uint64_t)(l->B * l->T), C = (uint64_t)m->n_embd;
    const uint64_t act = N * C * f, mb = (uint64_t)l->n_micro;
    uint64_t layers = (uint64_t)(s->layer_end - s->layer_start);
    uint64_t *ar = &bytes[TRI_COMM_ALL_REDUCE], *rs = &bytes[TRI_COMM_REDUCE_SCATTER];
    uint64_t *ag = &bytes[TRI_COMM_ALL_GATHER];
    if (!l->sequence_parallel) {
        *ar += mb * layers * 4 * act;               /* 2 forward (row-parallel outputs), 2 backward */
        if (s->first)
            *ar += mb * act;                        /* embedding output */
        if (s->last)
            *ar += mb * (act + 3 * N * f);          /* LM-head input gradient; max, sum-exp + target */
        return;
    }
    *ag += mb * layers * 6 * act;  /* forward: 2 inputs; backward: 2 output grads, 2 re-gathered inputs */
    *rs += mb * layers * 4 * act;  /* forward: 2 outputs; backward: 2 input grads */
    if (s->first) {
        *rs += mb * act;                            /* embedding output */
        *ag += mb * act;                            /* its gradient, gathered for the lookup rows */
    }
    if (s->last) {
        *ag += mb * 2 * act;                        /* LM-head input, forward and for dW */
        *rs += mb * act;                            /* LM-head input gradient */
        *ar += mb * 3 * N * f;                      /* max, sum-exp + target */
    }
    *ar += replicated_numel(m, s) * f;              /* once per step: replicated gradients */
}

void tri_dp_step_traffic(const tri_unit_uses *units, int n, int zero_stage, int n_micro, int dp,
                         uint64_t bytes[TRI_COMM_KINDS])
{
    tri_dp_step_traffic_sized(units, n, zero_stage, n_micro, dp, 4, bytes);
}

void tri_dp_step_traffic_sized(const tri_unit_uses *units, int n, int zero_stage, int n_micro, int dp,
                               int grad_bytes, uint64_t bytes[TRI_COMM_KINDS])
{
    memset(bytes, 0, TRI_COMM_KINDS * sizeof *bytes);
    if (dp == 1)
        return;
    const uint64_t f = 4, g = (uint64_t)grad_bytes, mb = (uint64_t)n_micro;
    uint64_t *ar = &bytes[TRI_COMM_ALL_REDUCE], *rs = &bytes[TRI_COMM_REDUCE_SCATTER];
    uint64_t *ag = &bytes[TRI_COMM_ALL_GATHER];
    *ar += 8; /* the step's loss: an int64 in fixed point (engine/pipeline.h) */
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
