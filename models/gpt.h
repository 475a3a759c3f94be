/* models/gpt.h - GPT-2 (Radford et al. 2019) as a pipeline stage with tensor parallelism.
 *
 * A stage holds blocks [layer_start, layer_end) of the model; the first stage also holds the token
 * and position embeddings, the last the final layernorm and the LM head tied to the token embedding
 * (a copy of wte when the first stage is another rank, kept equal through the embedding group).
 * Written like llm.c's train_gpt2.c (one forward list, backward the list reversed, every buffer with
 * its shape), with Megatron-LM's tensor-parallel layers from layers/. Shapes: B micro-batch size,
 * T sequence length, N = B*T token rows, N_l = N/tp under sequence parallelism (else N), C n_embd,
 * C_l = C/tp, NH_l = NH/tp, Vp the padded vocab, V_l = Vp/tp.
 *
 * Parameters, gradients and activations come from one arena planned before allocation
 * (engine/device/arena.h). Parameter names are the checkpoint keys: wte, wpe, h.<i>.ln_1.w, h.<i>.ln_1.b,
 * h.<i>.attn.c_attn.w (3, C, C), h.<i>.attn.c_attn.b (3, C), h.<i>.attn.c_proj.w, .b,
 * h.<i>.ln_2.w, .b, h.<i>.mlp.c_fc.w (4C, C), .b, h.<i>.mlp.c_proj.w (C, 4C), .b, ln_f.w, ln_f.b.
 * Weights are (out, in) as in Megatron; c_attn keeps q, k, v as its first dimension so that a
 * tensor-parallel shard (split along dim 1) holds whole heads of each. */
#ifndef TRIDENT_MODELS_GPT_H
#define TRIDENT_MODELS_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/chunk.h"
#include "engine/train/train_layout.h"
#include "engine/train/zero.h"
#include "layers/attention.h"
#include "layers/cross_entropy.h"
#include "layers/mlp.h"
#include "models/config.h"
#include "models/model.h"
#include "models/model_chunk.h"

/* Activation recomputation (Korthikanti et al. 2022; tri_recompute, partitioner/train_layout.h):
 * none keeps every block's activations per micro-batch; selective drops the unfused attention core's
 * (B, NH_l, T, T) softmax and recomputes it from q, k, v before the block's backward (the fused core,
 * the default, stores none: selective then keeps what none keeps); full keeps only
 * each block's output and recomputes the whole block (its TP communication included) before its
 * backward. */

typedef struct tri_gpt_block_weights {
    tri_tensor ln1_w, ln1_b;       /* (C) */
    tri_attention_weights attn;
    tri_tensor ln2_w, ln2_b;       /* (C) */
    tri_mlp_weights mlp;
} tri_gpt_block_weights;

/* Views of parameters (or of their gradients) in the flat buffer; absent ones have data NULL. */
typedef struct tri_gpt_weights {
    tri_tensor wte;                /* (V_l, C) */
    tri_tensor wpe;                /* (n_positions, C) */
    tri_gpt_block_weights *h;      /* this stage's blocks */
    tri_tensor lnf_w, lnf_b;       /* (C) */
} tri_gpt_weights;

typedef struct tri_gpt_block_acts {
    tri_tensor ln1, ln1_mean, ln1_rstd;   /* (N_l, C), (N_l), (N_l) */
    tri_attention_acts attn;              /* qkv (B, T, 3C_l), lse (B, NH_l, T) or att (B, NH_l, T, T), atty (B, T, C_l) */
    tri_tensor res2;                      /* (N_l, C) residual after attention */
    tri_tensor ln2, ln2_mean, ln2_rstd;   /* (N_l, C), (N_l), (N_l) */
    tri_mlp_acts mlp;                     /* fch, fch_gelu (N, 4C_l) */
    tri_tensor res3;                      /* (N_l, C) block output */
} tri_gpt_block_acts;

/* What one micro-batch keeps between its forward and its backward beyond the decoder's
 * (models/model_chunk.h: tokens, x_in, dlnf, losses, the gradients passed between stages). */
typedef struct tri_gpt_slot {
    tri_gpt_block_acts *blocks;
    tri_tensor lnf, lnf_mean, lnf_rstd;   /* last stage: (N_l, C), (N_l), (N_l) */
} tri_gpt_slot;

typedef struct tri_gpt {
    tri_decoder d;                        /* first: the chunk, sizes, passes, the buffers around the
                                             blocks, the tied wte's private accumulator */
    tri_gpt_config cfg;
    int64_t C_l, NH_l;
    tri_gpt_weights w, g;                 /* views of the units in use: parameters and gradients */
    tri_gpt_slot *slots;
    tri_gpt_block_acts shared;            /* recomputation: the block activations all slots and
                                             blocks share (full: all but res3; selective: att) */
    tri_attention_scratch as;
    tri_mlp_scratch ms;
} tri_gpt;

/* Number of parameter tensors of the whole model (global indices run 0..this-1). */
int tri_gpt_num_param_tensors(const void *cfg);

/* Parameter descriptions of one chunk, in flat-buffer order; *specs is malloc'd (gpt_params.c). */
int tri_gpt_param_specs(const void *cfg, int tp, const tri_chunk_place *opt, tri_param_spec **specs, int *n);
/* Every parameter of the whole model at TP size tp, in global order (the checkpoint's list). */
int tri_gpt_all_param_specs(const tri_gpt_config *cfg, int tp, tri_param_spec **specs, int *n);

/* Checks a chunk against the config, the run's layout (its tp, micro-batch, sequence length,
 * sequence parallelism) and itself (layers, slots), without communication: what the model needs
 * beyond the layout rules partitioner/constraints.h checks. TRI_EINVAL with a message naming the
 * flag and values. */
int tri_gpt_check(const void *cfg, const tri_train_layout *run, const tri_chunk_place *opt);

/* Builds the chunk on dev, with tensor parallelism over tp_comm and data parallelism (ZeRO) over
 * dp_comm (one-rank comms without them; their sizes are the layout's tp and dp):
 * plans and allocates every buffer, initialises the weights (normal(0, init_std); residual
 * projections scaled by 1/sqrt(2 n_layer); layernorm ones/zeros; biases and vocab padding zero). */
int tri_gpt_create(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                   const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm);
/* (*model is a tri_gpt, cfg a tri_gpt_config: the family table's create (models/model.h), freed by
 * tri_decoder_free. With dev NULL it only plans, allocating and sending nothing: the chunk's arena
 * holds the bytes per category, for the partitioner's memory prediction of any layout on any
 * machine.) */

/* A micro-batch goes in with tri_decoder_load_batch(&m->d, ...); the forward, backward and gradient
 * resets go through the chunk (tri_chunk_forward(&m->d.chunk, ...)). */

/* ---- as a model family (models/model.h; gpt_family.c) ---- */

/* The family "gpt2": what the session, the checkpoints and the tools reach GPT-2 through. */
extern const tri_model_family tri_gpt2_family;
/* A model handle that borrows a GPT-2 config (cfg must outlive it; tri_model_free leaves cfg). */
tri_model tri_gpt_model(const tri_gpt_config *cfg);
/* The GPT-2 config of a model; NULL when the model is of another family. */
const tri_gpt_config *tri_gpt_config_of(const tri_model *m);

/* ---- between gpt.c, gpt_params.c and gpt_buffers.c ---- */

/* Points the views of every parameter of the chunk's layout into m->w / m->g and sets the
 * decoder's units (gpt_params.c). */
void tri_gpt_map_views(tri_gpt *m);
/* The model's buffers from the chunk's arena (gpt_buffers.c; tri_chunk_model.take_buffers). */
int tri_gpt_take_buffers(void *self, tri_arena *a);

#endif
