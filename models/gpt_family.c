/* models/gpt_family.c - GPT-2 as a model family (models/model.h): the table the session, the
 * checkpoints and the tools reach it through. */
#include "models/gpt.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/core/status.h"
#include "models/gpt_formats.h"

static int parse(void **cfg, const char *json, const char *source)
{
    tri_gpt_config *c = malloc(sizeof *c);
    if (!c)
        return TRI_ERR(TRI_ENOMEM, "out of memory for a model config");
    int rc = tri_gpt_config_parse(c, json, source);
    if (rc) {
        free(c);
        return rc;
    }
    *cfg = c;
    return TRI_OK;
}

static int to_json(const void *cfg, char **json)
{
    return tri_gpt_config_to_json(cfg, json);
}

static tri_transformer dims(const void *cfg)
{
    return tri_gpt_dims(cfg);
}

static int64_t num_params(const void *cfg)
{
    return tri_gpt_num_params(cfg);
}

static int vocab_size(const void *cfg)
{
    return ((const tri_gpt_config *)cfg)->vocab_size;
}

static int64_t padded_vocab(const void *cfg, int tp)
{
    return tri_gpt_padded_vocab(((const tri_gpt_config *)cfg)->vocab_size, tp);
}

static int num_param_tensors(const void *cfg)
{
    return tri_gpt_num_param_tensors(cfg);
}

static int param_specs(const void *cfg, int tp, const tri_chunk_place *place, tri_param_spec **specs, int *n)
{
    return tri_gpt_param_specs(cfg, tp, place, specs, n);
}

static int check(const void *cfg, const tri_train_layout *run, const tri_chunk_place *place)
{
    return tri_gpt_check(cfg, run, place);
}

static int create(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                  const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm)
{
    tri_gpt *m = NULL;
    int rc = tri_gpt_create(&m, cfg, run, place, dev, tp_comm, dp_comm);
    *model = m;
    *chunk = m ? &m->d.chunk : NULL;
    return rc;
}

static void destroy(void *model)
{
    tri_gpt_destroy(model);
}

/* ---- Hugging Face (GPT2LMHeadModel: gpt_hf.c) ---- */

static int hf_parse(void **cfg, const char *json, const char *source)
{
    tri_gpt_config *c = malloc(sizeof *c);
    if (!c)
        return TRI_ERR(TRI_ENOMEM, "out of memory for a model config");
    int rc = tri_gpt_hf_parse_config(c, json, source);
    if (rc) {
        free(c);
        return rc;
    }
    *cfg = c;
    return TRI_OK;
}

static int hf_config(const void *cfg, const char *torch_dtype, char **json)
{
    return tri_gpt_hf_config(cfg, torch_dtype, json);
}

/* GPT-2 always ties lm_head to wte; transformers drops it on save, older files keep it. */
static const char *hf_tied_head(const void *cfg, const char **param)
{
    (void)cfg;
    *param = "wte";
    return "lm_head.weight";
}

const tri_model_family tri_gpt2_family = {
    .type = "gpt2",
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
    .logits_row = tri_decoder_logits_row,
    .title = "GPT-2",
    .hf_name = tri_gpt_hf_full_name,
    .hf_optional_prefix = TRI_GPT_HF_PREFIX,
    .hf_shape = tri_gpt_hf_shape,
    .hf_transposed = tri_gpt_hf_conv1d,
    .hf_parse = hf_parse,
    .hf_config = hf_config,
    .hf_skipped = tri_gpt_hf_skipped,
    .hf_tied_head = hf_tied_head,
};

tri_model tri_gpt_model(const tri_gpt_config *cfg)
{
    tri_model m = {.family = &tri_gpt2_family, .cfg = (void *)cfg, .owns_cfg = false};
    snprintf(m.name, sizeof m.name, "%s", cfg->name);
    return m;
}

const tri_gpt_config *tri_gpt_config_of(const tri_model *m)
{
    return m->family == &tri_gpt2_family ? m->cfg : NULL;
}
