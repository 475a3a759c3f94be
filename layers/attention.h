/* layers/attention.h - the tensor-parallel causal self-attention sub-block of a GPT-2 block.
 *
 * qkv = x @ Wqkv_l^T + bqkv_l (column-parallel: this rank's NH_l = NH/tp heads), the causal
 * attention core on those heads, then y = reduce(atty @ Wproj_l^T) + bproj (row-parallel).
 * Shoeybi et al. 2019 §3 (Fig. 3b): one all-reduce forward, one backward (or the SP pairs).
 * The core is fused (FlashAttention-2, Dao 2023: the rows' logsumexp saved, memory linear in T) or
 * materialised (the (B, NH_l, T, T) probabilities saved, the reference twin): scratch.flash says which,
 * and only that form's buffers are present. */
#ifndef TRIDENT_LAYERS_ATTENTION_H
#define TRIDENT_LAYERS_ATTENTION_H

#include "layers/cp_attention.h"
#include "layers/parallel.h"

typedef struct tri_attention_weights {
    tri_tensor qkv_w;   /* (3, C_l, C): q, k, v rows of this rank's heads */
    tri_tensor qkv_b;   /* (3, C_l) */
    tri_tensor proj_w;  /* (C, C_l) */
    tri_tensor proj_b;  /* (C) */
} tri_attention_weights;

/* Saved for backward, per micro-batch. */
typedef struct tri_attention_acts {
    tri_tensor qkv;     /* (B, T, 3*C_l) */
    tri_tensor att;     /* (B, NH_l, T, T) softmax probabilities (unfused) */
    tri_tensor lse;     /* (B, NH_l, T) f32 rows' logsumexp (flash) */
    tri_tensor atty;    /* (B, T, C_l) */
} tri_attention_acts;

/* Shared by all layers and micro-batches of a stage. */
typedef struct tri_attention_scratch {
    tri_tensor full_a, full_b;  /* (N, C) SP gather / partial buffers (unused without SP) */
    tri_tensor dqkv;            /* (B, T, 3*C_l) */
    tri_tensor datt;            /* (B, NH_l, T, T) (unfused) */
    tri_tensor delta;           /* (B, NH_l, T) f32 (flash) */
    tri_tensor datty;           /* (B, T, C_l) */
    bool flash;                 /* the fused core (layout's TRI_ATTENTION_FLASH) */
    const tri_cp *cp;           /* context parallelism (cp > 1; NULL or cp 1: none): the (B, T, ...) rows are
                                   this rank's two chunks of each sequence and the fused core runs across the
                                   cp group (layers/cp_attention.h); the validator refuses the unfused one */
    tri_cp_scratch cps;         /* its scratch (tri_cp_scratch_numel), shared by the stage's layers */
} tri_attention_scratch;

/* The attention core alone, in the form s->flash picks: atty from qkv, saving att or lse. */
int tri_attention_core_forward(const tri_tp *tp, tri_attention_acts *acts, const tri_attention_scratch *s);

/* y(N_l, C) = attention sub-block of x(N_l, C); fills acts. */
int tri_attention_forward(const tri_tp *tp, tri_tensor y, tri_attention_acts *acts, tri_tensor x,
                          const tri_attention_weights *w, const tri_attention_scratch *s);

/* dx(N_l, C) = input gradient (overwritten) given dy(N_l, C); weight gradients accumulate into g. */
int tri_attention_backward(const tri_tp *tp, tri_tensor dx, const tri_attention_weights *g,
                           tri_tensor dy, const tri_attention_acts *acts, tri_tensor x,
                           const tri_attention_weights *w, const tri_attention_scratch *s);

#endif
