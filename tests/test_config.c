/* tests/test_config.c - model config parsing and validation (models/config.h).
 *
 * The shipped configs load with the published sizes and parameter counts; every malformed config
 * is refused with a message naming the source, the key and the offending value. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/config.h"
#include "models/llama.h"
#include "models/model.h"
#include "tests/testutil.h"

static void expect_refused(const char *json, int code, const char *must1, const char *must2)
{
    tri_gpt_config c;
    int rc = tri_gpt_config_parse(&c, json, "cfg.json");
    const char *msg = tri_error_message();
    cr_expect_eq(rc, code, "config %s: status %d, expected %d (%s)", json, rc, code, msg);
    cr_expect(strstr(msg, "cfg.json") != NULL, "message names the file: %s", msg);
    cr_expect(strstr(msg, must1) != NULL, "message names '%s': %s", must1, msg);
    if (must2)
        cr_expect(strstr(msg, must2) != NULL, "message names '%s': %s", must2, msg);
}

#define BASE "\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32"

Test(config, shipped_configs_load_with_published_sizes)
{
    struct { const char *file; int L, NH, C; double params_m; } want[] = {
        {"models/gpt2.json", 12, 12, 768, 124.4}, {"models/gpt2-medium.json", 24, 16, 1024, 354.8},
        {"models/gpt2-large.json", 36, 20, 1280, 774.0}, {"models/gpt2-xl.json", 48, 25, 1600, 1557.6},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        tri_gpt_config c;
        int rc = tri_gpt_config_load(&c, tu_source_path(want[i].file));
        cr_assert_eq(rc, TRI_OK, "%s: %s", want[i].file, tri_error_message());
        cr_expect(c.n_layer == want[i].L && c.n_head == want[i].NH && c.n_embd == want[i].C);
        cr_expect_eq(c.vocab_size, 50257);
        double m = (double)tri_gpt_num_params(&c) / 1e6;
        cr_expect(m > want[i].params_m - 0.1 && m < want[i].params_m + 0.1, "%s: %.1fM parameters",
                  want[i].file, m);
    }
    const char *small[] = {"models/gpt2-tiny-byte.json", "models/gpt2-tiny-bpe.json"};
    for (int i = 0; i < 2; i++) {
        tri_gpt_config c;
        cr_expect_eq(tri_gpt_config_load(&c, tu_source_path(small[i])), TRI_OK, "%s", tri_error_message());
    }
}

Test(config, padded_vocab_is_a_multiple_of_128_tp)
{
    cr_expect_eq(tri_gpt_padded_vocab(50257, 1), 50304);
    cr_expect_eq(tri_gpt_padded_vocab(50257, 2), 50432);
    cr_expect_eq(tri_gpt_padded_vocab(257, 1), 384);
    cr_expect_eq(tri_gpt_padded_vocab(256, 2), 256);
}

Test(config, missing_negative_and_non_integer_fields)
{
    expect_refused("{\"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32}",
                   TRI_EINVAL, "n_layer", "missing");
    expect_refused("{\"n_layer\": 2, \"n_head\": -4, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32}",
                   TRI_EINVAL, "n_head", "-4");
    expect_refused("{\"n_layer\": 2.5, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32}",
                   TRI_EINVAL, "n_layer", "2.5");
    expect_refused("{\"n_layer\": \"12\", \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32}",
                   TRI_EINVAL, "n_layer", "\"12\"");
    expect_refused("{\"n_layer\": 0, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32}",
                   TRI_EINVAL, "n_layer", "0");
    expect_refused("{\"n_layer\": 1e30, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32}",
                   TRI_EINVAL, "n_layer", NULL);
    expect_refused("{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 16777217, \"n_positions\": 32}",
                   TRI_EINVAL, "vocab_size", "16777217");
}

/* Vocabularies above uint16 (Llama 3's 128,256) are taken: token files hold uint32 ids for them. */
Test(config, vocabularies_above_65536_up_to_2_to_the_24)
{
    const int ok[] = {65536, 65537, 128256, 1 << 24};
    for (int i = 0; i < 4; i++) {
        char json[256];
        snprintf(json, sizeof json, "{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": %d, "
                 "\"n_positions\": 32}", ok[i]);
        tri_gpt_config c;
        cr_assert_eq(tri_gpt_config_parse(&c, json, "cfg.json"), TRI_OK, "%s", tri_error_message());
        cr_assert_eq(c.vocab_size, ok[i]);
    }
}

Test(config, inconsistent_and_unknown_keys)
{
    expect_refused("{\"n_layer\": 2, \"n_head\": 5, \"n_embd\": 64, \"vocab_size\": 100, \"n_positions\": 32}",
                   TRI_EINVAL, "n_embd", "n_head");
    expect_refused("{" BASE ", \"n_ctx\": 16}", TRI_EINVAL, "n_ctx", "16");
    expect_refused("{" BASE ", \"n_inner\": 100}", TRI_EINVAL, "n_inner", "100");
    expect_refused("{" BASE ", \"resid_pdrop\": 0.1}", TRI_EINVAL, "resid_pdrop", "0.1");
    expect_refused("{" BASE ", \"activation_function\": \"relu\"}", TRI_EINVAL, "activation_function", "relu");
    expect_refused("{" BASE ", \"n_layers\": 3}", TRI_EINVAL, "unknown key", "n_layers");
    expect_refused("{" BASE ", \"initializer_range\": -1}", TRI_EINVAL, "initializer_range", "-1");
    /* found by fuzzing: positive as a double, 0 as a float */
    expect_refused("{" BASE ", \"initializer_range\": 1e-300}", TRI_EINVAL, "initializer_range", "1e-300");
    expect_refused("{" BASE ", \"tie_word_embeddings\": false}", TRI_EINVAL, "tie_word_embeddings", "false");
}

Test(config, malformed_json_and_files)
{
    expect_refused("{" BASE, TRI_EINVAL, "invalid JSON", NULL);
    expect_refused("[1, 2]", TRI_EINVAL, "JSON object", NULL);
    expect_refused("", TRI_EINVAL, "invalid JSON", NULL);
    tri_gpt_config c;
    cr_expect_eq(tri_gpt_config_load(&c, "/nonexistent/x.json"), TRI_EIO);
    cr_expect(strstr(tri_error_message(), "/nonexistent/x.json") != NULL, "%s", tri_error_message());
}

Test(config, a_hugging_face_gpt2_config_json_loads)
{
    /* the keys of openai-community/gpt2's config.json with dropout set to 0 */
    const char *hf = "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"],"
                     "\"attn_pdrop\": 0.0, \"bos_token_id\": 50256, \"embd_pdrop\": 0.0, \"eos_token_id\": 50256,"
                     "\"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\","
                     "\"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12, \"n_layer\": 12, \"n_positions\": 1024,"
                     "\"resid_pdrop\": 0.0, \"summary_activation\": null, \"summary_first_dropout\": 0.1,"
                     "\"summary_proj_to_labels\": true, \"summary_type\": \"cls_index\", \"summary_use_proj\": true,"
                     "\"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}},"
                     "\"vocab_size\": 50257}";
    tri_gpt_config c;
    cr_expect_eq(tri_gpt_config_parse(&c, hf, "config.json"), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(c.n_layer, 12);
}

/* ---- the Llama family (models/llama_config.c) ---- */

static void expect_llama_refused(const char *json, const char *must1, const char *must2)
{
    tri_llama_config c;
    int rc = tri_llama_config_parse(&c, json, "cfg.json");
    const char *msg = tri_error_message();
    cr_expect_eq(rc, TRI_EINVAL, "config %s: status %d (%s)", json, rc, msg);
    cr_expect(strstr(msg, "cfg.json") != NULL, "message names the file: %s", msg);
    cr_expect(strstr(msg, must1) != NULL, "message names '%s': %s", must1, msg);
    if (must2)
        cr_expect(strstr(msg, must2) != NULL, "message names '%s': %s", must2, msg);
}

#define LLAMA "\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, " \
              "\"num_hidden_layers\": 2, \"vocab_size\": 100, \"max_position_embeddings\": 32"

/* The shipped Llama configs: the published parameter counts (SmolLM-135M 134.5M, Llama 3.2 1B 1.236B,
 * Llama 3.1 8B 8.030B, 70B 70.55B, 405B 405.85B; Qwen3-0.6B's model card gives 0.44B non-embedding,
 * 440.47M with the per-head q/k norms, plus the tied 151,936 x 1024 embedding) and their grouped-query
 * shapes. */
Test(config, shipped_llama_configs_have_the_published_sizes)
{
    struct { const char *file; int L, NH, NH_kv, HS; double params_b; } want[] = {
        {"models/smollm-135m.json", 30, 9, 3, 64, 0.1345}, {"models/llama-3.2-1b.json", 16, 32, 8, 64, 1.2358},
        {"models/llama-3.1-8b.json", 32, 32, 8, 128, 8.0303}, {"models/llama-3.1-70b.json", 80, 64, 8, 128, 70.554},
        {"models/llama-3.1-405b.json", 126, 128, 8, 128, 405.85}, {"models/qwen3-0.6b.json", 28, 16, 8, 128, 0.59605},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        tri_model m;
        int rc = tri_model_load(&m, tu_source_path(want[i].file));
        cr_assert_eq(rc, TRI_OK, "%s: %s", want[i].file, tri_error_message());
        const tri_llama_config *c = tri_llama_config_of(&m);
        cr_assert(c, "%s is not a llama", want[i].file);
        cr_expect(c->num_hidden_layers == want[i].L && c->num_attention_heads == want[i].NH &&
                  c->num_key_value_heads == want[i].NH_kv && c->head_dim == want[i].HS, "%s: shape", want[i].file);
        double b = (double)tri_llama_num_params(c) / 1e9;
        cr_expect(fabs(b / want[i].params_b - 1.0) < 1e-3, "%s: %.4fB parameters, published %.4fB", want[i].file, b,
                  want[i].params_b);
        tri_model_free(&m);
    }
}

Test(config, llama_defaults_and_rope_scaling)
{
    tri_llama_config c;
    cr_assert_eq(tri_llama_config_parse(&c, "{" LLAMA "}", "cfg.json"), TRI_OK, "%s", tri_error_message());
    cr_expect(c.num_key_value_heads == 4 && c.head_dim == 16 && !c.tie_word_embeddings && !c.rope_scaling.llama3);
    cr_expect(c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-6f && c.init_std == 0.02f, "LlamaConfig's defaults");
    cr_assert_eq(tri_llama_config_parse(&c, "{" LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                                        "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                        "\"original_max_position_embeddings\": 8192}}", "cfg.json"), TRI_OK, "%s",
                 tri_error_message());
    cr_expect(c.rope_scaling.llama3 && c.rope_scaling.factor == 8.0f && c.rope_scaling.original_max_positions == 8192);
}

Test(config, llama_refusals_name_the_key_and_value)
{
    expect_llama_refused("{" LLAMA ", \"hidden_act\": \"gelu\"}", "hidden_act", "\"gelu\"");
    expect_llama_refused("{" LLAMA ", \"num_key_value_heads\": 3}", "num_key_value_heads", "3");
    expect_llama_refused("{" LLAMA ", \"head_dim\": 15}", "head_dim", "15");
    expect_llama_refused("{" LLAMA ", \"sliding_window\": 4096}", "unknown key", "sliding_window");
    expect_llama_refused("{" LLAMA ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", "rope_scaling",
                         "yarn");
    expect_llama_refused("{" LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}", "rope_scaling",
                         "low_freq_factor");
    expect_llama_refused("{" LLAMA ", \"attention_dropout\": 0.1}", "attention_dropout", "0.1");
    expect_llama_refused("{\"model_type\": \"llama\", \"hidden_size\": 64}", "intermediate_size", "missing");
    expect_llama_refused("{" LLAMA ", \"tie_word_embeddings\": 1}", "tie_word_embeddings", "true or false");
    expect_llama_refused("{" LLAMA ", \"hidden_size\": 128}", "hidden_size", "more than once");
    expect_refused("{" BASE ", \"n_layer\": 4}", TRI_EINVAL, "n_layer", "more than once");
}

/* Qwen3 (model_type "qwen3"): the Llama keys with qk_norm on, Qwen3Config's sliding-window keys
 * accepted only as full attention, refused on a Llama; its JSON reads back as a Qwen3. */
Test(config, qwen3_keys_and_refusals)
{
    const char *base = "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
                       "\"num_hidden_layers\": 2, \"vocab_size\": 100, \"max_position_embeddings\": 32";
    char json[768];
    tri_model m;
    snprintf(json, sizeof json, "{\"model_type\": \"qwen3\", %s, \"head_dim\": 32, \"use_sliding_window\": false, "
             "\"sliding_window\": 4096, \"max_window_layers\": 28, \"layer_types\": [\"full_attention\", "
             "\"full_attention\"]}", base);
    cr_assert_eq(tri_model_parse(&m, json, "q.json"), TRI_OK, "%s", tri_error_message());
    const tri_llama_config *c = tri_llama_config_of(&m);
    cr_assert(c && c->qk_norm && c->head_dim == 32);
    char *back = NULL;
    cr_assert_eq(m.family->to_json(m.cfg, &back), TRI_OK, "%s", tri_error_message());
    tri_model m2;
    cr_assert_eq(tri_model_parse(&m2, back, "back.json"), TRI_OK, "%s", tri_error_message());
    cr_expect(tri_llama_config_of(&m2) && tri_llama_config_of(&m2)->qk_norm, "the JSON reads back as a Qwen3: %s",
              back);
    cr_expect_eq(m2.family->num_params(m2.cfg), m.family->num_params(m.cfg));
    free(back);
    tri_model_free(&m2);
    /* the config.json an export writes is a Qwen3Config as transformers writes it (no "mlp_bias", no
     * "pretraining_tp", full attention in every layer) and reads back as the same config */
    char *hf = NULL;
    cr_assert_eq(m.family->hf_config(m.cfg, "bfloat16", &hf), TRI_OK, "%s", tri_error_message());
    const char *want[] = {"\"model_type\": \"qwen3\"", "\"Qwen3ForCausalLM\"", "\"use_sliding_window\": false",
                          "\"sliding_window\": null", "\"max_window_layers\": 2,", "\"torch_dtype\": \"bfloat16\""};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(hf, want[i]), "%s not in the exported config.json: %s", want[i], hf);
    cr_expect(!strstr(hf, "mlp_bias") && !strstr(hf, "pretraining_tp"), "a Llama key in Qwen3's config.json: %s", hf);
    cr_assert_eq(tri_model_parse(&m2, hf, "config.json"), TRI_OK, "%s: %s", tri_error_message(), hf);
    tri_llama_config a = *c, b = *tri_llama_config_of(&m2);
    memset(a.name, 0, sizeof a.name);
    memset(b.name, 0, sizeof b.name);
    cr_expect(memcmp(&a, &b, sizeof a) == 0, "config.json does not read back as the config: %s", hf);
    free(hf);
    tri_model_free(&m2);
    tri_model_free(&m);
    struct { const char *type, *extra, *must; } bad[] = {
        {"qwen3", "\"use_sliding_window\": true", "\"use_sliding_window\" is true"},
        {"qwen3", "\"layer_types\": [\"full_attention\", \"sliding_attention\"]", "\"layer_types\"[1]"},
        {"qwen3", "\"hidden_act\": \"gelu\"", "Trident's Qwen3 computes only \"silu\""},
        {"llama", "\"use_sliding_window\": false", "unknown key \"use_sliding_window\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(json, sizeof json, "{\"model_type\": \"%s\", %s, %s}", bad[i].type, base, bad[i].extra);
        cr_expect_eq(tri_model_parse(&m, json, "bad.json"), TRI_EINVAL, "case %zu accepted", i);
        cr_expect(strstr(tri_error_message(), bad[i].must) && strstr(tri_error_message(), "bad.json"),
                  "case %zu: '%s' not in: %s", i, bad[i].must, tri_error_message());
    }
}
