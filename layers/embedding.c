/* layers/embedding.c - vocab-parallel token embedding + position embedding (see embedding.h). */
#include "layers/embedding.h"

#include "engine/core/status.h"

int tri_embedding_forward(const tri_tp *tp, tri_tensor out, tri_tensor tokens, tri_tensor wte,
                          tri_tensor wpe, int64_t vocab_start, tri_seq seq, tri_tensor partial)
{
    int64_t N = tri_tensor_numel(tokens);
    tri_tensor dst = tp->sp && tri_tp_size(tp) > 1 ? partial : out;
    int rc = tri_op_embedding_forward(tp->dev, dst, tokens, wte, vocab_start);
    if (!rc) rc = tri_tp_reduce_output(tp, out, dst);
    if (!rc && tri_tensor_present(wpe))
        rc = tri_op_position_forward(tp->dev, out, wpe, seq.T, tri_tp_row0(tp, N), seq.cp, seq.cp_rank);
    return rc;
}

int tri_embedding_backward(const tri_tp *tp, tri_tensor dwte, tri_tensor dwpe, tri_tensor dout,
                           tri_tensor tokens, int64_t vocab_start, tri_seq seq, tri_tensor dout_full)
{
    int64_t N = tri_tensor_numel(tokens);
    int rc = tri_tensor_present(dwpe)
                 ? tri_op_position_backward(tp->dev, dwpe, dout, seq.T, tri_tp_row0(tp, N), seq.cp, seq.cp_rank)
                 : TRI_OK;
    tri_tensor g;
    if (!rc) rc = tri_tp_gather_input(tp, &g, dout, dout_full);
    if (!rc) rc = tri_op_embedding_backward(tp->dev, dwte, g, tokens, vocab_start);
    return rc;
}
