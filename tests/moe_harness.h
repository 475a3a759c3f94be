/* tests/moe_harness.h - a one-chunk MoE model with its routers zeroed, for tests whose figures are
 * known in closed form: with a zero router every token's scores are equal, so the top-k picks experts
 * 0..K-1 (ties to the lower index) with equal weights, the auxiliary loss equals its coefficient and
 * the z-loss coeff (ln E)^2 per layer. Shared by test_mixtral, test_moe_stats and test_moe_expert_bias. */
#ifndef TRIDENT_TESTS_MOE_HARNESS_H
#define TRIDENT_TESTS_MOE_HARNESS_H

#include "models/llama.h"
#include "tests/harness.h"

typedef struct tu_moe_chunk {
    tri_device *dev;       /* a 1-thread CPU device */
    void *model;           /* the tri_llama */
    tri_llama *ll;
    tri_chunk *chunk;
    tri_train_layout run;
} tu_moe_chunk;

/* Builds one chunk of every layer of m (a Llama-code MoE family) for micro-batch B x T under layout l,
 * with world as its TP and DP comm (size 1), loads the windows (i * 7) % 100 into slot 0, runs one
 * training forward (dloss 1 / (B T)), which binds the blocks' views, and zeroes every sparse layer's
 * router. On failure everything built is released (tu_moe_chunk_close is still safe). */
int tu_moe_chunk_open(tu_moe_chunk *c, const tri_model *m, int B, int T, const tu_layout *l, tri_comm *world);
void tu_moe_chunk_close(tu_moe_chunk *c);

#endif
