/* models/config.h - GPT model configs in Hugging Face GPT-2 config.json keys.
 *
 * Required keys: n_layer, n_head, n_embd, vocab_size (at most TRI_GPT_MAX_VOCAB), n_positions
 * (positive integers, n_embd divisible by n_head). Optional: initializer_range (init std, default 0.02), n_ctx (must equal
 * n_positions), and the other keys of Hugging Face's GPT2Config, accepted where Trident computes
 * the same model (e.g. activation_function "gelu_new", layer_norm_epsilon 1e-5, dropout 0).
 * Anything else is refused, naming the file, key and value. */
#ifndef TRIDENT_MODELS_CONFIG_H
#define TRIDENT_MODELS_CONFIG_H

#include <stdint.h>

#include "partitioner/transformer.h"

/* The largest vocab_size a config may give: 2^24 (token files hold uint32 ids above 65,536). */
#define TRI_GPT_MAX_VOCAB (1 << 24)

typedef struct tri_gpt_config {
    int n_layer;       /* L */
    int n_head;        /* NH */
    int n_embd;        /* C */
    int vocab_size;    /* V (real tokens; the model pads it, see tri_gpt_padded_vocab) */
    int n_positions;   /* maximum sequence length */
    float init_std;    /* initializer_range */
    char name[128];    /* the file's base name without .json, for logs */
} tri_gpt_config;

/* Reads and validates a config file. TRI_EIO when it cannot be read, TRI_EINVAL with a message
 * naming the file, key and value otherwise. */
int tri_gpt_config_load(tri_gpt_config *cfg, const char *path);

/* Parses JSON text; `source` names it in messages. */
int tri_gpt_config_parse(void *cfg, const char *json, const char *source);

/* The model's architecture as a JSON object of Hugging Face keys (model_type, n_layer, n_head,
 * n_embd, vocab_size, n_positions) that tri_gpt_config_parse reads back: what a checkpoint records
 * and compares on resume (initializer_range is left out: it does not change a loaded model).
 * *json is malloc'd. TRI_ENOMEM. */
int tri_gpt_config_to_json(const void *cfg, char **json);

/* The vocabulary padded to a multiple of 128 * tp (Megatron's --make-vocab-size-divisible-by 128),
 * e.g. 50257 -> 50304 at tp = 1. The padding rows stay zero and are kept out of the loss. */
int64_t tri_gpt_padded_vocab(int64_t vocab_size, int tp);

/* The dimensions the partitioner plans with. */
tri_transformer tri_gpt_dims(const void *cfg);
/* What one GPT-2 block costs under layout l (partitioner/transformer.h tri_block_cost, models/block_cost.h). */
void tri_gpt_block_cost(const void *cfg, const tri_train_layout *l, tri_block_cost *out);

/* Number of parameters of the unpadded model (weights counted once, tied LM head not again). */
int64_t tri_gpt_num_params(const void *cfg);

#endif
