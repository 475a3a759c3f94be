/* models/llama_params.c - the Llama family's parameters: one table gives each block parameter's
 * Hugging Face name, shape, tensor-parallel split, weight decay, initialisation and the field of
 * tri_llama_block_weights that views it; descriptions, global indices and views all come from it
 * (names and shapes: llama.h). Qwen3's q_norm and k_norm follow o_proj, as Qwen3Attention registers
 * them. Initialisation is Hugging Face's: normal(0, initializer_range) for
 * every matrix and the embedding, ones for the norms, zeros for biases. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/llama.h"
#include "models/model_chunk.h"
#include "partitioner/layout.h"

/* Sizes a row's dimensions are given in. */
typedef enum { D_C = 0, D_Q, D_KV, D_F, D_HS } dim_kind;

/* When a row exists. */
typedef enum { ALWAYS = 0, IF_ATTENTION_BIAS, IF_MLP_BIAS, IF_DENSE, IF_QK_NORM } row_when;

typedef struct llama_param_row {
    const char *name;        /* after "model.layers.<i>." */
    int ndim;
    dim_kind dims[2];
    int split;               /* -1 replicated, else the dimension TP splits */
    bool kv;                 /* split into at most num_key_value_heads shards (llama.h) */
    bool decay;
    tri_init_kind init;
    row_when when;
    size_t field;            /* its view in tri_llama_block_weights */
} llama_param_row;

#define F(member) offsetof(tri_llama_block_weights, member)
#define MAT TRI_INIT_NORMAL

/* One block, in flat-buffer and global order: q, k, v (then their biases) and gate, up (then
 * theirs) consecutive, so that their shards form the fused views (llama.h). The MLP's rows come last:
 * a sparse layer (tri_llama_layer_is_sparse) has the MoE block's parameters in their place
 * (llama_moe.c). */
static const llama_param_row rows[] = {
    {"input_layernorm.weight", 1, {D_C}, -1, false, false, TRI_INIT_ONES, ALWAYS, F(ln1_w)},
    {"self_attn.q_proj.weight", 2, {D_Q, D_C}, 0, false, true, MAT, ALWAYS, F(q_w)},
    {"self_attn.k_proj.weight", 2, {D_KV, D_C}, 0, true, true, MAT, ALWAYS, F(k_w)},
    {"self_attn.v_proj.weight", 2, {D_KV, D_C}, 0, true, true, MAT, ALWAYS, F(v_w)},
    {"self_attn.q_proj.bias", 1, {D_Q}, 0, false, false, TRI_INIT_ZEROS, IF_ATTENTION_BIAS, F(q_b)},
    {"self_attn.k_proj.bias", 1, {D_KV}, 0, true, false, TRI_INIT_ZEROS, IF_ATTENTION_BIAS, F(k_b)},
    {"self_attn.v_proj.bias", 1, {D_KV}, 0, true, false, TRI_INIT_ZEROS, IF_ATTENTION_BIAS, F(v_b)},
    {"self_attn.o_proj.weight", 2, {D_C, D_Q}, 1, false, true, MAT, ALWAYS, F(attn.o_w)},
    {"self_attn.o_proj.bias", 1, {D_C}, -1, false, false, TRI_INIT_ZEROS, IF_ATTENTION_BIAS, F(attn.o_b)},
    {"self_attn.q_norm.weight", 1, {D_HS}, -1, false, false, TRI_INIT_ONES, IF_QK_NORM, F(attn.q_norm)},
    {"self_attn.k_norm.weight", 1, {D_HS}, -1, false, false, TRI_INIT_ONES, IF_QK_NORM, F(attn.k_norm)},
    {"post_attention_layernorm.weight", 1, {D_C}, -1, false, false, TRI_INIT_ONES, ALWAYS, F(ln2_w)},
    {"mlp.gate_proj.weight", 2, {D_F, D_C}, 0, false, true, MAT, IF_DENSE, F(gate_w)},
    {"mlp.up_proj.weight", 2, {D_F, D_C}, 0, false, true, MAT, IF_DENSE, F(up_w)},
    {"mlp.gate_proj.bias", 1, {D_F}, 0, false, false, TRI_INIT_ZEROS, IF_MLP_BIAS, F(gate_b)},
    {"mlp.up_proj.bias", 1, {D_F}, 0, false, false, TRI_INIT_ZEROS, IF_MLP_BIAS, F(up_b)},
    {"mlp.down_proj.weight", 2, {D_C, D_F}, 1, false, true, MAT, IF_DENSE, F(mlp.down_w)},
    {"mlp.down_proj.bias", 1, {D_C}, -1, false, false, TRI_INIT_ZEROS, IF_MLP_BIAS, F(mlp.down_b)},
};
#undef F

#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

/* The MLP's rows (IF_DENSE, IF_MLP_BIAS) exist in the dense layers only. */
static bool has_row(const tri_llama_config *c, const llama_param_row *r, bool sparse)
{
    return r->when == ALWAYS || (r->when == IF_ATTENTION_BIAS && c->attention_bias) ||
           (r->when == IF_MLP_BIAS && c->mlp_bias && !sparse) || (r->when == IF_DENSE && !sparse) ||
           (r->when == IF_QK_NORM && c->qk_norm);
}

/* Layer `layer`'s parameter tensors. */
static int block_params(const tri_llama_config *c, int layer)
{
    bool sparse = tri_llama_layer_is_sparse(c, layer);
    int n = sparse ? tri_llama_moe_num_params(c) : 0;
    for (int j = 0; j < N_ROWS; j++)
        n += has_row(c, &rows[j], sparse);
    return n;
}

/* The global index of layer `layer`'s first parameter. */
static int layer_first(const tri_llama_config *c, int layer)
{
    int n = 1;
    for (int l = 0; l < layer; l++)
        n += block_params(c, l);
    return n;
}

int tri_llama_num_param_tensors(const void *config)
{
    const tri_llama_config *c = config;
    return layer_first(c, c->num_hidden_layers) + 1 + !c->tie_word_embeddings;
}

#define EMBED "model.embed_tokens.weight"
#define NORM "model.norm.weight"
#define HEAD "lm_head.weight"

/* Global order: the embedding, the blocks' parameters in table order, the final norm, the head. */
static int global_index(const tri_llama_config *c, const char *name)
{
    int L = c->num_hidden_layers, end = layer_first(c, L);
    if (strcmp(name, EMBED) == 0)
        return 0;
    if (strcmp(name, NORM) == 0)
        return end;
    if (strcmp(name, HEAD) == 0 && !c->tie_word_embeddings)
        return end + 1;
    int layer = 0, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0 && layer < L) {
        bool sparse = tri_llama_layer_is_sparse(c, layer);
        int first = layer_first(c, layer), k = 0;
        for (int j = 0; j < N_ROWS; j++) {
            if (!has_row(c, &rows[j], sparse))
                continue;
            if (strcmp(name + used, rows[j].name) == 0)
                return first + k;
            k++;
        }
        int e = sparse ? tri_llama_moe_param_index(c, name + used) : -1;
        if (e >= 0)
            return first + k + e;
    }
    return -1;
}

/* ---- descriptions ---- */

static int64_t dim_size(const tri_llama_config *c, dim_kind d)
{
    switch (d) {
    case D_C: return c->hidden_size;
    case D_Q: return (int64_t)c->num_attention_heads * c->head_dim;
    case D_KV: return (int64_t)c->num_key_value_heads * c->head_dim;
    case D_F: return c->intermediate_size;
    case D_HS: return c->head_dim;
    }
    return 0;
}

#define OOM() TRI_ERR(TRI_ENOMEM, "llama: out of memory for parameter descriptions")

static int add_block(tri_spec_list *l, const tri_llama_config *c, int layer, int tp, const tri_chunk_place *opt)
{
    bool sparse = tri_llama_layer_is_sparse(c, layer);
    for (int j = 0; j < N_ROWS; j++) {
        const llama_param_row *r = &rows[j];
        if (!has_row(c, r, sparse))
            continue;
        int64_t shape[2];
        for (int d = 0; d < r->ndim; d++)
            shape[d] = dim_size(c, r->dims[d]);
        char name[TRI_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.%s", layer, r->name);
        tri_param_spec *s = tri_spec_list_add(l, name, r->ndim, shape, r->split, r->decay, r->init,
                                     r->init == TRI_INIT_NORMAL ? c->init_std : 0.0f);
        if (!s)
            return OOM();
        if (r->kv)
            s->max_shards = c->num_key_value_heads;
        /* the per-head norms' weights: each TP rank's gradient sums over its own heads only */
        s->tp_partial_grad = r->when == IF_QK_NORM;
    }
    return sparse ? tri_llama_moe_add_params(l, c, layer, tp, opt->ep, opt->ep_rank, opt->etp > 1 ? opt->etp : 1,
                                             opt->etp_rank)
                  : TRI_OK;
}

/* The embedding (first stage) or a last stage's copy of it as the tied LM head. */
static int add_embed(tri_spec_list *l, const tri_llama_config *c, int tp, const tri_chunk_place *opt, const char *name)
{
    int64_t shape[2] = {tri_padded_vocab(c->vocab_size, tp), c->hidden_size};
    tri_param_spec *s = tri_spec_list_add(l, name, 2, shape, 0, true, TRI_INIT_NORMAL, c->init_std);
    if (!s)
        return OOM();
    s->init_rows = c->vocab_size; /* padding rows stay zero */
    if (strcmp(name, EMBED) == 0 && c->tie_word_embeddings) {
        s->tied = !(opt->first && opt->last);
        s->tied_copy = !opt->first;
    }
    return TRI_OK;
}

/* Units in the stage's order: the embedding; one per block; the final norm; the LM head (untied, or
 * on a last stage without the embedding the tied copy), each a unit of its own as GPT-2's (gpt_params.c). */
int tri_llama_param_specs(const void *config, int tp, const tri_chunk_place *opt, tri_param_spec **specs, int *n)
{
    const tri_llama_config *c = config;
    tri_spec_list l = {0};
    int64_t C = c->hidden_size;
    int rc = TRI_OK;
    if (opt->first) {
        rc = add_embed(&l, c, tp, opt, EMBED);
        l.unit++;
    }
    for (int k = 0; k < opt->layer_end - opt->layer_start && !rc; k++) {
        rc = add_block(&l, c, opt->layer_start + k, tp, opt);
        l.unit++;
    }
    if (!rc && opt->last) {
        rc = tri_spec_list_add(&l, NORM, 1, &C, -1, false, TRI_INIT_ONES, 0) ? TRI_OK : OOM();
        l.unit++;
        if (!rc && !c->tie_word_embeddings)
            rc = add_embed(&l, c, tp, opt, HEAD);
        else if (!rc && !opt->first)
            rc = add_embed(&l, c, tp, opt, EMBED);
        l.unit++;
    }
    for (int i = 0; i < l.n && !rc; i++) {
        l.v[i].global_index = global_index(c, l.v[i].name);
        if (l.v[i].global_index < 0)
            rc = TRI_ERR(TRI_EINTERNAL, "llama: parameter %s has no global index", l.v[i].name);
    }
    if (rc) {
        free(l.v);
        return rc;
    }
    *specs = l.v;
    *n = l.n;
    return TRI_OK;
}

/* ---- views ---- */

int tri_llama_map_views(tri_llama *m)
{
    tri_decoder *d = &m->d;
    const tri_param_layout *L = &d->chunk.layout;
    char n[TRI_PARAM_NAME_MAX];
    int i;
    if ((i = tri_layout_find(L, EMBED)) >= 0) {
        d->wslot[i] = &m->w.embed;
        d->gslot[i] = &m->g.embed;
        if (d->opt.first)
            d->unit_embed = L->params[i].spec.unit;
        else /* the tied copy on a last stage without the embedding */
            d->unit_head = L->params[i].spec.unit;
    }
    if ((i = tri_layout_find(L, HEAD)) >= 0) {
        d->wslot[i] = &m->w.lm_head;
        d->gslot[i] = &m->g.lm_head;
        d->unit_head = L->params[i].spec.unit;
    }
    if (d->opt.last && m->cfg.tie_word_embeddings && d->opt.first)
        d->unit_head = d->unit_embed;
    if ((i = tri_layout_find(L, NORM)) >= 0) {
        d->wslot[i] = &m->w.norm;
        d->gslot[i] = &m->g.norm;
        d->unit_norm = L->params[i].spec.unit;
    }
    for (int l = 0; l < d->L_l; l++)
        for (int j = 0; j < N_ROWS; j++) {
            snprintf(n, sizeof n, "model.layers.%d.%s", d->opt.layer_start + l, rows[j].name);
            if ((i = tri_layout_find(L, n)) < 0)
                continue;
            d->wslot[i] = (tri_tensor *)((char *)&m->w.h[l] + rows[j].field);
            d->gslot[i] = (tri_tensor *)((char *)&m->g.h[l] + rows[j].field);
        }
    snprintf(n, sizeof n, "model.layers.%d.%s", d->opt.layer_start, rows[0].name);
    if ((i = tri_layout_find(L, n)) >= 0)
        d->unit_block0 = L->params[i].spec.unit;
    int rc = TRI_OK;
    for (int l = 0; l < d->L_l && !rc; l++)
        if (tri_llama_layer_is_sparse(&m->cfg, d->opt.layer_start + l))
            rc = tri_llama_moe_map_views(m, l);
    return rc;
}
