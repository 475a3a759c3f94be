/* tests/fuzz/fuzz_config.c - libFuzzer harness: the model config parsers (models/config.c for GPT-2,
 * models/llama_config.c for Llama).
 *
 * Any bytes go to both parsers (as NUL-terminated text, as tri_model_load hands it); a config that
 * parses must satisfy the documented invariants and read back the same from its own JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/config.h"
#include "models/llama.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    tri_gpt_config cfg;
    if (tri_gpt_config_parse(&cfg, text, "fuzz.json") == 0) {
        if (cfg.n_layer < 1 || cfg.n_head < 1 || cfg.n_embd < 1 || cfg.vocab_size < 1 || cfg.n_positions < 1 ||
            cfg.n_embd % cfg.n_head != 0 || !(cfg.init_std > 0.0f))
            abort();
        char *json = NULL;
        if (tri_gpt_config_to_json(&cfg, &json) == 0) {
            tri_gpt_config back;
            if (tri_gpt_config_parse(&back, json, "roundtrip.json") != 0 || back.n_layer != cfg.n_layer ||
                back.n_embd != cfg.n_embd || back.vocab_size != cfg.vocab_size)
                abort();
        }
        free(json);
        (void)tri_gpt_num_params(&cfg);
    }
    tri_llama_config l;
    if (tri_llama_config_parse(&l, text, "fuzz.json") == 0) {
        if (l.hidden_size < 1 || l.intermediate_size < 1 || l.num_attention_heads < 1 || l.num_key_value_heads < 1 ||
            l.num_attention_heads % l.num_key_value_heads != 0 || l.head_dim < 2 || l.head_dim % 2 != 0 ||
            l.num_hidden_layers < 1 || l.vocab_size < 1 || l.max_position_embeddings < 1 || !(l.rms_norm_eps > 0.0f) ||
            !(l.init_std > 0.0f) || !(l.rope_theta > 0.0))
            abort();
        char *json = NULL;
        if (tri_llama_config_to_json(&l, &json) == 0) {
            tri_llama_config back;
            if (tri_llama_config_parse(&back, json, "roundtrip.json") != 0 || back.hidden_size != l.hidden_size ||
                back.num_key_value_heads != l.num_key_value_heads || back.head_dim != l.head_dim ||
                back.rope_scaling.llama3 != l.rope_scaling.llama3 || back.tie_word_embeddings != l.tie_word_embeddings)
                abort();
        }
        free(json);
        (void)tri_llama_num_params(&l);
    }
    free(text);
    return 0;
}
