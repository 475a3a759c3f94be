/* partitioner/transformer.h - what the planner knows of a model and of a layout.
 *
 * The partitioner is pure planning (no device, no comm) and does not depend on models/: a GPT
 * config reaches it as these dimensions. A layout is the parallel sizes and batch shape; a stage
 * placement is the blocks one pipeline stage holds. */
#ifndef TRIDENT_PARTITIONER_TRANSFORMER_H
#define TRIDENT_PARTITIONER_TRANSFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tri_transformer {
    int64_t n_layer, n_head, n_embd, vocab_size, n_positions;
    /* A Llama-shaped block (models/llama.h); zero / false is GPT-2's. */
    int64_t n_kv_head;    /* key/value heads (0: n_head) */
    int64_t head_dim;     /* 0: n_embd / n_head */
    int64_t ffn_hidden;   /* MLP width (0: 4 n_embd) */
    bool gated_mlp;       /* SwiGLU: gate, up and down matrices, 3 C F weights (else 2 C F) */
    bool llama_block;     /* RMSNorm (no norm biases), no linear biases, rotary positions (no position
                             table) */
    bool untied_head;     /* the LM head is a (V, C) matrix of its own */
} tri_transformer;

/* The block's widths (the GPT-2 defaults filled in): the head size, Q = n_head head_dim (the
 * attention's width), KV = n_kv_head head_dim, F = ffn_hidden. */
int64_t tri_transformer_head_dim(const tri_transformer *m);
int64_t tri_transformer_q_width(const tri_transformer *m);
int64_t tri_transformer_kv_width(const tri_transformer *m);
int64_t tri_transformer_ffn(const tri_transformer *m);

/* One TP rank's key/value width: KV / tp, or one head's when tp > n_kv_head (a replica). */
double tri_transformer_kv_local(const tri_transformer *m, int tp);

/* Weights of one block's matmuls: C (Q + 2 KV) + Q C + (3 or 2) C F; GPT-2: 12 C^2. */
double tri_block_matmul_params(const tri_transformer *m);

/* Parameter elements of one block on one of tp ranks: its share of the matmuls plus what every rank
 * holds or splits of the norms and biases (GPT-2: (12 C^2 + 7 C) / tp + 6 C; Llama: the matmuls'
 * shares, with a whole key/value head when they are shared, + 2 C; biases left out). */
double tri_block_params_local(const tri_transformer *m, int tp);

/* What a log adds after the heads for a Llama block: " (8 key/value), head size 128, SwiGLU 14336";
 * "" for GPT-2's. */
void tri_transformer_block_text(const tri_transformer *m, char *buf, size_t cap);

/* Elements of the position table (0 with rotary positions) and of the final norm (2 C, or C). */
double tri_position_params(const tri_transformer *m);
double tri_final_norm_params(const tri_transformer *m);

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
