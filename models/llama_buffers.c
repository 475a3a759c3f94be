/* models/llama_buffers.c - the Llama chunk's buffers: what a micro-batch keeps between its forward
 * and its backward (one set per slot; under full recomputation only each block's output, the rest
 * shared), the scratch all blocks and micro-batches share, the rotary tables and the tied head's
 * private accumulator. Taken twice from the chunk's arena (engine/device/arena.h): planned, then for
 * real, so the partitioner's plan is what is allocated, to the byte. The attention is the fused one:
 * its rows' logsumexp (B, NH_l, T) is kept, no (T, T) matrix. */
#include <string.h>

#include "engine/core/status.h"
#include "models/llama.h"

/* Activations and their gradients are bf16 under mixed precision; statistics and the rotary
 * tables fp32. */
#define ACT(m) ((m)->run->precision == TRI_PRECISION_BF16 ? TRI_BF16 : TRI_F32)

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TAKE(a, kind, t, dtype, ...) tri_arena_take((a), (kind), (t), (dtype), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* One block's activations: all of them, or under full recomputation (unless `all`) only res3. */
static int take_block_acts(tri_llama *m, tri_arena *ar, tri_llama_block_acts *a, bool all)
{
    int64_t B = m->run->B, T = m->run->T, C = m->cfg.hidden_size, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    if (!all && m->run->recompute == TRI_RECOMPUTE_FULL) {
        *a = m->shared;
        return TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    }
    int rc = TAKE(ar, K, &a->ln1, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &a->ln1_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(ar, K, &a->attn.qkv, ACT(m), B, T, m->W_l);
    if (!rc) rc = TAKE(ar, K, &a->attn.lse, TRI_F32, B, m->NH_l, T);
    if (!rc) rc = TAKE(ar, K, &a->attn.atty, ACT(m), B, T, m->Q_l);
    if (!rc) rc = TAKE(ar, K, &a->res2, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &a->ln2, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &a->ln2_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(ar, K, &a->mlp.gate_up, ACT(m), N, 2 * m->F_l);
    if (!rc) rc = TAKE(ar, K, &a->mlp.h, ACT(m), N, m->F_l);
    if (!rc) rc = TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    return rc;
}

static int take_slot(tri_llama *m, tri_arena *ar, tri_llama_slot *s)
{
    int64_t C = m->cfg.hidden_size, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    int rc = TAKE(ar, K, &s->tokens, TRI_I32, N);
    if (!rc) rc = TAKE(ar, K, &s->targets, TRI_I32, N);
    if (!rc) rc = TAKE(ar, K, &s->x_in, ACT(m), N_l, C);
    for (int l = 0; l < m->L_l && !rc; l++)
        rc = take_block_acts(m, ar, &s->blocks[l], false);
    if (!rc && m->opt.last) {
        rc = TAKE(ar, K, &s->lnf, ACT(m), N_l, C);
        if (!rc) rc = TAKE(ar, K, &s->lnf_rstd, TRI_F32, N_l);
        if (!rc) rc = TAKE(ar, K, &s->dlnf, ACT(m), N_l, C);
        if (!rc) rc = TAKE(ar, K, &s->losses, TRI_F32, N);
    }
    if (!rc && !m->opt.last) rc = TAKE(ar, TRI_MEM_COMM, &s->grad_out, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &s->dres, ACT(m), N_l, C);
    return rc;
}

static int take_scratch(tri_llama *m, tri_arena *ar)
{
    int64_t B = m->run->B, T = m->run->T, C = m->cfg.hidden_size, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_WORKSPACE;
    int rc = TAKE(ar, K, &m->tmp, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &m->dln, ACT(m), N_l, C);
    if (!rc && m->L_l > 0) {
        rc = TAKE(ar, K, &m->as.dqkv, ACT(m), B, T, m->W_l);
        if (!rc) rc = TAKE(ar, K, &m->as.delta, TRI_F32, B, m->NH_l, T);
        if (!rc) rc = TAKE(ar, K, &m->as.datty, ACT(m), B, T, m->Q_l);
        if (!rc) rc = TAKE(ar, K, &m->ms.dh, ACT(m), N, m->F_l);
        if (!rc) rc = TAKE(ar, K, &m->ms.dgate_up, ACT(m), N, 2 * m->F_l);
        if (!rc) rc = TAKE(ar, K, &m->cos, TRI_F32, T, m->HS / 2);
        if (!rc) rc = TAKE(ar, K, &m->sin, TRI_F32, T, m->HS / 2);
    }
    m->as.cos = m->cos;
    m->as.sin = m->sin;
    m->as.NH_l = m->NH_l;
    m->as.NH_kv_l = m->NH_kv_l;
    tri_tensor full_a = tri_tensor_none(), full_b = tri_tensor_none();
    if (!rc && m->tp.sp && tri_tp_size(&m->tp) > 1) {
        rc = TAKE(ar, TRI_MEM_COMM, &full_a, ACT(m), N, C);
        if (!rc) rc = TAKE(ar, TRI_MEM_COMM, &full_b, ACT(m), N, C);
    }
    m->as.full_a = m->ms.full_a = m->ls.full_a = full_a;
    m->as.full_b = m->ms.full_b = m->ls.full_b = full_b;
    m->lm_dembed = tri_tensor_none();
    if (!rc && m->private_embed) /* the tied head's share of the embedding's gradient (llama.h) */
        rc = TAKE(ar, TRI_MEM_GRADS, &m->lm_dembed, TRI_F32, m->V_l, C);
    if (!rc && m->opt.last) {
        rc = TAKE(ar, K, &m->ls.logits, ACT(m), N, m->V_l);
        if (!rc) rc = TAKE(ar, K, &m->ls.maxes, TRI_F32, N);
        if (!rc) rc = TAKE(ar, K, &m->ls.stats, TRI_F32, N, 2);
    }
    return rc;
}

int tri_llama_take_buffers(void *self, tri_arena *a)
{
    tri_llama *m = self;
    memset(&m->shared, 0, sizeof m->shared);
    int rc = TRI_OK;
    if (m->run->recompute == TRI_RECOMPUTE_FULL && m->L_l > 0)
        rc = take_block_acts(m, a, &m->shared, true);
    for (int s = 0; s < m->opt.n_slots && !rc; s++)
        rc = take_slot(m, a, &m->slots[s]);
    if (!rc) rc = take_scratch(m, a);
    return rc;
}
