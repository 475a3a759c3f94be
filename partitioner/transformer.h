/* partitioner/transformer.h - what the planner knows of a model and of a layout.
 *
 * The partitioner is pure planning (no device, no comm) and does not depend on models/: a GPT
 * config reaches it as these dimensions. A layout is the parallel sizes and batch shape; a stage
 * placement is the blocks one pipeline stage holds. */
#ifndef TRIDENT_PARTITIONER_TRANSFORMER_H
#define TRIDENT_PARTITIONER_TRANSFORMER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tri_transformer {
    int64_t n_layer, n_head, n_embd, vocab_size, n_positions;
} tri_transformer;

typedef struct tri_layout_shape {
    int tp, pp, dp;
    bool sequence_parallel;
    int64_t B, T;        /* micro-batch size, sequence length */
    int n_micro;         /* micro-batches per step and data-parallel replica */
} tri_layout_shape;

typedef struct tri_stage_place {
    int layer_start, layer_end;  /* blocks [start, end) */
    bool first, last;            /* holds the embedding / the LM head and loss */
} tri_stage_place;

/* The vocabulary padded to a multiple of 128 * tp (Megatron's --make-vocab-size-divisible-by 128). */
int64_t tri_padded_vocab(int64_t vocab_size, int tp);

#endif
