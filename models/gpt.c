/* models/gpt.c - GPT-2 as a tensor-parallel pipeline stage (see gpt.h). */
#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/math.h"
#include "engine/status.h"
#include "layers/embedding.h"
#include "engine/optimizer.h"
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

/* Activations (and their gradients) are bf16 under mixed precision; statistics (layernorm mean and
 * rstd, losses, cross-entropy maxes and sums) and gradients of parameters stay fp32. */
#define ACT(m) ((m)->opt.bf16 ? TRI_BF16 : TRI_F32)

#define TAKE(m, kind, t, dtype, ...) \
    tri_arena_take(&(m)->arena, (kind), (t), (dtype), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* One block's activations: every buffer when `all`, else only what recomputation keeps per slot
 * (full: the block's output res3; selective: all but the attention softmax), the rest shared. */
static int take_block_acts(tri_gpt *m, tri_gpt_block_acts *a, bool all)
{
    int64_t B = m->opt.B, T = m->opt.T, C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    tri_recompute rec = all ? TRI_RECOMPUTE_NONE : m->opt.recompute;
    int rc = TRI_OK;
    if (rec == TRI_RECOMPUTE_FULL) {
        *a = m->shared;
        return TAKE(m, K, &a->res3, ACT(m), N_l, C);
    }
    rc = TAKE(m, K, &a->ln1, ACT(m), N_l, C);
    if (!rc) rc = TAKE(m, K, &a->ln1_mean, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->ln1_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->attn.qkv, ACT(m), B, T, 3 * m->C_l);
    if (rec == TRI_RECOMPUTE_SELECTIVE)
        a->attn.att = m->shared.attn.att;
    else if (!rc)
        rc = TAKE(m, K, &a->attn.att, ACT(m), B, m->NH_l, T, T);
    if (!rc) rc = TAKE(m, K, &a->attn.atty, ACT(m), B, T, m->C_l);
    if (!rc) rc = TAKE(m, K, &a->res2, ACT(m), N_l, C);
    if (!rc) rc = TAKE(m, K, &a->ln2, ACT(m), N_l, C);
    if (!rc) rc = TAKE(m, K, &a->ln2_mean, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->ln2_rstd, TRI_F32, N_l);
    if (!rc) rc = TAKE(m, K, &a->mlp.fch, ACT(m), N, 4 * m->C_l);
    if (!rc) rc = TAKE(m, K, &a->mlp.fch_gelu, ACT(m), N, 4 * m->C_l);
    if (!rc) rc = TAKE(m, K, &a->res3, ACT(m), N_l, C);
    return rc;
}

/* The buffers recomputation rebuilds, one set for all blocks and slots: a whole block's worth for
 * full recomputation (its res3 is never used: each slot keeps its own), the softmax for selective. */
static int take_shared_acts(tri_gpt *m)
{
    int64_t B = m->opt.B, T = m->opt.T;
    memset(&m->shared, 0, sizeof m->shared);
    if (m->opt.recompute == TRI_RECOMPUTE_FULL && m->L_l > 0)
        return take_block_acts(m, &m->shared, true);
    if (m->opt.recompute == TRI_RECOMPUTE_SELECTIVE && m->L_l > 0)
        return TAKE(m, TRI_MEM_ACTIVATIONS, &m->shared.attn.att, ACT(m), B, m->NH_l, T, T);
    return TRI_OK;
}

static int take_slot(tri_gpt *m, tri_gpt_slot *s)
{
    int64_t C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    int rc = TAKE(m, K, &s->tokens, TRI_I32, N);
    if (!rc) rc = TAKE(m, K, &s->targets, TRI_I32, N);
    if (!rc) rc = TAKE(m, K, &s->x_in, ACT(m), N_l, C);
    for (int l = 0; l < m->L_l && !rc; l++)
        rc = take_block_acts(m, &s->blocks[l], false);
    if (!rc && m->opt.last) {
        rc = TAKE(m, K, &s->lnf, ACT(m), N_l, C);
        if (!rc) rc = TAKE(m, K, &s->lnf_mean, TRI_F32, N_l);
        if (!rc) rc = TAKE(m, K, &s->lnf_rstd, TRI_F32, N_l);
        if (!rc) rc = TAKE(m, K, &s->dlnf, ACT(m), N_l, C);
        if (!rc) rc = TAKE(m, K, &s->losses, TRI_F32, N);
    }
    if (!rc && !m->opt.last) rc = TAKE(m, TRI_MEM_COMM, &s->grad_out, ACT(m), N_l, C);
    if (!rc) rc = TAKE(m, K, &s->dres, ACT(m), N_l, C);
    return rc;
}

static int take_scratch(tri_gpt *m)
{
    int64_t B = m->opt.B, T = m->opt.T, C = m->cfg.n_embd, N = m->N, N_l = m->N_l;
    const tri_mem_kind K = TRI_MEM_WORKSPACE;
    int rc = TAKE(m, K, &m->tmp, ACT(m), N_l, C);
    if (!rc) rc = TAKE(m, K, &m->dln, ACT(m), N_l, C);
    if (!rc) rc = TAKE(m, K, &m->as.dqkv, ACT(m), B, T, 3 * m->C_l);
    if (!rc) rc = TAKE(m, K, &m->as.datt, ACT(m), B, m->NH_l, T, T);
    if (!rc) rc = TAKE(m, K, &m->as.datty, ACT(m), B, T, m->C_l);
    if (!rc) rc = TAKE(m, K, &m->ms.dh, ACT(m), N, 4 * m->C_l);
    tri_tensor full_a = tri_tensor_none(), full_b = tri_tensor_none();
    if (!rc && m->tp.sp && tri_tp_size(&m->tp) > 1) {
        rc = TAKE(m, TRI_MEM_COMM, &full_a, ACT(m), N, C);
        if (!rc) rc = TAKE(m, TRI_MEM_COMM, &full_b, ACT(m), N, C);
    }
    m->as.full_a = m->ms.full_a = m->ls.full_a = full_a;
    m->as.full_b = m->ms.full_b = m->ls.full_b = full_b;
    m->lm_dwte = tri_tensor_none();
    /* ZeRO 0-1 keep whole gradients: the LM head's share of wte gets its own accumulator (see
     * gpt.h); ZeRO 2-3 reduce the head's share from wte's bucket after each forward instead */
    if (!rc && m->opt.first && m->opt.last && m->opt.zero_stage < 2 && !m->opt.deterministic)
        rc = TAKE(m, TRI_MEM_GRADS, &m->lm_dwte, TRI_F32, m->V_l, C);
    if (!rc && m->opt.last) {
        rc = TAKE(m, K, &m->ls.logits, ACT(m), N, m->V_l);
        if (!rc) rc = TAKE(m, K, &m->ls.maxes, TRI_F32, N);
        if (!rc) rc = TAKE(m, K, &m->ls.stats, TRI_F32, N, 2);
    }
    return rc;
}

/* When each unit's gradient is complete in a step: the passes writing it per micro-batch (wte
 * also once more when the LM head's private accumulator is added in stage_finish_grads). */
static int expect_grads(tri_gpt *m)
{
    tri_unit_uses *uses = calloc((size_t)(m->layout.n_units > 0 ? m->layout.n_units : 1), sizeof *uses);
    if (!uses)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    tri_gpt_unit_uses(m, uses);
    for (int u = 0; u < m->layout.n_units; u++) {
        int calls = m->opt.n_micro * (uses[u].fwd_writes + uses[u].bwd_writes);
        calls += u == m->unit_wte && tri_tensor_present(m->lm_dwte);
        tri_zero_expect_grads(&m->zero, u, m->opt.n_micro > 0 ? calls : 0);
    }
    free(uses);
    return TRI_OK;
}

static int take_all(tri_gpt *m)
{
    tri_zero_options zo = {.stage = m->opt.zero_stage, .deterministic = m->opt.deterministic,
                           .overlap_grad_reduce = m->opt.overlap_grad_reduce,
                           .overlap_param_gather = m->opt.overlap_param_gather, .bf16 = m->opt.bf16};
    int rc = tri_zero_take(&m->zero, &m->arena, &m->layout, &zo);
    if (!rc) rc = take_shared_acts(m);
    for (int s = 0; s < m->opt.n_slots && !rc; s++)
        rc = take_slot(m, &m->slots[s]);
    if (!rc) rc = take_scratch(m);
    return rc;
}

/* ---- parameter views: each parameter's tensor in w (values) and g (gradients) ---- */

/* Points wslot[i] / gslot[i] at the fields of m->w / m->g that hold parameter i. */
static void map_slots(tri_gpt *m)
{
    char n[TRI_PARAM_NAME_MAX];
    const char *fixed[] = {"wte", "wpe", "ln_f.w", "ln_f.b"};
    tri_tensor *wf[] = {&m->w.wte, &m->w.wpe, &m->w.lnf_w, &m->w.lnf_b};
    tri_tensor *gf[] = {&m->g.wte, &m->g.wpe, &m->g.lnf_w, &m->g.lnf_b};
    for (int k = 0; k < 4; k++) {
        int i = tri_layout_find(&m->layout, fixed[k]);
        if (i >= 0) {
            m->wslot[i] = wf[k];
            m->gslot[i] = gf[k];
        }
    }
    for (int l = 0; l < m->L_l; l++) {
        tri_gpt_block_weights *w = &m->w.h[l], *g = &m->g.h[l];
        struct { const char *suffix; tri_tensor *w, *g; } fields[] = {
            {"ln_1.w", &w->ln1_w, &g->ln1_w}, {"ln_1.b", &w->ln1_b, &g->ln1_b},
            {"attn.c_attn.w", &w->attn.qkv_w, &g->attn.qkv_w}, {"attn.c_attn.b", &w->attn.qkv_b, &g->attn.qkv_b},
            {"attn.c_proj.w", &w->attn.proj_w, &g->attn.proj_w}, {"attn.c_proj.b", &w->attn.proj_b, &g->attn.proj_b},
            {"ln_2.w", &w->ln2_w, &g->ln2_w}, {"ln_2.b", &w->ln2_b, &g->ln2_b},
            {"mlp.c_fc.w", &w->mlp.fc_w, &g->mlp.fc_w}, {"mlp.c_fc.b", &w->mlp.fc_b, &g->mlp.fc_b},
            {"mlp.c_proj.w", &w->mlp.proj_w, &g->mlp.proj_w}, {"mlp.c_proj.b", &w->mlp.proj_b, &g->mlp.proj_b},
        };
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
            snprintf(n, sizeof n, "h.%d.%s", m->opt.layer_start + l, fields[f].suffix);
            int i = tri_layout_find(&m->layout, n);
            if (i >= 0) {
                m->wslot[i] = fields[f].w;
                m->gslot[i] = fields[f].g;
            }
        }
    }
    m->unit_wte = m->unit_wpe = m->unit_block0 = m->unit_lnf = -1;
    int i;
    if ((i = tri_layout_find(&m->layout, "wte")) >= 0) m->unit_wte = m->layout.params[i].spec.unit;
    if ((i = tri_layout_find(&m->layout, "wpe")) >= 0) m->unit_wpe = m->layout.params[i].spec.unit;
    if ((i = tri_layout_find(&m->layout, "ln_f.w")) >= 0) m->unit_lnf = m->layout.params[i].spec.unit;
    snprintf(n, sizeof n, "h.%d.ln_1.w", m->opt.layer_start);
    if ((i = tri_layout_find(&m->layout, n)) >= 0) m->unit_block0 = m->layout.params[i].spec.unit;
}

/* Views of unit u's parameters in pflat (and gradients in gflat, when present), u's flat layout. */
static void bind_unit(tri_gpt *m, int u, tri_tensor pflat, tri_tensor gflat)
{
    const tri_param_unit *unit = &m->layout.units[u];
    for (int i = unit->first; i < unit->first + unit->count; i++) {
        const tri_param *p = &m->layout.params[i];
        tri_tensor at = tri_tensor_range(pflat, p->offset - unit->start, p->numel);
        *m->wslot[i] = tri_tensor_reshape(at, p->spec.ndim, p->local_shape);
        if (tri_tensor_present(gflat)) {
            at = tri_tensor_range(gflat, p->offset - unit->start, p->numel);
            *m->gslot[i] = tri_tensor_reshape(at, p->spec.ndim, p->local_shape);
        }
    }
}

/* Makes unit u's parameters (and with grads its gradient buffer) usable through m->w / m->g. */
static int use_unit(tri_gpt *m, int u, bool grads)
{
    tri_tensor p, g = tri_tensor_none();
    int rc = tri_zero_params(&m->zero, u, &p);
    if (!rc && grads && (rc = tri_zero_grads(&m->zero, u, &g)) != TRI_OK)
        tri_zero_release_params(&m->zero, u);
    if (!rc)
        bind_unit(m, u, p, g);
    return rc;
}

/* Done with unit u for this pass: its gradients (when taken) are complete, its parameters released. */
static int done_unit(tri_gpt *m, int u, bool grads)
{
    int rc = grads ? tri_zero_grads_done(&m->zero, u) : TRI_OK;
    tri_zero_release_params(&m->zero, u);
    return rc;
}

/* Fills unit u's parameters with their initial values: the whole unit on stages 0-2, this rank's
 * slice on stage 3. */
static int init_unit(tri_gpt *m, int u)
{
    const tri_param_unit *unit = &m->layout.units[u];
    float *host = calloc((size_t)unit->len, sizeof *host);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory initialising unit %d", u);
    for (int i = unit->first; i < unit->first + unit->count; i++)
        tri_param_init_host(&m->layout.params[i], m->opt.seed, host + (m->layout.params[i].offset - unit->start));
    if (m->opt.bf16) { /* master weights and their bf16 rounding, parameter by parameter */
        int rc = TRI_OK;
        for (int i = unit->first; i < unit->first + unit->count && !rc; i++)
            rc = tri_zero_write_param(&m->zero, &m->layout.params[i], host + (m->layout.params[i].offset - unit->start));
        free(host);
        return rc;
    }
    int64_t start, len, local;
    tri_zero_owned(&m->zero, u, &start, &len, &local);
    int rc;
    if (m->zero.stage < 3)
        rc = tri_device_copy_from_host(m->dev, tri_tensor_range(m->zero.params, unit->start, unit->len), host);
    else
        rc = tri_device_copy_from_host(m->dev, tri_zero_owned_params(&m->zero, start, len),
                                       host + (start - unit->start));
    free(host);
    return rc;
}

static int init_params(tri_gpt *m)
{
    int rc = TRI_OK;
    /* bf16 writes parameter by parameter (init_unit): zero the master weights and the model's
     * parameters first, so the units' padding holds zeros as the fp32 path's whole-unit copies give
     * (else the optimizer updates and publishes uninitialised padding) */
    if (m->opt.bf16) {
        tri_zero *z = &m->zero;
        rc = tri_op_zero(m->dev, z->master);
        if (!rc) rc = tri_op_zero(m->dev, z->stage < 3 ? z->params : z->param_shard);
    }
    for (int u = 0; u < m->layout.n_units && !rc; u++)
        rc = init_unit(m, u);
    return rc ? rc : tri_gpt_zero_grad(m);
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

static int stage_zero_grads(void *self)
{
    return tri_gpt_zero_grad(self);
}

/* ZeRO 0-1 with the embedding and the LM head on this stage: wte's gradient = the embedding's
 * share + the LM head's, added once per step as the embedding group adds two stages' shares. */
static int stage_finish_grads(void *self)
{
    tri_gpt *m = self;
    if (!tri_tensor_present(m->lm_dwte))
        return TRI_OK;
    int rc = use_unit(m, m->unit_wte, true);
    if (!rc) rc = tri_op_add(m->dev, m->g.wte, m->g.wte, m->lm_dwte);
    int rc2 = done_unit(m, m->unit_wte, true);
    return rc ? rc : rc2;
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
    st->zero = &m->zero;
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
                 tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
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
    m->wslot = calloc((size_t)m->layout.n + 1, sizeof *m->wslot);
    m->gslot = calloc((size_t)m->layout.n + 1, sizeof *m->gslot);
    if (!m->w.h || !m->g.h || !m->slots || !m->wslot || !m->gslot)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    map_slots(m);
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
    tri_zero_bind(&m->zero, dev, dp_comm);
    rc = expect_grads(m);
    bind_stage(m);
    return rc ? rc : init_params(m);
}

int tri_gpt_create(tri_gpt **out, const tri_gpt_config *cfg, const tri_gpt_options *opt,
                   tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    *out = NULL;
    tri_gpt *m = calloc(1, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    int rc = setup(m, cfg, opt, dev, tp_comm, dp_comm);
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
    int rc = setup(m, cfg, opt, NULL, &group, NULL);
    if (!rc)
        memcpy(bytes, m->arena.by_kind, TRI_MEM_KINDS * sizeof *bytes);
    tri_gpt_destroy(m);
    return rc;
}

void tri_gpt_destroy(tri_gpt *m)
{
    if (!m)
        return;
    tri_zero_destroy(&m->zero); /* first: waits for collectives still in flight on arena buffers */
    tri_arena_release(&m->arena);
    for (int s = 0; m->slots && s < m->opt.n_slots; s++)
        free(m->slots[s].blocks);
    free(m->slots);
    free(m->w.h);
    free(m->g.h);
    free(m->wslot);
    free(m->gslot);
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

/* Rebuilds what recomputation dropped from block l's activations: the whole block (writing the
 * same values, bit for bit, as its forward did) or the attention softmax. */
static int recompute_block(tri_gpt *m, int l, tri_gpt_block_acts *a, tri_tensor x)
{
    if (m->opt.recompute == TRI_RECOMPUTE_FULL) {
        tri_gpt_block_acts work = m->shared;  /* res3 into the shared buffer: the slot's stays as it is */
        *a = work;
        return block_forward(m, l, a, x);
    }
    if (m->opt.recompute == TRI_RECOMPUTE_SELECTIVE)
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

/* Embedding (first stage) and the blocks; returns the stage's last residual in *res. */
static int forward_blocks(tri_gpt *m, tri_gpt_slot *s, tri_tensor *res)
{
    int rc = TRI_OK;
    if (m->opt.first) {
        rc = use_unit(m, m->unit_wte, false);
        if (!rc) {
            rc = use_unit(m, m->unit_wpe, false);
            if (!rc) rc = tri_embedding_forward(&m->tp, s->x_in, s->tokens, m->w.wte, m->w.wpe, m->vocab_start,
                                                m->opt.T, m->ls.full_a);
            tri_zero_release_params(&m->zero, m->unit_wpe);
            tri_zero_release_params(&m->zero, m->unit_wte);
        }
    }
    for (int l = 0; l < m->L_l && !rc; l++) {
        rc = use_unit(m, m->unit_block0 + l, false);
        if (rc)
            break;
        rc = block_forward(m, l, &s->blocks[l], block_input(s, l));
        tri_zero_release_params(&m->zero, m->unit_block0 + l);
    }
    *res = block_input(s, m->L_l);
    return rc;
}

/* The last stage's head: final layernorm, LM head and loss (when training, with the head's
 * backward, its wte gradient going to the private accumulator or to wte's unit). */
static int forward_head(tri_gpt *m, tri_gpt_slot *s, tri_tensor res, bool train, float dloss)
{
    bool head_grads = train && !tri_tensor_present(m->lm_dwte);
    int rc = use_unit(m, m->unit_lnf, false);
    if (rc)
        return rc;
    rc = use_unit(m, m->unit_wte, head_grads);
    if (!rc) {
        rc = tri_op_layernorm_forward(m->dev, s->lnf, s->lnf_mean, s->lnf_rstd, res, m->w.lnf_w, m->w.lnf_b);
        tri_tensor dwte = tri_tensor_present(m->lm_dwte) ? m->lm_dwte : m->g.wte;
        if (!rc)
            rc = tri_lm_head_loss(&m->tp, s->losses, train ? s->dlnf : tri_tensor_none(), dwte, s->lnf, m->w.wte,
                                  s->targets, m->vocab_start, m->cfg.vocab_size, dloss, &m->ls);
        int rc2 = done_unit(m, m->unit_wte, head_grads);
        rc = rc ? rc : rc2;
    }
    tri_zero_release_params(&m->zero, m->unit_lnf);
    return rc;
}

int tri_gpt_forward(tri_gpt *m, int slot, bool train, float dloss)
{
    tri_gpt_slot *s = &m->slots[slot];
    tri_tensor res;
    int rc = forward_blocks(m, s, &res);
    if (rc || !m->opt.last)
        return rc;
    return forward_head(m, s, res, train, dloss);
}

static int backward_head(tri_gpt *m, tri_gpt_slot *s)
{
    int rc = tri_op_fill(m->dev, s->dres, 0.0f);
    if (!rc) rc = use_unit(m, m->unit_lnf, true);
    if (rc)
        return rc;
    rc = tri_op_layernorm_backward(m->dev, s->dres, m->g.lnf_w, m->g.lnf_b, s->dlnf, block_input(s, m->L_l),
                                   m->w.lnf_w, s->lnf_mean, s->lnf_rstd);
    int rc2 = done_unit(m, m->unit_lnf, true);
    return rc ? rc : rc2;
}

static int backward_embedding(tri_gpt *m, tri_gpt_slot *s)
{
    int rc = use_unit(m, m->unit_wte, true);
    if (rc)
        return rc;
    rc = use_unit(m, m->unit_wpe, true);
    if (!rc) {
        rc = tri_embedding_backward(&m->tp, m->g.wte, m->g.wpe, s->dres, s->tokens, m->vocab_start, m->opt.T,
                                    m->ls.full_a);
        int rc2 = done_unit(m, m->unit_wpe, true);
        rc = rc ? rc : rc2;
    }
    int rc3 = done_unit(m, m->unit_wte, true);
    return rc ? rc : rc3;
}

int tri_gpt_backward(tri_gpt *m, int slot)
{
    tri_gpt_slot *s = &m->slots[slot];
    int rc = m->opt.last ? backward_head(m, s) : tri_op_copy(m->dev, s->dres, s->grad_out);
    for (int l = m->L_l - 1; l >= 0 && !rc; l--) {
        rc = use_unit(m, m->unit_block0 + l, true);
        if (rc)
            break;
        rc = block_backward(m, l, &s->blocks[l], block_input(s, l), s->dres);
        int rc2 = done_unit(m, m->unit_block0 + l, true);
        rc = rc ? rc : rc2;
    }
    if (!rc && m->opt.first)
        rc = backward_embedding(m, s);
    return rc;
}

int tri_gpt_zero_grad(tri_gpt *m)
{
    int rc = tri_zero_zero_grads(&m->zero);
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
    tri_tensor src = tp > 1 ? all : mine;
    if (!rc && src.dtype == TRI_BF16) { /* bf16 logits: read raw, widened on the host */
        uint16_t *raw = malloc((size_t)tri_tensor_numel(src) * sizeof *raw);
        rc = raw ? tri_device_copy_to_host(m->dev, raw, src) : TRI_ERR(TRI_ENOMEM, "gpt: out of memory for logits");
        for (int64_t v = 0; !rc && v < tri_tensor_numel(src); v++)
            host[v] = tri_bf16_to_float(raw[v]);
        free(raw);
    } else if (!rc) {
        rc = tri_device_copy_to_host(m->dev, host, src);
    }
    if (!rc)
        memcpy(logits, host, (size_t)m->cfg.vocab_size * sizeof *logits);
    free(host);
    return rc;
}

void tri_gpt_unit_uses(const tri_gpt *m, tri_unit_uses *out)
{
    for (int u = 0; u < m->layout.n_units; u++) {
        /* a block: read forward, read and written backward */
        out[u] = (tri_unit_uses){.len = m->layout.units[u].len, .fwd_reads = 1, .bwd_reads = 1, .bwd_writes = 1};
        if (u == m->unit_wte) {
            /* the embedding reads it forward and writes it backward; the LM head reads it forward and
             * writes it in the same pass (its backward is fused into the forward) */
            out[u] = (tri_unit_uses){.len = out[u].len};
            if (m->opt.first) {
                out[u].fwd_reads++;
                out[u].bwd_reads++;
                out[u].bwd_writes++;
            }
            if (m->opt.last) {
                out[u].fwd_reads++;
                out[u].fwd_writes += !tri_tensor_present(m->lm_dwte);
            }
        }
    }
}
