/* partitioner/constraints.h - from what a user asks to a layout that can run, or a message naming
 * the constraint that fails and the nearest values that satisfy it.
 *
 * The one validator of a layout: engine_train, the partitioner, the checkpoint tool and the benches
 * resolve their layouts here (tools/cli/layout_flags.h), so an impossible layout gets the same
 * refusal from every tool (tests/layout_refusals.sh). Only what needs the data or the device stays
 * in engine_train. The rules (Megatron-LM's, flags by Megatron-LM's names):
 *   tensor-model-parallel-size divides n_head (heads split evenly; n_embd then divides too);
 *   tensor x pipeline-model-parallel-size divides the ranks (--num-gpus, or mpirun -np; dp = ranks /
 *     (tp x pp));
 *   pipeline-model-parallel-size <= n_layer (every stage holds a block);
 *   seq-length <= n_positions; micro-batch-size x seq-length <= 2^31;
 *   global-batch-size is a multiple of micro-batch-size x dp (0: one micro-batch per replica), with
 *     at most 2^20 micro-batches per replica;
 *   sequence-parallel needs tp > 1 and seq-length divisible by tp;
 *   interleaving (--num-layers-per-virtual-pipeline-stage k, which implies the interleaved schedule
 *     unless another is named): n_layer divisible by pp x k with v = n_layer / (pp k) >= 2 chunks
 *     per rank, pp > 1, and n_micro a multiple of pp;
 *   the first/last stage overrides leave every stage a layer (partitioner/stages.h);
 *   expert parallelism (Megatron-Core's parallel folding; --expert-model-parallel-size ep,
 *     --expert-tensor-parallel-size etp): only for a mixture-of-experts model (m->n_experts > 0),
 *     n_experts divisible by ep, etp x ep divides tp x dp (the stage's ranks regroup as etp x ep x
 *     edp for the experts), num_experts_per_tok <= n_experts, ep > 1 with tp > 1 needs sequence-parallel;
 *   context parallelism (--context-parallel-size cp, --cp-comm-type; docs/context_parallel.md): cp >= 1
 *     and tp x cp x pp divides the ranks (dp = ranks / (tp x cp x pp)); --cp-comm-type p2p or
 *     all_gather; with cp > 1: seq-length divisible by 2 x cp (the chunks) and each chunk Tc = T / (2
 *     cp) a multiple of the fused attention's 64-row tile (TRI_FLASH_BR), so seq-length a multiple of
 *     2 x cp x 64; the fused attention (the unfused backend has no block merge); with sequence
 *     parallelism the local rows T / cp divisible by tp; a mixture of experts folds tp x cp x dp as
 *     etp x ep x edp;
 *   zb-h1 and gpipe take no interleaving (bf16 runs on every preset: the CPU backend computes it
 *   in fp32).
 * For a number that fails, the message lists the closest valid numbers below and above it, e.g.
 * "--tensor-model-parallel-size 5 does not divide n_head 12 (heads are split evenly); nearest
 * valid: 4, 6". */
#ifndef TRIDENT_PARTITIONER_CONSTRAINTS_H
#define TRIDENT_PARTITIONER_CONSTRAINTS_H

#include <stdbool.h>
#include <stdint.h>

#include "partitioner/train_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_layout_request {
    int num_gpus;
    int tp, pp;
    int cp;                         /* --context-parallel-size (0 taken as 1) */
    const char *cp_comm_type;       /* --cp-comm-type: "p2p" (NULL: p2p) or "all_gather" */
    int ep, etp;                    /* expert-model / expert-tensor-parallel sizes (0 taken as 1) */
    int layers_per_virtual_stage;   /* 0: no interleaving */
    int64_t micro_batch, global_batch, seq_length;   /* global_batch 0: micro_batch x dp */
    bool sequence_parallel;
    int zero_stage;
    const char *schedule;           /* NULL: "interleaved" with layers_per_virtual_stage, else "1f1b" */
    tri_recompute recompute;
    tri_precision precision;
    tri_attention_backend attention;
    bool cpu;                       /* the cpu preset (fp32 only) */
    int first_layers, last_layers;  /* -1: balanced */
    bool deterministic;             /* engine_train --deterministic-mode */
    bool overlap_grad_reduce, overlap_param_gather;
} tri_layout_request;

/* Checks r against model m and fills *out. TRI_EINVAL with a message naming the flag, the value,
 * the rule and the nearest valid values. */
int tri_layout_resolve(const tri_transformer *m, const tri_layout_request *r, tri_train_layout *out);

/* The rules of a resolved layout l that involve model m, with tri_layout_resolve's messages: tp
 * divides the heads and fits the key/value heads, pp at most n_layer, the sequence length within
 * n_positions, the micro-batch, sequence parallelism's divisibility. What a model's own check
 * (models/) calls, so each rule is stated once. TRI_EINVAL. */
int tri_layout_check_model(const tri_transformer *m, const tri_train_layout *l);

/* Whether tp splits model m's heads: it divides n_head, and the key/value heads split over it or are
 * shared by tp / n_kv ranks (the rule tri_layout_resolve states with its message; the search asks it). */
bool tri_layout_tp_fits_heads(const tri_transformer *m, int64_t tp);

/* Writes into buf (cap bytes) the nearest integers below and above x in [lo, hi] for which ok(v,
 * ctx) holds, as "a, b" (or one of them, or "none"). */
void tri_nearest_valid(int64_t x, int64_t lo, int64_t hi, bool (*ok)(int64_t v, const void *ctx),
                       const void *ctx, char *buf, int cap);

#ifdef __cplusplus
}
#endif

#endif
