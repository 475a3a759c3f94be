/* layers/cross_entropy.c - vocab-parallel LM head + cross-entropy (see cross_entropy.h). */
#include "layers/cross_entropy.h"

#include "layers/linear.h"

static int64_t valid_columns(int64_t vocab_start, int64_t V_l, int64_t vocab_size)
{
    int64_t v = vocab_size - vocab_start;
    return v < 0 ? 0 : (v > V_l ? V_l : v);
}

int tri_lm_head_logits(const tri_tp *tp, tri_tensor x, tri_tensor wte, const tri_lm_head_scratch *s)
{
    return tri_column_linear_forward(tp, s->logits, x, s->full_a, wte, tri_tensor_none());
}

/* losses(N) and, when training, dlogits over the logits buffer: with the whole vocabulary on this
 * rank (no TP) in one fused op, which gives the pieces' bits without the all-reduces between them;
 * else the vocab-parallel pieces, the maxes all-reduced with MAX and the statistics with SUM. */
static int loss_and_dlogits(const tri_tp *tp, tri_tensor losses, bool backward, tri_tensor targets,
                            int64_t vocab_start, int64_t V_valid, float dloss, const tri_lm_head_scratch *s)
{
    tri_device *d = tp->dev;
    if (tri_tp_size(tp) == 1 && vocab_start == 0)
        return tri_op_ce_fused(d, losses, backward ? s->logits : tri_tensor_none(), s->logits, targets, V_valid,
                               dloss);
    int rc = tri_op_ce_row_max(d, s->maxes, s->logits, V_valid);
    if (!rc) rc = tri_comm_all_reduce(tp->comm, s->maxes, TRI_REDUCE_MAX);
    if (!rc) rc = tri_op_ce_sumexp_target(d, s->stats, s->logits, s->maxes, targets, vocab_start, V_valid);
    if (!rc) rc = tri_comm_all_reduce(tp->comm, s->stats, TRI_REDUCE_SUM);
    if (!rc) rc = tri_op_ce_loss(d, losses, s->maxes, s->stats);
    if (!rc && backward)
        rc = tri_op_ce_backward(d, s->logits, s->logits, s->maxes, s->stats, targets, vocab_start, V_valid, dloss);
    return rc;
}

int tri_lm_head_loss(const tri_tp *tp, tri_tensor losses, tri_tensor dx, tri_tensor dwte,
                     tri_tensor x, tri_tensor wte, tri_tensor targets, int64_t vocab_start,
                     int64_t vocab_size, float dloss, const tri_lm_head_scratch *s)
{
    int64_t V_valid = valid_columns(vocab_start, tri_tensor_rows(wte), vocab_size);
    bool backward = tri_tensor_present(dx);
    int rc = tri_lm_head_logits(tp, x, wte, s);
    if (!rc) rc = loss_and_dlogits(tp, losses, backward, targets, vocab_start, V_valid, dloss, s);
    if (rc || !backward)
        return rc;
    /* backward through the column-parallel LM head, from dlogits in the logits buffer */
    return tri_column_linear_backward(tp, dx, dwte, tri_tensor_none(), s->logits, x, s->full_a, s->full_b, wte);
}
