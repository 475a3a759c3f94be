/* models/gpt_family.c - GPT-2 as a model family (models/model.h): the table the session, the
 * checkpoints and the tools reach it through. Its entries are GPT-2's own functions, which take the
 * config as the table passes it (a tri_gpt_config behind const void *). */
#include "models/gpt.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/core/status.h"
#include "models/gpt_formats.h"

/* ---- Hugging Face (GPT2LMHeadModel: gpt_hf.c) ---- */

/* GPT-2 always ties lm_head to wte; transformers drops it on save, older files keep it. */
static const char *hf_tied_head(const void *cfg, const char **param)
{
    (void)cfg;
    *param = "wte";
    return "lm_head.weight";
}

const tri_model_family tri_gpt2_family = {
    .type = "gpt2",
    .config_size = sizeof(tri_gpt_config),
    .parse = tri_gpt_config_parse,
    .to_json = tri_gpt_config_to_json,
    .dims = tri_gpt_dims,
    .num_params = tri_gpt_num_params,
    .num_param_tensors = tri_gpt_num_param_tensors,
    .param_specs = tri_gpt_param_specs,
    .check = tri_gpt_check,
    .create = tri_gpt_create,
    .destroy = tri_decoder_free,
    .logits_row = tri_decoder_logits_row,
    .title = "GPT-2",
    .hf_name = tri_gpt_hf_full_name,
    .hf_optional_prefix = TRI_GPT_HF_PREFIX,
    .hf_shape = tri_gpt_hf_shape,
    .hf_transposed = tri_gpt_hf_conv1d,
    .hf_parse = tri_gpt_hf_parse_config,
    .hf_config = tri_gpt_hf_config,
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
