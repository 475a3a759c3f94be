/* models/model_chunk.c - a decoder-only transformer's chunk: what every family's chunk does the same
 * way (see model_chunk.h). */
#include "models/model_chunk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/core/status.h"
#include "engine/device/ops/positions_math.h"
#include "layers/embedding.h"
#include "partitioner/constraints.h"
#include "partitioner/layout.h"
#include "partitioner/transformer.h"

tri_param_spec *tri_spec_list_add(tri_spec_list *l, const char *name, int ndim, const int64_t *shape, int split,
                                  bool decay, tri_init_kind init, float std)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        tri_param_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
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
    s->unit = l->unit;
    return s;
}

/* ---- checks ---- */

int tri_decoder_check(const tri_train_layout *run, const tri_chunk_place *o, const char *name,
                      const tri_transformer *dims, int64_t widest, const char *widest_keys)
{
    int tp = run->tp, n_layer = (int)dims->n_layer;
    int rc = tri_layout_check_model(dims, run); /* the layout rules, stated once (partitioner/constraints.h) */
    if (rc)
        return tri_error_context(rc, "%s", name);
    if (o->layer_start < 0 || o->layer_end > n_layer || o->layer_start > o->layer_end)
        return TRI_ERR(TRI_EINVAL, "stage layers [%d, %d) outside the %d layers of %s", o->layer_start, o->layer_end,
                       n_layer, name);
    if (o->n_slots < 1)
        return TRI_ERR(TRI_EINVAL, "a stage needs at least one activation slot (got %d)", o->n_slots);
    /* B*T*widest must fit comfortably in 64-bit sizes and BLAS's int dimensions */
    int64_t max_tokens = (1LL << 31) / (widest > 0 ? widest : 1) * tp;
    if (max_tokens < 1)
        return TRI_ERR(TRI_EINVAL, "%s: %s = %lld values per token is too wide (a buffer of one token's row over "
                       "--tensor-model-parallel-size %d must stay below 2^31 values): the config's sizes are too "
                       "large", name, widest_keys, (long long)widest, tp);
    if (run->B > (1 << 20) || run->B * run->T > max_tokens)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size %lld x --seq-length %lld is too large for %s: at most %lld "
                       "tokens per micro-batch with rows of %s = %lld values", (long long)run->B, (long long)run->T,
                       name, (long long)max_tokens, widest_keys, (long long)widest);
    return TRI_OK;
}

/* ---- making and freeing ---- */

int tri_decoder_begin(tri_decoder *d, const tri_decoder_shape *shape, const tri_param_spec *specs, int n,
                      const tri_train_layout *run, const tri_chunk_place *opt, tri_device *dev, tri_comm *tp_comm)
{
    int tp = tp_comm->size, tp_rank = tp_comm->rank;
    d->family = shape->family;
    if (tp != run->tp)
        return TRI_ERR(TRI_EINTERNAL, "%s: a tensor-parallel group of %d ranks for a layout of tp %d", d->family, tp,
                       run->tp);
    d->opt = *opt;
    d->dev = dev;
    d->tp = (tri_tp){.dev = dev, .comm = tp_comm, .sp = run->sequence_parallel && tp > 1};
    d->C = shape->C;
    d->vocab_size = shape->vocab_size;
    d->Vp = tri_padded_vocab(shape->vocab_size, tp);
    d->V_l = d->Vp / tp;
    d->vocab_start = d->V_l * tp_rank;
    d->N = run->B * run->T;
    d->seq = (tri_seq){.T = opt->cp > 1 ? opt->seq_T : run->T, .cp = opt->cp > 1 ? opt->cp : 1,
                       .cp_rank = opt->cp > 1 ? opt->cp_rank : 0};
    if (d->seq.cp > 1 && d->seq.T != run->T * d->seq.cp)
        return TRI_ERR(TRI_EINTERNAL, "%s: a local layout of %lld rows for a sequence of %lld over cp %d", d->family,
                       (long long)run->T, (long long)d->seq.T, d->seq.cp);
    d->cp = (tri_cp){.comm = opt->cp_comm, .cp = d->seq.cp, .cp_rank = d->seq.cp_rank, .type = run->cp_comm_type,
                     .deterministic = run->deterministic};
    d->N_l = tri_tp_rows(&d->tp, d->N);
    d->L_l = opt->layer_end - opt->layer_start;
    d->unit_embed = d->unit_pos = d->unit_block0 = d->unit_norm = d->unit_head = -1;
    d->private_embed = shape->tied_embedding && opt->first && opt->last && run->zero_stage < 2 && !run->deterministic;
    d->compute = shape->compute;
    d->embed = shape->embed, d->embed_grad = shape->embed_grad, d->pos = shape->pos, d->pos_grad = shape->pos_grad;

    tri_param_layout layout;
    int rc = tri_layout_create(&layout, specs, n, tp, tp_rank, run->dp, opt->dp_rank);
    if (rc)
        return rc;
    /* the experts' parts (ep or etp > 1, or tp > 1 at any ep) are sharded over the expert-data-parallel group */
    if (tri_layout_has_experts(&layout) &&
        (rc = tri_layout_set_experts_etp(&layout, run->ep > 1 ? run->ep : 1, run->etp > 1 ? run->etp : 1, tp,
                                         tp_rank)) != TRI_OK) {
        tri_layout_destroy(&layout);
        return rc;
    }
    tri_chunk_begin(&d->chunk, run, opt, shape->n_global_params, &layout); /* it owns the layout now */
    d->has_chunk = true;
    d->run = &d->chunk.run;
    d->slots = calloc((size_t)opt->n_slots, sizeof *d->slots);
    d->wslot = calloc((size_t)layout.n + 1, sizeof *d->wslot);
    d->gslot = calloc((size_t)layout.n + 1, sizeof *d->gslot);
    if (!d->slots || !d->wslot || !d->gslot)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory", d->family);
    return TRI_OK;
}

static int add_pass(tri_decoder *d, tri_pass_list list, int kind, int index, int n, const int *units,
                    const bool *grads)
{
    tri_pass p = {.kind = kind, .index = index, .n_units = n};
    for (int k = 0; k < n; k++) {
        p.unit[k] = units[k];
        p.grads[k] = grads[k];
    }
    return tri_chunk_add_pass(&d->chunk, list, &p);
}

#define UNITS(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (const int[]){__VA_ARGS__}
#define GRADS(...) (const bool[]){__VA_ARGS__}

/* The passes of tri_decoder_pass, cut where the units change. */
static int declare_passes(tri_decoder *d)
{
    bool private = d->private_embed;
    int n_embed = d->unit_pos >= 0 ? 2 : 1; /* the token table, and the position table where there is one */
    int rc = TRI_OK;
    for (int eval = 0; eval < 2 && !rc; eval++) {
        tri_pass_list list = eval ? TRI_PASSES_FORWARD_EVAL : TRI_PASSES_FORWARD;
        if (d->opt.first)
            rc = add_pass(d, list, TRI_DECODER_EMBEDDING, 0, n_embed, (const int[]){d->unit_embed, d->unit_pos},
                          GRADS(false, false));
        for (int l = 0; l < d->L_l && !rc; l++)
            rc = add_pass(d, list, TRI_DECODER_BLOCK, l, UNITS(d->unit_block0 + l), GRADS(false));
        if (!rc && d->opt.last)
            rc = add_pass(d, list, TRI_DECODER_HEAD, 0, UNITS(d->unit_norm, d->unit_head),
                          GRADS(false, !eval && !private));
    }
    if (!rc && d->opt.last)
        rc = add_pass(d, TRI_PASSES_BACKWARD, TRI_DECODER_HEAD_BACKWARD, 0, UNITS(d->unit_norm), GRADS(true));
    else if (!rc)
        rc = add_pass(d, TRI_PASSES_BACKWARD, TRI_DECODER_GRAD_FROM_NEXT, 0, 0, NULL, NULL);
    for (int l = d->L_l - 1; l >= 0 && !rc; l--)
        rc = add_pass(d, TRI_PASSES_BACKWARD, TRI_DECODER_BLOCK_BACKWARD, l, UNITS(d->unit_block0 + l), GRADS(true));
    if (!rc && d->opt.first)
        rc = add_pass(d, TRI_PASSES_BACKWARD, TRI_DECODER_EMBEDDING_BACKWARD, 0, n_embed,
                      (const int[]){d->unit_embed, d->unit_pos}, GRADS(true, true));
    if (!rc && private)
        rc = add_pass(d, TRI_PASSES_FINISH, TRI_DECODER_TIED_GRAD, 0, UNITS(d->unit_embed), GRADS(true));
    return rc;
}

static int load_batch(void *self, int slot, const int32_t *windows)
{
    return tri_decoder_load_batch(self, slot, windows);
}

static tri_tensor buffer(void *self, tri_chunk_buffer which, int slot)
{
    tri_decoder *d = self;
    tri_decoder_slot *s = &d->slots[slot];
    switch (which) {
    case TRI_CHUNK_ACT_IN: return s->x_in;
    case TRI_CHUNK_ACT_OUT: return s->out;
    case TRI_CHUNK_GRAD_OUT: return s->grad_out;
    case TRI_CHUNK_GRAD_IN: return s->dres;
    case TRI_CHUNK_LOSSES: return s->losses;
    }
    return tri_tensor_none();
}

/* The private accumulator starts each step at zero. */
static int zero_private(void *self)
{
    tri_decoder *d = self;
    return d->private_embed ? tri_op_fill(d->dev, d->lm_dembed, 0.0f) : TRI_OK;
}

int tri_decoder_build(tri_decoder *d, tri_chunk_model model, tri_device *dev, tri_comm *dp_comm)
{
    int rc = declare_passes(d);
    if (rc)
        return rc;
    if (!model.bind)
        model.bind = tri_decoder_bind;
    model.run = tri_decoder_run;
    model.load_batch = load_batch;
    model.buffer = buffer;
    model.zero_private = zero_private;
    rc = tri_chunk_build(&d->chunk, &model, dev, dp_comm);
    /* the experts' gradients reduce over the expert-data-parallel group (at ep 1 and tp > 1 the stage) */
    if (!rc && tri_layout_has_experts(&d->chunk.layout))
        tri_zero_bind_experts(&d->chunk.zero, d->opt.edp_comm);
    return rc;
}

void tri_decoder_destroy(tri_decoder *d)
{
    if (d->has_chunk)
        tri_chunk_destroy(&d->chunk);
    free(d->slots);
    free(d->wslot);
    free(d->gslot);
    for (int i = 0; i < d->n_owned; i++)
        free(d->owned[i]);
    free(d->owned);
}

void *tri_decoder_calloc(tri_decoder *d, int64_t n, size_t size)
{
    void **owned = realloc(d->owned, (size_t)(d->n_owned + 1) * sizeof *owned);
    if (!owned)
        return NULL;
    d->owned = owned;
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (p)
        d->owned[d->n_owned++] = p;
    return p;
}

int tri_decoder_create(void **model, tri_chunk **chunk, size_t size, tri_decoder_setup setup, const void *cfg,
                       const tri_train_layout *run, const tri_chunk_place *place, tri_device *dev,
                       tri_comm *tp_comm, tri_comm *dp_comm)
{
    *model = NULL;
    *chunk = NULL;
    tri_decoder *d = calloc(1, size);
    if (!d)
        return TRI_ERR(TRI_ENOMEM, "model chunk: out of memory");
    int rc = setup(d, cfg, run, place, dev, tp_comm, dp_comm);
    if (rc) {
        tri_decoder_free(d);
        return rc;
    }
    *model = d;
    *chunk = &d->chunk;
    return TRI_OK;
}

void tri_decoder_free(void *model)
{
    if (!model)
        return;
    tri_decoder_destroy(model);
    free(model);
}

/* ---- the chunk's calls ---- */

void tri_decoder_bind(void *self, int u, tri_tensor pflat, tri_tensor gflat)
{
    tri_decoder *d = self;
    const tri_param_layout *L = &d->chunk.layout;
    const tri_param_unit *unit = &L->units[u];
    for (int i = unit->first; i < unit->first + unit->count; i++) {
        const tri_param *p = &L->params[i];
        tri_tensor at = tri_tensor_range(pflat, p->offset - unit->start, p->numel);
        *d->wslot[i] = tri_tensor_reshape(at, p->spec.ndim, p->local_shape);
        if (tri_tensor_present(gflat)) {
            at = tri_tensor_range(gflat, p->offset - unit->start, p->numel);
            *d->gslot[i] = tri_tensor_reshape(at, p->spec.ndim, p->local_shape);
        }
    }
}

int tri_decoder_load_batch(tri_decoder *d, int slot, const int32_t *windows)
{
    int64_t B = d->run->B, T = d->run->T, W = d->seq.T + 1; /* T: the local rows, W: a window */
    tri_device *dev = d->dev;
    int32_t *buf = malloc((size_t)(2 * B * T) * sizeof *buf);
    if (!buf)
        return TRI_ERR(TRI_ENOMEM, "out of memory loading a batch");
    for (int64_t b = 0; b < B; b++) {
        if (d->seq.cp <= 1) {
            memcpy(buf + b * T, windows + b * W, (size_t)T * sizeof *buf);
            memcpy(buf + B * T + b * T, windows + b * W + 1, (size_t)T * sizeof *buf);
            continue;
        }
        for (int64_t t = 0; t < T; t++) { /* local row t of sequence b: its global position */
            int64_t p = tri_seq_position(d->seq.T, t, d->seq.cp, d->seq.cp_rank);
            buf[b * T + t] = windows[b * W + p];
            buf[B * T + b * T + t] = windows[b * W + p + 1];
        }
    }
    int rc = tri_device_copy_from_host(dev, d->slots[slot].tokens, buf);
    if (!rc) rc = tri_device_copy_from_host(dev, d->slots[slot].targets, buf + B * T);
    free(buf);
    return rc;
}

/* A view the family may not have (a position table): none when absent. */
static tri_tensor view_or_none(const tri_tensor *t)
{
    return t ? *t : tri_tensor_none();
}

int tri_decoder_run(void *self, const tri_pass *p, int slot, bool train, float dloss)
{
    tri_decoder *d = self;
    tri_decoder_slot *io = &d->slots[slot];
    const tri_decoder_compute *f = d->compute;
    switch (p->kind) {
    case TRI_DECODER_EMBEDDING:
        return tri_embedding_forward(&d->tp, io->x_in, io->tokens, *d->embed, view_or_none(d->pos), d->vocab_start,
                                     d->seq, d->full_a);
    case TRI_DECODER_BLOCK:
        return f->block_forward(self, p->index, slot);
    case TRI_DECODER_HEAD:
        return f->head_forward(self, slot, train, dloss);
    case TRI_DECODER_HEAD_BACKWARD:
        return f->head_backward(self, slot);
    case TRI_DECODER_BLOCK_BACKWARD:
        return f->block_backward(self, p->index, slot);
    case TRI_DECODER_EMBEDDING_BACKWARD:
        return tri_embedding_backward(&d->tp, *d->embed_grad, view_or_none(d->pos_grad), io->dres, io->tokens,
                                      d->vocab_start, d->seq, d->full_a);
    case TRI_DECODER_GRAD_FROM_NEXT:
        return tri_op_copy(d->dev, d->slots[slot].dres, d->slots[slot].grad_out);
    case TRI_DECODER_TIED_GRAD: {
        /* the embedding's gradient (its unit's one parameter, bound by the pass) = its own share + the
         * LM head's, added once per step as the embedding group adds two stages' shares */
        tri_tensor g = *d->gslot[d->chunk.layout.units[d->unit_embed].first];
        return tri_op_add(d->dev, g, g, d->lm_dembed);
    }
    }
    return TRI_ERR(TRI_EINTERNAL, "%s: unknown pass %d", d->family, p->kind);
}

/* ---- buffers ---- */

/* Slot's buffers before the family's: tokens, targets, x_in. */
static int take_inputs(tri_decoder *d, tri_arena *a, int slot)
{
    tri_decoder_slot *s = &d->slots[slot];
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    int rc = TRI_ARENA_TAKE(a, K, &s->tokens, TRI_I32, d->N);
    if (!rc) rc = TRI_ARENA_TAKE(a, K, &s->targets, TRI_I32, d->N);
    if (!rc) rc = TRI_ARENA_TAKE(a, K, &s->x_in, tri_decoder_act_dtype(d), d->N_l, d->C);
    return rc;
}

/* Slot's buffers after the family's; out is the stage's output. */
static int take_outputs(tri_decoder *d, tri_arena *a, int slot, tri_tensor out)
{
    tri_decoder_slot *s = &d->slots[slot];
    const tri_mem_kind K = TRI_MEM_ACTIVATIONS;
    tri_dtype act = tri_decoder_act_dtype(d);
    int rc = TRI_OK;
    s->out = out;
    if (d->opt.last) {
        rc = TRI_ARENA_TAKE(a, K, &s->dlnf, act, d->N_l, d->C);
        if (!rc) rc = TRI_ARENA_TAKE(a, K, &s->losses, TRI_F32, d->N);
    } else {
        rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &s->grad_out, act, d->N_l, d->C);
    }
    if (!rc) rc = TRI_ARENA_TAKE(a, K, &s->dres, act, d->N_l, d->C);
    return rc;
}

/* The scratch every block and micro-batch shares, the private accumulator, the head's buffers. */
static int take_scratch(tri_decoder *d, tri_arena *a)
{
    const tri_mem_kind K = TRI_MEM_WORKSPACE;
    tri_dtype act = tri_decoder_act_dtype(d);
    int rc = TRI_ARENA_TAKE(a, K, &d->tmp, act, d->N_l, d->C);
    if (!rc) rc = TRI_ARENA_TAKE(a, K, &d->dln, act, d->N_l, d->C);
    d->full_a = d->full_b = tri_tensor_none();
    if (!rc && d->tp.sp && tri_tp_size(&d->tp) > 1) {
        rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &d->full_a, act, d->N, d->C);
        if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &d->full_b, act, d->N, d->C);
    }
    d->ls.full_a = d->full_a;
    d->ls.full_b = d->full_b;
    d->lm_dembed = tri_tensor_none();
    if (!rc && d->private_embed)
        rc = TRI_ARENA_TAKE(a, TRI_MEM_GRADS, &d->lm_dembed, TRI_F32, d->V_l, d->C);
    if (!rc && d->opt.last) {
        rc = TRI_ARENA_TAKE(a, K, &d->ls.logits, act, d->N, d->V_l);
        if (!rc) rc = TRI_ARENA_TAKE(a, K, &d->ls.maxes, TRI_F32, d->N);
        if (!rc) rc = TRI_ARENA_TAKE(a, K, &d->ls.stats, TRI_F32, d->N, 2);
    }
    return rc;
}

int tri_decoder_take_buffers(tri_decoder *d, void *self, const tri_decoder_buffers *b, tri_arena *a)
{
    int L_l = d->L_l;
    int rc = b->shared(self, a);
    for (int s = 0; s < d->opt.n_slots && !rc; s++) {
        rc = take_inputs(d, a, s);
        for (int l = 0; l < L_l && !rc; l++)
            rc = b->block(self, a, s, l);
        if (!rc && d->opt.last)
            rc = b->final_norm(self, a, s);
        if (!rc) rc = take_outputs(d, a, s, L_l > 0 ? b->block_output(self, s, L_l - 1) : d->slots[s].x_in);
    }
    if (!rc) rc = take_scratch(d, a);
    if (!rc) rc = b->scratch(self, a);
    return rc;
}

int tri_decoder_take_cp_scratch(tri_decoder *d, tri_arena *a, int64_t NH_l, int64_t NH_kv_l, int64_t HS,
                                tri_cp_scratch *s)
{
    s->act = s->f32 = tri_tensor_none();
    if (d->cp.cp <= 1)
        return TRI_OK;
    tri_cp_shape shape = {.local = {.B = d->run->B, .T = d->run->T, .NH = NH_l, .NH_kv = NH_kv_l, .HS = HS},
                          .dtype = tri_decoder_act_dtype(d)};
    int64_t act_n, f32_n;
    int rc = tri_cp_scratch_numel(&d->cp, &shape, &act_n, &f32_n);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &s->act, shape.dtype, act_n);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &s->f32, TRI_F32, f32_n);
    return rc;
}

/* ---- sampling ---- */

int tri_decoder_logits_row(void *model, int slot, int64_t row, float *out)
{
    (void)slot; /* the head keeps one logits buffer: the last forward's */
    tri_decoder *d = model;
    const tri_tp *tp = &d->tp;
    tri_tensor logits = d->ls.logits;
    int64_t N = d->N, V_l = d->V_l, vocab_size = d->vocab_size;
    if (!d->opt.last)
        return TRI_ERR(TRI_EINVAL, "logits live on the last pipeline stage");
    if (row < 0 || row >= N)
        return TRI_ERR(TRI_EINVAL, "logits row %lld outside the %lld rows of a micro-batch", (long long)row,
                       (long long)N);
    /* this rank's V_l logits of the row, all-gathered over TP into the start of the logits buffer
     * after moving the row to the buffer's end, out of the way */
    int ntp = tri_tp_size(tp), rc = TRI_OK;
    int64_t Vp = V_l * ntp;
    tri_tensor src = tri_tensor_range(logits, row * V_l, V_l);
    if (ntp > 1) {
        if (N * V_l < Vp + V_l)
            return TRI_ERR(TRI_ENOTSUP, "reading logits under TP needs a micro-batch of at least %d rows", ntp + 1);
        tri_tensor stage = tri_tensor_range(logits, (N - 1) * V_l, V_l);
        src = tri_tensor_range(logits, 0, Vp);
        rc = tri_op_copy(tp->dev, stage, tri_tensor_range(logits, row * V_l, V_l));
        if (!rc) rc = tri_comm_all_gather(tp->comm, src, stage);
    }
    float *host = malloc((size_t)Vp * sizeof *host);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "out of memory for logits");
    if (!rc && src.dtype == TRI_BF16) { /* bf16 logits: read raw, widened on the host */
        uint16_t *raw = malloc((size_t)Vp * sizeof *raw);
        rc = raw ? tri_device_copy_to_host(tp->dev, raw, src) : TRI_ERR(TRI_ENOMEM, "out of memory for logits");
        for (int64_t v = 0; !rc && v < tri_tensor_numel(src); v++)
            host[v] = tri_bf16_to_float(raw[v]);
        free(raw);
    } else if (!rc) {
        rc = tri_device_copy_to_host(tp->dev, host, src);
    }
    if (!rc)
        memcpy(out, host, (size_t)vocab_size * sizeof *out);
    free(host);
    return rc;
}
