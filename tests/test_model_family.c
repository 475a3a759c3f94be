/* tests/test_model_family.c - the engine is model-agnostic: a second model family, defined in this
 * file and registered nowhere, trains, plans and checkpoints through the unchanged session API.
 *
 * "toy-mlp" is the smallest model that still has every part a family has (models/model.h): a token
 * embedding wte (V, C) on the first chunk; L residual MLP blocks x = x + W2 gelu(W1 x + b1) + b2
 * (W1 (H, C), W2 (C, H)), one unit each; and on the last chunk an LM head of its own, head.w (V, C),
 * not tied to wte, with the softmax cross-entropy loss. Unlike GPT-2 (models/gpt.c) its loss backward
 * is not fused into the forward: a BACKWARD pass writes the head's gradient, so the engine's other
 * way of declaring passes is exercised too. It runs fp32 at tensor-parallel size 1 without sequence
 * parallelism or recomputation, and its check refuses the rest with the flag's name.
 *
 * The model is a tri_model of this family built here (no registry change), trained on thread ranks
 * through tri_session (models/session.h). The tests assert:
 *  - its parameter list, config round trip and refusals;
 *  - its backward against central finite differences of a double-precision host copy of its forward,
 *    its loss against that copy and against log V (small initialisation), its sampling logits;
 *  - deterministic mode: 5 AdamW steps give bit-identical losses and final weights on one rank, at
 *    pp 2 (1F1B and interleaved), dp 2 at ZeRO 0-3 (and 1 and 3 with overlapped collectives) and
 *    pp 2 x dp 2 at ZeRO 1; without it pp 2 still matches one rank bit for bit; and the loss falls;
 *  - every rank's planned memory (tri_model_rank_plan, which allocates nothing) equals what its
 *    arenas allocated, category by category, and the device's measured peak is within 5% of it;
 *  - a checkpoint saved at pp 2 resumes at dp 2 ZeRO 2 and continues with the bits of the
 *    uninterrupted run (models/session_checkpoint.h). */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "models/model.h"
#include "models/session.h"
#include "models/session_checkpoint.h"
#include "partitioner/layout.h"
#include "tools/cli/layout_flags.h"

/* ======================================================================================== */
/* The family                                                                                */
/* ======================================================================================== */

typedef struct toy_config {
    int vocab_size;     /* V */
    int n_embd;         /* C */
    int n_hidden;       /* H */
    int n_layer;        /* L */
    int max_seq;        /* the longest sequence it accepts */
    float init_std;
} toy_config;

#define TOY_BLOCK_PARAMS 4

enum { TOY_DIM_NONE = 0, TOY_DIM_C, TOY_DIM_H };

/* One block's parameters, in flat-buffer and global order. */
typedef struct toy_block {
    tri_tensor fc1_w, fc1_b;   /* (H, C), (H) */
    tri_tensor fc2_w, fc2_b;   /* (C, H), (C) */
} toy_block;

static const struct toy_block_row {
    const char *name;          /* after "h.<i>." */
    int rows, cols;            /* TOY_DIM_*; cols NONE: a vector */
    bool decay;
    tri_init_kind init;
    size_t field;              /* its view in toy_block */
} toy_block_rows[TOY_BLOCK_PARAMS] = {
    {"fc1.w", TOY_DIM_H, TOY_DIM_C, true, TRI_INIT_NORMAL, offsetof(toy_block, fc1_w)},
    {"fc1.b", TOY_DIM_H, TOY_DIM_NONE, false, TRI_INIT_ZEROS, offsetof(toy_block, fc1_b)},
    {"fc2.w", TOY_DIM_C, TOY_DIM_H, true, TRI_INIT_NORMAL, offsetof(toy_block, fc2_w)},
    {"fc2.b", TOY_DIM_C, TOY_DIM_NONE, false, TRI_INIT_ZEROS, offsetof(toy_block, fc2_b)},
};

/* Views of the units bound for the pass in progress (parameters, or their gradients). */
typedef struct toy_weights {
    tri_tensor wte;            /* (V, C) first chunk */
    toy_block *h;              /* [L_l] this chunk's blocks */
    tri_tensor head_w;         /* (V, C) last chunk */
} toy_weights;

typedef struct toy_block_acts {
    tri_tensor pre;            /* (N, H) W1 x + b1 */
    tri_tensor act;            /* (N, H) gelu(pre) */
    tri_tensor out;            /* (N, C) the block's output, x + W2 act + b2 */
} toy_block_acts;

/* What one micro-batch keeps between its forward and its backward. */
typedef struct toy_slot {
    tri_tensor tokens;         /* first chunk: (N) i32 */
    tri_tensor targets;        /* last chunk: (N) i32 */
    tri_tensor x_in;           /* (N, C) the chunk's input: the embedding, or received */
    toy_block_acts *blocks;    /* [L_l] */
    tri_tensor logits;         /* last chunk: (N, V); the backward overwrites them with their gradient */
    tri_tensor maxes, stats;   /* last chunk: (N), (N, 2) */
    tri_tensor losses;         /* last chunk: (N) per-token losses */
    tri_tensor grad_out;       /* not last: (N, C) the gradient received from the next chunk */
    tri_tensor dx;             /* (N, C) the residual stream's gradient; ends as the one sent back */
} toy_slot;

typedef struct toy {
    tri_chunk chunk;           /* the engine's side */
    bool has_chunk;
    toy_config cfg;
    tri_chunk_place place;
    tri_device *dev;           /* NULL: planned only */
    int64_t N;                 /* B * T token rows */
    int L_l;                   /* blocks on this chunk */
    int unit_wte, unit_block0, unit_head;   /* -1: not on this chunk */
    toy_weights w, g;
    tri_tensor **wslot, **gslot;            /* per layout parameter: its view in w and in g */
    toy_slot *slots;
    tri_tensor tmp;            /* (N, C) scratch: a block's branch */
    tri_tensor dact;           /* (N, H) scratch: a block's hidden gradient */
} toy;

static int toy_num_param_tensors(const toy_config *c)
{
    return 2 + TOY_BLOCK_PARAMS * c->n_layer;
}

static int64_t toy_dim(const toy_config *c, int dim)
{
    return dim == TOY_DIM_C ? c->n_embd : dim == TOY_DIM_H ? c->n_hidden : 0;
}

/* ---- config ---- */

static int toy_json_int(const cJSON *root, const char *key, const char *source, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 20) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" must be an integer in [1, 2^20]", source, key);
    *out = (int)v->valuedouble;
    return TRI_OK;
}

static int toy_parse_json(toy_config *c, const cJSON *root, const char *source)
{
    int rc = toy_json_int(root, "vocab_size", source, &c->vocab_size);
    if (!rc) rc = toy_json_int(root, "n_embd", source, &c->n_embd);
    if (!rc) rc = toy_json_int(root, "n_hidden", source, &c->n_hidden);
    if (!rc) rc = toy_json_int(root, "n_layer", source, &c->n_layer);
    if (!rc) rc = toy_json_int(root, "max_seq", source, &c->max_seq);
    const cJSON *std = cJSON_GetObjectItemCaseSensitive(root, "init_std");
    if (!rc && (!cJSON_IsNumber(std) || !(std->valuedouble > 0.0) || std->valuedouble > 1.0))
        rc = TRI_ERR(TRI_EINVAL, "%s: \"init_std\" must be a number in (0, 1]", source);
    if (!rc)
        c->init_std = (float)std->valuedouble;
    return rc;
}

static int toy_parse(void *cfg, const char *json, const char *source)
{
    cJSON *root = cJSON_Parse(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return TRI_ERR(TRI_EINVAL, "%s: not a JSON object", source);
    }
    int rc = toy_parse_json(cfg, root, source);
    cJSON_Delete(root);
    return rc;
}

static int toy_to_json(const void *cfg, char **json)
{
    const toy_config *c = cfg;
    char buf[256];
    int n = snprintf(buf, sizeof buf,
                     "{\"model_type\":\"toy-mlp\",\"vocab_size\":%d,\"n_embd\":%d,\"n_hidden\":%d,"
                     "\"n_layer\":%d,\"max_seq\":%d,\"init_std\":%.9g}",
                     c->vocab_size, c->n_embd, c->n_hidden, c->n_layer, c->max_seq, (double)c->init_std);
    *json = malloc((size_t)n + 1);
    if (!*json)
        return TRI_ERR(TRI_ENOMEM, "toy: out of memory for the config JSON");
    memcpy(*json, buf, (size_t)n + 1);
    return TRI_OK;
}

/* What one toy block holds and does (partitioner/transformer.h tri_block_cost), as the stage split
 * and the memory formulas ask it: W1, b1, W2, b2 (whole: tensor-parallel size 1); two N x H matmuls
 * forward (W1: C -> H, W2: H -> C); pre, act and out kept (fp32), dx and dact's N x (C + H) of backward scratch; no collectives. */
static void toy_block_cost(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    const toy_config *c = cfg;
    double N = (double)l->B * (double)l->T, C = c->n_embd, H = c->n_hidden;
    *out = (tri_block_cost){.params = 2.0 * H * C + H + C, .tensors = TOY_BLOCK_PARAMS, .fwd_flops = 2.0 * N * 2.0 * H * C,
                            .kept = 4.0 * N * (2.0 * H + C), .work = 4.0 * N * (C + H), .n_linear = 2,
                            .linear = {{c->n_embd, c->n_hidden}, {c->n_hidden, c->n_embd}}};
}

/* The partitioner's outline: the toy has no heads and no positions, so it reports one head (the
 * layout validator then refuses tp > 1 as well) and its longest sequence; no position table, an LM
 * head of its own, no final norm; its block as above. */
static tri_transformer toy_dims(const void *cfg)
{
    const toy_config *c = cfg;
    return (tri_transformer){.n_layer = c->n_layer, .n_head = 1, .n_embd = c->n_embd, .vocab_size = c->vocab_size,
                             .n_positions = c->max_seq, .final_norm = TRI_NORM_NONE, .untied_head = true, .block_cost = toy_block_cost, .cfg = c};
}

static int64_t toy_num_params(const void *cfg)
{
    const toy_config *c = cfg;
    int64_t V = c->vocab_size, C = c->n_embd, H = c->n_hidden;
    return 2 * V * C + c->n_layer * (2 * H * C + H + C);
}

static int64_t toy_padded_vocab(const void *cfg, int tp)
{
    return ((const toy_config *)cfg)->vocab_size; /* no vocab-parallel layers: no padding */
}

static int toy_num_params_family(const void *cfg)
{
    return toy_num_param_tensors(cfg);
}

/* ---- parameter descriptions ---- */

static void toy_spec(tri_param_spec *s, const char *name, int64_t rows, int64_t cols, bool decay,
                     tri_init_kind init, float std, int global_index, int unit)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = cols > 0 ? 2 : 1;
    s->shape[0] = rows;
    s->shape[1] = cols;
    s->split_dim = -1;            /* tensor-parallel size 1: every parameter whole */
    s->weight_decay = decay;
    s->init = init;
    s->init_std = init == TRI_INIT_NORMAL ? std : 0.0f;
    s->init_rows = rows;
    s->global_index = global_index;
    s->unit = unit;
}

/* Units in chunk order: wte (first chunk), one per block, head.w (last chunk). Global order: wte,
 * the blocks' parameters in toy_block_rows order, head.w. */
static int toy_param_specs(const void *cfg, int tp, const tri_chunk_place *place, tri_param_spec **specs, int *n)
{
    const toy_config *c = cfg;
    int L_l = place->layer_end - place->layer_start;
    int count = (place->first ? 1 : 0) + TOY_BLOCK_PARAMS * L_l + (place->last ? 1 : 0), k = 0, unit = 0;
    tri_param_spec *v = calloc((size_t)count + 1, sizeof *v);
    if (!v)
        return TRI_ERR(TRI_ENOMEM, "toy: out of memory for parameter descriptions");
    if (place->first)
        toy_spec(&v[k++], "wte", c->vocab_size, c->n_embd, true, TRI_INIT_NORMAL, c->init_std, 0, unit++);
    for (int l = place->layer_start; l < place->layer_end; l++, unit++)
        for (int j = 0; j < TOY_BLOCK_PARAMS; j++) {
            const struct toy_block_row *r = &toy_block_rows[j];
            char name[TRI_PARAM_NAME_MAX];
            snprintf(name, sizeof name, "h.%d.%s", l, r->name);
            toy_spec(&v[k++], name, toy_dim(c, r->rows), toy_dim(c, r->cols), r->decay, r->init, c->init_std,
                     1 + TOY_BLOCK_PARAMS * l + j, unit);
        }
    if (place->last)
        toy_spec(&v[k++], "head.w", c->vocab_size, c->n_embd, true, TRI_INIT_NORMAL, c->init_std,
                 toy_num_param_tensors(c) - 1, unit);
    *specs = v;
    *n = count;
    return TRI_OK;
}

/* ---- what the toy supports ---- */

static int toy_check(const void *cfg, const tri_train_layout *run, const tri_chunk_place *place)
{
    const toy_config *c = cfg;
    if (run->tp != 1)
        return TRI_ERR(TRI_EINVAL, "toy-mlp has no tensor-parallel layers: --tensor-model-parallel-size must be 1 "
                       "(got %d)", run->tp);
    if (run->sequence_parallel)
        return TRI_ERR(TRI_EINVAL, "toy-mlp does not support --sequence-parallel");
    if (run->recompute != TRI_RECOMPUTE_NONE)
        return TRI_ERR(TRI_EINVAL, "toy-mlp does not support --recompute-granularity %s (only none)",
                       tri_recompute_name(run->recompute));
    if (run->precision != TRI_PRECISION_FP32)
        return TRI_ERR(TRI_EINVAL, "toy-mlp trains in fp32 only (got --bf16)");
    if (run->B < 1 || run->T < 1 || run->T > c->max_seq)
        return TRI_ERR(TRI_EINVAL, "toy-mlp: --micro-batch-size %lld must be >= 1 and --seq-length %lld in [1, %d]",
                       (long long)run->B, (long long)run->T, c->max_seq);
    if (place->layer_start < 0 || place->layer_end > c->n_layer || place->layer_start > place->layer_end)
        return TRI_ERR(TRI_EINVAL, "toy-mlp: chunk layers [%d, %d) outside its %d layers", place->layer_start,
                       place->layer_end, c->n_layer);
    if (place->n_slots < 1)
        return TRI_ERR(TRI_EINVAL, "toy-mlp: a chunk needs at least one activation slot (got %d)", place->n_slots);
    return TRI_OK;
}

/* ---- the passes ---- */

enum {
    TOY_EMBED = 0,        /* x_in = wte[tokens] */
    TOY_BLOCK,            /* block p->index */
    TOY_HEAD,             /* logits and per-token losses */
    TOY_HEAD_BACKWARD,    /* the loss and head's backward: head.w's gradient, dx */
    TOY_GRAD_FROM_NEXT,   /* not last: dx = the gradient received */
    TOY_BLOCK_BACKWARD,
    TOY_EMBED_BACKWARD,
};

static int toy_add(toy *m, tri_pass_list list, int kind, int index, int unit, bool grads)
{
    tri_pass p = {.kind = kind, .index = index, .n_units = unit >= 0 ? 1 : 0, .unit = {unit}, .grads = {grads}};
    return tri_chunk_add_pass(&m->chunk, list, &p);
}

static int toy_declare_passes(toy *m)
{
    int rc = TRI_OK;
    for (int eval = 0; eval < 2 && !rc; eval++) {
        tri_pass_list list = eval ? TRI_PASSES_FORWARD_EVAL : TRI_PASSES_FORWARD;
        if (m->place.first)
            rc = toy_add(m, list, TOY_EMBED, 0, m->unit_wte, false);
        for (int l = 0; l < m->L_l && !rc; l++)
            rc = toy_add(m, list, TOY_BLOCK, l, m->unit_block0 + l, false);
        if (!rc && m->place.last)
            rc = toy_add(m, list, TOY_HEAD, 0, m->unit_head, false);
    }
    if (!rc) rc = m->place.last ? toy_add(m, TRI_PASSES_BACKWARD, TOY_HEAD_BACKWARD, 0, m->unit_head, true)
                                : toy_add(m, TRI_PASSES_BACKWARD, TOY_GRAD_FROM_NEXT, 0, -1, false);
    for (int l = m->L_l - 1; l >= 0 && !rc; l--)
        rc = toy_add(m, TRI_PASSES_BACKWARD, TOY_BLOCK_BACKWARD, l, m->unit_block0 + l, true);
    if (!rc && m->place.first)
        rc = toy_add(m, TRI_PASSES_BACKWARD, TOY_EMBED_BACKWARD, 0, m->unit_wte, true);
    return rc; /* no finish passes: nothing is accumulated privately */
}

static tri_tensor toy_block_input(const toy_slot *s, int l)
{
    return l == 0 ? s->x_in : s->blocks[l - 1].out;
}

/* out = x + W2 gelu(W1 x + b1) + b2 */
static int toy_block_forward(toy *m, int l, toy_slot *s)
{
    const toy_block *w = &m->w.h[l];
    toy_block_acts *a = &s->blocks[l];
    tri_tensor x = toy_block_input(s, l);
    int rc = tri_op_matmul(m->dev, a->pre, x, w->fc1_w, w->fc1_b, false, true, 0.0f);
    if (!rc) rc = tri_op_gelu_forward(m->dev, a->act, a->pre);
    if (!rc) rc = tri_op_matmul(m->dev, m->tmp, a->act, w->fc2_w, w->fc2_b, false, true, 0.0f);
    if (!rc) rc = tri_op_add(m->dev, a->out, x, m->tmp);
    return rc;
}

/* dx (N, C) holds d out on entry and d x on return: the residual's gradient plus the branch's. */
static int toy_block_backward(toy *m, int l, toy_slot *s)
{
    const toy_block *w = &m->w.h[l], *g = &m->g.h[l];
    const toy_block_acts *a = &s->blocks[l];
    tri_tensor x = toy_block_input(s, l), none = tri_tensor_none();
    tri_device *d = m->dev;
    int rc = tri_op_matmul(d, g->fc2_w, s->dx, a->act, none, true, false, 1.0f); /* dW2 (C, H) += dout^T act */
    if (!rc) rc = tri_op_bias_backward(d, g->fc2_b, s->dx);
    if (!rc) rc = tri_op_matmul(d, m->dact, s->dx, w->fc2_w, none, false, false, 0.0f); /* (N, H) dout W2 */
    if (!rc) rc = tri_op_gelu_backward(d, m->dact, a->pre, m->dact);
    if (!rc) rc = tri_op_matmul(d, g->fc1_w, m->dact, x, none, true, false, 1.0f); /* dW1 (H, C) += dpre^T x */
    if (!rc) rc = tri_op_bias_backward(d, g->fc1_b, m->dact);
    if (!rc) rc = tri_op_matmul(d, s->dx, m->dact, w->fc1_w, none, false, false, 1.0f); /* dx += dpre W1 */
    return rc;
}

/* logits (N, V) = x head.w^T and the per-token cross-entropy; unlike GPT-2's head, the loss's
 * backward is a pass of its own (toy_head_backward, given the step's dloss by the engine). */
static int toy_head_forward(toy *m, toy_slot *s)
{
    int64_t V = m->cfg.vocab_size;
    tri_device *d = m->dev;
    int rc = tri_op_matmul(d, s->logits, toy_block_input(s, m->L_l), m->w.head_w, tri_tensor_none(), false, true, 0.0f);
    if (!rc) rc = tri_op_ce_row_max(d, s->maxes, s->logits, V);
    if (!rc) rc = tri_op_ce_sumexp_target(d, s->stats, s->logits, s->maxes, s->targets, 0, V);
    if (!rc) rc = tri_op_ce_loss(d, s->losses, s->maxes, s->stats);
    return rc;
}

static int toy_head_backward(toy *m, toy_slot *s, float dloss)
{
    int64_t V = m->cfg.vocab_size;
    tri_device *d = m->dev;
    tri_tensor x = toy_block_input(s, m->L_l), none = tri_tensor_none();
    /* dlogits (N, V) in place of the logits */
    int rc = tri_op_ce_backward(d, s->logits, s->logits, s->maxes, s->stats, s->targets, 0, V, dloss);
    if (!rc) rc = tri_op_matmul(d, m->g.head_w, s->logits, x, none, true, false, 1.0f); /* (V, C) += dlogits^T x */
    if (!rc) rc = tri_op_matmul(d, s->dx, s->logits, m->w.head_w, none, false, false, 0.0f); /* (N, C) */
    return rc;
}

static int toy_run(void *self, const tri_pass *p, int slot, bool train, float dloss)
{
    (void)train; /* the head's loss backward is its own pass, so forwards are alike either way */
    toy *m = self;
    toy_slot *s = &m->slots[slot];
    switch (p->kind) {
    case TOY_EMBED: return tri_op_embedding_forward(m->dev, s->x_in, s->tokens, m->w.wte, 0);
    case TOY_BLOCK: return toy_block_forward(m, p->index, s);
    case TOY_HEAD: return toy_head_forward(m, s);
    case TOY_HEAD_BACKWARD: return toy_head_backward(m, s, dloss);
    case TOY_GRAD_FROM_NEXT: return tri_op_copy(m->dev, s->dx, s->grad_out);
    case TOY_BLOCK_BACKWARD: return toy_block_backward(m, p->index, s);
    case TOY_EMBED_BACKWARD: return tri_op_embedding_backward(m->dev, m->g.wte, s->dx, s->tokens, 0);
    }
    return TRI_ERR(TRI_EINTERNAL, "toy: unknown pass %d", p->kind);
}

/* ---- the rest of the chunk interface ---- */

static void toy_bind(void *self, int u, tri_tensor pflat, tri_tensor gflat)
{
    toy *m = self;
    const tri_param_layout *L = &m->chunk.layout;
    const tri_param_unit *unit = &L->units[u];
    for (int i = unit->first; i < unit->first + unit->count; i++) {
        const tri_param *p = &L->params[i];
        *m->wslot[i] = tri_tensor_reshape(tri_tensor_range(pflat, p->offset - unit->start, p->numel), p->spec.ndim,
                                          p->local_shape);
        if (tri_tensor_present(gflat))
            *m->gslot[i] = tri_tensor_reshape(tri_tensor_range(gflat, p->offset - unit->start, p->numel),
                                              p->spec.ndim, p->local_shape);
    }
}

/* (B, T+1) windows: tokens are the first T of each, targets the last T. */
static int toy_load_batch(void *self, int slot, const int32_t *windows)
{
    toy *m = self;
    int64_t B = m->chunk.run.B, T = m->chunk.run.T;
    int32_t *buf = malloc((size_t)(2 * m->N) * sizeof *buf);
    if (!buf)
        return TRI_ERR(TRI_ENOMEM, "toy: out of memory loading a batch");
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            buf[b * T + t] = windows[b * (T + 1) + t];
            buf[m->N + b * T + t] = windows[b * (T + 1) + t + 1];
        }
    toy_slot *s = &m->slots[slot];
    int rc = tri_tensor_present(s->tokens) ? tri_device_copy_from_host(m->dev, s->tokens, buf) : TRI_OK;
    if (!rc && tri_tensor_present(s->targets)) rc = tri_device_copy_from_host(m->dev, s->targets, buf + m->N);
    free(buf);
    return rc;
}

static tri_tensor toy_buffer(void *self, tri_chunk_buffer which, int slot)
{
    toy *m = self;
    toy_slot *s = &m->slots[slot];
    switch (which) {
    case TRI_CHUNK_ACT_IN: return s->x_in;
    case TRI_CHUNK_ACT_OUT: return m->L_l > 0 ? s->blocks[m->L_l - 1].out : s->x_in;
    case TRI_CHUNK_GRAD_OUT: return s->grad_out;
    case TRI_CHUNK_GRAD_IN: return s->dx;
    case TRI_CHUNK_LOSSES: return s->losses;
    }
    return tri_tensor_none();
}

/* ---- buffers (taken twice from the chunk's arena: planned, then for real) ---- */


static int toy_take_slot(toy *m, tri_arena *ar, toy_slot *s)
{
    int64_t N = m->N, C = m->cfg.n_embd, H = m->cfg.n_hidden, V = m->cfg.vocab_size;
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    *s = (toy_slot){.blocks = s->blocks, .tokens = tri_tensor_none(), .targets = tri_tensor_none(),
                    .grad_out = tri_tensor_none()};
    int rc = m->place.first ? TRI_ARENA_TAKE(ar, K, &s->tokens, TRI_I32, N) : TRI_OK;
    if (!rc && m->place.last) rc = TRI_ARENA_TAKE(ar, K, &s->targets, TRI_I32, N);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &s->x_in, TRI_F32, N, C);
    for (int l = 0; l < m->L_l && !rc; l++) {
        rc = TRI_ARENA_TAKE(ar, K, &s->blocks[l].pre, TRI_F32, N, H);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &s->blocks[l].act, TRI_F32, N, H);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &s->blocks[l].out, TRI_F32, N, C);
    }
    if (!rc && m->place.last) {
        rc = TRI_ARENA_TAKE(ar, K, &s->logits, TRI_F32, N, V);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &s->maxes, TRI_F32, N);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &s->stats, TRI_F32, N, 2);
        if (!rc) rc = TRI_ARENA_TAKE(ar, K, &s->losses, TRI_F32, N);
    }
    if (!rc && !m->place.last) rc = TRI_ARENA_TAKE(ar, TRI_MEM_COMM, &s->grad_out, TRI_F32, N, C);
    if (!rc) rc = TRI_ARENA_TAKE(ar, K, &s->dx, TRI_F32, N, C);
    return rc;
}

static int toy_take_buffers(void *self, tri_arena *a)
{
    toy *m = self;
    int rc = TRI_OK;
    for (int s = 0; s < m->place.n_slots && !rc; s++)
        rc = toy_take_slot(m, a, &m->slots[s]);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_WORKSPACE, &m->tmp, TRI_F32, m->N, (int64_t)m->cfg.n_embd);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_WORKSPACE, &m->dact, TRI_F32, m->N, (int64_t)m->cfg.n_hidden);
    return rc;
}

/* ---- creation ---- */

/* The view of parameter `name` in v (w or g), or NULL when it is not on this chunk. */
static tri_tensor *toy_view(toy *m, toy_weights *v, const char *name)
{
    if (strcmp(name, "wte") == 0)
        return &v->wte;
    if (strcmp(name, "head.w") == 0)
        return &v->head_w;
    int layer = 0, used = 0;
    if (sscanf(name, "h.%d.%n", &layer, &used) != 1 || used == 0)
        return NULL;
    int l = layer - m->place.layer_start;
    for (int j = 0; j < TOY_BLOCK_PARAMS && l >= 0 && l < m->L_l; j++)
        if (strcmp(name + used, toy_block_rows[j].name) == 0)
            return (tri_tensor *)((char *)&v->h[l] + toy_block_rows[j].field);
    return NULL;
}

static int toy_unit_of(const tri_param_layout *L, const char *name)
{
    int i = tri_layout_find(L, name);
    return i >= 0 ? L->params[i].spec.unit : -1;
}

/* Every parameter's views and the units of the embedding, the first block and the head. */
static int toy_map_views(toy *m)
{
    const tri_param_layout *L = &m->chunk.layout;
    for (int i = 0; i < L->n; i++) {
        m->wslot[i] = toy_view(m, &m->w, L->params[i].spec.name);
        m->gslot[i] = toy_view(m, &m->g, L->params[i].spec.name);
        if (!m->wslot[i] || !m->gslot[i])
            return TRI_ERR(TRI_EINTERNAL, "toy: parameter %s has no view", L->params[i].spec.name);
    }
    char name[TRI_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "h.%d.%s", m->place.layer_start, toy_block_rows[0].name);
    m->unit_wte = toy_unit_of(L, "wte");
    m->unit_block0 = toy_unit_of(L, name);
    m->unit_head = toy_unit_of(L, "head.w");
    return TRI_OK;
}

static int toy_alloc_host(toy *m)
{
    int n = m->chunk.layout.n;
    m->w.h = calloc((size_t)m->L_l + 1, sizeof *m->w.h);
    m->g.h = calloc((size_t)m->L_l + 1, sizeof *m->g.h);
    m->wslot = calloc((size_t)n + 1, sizeof *m->wslot);
    m->gslot = calloc((size_t)n + 1, sizeof *m->gslot);
    m->slots = calloc((size_t)m->place.n_slots, sizeof *m->slots);
    if (!m->w.h || !m->g.h || !m->wslot || !m->gslot || !m->slots)
        return TRI_ERR(TRI_ENOMEM, "toy: out of memory");
    for (int s = 0; s < m->place.n_slots; s++)
        if (!(m->slots[s].blocks = calloc((size_t)m->L_l + 1, sizeof *m->slots[s].blocks)))
            return TRI_ERR(TRI_ENOMEM, "toy: out of memory");
    return TRI_OK;
}

/* Sizes every buffer (dev NULL: planning only) or builds the chunk, as tri_gpt's setup does:
 * descriptions -> layout -> tri_chunk_begin -> passes -> tri_chunk_build. */
static int toy_setup(toy *m, const toy_config *cfg, const tri_train_layout *run, const tri_chunk_place *place,
                     tri_device *dev, tri_comm *dp_comm)
{
    int rc = toy_check(cfg, run, place);
    if (rc)
        return rc;
    m->cfg = *cfg;
    m->place = *place;
    m->dev = dev;
    m->N = run->B * run->T;
    m->L_l = place->layer_end - place->layer_start;
    tri_param_spec *specs = NULL;
    tri_param_layout layout;
    int n = 0;
    rc = toy_param_specs(cfg, 1, place, &specs, &n);
    if (!rc) rc = tri_layout_create(&layout, specs, n, 1, 0, run->dp, place->dp_rank);
    free(specs);
    if (rc)
        return rc;
    tri_chunk_begin(&m->chunk, run, place, toy_num_param_tensors(cfg), &layout); /* it owns the layout now */
    m->has_chunk = true;
    rc = toy_alloc_host(m);
    if (!rc) rc = toy_map_views(m);
    if (!rc) rc = toy_declare_passes(m);
    if (rc)
        return rc;
    tri_chunk_model model = {.self = m, .take_buffers = toy_take_buffers, .bind = toy_bind, .run = toy_run,
                             .load_batch = toy_load_batch, .buffer = toy_buffer};
    return tri_chunk_build(&m->chunk, &model, dev, dp_comm);
}

static void toy_destroy(void *self)
{
    toy *m = self;
    if (!m)
        return;
    if (m->has_chunk)
        tri_chunk_destroy(&m->chunk);
    for (int s = 0; m->slots && s < m->place.n_slots; s++)
        free(m->slots[s].blocks);
    free(m->slots);
    free(m->w.h);
    free(m->g.h);
    free(m->wslot);
    free(m->gslot);
    free(m);
}

static int toy_create(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                      const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    *model = NULL;
    *chunk = NULL;
    if (tp_comm->size != 1)
        return TRI_ERR(TRI_EINVAL, "toy-mlp: a tensor-parallel group of %d ranks (it supports 1)", tp_comm->size);
    toy *m = calloc(1, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "toy: out of memory");
    int rc = toy_setup(m, cfg, run, place, dev, dp_comm);
    if (rc) {
        toy_destroy(m);
        return rc;
    }
    *model = m;
    *chunk = &m->chunk;
    return TRI_OK;
}

static int toy_plan(const void *cfg, const tri_train_layout *run, const tri_chunk_place *place, int tp_rank,
                    size_t bytes[TRI_MEM_KINDS])
{
    toy *m = calloc(1, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "toy: out of memory");
    int rc = toy_setup(m, cfg, run, place, NULL, NULL);
    if (!rc)
        memcpy(bytes, m->chunk.arena.by_kind, TRI_MEM_KINDS * sizeof *bytes);
    toy_destroy(m);
    return rc;
}

/* The logits of token row `row` of the micro-batch in slot (forward only: not overwritten yet by
 * their gradient). */
static int toy_logits_row(void *self, int slot, int64_t row, float *logits)
{
    toy *m = self;
    int64_t V = m->cfg.vocab_size;
    if (!m->place.last || slot < 0 || slot >= m->place.n_slots)
        return TRI_ERR(TRI_EINVAL, "toy: logits live on the last chunk, in one of its %d slots (got %d)",
                       m->place.n_slots, slot);
    if (row < 0 || row >= m->N)
        return TRI_ERR(TRI_EINVAL, "toy: logits row %lld outside the %lld rows of a micro-batch", (long long)row,
                       (long long)m->N);
    return tri_device_copy_to_host(m->dev, logits, tri_tensor_range(m->slots[slot].logits, row * V, V));
}

static const tri_model_family toy_family = {
    .type = "toy-mlp",
    .config_size = sizeof(toy_config),
    .parse = toy_parse,
    .to_json = toy_to_json,
    .dims = toy_dims,
    .num_params = toy_num_params,
    .padded_vocab = toy_padded_vocab,
    .num_param_tensors = toy_num_params_family,
    .param_specs = toy_param_specs,
    .check = toy_check,
    .create = toy_create,
    .destroy = toy_destroy,
    .plan = toy_plan,
    .logits_row = toy_logits_row,
};

/* ======================================================================================== */
/* The runs                                                                                  */
/* ======================================================================================== */

enum {
    TOY_V = 32, TOY_C = 16, TOY_H = 32, TOY_L = 4, TOY_MAX_SEQ = 16, /* the toy */
    TOY_B = 2, TOY_T = 8, TOY_GLOBAL = 8, /* micro-batch, sequence, global batch (samples) */
    TOY_STEPS = 5,
    TOY_N_PARAMS = 2 + TOY_BLOCK_PARAMS * TOY_L,
    TOY_MAX_RANKS = 4,
};

static const toy_config toy_cfg = {.vocab_size = TOY_V, .n_embd = TOY_C, .n_hidden = TOY_H, .n_layer = TOY_L,
                                   .max_seq = TOY_MAX_SEQ, .init_std = 0.1f};

static tri_model toy_model(void)
{
    tri_model m = {.family = &toy_family, .cfg = (void *)&toy_cfg, .owns_cfg = false};
    snprintf(m.name, sizeof m.name, "toy-mlp-test");
    return m;
}

/* Sample s: a walk of next = (7 t + 3) mod V from token 5 s mod V. Every next token is a function of
 * the current one (a bijection of Z/32), which the toy, seeing one token at a time, can learn. */
static int toy_fill(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    for (int64_t s = 0; s < n; s++) {
        int32_t t = (int32_t)(((first + s) * 5) % TOY_V);
        for (int k = 0; k <= TOY_T; k++) {
            w[s * (TOY_T + 1) + k] = t;
            t = (7 * t + 3) % TOY_V;
        }
    }
    return TRI_OK;
}

static tri_lr_schedule toy_lr(void)
{
    return (tri_lr_schedule){.lr = 3e-2f, .min_lr = 1e-3f, .warmup_iters = 0, .decay_iters = 20,
                             .style = TRI_LR_COSINE};
}

typedef struct toy_layout {
    const char *name;
    int pp, dp, zero;
    const char *schedule;      /* NULL: 1f1b */
    int per_chunk;             /* --num-layers-per-virtual-pipeline-stage (0: no interleaving) */
    bool overlap;              /* --overlap-grad-reduce and --overlap-param-gather */
} toy_layout;

static int toy_resolve(const tri_model *m, const toy_layout *l, bool deterministic, int world, tri_train_layout *out)
{
    tri_layout_request req = {.num_gpus = world, .tp = 1, .pp = l->pp, .layers_per_virtual_stage = l->per_chunk,
                              .micro_batch = TOY_B, .global_batch = TOY_GLOBAL, .seq_length = TOY_T,
                              .zero_stage = l->zero, .schedule = l->schedule, .recompute = TRI_RECOMPUTE_NONE,
                              .precision = TRI_PRECISION_FP32, .first_layers = -1, .last_layers = -1,
                              .deterministic = deterministic, .overlap_grad_reduce = l->overlap,
                              .overlap_param_gather = l->overlap};
    return tri_cli_model_layout(m, req, out);
}

static tri_session_options toy_options(void)
{
    return (tri_session_options){.run = {.seed = 1234}, .clip_grad = 1.0f,
                                 .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
}

/* One run on thread ranks: train up to iteration `until` (from a checkpoint when load is set),
 * optionally save the last step. */
typedef struct toy_job {
    toy_layout l;
    const char *load;          /* NULL: from the initial weights; else a run directory to resume */
    const char *save;          /* NULL: no checkpoint; else the run directory to save the last step in */
    bool plain;                /* without deterministic mode */
    int64_t until;
    /* results */
    int v;                             /* model chunks per rank */
    uint64_t overlapped;               /* world rank 0's reductions and gathers started non-blocking */
    int64_t start;                     /* the first iteration run */
    double losses[TOY_STEPS];          /* by iteration (world rank 0) */
    uint64_t hash[TOY_N_PARAMS];       /* FNV-1a of each parameter's final weights, by global index */
    char failure[TOY_MAX_RANKS][256];  /* per rank: what the memory plan got wrong ("" when right) */
} toy_job;

static uint64_t toy_fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The planner's bytes for this rank equal what its chunks' and trainer's arenas allocated. */
static int toy_plan_matches(const tri_model *m, const tri_session_options *o, tri_session *ss, size_t *total,
                            char *failure, size_t cap)
{
    size_t planned[TRI_MEM_KINDS], model[TRI_MEM_KINDS];
    int rc = tri_model_rank_plan(m, &o->run, ss->grid.tp_rank, ss->grid.pp_rank, ss->grid.dp_rank, planned);
    tri_model_rank_memory(&ss->model, model);
    *total = 0;
    for (int k = 0; k < TRI_MEM_KINDS && !rc; k++) {
        size_t have = model[k] + ss->trainer.arena.by_kind[k];
        *total += have;
        if (have != planned[k] && !failure[0])
            snprintf(failure, cap, "%s planned %zu bytes, allocated %zu", tri_mem_kind_name((tri_mem_kind)k),
                     planned[k], have);
    }
    if (!rc && *total == 0)
        snprintf(failure, cap, "nothing allocated");
    return rc;
}

/* Hashes every parameter's local values (collective over dp); dp rank 0 records them. */
static int toy_hash_weights(tri_session *ss, toy_job *j)
{
    int rc = TRI_OK;
    for (int c = 0; c < ss->model.v && !rc; c++) {
        tri_chunk *ch = ss->model.chunk[c];
        for (int i = 0; i < ch->layout.n && !rc; i++) {
            const tri_param *p = &ch->layout.params[i];
            float *host = malloc((size_t)p->numel * sizeof *host);
            rc = host ? tri_zero_read_param(&ch->zero, p, false, host) : TRI_ERR(TRI_ENOMEM, "out of memory");
            if (!rc && ss->grid.dp_rank == 0)
                j->hash[p->spec.global_index] = toy_fnv(host, (size_t)p->numel * sizeof *host);
            free(host);
        }
    }
    return rc;
}

static int toy_train(tri_session *ss, toy_job *j, tri_session_ckpt_run *cr, int rank)
{
    int64_t it = 0;
    int rc = j->load ? tri_session_ckpt_resume(ss, j->load, cr, &it) : TRI_OK;
    if (rank == 0)
        j->start = it;
    tri_batch_source src = {.ctx = NULL, .fill = toy_fill};
    for (; it < j->until && !rc; it++) {
        tri_step_result res;
        rc = tri_trainer_step(&ss->trainer, &src, it, tri_lr_at(&cr->lr, it + 1), &res);
        if (!rc && rank == 0)
            j->losses[it] = res.loss;
    }
    if (!rc && j->save)
        rc = tri_session_ckpt_save(ss, j->save, cr, it);
    return rc;
}

static int toy_rank(int rank, int size, tri_comm *world, void *arg)
{
    toy_job *j = arg;
    tri_model m = toy_model();
    tri_session_options o = toy_options();
    tri_session_ckpt_run cr = {.seed = o.run.seed, .lr = toy_lr()};
    tri_log_set_quiet(true);
    int rc = toy_resolve(&m, &j->l, !j->plain, size, &o.run.layout);
    if (rc)
        return rc;
    tri_device *dev = NULL;
    tri_session ss;
    rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&ss, world, dev, &m, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    size_t total = 0;
    char *failure = j->failure[rank];
    if (rank == 0)
        j->v = ss.model.v;
    rc = toy_plan_matches(&m, &o, &ss, &total, failure, sizeof j->failure[rank]);
    if (!rc) rc = toy_train(&ss, j, &cr, rank);
    double off = total ? ((double)dev->peak_bytes - (double)total) / (double)total : 1.0;
    if (!rc && fabs(off) > 0.05 && !failure[0])
        snprintf(failure, sizeof j->failure[rank], "measured peak %zu bytes, planned %zu (%+.1f%%)",
                 dev->peak_bytes, total, 100.0 * off);
    for (int c = 0; c < ss.model.v && rank == 0; c++) {
        const tri_zero *z = &ss.model.chunk[c]->zero;
        j->overlapped += z->started_grad_reductions + z->started_param_gathers;
    }
    if (!rc) rc = toy_hash_weights(&ss, j);
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

/* Runs j on its ranks; expects every rank's memory plan right. The run's status, its message kept. */
static int toy_try_job(toy_job *j)
{
    int world = j->l.pp * j->l.dp;
    if (world > TOY_MAX_RANKS)
        return TRI_ERR(TRI_EINVAL, "%s: %d ranks, at most %d", j->l.name, world, TOY_MAX_RANKS);
    int rc = tri_run_thread_ranks(world, toy_rank, j);
    for (int r = 0; r < world && !rc; r++)
        cr_expect(!j->failure[r][0], "%s, rank %d: %s", j->l.name, r, j->failure[r]);
    return rc ? tri_error_context(rc, "%s", j->l.name) : TRI_OK;
}

static void toy_run_job(toy_job *j)
{
    cr_assert_eq(toy_try_job(j), TRI_OK, "%s", tri_error_message());
}

static void toy_expect_same(const toy_job *ref, const toy_job *got, int64_t from)
{
    for (int64_t s = from; s < TOY_STEPS; s++)
        cr_expect(memcmp(&ref->losses[s], &got->losses[s], sizeof(double)) == 0,
                  "%s: loss of iteration %lld is %.17g, one rank's %.17g", got->l.name, (long long)s + 1,
                  got->losses[s], ref->losses[s]);
    for (int i = 0; i < TOY_N_PARAMS; i++)
        cr_expect_eq(ref->hash[i], got->hash[i], "%s: final weights of parameter %d differ from one rank's",
                     got->l.name, i);
}

/* ======================================================================================== */
/* A double-precision host copy of the toy's forward (the reference)                         */
/* ======================================================================================== */

static double toy_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* logits z (V) of one token from weights w (by global index). */
static void toy_ref_logits(double *const *w, int32_t token, double *z)
{
    double x[TOY_C], act[TOY_H];
    for (int c = 0; c < TOY_C; c++)
        x[c] = w[0][token * TOY_C + c];
    for (int l = 0; l < TOY_L; l++) {
        const double *w1 = w[1 + 4 * l], *b1 = w[2 + 4 * l], *w2 = w[3 + 4 * l], *b2 = w[4 + 4 * l];
        for (int h = 0; h < TOY_H; h++) {
            double pre = b1[h];
            for (int c = 0; c < TOY_C; c++)
                pre += w1[h * TOY_C + c] * x[c];
            act[h] = toy_gelu(pre);
        }
        for (int c = 0; c < TOY_C; c++) {
            double y = b2[c];
            for (int h = 0; h < TOY_H; h++)
                y += w2[c * TOY_H + h] * act[h];
            x[c] += y;
        }
    }
    for (int v = 0; v < TOY_V; v++) {
        z[v] = 0.0;
        for (int c = 0; c < TOY_C; c++)
            z[v] += w[TOY_N_PARAMS - 1][v * TOY_C + c] * x[c];
    }
}

/* Mean token loss of global batch 0 (samples [0, TOY_GLOBAL)); *zmax = the largest |logit| (optional). */
static double toy_ref_loss(double *const *w, double *zmax)
{
    int32_t win[TOY_GLOBAL * (TOY_T + 1)];
    toy_fill(NULL, 0, TOY_GLOBAL, win);
    double total = 0.0, z[TOY_V], big = 0.0;
    for (int s = 0; s < TOY_GLOBAL; s++)
        for (int t = 0; t < TOY_T; t++) {
            toy_ref_logits(w, win[s * (TOY_T + 1) + t], z);
            double mx = z[0], sum = 0.0;
            for (int v = 0; v < TOY_V; v++) {
                mx = fmax(mx, z[v]);
                big = fmax(big, fabs(z[v]));
            }
            for (int v = 0; v < TOY_V; v++)
                sum += exp(z[v] - mx);
            total += log(sum) + mx - z[win[s * (TOY_T + 1) + t + 1]];
        }
    if (zmax)
        *zmax = big;
    return total / (double)(TOY_GLOBAL * TOY_T);
}

/* What one rank's session gives for the gradient check: initial weights, batch 0's gradients and
 * loss, and the logits of two rows of a sampling forward. */
typedef struct toy_grad_job {
    int64_t numel[TOY_N_PARAMS];
    double *w[TOY_N_PARAMS];       /* initial weights (malloc'd) */
    float *g[TOY_N_PARAMS];        /* their gradients of batch 0's mean loss (malloc'd) */
    double loss;
    int64_t rows[2];
    float logits[2][TOY_V];
} toy_grad_job;

static int toy_read_all(tri_session *ss, toy_grad_job *j)
{
    tri_chunk *ch = ss->model.chunk[0];
    int rc = TRI_OK;
    for (int i = 0; i < ch->layout.n && !rc; i++) {
        const tri_param *p = &ch->layout.params[i];
        int gi = p->spec.global_index;
        float *host = malloc((size_t)p->numel * sizeof *host);
        j->numel[gi] = p->numel;
        j->w[gi] = malloc((size_t)p->numel * sizeof *j->w[gi]);
        j->g[gi] = malloc((size_t)p->numel * sizeof *j->g[gi]);
        if (!host || !j->w[gi] || !j->g[gi])
            rc = TRI_ERR(TRI_ENOMEM, "out of memory");
        if (!rc) rc = tri_zero_read_param(&ch->zero, p, false, host);
        for (int64_t k = 0; k < p->numel && !rc; k++)
            j->w[gi][k] = host[k];
        if (!rc) rc = tri_zero_read_param(&ch->zero, p, true, j->g[gi]);
        free(host);
    }
    return rc;
}

static int toy_grad_rank(int rank, int size, tri_comm *world, void *arg)
{
    toy_grad_job *j = arg;
    tri_model m = toy_model();
    tri_session_options o = toy_options();
    toy_layout one = {.name = "one rank", .pp = 1, .dp = 1};
    tri_log_set_quiet(true);
    int rc = toy_resolve(&m, &one, false, size, &o.run.layout);
    if (rc)
        return rc;
    tri_device *dev = NULL;
    tri_session ss;
    rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&ss, world, dev, &m, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_batch_source src = {.fill = toy_fill};
    int32_t win[TOY_B * (TOY_T + 1)];
    bool have = false;
    rc = tri_trainer_gradients(&ss.trainer, &src, 0, &j->loss);
    if (!rc) rc = toy_read_all(&ss, j);
    toy_fill(NULL, 0, TOY_B, win);
    j->rows[0] = 3;
    j->rows[1] = TOY_B * TOY_T - 1;
    for (int r = 0; r < 2 && !rc; r++) {
        rc = tri_model_rank_logits(&ss.model, win, j->rows[r], j->logits[r], &have);
        if (!rc && !have)
            rc = TRI_ERR(TRI_EINTERNAL, "the one rank holds no last chunk");
    }
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

static void toy_grad_job_free(toy_grad_job *j)
{
    for (int i = 0; i < TOY_N_PARAMS; i++) {
        free(j->w[i]);
        free(j->g[i]);
    }
}

/* The central difference of the reference loss in element k of parameter gi. */
static double toy_fd(toy_grad_job *j, int gi, int64_t k, double h)
{
    double keep = j->w[gi][k];
    j->w[gi][k] = keep + h;
    double up = toy_ref_loss(j->w, NULL);
    j->w[gi][k] = keep - h;
    double down = toy_ref_loss(j->w, NULL);
    j->w[gi][k] = keep;
    return (up - down) / (2.0 * h);
}

/* ======================================================================================== */
/* Tests                                                                                     */
/* ======================================================================================== */

Test(model_family, toy_describes_itself)
{
    tri_model m = toy_model();
    tri_param_spec *specs = NULL;
    int n = 0;
    cr_assert_eq(tri_model_all_specs(&m, 1, &specs, &n), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(n, TOY_N_PARAMS);
    cr_expect_str_eq(specs[0].name, "wte");
    cr_expect_str_eq(specs[1 + 4 * 2 + 2].name, "h.2.fc2.w");
    cr_expect_eq(specs[1 + 4 * 2 + 2].shape[0], TOY_C);
    cr_expect_eq(specs[1 + 4 * 2 + 2].shape[1], TOY_H);
    cr_expect_str_eq(specs[n - 1].name, "head.w");
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += specs[i].shape[0] * (specs[i].ndim > 1 ? specs[i].shape[1] : 1);
    cr_expect_eq(total, toy_family.num_params(m.cfg));
    free(specs);

    /* the config round trip a checkpoint relies on, and a refused config */
    char *json = NULL;
    void *back = NULL;
    cr_assert_eq(toy_family.to_json(m.cfg, &json), TRI_OK);
    cr_assert_eq(tri_model_config_new(&toy_family, toy_family.parse, json, "toy.json", &back), TRI_OK, "%s",
                 tri_error_message());
    cr_expect(memcmp(back, &toy_cfg, sizeof toy_cfg) == 0, "%s does not parse back into the config", json);
    free(back);
    free(json);
    cr_expect_eq(tri_model_config_new(&toy_family, toy_family.parse, "{\"vocab_size\": 0}", "bad.json", &back),
                 TRI_EINVAL);
    cr_expect_null(back);
    cr_expect(strstr(tri_error_message(), "vocab_size") != NULL, "%s", tri_error_message());
}

Test(model_family, toy_refuses_what_it_lacks)
{
    tri_model m = toy_model();
    tri_model_run o = toy_options().run;
    toy_layout one = {.name = "one rank", .pp = 1, .dp = 1};
    cr_assert_eq(toy_resolve(&m, &one, false, 1, &o.layout), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(tri_model_rank_check(&m, &o), TRI_OK, "%s", tri_error_message());
    struct { const char *flag; tri_train_layout l; } bad[] = {
        {"--tensor-model-parallel-size", o.layout},
        {"--sequence-parallel", o.layout},
        {"--recompute-granularity", o.layout},
        {"--bf16", o.layout},
        {"--seq-length", o.layout},
    };
    bad[0].l.tp = 2;
    bad[1].l.sequence_parallel = true;
    bad[2].l.recompute = TRI_RECOMPUTE_SELECTIVE;
    bad[3].l.precision = TRI_PRECISION_BF16;
    bad[4].l.T = TOY_MAX_SEQ + 1;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tri_model_run r = o;
        r.layout = bad[k].l;
        cr_expect_eq(tri_model_rank_check(&m, &r), TRI_EINVAL, "%s was accepted", bad[k].flag);
        cr_expect(strstr(tri_error_message(), bad[k].flag) != NULL, "refusing %s: %s", bad[k].flag,
                  tri_error_message());
    }
    /* the layout validator sees the toy as a one-head transformer and refuses tp 2 first */
    tri_layout_request req = {.num_gpus = 2, .tp = 2, .pp = 1, .micro_batch = TOY_B, .seq_length = TOY_T,
                              .first_layers = -1, .last_layers = -1};
    tri_train_layout out;
    cr_expect_eq(tri_cli_model_layout(&m, req, &out), TRI_EINVAL);
}

Test(model_family, toy_backward_matches_finite_differences)
{
    toy_grad_job j;
    memset(&j, 0, sizeof j);
    cr_assert_eq(tri_run_thread_ranks(1, toy_grad_rank, &j), TRI_OK, "%s", tri_error_message());

    /* the forward: the engine's fp32 loss against the double reference, and near log V at this
     * initialisation: loss - log V = logsumexp(z) - log V - z_target lies in [-2 max|z|, 2 max|z|] */
    double zmax = 0.0, ref = toy_ref_loss(j.w, &zmax);
    cr_expect(fabs(j.loss - ref) <= 1e-5 * ref, "loss %.9g, double reference %.9g", j.loss, ref);
    cr_expect(zmax < 0.5, "init_std %g gives logits up to %g: not a small initialisation", (double)toy_cfg.init_std,
              zmax);
    cr_expect(fabs(j.loss - log((double)TOY_V)) <= 2.0 * zmax + 1e-5,
              "loss %.6f at step 0, log V %.6f, max |logit| %.3g", j.loss, log((double)TOY_V), zmax);

    /* sampling's logits (tri_model_rank_logits through the family's logits_row) */
    int32_t win[TOY_B * (TOY_T + 1)];
    toy_fill(NULL, 0, TOY_B, win);
    for (int r = 0; r < 2; r++) {
        int64_t row = j.rows[r];
        double z[TOY_V];
        toy_ref_logits(j.w, win[(row / TOY_T) * (TOY_T + 1) + row % TOY_T], z);
        for (int v = 0; v < TOY_V; v++)
            cr_expect(fabs(j.logits[r][v] - z[v]) <= 1e-5, "row %lld logit %d: %.9g, reference %.9g", (long long)row,
                      v, (double)j.logits[r][v], z[v]);
    }

    /* the backward: per parameter, its largest gradient element and two fixed ones against central
     * differences of the double reference (h = 1e-5: truncation ~h^2, rounding ~1e-16 / h, both below
     * 1e-9); the engine's fp32 sums of 64 tokens' contributions are good to ~64 x 2^-24 ~ 4e-6 of the
     * parameter's gradient scale, so 1e-4 of it is allowed */
    for (int gi = 0; gi < TOY_N_PARAMS; gi++) {
        int64_t n = j.numel[gi], top = 0;
        double scale = 0.0;
        for (int64_t k = 0; k < n; k++)
            if (fabs(j.g[gi][k]) > scale) {
                scale = fabs(j.g[gi][k]);
                top = k;
            }
        cr_expect(scale > 1e-6, "parameter %d: gradient scale %g, too small to check", gi, scale);
        int64_t picks[3] = {top, n / 3, (2 * n) / 3 + 1};
        for (int q = 0; q < 3; q++) {
            int64_t k = picks[q] % n;
            double fd = toy_fd(&j, gi, k, 1e-5);
            cr_expect(fabs(j.g[gi][k] - fd) <= 1e-4 * scale + 1e-9,
                      "parameter %d element %lld: gradient %.9g, finite difference %.9g (scale %.3g)", gi, (long long)k,
                      (double)j.g[gi][k], fd, scale);
        }
    }
    toy_grad_job_free(&j);
}

Test(model_family, every_layout_trains_the_same_bits, .timeout = 300)
{
    toy_job ref = {.l = {.name = "one rank", .pp = 1, .dp = 1}, .until = TOY_STEPS};
    toy_run_job(&ref);
    for (int s = 0; s < TOY_STEPS; s++)
        cr_expect(isfinite(ref.losses[s]), "iteration %d: loss %g", s + 1, ref.losses[s]);
    /* the toy learns the bigram: 5 steps take a clear bite out of log V = 3.47 */
    cr_expect(ref.losses[TOY_STEPS - 1] < ref.losses[0] - 0.5, "losses %.4f -> %.4f: no learning", ref.losses[0],
              ref.losses[TOY_STEPS - 1]);
    for (int s = 1; s < TOY_STEPS; s++)
        cr_expect(ref.losses[s] < ref.losses[s - 1], "loss rose at iteration %d: %.6f -> %.6f", s + 1,
                  ref.losses[s - 1], ref.losses[s]);

    static const toy_layout layouts[] = {
        {"pp2 1f1b", 2, 1, 0, NULL, 0, false},
        {"pp2 interleaved", 2, 1, 0, "interleaved", 1, false},
        {"dp2 zero0", 1, 2, 0, NULL, 0, false},
        {"dp2 zero1", 1, 2, 1, NULL, 0, false},
        {"dp2 zero2", 1, 2, 2, NULL, 0, false},
        {"dp2 zero3", 1, 2, 3, NULL, 0, false},
        {"pp2 dp2 zero1", 2, 2, 1, NULL, 0, false},
        {"dp2 zero1 overlap", 1, 2, 1, NULL, 0, true},
        {"dp2 zero3 overlap", 1, 2, 3, NULL, 0, true},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        toy_job got = {.l = layouts[k], .until = TOY_STEPS};
        toy_run_job(&got);
        cr_expect_eq(got.v, layouts[k].per_chunk ? 2 : 1, "%s: %d model chunks per rank", got.l.name, got.v);
        cr_expect_eq(got.overlapped > 0, layouts[k].overlap, "%s: %llu operations overlapped", got.l.name,
                     (unsigned long long)got.overlapped);
        toy_expect_same(&ref, &got, 0);
    }

    /* without deterministic mode a pipeline still adds each parameter's micro-batch gradients in the
     * same order as one rank (the loss and norm are layout-independent sums anyway): the same bits.
     * (Plain against deterministic mode is not compared: AdamW turns rounding differences in
     * near-zero gradients into lr-sized steps: tu_adamw_drift_bound, tests/harness.h.) */
    toy_job plain = {.l = {.name = "one rank, plain", .pp = 1, .dp = 1}, .plain = true, .until = TOY_STEPS};
    toy_job plain_pp = {.l = {.name = "pp2 1f1b, plain", .pp = 2, .dp = 1}, .plain = true, .until = TOY_STEPS};
    toy_run_job(&plain);
    toy_run_job(&plain_pp);
    toy_expect_same(&plain, &plain_pp, 0);
}

Test(model_family, checkpoint_resumes_in_another_layout, .timeout = 300)
{
    char dir[4096];
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/trident-toy-ckpt-XXXXXX", base);
    cr_assert(mkdtemp(dir) != NULL, "mkdtemp %s failed", dir);
    toy_job ref = {.l = {.name = "one rank", .pp = 1, .dp = 1}, .until = TOY_STEPS};
    toy_job saved = {.l = {.name = "pp2, saving", .pp = 2, .dp = 1}, .save = dir, .until = 3};
    toy_job resumed = {.l = {.name = "dp2 zero2, resumed", .pp = 1, .dp = 2, .zero = 2}, .load = dir,
                       .until = TOY_STEPS};
    int rc = toy_try_job(&ref);
    if (!rc) rc = toy_try_job(&saved);
    if (!rc) rc = toy_try_job(&resumed);
    char message[1024];
    snprintf(message, sizeof message, "%s", tri_error_message());
    cr_expect_eq(tri_fs_remove_tree(dir), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(rc, TRI_OK, "%s", message);
    cr_expect_eq(resumed.start, 3, "resumed at iteration %lld, saved at 3", (long long)resumed.start);
    for (int s = 0; s < 3; s++)
        cr_expect(memcmp(&ref.losses[s], &saved.losses[s], sizeof(double)) == 0, "pp2: loss %d differs", s + 1);
    toy_expect_same(&ref, &resumed, 3);
}
