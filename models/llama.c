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
#include "models/model_chunk.h"
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

int tri_llama_check(const tri_llama_config *c, const tri_train_layout *run, const tri_chunk_place *o)
{
    const char *name = c->name;
    int tp = run->tp, NH = c->num_attention_heads, NH_kv = c->num_key_value_heads;
    if (run->B < 1)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size must be >= 1 (got %lld)", (long long)run->B);
    if (run->T < 1 || run->T > c->max_position_embeddings)
        return TRI_ERR(TRI_EINVAL, "--seq-length %lld must be in [1, max_position_embeddings = %d of %s]",
                       (long long)run->T, c->max_position_embeddings, name);
    if (tp < 1 || NH % tp != 0)
        return TRI_ERR(TRI_EINVAL, "num_attention_heads %d of %s is not divisible by --tensor-model-parallel-size %d",
                       NH, name, tp);
    if (NH_kv % tp != 0 && tp % NH_kv != 0)
        return TRI_ERR(TRI_EINVAL, "num_key_value_heads %d of %s and --tensor-model-parallel-size %d: one must divide "
                       "the other (key/value heads are split over tp, or shared by tp / num_key_value_heads ranks)",
                       NH_kv, name, tp);
    if (c->intermediate_size % tp != 0)
        return TRI_ERR(TRI_EINVAL, "intermediate_size %d of %s is not divisible by --tensor-model-parallel-size %d",
                       c->intermediate_size, name, tp);
    if (run->attention != TRI_ATTENTION_FLASH)
        return TRI_ERR(TRI_EINVAL, "--attention-backend unfused: %s (a Llama) runs on the fused attention only", name);
    if (run->sequence_parallel && run->T % tp != 0)
        return TRI_ERR(TRI_EINVAL, "--sequence-parallel needs --seq-length %lld divisible by "
                       "--tensor-model-parallel-size %d", (long long)run->T, tp);
    if (o->layer_start < 0 || o->layer_end > c->num_hidden_layers || o->layer_start > o->layer_end)
        return TRI_ERR(TRI_EINVAL, "stage layers [%d, %d) outside the %d layers of %s", o->layer_start, o->layer_end,
                       c->num_hidden_layers, name);
    if (o->n_slots < 1)
        return TRI_ERR(TRI_EINVAL, "a stage needs at least one activation slot (got %d)", o->n_slots);
    /* B*T*max(Vp, 2F, W) must fit comfortably in 64-bit sizes and BLAS's int dimensions */
    int64_t widest = tri_padded_vocab(c->vocab_size, tp);
    if (2 * (int64_t)c->intermediate_size > widest)
        widest = 2 * (int64_t)c->intermediate_size;
    if ((int64_t)(NH + 2 * NH_kv) * c->head_dim > widest)
        widest = (int64_t)(NH + 2 * NH_kv) * c->head_dim;
    if (run->B > (1 << 20) || run->B * run->T > (1LL << 31) / widest * tp)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size %lld x --seq-length %lld is too large for %s",
                       (long long)run->B, (long long)run->T, name);
    return check_fused(c, tp);
}

/* ---- the passes ---- */

enum {
    LLAMA_EMBEDDING = 0,
    LLAMA_BLOCK,
    LLAMA_HEAD,              /* final norm, LM head and loss (with its backward when training) */
    LLAMA_HEAD_BACKWARD,     /* the final norm's backward */
    LLAMA_GRAD_FROM_NEXT,
    LLAMA_BLOCK_BACKWARD,
    LLAMA_EMBEDDING_BACKWARD,
    LLAMA_TIED_GRAD,         /* once per step: the tied head's share of the embedding's gradient */
};

static int add(tri_llama *m, tri_pass_list list, int kind, int index, int n, const int *units, const bool *grads)
{
    tri_pass p = {.kind = kind, .index = index, .n_units = n};
    for (int k = 0; k < n; k++) {
        p.unit[k] = units[k];
        p.grads[k] = grads[k];
    }
    return tri_chunk_add_pass(&m->chunk, list, &p);
}

#define UNITS(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (const int[]){__VA_ARGS__}
#define GRADS(...) (const bool[]){__VA_ARGS__}

/* As GPT-2's: the head's backward is fused into the loss, writing the head's gradient in the
 * forward (to the private accumulator when the tied embedding is on this stage at ZeRO 0-1). */
static int declare_passes(tri_llama *m)
{
    bool private = m->private_embed;
    int rc = TRI_OK;
    for (int eval = 0; eval < 2 && !rc; eval++) {
        tri_pass_list list = eval ? TRI_PASSES_FORWARD_EVAL : TRI_PASSES_FORWARD;
        if (m->opt.first)
            rc = add(m, list, LLAMA_EMBEDDING, 0, UNITS(m->unit_embed), GRADS(false));
        for (int l = 0; l < m->L_l && !rc; l++)
            rc = add(m, list, LLAMA_BLOCK, l, UNITS(m->unit_block0 + l), GRADS(false));
        if (!rc && m->opt.last)
            rc = add(m, list, LLAMA_HEAD, 0, UNITS(m->unit_norm, m->unit_head), GRADS(false, !eval && !private));
    }
    if (!rc) rc = m->opt.last ? add(m, TRI_PASSES_BACKWARD, LLAMA_HEAD_BACKWARD, 0, UNITS(m->unit_norm), GRADS(true))
                              : add(m, TRI_PASSES_BACKWARD, LLAMA_GRAD_FROM_NEXT, 0, 0, NULL, NULL);
    for (int l = m->L_l - 1; l >= 0 && !rc; l--)
        rc = add(m, TRI_PASSES_BACKWARD, LLAMA_BLOCK_BACKWARD, l, UNITS(m->unit_block0 + l), GRADS(true));
    if (!rc && m->opt.first)
        rc = add(m, TRI_PASSES_BACKWARD, LLAMA_EMBEDDING_BACKWARD, 0, UNITS(m->unit_embed), GRADS(true));
    if (!rc && private)
        rc = add(m, TRI_PASSES_FINISH, LLAMA_TIED_GRAD, 0, UNITS(m->unit_embed), GRADS(true));
    return rc;
}

/* ---- forward and backward ---- */

/* res3 = res2 + mlp(rmsnorm2(res2)) with res2 = x + attn(rmsnorm1(x)): one Llama decoder layer. */
static int block_forward(tri_llama *m, int l, tri_llama_block_acts *a, tri_tensor x)
{
    const tri_llama_block_weights *w = &m->w.h[l];
    tri_device *d = m->dev;
    float eps = m->cfg.rms_norm_eps;
    int rc = tri_op_rmsnorm_forward(d, a->ln1, a->ln1_rstd, x, w->ln1_w, eps);
    if (!rc) rc = tri_llama_attention_forward(&m->tp, m->tmp, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_add_rmsnorm_forward(d, a->res2, a->ln2, a->ln2_rstd, x, m->tmp, w->ln2_w,
                                             eps); /* res2 = x + attn, ln2 = rmsnorm(res2) */
    if (!rc) rc = tri_swiglu_mlp_forward(&m->tp, m->tmp, &a->mlp, a->ln2, &w->mlp, &m->ms);
    if (!rc) rc = tri_op_add(d, a->res3, a->res2, m->tmp);
    return rc;
}

/* dres (N_l, C) holds d res3 on entry and d x on return. Full recomputation first rebuilds the
 * block's activations (the same bits its forward wrote) in the shared set; the fused attention
 * leaves selective recomputation nothing to rebuild. */
static int block_backward(tri_llama *m, int l, const tri_llama_block_acts *kept, tri_tensor x, tri_tensor dres)
{
    const tri_llama_block_weights *w = &m->w.h[l], *g = &m->g.h[l];
    tri_device *d = m->dev;
    tri_llama_block_acts acts = *kept, *a = &acts;
    int rc = TRI_OK;
    if (m->run->recompute == TRI_RECOMPUTE_FULL) {
        acts = m->shared;  /* res3 into the shared set: the slot's stays as it is */
        rc = block_forward(m, l, a, x);
    }
    if (!rc) rc = tri_swiglu_mlp_backward(&m->tp, m->dln, &g->mlp, dres, &a->mlp, a->ln2, &w->mlp, &m->ms);
    if (!rc) rc = tri_op_rmsnorm_backward(d, dres, g->ln2_w, m->dln, a->res2, w->ln2_w, a->ln2_rstd);
    if (!rc) rc = tri_llama_attention_backward(&m->tp, m->dln, &g->attn, dres, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_rmsnorm_backward(d, dres, g->ln1_w, m->dln, x, w->ln1_w, a->ln1_rstd);
    return rc;
}

static tri_tensor block_input(const tri_llama_slot *s, int l)
{
    return l == 0 ? s->x_in : s->blocks[l - 1].res3;
}

static tri_tensor head_weight(const tri_llama_weights *w, const tri_llama *m)
{
    return m->cfg.tie_word_embeddings ? w->embed : w->lm_head;
}

static int head_forward(tri_llama *m, tri_llama_slot *s, bool train, float dloss)
{
    tri_tensor res = block_input(s, m->L_l);
    int rc = tri_op_rmsnorm_forward(m->dev, s->lnf, s->lnf_rstd, res, m->w.norm, m->cfg.rms_norm_eps);
    tri_tensor dhead = m->private_embed ? m->lm_dembed : head_weight(&m->g, m);
    if (!rc)
        rc = tri_lm_head_loss(&m->tp, s->losses, train ? s->dlnf : tri_tensor_none(), dhead, s->lnf,
                              head_weight(&m->w, m), s->targets, m->vocab_start, m->cfg.vocab_size, dloss, &m->ls);
    return rc;
}

static int head_backward(tri_llama *m, tri_llama_slot *s)
{
    int rc = tri_op_fill(m->dev, s->dres, 0.0f);
    if (!rc) rc = tri_op_rmsnorm_backward(m->dev, s->dres, m->g.norm, s->dlnf, block_input(s, m->L_l), m->w.norm,
                                          s->lnf_rstd);
    return rc;
}

static int run_pass(void *self, const tri_pass *p, int slot, bool train, float dloss)
{
    tri_llama *m = self;
    tri_llama_slot *s = &m->slots[slot];
    int l = p->index;
    switch (p->kind) {
    case LLAMA_EMBEDDING:
        return tri_embedding_forward(&m->tp, s->x_in, s->tokens, m->w.embed, tri_tensor_none(), m->vocab_start,
                                     m->run->T, m->ls.full_a);
    case LLAMA_BLOCK:
        return block_forward(m, l, &s->blocks[l], block_input(s, l));
    case LLAMA_HEAD:
        return head_forward(m, s, train, dloss);
    case LLAMA_HEAD_BACKWARD:
        return head_backward(m, s);
    case LLAMA_GRAD_FROM_NEXT:
        return tri_op_copy(m->dev, s->dres, s->grad_out);
    case LLAMA_BLOCK_BACKWARD:
        return block_backward(m, l, &s->blocks[l], block_input(s, l), s->dres);
    case LLAMA_EMBEDDING_BACKWARD:
        return tri_embedding_backward(&m->tp, m->g.embed, tri_tensor_none(), s->dres, s->tokens, m->vocab_start,
                                      m->run->T, m->ls.full_a);
    case LLAMA_TIED_GRAD:
        return tri_op_add(m->dev, m->g.embed, m->g.embed, m->lm_dembed);
    }
    return TRI_ERR(TRI_EINTERNAL, "llama: unknown pass %d", p->kind);
}

/* ---- the rest of the chunk interface ---- */

/* The fused views over consecutive shards (llama.h): first's data, rows of every part. */
static tri_tensor fused(tri_tensor first, int64_t rows, int64_t cols)
{
    if (!tri_tensor_present(first))
        return tri_tensor_none();
    return cols > 0 ? tri_tensor_2d(first.data, first.dtype, rows, cols) : tri_tensor_1d(first.data, first.dtype, rows);
}

static void fuse_block(const tri_llama *m, tri_llama_block_weights *b)
{
    int64_t C = m->cfg.hidden_size;
    b->attn.qkv_w = fused(b->q_w, m->W_l, C);
    b->attn.qkv_b = fused(b->q_b, m->W_l, 0);
    b->mlp.gate_up_w = fused(b->gate_w, 2 * m->F_l, C);
    b->mlp.gate_up_b = fused(b->gate_b, 2 * m->F_l, 0);
}

static void bind(void *self, int u, tri_tensor pflat, tri_tensor gflat)
{
    tri_llama *m = self;
    tri_model_bind_views(&m->chunk.layout, m->wslot, m->gslot, u, pflat, gflat);
    int l = u - m->unit_block0;
    if (m->unit_block0 >= 0 && l >= 0 && l < m->L_l) {
        fuse_block(m, &m->w.h[l]);
        if (tri_tensor_present(gflat))
            fuse_block(m, &m->g.h[l]);
    }
}

static int load_batch(void *self, int slot, const int32_t *windows)
{
    tri_llama *m = self;
    tri_llama_slot *s = &m->slots[slot];
    return tri_model_load_windows(m->dev, m->run->B, m->run->T, windows, s->tokens, s->targets);
}

static tri_tensor buffer(void *self, tri_chunk_buffer which, int slot)
{
    tri_llama *m = self;
    tri_llama_slot *s = &m->slots[slot];
    switch (which) {
    case TRI_CHUNK_ACT_IN: return s->x_in;
    case TRI_CHUNK_ACT_OUT: return m->L_l > 0 ? s->blocks[m->L_l - 1].res3 : s->x_in;
    case TRI_CHUNK_GRAD_OUT: return s->grad_out;
    case TRI_CHUNK_GRAD_IN: return s->dres;
    case TRI_CHUNK_LOSSES: return s->losses;
    }
    return tri_tensor_none();
}

static int zero_private(void *self)
{
    tri_llama *m = self;
    return m->private_embed ? tri_op_fill(m->dev, m->lm_dembed, 0.0f) : TRI_OK;
}

/* ---- creation ---- */

/* The parameters the fused views join must be consecutive in the flat buffers, which check_fused's
 * arithmetic promises: checked here against the real layout. */
static int check_consecutive(const tri_llama *m)
{
    const tri_param_layout *L = &m->chunk.layout;
    static const char *const groups[][3] = {{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
                                            {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},
                                            {"mlp.gate_proj.weight", "mlp.up_proj.weight", NULL},
                                            {"mlp.gate_proj.bias", "mlp.up_proj.bias", NULL}};
    char name[TRI_PARAM_NAME_MAX];
    for (int l = 0; l < m->L_l; l++)
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
            for (int k = 0; k + 1 < 3 && groups[g][k + 1]; k++) {
                snprintf(name, sizeof name, "model.layers.%d.%s", m->opt.layer_start + l, groups[g][k]);
                int a = tri_layout_find(L, name);
                snprintf(name, sizeof name, "model.layers.%d.%s", m->opt.layer_start + l, groups[g][k + 1]);
                int b = tri_layout_find(L, name);
                if ((a < 0) != (b < 0) ||
                    (a >= 0 && L->params[a].offset + L->params[a].numel != L->params[b].offset))
                    return TRI_ERR(TRI_EINTERNAL, "llama: %s does not follow the previous shard in the flat buffer", name);
            }
    return TRI_OK;
}

/* The rotary tables cos, sin (T, HS/2) of the config's theta and scaling (layers/rotary.h). */
static int fill_rotary(tri_llama *m)
{
    int64_t T = m->run->T, half = m->HS / 2;
    float *inv = malloc((size_t)half * sizeof *inv), *c = malloc((size_t)(T * half) * sizeof *c),
          *s = malloc((size_t)(T * half) * sizeof *s);
    int rc = inv && c && s ? TRI_OK : TRI_ERR(TRI_ENOMEM, "llama: out of memory for the rotary tables");
    if (!rc) {
        tri_rope_inv_freq(inv, m->HS, m->cfg.rope_theta, &m->cfg.rope_scaling);
        tri_rope_tables(c, s, T, half, inv);
        rc = tri_device_copy_from_host(m->dev, m->cos, c);
        if (!rc) rc = tri_device_copy_from_host(m->dev, m->sin, s);
    }
    free(inv);
    free(c);
    free(s);
    return rc;
}

static int setup(tri_llama *m, const tri_llama_config *cfg, const tri_train_layout *run, const tri_chunk_place *opt,
                 tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    int tp = tp_comm->size, tp_rank = tp_comm->rank;
    if (tp != run->tp)
        return TRI_ERR(TRI_EINTERNAL, "llama: a tensor-parallel group of %d ranks for a layout of tp %d", tp, run->tp);
    int rc = tri_llama_check(cfg, run, opt);
    if (rc)
        return rc;
    m->cfg = *cfg;
    m->opt = *opt;
    m->dev = dev;
    m->tp = (tri_tp){.dev = dev, .comm = tp_comm, .sp = run->sequence_parallel && tp > 1};
    m->Vp = tri_padded_vocab(cfg->vocab_size, tp);
    m->V_l = m->Vp / tp;
    m->vocab_start = m->V_l * tp_rank;
    m->N = run->B * run->T;
    m->N_l = tri_tp_rows(&m->tp, m->N);
    m->HS = cfg->head_dim;
    m->NH_l = cfg->num_attention_heads / tp;
    m->NH_kv_l = kv_heads_local(cfg, tp);
    m->Q_l = m->NH_l * m->HS;
    m->KV_l = m->NH_kv_l * m->HS;
    m->W_l = m->Q_l + 2 * m->KV_l;
    m->F_l = cfg->intermediate_size / tp;
    m->L_l = opt->layer_end - opt->layer_start;

    tri_param_spec *specs = NULL;
    tri_param_layout layout;
    int n = 0;
    rc = tri_llama_param_specs(cfg, tp, opt, &specs, &n);
    if (!rc) rc = tri_layout_create(&layout, specs, n, tp, tp_rank, run->dp, opt->dp_rank);
    free(specs);
    if (rc)
        return rc;
    tri_chunk_begin(&m->chunk, run, opt, tri_llama_num_param_tensors(cfg), &layout);
    m->has_chunk = true;
    m->run = &m->chunk.run;

    m->w.h = calloc((size_t)m->L_l + 1, sizeof *m->w.h);
    m->g.h = calloc((size_t)m->L_l + 1, sizeof *m->g.h);
    m->slots = calloc((size_t)opt->n_slots, sizeof *m->slots);
    m->wslot = calloc((size_t)layout.n + 1, sizeof *m->wslot);
    m->gslot = calloc((size_t)layout.n + 1, sizeof *m->gslot);
    if (!m->w.h || !m->g.h || !m->slots || !m->wslot || !m->gslot)
        return TRI_ERR(TRI_ENOMEM, "llama: out of memory");
    tri_llama_map_views(m);
    rc = check_consecutive(m);
    if (rc)
        return rc;
    for (int s = 0; s < opt->n_slots; s++) {
        m->slots[s].blocks = calloc((size_t)m->L_l + 1, sizeof *m->slots[s].blocks);
        if (!m->slots[s].blocks)
            return TRI_ERR(TRI_ENOMEM, "llama: out of memory");
    }
    m->private_embed = cfg->tie_word_embeddings && opt->first && opt->last && run->zero_stage < 2 &&
                       !run->deterministic;
    rc = declare_passes(m);
    if (rc)
        return rc;
    tri_chunk_model model = {.self = m, .take_buffers = tri_llama_take_buffers, .bind = bind, .run = run_pass,
                             .load_batch = load_batch, .buffer = buffer, .zero_private = zero_private};
    rc = tri_chunk_build(&m->chunk, &model, dev, dp_comm);
    if (!rc && dev && m->L_l > 0)
        rc = fill_rotary(m);
    return rc;
}

int tri_llama_create(tri_llama **out, const tri_llama_config *cfg, const tri_train_layout *run,
                     const tri_chunk_place *opt, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    *out = NULL;
    tri_llama *m = calloc(1, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "llama: out of memory");
    int rc = setup(m, cfg, run, opt, dev, tp_comm, dp_comm);
    if (rc) {
        tri_llama_destroy(m);
        return rc;
    }
    *out = m;
    return TRI_OK;
}

void tri_llama_destroy(tri_llama *m)
{
    if (!m)
        return;
    if (m->has_chunk)
        tri_chunk_destroy(&m->chunk);
    for (int s = 0; m->slots && s < m->opt.n_slots; s++)
        free(m->slots[s].blocks);
    free(m->slots);
    free(m->w.h);
    free(m->g.h);
    free(m->wslot);
    free(m->gslot);
    free(m);
}
