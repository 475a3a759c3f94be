/* models/gpt_buffers.c - GPT-2's buffers: every activation of its blocks and final layernorm a
 * micro-batch keeps between its forward and its backward (one set per slot, less what recomputation
 * rebuilds) and the scratch all blocks and micro-batches share, with the decoder's
 * (models/model_chunk.h) around them. Taken twice from the chunk's arena like every buffer
 * (engine/device/arena.h): planned, then for real. */
#include "models/gpt.h"

#include <string.h>

#include "engine/core/status.h"

/* Activations (and their gradients) are bf16 under mixed precision; statistics (layernorm mean and
 * rstd) stay fp32. */
#define ACT(m) tri_decoder_act_dtype(&(m)->d)

/* The fused attention core (layers/attention.h). */
#define FLASH(m) ((m)->d.run->attention == TRI_ATTENTION_FLASH)

/* One block's activations: every buffer when `all`, else only what recomputation keeps per slot
 * (full: the block's output res3; selective: all but the attention softmax, which only the unfused
 * core stores: the fused one keeps its rows' logsumexp instead), the rest shared. */
static int take_block_acts(tri_gpt *m, tri_arena *ar, tri_gpt_block_acts *a, bool all)
{
    int64_t B = m->d.run->B, T = m->d.run->T, C = m->cfg.n_embd, N = m->d.N, N_l = m->d.N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    tri_recompute rec = all ? TRI_RECOMPUTE_NONE : m->d.run->recompute;
    int rc = TRI_OK;
    if (rec == TRI_RECOMPUTE_FULL) {
        *a = m->shared;
        return TRI_ARENA_TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    }
    rc = TRI_ARENA_TAKE(ar, K, &a->ln1, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln1_mean, TRI_F32, N_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln1_rstd, TRI_F32, N_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->attn.qkv, ACT(m), B, T, 3 * m->C_l);
    if (FLASH(m) && !rc)
        rc = TRI_ARENA_TAKE(ar, K, &a->attn.lse, TRI_F32, B, m->NH_l, T);
    else if (rec == TRI_RECOMPUTE_SELECTIVE)
        a->attn.att = m->shared.attn.att;
    else if (!rc)
        rc = TRI_ARENA_TAKE(ar, K, &a->attn.att, ACT(m), B, m->NH_l, T, T);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->attn.atty, ACT(m), B, T, m->C_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->res2, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln2, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln2_mean, TRI_F32, N_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln2_rstd, TRI_F32, N_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->mlp.fch, ACT(m), N, 4 * m->C_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->mlp.fch_gelu, ACT(m), N, 4 * m->C_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    return rc;
}

/* The buffers recomputation rebuilds, one set for all blocks and slots: a whole block's worth for
 * full recomputation (its res3 is never used: each slot keeps its own), the softmax for selective
 * (none with the fused core). */
static int take_shared(void *self, tri_arena *ar)
{
    tri_gpt *m = self;
    int64_t B = m->d.run->B, T = m->d.run->T;
    memset(&m->shared, 0, sizeof m->shared);
    if (m->d.run->recompute == TRI_RECOMPUTE_FULL && m->d.L_l > 0)
        return take_block_acts(m, ar, &m->shared, true);
    if (tri_layout_recomputes(m->d.run) == TRI_RECOMPUTE_SELECTIVE && m->d.L_l > 0)
        return TRI_ARENA_TAKE(ar, TRI_MEM_ACTIVATIONS, &m->shared.attn.att, ACT(m), B, m->NH_l, T, T);
    return TRI_OK;
}

static int take_block(void *self, tri_arena *ar, int s, int l)
{
    tri_gpt *m = self;
    return take_block_acts(m, ar, &m->slots[s].blocks[l], false);
}

/* The final layernorm's output and statistics. */
static int take_final_norm(void *self, tri_arena *ar, int s)
{
    tri_gpt *m = self;
    tri_gpt_slot *slot = &m->slots[s];
    int64_t C = m->cfg.n_embd, N_l = m->d.N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    int rc = TRI_ARENA_TAKE(ar, K, &slot->lnf, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &slot->lnf_mean, TRI_F32, N_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &slot->lnf_rstd, TRI_F32, N_l);
    return rc;
}

static tri_tensor block_output(void *self, int s, int l)
{
    return ((tri_gpt *)self)->slots[s].blocks[l].res3;
}

/* The attention's and the MLP's scratch (the decoder takes the rest before). */
static int take_scratch(void *self, tri_arena *ar)
{
    tri_gpt *m = self;
    int64_t B = m->d.run->B, T = m->d.run->T, N = m->d.N;
    const tri_mem_kind K = TRI_MEM_WORKSPACE;
    int rc = TRI_ARENA_TAKE(ar, K, &m->as.dqkv, ACT(m), B, T, 3 * m->C_l);
    m->as.flash = FLASH(m);
    if (!rc && FLASH(m))
        rc = TRI_ARENA_TAKE(ar, K, &m->as.delta, TRI_F32, B, m->NH_l, T);
    else if (!rc)
        rc = TRI_ARENA_TAKE(ar, K, &m->as.datt, ACT(m), B, m->NH_l, T, T);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &m->as.datty, ACT(m), B, T, m->C_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &m->ms.dh, ACT(m), N, 4 * m->C_l);
    /* context parallelism: the attention across the cp group (GPT-2: as many key/value heads as query heads) */
    if (!rc) rc = tri_decoder_take_cp_scratch(&m->d, ar, m->NH_l, m->NH_l, m->C_l / m->NH_l, &m->as.cps);
    m->as.cp = m->d.cp.cp > 1 ? &m->d.cp : NULL;
    m->as.full_a = m->ms.full_a = m->d.full_a;
    m->as.full_b = m->ms.full_b = m->d.full_b;
    return rc;
}

int tri_gpt_take_buffers(void *self, tri_arena *a)
{
    static const tri_decoder_buffers b = {.shared = take_shared, .block = take_block, .final_norm = take_final_norm,
                                          .block_output = block_output, .scratch = take_scratch};
    return tri_decoder_take_buffers(&((tri_gpt *)self)->d, self, &b, a);
}
