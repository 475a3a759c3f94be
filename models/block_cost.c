/* models/block_cost.c - what a decoder block costs (see block_cost.h). */
#include "models/block_cost.h"

#include <math.h>
#include <string.h>

#include "engine/device/arena.h"
#include "layers/moe_etp.h"

/* The widths of one TP rank (as doubles). */
typedef struct widths {
    double C, t, t_sp, N, N_l, T, B, NH_l;
    double Q, KV, F;        /* global: attention width, key/value width, MLP width */
    double Q_l, KV_l, F_l;  /* one TP rank's; KV_l at least one head (shared by tp / NH_kv ranks) */
    double e;               /* bytes of an activation element */
} widths;

static widths get_widths(const tri_decoder_block *b, const tri_train_layout *l)
{
    widths w;
    w.C = (double)b->C;
    w.t = l->tp;
    w.t_sp = l->sequence_parallel && l->tp > 1 ? l->tp : 1;
    w.T = (double)l->T;
    w.B = (double)l->B;
    w.N = w.B * w.T;
    w.N_l = w.N / w.t_sp;
    w.NH_l = (double)b->NH / w.t;
    w.Q = (double)(b->NH * b->HS);
    w.KV = (double)(b->NH_kv * b->HS);
    w.F = (double)b->F;
    w.Q_l = w.Q / w.t;
    w.KV_l = w.KV / w.t > (double)b->HS ? w.KV / w.t : (double)b->HS;
    w.F_l = w.F / w.t;
    w.e = l->precision == TRI_PRECISION_BF16 ? 2.0 : 4.0;
    return w;
}

/* Parameters: *local on one TP rank, of which *whole every rank holds. */
static void params(const tri_decoder_block *b, const widths *w, double *local, double *whole)
{
    double norms = 2.0 * (b->norm == TRI_NORM_LAYERNORM ? 2.0 : 1.0) * w->C, up = b->gated_mlp ? 2.0 : 1.0;
    double split = w->C * (w->Q_l + 2.0 * w->KV_l) + w->Q_l * w->C;
    if (!b->sparse)
        split += up * w->C * w->F_l + w->F_l * w->C;
    *whole = norms;
    if (b->attention_bias) {
        split += w->Q_l + 2.0 * w->KV_l;
        *whole += w->C;
    }
    if (b->mlp_bias && !b->sparse) {
        split += up * w->F_l;
        *whole += w->C;
    }
    if (b->qk_norm)
        *whole += 2.0 * (double)b->HS; /* q_norm, k_norm: their gradients summed over TP always */
    *local = split + *whole;
}

/* Activations one micro-batch keeps (block_cost.h); l's recomputation and attention backend. */
static double kept(const tri_decoder_block *b, const widths *w, const tri_train_layout *l)
{
    if (l->recompute == TRI_RECOMPUTE_FULL)
        return w->e * w->N_l * w->C;                      /* the block's output */
    double mlp = b->sparse ? 0.0 : b->gated_mlp ? 3.0 : 2.0, stats = b->norm == TRI_NORM_LAYERNORM ? 4.0 : 2.0;
    /* two norm outputs and two residuals; q|k|v, the attention output, the MLP's hidden tensors; the
       norms' fp32 statistics */
    double bytes = w->e * (4.0 * w->N_l * w->C + w->N * (w->Q_l + 2.0 * w->KV_l + w->Q_l + mlp * w->F_l)) +
                   4.0 * stats * w->N_l;
    if (b->qk_norm) /* q|k|v before the per-head norm, and its fp32 rstd per head */
        bytes += w->e * w->N * (w->Q_l + 2.0 * w->KV_l) + 4.0 * w->N * (w->NH_l + w->KV_l / (double)b->HS);
    if (l->attention == TRI_ATTENTION_FLASH)
        bytes += 4.0 * w->NH_l * w->T * w->B;             /* the rows' fp32 logsumexp */
    else if (l->recompute == TRI_RECOMPUTE_NONE)
        bytes += w->e * w->NH_l * w->T * w->T * w->B;     /* the softmax probabilities */
    if (b->sparse) {                                      /* layers/moe.c's activations, in its dtype */
        tri_moe_shape ms = tri_moe_block_shape(b, l);
        bytes += (double)tri_moe_acts_bytes(&ms);
        if (l->etp > 1)                                    /* the etp group's gathered rows (moe_etp.h) */
            bytes += (double)tri_moe_etp_acts_bytes(&ms, l->ep > 1 ? l->ep : 1, l->etp);
        else if (l->ep > 1)                                /* the rows received from the ep group */
            bytes += (double)tri_moe_ep_acts_bytes(&ms, l->ep);
        if (ms.I_shared == 0 && b->I_shared > 0)         /* the shared expert, tensor-parallel */
            bytes += w->e * w->N * 3.0 * (double)b->I_shared / w->t;
    }
    return bytes;
}

tri_moe_shape tri_moe_block_shape(const tri_decoder_block *b, const tri_train_layout *l)
{
    int64_t t_sp = l->sequence_parallel && l->tp > 1 ? l->tp : 1, etp = l->etp > 1 ? l->etp : 1;
    int64_t tp = l->tp > 1 ? l->tp : 1;
    tri_moe_shape s = {.N = l->B * l->T / t_sp, .C = b->C, .E = b->E, .K = b->K, .I = b->I / etp,
                       .I_shared = t_sp == 1 ? b->I_shared / tp : 0,
                       .dtype = l->precision == TRI_PRECISION_BF16 ? TRI_BF16 : TRI_F32, .sp = t_sp};
    if (l->moe.capacity_factor > 0) /* models/llama_moe.c tri_llama_moe_config's capacity */
        s.capacity = tri_moe_capacity(s.N, s.K, s.E, l->moe.capacity_factor);
    return s;
}

/* The MoE part of a sparse block (block_cost.h): the router and experts' parameters, whole and on a
 * rank; the active FLOPs' matmul weights; the EP collectives. */
static void moe_cost(const tri_decoder_block *b, const widths *w, const tri_train_layout *l, tri_block_cost *out)
{
    double C = w->C, E = (double)b->E, K = (double)b->K, I = (double)b->I, Is = (double)b->I_shared;
    double ep = l->ep > 1 ? l->ep : 1, etp = l->etp > 1 ? l->etp : 1;
    out->expert_params = E / ep * 3.0 * C * I / etp;
    out->params += E * C + 3.0 * C * Is / w->t + out->expert_params;
    out->replicated += E * C;                              /* the router, whole on every TP rank */
    out->buffers = l->moe.expert_bias ? 4.0 * E : 0.0;     /* the expert bias, fp32, replicated */
    double rows = w->N_l * K;                              /* the rank's N_r K dispatched rows */
    out->ep_fwd[TRI_COMM_ALL_TO_ALL] = 2.0 * rows * C * (ep - 1.0) / ep;  /* dispatch and combine */
    out->ep_bwd[TRI_COMM_ALL_TO_ALL] = out->ep_fwd[TRI_COMM_ALL_TO_ALL];
    if (etp > 1) {
        out->ep_fwd[TRI_COMM_ALL_GATHER] = out->ep_bwd[TRI_COMM_ALL_GATHER] = etp * rows * C;
        out->ep_fwd[TRI_COMM_REDUCE_SCATTER] = out->ep_bwd[TRI_COMM_REDUCE_SCATTER] = etp * rows * C;
    }
}

/* TP collectives of one micro-batch (block_cost.h), in elements. */
static void tp_traffic(const widths *w, int tp, bool sp, double share, double *fwd, double *bwd)
{
    double act = share * w->N * w->C;  /* share 1/2: the attention's collectives only */
    if (tp == 1)
        return;
    if (!sp) {
        fwd[TRI_COMM_ALL_REDUCE] += 2.0 * act;  /* the two row-parallel outputs */
        bwd[TRI_COMM_ALL_REDUCE] += 2.0 * act;  /* the two column-parallel input gradients */
        return;
    }
    fwd[TRI_COMM_ALL_GATHER] += 2.0 * act;      /* the two column-parallel inputs */
    fwd[TRI_COMM_REDUCE_SCATTER] += 2.0 * act;  /* the two row-parallel outputs */
    bwd[TRI_COMM_ALL_GATHER] += 4.0 * act;      /* two output gradients, two inputs re-gathered for dW */
    bwd[TRI_COMM_REDUCE_SCATTER] += 2.0 * act;  /* two input gradients */
}

void tri_decoder_block_cost(const tri_decoder_block *b, const tri_train_layout *l, tri_block_cost *out)
{
    memset(out, 0, sizeof *out);
    widths w = get_widths(b, l);
    params(b, &w, &out->params, &out->replicated);
    out->replicated_partial = b->qk_norm ? 2.0 * (double)b->HS : 0.0;
    out->tensors = b->tensors;
    double attn = w.C * (w.Q + 2.0 * w.KV) + w.Q * w.C, norms = 2.0 * (b->norm == TRI_NORM_LAYERNORM ? 2.0 : 1.0) * w.C;
    if (b->attention_bias)
        norms += w.Q + 2.0 * w.KV + w.C;                   /* with the attention's biases */
    double matmul = attn + (b->gated_mlp ? 3.0 : 2.0) * w.C * w.F;
    double mlp_biases = b->mlp_bias ? (b->gated_mlp ? 2.0 : 1.0) * w.F + w.C : 0.0;
    out->total_params = attn + norms + (b->gated_mlp ? 3.0 : 2.0) * w.C * w.F + mlp_biases;
    out->active_params = out->total_params;
    if (b->sparse) {
        double C = w.C, E = (double)b->E, K = (double)b->K, I = (double)b->I, Is = (double)b->I_shared;
        moe_cost(b, &w, l, out);
        matmul = attn + E * C + 3.0 * C * (K * I + Is);
        out->total_params = attn + norms + E * C + 3.0 * C * (E * I + Is);
        out->active_params = attn + norms + E * C + 3.0 * C * (K * I + Is);
    }
    out->core_flops = 4.0 * w.N * w.T * w.Q;
    out->fwd_flops = 2.0 * w.N * matmul + out->core_flops;
    out->kept = kept(b, &w, l);
    if (l->recompute == TRI_RECOMPUTE_FULL) {
        tri_train_layout all = *l;
        all.recompute = TRI_RECOMPUTE_NONE;
        out->recompute = kept(b, &w, &all);
    } else if (tri_layout_recomputes(l) == TRI_RECOMPUTE_SELECTIVE) {
        out->recompute = w.e * w.NH_l * w.T * w.T * w.B;
    }
    /* tmp and the norm gradient, dqkv, datty and the MLP's hidden gradients; the attention's
       backward statistics or score gradient; rotary tables */
    double mlp_work = b->sparse ? 0.0 : b->gated_mlp ? 3.0 : 1.0;
    out->work = w.e * (2.0 * w.N_l * w.C + w.N * (w.Q_l + 2.0 * w.KV_l + w.Q_l + mlp_work * w.F_l));
    if (b->sparse) {                                       /* layers/moe.c's scratch, in its dtype */
        tri_moe_shape ms = tri_moe_block_shape(b, l);
        out->work += (double)tri_moe_scratch_bytes(&ms);
        if (l->etp > 1) {                                  /* the gathered rows' backward (moe_etp.h) */
            int ep = l->ep > 1 ? l->ep : 1;
            out->work += (double)tri_moe_etp_scratch_bytes(&ms, ep, l->etp);
        } else if (l->ep > 1) {                                   /* the received rows' backward (moe_ep.h) */
            out->work += (double)tri_moe_ep_scratch_bytes(&ms, l->ep);
        }
        if (l->moe.expert_bias)                            /* the bias update's counts, E int32, one take */
            out->work += ceil(4.0 * (double)b->E / TRI_ARENA_ALIGN) * TRI_ARENA_ALIGN;
        if (ms.I_shared == 0 && b->I_shared > 0)
            out->work += w.e * w.N * 3.0 * (double)b->I_shared / w.t;
    }
    out->work += l->attention == TRI_ATTENTION_FLASH ? 4.0 * w.B * w.NH_l * w.T : w.e * w.B * w.NH_l * w.T * w.T;
    if (b->rotary)
        out->work += 4.0 * w.T * (double)b->HS;
    /* q|k|v (C -> Q_l + 2 KV_l), the output (Q_l -> C), the MLP's first ([gate | up]: C -> 2 F_l; else
       C -> F_l) and second (F_l -> C) */
    int64_t in[4] = {b->C, (int64_t)w.Q_l, b->C, (int64_t)w.F_l};
    int64_t outw[4] = {(int64_t)(w.Q_l + 2.0 * w.KV_l), b->C, (int64_t)((b->gated_mlp ? 2.0 : 1.0) * w.F_l), b->C};
    /* sparse: the router (C -> E), the rank's experts stacked ([gate | up] of E_l experts: C -> E_l 2 I
       / etp; down: E_l I / etp -> C), the shared expert's two (C -> 2 I_s / tp, I_s / tp -> C) */
    if (b->sparse) {
        int64_t ep = l->ep > 1 ? l->ep : 1, etp = l->etp > 1 ? l->etp : 1, El = b->E / ep;
        in[2] = b->C;
        outw[2] = b->E;
        in[3] = b->C;
        outw[3] = El * 2 * b->I / etp;
    }
    out->n_linear = 4;
    for (int i = 0; i < 4; i++) {
        out->linear[i][0] = in[i];
        out->linear[i][1] = outw[i];
    }
    if (b->sparse) {
        int64_t ep = l->ep > 1 ? l->ep : 1, etp = l->etp > 1 ? l->etp : 1;
        int64_t extra[3][2] = {{b->E / ep * b->I / etp, b->C}, {b->C, 2 * b->I_shared / l->tp},
                               {b->I_shared / l->tp, b->C}};
        for (int i = 0; i < (b->I_shared > 0 ? 3 : 1); i++) {
            out->linear[out->n_linear][0] = extra[i][0];
            out->linear[out->n_linear++][1] = extra[i][1];
        }
    }
    /* the gathered N x C inputs: the attention's, and the MLP's unless the routed experts alone
       replace it (traffic); the decoder takes both N x C gather buffers under SP whatever the MLP
       (models/model_chunk.c take_scratch: full_a, full_b) */
    double split_mlps = !b->sparse || b->I_shared > 0 ? 2.0 : 1.0;
    out->comm = w.t_sp > 1 ? 2.0 * w.e * w.N * w.C : 0.0;
    tp_traffic(&w, l->tp, w.t_sp > 1, split_mlps / 2.0, out->tp_fwd, out->tp_bwd);
}
