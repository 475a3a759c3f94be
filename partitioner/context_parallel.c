/* partitioner/context_parallel.c - context parallelism's scratch and traffic (see context_parallel.h). */
#include "partitioner/context_parallel.h"

#include <string.h>

#include "engine/device/ops/attention_math.h"
#include "partitioner/hardware.h"
#include "partitioner/train_layout.h"

tri_cp_dims tri_cp_dims_of(const tri_transformer *m, const tri_train_layout *l)
{
    int64_t tp = l->tp > 1 ? l->tp : 1, HS = m->n_embd / m->n_head;
    int64_t kv = (m->n_kv_head > 0 ? m->n_kv_head : m->n_head) * HS;
    int64_t kv_l = kv / tp > HS ? kv / tp : HS;
    return (tri_cp_dims){.B = l->B, .T = l->T, .cp = tri_layout_cp(l), .C_l = m->n_embd / tp, .C_kv_l = kv_l,
                         .NH_l = m->n_head / tp, .e = tri_precision_bytes(l->precision), .type = l->cp_comm_type,
                         .deterministic = l->deterministic};
}

void tri_cp_scratch_bytes(const tri_cp_dims *d, int64_t *fwd, int64_t *bwd)
{
    *fwd = *bwd = 0;
    if (d->cp <= 1)
        return;
    int64_t e = d->e;
    if (d->type == TRI_CP_COMM_ALL_GATHER || d->deterministic) {
        /* the engine's layer (layers/cp_attention.h; deterministic mode runs its exact backward for both
         * types): the counts it allocates, from the one function both use */
        int64_t HS = d->NH_l > 0 ? d->C_l / d->NH_l : 1;
        tri_flash_dims local = {.B = d->B, .T = d->T / d->cp, .NH = d->NH_l, .NH_kv = d->C_kv_l / HS, .HS = HS};
        int64_t act_n, f32_n, fwd_n;
        tri_cp_scratch_counts(local, d->cp, d->deterministic, &act_n, &f32_n, &fwd_n);
        *fwd = e * fwd_n;
        *bwd = e * act_n + 4 * f32_n;
    } else { /* the ring: two k|v blocks in flight and a block's partial out and lse; backward two f32
                dk|dv accumulators (the one in hand, the one arriving) */
        int64_t HS = d->NH_l > 0 ? d->C_l / d->NH_l : 1;
        tri_flash_dims local = {.B = d->B, .T = d->T / d->cp, .NH = d->NH_l, .NH_kv = d->C_kv_l / HS, .HS = HS};
        int64_t act_n, f32_n, fwd_act_n, fwd_f32_n;
        tri_cp_ring_scratch_counts(local, &act_n, &f32_n, &fwd_act_n, &fwd_f32_n);
        *fwd = e * fwd_act_n + 4 * fwd_f32_n;
        *bwd = e * act_n + 4 * f32_n;
    }
}

void tri_cp_layer_traffic(const tri_cp_dims *d, uint64_t fwd[TRI_COMM_KINDS], uint64_t bwd[TRI_COMM_KINDS],
                          int *steps)
{
    memset(fwd, 0, TRI_COMM_KINDS * sizeof *fwd);
    memset(bwd, 0, TRI_COMM_KINDS * sizeof *bwd);
    *steps = 0;
    if (d->cp <= 1)
        return;
    uint64_t e = (uint64_t)d->e, kv = (uint64_t)(d->B * d->T * 2 * d->C_kv_l), kv_l = kv / (uint64_t)d->cp;
    if (d->deterministic) { /* both comm types: the all-gather forward, the owner-computes backward */
        uint64_t W = (uint64_t)(d->C_l + 2 * d->C_kv_l);
        fwd[TRI_COMM_ALL_GATHER] = e * kv;
        bwd[TRI_COMM_ALL_GATHER] = e * (uint64_t)(d->B * d->T) * (W + (uint64_t)d->C_l) +
                                   2 * 4 * (uint64_t)(d->B * d->NH_l * d->T);
        return;
    }
    if (d->type == TRI_CP_COMM_ALL_GATHER) {
        fwd[TRI_COMM_ALL_GATHER] = e * kv;
        bwd[TRI_COMM_ALL_GATHER] = e * kv;
        bwd[TRI_COMM_REDUCE_SCATTER] = 4 * kv;
        return;
    }
    *steps = d->cp - 1;
    fwd[TRI_COMM_P2P] = (uint64_t)(d->cp - 1) * e * kv_l;
    /* the k|v block cp - 1 times; its f32 dk|dv accumulator after each of the cp steps (the last
       returns it to its owner) */
    bwd[TRI_COMM_P2P] = (uint64_t)(d->cp - 1) * e * kv_l + (uint64_t)d->cp * 4 * kv_l;
}

double tri_cp_exposed_seconds(const tri_cp_dims *d, const uint64_t bytes[TRI_COMM_KINDS], double bw, double attn_s)
{
    if (d->cp <= 1)
        return 0.0;
    if (d->type == TRI_CP_COMM_ALL_GATHER || d->deterministic) {
        double t = 0.0;
        for (int k = 0; k < TRI_COMM_KINDS; k++)
            t += tri_collective_seconds(k, (double)bytes[k], d->cp, bw);
        return t;
    }
    int steps = d->cp - 1;
    double transfer = tri_collective_seconds(TRI_COMM_P2P, (double)bytes[TRI_COMM_P2P] / steps, 2, bw);
    double compute = attn_s / d->cp;
    return steps * (transfer > compute ? transfer - compute : 0.0);
}
