/* models/llama_moe.c - the sparse layers of the Llama family: Hugging Face's MixtralForCausalLM
 * (Jiang et al. 2024, "Mixtral of Experts") and the MoE side of Qwen3MoeForCausalLM, where a layer
 * that tri_llama_layer_is_sparse names runs layers/moe.h's block (router, top-k, SwiGLU experts,
 * weighted combine; Switch Transformer's auxiliary loss, ST-MoE's z-loss) in place of the SwiGLU MLP.
 *
 * Parameters under the Hub checkpoints' per-expert names (prefix P = "block_sparse_moe." for Mixtral,
 * "mlp." for Qwen3-MoE; gate/up/down are w1/w3/w2 in Mixtral, gate_proj/up_proj/down_proj in Qwen3):
 *   P gate.weight (E, C); P experts.J.{w1,w3}.weight (I, C); P experts.J.w2.weight (C, I);
 *   P shared_expert.{gate_proj,up_proj,down_proj}.weight when I_s > 0 (Megatron's shared expert).
 * Flat-buffer order: the router, then per expert its gate then its up matrix, then every expert's down
 * matrix, then the shared expert: so tri_moe_weights' fused views gate_up_w (E, 2I, C) and down_w
 * (E, C, I) are each one contiguous range (and an expert-parallel rank's E/ep experts, later, one
 * slice of each). The global (checkpoint) order is the same.
 *
 * The block runs on whole experts at etp 1 (with tp > 1 under --sequence-parallel, Megatron-Core's rule,
 * each TP rank routes its own N / tp tokens through the replicated router and experts) and on each
 * expert's I / etp slice under --expert-tensor-parallel-size (layers/moe_etp.h: gate/up rows and down
 * columns split over the etp group, tri_param_spec.etp), in fp32 or,
 * under --bf16, on bf16 rows with an fp32 router (layers/moe.h). The auxiliary and z losses enter the step's objective with weight
 * dloss * N (dloss = d(step loss)/d(token loss), so 1/(micro-batches x data-parallel ranks): the
 * losses averaged like the LM loss, Megatron-Core's scaling), and their scalars stay in each slot's
 * block activations (acts.moe.losses = [aux, z]) for tri_llama_moe_losses to read.
 *
 * The shared expert at tp > 1 (sequence parallel) is Megatron-Core's SharedExpertMLP: a tensor-parallel
 * SwiGLU run as the dense Llama's MLP (layers/swiglu_mlp.h: all-gather of the sequence shard,
 * column-parallel gate|up of I_s / tp rows each, row-parallel down, reduce-scatter), its parameters
 * split over tp as mlp.gate_proj/up_proj (rows) and down_proj (columns); the MoE block then runs
 * without it (I_shared 0) and llama.c adds the two outputs. At tp 1 it stays inside the block. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/llama.h"
#include "models/model_chunk.h"
#include "partitioner/layout.h"

/* ---- names ---- */

static const char *prefix(const tri_llama_config *c)
{
    return c->hf_style == TRI_HF_MIXTRAL ? "block_sparse_moe." : "mlp.";
}

/* Expert matrix kind k (0 gate, 1 up, 2 down) under the style's name. */
static const char *expert_name(const tri_llama_config *c, int k)
{
    static const char *const mixtral[] = {"w1", "w3", "w2"}, *const qwen[] = {"gate_proj", "up_proj", "down_proj"};
    return c->hf_style == TRI_HF_MIXTRAL ? mixtral[k] : qwen[k];
}

/* Parameter j of a sparse layer's MoE group (in flat order): its name after "model.layers.<i>.",
 * its shape, and kind (-1 router, 0..2 expert gate/up/down, 3..5 shared gate/up/down), expert e. */
static void moe_param(const tri_llama_config *c, int j, char *name, size_t cap, int64_t shape[2], int *kind, int *e)
{
    int64_t C = c->hidden_size, E = c->num_experts, I = c->moe_intermediate_size,
            Is = c->shared_expert_intermediate_size;
    static const char *const shared[] = {"gate_proj", "up_proj", "down_proj"};
    *e = -1;
    if (j == 0) {
        *kind = -1;
        snprintf(name, cap, "%sgate.weight", prefix(c));
        shape[0] = E;
        shape[1] = C;
    } else if (j <= 2 * E) {
        *e = (j - 1) / 2;
        *kind = (j - 1) % 2;
        snprintf(name, cap, "%sexperts.%d.%s.weight", prefix(c), *e, expert_name(c, *kind));
        shape[0] = I;
        shape[1] = C;
    } else if (j <= 3 * E) {
        *e = j - 1 - 2 * (int)E;
        *kind = 2;
        snprintf(name, cap, "%sexperts.%d.%s.weight", prefix(c), *e, expert_name(c, 2));
        shape[0] = C;
        shape[1] = I;
    } else {
        *kind = 3 + (j - 1 - 3 * (int)E);
        snprintf(name, cap, "%sshared_expert.%s.weight", prefix(c), shared[*kind - 3]);
        shape[0] = *kind == 5 ? C : Is;
        shape[1] = *kind == 5 ? Is : C;
    }
}

int tri_llama_moe_param_index(const tri_llama_config *c, const char *suffix)
{
    size_t n = strlen(prefix(c));
    if (strncmp(suffix, prefix(c), n) != 0)
        return -1;
    const char *rest = suffix + n;
    int e = 0, used = 0, E = c->num_experts;
    char kind[16];
    if (strcmp(rest, "gate.weight") == 0)
        return 0;
    if (sscanf(rest, "experts.%d.%15[a-z_0-9].weight%n", &e, kind, &used) == 2 && rest[used] == '\0' && e >= 0 &&
        e < E) {
        char canon[TRI_PARAM_NAME_MAX];
        snprintf(canon, sizeof canon, "experts.%d.%s.weight", e, kind); /* no "experts.01." */
        if (strcmp(canon, rest) != 0)
            return -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(kind, expert_name(c, k)) == 0)
                return k < 2 ? 1 + 2 * e + k : 1 + 2 * E + e;
    }
    if (c->shared_expert_intermediate_size > 0) {
        static const char *const shared[] = {"shared_expert.gate_proj.weight", "shared_expert.up_proj.weight",
                                             "shared_expert.down_proj.weight"};
        for (int k = 0; k < 3; k++)
            if (strcmp(rest, shared[k]) == 0)
                return 1 + 3 * E + k;
    }
    return -1;
}

/* Whether expert e (-1: not an expert) is on expert-parallel rank ep_rank of ep (E/ep consecutive each). */
static bool local_expert(const tri_llama_config *c, int e, int ep, int ep_rank)
{
    int El = ep > 1 ? c->num_experts / ep : c->num_experts;
    return e < 0 || ep <= 1 || (e >= ep_rank * El && e < (ep_rank + 1) * El);
}

int tri_llama_moe_add_params(tri_spec_list *l, const tri_llama_config *c, int layer, int tp, int ep, int ep_rank,
                             int etp, int etp_rank)
{
    for (int j = 0; j < tri_llama_moe_num_params(c); j++) {
        char sub[TRI_PARAM_NAME_MAX], name[2 * TRI_PARAM_NAME_MAX];
        int64_t shape[2];
        int kind, e;
        moe_param(c, j, sub, sizeof sub, shape, &kind, &e);
        if (!local_expert(c, e, ep, ep_rank))
            continue;
        snprintf(name, sizeof name, "model.layers.%d.%s", layer, sub);
        if (strlen(name) >= TRI_PARAM_NAME_MAX)
            return TRI_ERR(TRI_EINVAL, "llama: parameter name %s is longer than %d characters", name,
                           TRI_PARAM_NAME_MAX - 1);
        /* the shared expert splits over tp as the dense MLP (llama_params.c): gate/up by rows, down by columns */
        int split = kind == 3 || kind == 4 ? 0 : kind == 5 ? 1 : -1;
        tri_param_spec *s = tri_spec_list_add(l, name, 2, shape, split, true, TRI_INIT_NORMAL, c->init_std);
        if (!s)
            return TRI_ERR(TRI_ENOMEM, "llama: out of memory for parameter descriptions");
        /* reduced (and ZeRO-sharded) over the expert-data-parallel group: at ep > 1 the ep rank's own
         * experts, at tp > 1 (any ep) also, as the group then spans TP ranks (edp = tp dp / (etp ep)) */
        s->expert = (ep > 1 || etp > 1 || tp > 1) && e >= 0;
        if (etp > 1 && e >= 0) { /* Megatron-Core's expert tensor parallelism: gate/up column-, down row-parallel */
            s->split_dim = kind == 2 ? 1 : 0; /* along I: (I, C) rows, (C, I) columns */
            s->etp = etp;
            s->etp_rank = etp_rank;
        }
    }
    return TRI_OK;
}

/* ---- views ---- */

/* The expert-tensor-parallel size (1 without): each expert's I is split in this many slices. */
static int64_t etp_of(const tri_llama *m)
{
    return m->d.opt.etp > 1 ? m->d.opt.etp : 1;
}

int tri_llama_moe_map_views(tri_llama *m, int l)
{
    tri_decoder *d = &m->d;
    const tri_llama_config *c = &m->cfg;
    const tri_param_layout *L = &d->chunk.layout;
    int E = c->num_experts, layer = d->opt.layer_start + l, ep = d->opt.ep, er = d->opt.ep_rank;
    bool shared_tp = tri_llama_moe_shared_tp_width(m) > 0; /* the shared expert outside the block */
    int e0 = ep > 1 ? er * (E / ep) : 0, e1 = ep > 1 ? e0 + E / ep : E; /* this rank's experts */
    tri_llama_block_weights *wb[2] = {&m->w.h[l], &m->g.h[l]};
    for (int s = 0; s < 2; s++) {
        wb[s]->experts = tri_decoder_calloc(d, 3 * (size_t)E, sizeof *wb[s]->experts);
        if (!wb[s]->experts)
            return TRI_ERR(TRI_ENOMEM, "llama: out of memory for the experts' views");
    }
    for (int j = 0; j < tri_llama_moe_num_params(c); j++) {
        char sub[TRI_PARAM_NAME_MAX], name[2 * TRI_PARAM_NAME_MAX];
        int64_t shape[2];
        int kind, e, i;
        moe_param(c, j, sub, sizeof sub, shape, &kind, &e);
        if (!local_expert(c, e, ep, er))
            continue;
        snprintf(name, sizeof name, "model.layers.%d.%s", layer, sub);
        if ((i = tri_layout_find(L, name)) < 0)
            return TRI_ERR(TRI_EINTERNAL, "llama: the chunk has no parameter %s", name);
        tri_tensor *slot[2];
        for (int s = 0; s < 2; s++) {
            tri_llama_block_weights *b = wb[s];
            slot[s] = kind < 0 ? &b->moe.router_w : kind < 2 ? &b->experts[2 * e + kind] : kind == 2 ? &b->experts[2 * E + e]
                    : kind == 3 ? &b->shared_gate_w : kind == 4 ? &b->shared_up_w
                    : shared_tp ? &b->shared_mlp.down_w : &b->moe.shared_down_w;
        }
        d->wslot[i] = slot[0];
        d->gslot[i] = slot[1];
        /* the fused views need the experts' gate/up matrices, their down matrices and the shared
         * expert's gate and up each where the previous one ends */
        bool joined = (j >= 2 + 2 * e0 && j <= 2 * e1) || (j >= 2 * E + 2 + e0 && j <= 2 * E + e1) || j == 3 * E + 2;
        if (joined && L->params[i - 1].offset + L->params[i - 1].numel != L->params[i].offset)
            return TRI_ERR(TRI_EINTERNAL, "llama: %s does not follow the previous parameter in the flat buffer "
                           "(the experts' fused views need them contiguous)", name);
    }
    return TRI_OK;
}

void tri_llama_moe_fuse(const tri_llama *m, tri_llama_block_weights *b, int l)
{
    const tri_llama_config *c = &m->cfg;
    int64_t C = c->hidden_size, E = c->num_experts, I = c->moe_intermediate_size / etp_of(m),
            Is = c->shared_expert_intermediate_size;
    int ep = m->d.opt.ep;
    int64_t El = ep > 1 ? E / ep : E, e0 = ep > 1 ? m->d.opt.ep_rank * El : 0; /* this rank's experts */
    tri_tensor g0 = b->experts[2 * e0], d0 = b->experts[2 * E + e0];
    b->moe.gate_up_w = tri_tensor_present(g0) ? tri_tensor_3d(g0.data, g0.dtype, El, 2 * I, C) : tri_tensor_none();
    b->moe.down_w = tri_tensor_present(d0) ? tri_tensor_3d(d0.data, d0.dtype, El, C, I) : tri_tensor_none();
    int64_t Is_l = tri_llama_moe_shared_tp_width(m);
    tri_tensor sgu = Is > 0 && tri_tensor_present(b->shared_gate_w)
                         ? tri_tensor_2d(b->shared_gate_w.data, b->shared_gate_w.dtype, 2 * (Is_l > 0 ? Is_l : Is), C)
                         : tri_tensor_none();
    b->moe.shared_gate_up_w = Is_l > 0 ? tri_tensor_none() : sgu;
    b->shared_mlp.gate_up_w = Is_l > 0 ? sgu : tri_tensor_none(); /* this rank's I_s / tp gate rows, then up */
    b->moe.expert_bias = tri_tensor_none();
    for (int k = 0; k < m->bias.n; k++)
        if (m->bias.layer[k] == l)
            b->moe.expert_bias = m->bias.rows[k];
}

/* ---- the block's configuration and buffers ---- */

tri_moe_config tri_llama_moe_config(const tri_llama *m)
{
    const tri_llama_config *c = &m->cfg;
    const tri_llama_moe_options *o = &m->moe_opt;
    /* under sequence parallelism (required with tp > 1) each TP rank routes its own N_l = N / tp tokens, and
     * under context parallelism each cp rank its chunks': the aux loss's group is tp x cp (Megatron-Core's
     * tp-cp group), the micro-batch's sp N_l tokens */
    int64_t tp_sp = m->d.run->sequence_parallel && m->d.run->tp > 1 ? m->d.run->tp : 1, sp = tp_sp * m->d.seq.cp;
    tri_comm *sp_comm = m->d.seq.cp > 1 ? m->d.opt.tokens_comm : tp_sp > 1 ? m->d.tp.comm : NULL;
    tri_moe_config k = {.shape = {.N = m->d.N_l, .sp = sp, .C = c->hidden_size, .E = c->num_experts,
                                  .K = c->num_experts_per_tok, .I = c->moe_intermediate_size / etp_of(m),
                                  .I_shared = tri_llama_moe_shared_tp_width(m) > 0 ? 0
                                                                                   : c->shared_expert_intermediate_size,
                                  .dtype = tri_decoder_act_dtype(&m->d)},
                        .score_func = o->score_func, .norm_topk = c->norm_topk_prob,
                        .drop_policy = o->drop_policy, .aux_loss_coeff = o->aux_loss_coeff,
                        .z_loss_coeff = o->z_loss_coeff, .sp_comm = sp > 1 ? sp_comm : NULL};
    k.capacity = o->capacity_factor > 0 ? tri_moe_capacity(k.shape.N, k.shape.K, k.shape.E, o->capacity_factor) : 0;
    k.shape.capacity = k.capacity; /* bounds the rows an ep rank receives (tri_moe_ep_max_rows) */
    return k;
}

int64_t tri_llama_moe_shared_tp_width(const tri_llama *m)
{
    int tp = m->d.run->tp;
    return tp > 1 ? m->cfg.shared_expert_intermediate_size / tp : 0;
}

int tri_llama_moe_take_shared_acts(tri_llama *m, tri_arena *ar, tri_swiglu_mlp_acts *a)
{
    int64_t Is_l = tri_llama_moe_shared_tp_width(m), N = m->d.N;
    tri_dtype act = tri_decoder_act_dtype(&m->d);
    memset(a, 0, sizeof *a);
    if (Is_l == 0)
        return TRI_OK;
    int rc = TRI_ARENA_TAKE(ar, TRI_MEM_ACTIVATIONS, &a->gate_up, act, N, 2 * Is_l);
    if (!rc) rc = TRI_ARENA_TAKE(ar, TRI_MEM_ACTIVATIONS, &a->h, act, N, Is_l);
    return rc;
}

/* Bytes rounded to whole fp32 elements (tri_moe_*_bytes are multiples of TRI_MOE_ALIGN). */
static int take_bytes(tri_arena *ar, tri_mem_kind kind, tri_tensor *t, size_t bytes)
{
    if (bytes == 0)
        return TRI_ERR(TRI_EINVAL, "llama: the MoE block's shape is invalid");
    return TRI_ARENA_TAKE(ar, kind, t, TRI_F32, (int64_t)(bytes / sizeof(float)));
}

int tri_llama_moe_take_acts(tri_llama *m, tri_arena *ar, tri_moe_acts *a, tri_moe_ep_acts *ep_acts,
                            tri_moe_etp_acts *etp_acts)
{
    tri_moe_config k = tri_llama_moe_config(m);
    tri_tensor mem;
    memset(a, 0, sizeof *a);
    int rc = take_bytes(ar, TRI_MEM_ACTIVATIONS, &mem, tri_moe_acts_bytes(&k.shape));
    if (!rc && mem.data)
        rc = tri_moe_bind(&k.shape, a, mem.data, NULL, NULL);
    if (!rc && etp_of(m) > 1) { /* the etp group's gathered rows (layers/moe_etp.h) */
        tri_tensor em;
        int ep = m->d.opt.ep > 1 ? m->d.opt.ep : 1;
        rc = take_bytes(ar, TRI_MEM_ACTIVATIONS, &em, tri_moe_etp_acts_bytes(&k.shape, ep, (int)etp_of(m)));
        if (!rc && em.data)
            rc = tri_moe_etp_bind(&k.shape, ep, (int)etp_of(m), etp_acts, em.data, NULL, NULL);
    } else if (!rc && m->d.opt.ep > 1) { /* the rows received from the other expert-parallel ranks */
        tri_tensor em;
        rc = take_bytes(ar, TRI_MEM_ACTIVATIONS, &em, tri_moe_ep_acts_bytes(&k.shape, m->d.opt.ep));
        if (!rc && em.data)
            rc = tri_moe_ep_bind(&k.shape, m->d.opt.ep, ep_acts, em.data, NULL, NULL);
    }
    return rc;
}

int tri_llama_moe_take_scratch(tri_llama *m, tri_arena *ar)
{
    tri_moe_config k = tri_llama_moe_config(m);
    tri_tensor mem;
    memset(&m->moe_scratch, 0, sizeof m->moe_scratch);
    memset(&m->shared_ms, 0, sizeof m->shared_ms);
    int64_t Is_l = tri_llama_moe_shared_tp_width(m), N = m->d.N;
    int rc = TRI_OK;
    if (Is_l > 0) { /* the tensor-parallel shared expert's backward, its SP buffers the decoder's */
        rc = TRI_ARENA_TAKE(ar, TRI_MEM_WORKSPACE, &m->shared_ms.dh, tri_decoder_act_dtype(&m->d), N, Is_l);
        if (!rc) rc = TRI_ARENA_TAKE(ar, TRI_MEM_WORKSPACE, &m->shared_ms.dgate_up, tri_decoder_act_dtype(&m->d), N,
                                     2 * Is_l);
        m->shared_ms.full_a = m->d.full_a;
        m->shared_ms.full_b = m->d.full_b;
    }
    if (!rc) rc = take_bytes(ar, TRI_MEM_WORKSPACE, &mem, tri_moe_scratch_bytes(&k.shape));
    if (!rc && mem.data) {
        /* tri_moe_bind carves scratch beside a set of acts: a set laid over the same memory and dropped */
        tri_moe_acts unused;
        rc = tri_moe_bind(&k.shape, &unused, mem.data, &m->moe_scratch, mem.data);
    }
    if (!rc && etp_of(m) > 1) {
        tri_tensor em;
        int ep = m->d.opt.ep > 1 ? m->d.opt.ep : 1;
        rc = take_bytes(ar, TRI_MEM_WORKSPACE, &em, tri_moe_etp_scratch_bytes(&k.shape, ep, (int)etp_of(m)));
        if (!rc && em.data) { /* bind carves the scratch beside a set of acts, as below */
            tri_moe_etp_acts *unused = malloc(sizeof *unused);
            rc = unused ? tri_moe_etp_bind(&k.shape, ep, (int)etp_of(m), unused, em.data, &m->moe_etp_scratch, em.data)
                        : TRI_ERR(TRI_ENOMEM, "llama: out of memory");
            free(unused);
        }
    } else if (!rc && m->d.opt.ep > 1) {
        tri_tensor em;
        rc = take_bytes(ar, TRI_MEM_WORKSPACE, &em, tri_moe_ep_scratch_bytes(&k.shape, m->d.opt.ep));
        if (!rc && em.data) { /* bind carves the scratch beside a set of acts, as above */
            tri_moe_ep_acts unused;
            rc = tri_moe_ep_bind(&k.shape, m->d.opt.ep, &unused, em.data, &m->moe_ep_scratch, em.data);
        }
    }
    return rc;
}

/* ---- the losses ---- */

int tri_llama_moe_losses(const tri_llama *m, int slot, double *aux, double *z)
{
    *aux = *z = 0;
    for (int l = 0; l < m->d.L_l; l++) {
        if (!tri_llama_layer_is_sparse(&m->cfg, m->d.opt.layer_start + l))
            continue;
        float v[2];
        int rc = tri_device_copy_to_host(m->d.dev, v, m->slots[slot].blocks[l].moe.losses);
        if (rc)
            return rc;
        *aux += v[0];
        *z += v[1];
    }
    return TRI_OK;
}

/* ---- the step's figures for the logs (engine/train/moe_stats.h) ---- */

void tri_llama_moe_shape(void *self, int *n_layers, int *n_experts)
{
    const tri_llama *m = self;
    *n_layers = m->cfg.num_hidden_layers;
    *n_experts = m->cfg.num_experts;
}

int tri_llama_moe_count(tri_llama *m, int l, const tri_moe_acts *a)
{
    tri_moe_stats *s = m->d.chunk.moe_stats;
    return s ? tri_moe_stats_stage(s, m->d.opt.layer_start + l, a->routed_per_expert, a->counts, a->losses) : TRI_OK;
}

/* ---- DeepSeek-V3's expert bias (auxiliary-loss-free load balancing; Wang et al. 2024, DeepSeek-V3
 * §2.1.2; Megatron-Core's --moe-router-enable-expert-bias) ----
 *
 * One fp32 value per expert and sparse layer, added to the scores for the top-k selection only
 * (moe_router_forward's expert_bias). It has no gradient: after each applied optimizer step every
 * rank adds rate x sign(mean load - load_e) with moe_expert_bias_update, the loads being the step's
 * kept selections per expert summed over micro-batches, data-parallel replicas and stages (the
 * trainer's reduced account, engine/train/moe_stats.h): the same integers on every rank, so the
 * replicas stay identical. It is training state, listed as weights under DeepSeek-V3's Hugging Face
 * key model.layers.N.mlp.gate.e_score_correction_bias, shape (E): saved, loaded and resharded as a
 * replicated parameter, but outside the flat buffers, so ZeRO, the optimizer, weight decay and the
 * gradient norm never see it (and under bf16 it stays fp32, as the router). */

int tri_llama_moe_bias_describe(tri_llama *m)
{
    tri_llama_expert_bias *b = &m->bias;
    memset(b, 0, sizeof *b);
    if (!m->moe_opt.expert_bias)
        return TRI_OK;
    int L_l = m->d.L_l, n = 0;
    int64_t E = m->cfg.num_experts;
    for (int l = 0; l < L_l; l++)
        n += tri_llama_layer_is_sparse(&m->cfg, m->d.opt.layer_start + l);
    b->desc = tri_decoder_calloc(&m->d, (size_t)n + 1, sizeof *b->desc);
    b->rows = tri_decoder_calloc(&m->d, (size_t)n + 1, sizeof *b->rows);
    b->layer = tri_decoder_calloc(&m->d, (size_t)n + 1, sizeof *b->layer);
    if (!b->desc || !b->rows || !b->layer)
        return TRI_ERR(TRI_ENOMEM, "llama: out of memory for the expert bias");
    for (int l = 0; l < L_l; l++) {
        int layer = m->d.opt.layer_start + l;
        if (!tri_llama_layer_is_sparse(&m->cfg, layer))
            continue;
        tri_param *p = &b->desc[b->n];
        snprintf(p->spec.name, sizeof p->spec.name, "model.layers.%d.mlp.gate.e_score_correction_bias", layer);
        p->spec.ndim = 1;
        p->spec.shape[0] = p->local_shape[0] = p->spec.init_rows = E;
        p->spec.split_dim = -1;
        p->spec.init = TRI_INIT_ZEROS;
        p->spec.global_index = -1; /* not a parameter: no gradient-norm slot */
        p->numel = E;
        p->offset = (int64_t)b->n * E; /* in values */
        p->tp_replicated = true;
        p->replicas = 1;
        b->layer[b->n++] = l;
    }
    return TRI_OK;
}

int tri_llama_moe_take_bias(tri_llama *m, tri_arena *ar)
{
    tri_llama_expert_bias *b = &m->bias;
    int64_t E = m->cfg.num_experts;
    if (b->n == 0)
        return TRI_OK;
    int rc = TRI_ARENA_TAKE(ar, TRI_MEM_PARAMS, &b->values, TRI_F32, (int64_t)b->n, E);
    if (!rc) rc = TRI_ARENA_TAKE(ar, TRI_MEM_WORKSPACE, &b->counts, TRI_I32, E);
    for (int k = 0; k < b->n && !rc; k++)
        b->rows[k] = b->values.data ? tri_tensor_range(b->values, k * E, E) : tri_tensor_none();
    return rc;
}

void tri_llama_moe_bias_buffers(void *self, const tri_param **desc, const tri_tensor **values, int *n)
{
    const tri_llama *m = self;
    *desc = m->bias.desc;
    *values = m->bias.rows;
    *n = m->bias.n;
}

int tri_llama_moe_bias_update(void *self, const tri_moe_stats *moe)
{
    tri_llama *m = self;
    const tri_llama_expert_bias *b = &m->bias;
    int E = moe->E;
    if (E != m->cfg.num_experts)
        return TRI_ERR(TRI_EINTERNAL, "llama: the step's MoE account has %d experts, the model %d", E,
                       m->cfg.num_experts);
    int32_t *c = malloc((size_t)E * sizeof *c);
    int rc = c ? TRI_OK : TRI_ERR(TRI_ENOMEM, "llama: out of memory for the expert bias update");
    for (int k = 0; k < b->n && !rc; k++) {
        int layer = m->d.opt.layer_start + b->layer[k];
        const int64_t *kept = moe->sums + ((int64_t)layer * 2 + 1) * E; /* after the routed (E) */
        for (int e = 0; e < E && !rc; e++) {
            if (kept[e] > INT32_MAX)
                rc = TRI_ERR(TRI_EINVAL, "expert bias: layer %d expert %d kept %lld selections in one step, more "
                             "than the update's int32 counts hold (a smaller global batch)", layer, e,
                             (long long)kept[e]);
            c[e] = (int32_t)kept[e];
        }
        if (!rc) rc = tri_device_copy_from_host(m->d.dev, b->counts, c);
        if (!rc) rc = tri_op_moe_expert_bias_update(m->d.dev, b->rows[k], b->counts, m->moe_opt.bias_update_rate);
    }
    free(c);
    return rc;
}

int tri_llama_moe_bias_specs(const tri_llama_config *c, tri_param_spec **specs, int *n)
{
    int add = 0;
    for (int l = 0; l < c->num_hidden_layers; l++)
        add += c->num_experts > 0 && tri_llama_layer_is_sparse(c, l);
    tri_param_spec *all = realloc(*specs, (size_t)(*n + add + 1) * sizeof *all);
    if (!all)
        return TRI_ERR(TRI_ENOMEM, "llama: out of memory for the expert bias's descriptions");
    *specs = all;
    for (int l = 0; l < c->num_hidden_layers && add > 0; l++) {
        if (!tri_llama_layer_is_sparse(c, l))
            continue;
        tri_param_spec *p = &all[(*n)++];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
        p->ndim = 1;
        p->shape[0] = p->init_rows = c->num_experts;
        p->split_dim = -1;
        p->init = TRI_INIT_ZEROS;
        p->global_index = *n - 1;
    }
    return TRI_OK;
}
