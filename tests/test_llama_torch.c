/* tests/test_llama_torch.c - the whole Llama model against PyTorch (Debian's python3-torch).
 *
 * A small Llama is built by Trident's Llama family on one rank; its config, initial weights (under
 * their Hugging Face names) and token batches are written to a file, tests/llama_torch_model.py
 * rebuilds the same model from them with torch in float64 (from Hugging Face's documented
 * LlamaForCausalLM math) and returns the logits, the loss, every parameter's gradient and the losses
 * of 10 AdamW steps (gradient clipping, warm-up + cosine learning rate): tests/torch_compare.h.
 * Trident runs in fp32, so
 * what differs is Trident's rounding; each must agree within 1e-5 relative (per tensor:
 * max |a - b| / max |b|), the bound for the CPU. The three cases cover grouped-query,
 * multi-query and multi-head attention, tied and untied heads, a head size that is not
 * hidden_size / num_attention_heads (24), Llama 3's rope_scaling, and attention and MLP biases; a
 * fourth is a Qwen3 (per-head q_norm and k_norm: their gradients compared too). */
#include <criterion/criterion.h>
#include <math.h>

#include "engine/core/status.h"
#include "models/llama.h"
#include "tests/torch_compare.h"

#define TOL 1e-5

static void run_config(const char *name, const char *json)
{
    tri_model model;
    cr_assert_eq(tri_model_parse(&model, json, name), TRI_OK, "%s", tri_error_message());
    const tri_llama_config *k = tri_llama_config_of(&model);
    cr_assert(k);
    /* the config's numbers, as tests/llama_torch_model.py reads them */
    double numbers[] = {k->hidden_size, k->intermediate_size, k->num_attention_heads, k->num_key_value_heads,
                        k->head_dim, k->num_hidden_layers, k->vocab_size, k->rms_norm_eps, k->rope_theta,
                        k->tie_word_embeddings, k->attention_bias, k->mlp_bias, k->rope_scaling.llama3,
                        k->rope_scaling.factor, k->rope_scaling.low_freq_factor, k->rope_scaling.high_freq_factor,
                        (double)k->rope_scaling.original_max_positions, k->qk_norm};
    char scratch[96];
    snprintf(scratch, sizeof scratch, "llama_torch_%s", name); /* one per case: Criterion may run them at once */
    tu_torch_case c = {.model = &model, .script = "tests/llama_torch_model.py", .cfg = numbers,
                       .ncfg = sizeof numbers / sizeof *numbers, .scratch = scratch};
    tu_torch_errors e;
    cr_assert_eq(tu_torch_compare(&c, &e), TRI_OK, "%s: %s", name, tri_error_message());
    cr_log_info("%s: logits %.3g, loss %.3g, gradients %.3g (%s), AdamW step losses %.3g (loss %.4f -> %.4f, "
                "ln V = %.4f)", name, e.logits, e.loss, e.grads, e.worst_grad, e.steps, e.ref_first, e.ref_last,
                log((double)k->vocab_size));
    cr_expect_lt(e.logits, TOL, "%s: logits differ from PyTorch: %g", name, e.logits);
    cr_expect_lt(e.loss, TOL, "%s: the loss differs from PyTorch: %g", name, e.loss);
    cr_expect_lt(e.grads, TOL, "%s: the gradient of %s differs from PyTorch: %g", name, e.worst_grad, e.grads);
    cr_expect_lt(e.steps, TOL, "%s: a step's loss differs from PyTorch: %g", name, e.steps);
    cr_expect_lt(e.ref_last, e.ref_first - 0.05, "%s: the loss should fall over the steps", name);
    tri_model_free(&model);
}

TestSuite(llama_torch);

/* Grouped-query attention (4 query heads, 2 key/value heads), tied head, Llama 3's rope_scaling with
 * an original context of 8 so that T 16 sees scaled, interpolated and kept frequencies. */
Test(llama_torch, gqa_tied_llama3_rope_scaling, .timeout = 300)
{
    run_config("gqa-tied", "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
               "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 300, "
               "\"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, "
               "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
               "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8}, \"tie_word_embeddings\": true}");
}

/* Multi-query attention (one key/value head), untied head, head_dim 24 (not 64 / 4), theta 500000. */
Test(llama_torch, mqa_untied_head_dim_24, .timeout = 300)
{
    run_config("mqa-untied", "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 192, "
               "\"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 24, \"num_hidden_layers\": 2, "
               "\"vocab_size\": 300, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-6, "
               "\"rope_theta\": 500000.0, \"tie_word_embeddings\": false}");
}

/* Multi-head attention (as many key/value heads as query heads), untied, with attention and MLP
 * biases. */
Test(llama_torch, mha_untied_biases, .timeout = 300)
{
    run_config("mha-biases", "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
               "\"num_attention_heads\": 4, \"num_hidden_layers\": 3, \"vocab_size\": 300, "
               "\"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-5, \"attention_bias\": true, "
               "\"mlp_bias\": true, \"tie_word_embeddings\": false}");
}

/* Qwen3 (model_type "qwen3"): the per-head q/k RMSNorm, grouped-query, head_dim 24 (not 64 / 4), tied,
 * Qwen3's theta 1e6 and its full-attention sliding-window keys. */
Test(llama_torch, qwen3_qk_norm_gqa_head_dim_24, .timeout = 300)
{
    run_config("qwen3", "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 128, "
               "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 24, \"num_hidden_layers\": 2, "
               "\"vocab_size\": 300, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-6, "
               "\"rope_theta\": 1000000.0, \"tie_word_embeddings\": true, \"use_sliding_window\": false, "
               "\"sliding_window\": null, \"max_window_layers\": 2}");
}
