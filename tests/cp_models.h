/* tests/cp_models.h - the two small models the context-parallel training tests run (test_cp_layouts,
 * test_cp_compose), defined once: GPT-2 (tests/harness.h tu_tiny_config: 4 layers, 12 heads of 4,
 * n_embd 48, vocabulary 100) and a tiny Llama (4 layers, hidden 64, 4 query and 2 key/value heads,
 * vocabulary 100, an untied head), both with 512 positions (cp 4 needs T 512: chunks of 64 rows). */
#ifndef TRIDENT_TESTS_CP_MODELS_H
#define TRIDENT_TESTS_CP_MODELS_H

#include <stdbool.h>

#include "models/gpt.h"
#include "models/model.h"

/* Runs check(m) on the GPT-2 (llama false) or the tiny Llama; TRI_OK, or the Llama config's parse
 * error (check is then not called). */
int tu_on_cp_model(bool llama, void (*check)(const tri_model *m));

#endif
