/* tests/gpt_outline.h - a GPT-2-shaped model for the partitioner's tests, given by its sizes alone.
 *
 * The partitioner plans from a model's outline and its family's answer for its block
 * (partitioner/transformer.h); these build both for a GPT-2 config of the given sizes, as the GPT-2
 * family does (models/config.c tri_gpt_dims; tests/test_block_cost.c checks the two agree). */
#ifndef TRIDENT_TESTS_GPT_OUTLINE_H
#define TRIDENT_TESTS_GPT_OUTLINE_H

#include "models/config.h"
#include "partitioner/transformer.h"

/* A file-scope `static const tri_transformer NAME` (and its config NAME##_config). */
#define TU_GPT_MODEL(NAME, L, NH, C, V, NP)                                                                       \
    static const tri_gpt_config NAME##_config = {.n_layer = (L), .n_head = (NH), .n_embd = (C), .vocab_size = (V), \
                                                 .n_positions = (NP), .init_std = 0.02f};                          \
    static const tri_transformer NAME = {.n_layer = (L), .n_head = (NH), .n_embd = (C), .vocab_size = (V),        \
                                         .n_positions = (NP), .position_table = true,                             \
                                         .final_norm = TRI_NORM_LAYERNORM, .block_cost = tri_gpt_block_cost,       \
                                         .cfg = &NAME##_config}

/* The same at run time: *cfg (which the result borrows) filled with the sizes. */
static inline tri_transformer tu_gpt(tri_gpt_config *cfg, int L, int NH, int C, int V, int NP)
{
    *cfg = (tri_gpt_config){.n_layer = L, .n_head = NH, .n_embd = C, .vocab_size = V, .n_positions = NP,
                            .init_std = 0.02f};
    return tri_gpt_dims(cfg);
}

#endif
