/* tests/test_mixtral.c - the MoE families of the Llama code: "mixtral" (MixtralForCausalLM) and the
 * "qwen3_moe" (models/llama_moe.c, llama_config.c).
 *  - config: the published shapes parse to their published parameter counts (Mixtral 8x7B
 *    46,702,792,704 = 46.7B; Qwen3-30B-A3B 30,532,122,624 = 30.5B with its 12,288 q/k-norm weights), Qwen3's sparse-layer rule, and bad input refused naming key and value;
 *  - parameters: the Hub names, the flat order that makes the experts' fused views contiguous (global
 *    order = flat order), Hugging Face's state_dict order (hf_position), the JSON round trip;
 *  - the model against tests/mixtral_torch_model.py (float64 PyTorch from Hugging Face's documented
 *    math): logits, LM loss, every gradient of LM + auxiliary loss, 10 AdamW steps; a Mixtral, and
 *    a Qwen3-MoE with dense and sparse layers mixed and norm_topk_prob false. Trident runs fp32,
 *    so each agrees within 1e-5 relative per tensor, test_llama_torch.c's bound: the routing is the
 *    same (top-2 of 4 with fp32 scores whose gaps are ~1e-2, rounding ~1e-7) and every sum is fp32;
 *  - layouts: pp 2 (1F1B) and dp 2 at ZeRO 1 and 3 within 1e-5 (gradients) and 1e-4 (4 AdamW steps)
 *    of one rank, and bit-identical to one rank in deterministic mode (pp 2, dp 2 ZeRO 0 and 3, full
 *    recomputation); tp 2 without --sequence-parallel refused naming the rule; --bf16 tracks fp32
 *    and its pp / dp layouts match one rank bit for bit (deterministic mode for dp). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/llama.h"
#include "tests/harness.h"
#include "tests/moe_harness.h"
#include "tests/testutil.h"
#include "tests/torch_compare.h"

static char *read_text(const char *path)
{
    FILE *f = fopen(tu_source_path(path), "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert(s && fread(s, 1, (size_t)n, f) == (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* ---- config ---- */

TestSuite(mixtral_config);

/* The config.json family f writes for cfg (as torch_dtype) reads back, with parse, as cfg (the name
 * aside, which the file does not carry); returns the text (malloc'd) for further checks. */
static char *expect_hf_config_reads_back(const tri_model_family *f, int (*parse)(void *, const char *, const char *),
                                         const tri_llama_config *cfg, const char *torch_dtype)
{
    char *json = NULL;
    void *back = NULL;
    cr_assert_eq(f->hf_config(cfg, torch_dtype, &json), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_model_config_new(f, parse, json, "config.json", &back), TRI_OK, "%s: %s", tri_error_message(),
                 json);
    tri_llama_config a = *cfg, b = *(const tri_llama_config *)back;
    memset(a.name, 0, sizeof a.name);
    memset(b.name, 0, sizeof b.name);
    cr_expect(memcmp(&a, &b, sizeof a) == 0, "config.json does not read back as the config: %s", json);
    free(back);
    return json;
}

Test(mixtral_config, published_shapes_count_their_parameters)
{
    char *json = read_text("models/mixtral-8x7b.json");
    tri_model m;
    cr_assert_eq(tri_model_parse(&m, json, "mixtral-8x7b"), TRI_OK, "%s", tri_error_message());
    const tri_llama_config *c = tri_llama_config_of(&m);
    cr_assert(c);
    cr_expect_eq(c->num_experts, 8);
    cr_expect_eq(c->num_experts_per_tok, 2);
    cr_expect_eq(c->moe_intermediate_size, 14336);
    cr_expect(c->norm_topk_prob);
    cr_expect_eq(m.family->num_params(c), 46702792704LL, "Mixtral 8x7B: %lld", (long long)m.family->num_params(c));
    for (int l = 0; l < 32; l++)
        cr_expect(tri_llama_layer_is_sparse(c, l));
    tri_model_free(&m);
    free(json);

    json = read_text("models/qwen3-30b-a3b.json");
    void *q = NULL;
    cr_assert_eq(tri_model_config_new(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse, json, "qwen3-30b-a3b", &q),
                 TRI_OK, "%s", tri_error_message());
    c = q;
    cr_expect_eq(c->num_experts, 128);
    cr_expect_eq(c->num_experts_per_tok, 8);
    cr_expect_eq(c->moe_intermediate_size, 768);
    cr_expect_eq(c->head_dim, 128);
    cr_expect(c->norm_topk_prob);
    cr_expect(c->qk_norm);
    cr_expect_eq(tri_llama_num_params(c), 30532122624LL, "Qwen3-30B-A3B: %lld", (long long)tri_llama_num_params(c));
    free(q);
    free(json);
    json = read_text("models/qwen3-235b-a22b.json");
    cr_assert_eq(tri_model_config_new(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse, json, "qwen3-235b", &q),
                 TRI_OK, "%s", tri_error_message());
    /* 235B: 94 layers of 128 experts of 3 x 4096 x 1536, published 235B total */
    cr_expect(fabs((double)tri_llama_num_params(q) / 1e9 - 235.1) < 0.1, "Qwen3-235B-A22B: %lld",
              (long long)tri_llama_num_params(q));
    free(q);
    free(json);
    json = read_text("models/moe-tiny-byte.json");
    cr_assert_eq(tri_model_parse(&m, json, "moe-tiny-byte"), TRI_OK, "%s", tri_error_message());
    tri_model_free(&m);
    free(json);
}

Test(mixtral_config, qwen3_sparse_layers_and_json_round_trip)
{
    const char *json = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "
                       "\"num_hidden_layers\": 6, \"vocab_size\": 100, \"max_position_embeddings\": 16, "
                       "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
                       "\"decoder_sparse_step\": 2, \"mlp_only_layers\": [3], \"norm_topk_prob\": false, "
                       "\"use_sliding_window\": false, \"sliding_window\": 4096, \"max_window_layers\": 6}";
    void *q = NULL;
    cr_assert_eq(tri_model_config_new(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse, json, "q.json", &q), TRI_OK,
                 "%s", tri_error_message());
    const tri_llama_config *c = q;
    /* (layer + 1) % 2 == 0 and not in mlp_only_layers: 1 and 5 */
    bool want[6] = {false, true, false, false, false, true};
    for (int l = 0; l < 6; l++)
        cr_expect_eq(tri_llama_layer_is_sparse(c, l), want[l], "layer %d", l);
    cr_expect(!c->norm_topk_prob);
    tri_param_spec *specs = NULL;
    int n = 0;
    tri_chunk_place all = {.layer_start = 0, .layer_end = 6, .first = true, .last = true, .n_slots = 1};
    cr_assert_eq(tri_llama_param_specs(c, 1, &all, &specs, &n), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(n, tri_llama_num_param_tensors(c));
    bool found = false;
    for (int i = 0; i < n; i++) {
        cr_expect_eq(specs[i].global_index, i, "%s at %d has global index %d", specs[i].name, i, specs[i].global_index);
        found |= strcmp(specs[i].name, "model.layers.5.mlp.experts.3.down_proj.weight") == 0;
        cr_expect(!strstr(specs[i].name, "model.layers.3.mlp.experts"), "layer 3 is dense: %s", specs[i].name);
    }
    cr_expect(found, "no model.layers.5.mlp.experts.3.down_proj.weight");
    free(specs);
    char *out = NULL;
    cr_assert_eq(tri_llama_config_to_json(c, &out), TRI_OK);
    void *back = NULL;
    cr_assert_eq(tri_model_config_new(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse, out, "q.json", &back), TRI_OK,
                 "%s: %s", tri_error_message(), out);
    cr_expect(memcmp(back, q, sizeof(tri_llama_config)) == 0, "the JSON round trip changed the config: %s", out);
    free(out);
    free(back);
    /* and through the Qwen3MoeConfig config.json an export writes */
    out = expect_hf_config_reads_back(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse, c, "bfloat16");
    cr_expect(strstr(out, "\"model_type\": \"qwen3_moe\"") && strstr(out, "\"Qwen3MoeForCausalLM\"") &&
                  strstr(out, "\"torch_dtype\": \"bfloat16\"") &&
                  strstr(out, "\"mlp_only_layers\": [\n    3\n  ]"),
              "%s", out);
    free(out);
    free(q);
}

Test(mixtral_config, bad_input_names_key_and_value)
{
    static const struct { const char *extra; const char *must; } cases[] = {
        {"\"num_local_experts\": 4, \"num_experts_per_tok\": 5", "\"num_experts_per_tok\" is 5, more than the 4 experts"},
        {"\"num_local_experts\": 0", "\"num_local_experts\" is 0"},
        {"\"num_local_experts\": 2000", "\"num_local_experts\" is 2000, above the 1024"},
        {"\"num_experts\": 8", "unknown key \"num_experts\""},
        {"\"router_jitter_noise\": 0.1", "\"router_jitter_noise\" is 0.1"},
        {"\"sliding_window\": 4096", "\"sliding_window\" is 4096"},
        {"\"router_aux_loss_coef\": -1", "\"router_aux_loss_coef\" is -1"},
        {"\"attention_bias\": true", "\"attention_bias\" is set"},
        {"\"mlp_bias\": true", "\"mlp_bias\" is true"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char json[512];
        snprintf(json, sizeof json, "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 64, "
                 "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 100, "
                 "\"max_position_embeddings\": 16, %s}", cases[i].extra);
        tri_model m;
        cr_expect_eq(tri_model_parse(&m, json, "bad.json"), TRI_EINVAL, "case %zu accepted", i);
        cr_expect(strstr(tri_error_message(), cases[i].must), "case %zu: '%s' not in: %s", i, cases[i].must,
                  tri_error_message());
    }
    void *q = NULL;
    cr_expect_eq(tri_model_config_new(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse,
                                      "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 64, "
                                      "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 100, "
                                      "\"max_position_embeddings\": 16, \"use_sliding_window\": true}", "q.json", &q),
                 TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "\"use_sliding_window\" is true"), "%s", tri_error_message());
    cr_expect_eq(tri_model_config_new(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse,
                                      "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 64, "
                                      "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 100, "
                                      "\"max_position_embeddings\": 16, \"mlp_only_layers\": [2]}", "q.json", &q),
                 TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "\"mlp_only_layers\" holds 2"), "%s", tri_error_message());
}

/* ---- parameters ---- */

#define TINY "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, " \
             "\"num_key_value_heads\": 2, \"num_hidden_layers\": %d, \"vocab_size\": 100, \"max_position_embeddings\": 16, " \
             "\"num_local_experts\": %d, \"num_experts_per_tok\": 2, \"output_router_logits\": true, " \
             "\"router_aux_loss_coef\": 0.02, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": %s}"

static void make_tiny(tri_model *m, int layers, int experts, bool tied)
{
    char json[768];
    snprintf(json, sizeof json, TINY, layers, experts, tied ? "true" : "false");
    cr_assert_eq(tri_model_parse(m, json, "tiny-mixtral"), TRI_OK, "%s", tri_error_message());
}

static const void *sort_cfg; /* the config by_hf_position reads (qsort has no context argument) */

static int by_hf_position(const void *a, const void *b)
{
    const void *cfg = sort_cfg;
    int64_t pa = tri_mixtral_family.hf_position(cfg, ((const tri_param_spec *)a)->name),
            pb = tri_mixtral_family.hf_position(cfg, ((const tri_param_spec *)b)->name);
    return (pa > pb) - (pa < pb);
}

Test(mixtral_config, hub_names_flat_order_and_state_dict_order)
{
    tri_model m;
    make_tiny(&m, 1, 2, false);
    tri_param_spec *specs = NULL;
    int n = 0;
    cr_assert_eq(tri_model_all_specs(&m, 1, &specs, &n), TRI_OK, "%s", tri_error_message());
    /* flat (and global) order: the router, expert 0's w1 and w3, expert 1's, then every w2 */
    static const char *const flat[] = {
        "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight", "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.block_sparse_moe.gate.weight", "model.layers.0.block_sparse_moe.experts.0.w1.weight",
        "model.layers.0.block_sparse_moe.experts.0.w3.weight", "model.layers.0.block_sparse_moe.experts.1.w1.weight",
        "model.layers.0.block_sparse_moe.experts.1.w3.weight", "model.layers.0.block_sparse_moe.experts.0.w2.weight",
        "model.layers.0.block_sparse_moe.experts.1.w2.weight", "model.norm.weight", "lm_head.weight"};
    /* MixtralForCausalLM's state_dict order */
    static const char *const hf[] = {
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.block_sparse_moe.gate.weight", "model.layers.0.block_sparse_moe.experts.0.w1.weight",
        "model.layers.0.block_sparse_moe.experts.0.w2.weight", "model.layers.0.block_sparse_moe.experts.0.w3.weight",
        "model.layers.0.block_sparse_moe.experts.1.w1.weight", "model.layers.0.block_sparse_moe.experts.1.w2.weight",
        "model.layers.0.block_sparse_moe.experts.1.w3.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"};
    cr_assert_eq(n, (int)(sizeof flat / sizeof *flat));
    for (int i = 0; i < n; i++)
        cr_expect_str_eq(specs[i].name, flat[i], "flat %d", i);
    cr_expect_eq(specs[8].shape[0], 64);   /* w1 (I, C) */
    cr_expect_eq(specs[12].shape[0], 64);  /* w2 (C, I) */
    cr_expect_eq(specs[7].shape[0], 2);    /* gate (E, C) */
    sort_cfg = m.cfg;
    qsort(specs, (size_t)n, sizeof *specs, by_hf_position);
    for (int i = 0; i < n; i++)
        cr_expect_str_eq(specs[i].name, hf[i], "state_dict %d", i);
    free(specs);
    free(expect_hf_config_reads_back(&tri_mixtral_family, tri_mixtral_config_parse, m.cfg, "float32"));
    tri_model_free(&m);
}

/* ---- the model against PyTorch ---- */

#define TOL 1e-5

/* m against tests/mixtral_torch_model.py: logits, LM loss, every gradient of LM + aux, 10 AdamW steps. */
static void torch_case(const tri_model *model, const char *scratch, tu_torch_errors *e)
{
    const tri_llama_config *k = model->cfg;
    double mask = 0;
    for (int i = 0; i < k->n_mlp_only_layers; i++)
        mask += (double)(1 << k->mlp_only_layers[i]);
    double numbers[] = {k->hidden_size, k->intermediate_size, k->num_attention_heads, k->num_key_value_heads,
                        k->head_dim, k->num_hidden_layers, k->vocab_size, k->rms_norm_eps, k->rope_theta,
                        k->tie_word_embeddings, k->attention_bias, k->mlp_bias, k->rope_scaling.llama3,
                        k->rope_scaling.factor, k->rope_scaling.low_freq_factor, k->rope_scaling.high_freq_factor,
                        (double)k->rope_scaling.original_max_positions, k->qk_norm, k->num_experts, k->num_experts_per_tok,
                        k->moe_intermediate_size, k->norm_topk_prob,
                        k->output_router_logits ? k->router_aux_loss_coef : 0.0, k->hf_style == TRI_HF_QWEN3_MOE,
                        k->decoder_sparse_step, mask, k->shared_expert_intermediate_size};
    tu_torch_case c = {.model = model, .script = "tests/mixtral_torch_model.py", .cfg = numbers,
                       .ncfg = sizeof numbers / sizeof *numbers, .scratch = scratch};
    cr_assert_eq(tu_torch_compare(&c, e), TRI_OK, "%s: %s", scratch, tri_error_message());
    cr_log_info("%s: logits %.3g, loss %.3g, gradients %.3g (%s), AdamW step losses %.3g (loss %.4f -> %.4f)",
                scratch, e->logits, e->loss, e->grads, e->worst_grad, e->steps, e->ref_first, e->ref_last);
    cr_expect_lt(e->logits, TOL, "%s: logits differ from PyTorch: %g", scratch, e->logits);
    cr_expect_lt(e->loss, TOL, "%s: the loss differs from PyTorch: %g", scratch, e->loss);
    cr_expect_lt(e->grads, TOL, "%s: the gradient of %s differs from PyTorch: %g", scratch, e->worst_grad, e->grads);
    cr_expect_lt(e->steps, TOL, "%s: a step's loss differs from PyTorch: %g", scratch, e->steps);
    cr_expect_lt(e->ref_last, e->ref_first - 0.05, "%s: the loss should fall over the steps", scratch);
}

/* Mixtral: 2 layers, 4 experts, top-2, untied head, the auxiliary loss on. */
Test(mixtral_torch, model_against_float64_reference, .timeout = 300)
{
    tri_model model;
    make_tiny(&model, 2, 4, false);
    tu_torch_errors e;
    torch_case(&model, "mixtral_torch", &e);
    tri_model_free(&model);
}

/* Qwen3-MoE (with Qwen3's per-head q/k norm): 3 layers, layer 1 dense by mlp_only_layers,
 * so sparse, dense, sparse in one chunk (the dense layers' intermediate_size 128, the experts' 32);
 * top-3 of 6 without renormalisation (norm_topk_prob false), untied head; with Megatron-Core's shared
 * expert (moe_shared_expert_intermediate_size 64, a Trident extension of the config). (With 4 layers the
 * reference's loss does not fall within the 10 steps; both sides agree on it to 2e-8.) */
Test(mixtral_torch, qwen3_moe_side_mixed_layers, .timeout = 300)
{
    const char *json = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "
                       "\"num_hidden_layers\": 3, \"vocab_size\": 300, \"max_position_embeddings\": 32, "
                       "\"num_experts\": 6, \"num_experts_per_tok\": 3, \"moe_intermediate_size\": 32, "
                       "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [1], \"norm_topk_prob\": false, "
                       "\"output_router_logits\": true, \"router_aux_loss_coef\": 0.05, \"rms_norm_eps\": 1e-6, "
                       "\"moe_shared_expert_intermediate_size\": 64, "
                       "\"tie_word_embeddings\": false}";
    tri_model model = {.family = &tri_qwen3_moe_family, .owns_cfg = true};
    snprintf(model.name, sizeof model.name, "tiny-qwen3-moe");
    cr_assert_eq(tri_model_config_new(&tri_qwen3_moe_family, tri_qwen3_moe_config_parse, json, "tiny-qwen3-moe",
                                      &model.cfg), TRI_OK, "%s", tri_error_message());
    tu_torch_errors e;
    torch_case(&model, "qwen3_moe_torch", &e);
    tri_model_free(&model);
}

/* ---- layouts: the MoE block inside a chunk, against one rank (tests/test_llama_layouts.c's pattern) ---- */

enum { B = 1, T = 8, GLOBAL = 8, STEPS = 4 };

static void run_layout(const tri_model *m, const tu_layout *l, tu_result *r, const int32_t *w)
{
    tu_layout lay = *l;
    lay.n_micro = lay.n_micro > 0 ? lay.n_micro : GLOBAL / (B * (l->dp > 0 ? l->dp : 1));
    cr_assert_eq(tu_run_model(m, B, T, &lay, w, STEPS, r), TRI_OK, "%s", tri_error_message());
}

/* The real vocabulary's rows of the embedding and head (the padding depends on tp). */
static int64_t compared(const tu_result *r, int i)
{
    bool vocab = strcmp(r->names[i], "model.embed_tokens.weight") == 0 || strcmp(r->names[i], "lm_head.weight") == 0;
    return vocab ? 100 * r->cols[i] : r->numel[i];
}

Test(mixtral_layouts, pipeline_and_data_parallel_match_one_rank, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, 4, 4, true);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 53);
    static const struct { const char *name; tu_layout l; } layouts[] = {
        {"pp2 1f1b", {.pp = 2}},
        {"dp2 zero1", {.dp = 2, .zero = 1}},
        {"dp2 zero3 overlap", {.dp = 2, .zero = 3, .overlap = true}},
        {"pp2 dp2 zero2 recompute full", {.pp = 2, .dp = 2, .zero = 2, .recompute = TRI_RECOMPUTE_FULL}},
    };
    tu_result ref, got;
    run_layout(&m, &(tu_layout){.tp = 1}, &ref, w);
    cr_expect_lt(ref.losses[STEPS - 1], ref.losses[0] - 0.02, "training should lower the loss (%g -> %g)",
                 ref.losses[0], ref.losses[STEPS - 1]);
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        run_layout(&m, &layouts[k].l, &got, w);
        const char *name = layouts[k].name;
        double loss = fabs(got.grad_loss - ref.grad_loss) / ref.grad_loss, worst = 0;
        cr_expect_lt(loss, 1e-5, "%s: loss %.9g vs one rank's %.9g", name, got.grad_loss, ref.grad_loss);
        cr_assert_eq(got.n, ref.n);
        for (int i = 0; i < ref.n; i++) {
            cr_assert_str_eq(got.names[i], ref.names[i]);
            double e = tu_tensor_rel(got.grads[i], ref.grads[i], compared(&ref, i));
            cr_expect_lt(e, 1e-5, "%s: gradient of %s differs from one rank's by %g", name, ref.names[i], e);
            worst = fmax(worst, e);
        }
        for (int s = 0; s < STEPS; s++)
            cr_expect_lt(fabs(got.losses[s] - ref.losses[s]) / ref.losses[s], 1e-4, "%s: step %d loss %g vs %g", name,
                         s + 1, got.losses[s], ref.losses[s]);
        cr_log_info("%s: loss diff %.2g, max gradient diff %.2g", name, loss, worst);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

Test(mixtral_layouts, deterministic_bit_identical, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, 4, 4, true);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 59);
    static const struct { const char *name; tu_layout l; } layouts[] = {
        {"pp2 1f1b", {.pp = 2, .deterministic = true}},
        {"dp2 zero0", {.dp = 2, .deterministic = true}},
        {"dp2 zero3", {.dp = 2, .zero = 3, .deterministic = true}},
        {"pp2 dp2 zero1 recompute full", {.pp = 2, .dp = 2, .zero = 1, .recompute = TRI_RECOMPUTE_FULL,
                                          .deterministic = true}},
    };
    tu_result ref, got;
    run_layout(&m, &(tu_layout){.deterministic = true}, &ref, w);
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        run_layout(&m, &layouts[k].l, &got, w);
        cr_expect(memcmp(ref.losses, got.losses, sizeof ref.losses) == 0, "%s: losses differ: %.17g vs %.17g",
                  layouts[k].name, ref.losses[STEPS - 1], got.losses[STEPS - 1]);
        cr_expect(memcmp(ref.norms, got.norms, sizeof ref.norms) == 0, "%s: gradient norms differ", layouts[k].name);
        for (int i = 0; i < ref.n; i++)
            cr_expect(memcmp(ref.weights[i], got.weights[i], (size_t)compared(&ref, i) * sizeof(float)) == 0,
                      "%s: final %s differs (relative %.2g)", layouts[k].name, ref.names[i],
                      tu_tensor_rel(ref.weights[i], got.weights[i], compared(&ref, i)));
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

/* The --moe-* flags reach the sparse layers: a capacity (factor 1, "probs" and "position" policies), the
 * z-loss and an explicit aux coefficient each change the first pass's loss or gradients from the
 * config's dropless run, and each is bit-identical to one rank at pp 2 x dp 2 in deterministic mode
 * (a micro-batch's routing, capacity and losses do not depend on the layout). */
Test(mixtral_layouts, moe_flags_change_the_model_and_keep_layouts_exact, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, 2, 4, true);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    static const struct { const char *name; tri_moe_run moe; } cases[] = {
        {"capacity 1 probs", {.capacity_factor = 1.0f}},
        {"capacity 1 position", {.capacity_factor = 1.0f, .drop_policy = TRI_MOE_DROP_POSITION}},
        {"z-loss 0.01", {.z_loss_coeff = 0.01f}},
        {"aux 0.5", {.aux_loss_coeff_set = true, .aux_loss_coeff = 0.5f}},
    };
    tu_result base, one, got;
    run_layout(&m, &(tu_layout){.deterministic = true}, &base, w);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        run_layout(&m, &(tu_layout){.deterministic = true, .moe = cases[k].moe}, &one, w);
        double diff = 0;
        for (int i = 0; i < base.n; i++)
            diff = fmax(diff, tu_tensor_rel(one.grads[i], base.grads[i], compared(&base, i)));
        cr_expect(one.grad_loss != base.grad_loss || diff > 1e-4, "%s: the first pass is the config's (loss %.9g, "
                  "gradients within %g)", cases[k].name, one.grad_loss, diff);
        run_layout(&m, &(tu_layout){.pp = 2, .dp = 2, .deterministic = true, .moe = cases[k].moe}, &got, w);
        cr_expect(memcmp(one.losses, got.losses, sizeof one.losses) == 0, "%s: pp2 dp2 losses differ: %.17g vs %.17g",
                  cases[k].name, one.losses[STEPS - 1], got.losses[STEPS - 1]);
        for (int i = 0; i < one.n; i++)
            cr_expect(memcmp(one.weights[i], got.weights[i], (size_t)compared(&one, i) * sizeof(float)) == 0,
                      "%s: pp2 dp2 final %s differs", cases[k].name, one.names[i]);
        cr_log_info("%s: loss %.6f (config's %.6f), gradients differ by up to %.3g", cases[k].name, one.grad_loss,
                    base.grad_loss, diff);
        tu_result_free(&one);
        tu_result_free(&got);
    }
    tu_result_free(&base);
    free(w);
    tri_model_free(&m);
}

/* tri_llama_moe_losses on a chunk whose routers are zero: every score is 1/E, ties give each token
 * experts 0..K-1, so each layer's aux loss is exactly its coefficient (coeff E / (K N^2) x K N x N / E)
 * and its z-loss coeff_z (ln E)^2; the stage's two layers sum them. */
typedef struct losses_case {
    double aux, z;
    int rc;
} losses_case;

static int losses_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)rank;
    (void)size;
    losses_case *lc = arg;
    tri_model m;
    make_tiny(&m, 2, 4, true);
    tu_layout l = {.moe = {.aux_loss_coeff_set = true, .aux_loss_coeff = 0.3f, .z_loss_coeff = 0.1f}};
    tu_moe_chunk mc;
    int rc = tu_moe_chunk_open(&mc, &m, 2, 8, &l, world);
    tri_llama *ll = mc.ll;
    if (!rc) rc = tri_chunk_forward(mc.chunk, 0, true, 1.0f / 16);
    if (!rc) rc = tri_llama_moe_losses(ll, 0, &lc->aux, &lc->z);
    tu_moe_chunk_close(&mc);
    tri_model_free(&m);
    lc->rc = rc;
    return rc;
}

Test(mixtral_layouts, moe_losses_of_a_uniform_router)
{
    losses_case lc = {0};
    cr_assert_eq(tri_run_thread_ranks(1, losses_rank, &lc), TRI_OK, "%s", tri_error_message());
    double want_aux = 2 * (double)0.3f, want_z = 2 * (double)0.1f * log(4.0) * log(4.0);
    cr_expect(fabs(lc.aux - want_aux) <= 1e-6 * want_aux, "aux %.9g, want %.9g", lc.aux, want_aux);
    cr_expect(fabs(lc.z - want_z) <= 1e-6 * want_z, "z %.9g, want %.9g", lc.z, want_z);
}

/* tp 2 needs --sequence-parallel (Megatron's rule; the layouts: tests/test_moe_tp.c) */
Test(mixtral_layouts, tensor_parallel_without_sequence_parallel_refused)
{
    tri_model m;
    make_tiny(&m, 2, 4, true);
    tri_chunk_place place = {.layer_start = 0, .layer_end = 2, .first = true, .last = true, .n_slots = 1};
    tri_train_layout run = {.tp = 2, .pp = 1, .dp = 1, .B = 1, .T = 8, .attention = TRI_ATTENTION_FLASH};
    cr_expect_eq(tri_llama_check(m.cfg, &run, &place), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--tensor-model-parallel-size 2 with a mixture-of-experts model "
                                          "(num_experts 4) needs --sequence-parallel"), "%s", tri_error_message());
    run.sequence_parallel = true;
    cr_expect_eq(tri_llama_check(m.cfg, &run, &place), TRI_OK, "%s", tri_error_message());
    run.sequence_parallel = false;
    run.tp = 1;
    run.precision = TRI_PRECISION_BF16; /* the MoE block runs bf16 (tests/test_moe_bf16.c) */
    cr_expect_eq(tri_llama_check(m.cfg, &run, &place), TRI_OK, "%s", tri_error_message());
    tri_model_free(&m);
}

/* --bf16 (bf16 activations and weight copies, fp32 router, gradients and master weights; layers/moe.h):
 * one rank tracks fp32 within bf16's rounding (tests/test_bf16.c's bounds: losses 2e-3 relative,
 * first gradients 5e-2 of each tensor's largest, and both differ from fp32's: bf16 is in effect); pp 2
 * splits the same computation (bit-identical without deterministic mode, as the dense bf16 layouts);
 * dp 2 ZeRO 1 and pp 2 x dp 2 ZeRO 3 with full recomputation are bit-identical to one rank in
 * deterministic mode (fixed-point gradient sums; a micro-batch's routing does not depend on the
 * layout); every bf16 parameter is its rounded master weight after each update. */
Test(mixtral_layouts, bf16_tracks_fp32_and_layouts_match_one_rank, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, 4, 4, true);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 61);
    tu_result fp, one, got;
    run_layout(&m, &(tu_layout){.tp = 1}, &fp, w);
    run_layout(&m, &(tu_layout){.bf16 = true}, &one, w);
    double loss = 0, grad = 0;
    for (int s = 0; s < STEPS; s++)
        loss = fmax(loss, fabs(one.losses[s] - fp.losses[s]) / fp.losses[s]);
    for (int i = 0; i < fp.n; i++)
        grad = fmax(grad, tu_tensor_rel(one.grads[i], fp.grads[i], compared(&fp, i)));
    cr_log_info("bf16 vs fp32: losses %.3g, first gradients %.3g", loss, grad);
    cr_expect_lt(loss, 2e-3, "bf16 losses differ from fp32's by %g", loss);
    cr_expect_gt(loss, 0.0, "bf16 gave the fp32 losses exactly: bf16 is not in effect");
    cr_expect_lt(grad, 5e-2, "bf16 first gradients differ from fp32's by %g", grad);
    cr_expect_gt(grad, 1e-4, "bf16 gradients within fp32 noise of fp32's: bf16 is not in effect");
    cr_expect_gt(one.bf16_checked, 0);
    cr_expect_eq(one.bf16_stale, 0, "%lld bf16 parameters are not their rounded master weight",
                 (long long)one.bf16_stale);
    tu_result_free(&one);
    tu_result_free(&fp);
    static const struct { const char *name; tu_layout l; tu_layout ref; } layouts[] = {
        {"bf16 pp2 1f1b", {.pp = 2, .bf16 = true}, {.bf16 = true}},
        {"bf16 dp2 zero1 deterministic", {.dp = 2, .zero = 1, .deterministic = true, .bf16 = true},
         {.deterministic = true, .bf16 = true}},
        {"bf16 pp2 dp2 zero3 recompute full deterministic",
         {.pp = 2, .dp = 2, .zero = 3, .recompute = TRI_RECOMPUTE_FULL, .deterministic = true, .bf16 = true},
         {.deterministic = true, .bf16 = true}},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        const char *name = layouts[k].name;
        run_layout(&m, &layouts[k].ref, &one, w);
        run_layout(&m, &layouts[k].l, &got, w);
        cr_expect(memcmp(one.losses, got.losses, sizeof one.losses) == 0, "%s: losses differ: %.17g vs %.17g", name,
                  one.losses[STEPS - 1], got.losses[STEPS - 1]);
        cr_expect(memcmp(one.norms, got.norms, sizeof one.norms) == 0, "%s: gradient norms differ", name);
        for (int i = 0; i < one.n; i++)
            cr_expect(memcmp(one.weights[i], got.weights[i], (size_t)compared(&one, i) * sizeof(float)) == 0,
                      "%s: final %s differs (relative %.2g)", name, one.names[i],
                      tu_tensor_rel(one.weights[i], got.weights[i], compared(&one, i)));
        cr_expect_eq(got.bf16_stale, 0, "%s: stale bf16 parameters", name);
        tu_result_free(&got);
        tu_result_free(&one);
    }
    free(w);
    tri_model_free(&m);
}
