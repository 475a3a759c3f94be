/* models/llama_family.c - the Llama family's table (models/model.h): what the session, the
 * checkpoints, the partitioner and the tools reach it through. */
#include <stdlib.h>

#include "engine/core/status.h"
#include "models/llama.h"
#include "models/model_chunk.h"

static int parse(void **cfg, const char *json, const char *source)
{
    tri_llama_config *c = malloc(sizeof *c);
    if (!c)
        return TRI_ERR(TRI_ENOMEM, "out of memory for a model config");
    int rc = tri_llama_config_parse(c, json, source);
    if (rc) {
        free(c);
        return rc;
    }
    *cfg = c;
    return TRI_OK;
}

static int to_json(const void *cfg, char **json)
{
    return tri_llama_config_to_json(cfg, json);
}

/* The partitioner's dimensions (partitioner/transformer.h): the sizes it shares with GPT-2, and
 * the Llama block's own (SwiGLU width, key/value heads, head size, no position table, an untied
 * head). */
static tri_transformer dims(const void *cfg)
{
    const tri_llama_config *c = cfg;
    return (tri_transformer){.n_layer = c->num_hidden_layers, .n_head = c->num_attention_heads,
                             .n_embd = c->hidden_size, .vocab_size = c->vocab_size,
                             .n_positions = c->max_position_embeddings, .n_kv_head = c->num_key_value_heads,
                             .head_dim = c->head_dim, .ffn_hidden = c->intermediate_size, .gated_mlp = true,
                             .llama_block = true, .untied_head = !c->tie_word_embeddings};
}

static int64_t num_params(const void *cfg)
{
    return tri_llama_num_params(cfg);
}

static int vocab_size(const void *cfg)
{
    return ((const tri_llama_config *)cfg)->vocab_size;
}

static int64_t padded_vocab(const void *cfg, int tp)
{
    return tri_padded_vocab(((const tri_llama_config *)cfg)->vocab_size, tp);
}

static int num_param_tensors(const void *cfg)
{
    return tri_llama_num_param_tensors(cfg);
}

static int param_specs(const void *cfg, int tp, const tri_chunk_place *place, tri_param_spec **specs, int *n)
{
    return tri_llama_param_specs(cfg, tp, place, specs, n);
}

static int check(const void *cfg, const tri_train_layout *run, const tri_chunk_place *place)
{
    return tri_llama_check(cfg, run, place);
}

static int create(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                  const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    tri_llama *m = NULL;
    int rc = tri_llama_create(&m, cfg, run, place, dev, tp_comm, dp_comm);
    *model = m;
    *chunk = m ? &m->chunk : NULL;
    return rc;
}

static void destroy(void *model)
{
    tri_llama_destroy(model);
}

static int plan(const void *cfg, const tri_train_layout *run, const tri_chunk_place *place, int tp_rank,
                size_t bytes[TRI_MEM_KINDS])
{
    return tri_llama_plan(cfg, run, place, tp_rank, bytes);
}

static int logits_row(void *model, int slot, int64_t row, float *logits)
{
    (void)slot; /* the head keeps one logits buffer: the last forward's */
    tri_llama *m = model;
    if (!m->opt.last)
        return TRI_ERR(TRI_EINVAL, "logits live on the last pipeline stage");
    return tri_model_logits_row(&m->tp, m->ls.logits, m->N, m->V_l, m->cfg.vocab_size, row, logits);
}

const tri_model_family tri_llama_family = {
    .type = "llama",
    .parse = parse,
    .to_json = to_json,
    .dims = dims,
    .num_params = num_params,
    .vocab_size = vocab_size,
    .padded_vocab = padded_vocab,
    .num_param_tensors = num_param_tensors,
    .param_specs = param_specs,
    .check = check,
    .create = create,
    .destroy = destroy,
    .plan = plan,
    .logits_row = logits_row,
};

const tri_llama_config *tri_llama_config_of(const tri_model *m)
{
    return m->family == &tri_llama_family ? m->cfg : NULL;
}
