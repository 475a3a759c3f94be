/* models/llama_config.c - reading and writing Llama configs in Hugging Face LlamaConfig's keys (see
 * llama.h), and Qwen3Config's (model_type "qwen3": the same keys, the per-head q/k norm always on,
 * sliding-window keys accepted while use_sliding_window is false). Defaults are LlamaConfig's, except
 * where a key changes the model and its absence would hide a mistake: the six sizes are required. */
#include <cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/config.h"
#include "models/block_cost.h"
#include "models/config_file.h"
#include "models/llama.h"

/* Keys that describe nothing Trident varies: bookkeeping (check 0) or one value Trident computes
 * (1: this number, 2: this string). */
static const struct {
    const char *key;
    int check;
    const char *str;
    double num;
} fixed_keys[] = {
    {"model_type", 2, "llama", 0},
    {"hidden_act", 2, "silu", 0},
    {"attention_dropout", 1, NULL, 0.0},
    {"pretraining_tp", 1, NULL, 1.0},
    {"architectures", 0, NULL, 0},
    {"bos_token_id", 0, NULL, 0},
    {"eos_token_id", 0, NULL, 0},
    {"pad_token_id", 0, NULL, 0},
    {"torch_dtype", 0, NULL, 0},
    {"transformers_version", 0, NULL, 0},
    {"use_cache", 0, NULL, 0},
    {"_name_or_path", 0, NULL, 0},
    {"tokenizer_class", 0, NULL, 0},
    {"comment", 0, NULL, 0},
};

static const char *const model_keys[] = {
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "num_hidden_layers", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "tie_word_embeddings", "attention_bias", "mlp_bias", "initializer_range"};

/* Qwen3Config's keys beyond LlamaConfig's: the sliding window, which Trident does not compute, so
 * use_sliding_window must be false (sliding_window and max_window_layers then change nothing, as
 * in transformers) and layer_types, if given, all "full_attention". */
static const char *const qwen3_keys[] = {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"};

static int check_qwen3_keys(const cJSON *root, const char *src)
{
    char v[96];
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window");
    if (sw && !cJSON_IsFalse(sw))
        return TRI_ERR(TRI_EINVAL, "%s: \"use_sliding_window\" is %s, but Trident's Qwen3 computes only false (full "
                       "attention in every layer)", src, tri_config_value_text(sw, v, sizeof v));
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt) && !cJSON_IsArray(lt))
        return TRI_ERR(TRI_EINVAL, "%s: \"layer_types\" is %s, expected a list of \"full_attention\"", src,
                       tri_config_value_text(lt, v, sizeof v));
    int k = 0;
    for (const cJSON *t = lt && cJSON_IsArray(lt) ? lt->child : NULL; t; t = t->next, k++)
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention") != 0)
            return TRI_ERR(TRI_EINVAL, "%s: \"layer_types\"[%d] is %s, but Trident's Qwen3 computes only "
                           "\"full_attention\"", src, k, tri_config_value_text(t, v, sizeof v));
    return TRI_OK;
}

static int check_keys(const cJSON *root, const char *type, const char *src)
{
    char v[96];
    bool qwen3 = strcmp(type, "qwen3") == 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        bool found = false;
        for (size_t i = 0; i < sizeof model_keys / sizeof *model_keys && !found; i++)
            found = strcmp(item->string, model_keys[i]) == 0;
        for (size_t i = 0; qwen3 && i < sizeof qwen3_keys / sizeof *qwen3_keys && !found; i++)
            found = strcmp(item->string, qwen3_keys[i]) == 0;
        for (size_t i = 0; i < sizeof fixed_keys / sizeof *fixed_keys && !found; i++) {
            if (strcmp(item->string, fixed_keys[i].key) != 0)
                continue;
            found = true;
            const char *want = i == 0 ? type : fixed_keys[i].str; /* model_type: the family's */
            bool ok = fixed_keys[i].check == 0 ||
                      (fixed_keys[i].check == 1 && cJSON_IsNumber(item) && item->valuedouble == fixed_keys[i].num) ||
                      (fixed_keys[i].check == 2 && cJSON_IsString(item) && strcmp(item->valuestring, want) == 0);
            if (!ok && fixed_keys[i].check == 1)
                return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, but Trident's Llama computes only %g", src, item->string,
                               tri_config_value_text(item, v, sizeof v), fixed_keys[i].num);
            if (!ok)
                return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, but Trident's %s computes only \"%s\"", src,
                               item->string, tri_config_value_text(item, v, sizeof v), qwen3 ? "Qwen3" : "Llama",
                               want);
        }
        if (!found)
            return TRI_ERR(TRI_EINVAL, "%s: unknown key \"%s\" (Llama config keys: hidden_size, intermediate_size, "
                           "num_attention_heads, num_key_value_heads, head_dim, num_hidden_layers, vocab_size, "
                           "max_position_embeddings, rms_norm_eps, rope_theta, rope_scaling, ...)", src, item->string);
    }
    return qwen3 ? check_qwen3_keys(root, src) : TRI_OK;
}

/* An optional positive integer (absent or null: *out keeps its default). */
static int opt_int(const cJSON *root, const char *key, int max, int *out, const char *src)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    return !item || cJSON_IsNull(item) ? TRI_OK : tri_config_get_int(root, key, max, out, src);
}

static int opt_bool(const cJSON *root, const char *key, bool *out, const char *src)
{
    char v[96];
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!item)
        return TRI_OK;
    if (!cJSON_IsBool(item))
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, expected true or false", src, key,
                       tri_config_value_text(item, v, sizeof v));
    *out = cJSON_IsTrue(item);
    return TRI_OK;
}

/* An optional number in (lo, hi]. */
static int opt_number(const cJSON *obj, const char *key, double lo, double hi, double *out, const char *src)
{
    char v[96];
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!item)
        return TRI_OK;
    if (!cJSON_IsNumber(item) || !(item->valuedouble > lo) || item->valuedouble > hi)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, expected a number in (%g, %g]", src, key,
                       tri_config_value_text(item, v, sizeof v), lo, hi);
    *out = item->valuedouble;
    return TRI_OK;
}

/* rope_scaling: null, or Llama 3's {"rope_type": "llama3", "factor", "low_freq_factor",
 * "high_freq_factor", "original_max_position_embeddings"} (older files say "type"). */
static int parse_rope_scaling(tri_rope_scaling *rs, const cJSON *root, const char *src)
{
    char v[96];
    memset(rs, 0, sizeof *rs);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!o || cJSON_IsNull(o))
        return TRI_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
    if (!type)
        type = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsObject(o) || !cJSON_IsString(type) || strcmp(type->valuestring, "llama3") != 0)
        return TRI_ERR(TRI_EINVAL, "%s: \"rope_scaling\" is %s; Trident computes null or {\"rope_type\": \"llama3\", "
                       "\"factor\", \"low_freq_factor\", \"high_freq_factor\", \"original_max_position_embeddings\"}",
                       src, tri_config_value_text(o, v, sizeof v));
    for (const cJSON *item = o->child; item; item = item->next)
        if (strcmp(item->string, "rope_type") && strcmp(item->string, "type") && strcmp(item->string, "factor") &&
            strcmp(item->string, "low_freq_factor") && strcmp(item->string, "high_freq_factor") &&
            strcmp(item->string, "original_max_position_embeddings"))
            return TRI_ERR(TRI_EINVAL, "%s: unknown key \"%s\" in \"rope_scaling\"", src, item->string);
    double factor = 0, lo = 0, hi = 0, orig = 0;
    const char *missing = !cJSON_GetObjectItemCaseSensitive(o, "factor") ? "factor"
                          : !cJSON_GetObjectItemCaseSensitive(o, "low_freq_factor") ? "low_freq_factor"
                          : !cJSON_GetObjectItemCaseSensitive(o, "high_freq_factor") ? "high_freq_factor"
                          : !cJSON_GetObjectItemCaseSensitive(o, "original_max_position_embeddings")
                              ? "original_max_position_embeddings" : NULL;
    if (missing)
        return TRI_ERR(TRI_EINVAL, "%s: \"rope_scaling\" of type llama3 needs \"%s\"", src, missing);
    int rc = opt_number(o, "factor", 0, 1e6, &factor, src);
    if (!rc) rc = opt_number(o, "low_freq_factor", 0, 1e6, &lo, src);
    if (!rc) rc = opt_number(o, "high_freq_factor", 0, 1e6, &hi, src);
    if (!rc) rc = opt_number(o, "original_max_position_embeddings", 0, 1 << 24, &orig, src);
    if (rc)
        return rc;
    if (!(hi > lo) || orig != floor(orig))
        return TRI_ERR(TRI_EINVAL, "%s: \"rope_scaling\" needs high_freq_factor > low_freq_factor (got %g, %g) and an "
                       "integer original_max_position_embeddings (got %g)", src, hi, lo, orig);
    *rs = (tri_rope_scaling){.llama3 = true, .factor = (float)factor, .low_freq_factor = (float)lo,
                             .high_freq_factor = (float)hi, .original_max_positions = (int64_t)orig};
    return TRI_OK;
}

static int parse_root(tri_llama_config *c, const cJSON *root, const char *type, const char *src)
{
    if (!cJSON_IsObject(root))
        return TRI_ERR(TRI_EINVAL, "%s: expected a JSON object at the top level", src);
    int rc = tri_config_check_unique(root, src);
    if (!rc) rc = check_keys(root, type, src);
    if (!rc) rc = tri_config_get_int(root, "hidden_size", 1 << 20, &c->hidden_size, src);
    if (!rc) rc = tri_config_get_int(root, "intermediate_size", 1 << 22, &c->intermediate_size, src);
    if (!rc) rc = tri_config_get_int(root, "num_attention_heads", 100000, &c->num_attention_heads, src);
    if (!rc) rc = tri_config_get_int(root, "num_hidden_layers", 100000, &c->num_hidden_layers, src);
    if (!rc) rc = tri_config_get_int(root, "vocab_size", TRI_GPT_MAX_VOCAB, &c->vocab_size, src);
    if (!rc) rc = tri_config_get_int(root, "max_position_embeddings", 1 << 24, &c->max_position_embeddings, src);
    if (rc)
        return rc;
    c->num_key_value_heads = c->num_attention_heads;
    c->head_dim = c->hidden_size / c->num_attention_heads;
    if (!cJSON_GetObjectItemCaseSensitive(root, "head_dim") && c->hidden_size % c->num_attention_heads != 0)
        return TRI_ERR(TRI_EINVAL, "%s: \"hidden_size\" %d is not divisible by \"num_attention_heads\" %d (give "
                       "\"head_dim\")", src, c->hidden_size, c->num_attention_heads);
    rc = opt_int(root, "num_key_value_heads", 100000, &c->num_key_value_heads, src);
    if (!rc) rc = opt_int(root, "head_dim", 1 << 20, &c->head_dim, src); /* hidden_size's bound: the default is within it */
    double eps = 1e-6, theta = 10000.0, std = 0.02;
    if (!rc) rc = opt_number(root, "rms_norm_eps", 0, 1, &eps, src);
    if (!rc) rc = opt_number(root, "rope_theta", 0, 1e12, &theta, src);
    if (!rc) rc = opt_number(root, "initializer_range", 0, 1, &std, src);
    if (!rc) rc = parse_rope_scaling(&c->rope_scaling, root, src);
    if (!rc) rc = opt_bool(root, "tie_word_embeddings", &c->tie_word_embeddings, src);
    if (!rc) rc = opt_bool(root, "attention_bias", &c->attention_bias, src);
    if (!rc) rc = opt_bool(root, "mlp_bias", &c->mlp_bias, src);
    if (rc)
        return rc;
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return TRI_ERR(TRI_EINVAL, "%s: \"num_attention_heads\" %d is not a multiple of \"num_key_value_heads\" %d",
                       src, c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim % 2 != 0)
        return TRI_ERR(TRI_EINVAL, "%s: \"head_dim\" %d is odd; the rotary embedding rotates pairs of dimensions", src,
                       c->head_dim);
    if (!((float)eps >= FLT_MIN) || !((float)std >= FLT_MIN))
        return TRI_ERR(TRI_EINVAL, "%s: \"rms_norm_eps\" %g and \"initializer_range\" %g must be positive floats", src,
                       eps, std);
    c->rms_norm_eps = (float)eps;
    c->rope_theta = theta;
    c->init_std = (float)std;
    c->qk_norm = strcmp(type, "qwen3") == 0;
    return TRI_OK;
}

/* A config of family type ("llama" or "qwen3"). */
static int parse_config(void *config, const char *json, const char *type, const char *source)
{
    tri_llama_config *c = config;
    memset(c, 0, sizeof *c);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root)
        return TRI_ERR(TRI_EINVAL, "%s: invalid JSON near byte %zu", source, end ? (size_t)(end - json) : (size_t)0);
    int rc = parse_root(c, root, type, source);
    cJSON_Delete(root);
    tri_model_name_of(c->name, sizeof c->name, source);
    return rc;
}

int tri_llama_config_parse(void *config, const char *json, const char *source)
{
    return parse_config(config, json, "llama", source);
}

int tri_qwen3_config_parse(void *config, const char *json, const char *source)
{
    return parse_config(config, json, "qwen3", source);
}

int tri_llama_config_to_json(const void *config, char **json)
{
    const tri_llama_config *c = config;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", c->qk_norm ? "qwen3" : "llama");
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->num_key_value_heads);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    if (c->rope_scaling.llama3) {
        cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
        cJSON_AddNumberToObject(rs, "factor", c->rope_scaling.factor);
        cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_scaling.low_freq_factor);
        cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_scaling.high_freq_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", (double)c->rope_scaling.original_max_positions);
    } else {
        cJSON_AddNullToObject(o, "rope_scaling");
    }
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddBoolToObject(o, "attention_bias", c->attention_bias);
    cJSON_AddBoolToObject(o, "mlp_bias", c->mlp_bias);
    *json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return *json ? TRI_OK : TRI_ERR(TRI_ENOMEM, "config: out of memory rendering %s", c->name);
}

int64_t tri_llama_num_params(const void *config)
{
    const tri_llama_config *c = config;
    int64_t C = c->hidden_size, F = c->intermediate_size, Q = (int64_t)c->num_attention_heads * c->head_dim,
            KV = (int64_t)c->num_key_value_heads * c->head_dim, V = c->vocab_size;
    int64_t attn = C * (Q + 2 * KV) + Q * C + (c->attention_bias ? Q + 2 * KV + C : 0);
    int64_t mlp = 3 * C * F + (c->mlp_bias ? 2 * F + C : 0);
    int64_t block = 2 * C + attn + mlp + (c->qk_norm ? 2 * (int64_t)c->head_dim : 0);
    return V * C * (c->tie_word_embeddings ? 1 : 2) + c->num_hidden_layers * block + C;
}

/* A Llama block: RMSNorms, separate q, k, v and o projections (biases if attention_bias), a SwiGLU
 * MLP (biases if mlp_bias), rotary positions; 9 tensors, 4 attention and 3 MLP biases more, and
 * Qwen3's q_norm and k_norm. */
void tri_llama_block_cost(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    const tri_llama_config *c = cfg;
    tri_decoder_block b = {.C = c->hidden_size, .NH = c->num_attention_heads, .NH_kv = c->num_key_value_heads,
                           .HS = c->head_dim, .F = c->intermediate_size, .gated_mlp = true,
                           .attention_bias = c->attention_bias, .mlp_bias = c->mlp_bias, .norm = TRI_NORM_RMSNORM,
                           .rotary = true, .qk_norm = c->qk_norm,
                           .tensors = 9 + 4 * c->attention_bias + 3 * c->mlp_bias + 2 * c->qk_norm};
    tri_decoder_block_cost(&b, l, out);
}

/* The partitioner's outline (partitioner/transformer.h): the sizes it shares with GPT-2, no position
 * table, an RMSNorm at the end, a head of its own unless tied; and the block above. */
tri_transformer tri_llama_dims(const void *cfg)
{
    const tri_llama_config *c = cfg;
    tri_transformer m = {.n_layer = c->num_hidden_layers, .n_head = c->num_attention_heads,
                         .n_embd = c->hidden_size, .vocab_size = c->vocab_size,
                         .n_positions = c->max_position_embeddings, .n_kv_head = c->num_key_value_heads,
                         .final_norm = TRI_NORM_RMSNORM, .untied_head = !c->tie_word_embeddings,
                         .fused_attention_only = true, .block_cost = tri_llama_block_cost, .cfg = c};
    snprintf(m.block_text, sizeof m.block_text, " (%d key/value), head size %d, SwiGLU %d", c->num_key_value_heads,
             c->head_dim, c->intermediate_size);
    return m;
}
