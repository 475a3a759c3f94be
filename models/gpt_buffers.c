/* models/gpt_buffers.c - GPT-2's buffers: every activation a micro-batch keeps between its
 * forward and its backward (one set per slot, less what recomputation rebuilds), the scratch all
 * blocks and micro-batches share, and the tied embedding's private accumulator. Taken twice from the
 * chunk's arena like every buffer (engine/device/arena.h): planned, then for real. */
#include "models/gpt.h"

#include <string.h>

#include "engine/core/status.h"

/* Activations (and their gradients) are bf16 under mixed precision; statistics (layernorm mean and
 * rstd, losses, cross-entropy maxes and sums) and gradients of parameters stay fp32. */
#define ACT(m) ((m)->run->precision == TRI_PRECISION_BF16 ? TRI_BF16 : TRI_F32)

/* The fused attention core (layers/attention.h). */
#define FLASH(m) ((m)->run->attention == TRI_ATTENTION_FLASH)

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TAKE(a, kind, t, dtype, ...) tri_arena_take((a), (kind), (t), (dtype), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* One block's activations: every buffer when `all`, else only what recomputation keeps per slot
 * (full: the block's output res3; selective: all but the attention softmax, which only the unfused
 * core stores: the fused one keeps its rows' logsumexp instead), the rest shared. */
static int take_block_acts(tri_gpt *m, tri_arena *ar, tri_gpt_block_acts *a, bool all)
{
    int64_t B = m->run->B, T = m->run->T, C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    tri_recompute rec = all ? TRI_RECOMPUTE_NONE : m->run->recompute;
    int rc = TRI_OK;
    if (rec == TRI_RECOMPUTE_FULL) {
        *a = m->shared;
        return TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    }
    rc = TAKE(ar, K, &a->ln1, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &a->ln1_mean, TRI_F32, N_l);
    if (!rc) rc = TAKE(ar, K, &a->ln1_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(ar, K, &a->attn.qkv, ACT(m), B, T, 3 * m->C_l);
    if (FLASH(m) && !rc)
        rc = TAKE(ar, K, &a->attn.lse, TRI_F32, B, m->NH_l, T);
    else if (rec == TRI_RECOMPUTE_SELECTIVE)
        a->attn.att = m->shared.attn.att;
    else if (!rc)
        rc = TAKE(ar, K, &a->attn.att, ACT(m), B, m->NH_l, T, T);
    if (!rc) rc = TAKE(ar, K, &a->attn.atty, ACT(m), B, T, m->C_l);
    if (!rc) rc = TAKE(ar, K, &a->res2, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &a->ln2, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &a->ln2_mean, TRI_F32, N_l);
    if (!rc) rc = TAKE(ar, K, &a->ln2_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(ar, K, &a->mlp.fch, ACT(m), N, 4 * m->C_l);
    if (!rc) rc = TAKE(ar, K, &a->mlp.fch_gelu, ACT(m), N, 4 * m->C_l);
    if (!rc) rc = TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    return rc;
}

/* The buffers recomputation rebuilds, one set for all blocks and slots: a whole block's worth for
 * full recomputation (its res3 is never used: each slot keeps its own), the softmax for selective
 * (none with the fused core). */
static int take_shared_acts(tri_gpt *m, tri_arena *ar)
{
    int64_t B = m->run->B, T = m->run->T;
    memset(&m->shared, 0, sizeof m->shared);
    if (m->run->recompute == TRI_RECOMPUTE_FULL && m->L_l > 0)
        return take_block_acts(m, ar, &m->shared, true);
    if (tri_layout_recomputes(m->run) == TRI_RECOMPUTE_SELECTIVE && m->L_l > 0)
        return TAKE(ar, TRI_MEM_ACTIVATIONS, &m->shared.attn.att, ACT(m), B, m->NH_l, T, T);
    return TRI_OK;
}

static int take_slot(tri_gpt *m, tri_arena *ar, tri_gpt_slot *s)
{
    int64_t C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    int rc = TAKE(ar, K, &s->tokens, TRI_I32, N);
    if (!rc) rc = TAKE(ar, K, &s->targets, TRI_I32, N);
    if (!rc) rc = TAKE(ar, K, &s->x_in, ACT(m), N_l, C);
    for (int l = 0; l < m->L_l && !rc; l++)
        rc = take_block_acts(m, ar, &s->blocks[l], false);
    if (!rc && m->opt.last) {
        rc = TAKE(ar, K, &s->lnf, ACT(m), N_l, C);
        if (!rc) rc = TAKE(ar, K, &s->lnf_mean, TRI_F32, N_l);
        if (!rc) rc = TAKE(ar, K, &s->lnf_rstd, TRI_F32, N_l);
        if (!rc) rc = TAKE(ar, K, &s->dlnf, ACT(m), N_l, C);
        if (!rc) rc = TAKE(ar, K, &s->losses, TRI_F32, N);
    }
    if (!rc && !m->opt.last) rc = TAKE(ar, TRI_MEM_COMM, &s->grad_out, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &s->dres, ACT(m), N_l, C);
    return rc;
}

static int take_scratch(tri_gpt *m, tri_arena *ar)
{
    int64_t B = m->run->B, T = m->run->T, C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_WORKSPACE;
    int rc = TAKE(ar, K, &m->tmp, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &m->dln, ACT(m), N_l, C);
    if (!rc) rc = TAKE(ar, K, &m->as.dqkv, ACT(m), B, T, 3 * m->C_l);
    m->as.flash = FLASH(m);
    if (!rc && FLASH(m))
        rc = TAKE(ar, K, &m->as.delta, TRI_F32, B, m->NH_l, T);
    else if (!rc)
        rc = TAKE(ar, K, &m->as.datt, ACT(m), B, m->NH_l, T, T);
    if (!rc) rc = TAKE(ar, K, &m->as.datty, ACT(m), B, T, m->C_l);
    if (!rc) rc = TAKE(ar, K, &m->ms.dh, ACT(m), N, 4 * m->C_l);
    tri_tensor full_a = tri_tensor_none(), full_b = tri_tensor_none();
    if (!rc && m->tp.sp && tri_tp_size(&m->tp) > 1) {
        rc = TAKE(ar, TRI_MEM_COMM, &full_a, ACT(m), N, C);
        if (!rc) rc = TAKE(ar, TRI_MEM_COMM, &full_b, ACT(m), N, C);
    }
    m->as.full_a = m->ms.full_a = m->ls.full_a = full_a;
    m->as.full_b = m->ms.full_b = m->ls.full_b = full_b;
    m->lm_dwte = tri_tensor_none();
    if (!rc && m->private_wte) /* the LM head's share of wte's gradient (gpt.h) */
        rc = TAKE(ar, TRI_MEM_GRADS, &m->lm_dwte, TRI_F32, m->V_l, C);
    if (!rc && m->opt.last) {
        rc = TAKE(ar, K, &m->ls.logits, ACT(m), N, m->V_l);
        if (!rc) rc = TAKE(ar, K, &m->ls.maxes, TRI_F32, N);
        if (!rc) rc = TAKE(ar, K, &m->ls.stats, TRI_F32, N, 2);
    }
    return rc;
}

int tri_gpt_take_buffers(void *self, tri_arena *a)
{
    tri_gpt *m = self;
    int rc = take_shared_acts(m, a);
    for (int s = 0; s < m->opt.n_slots && !rc; s++)
        rc = take_slot(m, a, &m->slots[s]);
    if (!rc) rc = take_scratch(m, a);
    return rc;
}
