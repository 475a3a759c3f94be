/* models/llama_family.c - the Llama family's table (models/model.h), and Qwen3's, which shares it all
 * but the config's keys: what the session, the
 * checkpoints, the partitioner and the tools reach it through. Its entries are the family's own
 * functions, which take the config as the table passes it (a tri_llama_config behind const void *). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/hf.h"
#include "models/llama.h"
#include "models/model_chunk.h"

/* ---- Hugging Face (LlamaForCausalLM; models/hf.h) ----
 * The parameters carry transformers' names and (out, in) shapes already (llama.h): only the
 * state_dict order, the config file, the buffers and a stored tied head need saying. */

static void hf_name(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s", name);
}

/* A decoder layer's tensors in LlamaDecoderLayer's (and Qwen3DecoderLayer's) state_dict order: it
 * registers self_attn (q, k, v, o projections, then Qwen3Attention's q_norm and k_norm), mlp (gate,
 * up, down), then the two norms; each Linear's weight before its bias. */
static const char *const hf_layer_order[] = {
    "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.k_proj.bias",
    "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.o_proj.weight", "self_attn.o_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight",    "mlp.gate_proj.bias",    "mlp.up_proj.weight",      "mlp.up_proj.bias",
    "mlp.down_proj.weight",    "mlp.down_proj.bias",    "input_layernorm.weight",  "post_attention_layernorm.weight",
};

#define HF_PER_LAYER ((int64_t)(sizeof hf_layer_order / sizeof hf_layer_order[0]))

/* LlamaForCausalLM's state_dict order: model.embed_tokens, model.layers.*, model.norm, lm_head. */
static int64_t hf_position(const void *cfg, const char *name)
{
    int64_t L = ((const tri_llama_config *)cfg)->num_hidden_layers;
    if (strcmp(name, "model.embed_tokens.weight") == 0)
        return 0;
    if (strcmp(name, "model.norm.weight") == 0)
        return 1 + L * HF_PER_LAYER;
    if (strcmp(name, "lm_head.weight") == 0)
        return 2 + L * HF_PER_LAYER;
    int layer = 0, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &used) == 1 && used > 0)
        for (int64_t j = 0; j < HF_PER_LAYER; j++)
            if (strcmp(name + used, hf_layer_order[j]) == 0)
                return 1 + layer * HF_PER_LAYER + j;
    return 3 + L * HF_PER_LAYER; /* no Llama parameter: last */
}

/* rope_scaling's value as transformers writes it: null or Llama 3's object. */
static void rope_text(const tri_llama_config *c, char *rope, size_t cap)
{
    if (c->rope_scaling.llama3) {
        char factor[48], lo[48], hi[48];
        tri_hf_float_text(factor, sizeof factor, c->rope_scaling.factor, true);
        tri_hf_float_text(lo, sizeof lo, c->rope_scaling.low_freq_factor, true);
        tri_hf_float_text(hi, sizeof hi, c->rope_scaling.high_freq_factor, true);
        snprintf(rope, cap, "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    \"low_freq_factor\": "
                 "%s,\n    \"original_max_position_embeddings\": %lld,\n    \"rope_type\": \"llama3\"\n  }", factor, hi,
                 lo, (long long)c->rope_scaling.original_max_positions);
    } else {
        snprintf(rope, cap, "null");
    }
}

/* config.json as transformers writes a LlamaConfig (json.dumps(indent=2, sort_keys=True)): every
 * key of tri_llama_config, and the fixed ones Trident computes (silu, no attention dropout). */
static int hf_config(const void *cfg, const char *torch_dtype, char **json)
{
    const tri_llama_config *c = cfg;
    char eps[48], theta[48], std[48], rope[640];
    tri_hf_float_text(eps, sizeof eps, c->rms_norm_eps, true);
    tri_hf_float_text(theta, sizeof theta, c->rope_theta, false);
    tri_hf_float_text(std, sizeof std, c->init_std, true);
    rope_text(c, rope, sizeof rope);
    size_t cap = 4096;
    char *text = malloc(cap);
    if (!text)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for config.json", c->name);
    snprintf(text, cap,
             "{\n"
             "  \"architectures\": [\n"
             "    \"LlamaForCausalLM\"\n"
             "  ],\n"
             "  \"attention_bias\": %s,\n"
             "  \"attention_dropout\": 0.0,\n"
             "  \"head_dim\": %d,\n"
             "  \"hidden_act\": \"silu\",\n"
             "  \"hidden_size\": %d,\n"
             "  \"initializer_range\": %s,\n"
             "  \"intermediate_size\": %d,\n"
             "  \"max_position_embeddings\": %d,\n"
             "  \"mlp_bias\": %s,\n"
             "  \"model_type\": \"llama\",\n"
             "  \"num_attention_heads\": %d,\n"
             "  \"num_hidden_layers\": %d,\n"
             "  \"num_key_value_heads\": %d,\n"
             "  \"pretraining_tp\": 1,\n"
             "  \"rms_norm_eps\": %s,\n"
             "  \"rope_scaling\": %s,\n"
             "  \"rope_theta\": %s,\n"
             "  \"tie_word_embeddings\": %s,\n"
             "  \"torch_dtype\": \"%s\",\n"
             "  \"use_cache\": true,\n"
             "  \"vocab_size\": %d\n"
             "}\n",
             c->attention_bias ? "true" : "false", c->head_dim, c->hidden_size, std, c->intermediate_size,
             c->max_position_embeddings, c->mlp_bias ? "true" : "false", c->num_attention_heads,
             c->num_hidden_layers, c->num_key_value_heads, eps, rope, theta,
             c->tie_word_embeddings ? "true" : "false", torch_dtype, c->vocab_size);
    *json = text;
    return TRI_OK;
}

/* config.json as transformers writes a Qwen3Config: its keys (no mlp_bias or pretraining_tp, unless
 * mlp_bias is on), full attention (use_sliding_window false, so sliding_window null, and
 * max_window_layers, which then changes nothing, the layer count). */
static int hf_config_qwen3(const void *cfg, const char *torch_dtype, char **json)
{
    const tri_llama_config *c = cfg;
    char eps[48], theta[48], std[48], rope[640];
    tri_hf_float_text(eps, sizeof eps, c->rms_norm_eps, true);
    tri_hf_float_text(theta, sizeof theta, c->rope_theta, false);
    tri_hf_float_text(std, sizeof std, c->init_std, true);
    rope_text(c, rope, sizeof rope);
    size_t cap = 4096;
    char *text = malloc(cap);
    if (!text)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for config.json", c->name);
    snprintf(text, cap,
             "{\n"
             "  \"architectures\": [\n"
             "    \"Qwen3ForCausalLM\"\n"
             "  ],\n"
             "  \"attention_bias\": %s,\n"
             "  \"attention_dropout\": 0.0,\n"
             "  \"head_dim\": %d,\n"
             "  \"hidden_act\": \"silu\",\n"
             "  \"hidden_size\": %d,\n"
             "  \"initializer_range\": %s,\n"
             "  \"intermediate_size\": %d,\n"
             "  \"max_position_embeddings\": %d,\n"
             "  \"max_window_layers\": %d,\n"
             "%s"
             "  \"model_type\": \"qwen3\",\n"
             "  \"num_attention_heads\": %d,\n"
             "  \"num_hidden_layers\": %d,\n"
             "  \"num_key_value_heads\": %d,\n"
             "  \"rms_norm_eps\": %s,\n"
             "  \"rope_scaling\": %s,\n"
             "  \"rope_theta\": %s,\n"
             "  \"sliding_window\": null,\n"
             "  \"tie_word_embeddings\": %s,\n"
             "  \"torch_dtype\": \"%s\",\n"
             "  \"use_cache\": true,\n"
             "  \"use_sliding_window\": false,\n"
             "  \"vocab_size\": %d\n"
             "}\n",
             c->attention_bias ? "true" : "false", c->head_dim, c->hidden_size, std, c->intermediate_size,
             c->max_position_embeddings, c->num_hidden_layers, c->mlp_bias ? "  \"mlp_bias\": true,\n" : "",
             c->num_attention_heads, c->num_hidden_layers, c->num_key_value_heads, eps, rope, theta,
             c->tie_word_embeddings ? "true" : "false", torch_dtype, c->vocab_size);
    *json = text;
    return TRI_OK;
}

/* Older transformers saved each attention's rotary inverse frequencies (a buffer computed from
 * the config): "model.layers.N.self_attn.rotary_emb.inv_freq". */
static bool hf_skipped(const char *name)
{
    const char *suffix = ".rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}

/* A tied config's lm_head.weight, when a writer stores it, must be the embedding. */
static const char *hf_tied_head(const void *cfg, const char **param)
{
    if (!((const tri_llama_config *)cfg)->tie_word_embeddings)
        return NULL; /* lm_head.weight is a parameter */
    *param = "model.embed_tokens.weight";
    return "lm_head.weight";
}

const tri_model_family tri_llama_family = {
    .type = "llama",
    .config_size = sizeof(tri_llama_config),
    .parse = tri_llama_config_parse,
    .to_json = tri_llama_config_to_json,
    .dims = tri_llama_dims,
    .num_params = tri_llama_num_params,
    .num_param_tensors = tri_llama_num_param_tensors,
    .param_specs = tri_llama_param_specs,
    .check = tri_llama_check,
    .create = tri_llama_create,
    .destroy = tri_decoder_free,
    .logits_row = tri_decoder_logits_row,
    .title = "Llama",
    .hf_name = hf_name,
    .hf_position = hf_position,
    .hf_config = hf_config,
    .hf_skipped = hf_skipped,
    .hf_tied_head = hf_tied_head,
};

/* Qwen3 (Qwen3ForCausalLM, model_type "qwen3"): the Llama family's code with the per-head q/k norm
 * (tri_llama_config.qk_norm, which its parse sets); only the config's keys and config.json differ. */
const tri_model_family tri_qwen3_family = {
    .type = "qwen3",
    .config_size = sizeof(tri_llama_config),
    .parse = tri_qwen3_config_parse,
    .to_json = tri_llama_config_to_json,
    .dims = tri_llama_dims,
    .num_params = tri_llama_num_params,
    .num_param_tensors = tri_llama_num_param_tensors,
    .param_specs = tri_llama_param_specs,
    .check = tri_llama_check,
    .create = tri_llama_create,
    .destroy = tri_decoder_free,
    .logits_row = tri_decoder_logits_row,
    .title = "Qwen3",
    .hf_name = hf_name,
    .hf_position = hf_position,
    .hf_config = hf_config_qwen3,
    .hf_skipped = hf_skipped,
    .hf_tied_head = hf_tied_head,
};

const tri_llama_config *tri_llama_config_of(const tri_model *m)
{
    return m->family == &tri_llama_family || m->family == &tri_qwen3_family ? m->cfg : NULL;
}
