/* models/gpt.c - GPT-2 as a tensor-parallel pipeline stage (see gpt.h). */
#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/status.h"
#include "layers/embedding.h"
#include "partitioner/layout.h"

/* ---- parameter descriptions ---- */

typedef struct spec_list {
    tri_param_spec *v;
    int n, cap;
} spec_list;

static int add_spec(spec_list *l, const char *name, int ndim, const int64_t *shape, int split,
                    bool decay, tri_init_kind init, float std)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        tri_param_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return TRI_ERR(TRI_ENOMEM, "gpt: out of memory for parameter descriptions");
        l->v = v;
        l->cap = cap;
    }
    tri_param_spec *s = &l->v[l->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        s->shape[d] = shape[d];
    s->split_dim = split;
    s->weight_decay = decay;
    s->init = init;
    s->init_std = std;
    s->init_rows = shape[0];
    return TRI_OK;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define ADD(l, name, split, decay, init, std, ...) \
    add_spec((l), (name), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), (split), (decay), (init), (std))

/* Global order of the model's parameters: wte, wpe, the blocks' 12 each, ln_f.w, ln_f.b. */
#define BLOCK_PARAMS 12

int tri_gpt_num_param_tensors(const tri_gpt_config *cfg)
{
    return 4 + BLOCK_PARAMS * cfg->n_layer;
}

static int global_index(const tri_gpt_config *cfg, const char *name)
{
    static const char *block[BLOCK_PARAMS] = {"ln_1.w", "ln_1.b", "attn.c_attn.w", "attn.c_attn.b",
                                              "attn.c_proj.w", "attn.c_proj.b", "ln_2.w", "ln_2.b",
                                              "mlp.c_fc.w", "mlp.c_fc.b", "mlp.c_proj.w", "mlp.c_proj.b"};
    if (strcmp(name, "wte") == 0)
        return 0;
    if (strcmp(name, "wpe") == 0)
        return 1;
    if (strcmp(name, "ln_f.w") == 0)
        return 2 + BLOCK_PARAMS * cfg->n_layer;
    if (strcmp(name, "ln_f.b") == 0)
        return 3 + BLOCK_PARAMS * cfg->n_layer;
    int layer = 0, used = 0;
    if (sscanf(name, "h.%d.%n", &layer, &used) == 1 && used > 0)
        for (int j = 0; j < BLOCK_PARAMS; j++)
            if (strcmp(name + used, block[j]) == 0)
                return 2 + BLOCK_PARAMS * layer + j;
    return -1;
}

static int add_block_specs(spec_list *l, const tri_gpt_config *cfg, int i)
{
    int64_t C = cfg->n_embd;
    float std = cfg->init_std;
    float proj_std = std / sqrtf(2.0f * (float)cfg->n_layer); /* GPT-2's residual-projection scaling */
    char n[TRI_PARAM_NAME_MAX];
    int rc = TRI_OK;
#define NAME(suffix) (snprintf(n, sizeof n, "h.%d.%s", i, suffix), n)
    if (!rc) rc = ADD(l, NAME("ln_1.w"), -1, false, TRI_INIT_ONES, 0, C);
    if (!rc) rc = ADD(l, NAME("ln_1.b"), -1, false, TRI_INIT_ZEROS, 0, C);
    if (!rc) rc = ADD(l, NAME("attn.c_attn.w"), 1, true, TRI_INIT_NORMAL, std, 3, C, C);
    if (!rc) rc = ADD(l, NAME("attn.c_attn.b"), 1, false, TRI_INIT_ZEROS, 0, 3, C);
    if (!rc) rc = ADD(l, NAME("attn.c_proj.w"), 1, true, TRI_INIT_NORMAL, proj_std, C, C);
    if (!rc) rc = ADD(l, NAME("attn.c_proj.b"), -1, false, TRI_INIT_ZEROS, 0, C);
    if (!rc) rc = ADD(l, NAME("ln_2.w"), -1, false, TRI_INIT_ONES, 0, C);
    if (!rc) rc = ADD(l, NAME("ln_2.b"), -1, false, TRI_INIT_ZEROS, 0, C);
    if (!rc) rc = ADD(l, NAME("mlp.c_fc.w"), 0, true, TRI_INIT_NORMAL, std, 4 * C, C);
    if (!rc) rc = ADD(l, NAME("mlp.c_fc.b"), 0, false, TRI_INIT_ZEROS, 0, 4 * C);
    if (!rc) rc = ADD(l, NAME("mlp.c_proj.w"), 1, true, TRI_INIT_NORMAL, proj_std, C, 4 * C);
    if (!rc) rc = ADD(l, NAME("mlp.c_proj.b"), -1, false, TRI_INIT_ZEROS, 0, C);
#undef NAME
    return rc;
}

/* wte: the embedding's table, or (on a last stage without the embedding) the LM head's copy. */
static int add_wte(spec_list *l, const tri_gpt_config *cfg, int tp, const tri_gpt_options *opt)
{
    int64_t C = cfg->n_embd, Vp = tri_gpt_padded_vocab(cfg->vocab_size, tp);
    int rc = ADD(l, "wte", 0, true, TRI_INIT_NORMAL, cfg->init_std, Vp, C);
    if (!rc) {
        l->v[l->n - 1].init_rows = cfg->vocab_size;       /* padding rows stay zero */
        l->v[l->n - 1].tied = !(opt->first && opt->last); /* wte on two pipeline stages */
        l->v[l->n - 1].tied_copy = !opt->first;           /* the LM head's copy on the last stage */
    }
    return rc;
}

/* Gives the specs added since the last call (from *done on) the next unit number. */
static void close_unit(spec_list *l, int *done, int *unit)
{
    for (; *done < l->n; (*done)++)
        l->v[*done].unit = *unit;
    (*unit)++;
}

/* Units, numbered in the stage's order: wte and wpe (first stage) one each, then one per block,
 * then ln_f and, on a last stage without the embedding, the LM head's copy of wte. wte is a unit
 * of its own on both stages, so both cut it into the same data-parallel slices and the tied
 * gradient can be summed over the embedding group slice by slice (ZeRO-2/3). */
int tri_gpt_param_specs(const tri_gpt_config *cfg, int tp, const tri_gpt_options *opt,
                        tri_param_spec **specs, int *n)
{
    spec_list l = {0};
    int64_t C = cfg->n_embd;
    int L_l = opt->layer_end - opt->layer_start, rc = TRI_OK, unit = 0, done = 0;
    if (opt->first) {
        rc = add_wte(&l, cfg, tp, opt);
        close_unit(&l, &done, &unit);
        if (!rc) rc = ADD(&l, "wpe", -1, true, TRI_INIT_NORMAL, cfg->init_std, cfg->n_positions, C);
        close_unit(&l, &done, &unit);
    }
    for (int k = 0; k < L_l && !rc; k++) {
        rc = add_block_specs(&l, cfg, opt->layer_start + k);
        close_unit(&l, &done, &unit);
    }
    if (!rc && opt->last) {
        rc = ADD(&l, "ln_f.w", -1, false, TRI_INIT_ONES, 0, C);
        if (!rc) rc = ADD(&l, "ln_f.b", -1, false, TRI_INIT_ZEROS, 0, C);
        close_unit(&l, &done, &unit);
        if (!rc && !opt->first) {
            rc = add_wte(&l, cfg, tp, opt);
            close_unit(&l, &done, &unit);
        }
    }
    for (int i = 0; i < l.n && !rc; i++) {
        l.v[i].global_index = global_index(cfg, l.v[i].name);
        if (l.v[i].global_index < 0)
            rc = TRI_ERR(TRI_EINTERNAL, "gpt: parameter %s has no global index", l.v[i].name);
    }
    if (rc) {
        free(l.v);
        return rc;
    }
    *specs = l.v;
    *n = l.n;
    return TRI_OK;
}

int tri_gpt_check(const tri_gpt_config *cfg, int tp, const tri_gpt_options *o)
{
    const char *name = cfg->name;
    if (o->B < 1)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size must be >= 1 (got %lld)", (long long)o->B);
    if (o->T < 1 || o->T > cfg->n_positions)
        return TRI_ERR(TRI_EINVAL, "--seq-length %lld must be in [1, n_positions = %d of %s]",
                       (long long)o->T, cfg->n_positions, name);
    if (cfg->n_head % tp != 0)
        return TRI_ERR(TRI_EINVAL, "n_head %d of %s is not divisible by --tensor-model-parallel-size %d",
                       cfg->n_head, name, tp);
    if (cfg->n_embd % tp != 0)
        return TRI_ERR(TRI_EINVAL, "n_embd %d of %s is not divisible by --tensor-model-parallel-size %d",
                       cfg->n_embd, name, tp);
    if (o->sequence_parallel && o->T % tp != 0)
        return TRI_ERR(TRI_EINVAL, "--sequence-parallel needs --seq-length %lld divisible by "
                       "--tensor-model-parallel-size %d", (long long)o->T, tp);
    if (o->layer_start < 0 || o->layer_end > cfg->n_layer || o->layer_start > o->layer_end)
        return TRI_ERR(TRI_EINVAL, "stage layers [%d, %d) outside the %d layers of %s", o->layer_start,
                       o->layer_end, cfg->n_layer, name);
    if (o->n_slots < 1)
        return TRI_ERR(TRI_EINVAL, "a stage needs at least one activation slot (got %d)", o->n_slots);
    /* B*T*max(Vp, 4C, NH*T) must fit comfortably in 64-bit sizes and BLAS's int dimensions */
    int64_t widest = tri_gpt_padded_vocab(cfg->vocab_size, tp);
    if (4 * (int64_t)cfg->n_embd > widest)
        widest = 4 * (int64_t)cfg->n_embd;
    if (o->B > (1 << 20) || o->B * o->T > (1LL << 31) / (widest > 0 ? widest : 1) * tp)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size %lld x --seq-length %lld is too large for %s",
                       (long long)o->B, (long long)o->T, name);
    return TRI_OK;
}

/* ---- buffers: planned, then taken again for real (engine/arena.h) ---- */

#define TAKE(m, kind, t, dtype, ...) \
    tri_arena_take(&(m)->arena, (kind), (t), (dtype), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

static int take_block_acts(tri_gpt *m, tri_gpt_block_acts *a)
{
    int64_t B = m->opt.B, T = m->opt.T, C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    int rc = TAKE(m, K, &a->ln1, TRI_F32, N_l, C);
    if (!rc) rc = TAKE(m, K, &a->ln1_mean, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->ln1_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->attn.qkv, TRI_F32, B, T, 3 * m->C_l);
    if (!rc) rc = TAKE(m, K, &a->attn.att, TRI_F32, B, m->NH_l, T, T);
    if (!rc) rc = TAKE(m, K, &a->attn.atty, TRI_F32, B, T, m->C_l);
    if (!rc) rc = TAKE(m, K, &a->res2, TRI_F32, N_l, C);
    if (!rc) rc = TAKE(m, K, &a->ln2, TRI_F32, N_l, C);
    if (!rc) rc = TAKE(m, K, &a->ln2_mean, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->ln2_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->mlp.fch, TRI_F32, N, 4 * m->C_l);
    if (!rc) rc = TAKE(m, K, &a->mlp.fch_gelu, TRI_F32, N, 4 * m->C_l);
    if (!rc) rc = TAKE(m, K, &a->res3, TRI_F32, N_l, C);
    return rc;
}

static int take_slot(tri_gpt *m, tri_gpt_slot *s)
{
    int64_t C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    int rc = TAKE(m, K, &s->tokens, TRI_I32, N);
    if (!rc) rc = TAKE(m, K, &s->targets, TRI_I32, N);
    if (!rc) rc = TAKE(m, K, &s->x_in, TRI_F32, N_l, C);
    for (int l = 0; l < m->L_l && !rc; l++)
        rc = take_block_acts(m, &s->blocks[l]);
    if (!rc && m->opt.last) {
        rc = TAKE(m, K, &s->lnf, TRI_F32, N_l, C);
        if (!rc) rc = TAKE(m, K, &s->lnf_mean, TRI_F32, N_l);
        if (!rc) rc = TAKE(m, K, &s->lnf_rstd, TRI_F32, N_l);
        if (!rc) rc = TAKE(m, K, &s->dlnf, TRI_F32, N_l, C);
        if (!rc) rc = TAKE(m, K, &s->losses, TRI_F32, N);
    }
    if (!rc && !m->opt.last) rc = TAKE(m, TRI_MEM_COMM, &s->grad_out, TRI_F32, N_l, C);
    if (!rc) rc = TAKE(m, K, &s->dres, TRI_F32, N_l, C);
    return rc;
}

static int take_scratch(tri_gpt *m)
{
    int64_t B = m->opt.B, T = m->opt.T, C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_WORKSPACE;
    int rc = TAKE(m, K, &m->tmp, TRI_F32, N_l, C);
    if (!rc) rc = TAKE(m, K, &m->dln, TRI_F32, N_l, C);
    if (!rc) rc = TAKE(m, K, &m->as.dqkv, TRI_F32, B, T, 3 * m->C_l);
    if (!rc) rc = TAKE(m, K, &m->as.datt, TRI_F32, B, m->NH_l, T, T);
    if (!rc) rc = TAKE(m, K, &m->as.datty, TRI_F32, B, T, m->C_l);
    if (!rc) rc = TAKE(m, K, &m->ms.dh, TRI_F32, N, 4 * m->C_l);
    tri_tensor full_a = tri_tensor_none(), full_b = tri_tensor_none();
    if (!rc && m->tp.sp && tri_tp_size(&m->tp) > 1) {
        rc = TAKE(m, TRI_MEM_COMM, &full_a, TRI_F32, N, C);
        if (!rc) rc = TAKE(m, TRI_MEM_COMM, &full_b, TRI_F32, N, C);
    }
    m->as.full_a = m->ms.full_a = m->ls.full_a = full_a;
    m->as.full_b = m->ms.full_b = m->ls.full_b = full_b;
    m->lm_dwte = tri_tensor_none();
    if (!rc && m->opt.first && m->opt.last)
        rc = TAKE(m, TRI_MEM_GRADS, &m->lm_dwte, TRI_F32, m->V_l, C);
    if (!rc && m->opt.last) {
        rc = TAKE(m, K, &m->ls.logits, TRI_F32, N, m->V_l);
        if (!rc) rc = TAKE(m, K, &m->ls.maxes, TRI_F32, N);
        if (!rc) rc = TAKE(m, K, &m->ls.stats, TRI_F32, N, 2);
    }
    return rc;
}

static int take_all(tri_gpt *m)
{
    int64_t P = m->layout.padded_numel;
    int rc = TAKE(m, TRI_MEM_PARAMS, &m->params, TRI_F32, P);
    if (!rc) rc = TAKE(m, TRI_MEM_GRADS, &m->grads, TRI_F32, P);
    for (int s = 0; s < m->opt.n_slots && !rc; s++)
        rc = take_slot(m, &m->slots[s]);
    if (!rc) rc = take_scratch(m);
    return rc;
}

/* ---- parameter views ---- */

static tri_tensor view(const tri_gpt *m, tri_tensor flat, const char *name)
{
    int i = tri_layout_find(&m->layout, name);
    return i < 0 ? tri_tensor_none() : tri_param_view(&m->layout.params[i], flat);
}

static void bind_weights(const tri_gpt *m, tri_gpt_weights *w, tri_tensor flat)
{
    char n[TRI_PARAM_NAME_MAX];
    w->wte = view(m, flat, "wte");
    w->wpe = view(m, flat, "wpe");
    w->lnf_w = view(m, flat, "ln_f.w");
    w->lnf_b = view(m, flat, "ln_f.b");
    for (int l = 0; l < m->L_l; l++) {
        int i = m->opt.layer_start + l;
        tri_gpt_block_weights *b = &w->h[l];
#define V(suffix) (snprintf(n, sizeof n, "h.%d.%s", i, suffix), view(m, flat, n))
        b->ln1_w = V("ln_1.w");
        b->ln1_b = V("ln_1.b");
        b->attn.qkv_w = V("attn.c_attn.w");
        b->attn.qkv_b = V("attn.c_attn.b");
        b->attn.proj_w = V("attn.c_proj.w");
        b->attn.proj_b = V("attn.c_proj.b");
        b->ln2_w = V("ln_2.w");
        b->ln2_b = V("ln_2.b");
        b->mlp.fc_w = V("mlp.c_fc.w");
        b->mlp.fc_b = V("mlp.c_fc.b");
        b->mlp.proj_w = V("mlp.c_proj.w");
        b->mlp.proj_b = V("mlp.c_proj.b");
#undef V
    }
}

static int init_params(tri_gpt *m)
{
    int rc = tri_op_fill(m->dev, m->params, 0.0f);
    for (int i = 0; i < m->layout.n && !rc; i++) {
        const tri_param *p = &m->layout.params[i];
        float *host = malloc((size_t)p->numel * sizeof *host);
        if (!host)
            return TRI_ERR(TRI_ENOMEM, "gpt: out of memory initialising %s", p->spec.name);
        tri_param_init_host(p, m->opt.seed, host);
        rc = tri_device_copy_from_host(m->dev, tri_param_view(p, m->params), host);
        free(host);
    }
    return rc ? rc : tri_op_fill(m->dev, m->grads, 0.0f);
}

/* ---- the stage interface ---- */

static int stage_load_batch(void *self, int slot, const int32_t *windows)
{
    return tri_gpt_load_batch(self, slot, windows);
}

static int stage_forward(void *self, int slot, bool train, float dloss)
{
    return tri_gpt_forward(self, slot, train, dloss);
}

static int stage_backward(void *self, int slot)
{
    return tri_gpt_backward(self, slot);
}

static tri_tensor stage_buffer(void *self, tri_stage_buffer which, int slot)
{
    tri_gpt *m = self;
    tri_gpt_slot *s = &m->slots[slot];
    switch (which) {
    case TRI_STAGE_ACT_IN: return s->x_in;
    case TRI_STAGE_ACT_OUT: return m->L_l > 0 ? s->blocks[m->L_l - 1].res3 : s->x_in;
    case TRI_STAGE_GRAD_OUT: return s->grad_out;
    case TRI_STAGE_GRAD_IN: return s->dres;
    }
    return tri_tensor_none();
}

static int stage_loss_sum(void *self, int slot, double *sum)
{
    tri_gpt *m = self;
    float *host = malloc((size_t)m->N * sizeof *host);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory reading losses");
    int rc = tri_device_copy_to_host(m->dev, host, m->slots[slot].losses);
    double acc = 0.0;
    for (int64_t i = 0; i < m->N && !rc; i++)
        acc += host[i];
    free(host);
    *sum = acc;
    return rc;
}

/* The LM head's share of wte's gradient: its own accumulator when the embedding is on this stage. */
static tri_tensor lm_head_dwte(const tri_gpt *m)
{
    return tri_tensor_present(m->lm_dwte) ? m->lm_dwte : m->g.wte;
}

static int stage_zero_grads(void *self)
{
    return tri_gpt_zero_grad(self);
}

static int stage_finish_grads(void *self)
{
    tri_gpt *m = self;
    if (!tri_tensor_present(m->lm_dwte))
        return TRI_OK;
    return tri_op_add(m->dev, m->g.wte, m->g.wte, m->lm_dwte);
}

static void bind_stage(tri_gpt *m)
{
    tri_stage *st = &m->stage;
    st->self = m;
    st->first = m->opt.first;
    st->last = m->opt.last;
    st->n_slots = m->opt.n_slots;
    st->tokens_per_mb = m->N;
    st->window = m->opt.T + 1;
    st->samples_per_mb = m->opt.B;
    st->layout = &m->layout;
    st->params = m->params;
    st->grads = m->grads;
    st->load_batch = stage_load_batch;
    st->forward = stage_forward;
    st->backward = stage_backward;
    st->buffer = stage_buffer;
    st->loss_sum = stage_loss_sum;
    st->zero_grads = stage_zero_grads;
    st->finish_grads = stage_finish_grads;
    st->n_global_params = tri_gpt_num_param_tensors(&m->cfg);
}

/* ---- creation ---- */

/* Sizes every buffer (dev NULL: planning only, nothing allocated) or builds the stage. */
static int setup(tri_gpt *m, const tri_gpt_config *cfg, const tri_gpt_options *opt,
                 tri_device *dev, tri_comm *tp_comm)
{
    int tp = tp_comm->size, tp_rank = tp_comm->rank;
    int rc = tri_gpt_check(cfg, tp, opt);
    if (rc)
        return rc;
    m->cfg = *cfg;
    m->opt = *opt;
    m->dev = dev;
    m->tp = (tri_tp){.dev = dev, .comm = tp_comm, .sp = opt->sequence_parallel && tp > 1};
    m->Vp = tri_gpt_padded_vocab(cfg->vocab_size, tp);
    m->V_l = m->Vp / tp;
    m->vocab_start = m->V_l * tp_rank;
    m->N = opt->B * opt->T;
    m->N_l = tri_tp_rows(&m->tp, m->N);
    m->C_l = cfg->n_embd / tp;
    m->NH_l = cfg->n_head / tp;
    m->L_l = opt->layer_end - opt->layer_start;

    tri_param_spec *specs = NULL;
    int n = 0;
    rc = tri_gpt_param_specs(cfg, tp, opt, &specs, &n);
    if (!rc)
        rc = tri_layout_create(&m->layout, specs, n, tp, tp_rank, opt->dp, opt->dp_rank);
    free(specs);
    if (rc)
        return rc;

    m->w.h = calloc((size_t)m->L_l + 1, sizeof *m->w.h);
    m->g.h = calloc((size_t)m->L_l + 1, sizeof *m->g.h);
    m->slots = calloc((size_t)opt->n_slots, sizeof *m->slots);
    if (!m->w.h || !m->g.h || !m->slots)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    for (int s = 0; s < opt->n_slots; s++) {
        m->slots[s].blocks = calloc((size_t)m->L_l + 1, sizeof *m->slots[s].blocks);
        if (!m->slots[s].blocks)
            return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    }
    tri_arena_plan(&m->arena);
    rc = take_all(m);
    if (rc || !dev)
        return rc;
    rc = tri_arena_commit(&m->arena, dev);
    if (!rc) rc = take_all(m);
    if (rc)
        return rc;
    bind_weights(m, &m->w, m->params);
    bind_weights(m, &m->g, m->grads);
    bind_stage(m);
    return init_params(m);
}

int tri_gpt_create(tri_gpt **out, const tri_gpt_config *cfg, const tri_gpt_options *opt,
                   tri_device *dev, tri_comm *tp_comm)
{
    *out = NULL;
    tri_gpt *m = calloc(1, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    int rc = setup(m, cfg, opt, dev, tp_comm);
    if (rc) {
        tri_gpt_destroy(m);
        return rc;
    }
    *out = m;
    return TRI_OK;
}

int tri_gpt_plan(const tri_gpt_config *cfg, const tri_gpt_options *opt, int tp, int tp_rank,
                 size_t bytes[TRI_MEM_KINDS])
{
    tri_comm group = {.rank = tp_rank, .size = tp}; /* sizes only: planning sends nothing */
    tri_gpt *m = calloc(1, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    int rc = setup(m, cfg, opt, NULL, &group);
    if (!rc)
        memcpy(bytes, m->arena.by_kind, TRI_MEM_KINDS * sizeof *bytes);
    tri_gpt_destroy(m);
    return rc;
}

void tri_gpt_destroy(tri_gpt *m)
{
    if (!m)
        return;
    tri_arena_release(&m->arena);
    for (int s = 0; m->slots && s < m->opt.n_slots; s++)
        free(m->slots[s].blocks);
    free(m->slots);
    free(m->w.h);
    free(m->g.h);
    tri_layout_destroy(&m->layout);
    free(m);
}

/* ---- forward and backward ---- */

int tri_gpt_load_batch(tri_gpt *m, int slot, const int32_t *windows)
{
    int64_t B = m->opt.B, T = m->opt.T;
    int32_t *buf = malloc((size_t)(2 * B * T) * sizeof *buf);
    if (!buf)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory loading a batch");
    for (int64_t b = 0; b < B; b++) {
        memcpy(buf + b * T, windows + b * (T + 1), (size_t)T * sizeof *buf);
        memcpy(buf + B * T + b * T, windows + b * (T + 1) + 1, (size_t)T * sizeof *buf);
    }
    tri_gpt_slot *s = &m->slots[slot];
    int rc = tri_device_copy_from_host(m->dev, s->tokens, buf);
    if (!rc) rc = tri_device_copy_from_host(m->dev, s->targets, buf + B * T);
    free(buf);
    return rc;
}

/* res3 = x + attn(ln1(x)) + mlp(ln2(x + attn(ln1(x)))), one GPT-2 block (pre-LN). */
static int block_forward(tri_gpt *m, int l, tri_gpt_block_acts *a, tri_tensor x)
{
    const tri_gpt_block_weights *w = &m->w.h[l];
    tri_device *d = m->dev;
    int rc = tri_op_layernorm_forward(d, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b);
    if (!rc) rc = tri_attention_forward(&m->tp, m->tmp, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_add(d, a->res2, x, m->tmp);
    if (!rc) rc = tri_op_layernorm_forward(d, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2_w, w->ln2_b);
    if (!rc) rc = tri_mlp_forward(&m->tp, m->tmp, &a->mlp, a->ln2, &w->mlp, &m->ms);
    if (!rc) rc = tri_op_add(d, a->res3, a->res2, m->tmp);
    return rc;
}

/* dres (N_l, C) holds d res3 on entry and d x on return (the residual stream's gradient). */
static int block_backward(tri_gpt *m, int l, const tri_gpt_block_acts *a, tri_tensor x, tri_tensor dres)
{
    const tri_gpt_block_weights *w = &m->w.h[l], *g = &m->g.h[l];
    tri_device *d = m->dev;
    int rc = tri_mlp_backward(&m->tp, m->dln, &g->mlp, dres, &a->mlp, a->ln2, &w->mlp, &m->ms);
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

/* Embedding (first stage) and the blocks; returns the stage's last residual in *res. */
static int forward_blocks(tri_gpt *m, tri_gpt_slot *s, tri_tensor *res)
{
    int rc = TRI_OK;
    if (m->opt.first)
        rc = tri_embedding_forward(&m->tp, s->x_in, s->tokens, m->w.wte, m->w.wpe, m->vocab_start,
                                   m->opt.T, m->ls.full_a);
    for (int l = 0; l < m->L_l && !rc; l++)
        rc = block_forward(m, l, &s->blocks[l], block_input(s, l));
    *res = block_input(s, m->L_l);
    return rc;
}

int tri_gpt_forward(tri_gpt *m, int slot, bool train, float dloss)
{
    tri_gpt_slot *s = &m->slots[slot];
    tri_tensor res;
    int rc = forward_blocks(m, s, &res);
    if (rc || !m->opt.last)
        return rc;
    rc = tri_op_layernorm_forward(m->dev, s->lnf, s->lnf_mean, s->lnf_rstd, res, m->w.lnf_w, m->w.lnf_b);
    if (!rc)
        rc = tri_lm_head_loss(&m->tp, s->losses, train ? s->dlnf : tri_tensor_none(), lm_head_dwte(m), s->lnf,
                              m->w.wte, s->targets, m->vocab_start, m->cfg.vocab_size, dloss, &m->ls);
    return rc;
}

int tri_gpt_backward(tri_gpt *m, int slot)
{
    tri_gpt_slot *s = &m->slots[slot];
    tri_device *d = m->dev;
    int rc;
    if (m->opt.last) {
        rc = tri_op_fill(d, s->dres, 0.0f);
        if (!rc) rc = tri_op_layernorm_backward(d, s->dres, m->g.lnf_w, m->g.lnf_b, s->dlnf,
                                                block_input(s, m->L_l), m->w.lnf_w, s->lnf_mean, s->lnf_rstd);
    } else {
        rc = tri_op_copy(d, s->dres, s->grad_out);
    }
    for (int l = m->L_l - 1; l >= 0 && !rc; l--)
        rc = block_backward(m, l, &s->blocks[l], block_input(s, l), s->dres);
    if (!rc && m->opt.first)
        rc = tri_embedding_backward(&m->tp, m->g.wte, m->g.wpe, s->dres, s->tokens, m->vocab_start,
                                    m->opt.T, m->ls.full_a);
    return rc;
}

int tri_gpt_zero_grad(tri_gpt *m)
{
    int rc = tri_op_fill(m->dev, m->grads, 0.0f);
    if (!rc && tri_tensor_present(m->lm_dwte))
        rc = tri_op_fill(m->dev, m->lm_dwte, 0.0f);
    return rc;
}

int tri_gpt_read_logits_row(tri_gpt *m, int64_t row, float *logits)
{
    if (!m->opt.last)
        return TRI_ERR(TRI_EINVAL, "logits live on the last pipeline stage");
    if (row < 0 || row >= m->N)
        return TRI_ERR(TRI_EINVAL, "logits row %lld outside the %lld rows of a micro-batch", (long long)row,
                       (long long)m->N);
    /* this rank's V_l logits of the row, all-gathered over TP into the start of the logits buffer
     * after moving the row to the buffer's end, out of the way */
    int tp = tri_tp_size(&m->tp), rc = TRI_OK;
    tri_tensor mine = tri_tensor_range(m->ls.logits, row * m->V_l, m->V_l);
    tri_tensor all = tri_tensor_range(m->ls.logits, 0, m->Vp);
    if (tp > 1) {
        if (m->N * m->V_l < m->Vp + m->V_l)
            return TRI_ERR(TRI_ENOTSUP, "reading logits under TP needs a micro-batch of at least %d rows", tp + 1);
        tri_tensor stage = tri_tensor_range(m->ls.logits, (m->N - 1) * m->V_l, m->V_l);
        rc = tri_op_copy(m->dev, stage, mine);
        if (!rc) rc = tri_comm_all_gather(m->tp.comm, all, stage);
        mine = all;
    }
    float *host = malloc((size_t)m->Vp * sizeof *host);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory for logits");
    if (!rc) rc = tri_device_copy_to_host(m->dev, host, tp > 1 ? all : mine);
    if (!rc)
        memcpy(logits, host, (size_t)m->cfg.vocab_size * sizeof *logits);
    free(host);
    return rc;
}
