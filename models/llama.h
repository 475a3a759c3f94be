/* models/llama.h - Llama-family decoder-only transformers (Touvron et al. 2023; Llama 2 and 3,
 * SmolLM, Mistral-shaped models without sliding windows; Qwen3, family "qwen3", whose attention adds a
 * per-head RMSNorm of q and k before the rotary embedding: qk_norm) as a model family: a pipeline stage with
 * tensor, sequence, pipeline and data parallelism, written like GPT-2 (models/gpt.h) as a decoder
 * chunk (models/model_chunk.h: the passes, the buffers around the blocks) with its own block, norm
 * and embedding.
 *
 * The model, as Hugging Face's LlamaForCausalLM computes it:
 *   x = embed_tokens[tokens]                                   (no position embedding)
 *   per layer: h = x + o_proj(attn(rope(q), rope(k), v))      with q, k, v projections of
 *                  rmsnorm(x; input_layernorm)                 (grouped-query attention: NH query
 *              x = h + down(silu(gate(z)) * up(z))              heads, NH_kv key/value heads)
 *                  with z = rmsnorm(h; post_attention_layernorm)
 *   logits = lm_head(rmsnorm(x; norm)), lm_head tied to embed_tokens when tie_word_embeddings.
 * RMSNorm: Zhang & Sennrich 2019; SwiGLU: Shazeer 2020; rotary embedding: Su et al. 2021 in
 * rotate_half form with Llama 3's rope_scaling (layers/rotary.h); grouped-query attention: Ainslie
 * et al. 2023, on the fused attention (FlashAttention-2, engine/device/device.h).
 *
 * Parameters carry Hugging Face's names (the checkpoint keys, and what `ckpt import/export --format hf`
 * maps one to one): model.embed_tokens.weight (Vp, C); per layer N, model.layers.N.
 * input_layernorm.weight (C), self_attn.q_proj.weight (NH HS, C), k_proj.weight and v_proj.weight
 * (NH_kv HS, C), their .bias when attention_bias, self_attn.o_proj.weight (C, NH HS) (+ .bias),
 * post_attention_layernorm.weight (C), Qwen3's self_attn.q_norm.weight and k_norm.weight (HS, replicated
 * over tp, each rank's gradient a part: summed over tp), mlp.gate_proj.weight and mlp.up_proj.weight (F, C),
 * mlp.down_proj.weight (C, F) (+ biases when mlp_bias); model.norm.weight (C); lm_head.weight (Vp, C)
 * unless tied. Vp pads the vocabulary as GPT-2's (tri_padded_vocab).
 *
 * Tensor parallelism (Shoeybi et al. 2019 §3): q, k, v, gate and up are column-parallel (split along
 * their rows), o_proj and down row-parallel, the embedding, LM head and loss vocab-parallel. A
 * rank's q, k and v shards are consecutive in its flat buffer, so they are read as one (W_l, C)
 * matrix whose rows are [q heads | k heads | v heads], the fused q|k|v row the attention kernel
 * reads (layers/llama_attention.h); gate and up likewise give [gate | up] (layers/swiglu_mlp.h).
 * Key/value heads are split over tp when tp <= NH_kv; above it, tp / NH_kv consecutive ranks hold a
 * replica of the head their query heads read (tri_param_spec.max_shards) and the engine sums the
 * replicas' gradients (engine/train/train.c), as Megatron-LM's query groups.
 *
 * Mixture-of-Experts (models/llama_moe.c; docs/moe.md "The MoE families"): with num_experts > 0
 * the layers tri_llama_layer_is_sparse names run layers/moe.h's block in place of the SwiGLU MLP,
 * as Hugging Face's MixtralForCausalLM ("mixtral") and Qwen3MoeForCausalLM ("qwen3_moe", its MoE
 * side); their parameters carry the Hub's per-expert names, in the flat order the block's fused
 * views need. fp32 or bf16; at tp > 1 only under --sequence-parallel, each TP rank routing its own
 * N_l tokens through the replicated router and whole experts (docs/moe.md "MoE with tensor
 * parallelism").
 *
 * Shapes: B micro-batch, T sequence, N = B T rows, N_l = N / tp under sequence parallelism (else N),
 * C hidden_size, HS head_dim, NH_l = NH / tp, NH_kv_l the rank's key/value heads, Q_l = NH_l HS,
 * KV_l = NH_kv_l HS, W_l = Q_l + 2 KV_l, F intermediate_size, F_l = F / tp, V_l = Vp / tp. */
#ifndef TRIDENT_MODELS_LLAMA_H
#define TRIDENT_MODELS_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/train/chunk.h"
#include "layers/cross_entropy.h"
#include "layers/llama_attention.h"
#include "layers/moe_etp.h"
#include "layers/rotary.h"
#include "layers/swiglu_mlp.h"
#include "models/model.h"
#include "models/model_chunk.h"

#define TRI_LLAMA_MAX_MLP_ONLY 256

/* Which Hugging Face model a Llama config reads and writes (its "model_type"). */
typedef enum { TRI_HF_LLAMA = 0, TRI_HF_MIXTRAL, TRI_HF_QWEN3_MOE, TRI_HF_QWEN3 } tri_llama_hf_style;

/* A Llama config, in Hugging Face LlamaConfig's keys (models/llama_config.c). */
typedef struct tri_llama_config {
    int hidden_size;               /* C */
    int intermediate_size;         /* F */
    int num_attention_heads;       /* NH */
    int num_key_value_heads;       /* NH_kv (default NH) */
    int head_dim;                  /* HS (default C / NH) */
    int num_hidden_layers;         /* L */
    int vocab_size;                /* V */
    int max_position_embeddings;   /* the longest sequence */
    float rms_norm_eps;
    double rope_theta;
    tri_rope_scaling rope_scaling; /* Llama 3's "rope_type": "llama3", or none */
    bool tie_word_embeddings;
    bool attention_bias, mlp_bias;
    float init_std;                /* initializer_range (default 0.02) */
    /* Mixture-of-Experts (models/llama_moe.c; docs/moe.md "The MoE families"): E > 0 replaces the
     * SwiGLU MLP of the sparse layers (tri_llama_layer_is_sparse) with layers/moe.h's block */
    tri_llama_hf_style hf_style;   /* whose config and parameter names: "llama", "mixtral", "qwen3_moe" */
    int num_experts;               /* E (0: dense); Mixtral's num_local_experts, Qwen3-MoE's num_experts */
    int num_experts_per_tok;       /* K */
    int moe_intermediate_size;     /* I; Mixtral: its intermediate_size */
    int shared_expert_intermediate_size; /* I_s (0: none); key moe_shared_expert_intermediate_size */
    int decoder_sparse_step;       /* default 1 */
    int n_mlp_only_layers;
    int mlp_only_layers[TRI_LLAMA_MAX_MLP_ONLY]; /* dense layers among the sparse ones (Qwen3-MoE) */
    bool norm_topk_prob;           /* renormalise the K weights (Mixtral: always true) */
    float router_aux_loss_coef;    /* Hugging Face's units (Megatron's coefficient is K times it) */
    bool output_router_logits;     /* HF adds the aux loss to the loss only when true */
    bool qk_norm;                  /* Qwen3's per-head q/k RMSNorm (model_type "qwen3") */
    char name[128];                /* the file's base name, for logs */
} tri_llama_config;

/* Qwen3-MoE's rule: E > 0, layer not in mlp_only_layers, (layer + 1) % decoder_sparse_step == 0. */
bool tri_llama_layer_is_sparse(const tri_llama_config *c, int layer);

/* Parses a config.json (source names it in messages): the keys above, and the other keys of
 * LlamaConfig where Trident computes the same model (hidden_act "silu", attention_dropout 0,
 * pretraining_tp 1, ...). TRI_EINVAL naming the file, the key and the value. */
int tri_llama_config_parse(void *cfg, const char *json, const char *source);
/* The same for "model_type": "mixtral" (MixtralConfig's keys: num_local_experts, num_experts_per_tok,
 * router_aux_loss_coef, output_router_logits; router_jitter_noise only 0, sliding_window only null)
 * and "qwen3_moe" (Qwen3MoeConfig's: num_experts, moe_intermediate_size, decoder_sparse_step,
 * mlp_only_layers, norm_topk_prob, ...; use_sliding_window only false). TRI_EINVAL naming the key
 * and value: 0 experts, more than TRI_MOE_MAX_EXPERTS, num_experts_per_tok above them, unknown keys. */
int tri_mixtral_config_parse(void *cfg, const char *json, const char *source);
int tri_qwen3_moe_config_parse(void *cfg, const char *json, const char *source);
/* The same for Qwen3Config (model_type "qwen3", qk_norm set; models/llama_family.c). */
int tri_qwen3_config_parse(void *cfg, const char *json, const char *source);
/* The architecture as JSON (what a checkpoint records and compares); malloc'd. */
int tri_llama_config_to_json(const void *cfg, char **json);
/* Parameters of the unpadded model (a tied LM head counted once). */
int64_t tri_llama_num_params(const void *cfg);
/* The partitioner's outline (partitioner/transformer.h) of a tri_llama_config, and what one of its
 * blocks costs under layout l (tri_block_cost, models/block_cost.h). */
tri_transformer tri_llama_dims(const void *cfg);
void tri_llama_block_cost(const void *cfg, const tri_train_layout *l, tri_block_cost *out);
void tri_llama_block_cost_at(const void *cfg, const tri_train_layout *l, int layer, tri_block_cost *out);

typedef struct tri_llama_block_weights {
    tri_tensor ln1_w;                  /* (C) input_layernorm */
    tri_llama_attention_weights attn;  /* qkv_w (W_l, C), qkv_b (W_l), o_w (C, Q_l), o_b (C) */
    tri_tensor ln2_w;                  /* (C) post_attention_layernorm */
    tri_swiglu_mlp_weights mlp;        /* gate_up_w (2 F_l, C), gate_up_b, down_w (C, F_l), down_b */
    tri_moe_weights moe;               /* sparse layers, instead of mlp: router_w (E, C), gate_up_w (E, 2I, C),
                                          down_w (E, C, I), shared_gate_up_w (2 I_s, C), shared_down_w (C, I_s) */
    /* the parameters the fused views above are made of (views of single parameters) */
    tri_tensor q_w, k_w, v_w, q_b, k_b, v_b, gate_w, up_w, gate_b, up_b;
    tri_tensor *experts;               /* sparse layers: 3E views, gate e at 2e, up e at 2e + 1, down e at 2E + e */
    tri_tensor shared_gate_w, shared_up_w;
    tri_swiglu_mlp_weights shared_mlp; /* tp > 1 (sequence parallel): the shared expert as the dense MLP,
                                          gate_up_w (2 I_s / tp, C), down_w (C, I_s / tp); moe's absent */
    /* attn.q_norm, attn.k_norm (HS): Qwen3's self_attn.q_norm.weight, k_norm.weight, when qk_norm */
} tri_llama_block_weights;

/* Views of the chunk's parameters (or their gradients); absent ones have data NULL. */
typedef struct tri_llama_weights {
    tri_tensor embed;                  /* (V_l, C) */
    tri_llama_block_weights *h;        /* this stage's blocks */
    tri_tensor norm;                   /* (C) */
    tri_tensor lm_head;                /* (V_l, C): the untied head, or the view of embed */
} tri_llama_weights;

typedef struct tri_llama_block_acts {
    tri_tensor ln1, ln1_rstd;          /* (N_l, C), (N_l) f32 */
    tri_llama_attention_acts attn;     /* qkv (B, T, W_l), atty (B, T, Q_l), lse (B, NH_l, T) */
    tri_tensor res2;                   /* (N_l, C) */
    tri_tensor ln2, ln2_rstd;          /* (N_l, C), (N_l) */
    tri_swiglu_mlp_acts mlp;           /* gate_up (N, 2 F_l), h (N, F_l) */
    tri_moe_acts moe;                  /* sparse layers, instead of mlp (layers/moe.h) */
    tri_moe_ep_acts moe_ep;            /* sparse layers under expert parallelism (layers/moe_ep.h) */
    tri_swiglu_mlp_acts shared_mlp;    /* tp > 1: the shared expert's gate_up (N, 2 I_s / tp), h (N, I_s / tp) */
    tri_moe_etp_acts moe_etp;          /* sparse layers under expert tensor parallelism (layers/moe_etp.h) */
    tri_tensor res3;                   /* (N_l, C) block output */
} tri_llama_block_acts;

/* What one micro-batch keeps beyond the decoder's (models/model_chunk.h). */
typedef struct tri_llama_slot {
    tri_llama_block_acts *blocks;
    tri_tensor lnf, lnf_rstd;          /* last stage: (N_l, C), (N_l) */
} tri_llama_slot;

/* The MoE block's training options (Megatron-Core's flags); from the config unless a flag says. */
typedef struct tri_llama_moe_options {
    float aux_loss_coeff;   /* Megatron units: router_aux_loss_coef x K when output_router_logits, else 0 */
    float z_loss_coeff;     /* --moe-z-loss-coeff (0) */
    double capacity_factor; /* --moe-expert-capacity-factor (<= 0: dropless) */
    int drop_policy;        /* --moe-token-drop-policy: TRI_MOE_DROP_PROBS (default) or _POSITION */
    int score_func;         /* TRI_MOE_SOFTMAX (Mixtral, Qwen3-MoE) */
    bool expert_bias;       /* --moe-router-enable-expert-bias (DeepSeek-V3's e_score_correction_bias) */
    float bias_update_rate; /* --moe-router-bias-update-rate */
} tri_llama_moe_options;

/* DeepSeek-V3's expert bias of the stage's sparse layers (models/llama_moe.c), when enabled: state
 * beside the parameters (tri_chunk_model.buffers), no gradient, no optimizer state. */
typedef struct tri_llama_expert_bias {
    int n;                  /* the stage's sparse layers */
    tri_param *desc;        /* (n) model.layers.N.mlp.gate.e_score_correction_bias, shape (E) */
    tri_tensor *rows;       /* (n) views of values */
    int *layer;             /* (n) the local layer of each */
    tri_tensor values;      /* (n, E) f32, zero at the start */
    tri_tensor counts;      /* (E) i32: a layer's step counts for moe_expert_bias_update */
} tri_llama_expert_bias;

typedef struct tri_llama {
    tri_decoder d;                     /* first: the chunk, sizes, passes, the buffers around the
                                          blocks, the tied head's private accumulator */
    tri_llama_config cfg;
    int64_t NH_l, NH_kv_l, HS, Q_l, KV_l, W_l, F_l;
    tri_llama_weights w, g;
    tri_llama_slot *slots;
    tri_llama_block_acts shared;       /* full recomputation: one block's activations */
    tri_tensor cos, sin;               /* (T, HS/2) f32 rotary tables */
    tri_llama_attention_scratch as;
    tri_swiglu_mlp_scratch ms;
    tri_llama_moe_options moe_opt;
    tri_moe_scratch moe_scratch;       /* sparse layers' backward scratch, shared by all of them */
    tri_moe_ep_scratch moe_ep_scratch; /* the same under expert parallelism (d.opt.ep > 1) */
    tri_swiglu_mlp_scratch shared_ms;  /* tp > 1: the shared expert's dh (N, I_s / tp), dgate_up (N, 2 I_s / tp) */
    tri_moe_etp_scratch moe_etp_scratch; /* and under expert tensor parallelism (d.opt.etp > 1) */
    tri_llama_expert_bias bias;        /* the expert bias (n 0: off) */
} tri_llama;

/* The family "llama" (models/model.h), and the same code as "mixtral" and "qwen3_moe" (their config
 * keys, Hub names and config.json; llama_moe.c) and "qwen3" (Qwen3ForCausalLM: Llama's code with
 * qk_norm, models/llama_family.c). */
extern const tri_model_family tri_llama_family;
extern const tri_model_family tri_mixtral_family;
extern const tri_model_family tri_qwen3_moe_family;
extern const tri_model_family tri_qwen3_family;

/* The Llama (or Qwen3) config of a model; NULL for another family. */
const tri_llama_config *tri_llama_config_of(const tri_model *m);

/* Descriptions of one chunk's parameters at TP size tp, in flat-buffer order (malloc'd). */
int tri_llama_param_specs(const void *cfg, int tp, const tri_chunk_place *opt, tri_param_spec **specs, int *n);
int tri_llama_num_param_tensors(const void *cfg);

/* What the model needs beyond the layout rules: head and width divisibility by tp, the fused views'
 * contiguity, the fused attention. TRI_EINVAL naming the flag, key and values. */
int tri_llama_check(const void *cfg, const tri_train_layout *run, const tri_chunk_place *opt);

/* Builds the chunk (see tri_gpt_create: the same contract; dev NULL only plans; *model a tri_llama,
 * freed by tri_decoder_free). */
int tri_llama_create(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                     const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm);

/* The sparse layers' [aux, z] losses of the micro-batch in slot, summed over this stage's sparse
 * layers (each as its op computed it, in Megatron units, not yet weighted by the step's dloss). One
 * host read per sparse layer; under full recomputation the last rebuilt layer's only. */
int tri_llama_moe_losses(const tri_llama *m, int slot, double *aux, double *z);

/* ---- between llama.c, llama_params.c, llama_buffers.c and llama_moe.c ---- */
int tri_llama_map_views(tri_llama *m);
int tri_llama_take_buffers(void *self, tri_arena *a);
int tri_llama_moe_num_params(const tri_llama_config *c);             /* a sparse layer's MoE tensors */
int tri_llama_moe_param_index(const tri_llama_config *c, const char *suffix); /* -1: not one */
/* a sparse layer's MoE tensors; under expert parallelism (ep > 1) only rank ep_rank's E/ep experts;
 * under expert tensor parallelism (etp > 1) each expert tensor the I / etp slice etp_rank (gate_proj and
 * up_proj split along dim 0, down_proj along dim 1; Hugging Face names and global shapes unchanged). The
 * experts are marked spec.expert (sharded over the expert-data-parallel group) at ep, etp or tp > 1 */
int tri_llama_moe_add_params(tri_spec_list *l, const tri_llama_config *c, int layer, int tp, int ep, int ep_rank,
                             int etp, int etp_rank);
int tri_llama_moe_map_views(tri_llama *m, int l);
void tri_llama_moe_fuse(const tri_llama *m, tri_llama_block_weights *b, int l);
tri_moe_config tri_llama_moe_config(const tri_llama *m);
int tri_llama_moe_take_acts(tri_llama *m, tri_arena *ar, tri_moe_acts *a, tri_moe_ep_acts *ep_acts,
                            tri_moe_etp_acts *etp_acts);
int tri_llama_moe_take_scratch(tri_llama *m, tri_arena *ar);
/* The shared expert under tensor parallelism (tp > 1, sequence parallel): each TP rank's width I_s / tp,
 * 0 when the shared expert is absent or runs inside the MoE block (tp 1). Its kept activations
 * gate_up (N, 2 I_s / tp) and h (N, I_s / tp) (N the gathered tokens, as the dense MLP's). */
int64_t tri_llama_moe_shared_tp_width(const tri_llama *m);
int tri_llama_moe_take_shared_acts(tri_llama *m, tri_arena *ar, tri_swiglu_mlp_acts *a);
/* The step's MoE account (engine/train/moe_stats.h): its shape (tri_chunk_model.moe_shape), and sparse
 * layer l's figures of the micro-batch whose activations are a (its routed counts and losses) staged
 * in the chunk's account, without waiting, when the trainer gave one. */
void tri_llama_moe_shape(void *self, int *n_layers, int *n_experts);
int tri_llama_moe_count(tri_llama *m, int l, const tri_moe_acts *a);
/* The expert bias (DeepSeek-V3 §2.1.2): its descriptions (at setup, before the chunk is built), its
 * buffers (taken with the scratch), and the chunk hooks: the entries it lists
 * (tri_chunk_model.buffers) and its update after the optimizer step from the step's reduced kept
 * counts (tri_chunk_model.after_update; TRI_EINVAL for a count beyond int32). */
int tri_llama_moe_bias_describe(tri_llama *m);
int tri_llama_moe_take_bias(tri_llama *m, tri_arena *ar);
void tri_llama_moe_bias_buffers(void *self, const tri_param **desc, const tri_tensor **values, int *n);
int tri_llama_moe_bias_update(void *self, const tri_moe_stats *moe);
/* The whole model's expert-bias descriptions (one per sparse layer, shape (E)) appended to *specs (n of
 * them, realloc'd): the checkpoint's tensor list when the bias is on. TRI_ENOMEM. */
int tri_llama_moe_bias_specs(const tri_llama_config *c, tri_param_spec **specs, int *n);

#endif
