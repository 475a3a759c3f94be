/* models/model_chunk.h - a decoder-only transformer's chunk (engine/train/chunk.h), whatever its
 * block: what every family's chunk shares, and the helpers its parameter tables use.
 *
 * GPT-2 (models/gpt.c) and Llama (models/llama.c) are one shape of chunk: the token embedding on the
 * first stage, then blocks on the residual stream, then on the last stage the final norm and the
 * vocab-parallel LM head with its fused loss (llm.c's gpt2_forward and gpt2_backward). tri_decoder
 * is that shape: the chunk, its sizes, its passes, what a micro-batch keeps around the blocks, the
 * scratch the blocks share and the tied embedding's private accumulator. A family puts a tri_decoder
 * first in its struct and writes the rest: its parameters (which units hold the embedding, blocks,
 * norm and head), its blocks' buffers, and the passes' compute (its block, norm and embedding). */
#ifndef TRIDENT_MODELS_MODEL_CHUNK_H
#define TRIDENT_MODELS_MODEL_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/device/device.h"
#include "engine/train/chunk.h"
#include "engine/train/param.h"
#include "layers/cp_attention.h"
#include "layers/cross_entropy.h"
#include "layers/parallel.h"
#include "partitioner/transformer.h"

/* A growing list of parameter descriptions, as a family's param_specs builds it: each added one
 * belongs to unit `unit` (the caller advances it between units). */
typedef struct tri_spec_list {
    tri_param_spec *v;
    int n, cap;
    int unit;
} tri_spec_list;

/* Appends a description (name, global shape, TP split dimension or -1, weight decay, initialisation
 * and its std; init_rows = shape[0]; everything else zero) and returns it, or NULL when out of
 * memory (the list stays valid: free l->v). */
tri_param_spec *tri_spec_list_add(tri_spec_list *l, const char *name, int ndim, const int64_t *shape, int split,
                                  bool decay, tri_init_kind init, float std);

/* ---- the decoder chunk ---- */

/* Its passes (tri_pass.kind), declared by tri_decoder_build: the training and the evaluation
 * forward (embedding, blocks, head), the backward (head or the received gradient, blocks in
 * reverse, embedding) and, with the private accumulator, the step's finish. The LM head's
 * backward is fused into its loss, so the head pass writes the head's gradient in the forward. */
typedef enum {
    TRI_DECODER_EMBEDDING = 0,       /* first stage: x_in from the tokens */
    TRI_DECODER_BLOCK,               /* block p->index of the stage */
    TRI_DECODER_HEAD,                /* last stage: final norm, LM head and loss (and, training, their
                                        backward into dlnf and the head's gradient) */
    TRI_DECODER_HEAD_BACKWARD,       /* last stage: the final norm's backward, from dlnf into dres */
    TRI_DECODER_GRAD_FROM_NEXT,      /* other stages: dres = the gradient received */
    TRI_DECODER_BLOCK_BACKWARD,      /* block p->index: dres from d(its output) to d(its input) */
    TRI_DECODER_EMBEDDING_BACKWARD,  /* first stage: the embedding's gradient from dres */
    TRI_DECODER_TIED_GRAD,           /* finish: the private accumulator added to the embedding's gradient */
} tri_decoder_pass;

/* What one micro-batch keeps around the blocks (the family keeps its blocks' and norm's). */
typedef struct tri_decoder_slot {
    tri_tensor tokens, targets;      /* (N) i32 */
    tri_tensor x_in;                 /* (N_l, C) the stage's input */
    tri_tensor out;                  /* (N_l, C) the stage's output: its last block's (a view), or x_in */
    tri_tensor dlnf;                 /* last stage: (N_l, C) the final norm's output gradient */
    tri_tensor losses;               /* last stage: (N) f32 per-token losses */
    tri_tensor grad_out;             /* other stages: (N_l, C) the gradient received from the next */
    tri_tensor dres;                 /* (N_l, C) the residual stream's gradient; ends as the one sent back */
} tri_decoder_slot;

typedef struct tri_decoder {
    tri_chunk chunk;                 /* the engine's side: layout, arena, ZeRO, the passes */
    bool has_chunk;
    const char *family;              /* in messages, e.g. "gpt" */
    const tri_train_layout *run;     /* the run's layout: &chunk.run */
    tri_chunk_place opt;             /* this chunk's place */
    tri_device *dev;                 /* NULL: planned only */
    tri_tp tp;
    int64_t C;                       /* the residual stream's width */
    int64_t vocab_size, Vp, V_l, vocab_start;  /* real vocab, padded, its shard, the shard's first id */
    int64_t N, N_l;
    tri_seq seq;                     /* the whole sequence and this rank's chunks of it (context parallelism:
                                        N = B T_l rows, T_l = seq.T / seq.cp) */
    tri_cp cp;                       /* the attention's cp group (layers/cp_attention.h; cp 1: none) */
    int L_l;                         /* blocks on this stage */
    /* units (-1: not on this stage), which the family's map of its parameters sets: the token
     * embedding and a position table (first stage), the first block, the final norm and the LM head
     * (last stage: its own, the tied embedding's copy, or the embedding's unit on a stage holding both) */
    int unit_embed, unit_pos, unit_block0, unit_norm, unit_head;
    tri_tensor **wslot, **gslot;     /* per parameter of the layout: its view in the family's weights and gradients */
    bool private_embed;              /* lm_dembed is used (tied head and embedding on this stage at
                                        ZeRO 0-1, not deterministic) */
    tri_tensor lm_dembed;            /* (V_l, C) f32: the LM head's share of the embedding's gradient,
                                        added after the step's last micro-batch (TRI_DECODER_TIED_GRAD),
                                        as the embedding group's all-reduce adds two stages' shares;
                                        ZeRO 2-3 reduce that share from the embedding's bucket after
                                        each forward instead, and deterministic mode sums every pass's
                                        bucket exactly anyway */
    tri_decoder_slot *slots;
    tri_tensor tmp, dln;             /* (N_l, C) scratch of every block */
    tri_tensor full_a, full_b;       /* (N, C) sequence parallelism's gathered rows (else absent) */
    tri_lm_head_scratch ls;
    const struct tri_decoder_compute *compute;         /* the family's (tri_decoder_shape) */
    const tri_tensor *embed, *embed_grad, *pos, *pos_grad;
    void **owned;                    /* the family's tables from tri_decoder_calloc, freed with d */
    int n_owned;
} tri_decoder;

/* A decoder family's compute: the passes tri_decoder_run hands to it (self: the family's model,
 * whose first member is its tri_decoder). Block l and the head of the micro-batch in slot. */
typedef struct tri_decoder_compute {
    int (*block_forward)(void *self, int l, int slot);
    int (*block_backward)(void *self, int l, int slot);   /* slot's dres: d res3 in, d x out */
    int (*head_forward)(void *self, int slot, bool train, float dloss);
    int (*head_backward)(void *self, int slot);
} tri_decoder_compute;

/* What a family tells tri_decoder_begin. */
typedef struct tri_decoder_shape {
    const char *family;              /* in messages */
    int64_t C, vocab_size;
    bool tied_embedding;             /* the LM head is the token embedding */
    int n_global_params;             /* the whole model's parameter tensors */
    const tri_decoder_compute *compute;
    /* the family's views (bound as units are, so read at each pass) of the token embedding and the
     * position table (NULL: none, rotary positions) and of their gradients */
    const tri_tensor *embed, *embed_grad, *pos, *pos_grad;
} tri_decoder_shape;

/* The checks every decoder needs: the layout rules that involve the model (dims: its sizes; the rules
 * are the layout validator's, partitioner/constraints.h tri_layout_check_model, stated once), the
 * stage's layers within n_layer, its slots, and B*T*widest (the widest row a buffer holds, divided
 * over tp) within BLAS's int dimensions. TRI_EINVAL naming the flag, key and values (name: the
 * model's); where the config alone is too wide (not one token fits), the config's keys that make the
 * widest row (widest_keys, e.g. "4 x n_embd") instead of the batch flags. */
int tri_decoder_check(const tri_train_layout *run, const tri_chunk_place *opt, const char *name,
                      const tri_transformer *dims, int64_t widest, const char *widest_keys);

/* Step 1 of a family's create: the sizes, the parameter layout of specs (the family's descriptions
 * of this chunk, n of them), the chunk begun on it (tri_chunk_begin), and the slots and parameter
 * view tables allocated; units all -1. d must be zeroed. TRI_EINTERNAL for a TP group of another
 * size than the layout's, the layout's errors, TRI_ENOMEM. */
int tri_decoder_begin(tri_decoder *d, const tri_decoder_shape *shape, const tri_param_spec *specs, int n,
                      const tri_train_layout *run, const tri_chunk_place *opt, tri_device *dev, tri_comm *tp_comm);

/* Step 2, once the family has set the units: declares the passes and builds the chunk
 * (tri_chunk_build) with the family's model (self: its struct, whose first member is d; its
 * take_buffers and run; its bind, or NULL for tri_decoder_bind), completed with the decoder's
 * load_batch, buffer and zero_private. */
int tri_decoder_build(tri_decoder *d, tri_chunk_model model, tri_device *dev, tri_comm *dp_comm);

/* Frees what begin, build and tri_decoder_calloc made (d itself is the family's). */
void tri_decoder_destroy(tri_decoder *d);

/* n zeroed elements of size bytes that d owns and frees in tri_decoder_destroy: a family's tables
 * (its blocks' weight and gradient views, each slot's blocks). NULL when out of memory. */
void *tri_decoder_calloc(tri_decoder *d, int64_t n, size_t size);

/* ---- a family's chunk: its struct, whose first member is its tri_decoder ---- */

/* The family's part of building its chunk on the zeroed struct `model` (its sizes, views, buffers:
 * tri_decoder_begin, then tri_decoder_build), for config cfg. */
typedef int (*tri_decoder_setup)(void *model, const void *cfg, const tri_train_layout *run,
                                 const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm);

/* A family's create (models/model.h): a zeroed struct of `size` bytes, setup on it; on failure all of
 * it is released and *model is NULL. *chunk is its engine side (dev NULL only plans). */
int tri_decoder_create(void **model, tri_chunk **chunk, size_t size, tri_decoder_setup setup, const void *cfg,
                       const tri_train_layout *run, const tri_chunk_place *place, tri_device *dev,
                       tri_comm *tp_comm, tri_comm *dp_comm);

/* A family's destroy (models/model.h): the decoder, its tables and the struct (NULL-safe). */
void tri_decoder_free(void *model);

/* tri_chunk_model.bind for a family whose views are its parameters (self: the family's struct):
 * points *wslot[i] (and *gslot[i] when grads is present) at each parameter i of unit u, views of
 * params / grads, which hold the unit's elements in its flat layout. */
void tri_decoder_bind(void *self, int unit, tri_tensor params, tri_tensor grads);

/* Context parallelism's attention scratch (cp > 1; else *s absent, nothing taken): one buffer of each
 * dtype shared by the stage's layers, sized by tri_cp_scratch_numel for this rank's (B, T_l) rows,
 * NH_l query and NH_kv_l key/value heads of HS (the counts the partitioner plans, TRI_MEM_COMM). */
int tri_decoder_take_cp_scratch(tri_decoder *d, tri_arena *a, int64_t NH_l, int64_t NH_kv_l, int64_t HS,
                                tri_cp_scratch *s);

/* Copies B windows of T + 1 tokens (host; T = seq.T, the whole sequence) into slot's tokens, the first
 * T of each, and targets, the last T; under context parallelism only this rank's rows, chunk cp_rank
 * then chunk 2cp-1-cp_rank of each window (their tokens at positions p, targets at p + 1). TRI_ENOMEM or
 * the copy's error. */
int tri_decoder_load_batch(tri_decoder *d, int slot, const int32_t *windows);

/* Runs one pass (engine/train/chunk.h) on the micro-batch in slot: the embedding and its backward,
 * the gradient from the next stage and the tied embedding's, itself; blocks and the head through
 * the family's compute (tri_decoder_shape). Every decoder family's chunk runs this (self: its model,
 * whose first member is its tri_decoder). TRI_EINTERNAL for an unknown pass. */
int tri_decoder_run(void *self, const tri_pass *p, int slot, bool train, float dloss);

/* What a decoder family takes of the chunk's arena (engine/device/arena.h), in the order
 * tri_decoder_take_buffers calls it (self: the family's struct). */
typedef struct tri_decoder_buffers {
    int (*shared)(void *self, tri_arena *a);               /* what recomputation rebuilds, one set */
    int (*block)(void *self, tri_arena *a, int s, int l);  /* block l's activations in slot s */
    int (*final_norm)(void *self, tri_arena *a, int s);    /* the final norm's, last stage only */
    tri_tensor (*block_output)(void *self, int s, int l);  /* what block l of slot s hands on */
    int (*scratch)(void *self, tri_arena *a);              /* its scratch, after the decoder's */
} tri_decoder_buffers;

/* Every buffer of a decoder family's chunk (its tri_chunk_model.take_buffers), in one order for
 * every family: the family's shared activations; per slot the decoder's inputs (tokens, targets,
 * x_in), each block's, the final norm's, the decoder's outputs (dlnf and losses on the last stage,
 * grad_out on the others, dres, after the stage's output: the last block's, or x_in without
 * blocks); then the decoder's scratch (tmp, dln, the sequence-parallel rows, the private
 * accumulator, the head's logits and statistics) and the family's. */
int tri_decoder_take_buffers(tri_decoder *d, void *self, const tri_decoder_buffers *b, tri_arena *a);

/* tri_model_family.logits_row (model: the family's struct): the last forward's logits of token row
 * `row` (vocab_size floats, host), this rank's vocab shard gathered over the TP group (collective).
 * TRI_EINVAL off the last stage or for a row outside the micro-batch. */
int tri_decoder_logits_row(void *model, int slot, int64_t row, float *logits);

/* Activations and their gradients are bf16 under mixed precision; statistics (norms' mean and rstd,
 * losses) and parameters' gradients stay fp32. */
static inline tri_dtype tri_decoder_act_dtype(const tri_decoder *d)
{
    return d->run->precision == TRI_PRECISION_BF16 ? TRI_BF16 : TRI_F32;
}

#endif
