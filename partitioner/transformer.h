/* partitioner/transformer.h - what the planner knows of a model and of a layout.
 *
 * The partitioner is pure planning (no device, no comm) and does not depend on models/. A model
 * reaches it in two parts:
 *   - its outline: the sizes every decoder shares (layers, hidden size, heads for the TP rule,
 *     vocabulary, sequence length) and its two ends (a learned position table or none, the final
 *     norm's kind, a tied or untied LM head);
 *   - its block, as its family states it (models/model.h `dims`, models/block_cost.h): what one block
 *     holds and does on one TP rank under a layout (tri_block_cost). The memory model, the stage
 *     split, the traffic and the time model compose these answers and never ask what shape the block
 *     has, so a new block shape (a mixture-of-experts block, ...) plans exactly by its family alone.
 *
 * A layout is the parallel sizes and batch shape; a stage placement is the blocks one pipeline stage
 * holds. */
#ifndef TRIDENT_PARTITIONER_TRANSFORMER_H
#define TRIDENT_PARTITIONER_TRANSFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/train/train_layout.h"

#define TRI_BLOCK_MAX_LINEAR 16

/* What one block holds and does on one TP rank, for one micro-batch of the layout (B sequences of T
 * tokens, tp, sequence parallelism, precision, attention backend, recomputation). */
typedef struct tri_block_cost {
    /* parameters */
    double params;        /* elements on one TP rank */
    double replicated;    /* of which every TP rank holds whole (norm weights, row-parallel biases):
                             their gradients are all-reduced over TP under sequence parallelism */
    double replicated_partial; /* of those, the ones each TP rank computes a part of the gradient of
                                  (Qwen3's q_norm, k_norm: its heads): all-reduced over TP always */
    int tensors;          /* the block's parameter tensors (the trainer's gradient-norm slots) */
    double expert_params; /* of params, the routed experts' (E / ep experts, each split over etp): their
                             gradients reduce and ZeRO shards them over the expert-data-parallel group
                             (edp = tp dp / (etp ep)), not over dp; 0 for a dense block */
    double buffers;       /* bytes of model state kept beside the parameters, fp32, with no gradient
                             or optimizer state (the expert bias under --moe-router-enable-expert-bias:
                             4 E a sparse layer, replicated on every rank) */
    double total_params;  /* the whole block's parameters, all ranks together */
    double active_params; /* of which one token goes through (a mixture of experts: attention, router,
                             K routed experts and the shared expert); = total_params for a dense block */
    /* model FLOPs of one forward over B x T tokens, the whole block (all TP ranks together) */
    double fwd_flops;     /* 2 per matmul weight and token, plus the attention core */
    double core_flops;    /* of which the attention core (QK^T, softmax x V): selective recomputation's */
    /* bytes on one TP rank */
    double kept;          /* activations one micro-batch keeps for the backward, under the layout's
                             recomputation and attention backend */
    double recompute;     /* the recomputation buffer, once per chunk (full: a block's activations;
                             selective: the unfused core's probabilities; else 0) */
    double work;          /* transients of one block's backward, once per chunk */
    double comm;          /* communication buffers, once per chunk (sequence parallelism's gathers) */
    /* the matmuls its forward runs on one TP rank, in order: per token, input and output widths */
    int n_linear;
    int64_t linear[TRI_BLOCK_MAX_LINEAR][2];
    /* TP collectives of one micro-batch, in elements of the activations' type, per kind
       (engine/comm/comm.h tri_comm_kind) */
    double tp_fwd[TRI_COMM_KINDS], tp_bwd[TRI_COMM_KINDS];
    /* expert-parallel collectives of one micro-batch on one rank, in elements sent, per kind: the
       all-to-alls of the token dispatch and combine (TRI_COMM_ALL_TO_ALL), and under etp > 1 the
       expert-tensor-parallel group's all-gather / reduce-scatter of the dispatched rows */
    double ep_fwd[TRI_COMM_KINDS], ep_bwd[TRI_COMM_KINDS];
} tri_block_cost;

/* The function a family states its block's costs with; cfg is the family's config. */
typedef void (*tri_block_cost_fn)(const void *cfg, const tri_train_layout *l, tri_block_cost *out);
/* The same for block `layer` (0-based) of a family whose blocks differ by layer (Qwen3-MoE's
 * decoder_sparse_step and mlp_only_layers: dense blocks among sparse ones). */
typedef void (*tri_block_cost_at_fn)(const void *cfg, const tri_train_layout *l, int layer, tri_block_cost *out);

typedef enum { TRI_NORM_LAYERNORM = 0, TRI_NORM_RMSNORM, TRI_NORM_NONE } tri_norm_kind;

typedef struct tri_transformer {
    int64_t n_layer, n_head, n_embd, vocab_size, n_positions;
    int64_t n_kv_head;          /* key/value heads (0: n_head): the TP rule of grouped-query attention */
    int64_t n_experts;          /* E of its mixture-of-experts blocks (0: dense): expert parallelism's rules */
    int64_t experts_per_tok;    /* K, the experts each token goes through */
    int64_t expert_ffn;         /* I, each routed expert's intermediate size (moe_intermediate_size; 0:
                                   dense or not stated): the search's expert-tensor-parallel sizes divide it */
    /* the ends */
    bool position_table;        /* a learned (n_positions, C) table on the first chunk (GPT-2); false:
                                   rotary positions, no table */
    tri_norm_kind final_norm;   /* LayerNorm (weight and bias, two statistics a row), RMSNorm (a weight,
                                   one statistic) or none */
    bool untied_head;           /* the LM head is a (V, C) matrix of its own */
    bool fused_attention_only;  /* the family runs the fused attention core only (no unfused form) */
    /* the block, as its family states it */
    tri_block_cost_fn block_cost;   /* the representative block (a sparse one when any is sparse) */
    tri_block_cost_at_fn block_cost_at; /* NULL: every block is block_cost's */
    const void *cfg;            /* what block_cost reads (borrowed: the model's config) */
    char block_text[96];        /* what a log adds after the heads, e.g. " (8 key/value), head size 128,
                                   SwiGLU 14336"; "" for GPT-2's */
} tri_transformer;

/* The block's costs under layout l (m->block_cost). */
tri_block_cost tri_transformer_block(const tri_transformer *m, const tri_train_layout *l);

/* Block `layer`'s costs (m->block_cost_at, else m->block_cost). */
tri_block_cost tri_transformer_block_at(const tri_transformer *m, const tri_train_layout *l, int layer);

/* Blocks [start, end) together: the sums of their parameters, tensors, FLOPs, kept activations and
 * traffic; the largest of the once-per-chunk buffers (recompute, work, comm); linear is the first
 * block's. */
tri_block_cost tri_transformer_blocks(const tri_transformer *m, const tri_train_layout *l, int start, int end);

/* The whole model's parameters, all ranks together: *total and *active (what one token goes
 * through: model FLOPs are 6 x active x tokens plus attention); the ends counted once (a tied head
 * once). */
void tri_transformer_params(const tri_transformer *m, double *total, double *active);

/* Elements of the position table (0 with rotary positions) and of the final norm (2 C, C or 0); the
 * final norm's fp32 statistics a row (2, 1 or 0), which is also its count of tensors. */
double tri_position_params(const tri_transformer *m);
double tri_final_norm_params(const tri_transformer *m);
int tri_final_norm_stats(const tri_transformer *m);

/* The whole model's parameter tensors (the trainer's gradient-norm slots): the blocks' and the ends'. */
int64_t tri_transformer_tensors(const tri_transformer *m);

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

/* The layout a shape-only caller (the stage split, the TP traffic) asks the block with: the shape's
 * sizes, fp32, the unfused attention, no recomputation. */
tri_train_layout tri_shape_layout(const tri_layout_shape *s);

/* The vocabulary padded to a multiple of 128 * tp (Megatron's --make-vocab-size-divisible-by 128). */
int64_t tri_padded_vocab(int64_t vocab_size, int tp);

#endif
