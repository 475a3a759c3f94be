/* tests/cp_models.c - the context-parallel tests' two small models (see cp_models.h). */
#include "tests/cp_models.h"

#include "engine/core/status.h"
#include "tests/harness.h"

static const char *const LLAMA_JSON =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"num_hidden_layers\": 4, \"vocab_size\": 100, \"max_position_embeddings\": 512, "
    "\"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": false}";

int tu_on_cp_model(bool llama, void (*check)(const tri_model *m))
{
    if (!llama) {
        tri_gpt_config cfg = tu_tiny_config(); /* the model keeps a pointer to it */
        cfg.n_positions = 512;
        tri_model m = tri_gpt_model(&cfg);
        check(&m);
        return TRI_OK;
    }
    tri_model m;
    int rc = tri_model_parse(&m, LLAMA_JSON, "tiny-llama");
    if (rc)
        return rc;
    check(&m);
    tri_model_free(&m);
    return TRI_OK;
}
