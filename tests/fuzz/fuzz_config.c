/* tests/fuzz/fuzz_config.c - libFuzzer harness: the model config parser (models/config.c).
 *
 * Any bytes go to tri_gpt_config_parse (as NUL-terminated text, as tri_gpt_config_load hands it);
 * a config that parses must satisfy the documented invariants. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/config.h"

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
    free(text);
    return 0;
}
