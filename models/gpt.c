/* models/gpt.c - GPT-2 as a model chunk (see gpt.h): a decoder (models/model_chunk.h: the passes,
 * the buffers around the blocks) with GPT-2's block, final layernorm and embeddings. The engine
 * (engine/train/chunk.h) acquires each pass's units and releases them; the parameters' descriptions and
 * views are in gpt_params.c, the buffers in gpt_buffers.c. */
#include "models/gpt.h"

#include <stdlib.h>

#include "engine/core/status.h"
#include "layers/embedding.h"
#include "partitioner/layout.h"

int tri_gpt_check(const void *config, const tri_train_layout *run, const tri_chunk_place *o)
{
    const tri_gpt_config *cfg = config;
    const char *name = cfg->name;
    int tp = run->tp;
    /* the widest row a buffer holds: B*T*max(Vp, 4C) */
    int64_t widest = tri_gpt_padded_vocab(cfg->vocab_size, tp > 0 ? tp : 1);
    const char *keys = "vocab_size (padded)";
    if (4 * (int64_t)cfg->n_embd > widest) {
        widest = 4 * (int64_t)cfg->n_embd;
        keys = "4 x n_embd";
    }
    tri_transformer dims = tri_gpt_dims(cfg);
    return tri_decoder_check(run, o, name, &dims, widest, keys); /* (n_embd = n_head x head size: tp divides it) */
}

/* ---- forward and backward: the decoder's passes (models/model_chunk.h), GPT-2's compute ---- */

/* res3 = x + attn(ln1(x)) + mlp(ln2(x + attn(ln1(x)))), one GPT-2 block (pre-LN). */
static int block_forward(tri_gpt *m, int l, tri_gpt_block_acts *a, tri_tensor x)
{
    const tri_gpt_block_weights *w = &m->w.h[l];
    tri_device *d = m->d.dev;
    tri_tensor tmp = m->d.tmp;
    int rc = tri_op_layernorm_forward(d, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b);
    if (!rc) rc = tri_attention_forward(&m->d.tp, tmp, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_add_layernorm_forward(d, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x, tmp, w->ln2_w,
                                               w->ln2_b); /* res2 = x + attn, ln2 = layernorm(res2) */
    if (!rc) rc = tri_mlp_forward(&m->d.tp, tmp, &a->mlp, a->ln2, &w->mlp, &m->ms);
    if (!rc) rc = tri_op_add(d, a->res3, a->res2, tmp);
    return rc;
}

/* Rebuilds what recomputation dropped from block l's activations: the whole block (writing the
 * same values, bit for bit, as its forward did) or the attention softmax (nothing with the fused
 * core, which drops none). */
static int recompute_block(tri_gpt *m, int l, tri_gpt_block_acts *a, tri_tensor x)
{
    if (m->d.run->recompute == TRI_RECOMPUTE_FULL) {
        tri_gpt_block_acts work = m->shared;  /* res3 into the shared buffer: the slot's stays as it is */
        *a = work;
        return block_forward(m, l, a, x);
    }
    if (tri_layout_recomputes(m->d.run) == TRI_RECOMPUTE_SELECTIVE)
        return tri_op_attention_forward(m->d.dev, a->attn.atty, a->attn.att, a->attn.qkv);
    return TRI_OK;
}

/* dres (N_l, C) holds d res3 on entry and d x on return (the residual stream's gradient). */
static int block_backward(tri_gpt *m, int l, const tri_gpt_block_acts *kept, tri_tensor x, tri_tensor dres)
{
    const tri_gpt_block_weights *w = &m->w.h[l], *g = &m->g.h[l];
    tri_device *d = m->d.dev;
    tri_tensor dln = m->d.dln;
    tri_gpt_block_acts acts = *kept, *a = &acts;
    int rc = recompute_block(m, l, a, x);
    if (!rc) rc = tri_mlp_backward(&m->d.tp, dln, &g->mlp, dres, &a->mlp, a->ln2, &w->mlp, &m->ms);
    if (!rc) rc = tri_op_layernorm_backward(d, dres, g->ln2_w, g->ln2_b, dln, a->res2, w->ln2_w,
                                            a->ln2_mean, a->ln2_rstd);
    if (!rc) rc = tri_attention_backward(&m->d.tp, dln, &g->attn, dres, &a->attn, a->ln1, &w->attn, &m->as);
    if (!rc) rc = tri_op_layernorm_backward(d, dres, g->ln1_w, g->ln1_b, dln, x, w->ln1_w,
                                            a->ln1_mean, a->ln1_rstd);
    return rc;
}

/* Block l's input: the stage's, or block l - 1's output. */
static tri_tensor block_input(const tri_gpt *m, int slot, int l)
{
    return l == 0 ? m->d.slots[slot].x_in : m->slots[slot].blocks[l - 1].res3;
}

/* The last stage's head: final layernorm, LM head and loss (when training, with the head's
 * backward, its wte gradient going to the private accumulator or to wte's unit). */
static int head_forward(void *self, int slot, bool train, float dloss)
{
    tri_gpt *m = self;
    tri_decoder_slot *io = &m->d.slots[slot];
    tri_gpt_slot *s = &m->slots[slot];
    int rc = tri_op_layernorm_forward(m->d.dev, s->lnf, s->lnf_mean, s->lnf_rstd, block_input(m, slot, m->d.L_l),
                                      m->w.lnf_w, m->w.lnf_b);
    tri_tensor dwte = m->d.private_embed ? m->d.lm_dembed : m->g.wte;
    if (!rc)
        rc = tri_lm_head_loss(&m->d.tp, io->losses, train ? io->dlnf : tri_tensor_none(), dwte, s->lnf, m->w.wte,
                              io->targets, m->d.vocab_start, m->d.vocab_size, dloss, &m->d.ls);
    return rc;
}

static int head_backward(void *self, int slot)
{
    tri_gpt *m = self;
    tri_decoder_slot *io = &m->d.slots[slot];
    tri_gpt_slot *s = &m->slots[slot];
    int rc = tri_op_fill(m->d.dev, io->dres, 0.0f);
    if (!rc) rc = tri_op_layernorm_backward(m->d.dev, io->dres, m->g.lnf_w, m->g.lnf_b, io->dlnf,
                                            block_input(m, slot, m->d.L_l), m->w.lnf_w, s->lnf_mean, s->lnf_rstd);
    return rc;
}

/* The passes tri_decoder_run hands to this family (models/model_chunk.h tri_decoder_compute). */
static int pass_block(void *self, int l, int slot)
{
    tri_gpt *m = self;
    return block_forward(m, l, &m->slots[slot].blocks[l], block_input(m, slot, l));
}

static int pass_block_backward(void *self, int l, int slot)
{
    tri_gpt *m = self;
    return block_backward(m, l, &m->slots[slot].blocks[l], block_input(m, slot, l), m->d.slots[slot].dres);
}

static const tri_decoder_compute COMPUTE = {.block_forward = pass_block, .block_backward = pass_block_backward,
                                            .head_forward = head_forward, .head_backward = head_backward};

/* ---- creation ---- */

/* Sizes every buffer (dev NULL: planning only, nothing allocated) or builds the chunk
 * (tri_decoder_setup). */
static int setup(void *self, const void *config, const tri_train_layout *run, const tri_chunk_place *opt,
                 tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    tri_gpt *m = self;
    const tri_gpt_config *cfg = config;
    int rc = tri_gpt_check(cfg, run, opt);
    tri_param_spec *specs = NULL;
    int n = 0;
    if (!rc) rc = tri_gpt_param_specs(cfg, run->tp, opt, &specs, &n);
    tri_decoder_shape shape = {.family = "gpt", .C = cfg->n_embd, .vocab_size = cfg->vocab_size,
                               .tied_embedding = true, .n_global_params = tri_gpt_num_param_tensors(cfg),
                               .compute = &COMPUTE, .embed = &m->w.wte, .embed_grad = &m->g.wte, .pos = &m->w.wpe,
                               .pos_grad = &m->g.wpe};
    if (!rc) rc = tri_decoder_begin(&m->d, &shape, specs, n, run, opt, dev, tp_comm);
    free(specs);
    if (rc)
        return rc;
    int L_l = m->d.L_l;
    m->cfg = *cfg;
    m->C_l = cfg->n_embd / run->tp;
    m->NH_l = cfg->n_head / run->tp;
    m->w.h = tri_decoder_calloc(&m->d, L_l + 1, sizeof *m->w.h);
    m->g.h = tri_decoder_calloc(&m->d, L_l + 1, sizeof *m->g.h);
    m->slots = tri_decoder_calloc(&m->d, opt->n_slots, sizeof *m->slots);
    bool ok = m->w.h && m->g.h && m->slots;
    for (int s = 0; ok && s < opt->n_slots; s++)
        ok = (m->slots[s].blocks = tri_decoder_calloc(&m->d, L_l + 1, sizeof *m->slots[s].blocks)) != NULL;
    if (!ok)
        return TRI_ERR(TRI_ENOMEM, "gpt: out of memory");
    tri_gpt_map_views(m);
    tri_chunk_model model = {.self = m, .take_buffers = tri_gpt_take_buffers};
    return tri_decoder_build(&m->d, model, dev, dp_comm);
}

int tri_gpt_create(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                   const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    return tri_decoder_create(model, chunk, sizeof(tri_gpt), setup, cfg, run, place, dev, tp_comm, dp_comm);
}
