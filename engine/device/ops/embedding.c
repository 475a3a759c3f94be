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

/* ---- exact weight gradients (exact_grads.c): the rows in chunks of 64 ---- */

typedef struct embed_rows {
    tri_tensor dout, tokens;
    int64_t vocab_start, T, row0;
    int cp, cp_rank;
} embed_rows;

static int embedding_chunk(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp)
{
    const embed_rows *a = ctx;
    return tri_op_embedding_backward(d, tmp[0], tri_rows_view(a->dout, r0, n), tri_tensor_range(a->tokens, r0, n),
                                     a->vocab_start);
}

static int position_chunk(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp)
{
    const embed_rows *a = ctx;
    return tri_op_position_backward(d, tmp[0], tri_rows_view(a->dout, r0, n), a->T, a->row0 + r0, a->cp, a->cp_rank);
}

int tri_op_embedding_backward(tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                              int64_t vocab_start)
{
    const char *op = "embedding_backward";
    if (dwte.dtype == TRI_I64 && tri_tensor_present(dwte)) {
        embed_rows a = {.dout = dout, .tokens = tokens, .vocab_start = vocab_start};
        int rc = tri_need(op, "tokens", tokens, TRI_I32);
        if (!rc) rc = tri_need_float(op, "dout", dout); /* (the chunks' views cannot tell a short dout) */
        if (!rc) rc = tri_need_matrix(op, "dout", dout, tri_tensor_numel(tokens), tri_tensor_cols(dwte));
        return rc ? rc : tri_exact_grads_rows(d, op, tri_tensor_numel(tokens), TRI_COL_CHUNK, false, &dwte, 1,
                                              embedding_chunk, &a);
    }
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
    if (dwpe.dtype == TRI_I64 && tri_tensor_present(dwpe)) {
        embed_rows a = {.dout = dout, .T = T, .row0 = row0, .cp = cp, .cp_rank = cp_rank};
        return tri_exact_grads_rows(d, "position_backward", tri_tensor_rows(dout), TRI_COL_CHUNK, false, &dwpe, 1,
                                    position_chunk, &a);
    }
    tri_widen w = tri_widen_start(d, check_position("position_backward", dout, "dout", dwpe, "dwpe", T, row0, cp,
                                                    cp_rank));
    tri_widen_arg(&w, &dwpe, true);
    tri_widen_arg(&w, &dout, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, position_backward, dwpe, dout, T, row0, cp, cp_rank));
}
