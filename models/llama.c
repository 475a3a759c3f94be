/* models/llama.c - a Llama model chunk (see llama.h): its checks, passes and what they compute. The
 * engine (engine/train/chunk.h) acquires each pass's units and releases them; the parameters'
 * descriptions and views are in llama_params.c, the buffers in llama_buffers.c. The passes are
 * GPT-2's (models/gpt.c) with the Llama block and an untied or tied head. */
#include "models/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "layers/embedding.h"
#include "partitioner/layout.h"

/* ---- checks ---- */

/* A TP rank's key/value heads: its split of them, or the one head it shares (llama.h). */
static int64_t kv_heads_local(const tri_llama_config *c, int tp)
{
    return c->num_key_value_heads >= tp ? c->num_key_value_heads / tp : 1;
}

/* The fused q|k|v and gate|up views need each shard but the group's last to end where the next
 * begins: a whole number of the layout's alignment (partitioner/layout.h). */
static int check_fused(const tri_llama_config *c, int tp)
{
    int64_t C = c->hidden_size, HS = c->head_dim, NH_l = c->num_attention_heads / tp;
    int64_t NH_kv_l = kv_heads_local(c, tp), F_l = c->intermediate_size / tp;
    const struct {
        int64_t elems;
        bool used;
        const char *what;
    } shard[] = {{NH_l * HS * C, true, "q_proj's"}, {NH_kv_l * HS * C, true, "k_proj's"},
                 {NH_l * HS, c->attention_bias, "q_proj bias's"}, {NH_kv_l * HS, c->attention_bias, "k_proj bias's"},
                 {F_l * C, true, "gate_proj's"}, {F_l, c->mlp_bias, "gate_proj bias's"}};
    for (size_t i = 0; i < sizeof shard / sizeof shard[0]; i++)
        if (shard[i].used && shard[i].elems % TRI_LAYOUT_ALIGN != 0)
            return TRI_ERR(TRI_EINVAL, "%s: at --tensor-model-parallel-size %d a rank's share of %s rows has %lld "
                           "elements, not a multiple of %d, so the fused projection cannot view it in place "
                           "(hidden_size, head_dim or intermediate_size a multiple of 64 would do)",
                           c->name, tp, shard[i].what, (long long)shard[i].elems, TRI_LAYOUT_ALIGN);
    return TRI_OK;
}

int tri_llama_check(const void *config, const tri_train_layout *run, const tri_chunk_place *o)
{
    const tri_llama_config *c = config;
    const char *name = c->name;
    int tp = run->tp, NH = c->num_attention_heads, NH_kv = c->num_key_value_heads;
    /* the widest row a buffer holds: B*T*max(Vp, 2F, W) */
    int64_t widest = tri_padded_vocab(c->vocab_size, tp > 0 ? tp : 1);
    const char *keys = "vocab_size (padded)";
    if (2 * (int64_t)c->intermediate_size > widest) {
        widest = 2 * (int64_t)c->intermediate_size;
        keys = "2 x intermediate_size";
    }
    if ((int64_t)(NH + 2 * NH_kv) * c->head_dim > widest) {
        widest = (int64_t)(NH + 2 * NH_kv) * c->head_dim;
        keys = "(num_attention_heads + 2 x num_key_value_heads) x head_dim";
    }
    tri_transformer dims = tri_llama_dims(c);
    int rc = tri_decoder_check(run, o, name, &dims, widest, keys); /* with the heads' rules */
    if (rc)
        return rc;
    if (c->intermediate_size % tp != 0)
        return TRI_ERR(TRI_EINVAL, "intermediate_size %d of %s is not divisible by --tensor-model-parallel-size %d",
                       c->intermediate_size, name, tp);
    if (run->attention != TRI_ATTENTION_FLASH)
        return TRI_ERR(TRI_EINVAL, "--attention-backend unfused: %s (a Llama) runs on the fused attention only", name);
    /* tp > 1 without --sequence-parallel: refused by tri_layout_check_model (partitioner/constraints.c);
     * under SP each TP rank routes its own N / tp tokens through whole experts (docs/moe.md) */
    /* ZeRO 1-3 shard the experts over their expert-data-parallel group, at tp > 1 tp dp / ep ranks of the
     * stage (the experts are marked spec.expert there at any ep: tri_llama_moe_add_params) */
    /* the shared expert at tp > 1 is a tensor-parallel SwiGLU (llama_moe.c): I_s / tp rows each */
    if (c->num_experts > 0 && c->shared_expert_intermediate_size % tp != 0)
        return TRI_ERR(TRI_EINVAL, "moe_shared_expert_intermediate_size %d of %s is not divisible by "
                       "--tensor-model-parallel-size %d (the shared expert splits over the tensor-parallel ranks)",
                       c->shared_expert_intermediate_size, name, tp);
    /* expert tensor parallelism (layers/moe_etp.h): each expert's I in etp slices (ZeRO over edp as for ep) */
    int etp = run->etp > 1 ? run->etp : 1;
    if (etp > 1 && c->num_experts == 0)
        return TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d: %s has no experts", etp, name);
    if (etp > 1 && (c->moe_intermediate_size % etp != 0 ||
                    ((int64_t)c->moe_intermediate_size / etp * c->hidden_size) % TRI_LAYOUT_ALIGN != 0))
        return TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d: %s's moe_intermediate_size %d must divide by it and "
                       "a slice's (moe_intermediate_size / %d) x hidden_size %d elements be a multiple of %d (the "
                       "experts' fused views)", etp, name, c->moe_intermediate_size, etp, c->hidden_size,
                       TRI_LAYOUT_ALIGN);
    if (c->num_experts > 0 && ((int64_t)c->moe_intermediate_size * c->hidden_size) % TRI_LAYOUT_ALIGN != 0)
        return TRI_ERR(TRI_EINVAL, "%s: moe_intermediate_size %d x hidden_size %d is not a multiple of %d elements, "
                       "so the experts' fused views cannot join their matrices in place", name,
                       c->moe_intermediate_size, c->hidden_size, TRI_LAYOUT_ALIGN);
    int64_t shared_l = c->shared_expert_intermediate_size / tp; /* a TP rank's shared-expert rows */
    if (c->num_experts > 0 && shared_l * c->hidden_size % TRI_LAYOUT_ALIGN != 0)
        return TRI_ERR(TRI_EINVAL, "%s: at --tensor-model-parallel-size %d moe_shared_expert_intermediate_size %d / %d "
                       "x hidden_size %d is not a multiple of %d elements, so the shared expert's gate|up view "
                       "cannot join them in place", name, tp, c->shared_expert_intermediate_size, tp,
                       c->hidden_size, TRI_LAYOUT_ALIGN);
    return check_fused(c, tp);
}

/* ---- forward and backward: the decoder's passes (models/model_chunk.h), the Llama compute ---- */

/* Whether the stage's block l runs the MoE block. */
static bool is_sparse(const tri_llama *m, int l)
{
    return tri_llama_layer_is_sparse(&m->cfg, m->d.opt.layer_start + l);
}

/* res3 = res2 + mlp(rmsnorm2(res2)) with res2 = x + attn(rmsnorm1(x)): one Llama decoder layer. */
static int block_forward(tri_llama *m, int l, tri_llama_block_acts *a, tri_tensor x)
{
    const tri_llama_block_weights *w = &m->w.h[l];
    tri_device *d = m->d.dev;
    tri_tensor tmp = m->d.tmp;
    float eps = m->cfg.rms_norm_eps;
    int rc = tri_op_rmsnorm_forward(d, a->ln1, a->ln1_rstd, x, w->ln1_w, eps);
    if (!rc) rc = tri_llama_attention_forward(&m->d.tp, tmp, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_add_rmsnorm_forward(d, a->res2, a->ln2, a->ln2_rstd, x, tmp, w->ln2_w,
                                             eps); /* res2 = x + attn, ln2 = rmsnorm(res2) */
    if (!rc && is_sparse(m, l) && tri_llama_moe_shared_tp_width(m) > 0) {
        /* the tensor-parallel shared expert (llama_moe.c) into res3, free until the block's sum below */
        rc = tri_swiglu_mlp_forward(&m->d.tp, a->res3, &a->shared_mlp, a->ln2, &w->shared_mlp, &m->shared_ms);
    }
    if (!rc && is_sparse(m, l)) {
        tri_moe_config mc = tri_llama_moe_config(m);
        rc = m->d.opt.etp > 1 ? tri_moe_etp_forward(d, m->d.opt.ep_comm, m->d.opt.etp_comm, tmp, &a->moe, &a->moe_etp,
                                                    &m->moe_etp_scratch, a->ln2, &w->moe, &mc)
             : m->d.opt.ep > 1 ? tri_moe_ep_forward(d, m->d.opt.ep_comm, tmp, &a->moe, &a->moe_ep, &m->moe_ep_scratch,
                                                    a->ln2, &w->moe, &mc)
                               : tri_moe_forward(d, tmp, &a->moe, a->ln2, &w->moe, &mc);
        if (!rc && tri_llama_moe_shared_tp_width(m) > 0)
            rc = tri_op_add(d, tmp, tmp, a->res3); /* routed + shared, as the block's y at tp 1 */
    } else if (!rc) {
        rc = tri_swiglu_mlp_forward(&m->d.tp, tmp, &a->mlp, a->ln2, &w->mlp, &m->ms);
    }
    if (!rc) rc = tri_op_add(d, a->res3, a->res2, tmp);
    return rc;
}

/* dres (N_l, C) holds d res3 on entry and d x on return. Full recomputation first rebuilds the
 * block's activations (the same bits its forward wrote) in the shared set; the fused attention
 * leaves selective recomputation nothing to rebuild. */
static int block_backward(tri_llama *m, int l, const tri_llama_block_acts *kept, tri_tensor x, tri_tensor dres)
{
    const tri_llama_block_weights *w = &m->w.h[l], *g = &m->g.h[l];
    tri_device *d = m->d.dev;
    tri_tensor dln = m->d.dln;
    tri_llama_block_acts acts = *kept, *a = &acts;
    int rc = TRI_OK;
    if (m->d.run->recompute == TRI_RECOMPUTE_FULL) {
        acts = m->shared;  /* res3 into the shared set: the slot's stays as it is */
        rc = block_forward(m, l, a, x);
    }
    if (!rc && is_sparse(m, l)) {
        /* the aux and z losses weigh as the LM loss's mean over this micro-batch's N tokens (under cp
         * the whole micro-batch's cp N: each cp rank's losses are shares of one micro-batch's) */
        tri_moe_config mc = tri_llama_moe_config(m);
        float scale = m->d.chunk.dloss * (float)(m->d.N * m->d.seq.cp);
        rc = m->d.opt.etp > 1
                 ? tri_moe_etp_backward(d, m->d.opt.ep_comm, m->d.opt.etp_comm, dln, &g->moe, dres, &a->moe, &a->moe_etp,
                                        a->ln2, &w->moe, &m->moe_scratch, &m->moe_etp_scratch, &mc, scale)
             : m->d.opt.ep > 1 ? tri_moe_ep_backward(d, m->d.opt.ep_comm, dln, &g->moe, dres, &a->moe, &a->moe_ep, a->ln2,
                                                   &w->moe, &m->moe_scratch, &m->moe_ep_scratch, &mc, scale)
                             : tri_moe_backward(d, dln, &g->moe, dres, &a->moe, a->ln2, &w->moe, &m->moe_scratch, &mc,
                                                scale);
        if (!rc) rc = tri_llama_moe_count(m, l, &a->moe); /* the step's figures for the logs */
        if (!rc && tri_llama_moe_shared_tp_width(m) > 0) { /* the shared expert's dx into tmp, free here */
            rc = tri_swiglu_mlp_backward(&m->d.tp, m->d.tmp, &g->shared_mlp, dres, &a->shared_mlp, a->ln2,
                                         &w->shared_mlp, &m->shared_ms);
            if (!rc) rc = tri_op_add(d, dln, dln, m->d.tmp);
        }
    } else if (!rc) {
        rc = tri_swiglu_mlp_backward(&m->d.tp, dln, &g->mlp, dres, &a->mlp, a->ln2, &w->mlp, &m->ms);
    }
    if (!rc) rc = tri_op_rmsnorm_backward(d, dres, g->ln2_w, dln, a->res2, w->ln2_w, a->ln2_rstd);
    if (!rc) rc = tri_llama_attention_backward(&m->d.tp, dln, &g->attn, dres, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_rmsnorm_backward(d, dres, g->ln1_w, dln, x, w->ln1_w, a->ln1_rstd);
    return rc;
}

/* Block l's input: the stage's, or block l - 1's output. */
static tri_tensor block_input(const tri_llama *m, int slot, int l)
{
    return l == 0 ? m->d.slots[slot].x_in : m->slots[slot].blocks[l - 1].res3;
}

static tri_tensor head_weight(const tri_llama_weights *w, const tri_llama *m)
{
    return m->cfg.tie_word_embeddings ? w->embed : w->lm_head;
}

static int head_forward(void *self, int slot, bool train, float dloss)
{
    tri_llama *m = self;
    tri_decoder_slot *io = &m->d.slots[slot];
    tri_llama_slot *s = &m->slots[slot];
    int rc = tri_op_rmsnorm_forward(m->d.dev, s->lnf, s->lnf_rstd, block_input(m, slot, m->d.L_l), m->w.norm,
                                    m->cfg.rms_norm_eps);
    tri_tensor dhead = m->d.private_embed ? m->d.lm_dembed : head_weight(&m->g, m);
    if (!rc)
        rc = tri_lm_head_loss(&m->d.tp, io->losses, train ? io->dlnf : tri_tensor_none(), dhead, s->lnf,
                              head_weight(&m->w, m), io->targets, m->d.vocab_start, m->d.vocab_size, dloss, &m->d.ls);
    return rc;
}

static int head_backward(void *self, int slot)
{
    tri_llama *m = self;
    tri_decoder_slot *io = &m->d.slots[slot];
    int rc = tri_op_fill(m->d.dev, io->dres, 0.0f);
    if (!rc) rc = tri_op_rmsnorm_backward(m->d.dev, io->dres, m->g.norm, io->dlnf, block_input(m, slot, m->d.L_l),
                                          m->w.norm, m->slots[slot].lnf_rstd);
    return rc;
}

/* The passes tri_decoder_run hands to this family (models/model_chunk.h tri_decoder_compute). */
static int pass_block(void *self, int l, int slot)
{
    tri_llama *m = self;
    return block_forward(m, l, &m->slots[slot].blocks[l], block_input(m, slot, l));
}

static int pass_block_backward(void *self, int l, int slot)
{
    tri_llama *m = self;
    return block_backward(m, l, &m->slots[slot].blocks[l], block_input(m, slot, l), m->d.slots[slot].dres);
}

static const tri_decoder_compute COMPUTE = {.block_forward = pass_block, .block_backward = pass_block_backward,
                                            .head_forward = head_forward, .head_backward = head_backward};

/* ---- the rest of the chunk interface ---- */

/* The fused views over consecutive shards (llama.h): first's data, rows of every part. */
static tri_tensor fused(tri_tensor first, int64_t rows, int64_t cols)
{
    if (!tri_tensor_present(first))
        return tri_tensor_none();
    return cols > 0 ? tri_tensor_2d(first.data, first.dtype, rows, cols) : tri_tensor_1d(first.data, first.dtype, rows);
}

static void fuse_block(const tri_llama *m, tri_llama_block_weights *b, int l)
{
    if (is_sparse(m, l))
        tri_llama_moe_fuse(m, b, l);
    int64_t C = m->cfg.hidden_size;
    b->attn.qkv_w = fused(b->q_w, m->W_l, C);
    b->attn.qkv_b = fused(b->q_b, m->W_l, 0);
    b->mlp.gate_up_w = fused(b->gate_w, 2 * m->F_l, C);
    b->mlp.gate_up_b = fused(b->gate_b, 2 * m->F_l, 0);
}

/* The decoder's views, and a block's fused views over them. */
static void bind(void *self, int u, tri_tensor pflat, tri_tensor gflat)
{
    tri_llama *m = self;
    tri_decoder_bind(self, u, pflat, gflat);
    int l = u - m->d.unit_block0;
    if (m->d.unit_block0 >= 0 && l >= 0 && l < m->d.L_l) {
        fuse_block(m, &m->w.h[l], l);
        if (tri_tensor_present(gflat))
            fuse_block(m, &m->g.h[l], l);
    }
}

/* ---- creation ---- */

/* The parameters the fused views join must be consecutive in the flat buffers, which check_fused's
 * arithmetic promises: checked here against the real layout. */
static int check_consecutive(const tri_llama *m)
{
    const tri_param_layout *L = &m->d.chunk.layout;
    static const char *const groups[][3] = {{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
                                            {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},
                                            {"mlp.gate_proj.weight", "mlp.up_proj.weight", NULL},
                                            {"mlp.gate_proj.bias", "mlp.up_proj.bias", NULL}};
    char name[TRI_PARAM_NAME_MAX];
    for (int l = 0; l < m->d.L_l; l++)
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
            for (int k = 0; k + 1 < 3 && groups[g][k + 1]; k++) {
                snprintf(name, sizeof name, "model.layers.%d.%s", m->d.opt.layer_start + l, groups[g][k]);
                int a = tri_layout_find(L, name);
                snprintf(name, sizeof name, "model.layers.%d.%s", m->d.opt.layer_start + l, groups[g][k + 1]);
                int b = tri_layout_find(L, name);
                if ((a < 0) != (b < 0) ||
                    (a >= 0 && L->params[a].offset + L->params[a].numel != L->params[b].offset))
                    return TRI_ERR(TRI_EINTERNAL, "llama: %s does not follow the previous shard in the flat buffer", name);
            }
    return TRI_OK;
}

/* The rotary tables cos, sin (T, HS/2) of the config's theta and scaling (layers/rotary.h); T the whole
 * sequence's (under context parallelism a rank's rows sit at global positions up to T). */
static int fill_rotary(tri_llama *m)
{
    int64_t T = m->d.seq.T, half = m->HS / 2;
    float *inv = malloc((size_t)half * sizeof *inv), *c = malloc((size_t)(T * half) * sizeof *c),
          *s = malloc((size_t)(T * half) * sizeof *s);
    int rc = inv && c && s ? TRI_OK : TRI_ERR(TRI_ENOMEM, "llama: out of memory for the rotary tables");
    if (!rc) {
        tri_rope_inv_freq(inv, m->HS, m->cfg.rope_theta, &m->cfg.rope_scaling);
        tri_rope_tables(c, s, T, half, inv);
        rc = tri_device_copy_from_host(m->d.dev, m->cos, c);
        if (!rc) rc = tri_device_copy_from_host(m->d.dev, m->sin, s);
    }
    free(inv);
    free(c);
    free(s);
    return rc;
}

/* Sizes every buffer (dev NULL: planning only) or builds the chunk (tri_decoder_setup). */
static int setup(void *self, const void *config, const tri_train_layout *run, const tri_chunk_place *opt,
                 tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    tri_llama *m = self;
    const tri_llama_config *cfg = config;
    int rc = tri_llama_check(cfg, run, opt);
    tri_param_spec *specs = NULL;
    int n = 0;
    if (!rc) rc = tri_llama_param_specs(cfg, run->tp, opt, &specs, &n);
    tri_decoder_shape shape = {.family = "llama", .C = cfg->hidden_size, .vocab_size = cfg->vocab_size,
                               .tied_embedding = cfg->tie_word_embeddings,
                               .n_global_params = tri_llama_num_param_tensors(cfg), .compute = &COMPUTE,
                               .embed = &m->w.embed, .embed_grad = &m->g.embed};
    if (!rc) rc = tri_decoder_begin(&m->d, &shape, specs, n, run, opt, dev, tp_comm);
    free(specs);
    if (rc)
        return rc;
    int tp = run->tp, L_l = m->d.L_l;
    m->cfg = *cfg;
    m->HS = cfg->head_dim;
    m->NH_l = cfg->num_attention_heads / tp;
    m->NH_kv_l = kv_heads_local(cfg, tp);
    m->Q_l = m->NH_l * m->HS;
    m->KV_l = m->NH_kv_l * m->HS;
    m->W_l = m->Q_l + 2 * m->KV_l;
    m->F_l = cfg->intermediate_size / tp;
    m->w.h = tri_decoder_calloc(&m->d, L_l + 1, sizeof *m->w.h);
    m->g.h = tri_decoder_calloc(&m->d, L_l + 1, sizeof *m->g.h);
    m->slots = tri_decoder_calloc(&m->d, opt->n_slots, sizeof *m->slots);
    bool ok = m->w.h && m->g.h && m->slots;
    for (int s = 0; ok && s < opt->n_slots; s++)
        ok = (m->slots[s].blocks = tri_decoder_calloc(&m->d, L_l + 1, sizeof *m->slots[s].blocks)) != NULL;
    if (!ok)
        return TRI_ERR(TRI_ENOMEM, "llama: out of memory");
    /* the config's auxiliary loss (Hugging Face adds it when output_router_logits; its coefficient is K
     * times smaller than Megatron's, docs/moe.md), or the --moe-* flags' (tri_moe_run) */
    const tri_moe_run *mr = &run->moe;
    m->moe_opt = (tri_llama_moe_options){
        .aux_loss_coeff = mr->aux_loss_coeff_set ? mr->aux_loss_coeff
                          : cfg->output_router_logits ? cfg->router_aux_loss_coef * (float)cfg->num_experts_per_tok : 0,
        .z_loss_coeff = mr->z_loss_coeff, .capacity_factor = mr->capacity_factor, .drop_policy = mr->drop_policy,
        .score_func = mr->score_func, .expert_bias = mr->expert_bias && cfg->num_experts > 0,
        .bias_update_rate = mr->bias_update_rate};
    rc = tri_llama_map_views(m);
    if (!rc) rc = tri_llama_moe_bias_describe(m);
    if (!rc) rc = check_consecutive(m);
    if (rc)
        return rc;
    tri_chunk_model model = {.self = m, .take_buffers = tri_llama_take_buffers, .bind = bind,
                             .moe_shape = cfg->num_experts > 0 ? tri_llama_moe_shape : NULL,
                             .buffers = m->moe_opt.expert_bias ? tri_llama_moe_bias_buffers : NULL,
                             .after_update = m->moe_opt.expert_bias ? tri_llama_moe_bias_update : NULL};
    rc = tri_decoder_build(&m->d, model, dev, dp_comm);
    if (!rc && dev && m->bias.n > 0)
        rc = tri_op_zero(dev, m->bias.values);
    if (!rc && dev && L_l > 0)
        rc = fill_rotary(m);
    return rc;
}

int tri_llama_create(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                     const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    return tri_decoder_create(model, chunk, sizeof(tri_llama), setup, cfg, run, place, dev, tp_comm, dp_comm);
}
