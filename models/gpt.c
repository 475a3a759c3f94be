/* models/gpt.c - GPT-2 as a model chunk (see gpt.h): its passes and what they compute. The engine
 * (engine/train/chunk.h) acquires each pass's units and releases them; the parameters' descriptions and
 * views are in gpt_params.c, the buffers in gpt_buffers.c. */
#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/core/status.h"
#include "layers/embedding.h"
#include "models/model_chunk.h"
#include "partitioner/layout.h"

int tri_gpt_check(const tri_gpt_config *cfg, const tri_train_layout *run, const tri_chunk_place *o)
{
    const char *name = cfg->name;
    int tp = run->tp;
    if (run->B < 1)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size must be >= 1 (got %lld)", (long long)run->B);
    if (run->T < 1 || run->T > cfg->n_positions)
        return TRI_ERR(TRI_EINVAL, "--seq-length %lld must be in [1, n_positions = %d of %s]",
                       (long long)run->T, cfg->n_positions, name);
    if (tp < 1 || cfg->n_head % tp != 0)
        return TRI_ERR(TRI_EINVAL, "n_head %d of %s is not divisible by --tensor-model-parallel-size %d",
                       cfg->n_head, name, tp);
    if (cfg->n_embd % tp != 0)
        return TRI_ERR(TRI_EINVAL, "n_embd %d of %s is not divisible by --tensor-model-parallel-size %d",
                       cfg->n_embd, name, tp);
    if (run->sequence_parallel && run->T % tp != 0)
        return TRI_ERR(TRI_EINVAL, "--sequence-parallel needs --seq-length %lld divisible by "
                       "--tensor-model-parallel-size %d", (long long)run->T, tp);
    if (o->layer_start < 0 || o->layer_end > cfg->n_layer || o->layer_start > o->layer_end)
        return TRI_ERR(TRI_EINVAL, "stage layers [%d, %d) outside the %d layers of %s", o->layer_start,
                       o->layer_end, cfg->n_layer, name);
    if (o->n_slots < 1)
        return TRI_ERR(TRI_EINVAL, "a stage needs at least one activation slot (got %d)", o->n_slots);
    /* B*T*max(Vp, 4C, NH*T) must fit comfortably in 64-bit sizes and BLAS's int dimensions */
    int64_t widest = tri_gpt_padded_vocab(cfg->vocab_size, tp);
    if (4 * (int64_t)cfg->n_embd > widest)
        widest = 4 * (int64_t)cfg->n_embd;
    if (run->B > (1 << 20) || run->B * run->T > (1LL << 31) / (widest > 0 ? widest : 1) * tp)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size %lld x --seq-length %lld is too large for %s",
                       (long long)run->B, (long long)run->T, name);
    return TRI_OK;
}

/* ---- the passes ---- */

/* What each pass computes (tri_pass.kind). */
enum {
    GPT_EMBEDDING = 0,     /* token + position embedding: x_in */
    GPT_BLOCK,             /* block p->index */
    GPT_HEAD,              /* final layernorm, LM head and loss (with its backward when training) */
    GPT_HEAD_BACKWARD,     /* the final layernorm's backward */
    GPT_GRAD_FROM_NEXT,    /* a stage without the head: the residual gradient received */
    GPT_BLOCK_BACKWARD,
    GPT_EMBEDDING_BACKWARD,
    GPT_TIED_GRAD,         /* once per step: the LM head's share of wte's gradient added */
};

static int add(tri_gpt *m, tri_pass_list list, int kind, int index, int n, const int *units, const bool *grads)
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

/* The forward (training and evaluation), the backward and the step's finish, as llm.c's gpt2_forward
 * and gpt2_backward list them, cut where the units change. The LM head writes wte's gradient in the
 * forward (its backward is fused into the loss), into wte's unit or, when this stage also holds the
 * embedding at ZeRO 0-1, into a private accumulator added once per step (gpt.h). */
static int declare_passes(tri_gpt *m)
{
    bool private = m->private_wte;
    int rc = TRI_OK;
    for (int eval = 0; eval < 2 && !rc; eval++) {
        tri_pass_list list = eval ? TRI_PASSES_FORWARD_EVAL : TRI_PASSES_FORWARD;
        if (m->opt.first)
            rc = add(m, list, GPT_EMBEDDING, 0, UNITS(m->unit_wte, m->unit_wpe), GRADS(false, false));
        for (int l = 0; l < m->L_l && !rc; l++)
            rc = add(m, list, GPT_BLOCK, l, UNITS(m->unit_block0 + l), GRADS(false));
        if (!rc && m->opt.last)
            rc = add(m, list, GPT_HEAD, 0, UNITS(m->unit_lnf, m->unit_wte), GRADS(false, !eval && !private));
    }
    if (!rc) rc = m->opt.last ? add(m, TRI_PASSES_BACKWARD, GPT_HEAD_BACKWARD, 0, UNITS(m->unit_lnf), GRADS(true))
                              : add(m, TRI_PASSES_BACKWARD, GPT_GRAD_FROM_NEXT, 0, 0, NULL, NULL);
    for (int l = m->L_l - 1; l >= 0 && !rc; l--)
        rc = add(m, TRI_PASSES_BACKWARD, GPT_BLOCK_BACKWARD, l, UNITS(m->unit_block0 + l), GRADS(true));
    if (!rc && m->opt.first)
        rc = add(m, TRI_PASSES_BACKWARD, GPT_EMBEDDING_BACKWARD, 0, UNITS(m->unit_wte, m->unit_wpe), GRADS(true, true));
    if (!rc && private)
        rc = add(m, TRI_PASSES_FINISH, GPT_TIED_GRAD, 0, UNITS(m->unit_wte), GRADS(true));
    return rc;
}

/* ---- forward and backward ---- */

int tri_gpt_load_batch(tri_gpt *m, int slot, const int32_t *windows)
{
    tri_gpt_slot *s = &m->slots[slot];
    return tri_model_load_windows(m->dev, m->run->B, m->run->T, windows, s->tokens, s->targets);
}

/* res3 = x + attn(ln1(x)) + mlp(ln2(x + attn(ln1(x)))), one GPT-2 block (pre-LN). */
static int block_forward(tri_gpt *m, int l, tri_gpt_block_acts *a, tri_tensor x)
{
    const tri_gpt_block_weights *w = &m->w.h[l];
    tri_device *d = m->dev;
    int rc = tri_op_layernorm_forward(d, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b);
    if (!rc) rc = tri_attention_forward(&m->tp, m->tmp, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_add_layernorm_forward(d, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x, m->tmp, w->ln2_w,
                                               w->ln2_b); /* res2 = x + attn, ln2 = layernorm(res2) */
    if (!rc) rc = tri_mlp_forward(&m->tp, m->tmp, &a->mlp, a->ln2, &w->mlp, &m->ms);
    if (!rc) rc = tri_op_add(d, a->res3, a->res2, m->tmp);
    return rc;
}

/* Rebuilds what recomputation dropped from block l's activations: the whole block (writing the
 * same values, bit for bit, as its forward did) or the attention softmax (nothing with the fused
 * core, which drops none). */
static int recompute_block(tri_gpt *m, int l, tri_gpt_block_acts *a, tri_tensor x)
{
    if (m->run->recompute == TRI_RECOMPUTE_FULL) {
        tri_gpt_block_acts work = m->shared;  /* res3 into the shared buffer: the slot's stays as it is */
        *a = work;
        return block_forward(m, l, a, x);
    }
    if (tri_layout_recomputes(m->run) == TRI_RECOMPUTE_SELECTIVE)
        return tri_op_attention_forward(m->dev, a->attn.atty, a->attn.att, a->attn.qkv);
    return TRI_OK;
}

/* dres (N_l, C) holds d res3 on entry and d x on return (the residual stream's gradient). */
static int block_backward(tri_gpt *m, int l, const tri_gpt_block_acts *kept, tri_tensor x, tri_tensor dres)
{
    const tri_gpt_block_weights *w = &m->w.h[l], *g = &m->g.h[l];
    tri_device *d = m->dev;
    tri_gpt_block_acts acts = *kept, *a = &acts;
    int rc = recompute_block(m, l, a, x);
    if (!rc) rc = tri_mlp_backward(&m->tp, m->dln, &g->mlp, dres, &a->mlp, a->ln2, &w->mlp, &m->ms);
    if (!rc) rc = tri_op_layernorm_backward(d, dres, g->ln2_w, g->ln2_b, m->dln, a->res2, w->ln2_w,
                                            a->ln2_mean, a->ln2_rstd);
    if (!rc) rc = tri_attention_backward(&m->tp, m->dln, &g->attn, dres, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_layernorm_backward(d, dres, g->ln1_w, g->ln1_b, m->dln, x, w->ln1_w,
                                            a->ln1_mean, a->ln1_rstd);
    return rc;
}

static tri_tensor block_input(const tri_gpt_slot *s, int l)
{
    return l == 0 ? s->x_in : s->blocks[l - 1].res3;
}

/* The last stage's head: final layernorm, LM head and loss (when training, with the head's
 * backward, its wte gradient going to the private accumulator or to wte's unit). */
static int head_forward(tri_gpt *m, tri_gpt_slot *s, bool train, float dloss)
{
    tri_tensor res = block_input(s, m->L_l);
    int rc = tri_op_layernorm_forward(m->dev, s->lnf, s->lnf_mean, s->lnf_rstd, res, m->w.lnf_w, m->w.lnf_b);
    tri_tensor dwte = m->private_wte ? m->lm_dwte : m->g.wte;
    if (!rc)
        rc = tri_lm_head_loss(&m->tp, s->losses, train ? s->dlnf : tri_tensor_none(), dwte, s->lnf, m->w.wte,
                              s->targets, m->vocab_start, m->cfg.vocab_size, dloss, &m->ls);
    return rc;
}

static int head_backward(tri_gpt *m, tri_gpt_slot *s)
{
    int rc = tri_op_fill(m->dev, s->dres, 0.0f);
    if (!rc) rc = tri_op_layernorm_backward(m->dev, s->dres, m->g.lnf_w, m->g.lnf_b, s->dlnf, block_input(s, m->L_l),
                                            m->w.lnf_w, s->lnf_mean, s->lnf_rstd);
    return rc;
}

/* Runs one pass (engine/train/chunk.h) on the micro-batch in slot, its units bound to m->w and m->g. */
static int run_pass(void *self, const tri_pass *p, int slot, bool train, float dloss)
{
    tri_gpt *m = self;
    tri_gpt_slot *s = &m->slots[slot];
    int l = p->index;
    switch (p->kind) {
    case GPT_EMBEDDING:
        return tri_embedding_forward(&m->tp, s->x_in, s->tokens, m->w.wte, m->w.wpe, m->vocab_start, m->run->T,
                                     m->ls.full_a);
    case GPT_BLOCK:
        return block_forward(m, l, &s->blocks[l], block_input(s, l));
    case GPT_HEAD:
        return head_forward(m, s, train, dloss);
    case GPT_HEAD_BACKWARD:
        return head_backward(m, s);
    case GPT_GRAD_FROM_NEXT:
        return tri_op_copy(m->dev, s->dres, s->grad_out);
    case GPT_BLOCK_BACKWARD:
        return block_backward(m, l, &s->blocks[l], block_input(s, l), s->dres);
    case GPT_EMBEDDING_BACKWARD:
        return tri_embedding_backward(&m->tp, m->g.wte, m->g.wpe, s->dres, s->tokens, m->vocab_start, m->run->T,
                                      m->ls.full_a);
    case GPT_TIED_GRAD:
        /* wte's gradient = the embedding's share + the LM head's, added once per step as the
         * embedding group adds two stages' shares */
        return tri_op_add(m->dev, m->g.wte, m->g.wte, m->lm_dwte);
    }
    return TRI_ERR(TRI_EINTERNAL, "gpt: unknown pass %d", p->kind);
}

/* ---- the rest of the chunk interface ---- */

/* Views of unit u's parameters in pflat (and gradients in gflat, when present), u's flat layout. */
static void bind(void *self, int u, tri_tensor pflat, tri_tensor gflat)
{
    tri_gpt *m = self;
    tri_model_bind_views(&m->chunk.layout, m->wslot, m->gslot, u, pflat, gflat);
}

static int load_batch(void *self, int slot, const int32_t *windows)
{
    return tri_gpt_load_batch(self, slot, windows);
}

static tri_tensor buffer(void *self, tri_chunk_buffer which, int slot)
{
    tri_gpt *m = self;
    tri_gpt_slot *s = &m->slots[slot];
    switch (which) {
    case TRI_CHUNK_ACT_IN: return s->x_in;
    case TRI_CHUNK_ACT_OUT: return m->L_l > 0 ? s->blocks[m->L_l - 1].res3 : s->x_in;
    case TRI_CHUNK_GRAD_OUT: return s->grad_out;
    case TRI_CHUNK_GRAD_IN: return s->dres;
    case TRI_CHUNK_LOSSES: return s->losses;
    }
    return tri_tensor_none();
}

/* The LM head's private accumulator of wte's gradient starts each step at zero. */
static int zero_private(void *self)
{
    tri_gpt *m = self;
    return m->private_wte ? tri_op_fill(m->dev, m->lm_dwte, 0.0f) : TRI_OK;
}

/* ---- creation ---- */

/* Sizes every buffer (dev NULL: planning only, nothing allocated) or builds the chunk. */
static int setup(tri_gpt *m, const tri_gpt_config *cfg, const tri_train_layout *run, const tri_chunk_place *opt,
                 tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    int tp = tp_comm->size, tp_rank = tp_comm->rank;
    if (tp != run->tp)
        return TRI_ERR(TRI_EINTERNAL, "gpt: a tensor-parallel group of %d ranks for a layout of tp %d", tp, run->tp);
    int rc = tri_gpt_check(cfg, run, opt);
    if (rc)
        return rc;
    m->cfg = *cfg;
    m->opt = *opt;
    m->dev = dev;
    m->tp = (tri_tp){.dev = dev, .comm = tp_comm, .sp = run->sequence_parallel && tp > 1};
    m->Vp = tri_gpt_padded_vocab(cfg->vocab_size, tp);
    m->V_l = m->Vp / tp;
    m->vocab_start = m->V_l * tp_rank;
    m->N = run->B * run->T;
    m->N_l = tri_tp_rows(&m->tp, m->N);
    m->C_l = cfg->n_embd / tp;
    m->NH_l = cfg->n_head / tp;
    m->L_l = opt->layer_end - opt->layer_start;

    tri_param_spec *specs = NULL;
    tri_param_layout layout;
    int n = 0;
    rc = tri_gpt_param_specs(cfg, tp, opt, &specs, &n);
    if (!rc) rc = tri_layout_create(&layout, specs, n, tp, tp_rank, run->dp, opt->dp_rank);
    free(specs);
    if (rc)
        return rc;
    tri_chunk_begin(&m->chunk, run, opt, tri_gpt_num_param_tensors(cfg), &layout); /* it owns the layout now */
    m->has_chunk = true;
    m->run = &m->chunk.run;

    m->w.h = calloc((size_t)m->L_l + 1, sizeof *m->w.h);
    m->g.h = calloc((size_t)m->L_l + 1, sizeof *m->g.h);
    m->slots = calloc((size_t)opt->n_slots, sizeof *m->slots);
    m->wslot = calloc((size_t)layout.n + 1, sizeof *m->wslot);
    m->gslot = calloc((size_t)layout.n + 1, sizeof *m->gslot);
    if (!m->w.h || !m->g.h || !m->slots || !m->wslot || !m->gslot)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    tri_gpt_map_views(m);
    for (int s = 0; s < opt->n_slots; s++) {
        m->slots[s].blocks = calloc((size_t)m->L_l + 1, sizeof *m->slots[s].blocks);
        if (!m->slots[s].blocks)
            return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    }
    /* ZeRO 0-1 keep whole gradients: the LM head's share of wte gets its own accumulator (gpt.h);
     * ZeRO 2-3 reduce the head's share from wte's bucket after each forward instead, and
     * deterministic mode sums every pass's bucket exactly anyway */
    m->private_wte = opt->first && opt->last && run->zero_stage < 2 && !run->deterministic;
    rc = declare_passes(m);
    if (rc)
        return rc;
    tri_chunk_model model = {.self = m, .take_buffers = tri_gpt_take_buffers, .bind = bind, .run = run_pass,
                             .load_batch = load_batch, .buffer = buffer,
                             .zero_private = zero_private};
    return tri_chunk_build(&m->chunk, &model, dev, dp_comm);
}

int tri_gpt_create(tri_gpt **out, const tri_gpt_config *cfg, const tri_train_layout *run,
                   const tri_chunk_place *opt, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    *out = NULL;
    tri_gpt *m = calloc(1, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    int rc = setup(m, cfg, run, opt, dev, tp_comm, dp_comm);
    if (rc) {
        tri_gpt_destroy(m);
        return rc;
    }
    *out = m;
    return TRI_OK;
}

void tri_gpt_destroy(tri_gpt *m)
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

/* ---- sampling ---- */

int tri_gpt_read_logits_row(tri_gpt *m, int64_t row, float *logits)
{
    if (!m->opt.last)
        return TRI_ERR(TRI_EINVAL, "logits live on the last pipeline stage");
    return tri_model_logits_row(&m->tp, m->ls.logits, m->N, m->V_l, m->cfg.vocab_size, row, logits);
}
