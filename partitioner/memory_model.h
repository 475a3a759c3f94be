/* partitioner/memory_model.h - bytes per memory category on one pipeline rank, from formulas.
 *
 * The engine plans its own memory exactly (models/session.h, tri_model_rank_plan) for everything it
 * runs - fp32 and bf16 mixed precision, any ZeRO stage and recomputation - and the partitioner
 * reports that plan (partitioner/preview.h). These formulas are the same buffers in closed form:
 * for the layout search's screening (partitioner/search.h), for layouts without an engine plan
 * (tests on published runs), and as a check that the engine's plan and the papers agree
 * (tests/test_partitioner_model.c: within 5% of the plan in both precisions). Categories are
 * engine/device/arena.h's. Per TP rank; N = B*T, N_l = N/t under sequence parallelism (else N), s = T,
 * b = B, h = C = n_embd, a = n_head, t = tp, V_l = padded vocab / t; e = 2 bytes (bf16) or 4
 * (fp32) for a parameter value, activation or activation gradient (models/gpt.c's ACT dtype).
 *
 * Model states, for Psi parameter elements on the rank (its blocks' (12h^2 + 7h)/t + 6h each, plus
 * wte V_l h and wpe on the first chunk, ln_f and the tied wte's copy on the last):
 *   bf16 mixed precision (engine/train/zero.h "Mixed precision", following Megatron-LM's --bf16 defaults:
 *     docs/api-guide/dist_optimizer.md, "bf16 parameters, fp32 gradients: 18 [bytes], 6 + 12/d" per
 *     parameter): parameters 2 Psi (bf16), gradients 4 Psi (fp32 main gradients,
 *     accumulate_allreduce_grads_in_fp32), optimizer 12 Psi (fp32 master copy, AdamW m and v).
 *     Rajbhandari et al. 2020 (ZeRO, §3.1) count 2 + 2 + 12: their gradients are fp16;
 *   fp32: parameters 4 Psi, gradients 4 Psi, optimizer 8 Psi (m and v);
 *   ZeRO 1 divides the optimizer by dp, ZeRO 2 also the gradients, ZeRO 3 also the parameters
 *   (Rajbhandari et al. §5); ZeRO 2 adds whole-unit gradient buckets (fp32) and ZeRO 3 whole-unit
 *   parameter buffers (e bytes) (§6.2's constant-size buffers; engine/train/zero.h: two of the largest
 *   block's size and one of each larger unit, e.g. the embedding), and an fp32 reduce-scatter
 *   result of the largest unit / dp.
 *
 * The block's terms (its parameters, activations, recomputation buffer, backward transients and
 * communication buffers) are its family's answer (partitioner/transformer.h tri_block_cost); these
 * formulas compose them with the model's ends. For a decoder block (models/block_cost.h) they are:
 * Activations one micro-batch keeps for its backward (models/gpt_buffers.c take_block_acts / take_slot):
 *   per block  e (4 N_l h + 12 N h/t) + 16 N_l + 4 b (a/t) s with the fused attention (the default,
 *              --attention-backend flash): the layernorm outputs and residuals (ln1, res2, ln2,
 *              res3: 4 N_l h), QKV, the attention output and the MLP's two hidden tensors
 *              (12 N h/t), the fp32 layernorm statistics (mean and rstd of two layernorms: 4 N_l
 *              values of 4 bytes) and the attention rows' fp32 logsumexp (Dao 2023): linear in s;
 *     with the unfused attention the softmax probabilities e b (a/t) s^2 instead of the logsumexp;
 *     selective recomputation drops those probabilities (with flash it has nothing to drop), full
 *     keeps only the block output e N_l h.
 *     In bf16 this is Korthikanti et al. 2022 Table 2 without dropout (the engine has none):
 *     their s b h (10 + 24/t) + 5 a s^2 b/t less the two 1-byte dropout masks (2 s b h) and the
 *     attention dropout's mask and output (3 a s^2 b/t), i.e. s b h (8 + 24/t) + 2 a s^2 b/t (with
 *     sequence parallelism s b h 32/t + 2 a s^2 b/t), plus the statistics they leave out.
 *   per micro-batch the tokens and targets (int32, 8 N), the stage input and the residual gradient
 *     (2 e N_l h) and on the last stage the final layernorm's output and gradient (2 e N_l h), its
 *     fp32 statistics (8 N_l) and the fp32 per-token losses (4 N).
 *   With recomputation one block's recomputed activations exist once per chunk too (full: a whole
 *   block's, selective with the unfused attention: the attention core's probabilities).
 *   Each rank keeps as many micro-batches as the engine's executor has slots (partitioner/preview.h).
 *
 * Communication buffers: one received output gradient per slot (all but the last chunk, e N_l h),
 * two N x h gather buffers under sequence parallelism (e bytes), the trainer's fp32 gradient-norm
 * slots. Workspace (transients of one block's backward, e bytes): the layernorm and attention
 * gradients, the attention-score gradient (unfused, e b (a/t) s^2; the fused backward's fp32 row
 * statistics 4 b (a/t) s instead), the MLP hidden gradient, and on the last stage the
 * logits (e N V_l) with the fp32 row maxes and loss statistics (12 N). */
#ifndef TRIDENT_PARTITIONER_MEMORY_MODEL_H
#define TRIDENT_PARTITIONER_MEMORY_MODEL_H

#include "engine/device/arena.h"
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
 * for precision p and ZeRO stage zero over dp data-parallel ranks (see the top comment): bf16
 * (2 + 4 + 12) psi, then 2 psi + 4 psi + 12 psi / dp, 2 psi + 16 psi / dp, 18 psi / dp; fp32
 * (4 + 4 + 8) psi and the same divisions. */
void tri_mem_model_states(double psi, int dp, int zero, tri_precision p, double *params, double *grads,
                          double *optimizer);

/* bytes[kind] of pipeline rank pp_rank under plan (its chunks c * pp + pp_rank), keeping
 * in_flight[c] micro-batches in local chunk c (c < plan->v). Under context parallelism (l->cp > 1) the
 * rank's micro-batches have T / cp rows, ZeRO shards over dp x cp (tri_layout_cp_local) and the
 * attention's cp scratch (tri_cp_scratch_bytes, the backward's) is one TRI_MEM_COMM buffer. */
void tri_mem_model_rank(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan,
                        int pp_rank, const int *in_flight, double bytes[TRI_MEM_KINDS]);

/* The expert-data-parallel size of layout l (Megatron-Core's parallel folding): edp = tp cp dp / (etp
 * ep), at least 1. The routed experts' gradients reduce and ZeRO shards their parameters, gradients
 * and optimizer state over it (the dense parameters' over dp). */
int tri_expert_dp(const tri_train_layout *l);

#ifdef __cplusplus
}
#endif

#endif
