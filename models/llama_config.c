/* models/llama_config.c - reading and writing Llama configs in Hugging Face LlamaConfig's keys (see
 * llama.h), Qwen3Config's (model_type "qwen3": the same keys, the per-head q/k norm always on,
 * sliding-window keys accepted while use_sliding_window is false), and the MoE configs of Mixtral and
 * Qwen3-MoE (their experts' keys, parse_moe). Defaults are LlamaConfig's, except
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
#include "layers/moe.h"
#include "models/llama.h"

/* Keys that describe nothing Trident varies: bookkeeping (check 0) or one value Trident computes
 * (1: this number, 2: this string, 3: null, 4: false). "model_type" is checked by the parse entry. */
typedef struct fixed_key {
    const char *key;
    int check;
    const char *str;
    double num;
} fixed_key;

static const fixed_key fixed_keys[] = {
    {"model_type", 0, NULL, 0},
    {"hidden_act", 2, "silu", 0},
    {"attention_dropout", 1, NULL, 0.0},
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

/* Each style's own keys: LlamaConfig's, MixtralConfig's, Qwen3MoeConfig's (transformers 4.51). */
static const fixed_key llama_fixed[] = {{"pretraining_tp", 1, NULL, 1.0}};
static const fixed_key mixtral_fixed[] = {{"router_jitter_noise", 1, NULL, 0.0}, {"sliding_window", 3, NULL, 0}};
/* Qwen3Config's and Qwen3MoeConfig's sliding window, which Trident does not compute: use_sliding_window
 * must be false (sliding_window and max_window_layers then change nothing, as in transformers). */
static const fixed_key qwen3_fixed[] = {{"use_sliding_window", 4, NULL, 0}, {"sliding_window", 0, NULL, 0},
                                        {"max_window_layers", 0, NULL, 0}};

static const char *const model_keys[] = {
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "num_hidden_layers", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "tie_word_embeddings", "attention_bias", "mlp_bias", "initializer_range"};
static const char *const mixtral_keys[] = {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                                           "output_router_logits", "moe_shared_expert_intermediate_size"};
static const char *const qwen3_keys[] = {"layer_types"};
static const char *const qwen3_moe_keys[] = {"layer_types", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                             "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob",
                                             "router_aux_loss_coef", "output_router_logits",
                                             "moe_shared_expert_intermediate_size"};

typedef struct style_keys {
    const char *type;
    const char *title;
    const char *const *keys;
    size_t n_keys;
    const fixed_key *fixed;
    size_t n_fixed;
    bool moe;     /* the experts' keys (parse_moe) */
    bool qk_norm; /* Qwen3's per-head q/k RMSNorm, always on */
} style_keys;

#define N_OF(a) (sizeof(a) / sizeof *(a))
static const style_keys styles[] = {
    [TRI_HF_LLAMA] = {"llama", "Llama", NULL, 0, llama_fixed, N_OF(llama_fixed), false, false},
    [TRI_HF_QWEN3] = {"qwen3", "Qwen3", qwen3_keys, N_OF(qwen3_keys), qwen3_fixed, N_OF(qwen3_fixed), false, true},
    [TRI_HF_MIXTRAL] = {"mixtral", "Mixtral", mixtral_keys, N_OF(mixtral_keys), mixtral_fixed, N_OF(mixtral_fixed),
                        true, false},
    [TRI_HF_QWEN3_MOE] = {"qwen3_moe", "Qwen3-MoE", qwen3_moe_keys, N_OF(qwen3_moe_keys), qwen3_fixed,
                          N_OF(qwen3_fixed), true, true},
};

static int check_fixed(const cJSON *item, const fixed_key *f, const char *title, const char *src)
{
    char v[96];
    bool ok = f->check == 0 || (f->check == 1 && cJSON_IsNumber(item) && item->valuedouble == f->num) ||
              (f->check == 2 && cJSON_IsString(item) && strcmp(item->valuestring, f->str) == 0) ||
              (f->check == 3 && cJSON_IsNull(item)) || (f->check == 4 && cJSON_IsFalse(item));
    if (ok)
        return TRI_OK;
    const char *want = f->check == 3 ? "null" : f->check == 4 ? "false" : NULL;
    if (f->check == 1)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, but Trident's %s computes only %g", src, item->string,
                       tri_config_value_text(item, v, sizeof v), title, f->num);
    if (want)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, but Trident's %s computes only %s (no sliding-window "
                       "attention)", src, item->string, tri_config_value_text(item, v, sizeof v), title, want);
    return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, but Trident's %s computes only \"%s\"", src, item->string,
                   tri_config_value_text(item, v, sizeof v), title, f->str);
}

/* Qwen3's layer_types, when given: all "full_attention" (Trident computes no sliding window). */
static int check_layer_types(const cJSON *root, const char *src)
{
    char v[96];
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

static int check_keys(const cJSON *root, const style_keys *st, const char *src)
{
    for (const cJSON *item = root->child; item; item = item->next) {
        bool found = false;
        for (size_t i = 0; i < N_OF(model_keys) && !found; i++)
            found = strcmp(item->string, model_keys[i]) == 0;
        for (size_t i = 0; i < st->n_keys && !found; i++)
            found = strcmp(item->string, st->keys[i]) == 0;
        const fixed_key *f = NULL;
        for (size_t i = 0; i < N_OF(fixed_keys) && !found && !f; i++)
            f = strcmp(item->string, fixed_keys[i].key) == 0 ? &fixed_keys[i] : NULL;
        for (size_t i = 0; i < st->n_fixed && !found && !f; i++)
            f = strcmp(item->string, st->fixed[i].key) == 0 ? &st->fixed[i] : NULL;
        if (f) {
            int rc = check_fixed(item, f, st->title, src);
            if (rc)
                return rc;
            found = true;
        }
        if (!found)
            return TRI_ERR(TRI_EINVAL, "%s: unknown key \"%s\" (%s config keys: hidden_size, intermediate_size, "
                           "num_attention_heads, num_key_value_heads, head_dim, num_hidden_layers, vocab_size, "
                           "max_position_embeddings, rms_norm_eps, rope_theta, rope_scaling, ...%s)", src,
                           item->string, st->title, st->n_keys ? ", the experts' keys" : "");
    }
    return st->qk_norm ? check_layer_types(root, src) : TRI_OK;
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

/* The experts' keys (MixtralConfig's or Qwen3MoeConfig's, their defaults) and their bounds. */
static int parse_moe(tri_llama_config *c, const cJSON *root, const char *src)
{
    char v[96];
    bool mixtral = c->hf_style == TRI_HF_MIXTRAL;
    const char *e_key = mixtral ? "num_local_experts" : "num_experts";
    c->num_experts = mixtral ? 8 : 128;
    c->num_experts_per_tok = mixtral ? 2 : 8;
    c->moe_intermediate_size = mixtral ? c->intermediate_size : 768;
    c->decoder_sparse_step = 1;
    c->norm_topk_prob = mixtral; /* Mixtral always renormalises; Qwen3-MoE's default is false */
    double coef = 0.001;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, e_key);
    if (e && cJSON_IsNumber(e) && e->valuedouble == 0)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is 0; a %s has at least one expert (a dense model is \"model_type\": "
                       "\"llama\")", src, e_key, styles[c->hf_style].title);
    int rc = opt_int(root, e_key, 1 << 30, &c->num_experts, src);
    if (!rc) rc = opt_int(root, "num_experts_per_tok", 1 << 30, &c->num_experts_per_tok, src);
    if (!rc && !mixtral) rc = opt_int(root, "moe_intermediate_size", 1 << 22, &c->moe_intermediate_size, src);
    if (!rc && !mixtral) rc = opt_int(root, "decoder_sparse_step", 100000, &c->decoder_sparse_step, src);
    if (!rc && !mixtral) rc = opt_bool(root, "norm_topk_prob", &c->norm_topk_prob, src);
    if (!rc) rc = opt_bool(root, "output_router_logits", &c->output_router_logits, src);
    if (!rc) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "router_aux_loss_coef");
        if (a && (!cJSON_IsNumber(a) || !(a->valuedouble >= 0) || a->valuedouble > 1e6))
            return TRI_ERR(TRI_EINVAL, "%s: \"router_aux_loss_coef\" is %s, expected a number in [0, 1e6]", src,
                           tri_config_value_text(a, v, sizeof v));
        if (a)
            coef = a->valuedouble;
    }
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(root, "moe_shared_expert_intermediate_size");
    if (!rc && sh && !(cJSON_IsNumber(sh) && sh->valuedouble == 0))
        rc = tri_config_get_int(root, "moe_shared_expert_intermediate_size", 1 << 22,
                                &c->shared_expert_intermediate_size, src);
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (!rc && only && !mixtral) {
        if (!cJSON_IsArray(only) || cJSON_GetArraySize(only) > TRI_LLAMA_MAX_MLP_ONLY)
            return TRI_ERR(TRI_EINVAL, "%s: \"mlp_only_layers\" is %s, expected a list of at most %d layer indices",
                           src, tri_config_value_text(only, v, sizeof v), TRI_LLAMA_MAX_MLP_ONLY);
        for (const cJSON *it = only->child; it; it = it->next) {
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
                it->valuedouble >= c->num_hidden_layers)
                return TRI_ERR(TRI_EINVAL, "%s: \"mlp_only_layers\" holds %s, expected layer indices in [0, %d)",
                               src, tri_config_value_text(it, v, sizeof v), c->num_hidden_layers);
            c->mlp_only_layers[c->n_mlp_only_layers++] = (int)it->valuedouble;
        }
    }
    if (rc)
        return rc;
    if (c->num_experts > TRI_MOE_MAX_EXPERTS)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %d, above the %d experts the MoE block holds (TRI_MOE_MAX_EXPERTS)",
                       src, e_key, c->num_experts, TRI_MOE_MAX_EXPERTS);
    if (c->num_experts_per_tok > c->num_experts)
        return TRI_ERR(TRI_EINVAL, "%s: \"num_experts_per_tok\" is %d, more than the %d experts (\"%s\")", src,
                       c->num_experts_per_tok, c->num_experts, e_key);
    if (mixtral && (c->attention_bias || c->rope_scaling.llama3))
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is set, but MixtralConfig has no such key (Mixtral: no attention "
                       "biases, no rope_scaling)", src, c->attention_bias ? "attention_bias" : "rope_scaling");
    if (c->mlp_bias)
        return TRI_ERR(TRI_EINVAL, "%s: \"mlp_bias\" is true, but the experts of Trident's %s have no biases", src,
                       styles[c->hf_style].title);
    c->router_aux_loss_coef = (float)coef;
    return TRI_OK;
}

/* A sparse layer's MoE tensors (models/llama_moe.c lists them): the router, E experts' three
 * matrices, the shared expert's three. */
int tri_llama_moe_num_params(const tri_llama_config *c)
{
    return 1 + 3 * c->num_experts + (c->shared_expert_intermediate_size > 0 ? 3 : 0);
}

bool tri_llama_layer_is_sparse(const tri_llama_config *c, int layer)
{
    if (c->num_experts <= 0 || c->decoder_sparse_step <= 0 || (layer + 1) % c->decoder_sparse_step != 0)
        return false;
    for (int i = 0; i < c->n_mlp_only_layers; i++)
        if (c->mlp_only_layers[i] == layer)
            return false;
    return true;
}

static int parse_root(tri_llama_config *c, const cJSON *root, const char *src)
{
    char v[96];
    const style_keys *st = &styles[c->hf_style];
    if (!cJSON_IsObject(root))
        return TRI_ERR(TRI_EINVAL, "%s: expected a JSON object at the top level", src);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, st->type) != 0))
        return TRI_ERR(TRI_EINVAL, "%s: \"model_type\" is %s, but this is the \"%s\" family", src,
                       tri_config_value_text(type, v, sizeof v), st->type);
    int rc = tri_config_check_unique(root, src);
    if (!rc) rc = check_keys(root, st, src);
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
    double eps = c->hf_style == TRI_HF_MIXTRAL ? 1e-5 : 1e-6, theta = c->hf_style == TRI_HF_MIXTRAL ? 1e6 : 10000.0,
           std = 0.02;
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
    c->qk_norm = st->qk_norm;
    return st->moe ? parse_moe(c, root, src) : TRI_OK;
}

static int parse_style(void *config, const char *json, const char *source, tri_llama_hf_style style)
{
    tri_llama_config *c = config;
    memset(c, 0, sizeof *c);
    c->hf_style = style;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root)
        return TRI_ERR(TRI_EINVAL, "%s: invalid JSON near byte %zu", source, end ? (size_t)(end - json) : (size_t)0);
    int rc = parse_root(c, root, source);
    cJSON_Delete(root);
    tri_model_name_of(c->name, sizeof c->name, source);
    return rc;
}

int tri_llama_config_parse(void *config, const char *json, const char *source)
{
    return parse_style(config, json, source, TRI_HF_LLAMA);
}

int tri_qwen3_config_parse(void *config, const char *json, const char *source)
{
    return parse_style(config, json, source, TRI_HF_QWEN3);
}

int tri_mixtral_config_parse(void *config, const char *json, const char *source)
{
    return parse_style(config, json, source, TRI_HF_MIXTRAL);
}

int tri_qwen3_moe_config_parse(void *config, const char *json, const char *source)
{
    return parse_style(config, json, source, TRI_HF_QWEN3_MOE);
}

int tri_llama_config_to_json(const void *config, char **json)
{
    const tri_llama_config *c = config;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", styles[c->hf_style].type);
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
    if (c->hf_style == TRI_HF_MIXTRAL) { /* MixtralConfig's keys (its experts' width is intermediate_size) */
        cJSON_AddNumberToObject(o, "num_local_experts", c->num_experts);
        cJSON_AddNumberToObject(o, "num_experts_per_tok", c->num_experts_per_tok);
        if (c->shared_expert_intermediate_size > 0)
            cJSON_AddNumberToObject(o, "moe_shared_expert_intermediate_size", c->shared_expert_intermediate_size);
        cJSON_AddNumberToObject(o, "router_aux_loss_coef", c->router_aux_loss_coef);
        cJSON_AddBoolToObject(o, "output_router_logits", c->output_router_logits);
    } else if (c->hf_style == TRI_HF_QWEN3_MOE) { /* Qwen3MoeConfig's (a dense Llama's JSON stays as it was) */
        cJSON_AddNumberToObject(o, "num_experts", c->num_experts);
        cJSON_AddNumberToObject(o, "num_experts_per_tok", c->num_experts_per_tok);
        cJSON_AddNumberToObject(o, "moe_intermediate_size", c->moe_intermediate_size);
        if (c->shared_expert_intermediate_size > 0)
            cJSON_AddNumberToObject(o, "moe_shared_expert_intermediate_size", c->shared_expert_intermediate_size);
        cJSON_AddNumberToObject(o, "decoder_sparse_step", c->decoder_sparse_step);
        cJSON *only = cJSON_AddArrayToObject(o, "mlp_only_layers");
        for (int i = 0; only && i < c->n_mlp_only_layers; i++)
            cJSON_AddItemToArray(only, cJSON_CreateNumber(c->mlp_only_layers[i]));
        cJSON_AddBoolToObject(o, "norm_topk_prob", c->norm_topk_prob);
        cJSON_AddNumberToObject(o, "router_aux_loss_coef", c->router_aux_loss_coef);
        cJSON_AddBoolToObject(o, "output_router_logits", c->output_router_logits);
    }
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
    attn += c->qk_norm ? 2 * (int64_t)c->head_dim : 0; /* Qwen3's q_norm, k_norm */
    /* a sparse layer: the router (E, C), E experts of 3 C I, the shared expert's 3 C I_s */
    int64_t moe = (int64_t)c->num_experts * C + (int64_t)c->num_experts * 3 * C * c->moe_intermediate_size +
                  3 * C * (int64_t)c->shared_expert_intermediate_size;
    int64_t total = V * C * (c->tie_word_embeddings ? 1 : 2) + C;
    for (int l = 0; l < c->num_hidden_layers; l++)
        total += 2 * C + attn + (tri_llama_layer_is_sparse(c, l) ? moe : mlp);
    return total;
}

/* A Llama block: RMSNorms, separate q, k, v and o projections (biases if attention_bias), a SwiGLU
 * MLP (biases if mlp_bias), rotary positions; 9 tensors, 4 attention and 3 MLP biases more. */
/* Block `layer`: the dense block, or with tri_llama_layer_is_sparse its MoE block (the router, E
 * experts of width I, the shared expert) in place of the SwiGLU MLP (models/block_cost.h). */
void tri_llama_block_cost_at(const void *cfg, const tri_train_layout *l, int layer, tri_block_cost *out)
{
    const tri_llama_config *c = cfg;
    tri_decoder_block b = {.C = c->hidden_size, .NH = c->num_attention_heads, .NH_kv = c->num_key_value_heads,
                           .HS = c->head_dim, .F = c->intermediate_size, .gated_mlp = true,
                           .attention_bias = c->attention_bias, .mlp_bias = c->mlp_bias, .norm = TRI_NORM_RMSNORM,
                           .rotary = true, .qk_norm = c->qk_norm,
                           .tensors = 9 + 4 * c->attention_bias + 3 * c->mlp_bias + 2 * c->qk_norm};
    if (tri_llama_layer_is_sparse(c, layer)) {
        b.sparse = true;
        b.E = c->num_experts;
        b.K = c->num_experts_per_tok;
        b.I = c->moe_intermediate_size;
        b.I_shared = c->shared_expert_intermediate_size;
        b.tensors = 6 + 4 * c->attention_bias + 2 * c->qk_norm + tri_llama_moe_num_params(c);
    }
    tri_decoder_block_cost(&b, l, out);
}

/* A Llama block: RMSNorms, separate q, k, v and o projections (biases if attention_bias), a SwiGLU
 * MLP (biases if mlp_bias), rotary positions; 9 tensors, 4 attention and 3 MLP biases more. With
 * experts, the first sparse layer's block (the representative the stage split weighs). */
void tri_llama_block_cost(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    const tri_llama_config *c = cfg;
    int layer = 0;
    while (c->num_experts > 0 && layer + 1 < c->num_hidden_layers && !tri_llama_layer_is_sparse(c, layer))
        layer++;
    tri_llama_block_cost_at(cfg, l, layer, out);
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
                         .fused_attention_only = true, .block_cost = tri_llama_block_cost,
                         .block_cost_at = tri_llama_block_cost_at, .n_experts = c->num_experts,
                         .experts_per_tok = c->num_experts_per_tok,
                         .expert_ffn = c->num_experts > 0 ? c->moe_intermediate_size : 0, .cfg = c};
    if (c->num_experts > 0)
        snprintf(m.block_text, sizeof m.block_text, " (%d key/value), head size %d, %d SwiGLU experts of %d, top-%d",
                 c->num_key_value_heads, c->head_dim, c->num_experts, c->moe_intermediate_size,
                 c->num_experts_per_tok);
    else
        snprintf(m.block_text, sizeof m.block_text, " (%d key/value), head size %d, SwiGLU %d", c->num_key_value_heads,
                 c->head_dim, c->intermediate_size);
    return m;
}
