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

/* LlamaForCausalLM's state_dict order: model.embed_tokens, model.layers.*, model.norm, lm_head.
 * MixtralDecoderLayer and Qwen3MoeDecoderLayer register self_attn, then the sparse block (its router
 * `gate`, then experts 0..E-1 each with its Linears in registration order: Mixtral's w1, w2, w3,
 * Qwen3's gate_proj, up_proj, down_proj; a shared expert after them), then the two norms. A layer's
 * keys: the attention's at 0..9 (Qwen3's q_norm, k_norm at 8, 9), the dense MLP's at 10..15, the
 * MoE's at A = 16 + their order, the norms last. */
static int64_t hf_position(const void *cfg, const char *name)
{
    const tri_llama_config *c = cfg;
    const int64_t A = HF_PER_LAYER - 2; /* where the norms would follow a dense layer */
    int64_t L = c->num_hidden_layers, E = c->num_experts, M = 1 + 3 * E + 3, S = A + M + 2;
    if (strcmp(name, "model.embed_tokens.weight") == 0)
        return 0;
    if (strcmp(name, "model.norm.weight") == 0)
        return 1 + L * S;
    if (strcmp(name, "lm_head.weight") == 0)
        return 2 + L * S;
    int layer = 0, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &used) == 1 && used > 0) {
        int64_t base = 1 + layer * S;
        for (int64_t j = 0; j < HF_PER_LAYER; j++)
            if (strcmp(name + used, hf_layer_order[j]) == 0)
                return base + (j < A ? j : A + M + (j - A));
        int k = E > 0 ? tri_llama_moe_param_index(c, name + used) : -1;
        if (k == 0 || k > 3 * E) /* the router, the shared expert */
            return base + A + (k == 0 ? 0 : k);
        if (k > 0 && k <= 2 * E) { /* expert e's gate (kind 0) or up (kind 1) */
            int64_t e = (k - 1) / 2, kind = (k - 1) % 2;
            int64_t at = c->hf_style == TRI_HF_MIXTRAL ? (kind == 0 ? 0 : 2) : kind; /* w1 w2 w3 / gate up down */
            return base + A + 1 + 3 * e + at;
        }
        if (k > 2 * E) { /* expert e's down */
            int64_t e = k - 1 - 2 * E;
            return base + A + 1 + 3 * e + (c->hf_style == TRI_HF_MIXTRAL ? 1 : 2);
        }
    }
    return 3 + L * S; /* no Llama parameter: last */
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

/* config.json as transformers writes a LlamaConfig or a Qwen3Config (json.dumps(indent=2,
 * sort_keys=True)): every key of tri_llama_config, and the fixed ones Trident computes (silu, no
 * attention dropout). Qwen3Config has no pretraining_tp and writes mlp_bias only when on; its full
 * attention is use_sliding_window false, so sliding_window null, and max_window_layers, which then
 * changes nothing, the layer count. */
static int hf_config_dense(const tri_llama_config *c, bool qwen3, const char *torch_dtype, char **json)
{
    char eps[48], theta[48], std[48], rope[640], window[64] = "";
    tri_hf_float_text(eps, sizeof eps, c->rms_norm_eps, true);
    tri_hf_float_text(theta, sizeof theta, c->rope_theta, false);
    tri_hf_float_text(std, sizeof std, c->init_std, true);
    rope_text(c, rope, sizeof rope);
    if (qwen3)
        snprintf(window, sizeof window, "  \"max_window_layers\": %d,\n", c->num_hidden_layers);
    const char *mlp_bias = c->mlp_bias ? "  \"mlp_bias\": true,\n" : qwen3 ? "" : "  \"mlp_bias\": false,\n";
    size_t cap = 4096;
    char *text = malloc(cap);
    if (!text)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for config.json", c->name);
    snprintf(text, cap,
             "{\n"
             "  \"architectures\": [\n"
             "    \"%s\"\n"
             "  ],\n"
             "  \"attention_bias\": %s,\n"
             "  \"attention_dropout\": 0.0,\n"
             "  \"head_dim\": %d,\n"
             "  \"hidden_act\": \"silu\",\n"
             "  \"hidden_size\": %d,\n"
             "  \"initializer_range\": %s,\n"
             "  \"intermediate_size\": %d,\n"
             "  \"max_position_embeddings\": %d,\n"
             "%s%s"
             "  \"model_type\": \"%s\",\n"
             "  \"num_attention_heads\": %d,\n"
             "  \"num_hidden_layers\": %d,\n"
             "  \"num_key_value_heads\": %d,\n"
             "%s"
             "  \"rms_norm_eps\": %s,\n"
             "  \"rope_scaling\": %s,\n"
             "  \"rope_theta\": %s,\n"
             "%s"
             "  \"tie_word_embeddings\": %s,\n"
             "  \"torch_dtype\": \"%s\",\n"
             "  \"use_cache\": true,\n"
             "%s"
             "  \"vocab_size\": %d\n"
             "}\n",
             qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM", c->attention_bias ? "true" : "false", c->head_dim,
             c->hidden_size, std, c->intermediate_size, c->max_position_embeddings, window, mlp_bias,
             qwen3 ? "qwen3" : "llama", c->num_attention_heads, c->num_hidden_layers, c->num_key_value_heads,
             qwen3 ? "" : "  \"pretraining_tp\": 1,\n", eps, rope, theta, qwen3 ? "  \"sliding_window\": null,\n" : "",
             c->tie_word_embeddings ? "true" : "false", torch_dtype, qwen3 ? "  \"use_sliding_window\": false,\n" : "",
             c->vocab_size);
    *json = text;
    return TRI_OK;
}

static int hf_config(const void *cfg, const char *torch_dtype, char **json)
{
    return hf_config_dense(cfg, false, torch_dtype, json);
}

static int hf_config_qwen3(const void *cfg, const char *torch_dtype, char **json)
{
    return hf_config_dense(cfg, true, torch_dtype, json);
}

/* config.json as transformers writes a MixtralConfig or a Qwen3MoeConfig (sorted keys, indent 2):
 * every key Trident reads, and the fixed ones it computes (silu, no jitter, no sliding window). */
static int hf_config_moe(const void *cfg, const char *torch_dtype, char **json)
{
    const tri_llama_config *c = cfg;
    bool mixtral = c->hf_style == TRI_HF_MIXTRAL;
    char eps[48], theta[48], std[48], coef[48], only[TRI_LLAMA_MAX_MLP_ONLY * 8 + 16] = "[]";
    tri_hf_float_text(eps, sizeof eps, c->rms_norm_eps, true);
    tri_hf_float_text(theta, sizeof theta, c->rope_theta, false);
    tri_hf_float_text(std, sizeof std, c->init_std, true);
    tri_hf_float_text(coef, sizeof coef, c->router_aux_loss_coef, true);
    if (c->n_mlp_only_layers > 0) {
        size_t at = (size_t)snprintf(only, sizeof only, "[");
        for (int i = 0; i < c->n_mlp_only_layers; i++)
            at += (size_t)snprintf(only + at, sizeof only - at, "\n    %d%s", c->mlp_only_layers[i],
                                   i + 1 < c->n_mlp_only_layers ? "," : "\n  ]");
    }
    char shared[96] = "";
    if (c->shared_expert_intermediate_size > 0)
        snprintf(shared, sizeof shared, "  \"moe_shared_expert_intermediate_size\": %d,\n",
                 c->shared_expert_intermediate_size);
    size_t cap = 8192;
    char *text = malloc(cap);
    if (!text)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for config.json", c->name);
    if (mixtral)
        snprintf(text, cap,
                 "{\n  \"architectures\": [\n    \"MixtralForCausalLM\"\n  ],\n"
                 "  \"attention_dropout\": 0.0,\n  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n"
                 "  \"hidden_size\": %d,\n  \"initializer_range\": %s,\n  \"intermediate_size\": %d,\n"
                 "  \"max_position_embeddings\": %d,\n  \"model_type\": \"mixtral\",\n%s"
                 "  \"num_attention_heads\": %d,\n  \"num_experts_per_tok\": %d,\n  \"num_hidden_layers\": %d,\n"
                 "  \"num_key_value_heads\": %d,\n  \"num_local_experts\": %d,\n  \"output_router_logits\": %s,\n"
                 "  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n  \"router_aux_loss_coef\": %s,\n"
                 "  \"router_jitter_noise\": 0.0,\n  \"sliding_window\": null,\n  \"tie_word_embeddings\": %s,\n"
                 "  \"torch_dtype\": \"%s\",\n  \"use_cache\": true,\n  \"vocab_size\": %d\n}\n",
                 c->head_dim, c->hidden_size, std, c->moe_intermediate_size, c->max_position_embeddings, shared,
                 c->num_attention_heads, c->num_experts_per_tok, c->num_hidden_layers, c->num_key_value_heads,
                 c->num_experts, c->output_router_logits ? "true" : "false", eps, theta, coef,
                 c->tie_word_embeddings ? "true" : "false", torch_dtype, c->vocab_size);
    else
        snprintf(text, cap,
                 "{\n  \"architectures\": [\n    \"Qwen3MoeForCausalLM\"\n  ],\n"
                 "  \"attention_bias\": %s,\n  \"attention_dropout\": 0.0,\n  \"decoder_sparse_step\": %d,\n"
                 "  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n"
                 "  \"initializer_range\": %s,\n  \"intermediate_size\": %d,\n  \"max_position_embeddings\": %d,\n"
                 "  \"mlp_only_layers\": %s,\n  \"model_type\": \"qwen3_moe\",\n  \"moe_intermediate_size\": %d,\n%s"
                 "  \"norm_topk_prob\": %s,\n  \"num_attention_heads\": %d,\n  \"num_experts\": %d,\n"
                 "  \"num_experts_per_tok\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_key_value_heads\": %d,\n"
                 "  \"output_router_logits\": %s,\n  \"rms_norm_eps\": %s,\n  \"rope_scaling\": null,\n"
                 "  \"rope_theta\": %s,\n  \"router_aux_loss_coef\": %s,\n  \"sliding_window\": null,\n"
                 "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\",\n  \"use_cache\": true,\n"
                 "  \"use_sliding_window\": false,\n  \"vocab_size\": %d\n}\n",
                 c->attention_bias ? "true" : "false", c->decoder_sparse_step, c->head_dim, c->hidden_size, std,
                 c->intermediate_size, c->max_position_embeddings, only, c->moe_intermediate_size, shared,
                 c->norm_topk_prob ? "true" : "false", c->num_attention_heads, c->num_experts,
                 c->num_experts_per_tok, c->num_hidden_layers, c->num_key_value_heads,
                 c->output_router_logits ? "true" : "false", eps, theta, coef,
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

/* What every table of the Llama code shares: the code itself, which the config's fields steer
 * (qk_norm, the experts); the tables differ in their type, config keys, title and config.json. */
#define LLAMA_CODE                                                                                        \
    .config_size = sizeof(tri_llama_config), .to_json = tri_llama_config_to_json, .dims = tri_llama_dims, \
    .num_params = tri_llama_num_params, .num_param_tensors = tri_llama_num_param_tensors,                 \
    .param_specs = tri_llama_param_specs, .check = tri_llama_check, .create = tri_llama_create,           \
    .destroy = tri_decoder_free, .logits_row = tri_decoder_logits_row, .hf_name = hf_name,                \
    .hf_position = hf_position, .hf_skipped = hf_skipped, .hf_tied_head = hf_tied_head

const tri_model_family tri_llama_family = {
    .type = "llama", .title = "Llama", .parse = tri_llama_config_parse, .hf_config = hf_config, LLAMA_CODE,
};

/* Qwen3 (Qwen3ForCausalLM, model_type "qwen3"): the Llama code with the per-head q/k norm
 * (tri_llama_config.qk_norm, which its parse sets); only the config's keys and config.json differ. */
const tri_model_family tri_qwen3_family = {
    .type = "qwen3", .title = "Qwen3", .parse = tri_qwen3_config_parse, .hf_config = hf_config_qwen3, LLAMA_CODE,
};

/* MixtralForCausalLM: the Llama code with experts, Mixtral's config keys, names and config.json. */
const tri_model_family tri_mixtral_family = {
    .type = "mixtral", .title = "Mixtral", .parse = tri_mixtral_config_parse, .hf_config = hf_config_moe,
    LLAMA_CODE,
};

/* Qwen3MoeForCausalLM: the Llama code with experts and Qwen3's per-head q/k norm (its parse sets
 * qk_norm), Qwen3-MoE's config keys, names and config.json. */
const tri_model_family tri_qwen3_moe_family = {
    .type = "qwen3_moe", .title = "Qwen3-MoE", .parse = tri_qwen3_moe_config_parse, .hf_config = hf_config_moe,
    LLAMA_CODE,
};

const tri_llama_config *tri_llama_config_of(const tri_model *m)
{
    return m->family == &tri_llama_family || m->family == &tri_mixtral_family || m->family == &tri_qwen3_family ||
                   m->family == &tri_qwen3_moe_family
               ? m->cfg : NULL;
}
