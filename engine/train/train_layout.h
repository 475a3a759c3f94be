/* engine/train/train_layout.h - how a model trains, in one value.
 *
 * What a user chooses about a run's layout: the parallel sizes and batch shape, the pipeline
 * schedule and its model chunks per rank, Megatron-LM's first/last stage overrides, the ZeRO stage
 * (Rajbhandari et al. 2020) and its overlaps, deterministic mode, the precision (fp32, or bf16 mixed
 * precision: Micikevicius et al. 2018, Megatron-LM's --bf16) and activation recomputation
 * (Korthikanti et al. 2022: none, selective = the attention core, full = every layer from its input)
 * and the attention core's form (fused by default; selective recomputation has nothing to drop from it).
 * One declaration: partitioner/constraints.h resolves a request into it for engine_train, the
 * partitioner and the benches alike (one validator), and it is passed by const pointer from there
 * through the model's chunks to ZeRO; what differs per model chunk is the model's own small value.
 * The memory model, the time model and the layout search read it too. */
#ifndef TRIDENT_ENGINE_TRAIN_TRAIN_LAYOUT_H
#define TRIDENT_ENGINE_TRAIN_TRAIN_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/train/grad_compression.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TRI_RECOMPUTE_NONE = 0, TRI_RECOMPUTE_SELECTIVE, TRI_RECOMPUTE_FULL } tri_recompute;
typedef enum { TRI_PRECISION_FP32 = 0, TRI_PRECISION_BF16 } tri_precision;
/* The attention core: fused (FlashAttention-2, Dao 2023: no (T, T) matrix, the rows' logsumexp
 * kept) or the materialised softmax (its reference twin; Megatron-LM's --attention-backend
 * flash / unfused). */
typedef enum { TRI_ATTENTION_FLASH = 0, TRI_ATTENTION_UNFUSED } tri_attention_backend;
/* How context-parallel attention moves key/value (Megatron-Core's --cp-comm-type, docs/context_parallel.md):
 * p2p = a ring passing (B, T_l, 2 C_kv_l) blocks while the previous block computes (the default, zero);
 * all_gather = key/value gathered once per layer (Llama 3's choice with grouped-query attention). */
typedef enum { TRI_CP_COMM_P2P = 0, TRI_CP_COMM_ALL_GATHER } tri_cp_comm_type;

/* The MoE block's training options that change the model (Megatron-Core's --moe-* flags; models with
 * experts read them, docs/moe.md "The MoE families"). Zeroed: the config's auxiliary-loss
 * coefficient, no z-loss, dropless, "probs" drop policy, softmax scores. */
typedef struct tri_moe_run {
    bool aux_loss_coeff_set;   /* --moe-aux-loss-coeff given: it replaces the config's */
    float aux_loss_coeff;      /* Megatron units (Hugging Face's router_aux_loss_coef x top-k) */
    float z_loss_coeff;        /* --moe-z-loss-coeff */
    float capacity_factor;     /* --moe-expert-capacity-factor; 0: dropless */
    int drop_policy;           /* --moe-token-drop-policy: TRI_MOE_DROP_PROBS (0) or TRI_MOE_DROP_POSITION (1) */
    int score_func;            /* --moe-router-score-function: TRI_MOE_SOFTMAX (0) or TRI_MOE_SIGMOID (1) */
    bool expert_bias;          /* --moe-router-enable-expert-bias: DeepSeek-V3's auxiliary-loss-free
                                  balancing bias (E per sparse layer, selection only, training state) */
    float bias_update_rate;    /* --moe-router-bias-update-rate (the flag's default 1e-3) */
} tri_moe_run;

typedef struct tri_train_layout {
    int tp, pp, dp;
    int ep, etp;               /* expert-parallel and expert-tensor-parallel sizes (Megatron-Core's
                                  parallel folding: a stage's tp x dp ranks regroup as etp x ep x edp for
                                  the experts, edp = tp dp / (etp ep)); 1 (or 0, unset) for none */
    int cp;                    /* context-parallel size (--context-parallel-size; 1, or 0 unset: none): each
                                  sequence of T rows split in 2 cp chunks, cp rank i holding chunks i and
                                  2cp-1-i (T_l = T / cp local rows); world = tp x cp x pp x dp */
    tri_cp_comm_type cp_comm_type; /* --cp-comm-type (zeroed: p2p) */
    int v;                     /* model chunks per pipeline rank (> 1 only with "interleaved") */
    bool sequence_parallel;
    int64_t B, T;              /* micro-batch size, sequence length */
    int64_t global_batch;      /* sequences per iteration = B * n_micro * dp */
    int n_micro;               /* micro-batches per iteration and data-parallel replica */
    int zero_stage;            /* 0..3 */
    tri_recompute recompute;
    tri_precision precision;
    tri_attention_backend attention;
    const char *schedule;      /* "1f1b", "gpipe", "interleaved", "zb-h1" (a string literal) */
    int first_layers, last_layers; /* Megatron-LM's first/last stage overrides, -1: balanced */
    bool deterministic;        /* exact fixed-point gradient sums (engine/train/zero.h) */
    bool overlap_grad_reduce;  /* Megatron-LM's --overlap-grad-reduce / --overlap-param-gather */
    bool overlap_param_gather; /* (engine/train/zero.h) */
    tri_compression compression; /* the dp gradient reduction's compressor (engine/train/dp_compress.h;
                                    zeroed: none) */
    tri_moe_run moe;           /* the MoE block's options (zeroed: the config's, dropless) */
} tri_train_layout;

/* "none", "selective", "full" / "fp32", "bf16" / "flash", "unfused". */
const char *tri_recompute_name(tri_recompute r);
const char *tri_precision_name(tri_precision p);
const char *tri_attention_backend_name(tri_attention_backend a);
/* "p2p", "all_gather". */
const char *tri_cp_comm_type_name(tri_cp_comm_type t);

/* The layout's context-parallel size: l->cp, 1 when unset (0). */
static inline int tri_layout_cp(const tri_train_layout *l)
{
    return l->cp > 1 ? l->cp : 1;
}

/* What the layout actually recomputes: its recompute choice, except that selective recomputation
 * with the fused attention reruns nothing (the fused core stores no softmax to drop; its backward
 * recomputing the scores tile by tile is part of the attention, as in Megatron-LM's HFU). */
tri_recompute tri_layout_recomputes(const tri_train_layout *l);

#ifdef __cplusplus
}
#endif

#endif
