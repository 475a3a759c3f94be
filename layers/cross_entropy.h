/* layers/cross_entropy.h - the vocab-parallel LM head and softmax cross-entropy.
 *
 * logits(N, V_l) = x @ wte_l^T with the embedding's own vocab shard (tied weights, as GPT-2). The
 * loss never gathers the logits (Megatron's VocabParallelCrossEntropy): the row max is all-reduced
 * with MAX, the sum of exponentials and the target's logit with SUM, over the TP group. Columns of
 * the vocab padding (ids >= vocab_size) are kept out of the softmax. Without TP the pieces need no
 * all-reduce between them and run as one op (tri_op_ce_fused: the same bits, one GPU launch). When
 * training, the backward of the loss and of the LM head runs right away (llm.c's fused classifier):
 * the logits buffer is overwritten by its gradient, so one (N, V_l) buffer serves every micro-batch. */
#ifndef TRIDENT_LAYERS_CROSS_ENTROPY_H
#define TRIDENT_LAYERS_CROSS_ENTROPY_H

#include "layers/parallel.h"

typedef struct tri_lm_head_scratch {
    tri_tensor logits;   /* (N, V_l) */
    tri_tensor maxes;    /* (N) */
    tri_tensor stats;    /* (N, 2): sum-exp, target logit */
    tri_tensor full_a;   /* (N, C) SP: gathered x */
    tri_tensor full_b;   /* (N, C) SP: partial input gradient */
} tri_lm_head_scratch;

/* losses(N) = cross-entropy per token of gather(x(N_l, C)) against targets(N) (global ids, i32),
 * identical on every TP rank. When dx is present: dwte(V_l, C) += dlogits^T @ x and
 * dx(N_l, C) = reduce(dlogits @ wte_l) for dloss = d(total loss)/d(each token's loss).
 * vocab_start: first id of this shard; vocab_size: the real (unpadded) vocabulary. */
int tri_lm_head_loss(const tri_tp *tp, tri_tensor losses, tri_tensor dx, tri_tensor dwte,
                     tri_tensor x, tri_tensor wte, tri_tensor targets, int64_t vocab_start,
                     int64_t vocab_size, float dloss, const tri_lm_head_scratch *s);

/* logits(N, V_l) of this rank's vocab shard only (sampling gathers the row it needs). */
int tri_lm_head_logits(const tri_tp *tp, tri_tensor x, tri_tensor wte, const tri_lm_head_scratch *s);

#endif
