/* models/llama_buffers.c - the Llama chunk's buffers: what a micro-batch keeps of its blocks and final
 * norm between its forward and its backward (one set per slot; under full recomputation only each
 * block's output, the rest shared), the scratch all blocks and micro-batches share and the rotary
 * tables, with the decoder's (models/model_chunk.h) around them. Taken twice from the chunk's arena
 * (engine/device/arena.h): planned, then for real, so the partitioner's plan is what is allocated, to
 * the byte (the sparse layers' MoE buffers too: layers/moe.h sizes them, llama_moe.c takes them as
 * one block each). The attention is the fused one: its rows' logsumexp (B, NH_l, T) is kept, no (T, T)
 * matrix. */
#include <string.h>

#include "engine/core/status.h"
#include "models/llama.h"

/* Activations and their gradients are bf16 under mixed precision; statistics and the rotary
 * tables fp32. */
#define ACT(m) tri_decoder_act_dtype(&(m)->d)

/* Whether any of the stage's layers is sparse (want true) or dense (want false). */
static bool any_layer(const tri_llama *m, bool want)
{
    for (int l = 0; l < m->d.L_l; l++)
        if (tri_llama_layer_is_sparse(&m->cfg, m->d.opt.layer_start + l) == want)
            return true;
    return false;
}

/* One block's activations: all of them, or under full recomputation (unless `all`) only res3. A
 * sparse layer keeps the MoE block's (layers/moe.h) in place of the MLP's; the shared set (l < 0)
 * holds what any of the stage's layers needs. */
static int take_block_acts(tri_llama *m, tri_arena *ar, tri_llama_block_acts *a, bool all, int l)
{
    int64_t B = m->d.run->B, T = m->d.run->T, C = m->cfg.hidden_size, N = m->d.N, N_l = m->d.N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    if (!all && m->d.run->recompute == TRI_RECOMPUTE_FULL) {
        *a = m->shared;
        return TRI_ARENA_TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    }
    int rc = TRI_ARENA_TAKE(ar, K, &a->ln1, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln1_rstd, TRI_F32, N_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->attn.qkv, ACT(m), B, T, m->W_l);
    if (!rc && m->cfg.qk_norm) /* Qwen3: q|k|v before the per-head norm, its rstd per head */
        rc = TRI_ARENA_TAKE(ar, K, &a->attn.qkv_in, ACT(m), B, T, m->W_l);
    if (!rc && m->cfg.qk_norm)
        rc = TRI_ARENA_TAKE(ar, K, &a->attn.qk_rstd, TRI_F32, N, m->NH_l + m->NH_kv_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->attn.lse, TRI_F32, B, m->NH_l, T);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->attn.atty, ACT(m), B, T, m->Q_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->res2, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln2, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->ln2_rstd, TRI_F32, N_l);
    bool sparse = l >= 0 ? tri_llama_layer_is_sparse(&m->cfg, m->d.opt.layer_start + l) : any_layer(m, true);
    bool dense = l >= 0 ? !sparse : any_layer(m, false);
    if (!rc && dense) rc = TRI_ARENA_TAKE(ar, K, &a->mlp.gate_up, ACT(m), N, 2 * m->F_l);
    if (!rc && dense) rc = TRI_ARENA_TAKE(ar, K, &a->mlp.h, ACT(m), N, m->F_l);
    if (!rc && sparse) rc = tri_llama_moe_take_acts(m, ar, &a->moe, &a->moe_ep, &a->moe_etp);
    if (!rc && sparse) rc = tri_llama_moe_take_shared_acts(m, ar, &a->shared_mlp); /* tp > 1 only */
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &a->res3, ACT(m), N_l, C);
    return rc;
}

/* The buffers full recomputation rebuilds: one block's worth for all blocks and slots. */
static int take_shared(void *self, tri_arena *ar)
{
    tri_llama *m = self;
    memset(&m->shared, 0, sizeof m->shared);
    if (m->d.run->recompute == TRI_RECOMPUTE_FULL && m->d.L_l > 0)
        return take_block_acts(m, ar, &m->shared, true, -1);
    return TRI_OK;
}

static int take_block(void *self, tri_arena *ar, int s, int l)
{
    tri_llama *m = self;
    return take_block_acts(m, ar, &m->slots[s].blocks[l], false, l);
}

/* The final RMSNorm's output and statistics. */
static int take_final_norm(void *self, tri_arena *ar, int s)
{
    tri_llama *m = self;
    tri_llama_slot *slot = &m->slots[s];
    int64_t C = m->cfg.hidden_size, N_l = m->d.N_l;
    int rc = TRI_ARENA_TAKE(ar, TRI_MEM_ACTIVATIONS, &slot->lnf, ACT(m), N_l, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, TRI_MEM_ACTIVATIONS, &slot->lnf_rstd, TRI_F32, N_l);
    return rc;
}

static tri_tensor block_output(void *self, int s, int l)
{
    return ((tri_llama *)self)->slots[s].blocks[l].res3;
}

/* The attention's and the MLP's scratch and the rotary tables (the decoder takes the rest before). */
static int take_scratch(void *self, tri_arena *ar)
{
    tri_llama *m = self;
    int64_t B = m->d.run->B, T = m->d.run->T, N = m->d.N;
    const tri_mem_kind K = TRI_MEM_WORKSPACE;
    int rc = TRI_OK;
    if (m->d.L_l > 0) {
        rc = TRI_ARENA_TAKE(ar, K, &m->as.dqkv, ACT(m), B, T, m->W_l);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &m->as.delta, TRI_F32, B, m->NH_l, T);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &m->as.datty, ACT(m), B, T, m->Q_l);
        bool dense = any_layer(m, false);
        if (!rc && dense) rc = TRI_ARENA_TAKE(ar, K, &m->ms.dh, ACT(m), N, m->F_l);
        if (!rc && dense) rc = TRI_ARENA_TAKE(ar, K, &m->ms.dgate_up, ACT(m), N, 2 * m->F_l);
        if (!rc && any_layer(m, true)) rc = tri_llama_moe_take_scratch(m, ar);
        if (!rc && any_layer(m, true)) rc = tri_llama_moe_take_bias(m, ar);
        /* the whole sequence's positions (context parallelism: this rank's chunks are any of them) */
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &m->cos, TRI_F32, m->d.seq.T, m->HS / 2);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &m->sin, TRI_F32, m->d.seq.T, m->HS / 2);
        /* context parallelism: the attention across the cp group */
        if (!rc) rc = tri_decoder_take_cp_scratch(&m->d, ar, m->NH_l, m->NH_kv_l, m->HS, &m->as.cps);
    }
    m->as.cp = m->d.cp.cp > 1 ? &m->d.cp : NULL;
    m->as.seq = m->d.seq;
    m->as.cos = m->cos;
    m->as.sin = m->sin;
    m->as.NH_l = m->NH_l;
    m->as.NH_kv_l = m->NH_kv_l;
    m->as.qk_norm_eps = m->cfg.rms_norm_eps;
    m->as.full_a = m->ms.full_a = m->d.full_a;
    m->as.full_b = m->ms.full_b = m->d.full_b;
    return rc;
}

int tri_llama_take_buffers(void *self, tri_arena *a)
{
    static const tri_decoder_buffers b = {.shared = take_shared, .block = take_block, .final_norm = take_final_norm,
                                          .block_output = block_output, .scratch = take_scratch};
    return tri_decoder_take_buffers(&((tri_llama *)self)->d, self, &b, a);
}
