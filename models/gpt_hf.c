/* models/gpt_hf.c - GPT-2's Hugging Face mapping (see gpt_formats.h): what the family's hf_ hooks
 * (models/model.h) tell the generic directory reader and writer (models/hf.h).
 *
 * Names: Trident's "wte" / "wpe" are transformers' "transformer.wte.weight" / "...wpe.weight"; a
 * block's "h.<i>.<module>.w" / ".b" are "transformer.h.<i>.<module>.weight" / ".bias" (the hub's
 * gpt2 files omit "transformer."). Shapes: the four Conv1D matrices are stored (in, out) there and
 * (out, in) here, and c_attn's (3, C, C) / (3, C) are (C, 3C) / (3C). Everything else is the same
 * array. Trident's global order is GPT2LMHeadModel's state_dict order, the order huggingface_hub
 * fills shards in. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/gpt.h"
#include "models/gpt_formats.h"

/* ---- names and shapes ---- */

bool tri_gpt_hf_conv1d(const char *name)
{
    size_t n = strlen(name);
    return n > 2 && strcmp(name + n - 2, ".w") == 0 &&
           (strstr(name, ".attn.c_attn.") || strstr(name, ".attn.c_proj.") || strstr(name, ".mlp.c_fc.") ||
            strstr(name, ".mlp.c_proj."));
}

void tri_gpt_hf_name(const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    if (strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0)
        snprintf(out, cap, "%s.weight", name);
    else if (n > 2 && strcmp(name + n - 2, ".w") == 0)
        snprintf(out, cap, "%.*s.weight", (int)(n - 2), name);
    else if (n > 2 && strcmp(name + n - 2, ".b") == 0)
        snprintf(out, cap, "%.*s.bias", (int)(n - 2), name);
    else
        snprintf(out, cap, "%s", name);
}

void tri_gpt_hf_full_name(const char *name, char *out, size_t cap)
{
    char hf[TRI_PARAM_NAME_MAX + 8]; /* name + ".weight" */
    tri_gpt_hf_name(name, hf, sizeof hf);
    snprintf(out, cap, TRI_GPT_HF_PREFIX "%s", hf);
}

int tri_gpt_hf_shape(const char *name, int ndim, const int64_t *shape, int64_t *out)
{
    int nd = ndim;
    memcpy(out, shape, (size_t)ndim * sizeof *out);
    if (strstr(name, ".attn.c_attn.")) { /* (3, C, C) -> (3C, C); (3, C) -> (3C) */
        nd = ndim - 1;
        out[0] = shape[0] * shape[1];
        for (int d = 1; d < nd; d++)
            out[d] = shape[d + 1];
    }
    if (tri_gpt_hf_conv1d(name)) {
        int64_t t = out[0];
        out[0] = out[1];
        out[1] = t;
    }
    return nd;
}

bool tri_gpt_hf_skipped(const char *name)
{
    size_t n = strlen(name);
    return (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

/* ---- config.json ---- */

/* The config's dropout keys: Trident trains without dropout, so they are reported and dropped. */
static const char *dropout_keys[] = {"attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"};

int tri_gpt_hf_parse_config(void *config, const char *json, const char *source)
{
    tri_gpt_config *cfg = config;
    cJSON *root = cJSON_Parse(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return TRI_ERR(TRI_EINVAL, "%s: not a JSON object (a Hugging Face GPT2Config)", source);
    }
    for (size_t i = 0; i < sizeof dropout_keys / sizeof *dropout_keys; i++) {
        cJSON *d = cJSON_DetachItemFromObjectCaseSensitive(root, dropout_keys[i]);
        if (cJSON_IsNumber(d) && d->valuedouble != 0)
            fprintf(stderr, "%s: %s %g dropped (Trident trains without dropout)\n", source, dropout_keys[i],
                    d->valuedouble);
        cJSON_Delete(d);
    }
    char *clean = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    int rc = clean ? tri_gpt_config_parse(cfg, clean, source) : TRI_ERR(TRI_ENOMEM, "%s: out of memory", source);
    free(clean);
    return rc;
}

int tri_gpt_hf_config(const void *config, const char *torch_dtype, char **json)
{
    const tri_gpt_config *cfg = config;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "activation_function", "gelu_new");
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddNumberToObject(o, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "initializer_range", cfg->init_std);
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddNumberToObject(o, "n_ctx", cfg->n_positions);
    cJSON_AddNumberToObject(o, "n_embd", cfg->n_embd);
    cJSON_AddNumberToObject(o, "n_head", cfg->n_head);
    cJSON_AddNullToObject(o, "n_inner");
    cJSON_AddNumberToObject(o, "n_layer", cfg->n_layer);
    cJSON_AddNumberToObject(o, "n_positions", cfg->n_positions);
    cJSON_AddNumberToObject(o, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "summary_first_dropout", 0.0);
    cJSON_AddTrueToObject(o, "tie_word_embeddings");
    cJSON_AddStringToObject(o, "torch_dtype", torch_dtype);
    cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    size_t len = text ? strlen(text) : 0;
    *json = text ? realloc(text, len + 2) : NULL;
    if (!*json) {
        free(text);
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for config.json", cfg->name);
    }
    memcpy(*json + len, "\n", 2);
    return TRI_OK;
}
