/* engine/device/ops/embedding.c - the embedding ops' checked wrappers: the token embedding of a
 * vocab shard and the learned position embedding, forward and backward.
 *
 * Contracts in engine/device/ops_list.h. The CPU loops are embedding_cpu.c; the CUDA ones
 * cuda/embedding/embedding.cu. */
#include "engine/device/ops_internal.h"

/* ---- token embedding ---- */

int tri_op_embedding_forward(tri_device *d, tri_tensor out, tri_tensor tokens, tri_tensor wte,
                             int64_t vocab_start)
{
    const char *op = "embedding_forward";
    int rc = tri_need(op, "tokens", tokens, TRI_I32);
    if (!rc) rc = tri_need_float(op, "wte", wte);
    if (!rc) rc = tri_need_float(op, "out", out);
    if (!rc) rc = tri_need_matrix(op, "out", out, tri_tensor_numel(tokens), tri_tensor_cols(wte));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &wte, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, embedding_forward, out, tokens, wte, vocab_start));
}

int tri_op_embedding_backward(tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                              int64_t vocab_start)
{
    const char *op = "embedding_backward";
    int rc = tri_need(op, "tokens", tokens, TRI_I32);
    if (!rc) rc = tri_need_float(op, "dwte", dwte);
    if (!rc) rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_matrix(op, "dout", dout, tri_tensor_numel(tokens), tri_tensor_cols(dwte));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dwte, true);
    tri_widen_arg(&w, &dout, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, embedding_backward, dwte, dout, tokens, vocab_start));
}

/* ---- position embedding ---- */

/* x is out (forward) or dout (backward), wpe is wpe or dwpe: x_name and wpe_name say which. */
static int check_position(const char *op, tri_tensor x, const char *x_name, tri_tensor wpe,
                          const char *wpe_name, int64_t T, int64_t row0, int cp, int cp_rank)
{
    int rc = tri_need_float(op, x_name, x);
    if (!rc) rc = tri_need_float(op, wpe_name, wpe);
    if (rc)
        return rc;
    if (tri_tensor_cols(x) != tri_tensor_cols(wpe) || T <= 0 || T > tri_tensor_rows(wpe) || row0 < 0) {
        char a[96], b[96];
        return TRI_ERR(TRI_EINVAL, "%s: %s %s, %s %s, T %lld, row0 %lld do not fit", op, x_name,
                       TRI_DESC(x, a), wpe_name, TRI_DESC(wpe, b), (long long)T, (long long)row0);
    }
    return tri_check_seq_split(op, T, cp, cp_rank);
}

int tri_op_position_forward(tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0, int cp,
                            int cp_rank)
{
    tri_widen w = tri_widen_start(d, check_position("position_forward", out, "out", wpe, "wpe", T, row0, cp, cp_rank));
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &wpe, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, position_forward, out, wpe, T, row0, cp, cp_rank));
}

int tri_op_position_backward(tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T, int64_t row0, int cp,
                             int cp_rank)
{
    tri_widen w = tri_widen_start(d, check_position("position_backward", dout, "dout", dwpe, "dwpe", T, row0, cp,
                                                    cp_rank));
    tri_widen_arg(&w, &dwpe, true);
    tri_widen_arg(&w, &dout, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, position_backward, dwpe, dout, T, row0, cp, cp_rank));
}
