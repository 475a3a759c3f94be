/* models/config.c - loading and validating GPT configs (see config.h). */
#include "models/config.h"

#include <cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/block_cost.h"
#include "models/config_file.h"
#include "partitioner/transformer.h"


/* Keys of Hugging Face's GPT2Config that describe things Trident does not vary, with the one value
 * Trident computes (checked), or no check (NULL, e.g. bookkeeping such as architectures). */
typedef struct known_key {
    const char *key;
    int type;             /* cJSON type flag, 0 = any */
    const char *str_value;
    double num_value;
    int check;            /* 0 none, 1 number equals, 2 string equals, 3 bool true, 4 bool false or null */
} known_key;

static const known_key known_keys[] = {
    {"model_type", cJSON_String, "gpt2", 0, 2},
    {"activation_function", cJSON_String, "gelu_new", 0, 2},
    {"layer_norm_epsilon", cJSON_Number, NULL, 1e-5, 1},
    {"attn_pdrop", cJSON_Number, NULL, 0.0, 1},
    {"embd_pdrop", cJSON_Number, NULL, 0.0, 1},
    {"resid_pdrop", cJSON_Number, NULL, 0.0, 1},
    {"summary_first_dropout", cJSON_Number, NULL, 0, 0},
    {"tie_word_embeddings", 0, NULL, 0, 3},
    {"scale_attn_weights", 0, NULL, 0, 3},
    {"scale_attn_by_inverse_layer_idx", 0, NULL, 0, 4},
    {"reorder_and_upcast_attn", 0, NULL, 0, 4},
    {"add_cross_attention", 0, NULL, 0, 4},
    {"n_inner", 0, NULL, 0, 0}, /* checked below: null or 4 * n_embd */
    {"architectures", 0, NULL, 0, 0},
    {"bos_token_id", cJSON_Number, NULL, 0, 0},
    {"eos_token_id", cJSON_Number, NULL, 0, 0},
    {"summary_activation", 0, NULL, 0, 0},
    {"summary_proj_to_labels", 0, NULL, 0, 0},
    {"summary_type", 0, NULL, 0, 0},
    {"summary_use_proj", 0, NULL, 0, 0},
    {"task_specific_params", 0, NULL, 0, 0},
    {"torch_dtype", 0, NULL, 0, 0},
    {"transformers_version", 0, NULL, 0, 0},
    {"use_cache", 0, NULL, 0, 0},
    {"_name_or_path", 0, NULL, 0, 0},
    {"tokenizer_class", 0, NULL, 0, 0},
    {"comment", 0, NULL, 0, 0},
};

static const char *required_keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};

static int check_known(const cJSON *item, const known_key *k, const char *src)
{
    char v[96];
    bool ok = true;
    if (k->type && !(item->type & k->type))
        ok = false;
    else if (k->check == 1)
        ok = cJSON_IsNumber(item) && fabs(item->valuedouble - k->num_value) <= 1e-12;
    else if (k->check == 2)
        ok = cJSON_IsString(item) && strcmp(item->valuestring, k->str_value) == 0;
    else if (k->check == 3)
        ok = cJSON_IsTrue(item);
    else if (k->check == 4)
        ok = cJSON_IsFalse(item) || cJSON_IsNull(item);
    if (ok)
        return TRI_OK;
    const char *want = k->check == 1 ? "" : k->check == 2 ? k->str_value : k->check == 3 ? "true" : "false";
    if (k->check == 1)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, but Trident's GPT computes only %g", src, k->key,
                       tri_config_value_text(item, v, sizeof v), k->num_value);
    return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, but Trident's GPT computes only %s%s%s", src,
                   k->key, tri_config_value_text(item, v, sizeof v), k->check == 2 ? "\"" : "", want,
                   k->check == 2 ? "\"" : "");
}

static int check_keys(const cJSON *root, const char *src)
{
    for (const cJSON *item = root->child; item; item = item->next) {
        bool found = false;
        for (size_t i = 0; i < sizeof required_keys / sizeof *required_keys && !found; i++)
            found = strcmp(item->string, required_keys[i]) == 0;
        if (found || strcmp(item->string, "initializer_range") == 0 || strcmp(item->string, "n_ctx") == 0)
            continue;
        for (size_t i = 0; i < sizeof known_keys / sizeof *known_keys && !found; i++) {
            if (strcmp(item->string, known_keys[i].key) == 0) {
                int rc = check_known(item, &known_keys[i], src);
                if (rc)
                    return rc;
                found = true;
            }
        }
        if (!found)
            return TRI_ERR(TRI_EINVAL, "%s: unknown key \"%s\" (GPT-2 config keys: n_layer, n_head, "
                           "n_embd, vocab_size, n_positions, initializer_range, ...)", src, item->string);
    }
    return TRI_OK;
}

static int parse_root(tri_gpt_config *cfg, const cJSON *root, const char *src)
{
    char v[96];
    if (!cJSON_IsObject(root))
        return TRI_ERR(TRI_EINVAL, "%s: expected a JSON object at the top level", src);
    int rc = tri_config_check_unique(root, src);
    if (!rc) rc = check_keys(root, src);
    if (!rc) rc = tri_config_get_int(root, "n_layer", 100000, &cfg->n_layer, src);
    if (!rc) rc = tri_config_get_int(root, "n_head", 100000, &cfg->n_head, src);
    if (!rc) rc = tri_config_get_int(root, "n_embd", 1 << 20, &cfg->n_embd, src);
    /* 2^24: far above any published vocabulary (Llama 3's 128,256; Gemma's 256,000) */
    if (!rc) rc = tri_config_get_int(root, "vocab_size", TRI_GPT_MAX_VOCAB, &cfg->vocab_size, src);
    if (!rc) rc = tri_config_get_int(root, "n_positions", 1 << 20, &cfg->n_positions, src);
    if (rc)
        return rc;
    if (cfg->n_embd % cfg->n_head != 0)
        return TRI_ERR(TRI_EINVAL, "%s: \"n_embd\" %d is not divisible by \"n_head\" %d", src,
                       cfg->n_embd, cfg->n_head);
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "n_ctx");
    if (ctx && (!cJSON_IsNumber(ctx) || ctx->valuedouble != cfg->n_positions))
        return TRI_ERR(TRI_EINVAL, "%s: \"n_ctx\" is %s, expected it to equal \"n_positions\" %d", src,
                       tri_config_value_text(ctx, v, sizeof v), cfg->n_positions);
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(root, "n_inner");
    if (inner && !cJSON_IsNull(inner) && (!cJSON_IsNumber(inner) || inner->valuedouble != 4.0 * cfg->n_embd))
        return TRI_ERR(TRI_EINVAL, "%s: \"n_inner\" is %s, expected null or 4 * n_embd = %d", src,
                       tri_config_value_text(inner, v, sizeof v), 4 * cfg->n_embd);
    cfg->init_std = 0.02f;
    const cJSON *std = cJSON_GetObjectItemCaseSensitive(root, "initializer_range");
    if (std) {
        /* checked as the float it becomes: 1e-300 > 0 in double but is 0 as a float */
        if (!cJSON_IsNumber(std) || !((float)std->valuedouble >= FLT_MIN) || std->valuedouble > 1.0)
            return TRI_ERR(TRI_EINVAL, "%s: \"initializer_range\" is %s, expected a number in (0, 1]",
                           src, tri_config_value_text(std, v, sizeof v));
        cfg->init_std = (float)std->valuedouble;
    }
    return TRI_OK;
}

int tri_gpt_config_parse(void *config, const char *json, const char *source)
{
    tri_gpt_config *cfg = config;
    memset(cfg, 0, sizeof *cfg);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        size_t at = end ? (size_t)(end - json) : 0;
        return TRI_ERR(TRI_EINVAL, "%s: invalid JSON near byte %zu", source, at);
    }
    int rc = parse_root(cfg, root, source);
    cJSON_Delete(root);
    tri_model_name_of(cfg->name, sizeof cfg->name, source);
    return rc;
}

int tri_gpt_config_load(tri_gpt_config *cfg, const char *path)
{
    char *text = NULL;
    memset(cfg, 0, sizeof *cfg);
    int rc = tri_model_read_config(path, &text);
    if (!rc) rc = tri_gpt_config_parse(cfg, text, path);
    free(text);
    return rc;
}

int64_t tri_gpt_padded_vocab(int64_t vocab_size, int tp)
{
    return tri_padded_vocab(vocab_size, tp);
}

/* GPT-2's block: LayerNorms, fused q|k|v with biases, a 4 C GELU MLP with biases; 12 tensors (ln_1,
 * c_attn, c_proj, ln_2, c_fc, c_proj: a weight and a bias each). */
void tri_gpt_block_cost(const void *config, const tri_train_layout *l, tri_block_cost *out)
{
    const tri_gpt_config *c = config;
    tri_decoder_block b = {.C = c->n_embd, .NH = c->n_head, .NH_kv = c->n_head, .HS = c->n_embd / c->n_head,
                           .F = 4 * (int64_t)c->n_embd, .attention_bias = true, .mlp_bias = true,
                           .norm = TRI_NORM_LAYERNORM, .tensors = 12};
    tri_decoder_block_cost(&b, l, out);
}

tri_transformer tri_gpt_dims(const void *config)
{
    const tri_gpt_config *c = config;
    return (tri_transformer){.n_layer = c->n_layer, .n_head = c->n_head, .n_embd = c->n_embd,
                             .vocab_size = c->vocab_size, .n_positions = c->n_positions, .position_table = true,
                             .final_norm = TRI_NORM_LAYERNORM, .block_cost = tri_gpt_block_cost, .cfg = c};
}

int64_t tri_gpt_num_params(const void *config)
{
    const tri_gpt_config *c = config;
    int64_t C = c->n_embd, L = c->n_layer;
    int64_t block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
    return (int64_t)c->vocab_size * C + (int64_t)c->n_positions * C + L * block + 2 * C;
}

int tri_gpt_config_to_json(const void *config, char **json)
{
    const tri_gpt_config *c = config;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(o, "n_head", c->n_head);
    cJSON_AddNumberToObject(o, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "n_positions", c->n_positions);
    *json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return *json ? TRI_OK : TRI_ERR(TRI_ENOMEM, "config: out of memory rendering %s", c->name);
}
