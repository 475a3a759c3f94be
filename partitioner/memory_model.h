/* partitioner/memory_model.h - bytes per memory category on one pipeline rank, from formulas.
 *
 * The engine plans its own memory exactly (models/gpt_rank.h, tri_gpt_rank_plan) for what it can
 * run: fp32 without recomputation. This model covers everything else (bf16 mixed precision,
 * recomputation, layouts far beyond this machine) and, for fp32, is checked against the engine's
 * plan (tests/test_partitioner_model.c, within 5%), so the two cannot drift apart silently.
 * Categories are engine/arena.h's. Per TP rank; N = B*T, N_l = N/t under sequence parallelism
 * (else N), s = T, b = B, h = C = n_embd, a = n_head, t = tp, V_l = padded vocab / t.
 *
 * Model states (Rajbhandari et al. 2020, "ZeRO", §3.1 and §5), for Psi parameter elements on the
 * rank (its blocks' (12h^2 + 7h)/t + 6h each, plus wte V_l h and wpe on the first chunk, ln_f and
 * the tied wte's copy on the last):
 *   bf16 mixed precision: parameters 2 Psi, gradients 2 Psi, optimizer K Psi with K = 12 (fp32
 *     master copy, AdamW m and v);
 *   fp32 (the engine): parameters 4 Psi, gradients 4 Psi, optimizer 8 Psi (m and v);
 *   ZeRO 1 divides the optimizer by dp, ZeRO 2 also the gradients, ZeRO 3 also the parameters;
 *   ZeRO 2 adds whole-unit gradient buckets and ZeRO 3 whole-unit parameter buffers (§6.2's
 *   constant-size buffers; engine/zero.h: two of the largest block's size and one of each larger
 *   unit, e.g. the embedding), and a reduce-scatter result of the largest unit / dp.
 *
 * Activations one micro-batch keeps for its backward, per block (bytes):
 *   bf16 (Korthikanti et al. 2022 Table 2; 2-byte values and 1-byte dropout masks):
 *     no recomputation  s b h (10 + 24/t) + 5 a s^2 b / t, with sequence parallelism
 *                       s b h 34/t + 5 a s^2 b / t;
 *     selective         the 5 a s^2 b / t of the attention core is recomputed instead of kept;
 *     full              only the block input: 2 s b h (/t with sequence parallelism).
 *     Plus (§4.3) the embedding dropout mask s b h / t_sp on the first stage and, on the last, the
 *     final layernorm and LM-head inputs 4 s b h / t_sp and the fp32 logits 4 s b V_l.
 *   fp32 (the engine, models/gpt.h's tensors, 4-byte values, no dropout): per block
 *     4 (4 N_l h + 4 N_l + 12 N h / t + b (a/t) s^2): the layernorm outputs and residuals (4 N_l h),
 *     layernorm statistics (4 N_l), QKV, attention output and the MLP's two hidden tensors
 *     (12 N h/t) and the softmax probabilities; selective drops the probabilities, full keeps
 *     only the block input 4 N_l h. Plus per micro-batch the tokens and targets (8 N), the stage
 *     input and the residual gradient (8 N_l h) and on the last stage the final layernorm's
 *     output, statistics and gradient and the per-token losses.
 *   With recomputation one block's recomputed activations exist once per chunk too (full: a whole
 *   block's, selective: the attention core's scores).
 *   Each rank keeps as many micro-batches as its schedule has in flight (partitioner/simulate.h:
 *   the executor's slots for fp32, Megatron's in-flight micro-batches for bf16).
 *
 * Communication buffers: fp32 the engine's: one received output gradient per slot (all but the
 * last chunk), two N x h gather buffers under sequence parallelism, the gradient-norm slots; bf16:
 * one received activation and one gradient (2 s b h / t_sp each) and, with sequence parallelism, a
 * gathered s b h buffer.
 * Workspace (transients of one block's backward): fp32 the engine's scratch (layernorm and
 * attention gradients, the MLP hidden gradient) and on the last stage the logits 4 N V_l; bf16 the
 * attention-score gradient 2 a s^2 b / t and the MLP hidden gradient 8 s b h / t (an estimate). */
#ifndef TRIDENT_PARTITIONER_MEMORY_MODEL_H
#define TRIDENT_PARTITIONER_MEMORY_MODEL_H

#include "engine/arena.h"
#include "partitioner/stages.h"
#include "partitioner/train_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one micro-batch keeps in one block on one TP rank (see the top comment). */
double tri_mem_block_activations(const tri_transformer *m, const tri_train_layout *l);

/* Bytes one micro-batch keeps in chunk `place` (its blocks and what the first / last chunk adds). */
double tri_mem_chunk_activations(const tri_transformer *m, const tri_train_layout *l,
                                 const tri_stage_place *place);

/* Parameter elements chunk `place` holds on one TP rank, of n_chunks chunks in all. */
double tri_mem_chunk_params(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                            int n_chunks);

/* Bytes of the model states of psi parameter elements on one rank: *params, *grads, *optimizer
 * for precision p and ZeRO stage zero over dp data-parallel ranks (Rajbhandari et al. 2020 §5:
 * bf16 (2 + 2 + 12) psi, then 2 psi + 2 psi + 12 psi / dp, 2 psi + 14 psi / dp, 16 psi / dp). */
void tri_mem_model_states(double psi, int dp, int zero, tri_precision p, double *params, double *grads,
                          double *optimizer);

/* bytes[kind] of pipeline rank pp_rank under plan (its chunks c * pp + pp_rank), keeping
 * in_flight[c] micro-batches in local chunk c (c < plan->v). */
void tri_mem_model_rank(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan,
                        int pp_rank, const int *in_flight, double bytes[TRI_MEM_KINDS]);

#ifdef __cplusplus
}
#endif

#endif
