/* layers/llama_attention.h - the tensor-parallel attention sub-block of a Llama block.
 *
 * As Hugging Face's LlamaAttention: q, k, v = x @ Wq^T, x @ Wk^T, x @ Wv^T (with biases only when
 * the config's attention_bias asks), the rotary embedding on q and k (Su et al. 2021, rotate_half
 * form: tri_op_rope_forward with the model's cos/sin tables), causal attention with grouped-query
 * heads (Ainslie et al. 2023: NH_kv <= NH, query head h reads key/value head h / (NH / NH_kv)) by
 * the fused kernel (tri_op_flash_attention_forward), then y = reduce(atty @ Wo_l^T) (+ bo).
 * Tensor parallelism (Shoeybi et al. 2019 §3): the projections are one column-parallel layer whose
 * rank-local weight rows are [its NH_l q heads | its NH_kv_l k heads | their v heads], so each
 * rank's qkv row is the fused layout the attention kernel reads; o_proj is row-parallel. Which kv
 * heads a rank holds (a split of them, or a replica of the one its q heads read when tp > NH_kv)
 * is the model's choice; the layer sees NH_l and NH_kv_l heads of HS.
 * Qwen3's attention (Hugging Face's Qwen3Attention) adds, when the weights hold q_norm and k_norm,
 * a per-head RMSNorm of every q and k head after the projections and before the rotary embedding
 * (tri_op_rmsnorm_heads_forward: q_norm(q_proj(x).view(..., head_dim)), k_norm likewise); the
 * projections' output is then kept (qkv_in) for the norm's backward. */
#ifndef TRIDENT_LAYERS_LLAMA_ATTENTION_H
#define TRIDENT_LAYERS_LLAMA_ATTENTION_H

#include "layers/cp_attention.h"
#include "layers/parallel.h"

typedef struct tri_llama_attention_weights {
    tri_tensor qkv_w;   /* (C_l + 2 C_kv_l, C): rows of this rank's q heads, then its k heads, then v */
    tri_tensor qkv_b;   /* (C_l + 2 C_kv_l) or absent */
    tri_tensor o_w;     /* (C, C_l) */
    tri_tensor o_b;     /* (C) or absent */
    tri_tensor q_norm;  /* (HS) Qwen3's q_norm, or absent (no per-head norm) */
    tri_tensor k_norm;  /* (HS) k_norm, present with q_norm */
} tri_llama_attention_weights;

/* Saved for backward, per micro-batch. */
typedef struct tri_llama_attention_acts {
    tri_tensor qkv;     /* (B, T, C_l + 2 C_kv_l), q and k (normalised, then) rotated */
    tri_tensor atty;    /* (B, T, C_l) */
    tri_tensor lse;     /* (B, NH_l, T) f32 */
    tri_tensor qkv_in;  /* (B, T, C_l + 2 C_kv_l) the projections' output before the per-head norm, or absent */
    tri_tensor qk_rstd; /* (B T, NH_l + NH_kv_l) f32 the per-head norm's rstd, or absent */
} tri_llama_attention_acts;

/* Shared by all layers and micro-batches of a stage. */
typedef struct tri_llama_attention_scratch {
    tri_tensor full_a, full_b;  /* (N, C) SP gather / partial buffers (unused without SP) */
    tri_tensor dqkv;            /* (B, T, C_l + 2 C_kv_l) */
    tri_tensor datty;           /* (B, T, C_l) */
    tri_tensor delta;           /* (B, NH_l, T) f32 */
    tri_tensor cos, sin;        /* (>= seq.T, HS/2) f32 rotary tables (layers/rotary.h) */
    int64_t NH_l, NH_kv_l;      /* this rank's query and key/value heads */
    float qk_norm_eps;          /* the per-head norm's eps (rms_norm_eps) when the weights hold q_norm */
    tri_seq seq;                /* the rows' sequences: (B, T) rows are positions t of T (zeroed: the same), or
                                   under context parallelism this rank's two chunks of seq.T (global positions) */
    const tri_cp *cp;           /* context parallelism (cp > 1; NULL: none): the fused core across the cp
                                   group (layers/cp_attention.h) */
    tri_cp_scratch cps;         /* its scratch, shared by the stage's layers */
} tri_llama_attention_scratch;

/* y(N_l, C) = the attention sub-block of x(N_l, C); fills acts. */
int tri_llama_attention_forward(const tri_tp *tp, tri_tensor y, tri_llama_attention_acts *acts, tri_tensor x,
                                const tri_llama_attention_weights *w, const tri_llama_attention_scratch *s);

/* dx(N_l, C) = the input gradient (overwritten) given dy(N_l, C); weight gradients accumulate into g
 * (a replicated key/value head's gradient is this rank's share: the model sums it over the ranks
 * holding the replica). */
int tri_llama_attention_backward(const tri_tp *tp, tri_tensor dx, const tri_llama_attention_weights *g,
                                 tri_tensor dy, const tri_llama_attention_acts *acts, tri_tensor x,
                                 const tri_llama_attention_weights *w, const tri_llama_attention_scratch *s);

#endif
