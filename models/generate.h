/* models/generate.h - text generation from a model being trained: top-k sampling (Fan et al. 2018)
 * at a temperature, one token at a time, through the training layout's own pipeline.
 *
 * Every rank of the job calls tri_generate: each new token is one forward of the growing window
 * through the pipeline (models/session.h tri_model_rank_logits), the last stage samples it from the
 * logits and broadcasts it over the pipeline group, so every rank extends the same window. The
 * random stream is counter-based (engine/core/rng.h): a seed gives the same text in every layout
 * whose logits agree. Model work, not the CLI's: engine_train only prints what comes out. */
#ifndef TRIDENT_MODELS_GENERATE_H
#define TRIDENT_MODELS_GENERATE_H

#include <stdint.h>

#include "engine/core/rng.h"
#include "models/session.h"

typedef struct tri_generate_options {
    int length;          /* tokens to generate, at most the run's seq-length - 1 */
    int top_k;           /* candidates kept (>= 1; V when larger) */
    float temperature;   /* > 0: divides the logits */
    uint64_t seed;       /* the sampling stream's key */
    int32_t first;       /* the token the window starts with (an end-of-document token) */
} tri_generate_options;

/* Called on every rank with each token once every rank has it. */
typedef void (*tri_generate_emit)(void *ctx, int32_t id);

/* Top-k sampling of one id from logits (V floats): the k largest logits (ties: the lower id first),
 * softmax over them at temperature, one uniform draw from rng. TRI_ENOMEM. */
int tri_sample_top_k(const float *logits, int V, int k, float temperature, tri_rng *rng, int32_t *id);

/* Generates o->length tokens after o->first with session s's model (its layout's micro-batch rows:
 * row 0 is used), calling emit for each. Collective over the world. TRI_EINVAL for a length outside
 * [0, seq-length - 1], TRI_ENOMEM, and the pipeline's and comm's errors. */
int tri_generate(tri_session *s, const tri_generate_options *o, tri_generate_emit emit, void *ctx);

#endif
