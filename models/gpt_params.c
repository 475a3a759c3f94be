/* models/gpt_params.c - GPT-2's parameters: one table per kind (the embedding and head's, and the
 * 12 of a block) gives each parameter's checkpoint name, shape, tensor-parallel split, weight decay,
 * initialisation and the field of tri_gpt_weights that views it. Descriptions, global indices and
 * the views all come from these tables (see gpt.h for the names and shapes). */
#include "models/gpt.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/model_chunk.h"
#include "partitioner/layout.h"

/* A shape in units of C: k > 0 is k * C, k < 0 the literal -k (c_attn's leading 3). */
#define GPT_MAX_DIMS 3

typedef enum { STD_NONE = 0, STD_INIT, STD_PROJ } std_kind;

typedef struct gpt_param_row {
    const char *name;                /* the checkpoint key (blocks: after "h.<i>.") */
    int ndim;
    int shape[GPT_MAX_DIMS];
    int split;                       /* the dimension TP splits, -1: replicated */
    bool decay;
    tri_init_kind init;
    std_kind std;                    /* init_std, or init_std / sqrt(2 n_layer) (residual projections) */
    size_t field;                    /* offset of its view in tri_gpt_block_weights */
} gpt_param_row;

#define F(member) offsetof(tri_gpt_block_weights, member)

/* One block, in flat-buffer and global order. */
static const gpt_param_row block_rows[] = {
    {"ln_1.w", 1, {1}, -1, false, TRI_INIT_ONES, STD_NONE, F(ln1_w)},
    {"ln_1.b", 1, {1}, -1, false, TRI_INIT_ZEROS, STD_NONE, F(ln1_b)},
    {"attn.c_attn.w", 3, {-3, 1, 1}, 1, true, TRI_INIT_NORMAL, STD_INIT, F(attn.qkv_w)},
    {"attn.c_attn.b", 2, {-3, 1}, 1, false, TRI_INIT_ZEROS, STD_NONE, F(attn.qkv_b)},
    {"attn.c_proj.w", 2, {1, 1}, 1, true, TRI_INIT_NORMAL, STD_PROJ, F(attn.proj_w)},
    {"attn.c_proj.b", 1, {1}, -1, false, TRI_INIT_ZEROS, STD_NONE, F(attn.proj_b)},
    {"ln_2.w", 1, {1}, -1, false, TRI_INIT_ONES, STD_NONE, F(ln2_w)},
    {"ln_2.b", 1, {1}, -1, false, TRI_INIT_ZEROS, STD_NONE, F(ln2_b)},
    {"mlp.c_fc.w", 2, {4, 1}, 0, true, TRI_INIT_NORMAL, STD_INIT, F(mlp.fc_w)},
    {"mlp.c_fc.b", 1, {4}, 0, false, TRI_INIT_ZEROS, STD_NONE, F(mlp.fc_b)},
    {"mlp.c_proj.w", 2, {1, 4}, 1, true, TRI_INIT_NORMAL, STD_PROJ, F(mlp.proj_w)},
    {"mlp.c_proj.b", 1, {1}, -1, false, TRI_INIT_ZEROS, STD_NONE, F(mlp.proj_b)},
};
#undef F

#define BLOCK_PARAMS ((int)(sizeof block_rows / sizeof block_rows[0]))

/* The embedding's and the head's: wte and wpe lead the global order, ln_f ends it. Their shapes
 * depend on the vocabulary and positions, so they are written out in gpt_param_specs. */
#define G(member) offsetof(tri_gpt_weights, member)
static const struct {
    const char *name;
    size_t field;                    /* offset of its view in tri_gpt_weights */
} fixed_rows[] = {{"wte", G(wte)}, {"wpe", G(wpe)}, {"ln_f.w", G(lnf_w)}, {"ln_f.b", G(lnf_b)}};
#undef G

int tri_gpt_num_param_tensors(const void *config)
{
    const tri_gpt_config *cfg = config;
    return 4 + BLOCK_PARAMS * cfg->n_layer;
}

/* Global order of the model's parameters: wte, wpe, the blocks' in block_rows order, ln_f.w, ln_f.b. */
static int global_index(const tri_gpt_config *cfg, const char *name)
{
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
            if (strcmp(name + used, block_rows[j].name) == 0)
                return 2 + BLOCK_PARAMS * layer + j;
    return -1;
}

/* ---- descriptions ---- */

/* A description added to l, or TRI_ENOMEM. */
static int add_spec(tri_spec_list *l, const char *name, int ndim, const int64_t *shape, int split, bool decay,
                    tri_init_kind init, float std)
{
    return tri_spec_list_add(l, name, ndim, shape, split, decay, init, std)
               ? TRI_OK : TRI_ERR(TRI_ENOMEM, "gpt: out of memory for parameter descriptions");
}

static int add_block(tri_spec_list *l, const tri_gpt_config *cfg, int layer)
{
    int64_t C = cfg->n_embd;
    float proj_std = cfg->init_std / sqrtf(2.0f * (float)cfg->n_layer); /* GPT-2's residual-projection scaling */
    int rc = TRI_OK;
    for (int j = 0; j < BLOCK_PARAMS && !rc; j++) {
        const gpt_param_row *r = &block_rows[j];
        int64_t shape[GPT_MAX_DIMS];
        for (int d = 0; d < r->ndim; d++)
            shape[d] = r->shape[d] > 0 ? r->shape[d] * C : -r->shape[d];
        char name[TRI_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "h.%d.%s", layer, r->name);
        float std = r->std == STD_INIT ? cfg->init_std : r->std == STD_PROJ ? proj_std : 0.0f;
        rc = add_spec(l, name, r->ndim, shape, r->split, r->decay, r->init, std);
    }
    return rc;
}

/* wte: the embedding's table, or (on a last stage without the embedding) the LM head's copy. */
static int add_wte(tri_spec_list *l, const tri_gpt_config *cfg, int tp, const tri_chunk_place *opt)
{
    int64_t shape[2] = {tri_gpt_padded_vocab(cfg->vocab_size, tp), cfg->n_embd};
    int rc = add_spec(l, "wte", 2, shape, 0, true, TRI_INIT_NORMAL, cfg->init_std);
    if (!rc) {
        l->v[l->n - 1].init_rows = cfg->vocab_size;       /* padding rows stay zero */
        l->v[l->n - 1].tied = !(opt->first && opt->last); /* wte on two pipeline stages */
        l->v[l->n - 1].tied_copy = !opt->first;           /* the LM head's copy on the last stage */
    }
    return rc;
}

/* Units, numbered in the stage's order: wte and wpe (first stage) one each, then one per block,
 * then ln_f and, on a last stage without the embedding, the LM head's copy of wte. wte is a unit
 * of its own on both stages, so both cut it into the same data-parallel slices and the tied
 * gradient can be summed over the embedding group slice by slice (ZeRO-2/3). */
int tri_gpt_param_specs(const void *config, int tp, const tri_chunk_place *opt, tri_param_spec **specs, int *n)
{
    const tri_gpt_config *cfg = config;
    tri_spec_list l = {0};
    int64_t C = cfg->n_embd;
    int rc = TRI_OK;
    if (opt->first) {
        rc = add_wte(&l, cfg, tp, opt);
        l.unit++;
        if (!rc) rc = add_spec(&l, "wpe", 2, (int64_t[]){cfg->n_positions, C}, -1, true, TRI_INIT_NORMAL,
                               cfg->init_std);
        l.unit++;
    }
    for (int k = 0; k < opt->layer_end - opt->layer_start && !rc; k++) {
        rc = add_block(&l, cfg, opt->layer_start + k);
        l.unit++;
    }
    if (!rc && opt->last) {
        rc = add_spec(&l, "ln_f.w", 1, &C, -1, false, TRI_INIT_ONES, 0);
        if (!rc) rc = add_spec(&l, "ln_f.b", 1, &C, -1, false, TRI_INIT_ZEROS, 0);
        l.unit++;
        if (!rc && !opt->first) {
            rc = add_wte(&l, cfg, tp, opt);
            l.unit++;
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

int tri_gpt_all_param_specs(const tri_gpt_config *cfg, int tp, tri_param_spec **specs, int *n)
{
    tri_chunk_place all = {.layer_start = 0, .layer_end = cfg->n_layer, .first = true, .last = true};
    int rc = tri_gpt_param_specs(cfg, tp, &all, specs, n);
    if (rc)
        return rc;
    /* one stage's order (wte, wpe, blocks, ln_f) is already the global order */
    for (int i = 0; i < *n; i++)
        if ((*specs)[i].global_index != i) {
            free(*specs);
            return TRI_ERR(TRI_EINTERNAL, "gpt: parameter %s is at %d, its global index is %d", (*specs)[i].name, i,
                           (*specs)[i].global_index);
        }
    return TRI_OK;
}

/* ---- views: each parameter's tensor in w (values) and g (gradients) ---- */

/* Points wslot[i] / gslot[i] at the fields of m->w / m->g that view parameter i, and records the
 * units of the embedding, the first block and the head. */
void tri_gpt_map_views(tri_gpt *m)
{
    tri_decoder *d = &m->d;
    const tri_param_layout *L = &d->chunk.layout;
    char n[TRI_PARAM_NAME_MAX];
    for (size_t k = 0; k < sizeof fixed_rows / sizeof fixed_rows[0]; k++) {
        int i = tri_layout_find(L, fixed_rows[k].name);
        if (i >= 0) {
            d->wslot[i] = (tri_tensor *)((char *)&m->w + fixed_rows[k].field);
            d->gslot[i] = (tri_tensor *)((char *)&m->g + fixed_rows[k].field);
        }
    }
    for (int l = 0; l < d->L_l; l++)
        for (int j = 0; j < BLOCK_PARAMS; j++) {
            snprintf(n, sizeof n, "h.%d.%s", d->opt.layer_start + l, block_rows[j].name);
            int i = tri_layout_find(L, n);
            if (i >= 0) {
                d->wslot[i] = (tri_tensor *)((char *)&m->w.h[l] + block_rows[j].field);
                d->gslot[i] = (tri_tensor *)((char *)&m->g.h[l] + block_rows[j].field);
            }
        }
    /* wte is the embedding on the first stage and the LM head on the last (its copy on a last stage
     * without the embedding) */
    int i;
    if ((i = tri_layout_find(L, "wte")) >= 0) {
        if (d->opt.first) d->unit_embed = L->params[i].spec.unit;
        if (d->opt.last) d->unit_head = L->params[i].spec.unit;
    }
    if ((i = tri_layout_find(L, "wpe")) >= 0) d->unit_pos = L->params[i].spec.unit;
    if ((i = tri_layout_find(L, "ln_f.w")) >= 0) d->unit_norm = L->params[i].spec.unit;
    snprintf(n, sizeof n, "h.%d.%s", d->opt.layer_start, block_rows[0].name);
    if ((i = tri_layout_find(L, n)) >= 0) d->unit_block0 = L->params[i].spec.unit;
}
