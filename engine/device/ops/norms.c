/* engine/device/ops/norms.c - the normalisation ops' checked wrappers: layernorm and RMSNorm,
 * forward, backward, and each with the residual add before it fused in.
 *
 * Contracts in engine/device/ops_list.h. The fused add + norm ops are optional slots: where the
 * backend lacks one, or computes in fp32 only (its bf16 arguments are widened op by op), the
 * wrapper runs tri_op_add and then the norm, the sequence that defines the fused op's bits. The
 * CPU loops are norms_cpu.c; the CUDA ones cuda/norms/layernorm.cu and cuda/norms/rmsnorm.cu. */
#include "engine/device/ops_internal.h"

/* ---- the residual add fused into the norm after it ---- */

/* The add's half of a fused add + norm: res a float (N, C) matrix, a and b float with res's numel,
 * out a float (N, C) matrix apart from res, a and b (each output row is written after its sums). */
static int check_residual(const char *op, tri_tensor res, tri_tensor out, tri_tensor a, tri_tensor b)
{
    int rc = tri_need_float(op, "res", res);
    if (!rc) rc = tri_need_float(op, "a", a);
    if (!rc) rc = tri_need_float(op, "b", b);
    if (!rc) rc = tri_need_numel(op, "a", a, tri_tensor_numel(res));
    if (!rc) rc = tri_need_numel(op, "b", b, tri_tensor_numel(res));
    if (!rc) rc = tri_need_float(op, "out", out);
    if (!rc) rc = tri_need_matrix(op, "out", out, tri_tensor_rows(res), tri_tensor_cols(res));
    const tri_tensor *in[3] = {&res, &a, &b};
    const char *names[3] = {"res", "a", "b"};
    const char *o = out.data;
    for (int i = 0; i < 3 && !rc; i++) {
        const char *x = in[i]->data;
        if (!(o + tri_tensor_bytes(out) <= x || x + tri_tensor_bytes(*in[i]) <= o))
            rc = TRI_ERR(TRI_EINVAL, "%s: 'out' overlaps '%s' (only res may alias a or b)", op, names[i]);
    }
    return rc;
}

/* ---- layernorm ---- */

/* b_name: "b" in forward; backward passes dw in that place. */
static int check_layernorm(const char *op, tri_tensor x, tri_tensor w, tri_tensor b,
                           const char *b_name, tri_tensor mean, tri_tensor rstd)
{
    int64_t N = tri_tensor_rows(x), C = tri_tensor_cols(x);
    int rc = tri_need_float(op, "inp", x);
    if (!rc) rc = tri_need_float(op, "w", w);
    if (!rc) rc = tri_need_numel(op, "w", w, C);
    if (!rc) rc = tri_need_float(op, b_name, b);
    if (!rc) rc = tri_need_numel(op, b_name, b, C);
    if (!rc) rc = tri_need(op, "mean", mean, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "mean", mean, N);
    if (!rc) rc = tri_need(op, "rstd", rstd, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "rstd", rstd, N);
    return rc;
}

int tri_op_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                             tri_tensor inp, tri_tensor w, tri_tensor b)
{
    int rc = check_layernorm("layernorm_forward", inp, w, b, "b", mean, rstd);
    if (!rc) rc = tri_need_float("layernorm_forward", "out", out);
    if (!rc) rc = tri_need_matrix("layernorm_forward", "out", out, tri_tensor_rows(inp), tri_tensor_cols(inp));
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &out, true);
    tri_widen_arg(&wd, &inp, false);
    tri_widen_arg(&wd, &w, false);
    tri_widen_arg(&wd, &b, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, layernorm_forward, out, mean, rstd, inp, w, b));
}

/* The backend's fused kernel where it has one and computes bf16 natively; else the two ops, whose
 * sequence is the definition (device.h). */
int tri_op_add_layernorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                 tri_tensor a, tri_tensor b, tri_tensor w, tri_tensor bias)
{
    const char *op = "add_layernorm_forward";
    int rc = check_residual(op, res, out, a, b);
    if (!rc) rc = check_layernorm(op, res, w, bias, "bias", mean, rstd);
    if (rc)
        return rc;
    if (!d->ops->add_layernorm_forward || !d->native_bf16) {
        rc = tri_op_add(d, res, a, b);
        return rc ? rc : tri_op_layernorm_forward(d, out, mean, rstd, res, w, bias);
    }
    return TRI_DISPATCH(d, add_layernorm_forward, res, out, mean, rstd, a, b, w, bias);
}

/* ---- exact weight gradients (exact_grads.c): the norms' rows in chunks of 64 ---- */

typedef struct norm_rows {
    tri_tensor dinp, dout, inp, w, mean, rstd, k_w;
    int64_t NH, NH_kv;
} norm_rows;

/* The exact path's checks of the arguments it cuts into rows: the chunks' own calls see row views,
 * which cannot tell a tensor shorter than the rows (they would read past it). dinp and dout (N, C). */
static int check_exact_rows(const char *op, tri_tensor dinp, tri_tensor dout, int64_t N, int64_t C)
{
    int rc = tri_need_float(op, "dinp", dinp);
    if (!rc) rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_matrix(op, "dinp", dinp, N, C);
    if (!rc) rc = tri_need_matrix(op, "dout", dout, N, C);
    return rc;
}

static int layernorm_chunk(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp)
{
    const norm_rows *a = ctx;
    return tri_op_layernorm_backward(d, tri_rows_view(a->dinp, r0, n), tmp[0], tmp[1], tri_rows_view(a->dout, r0, n),
                                     tri_rows_view(a->inp, r0, n), a->w, tri_tensor_range(a->mean, r0, n),
                                     tri_tensor_range(a->rstd, r0, n));
}

static int rmsnorm_chunk(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp)
{
    const norm_rows *a = ctx;
    return tri_op_rmsnorm_backward(d, tri_rows_view(a->dinp, r0, n), tmp[0], tri_rows_view(a->dout, r0, n),
                                   tri_rows_view(a->inp, r0, n), a->w, tri_tensor_range(a->rstd, r0, n));
}

static int rmsnorm_heads_chunk(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp)
{
    const norm_rows *a = ctx;
    int64_t H = a->NH + a->NH_kv;
    return tri_op_rmsnorm_heads_backward(d, tri_rows_view(a->dinp, r0, n), tmp[0], tmp[1], tri_rows_view(a->dout, r0, n),
                                         tri_rows_view(a->inp, r0, n), a->w, a->k_w,
                                         tri_tensor_range(a->rstd, r0 * H, n * H), a->NH, a->NH_kv);
}

int tri_op_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db,
                              tri_tensor dout, tri_tensor inp, tri_tensor w, tri_tensor mean,
                              tri_tensor rstd)
{
    const char *op = "layernorm_backward";
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    tri_tensor grads[2] = {dw, db};
    bool exact;
    int rc = tri_exact_grads_check(op, grads, 2, &exact);
    if (!rc && exact) {
        norm_rows a = {.dinp = dinp, .dout = dout, .inp = inp, .w = w, .mean = mean, .rstd = rstd};
        rc = check_layernorm(op, inp, w, w, "w", mean, rstd); /* (dw, db: by the chunks' calls) */
        if (!rc) rc = check_exact_rows(op, dinp, dout, N, C);
        return rc ? rc : tri_exact_grads_rows(d, op, N, TRI_COL_CHUNK, false, grads, 2, layernorm_chunk, &a);
    }
    if (!rc) rc = check_layernorm(op, inp, w, dw, "dw", mean, rstd);
    if (!rc) rc = tri_need_float(op, "db", db);
    if (!rc) rc = tri_need_numel(op, "db", db, C);
    if (!rc) rc = tri_need_float(op, "dinp", dinp);
    if (!rc) rc = tri_need_matrix(op, "dinp", dinp, N, C);
    if (!rc) rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_matrix(op, "dout", dout, N, C);
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &dinp, true);
    tri_widen_arg(&wd, &dw, true);
    tri_widen_arg(&wd, &db, true);
    tri_widen_arg(&wd, &dout, false);
    tri_widen_arg(&wd, &inp, false);
    tri_widen_arg(&wd, &w, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd));
}

/* ---- RMSNorm ---- */

static int check_rmsnorm(const char *op, tri_tensor inp, tri_tensor w, tri_tensor rstd)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    int rc = tri_need_float(op, "inp", inp);
    if (!rc) rc = tri_need_float(op, "w", w);
    if (!rc) rc = tri_need(op, "rstd", rstd, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "w", w, C);
    if (!rc) rc = tri_need_numel(op, "rstd", rstd, N);
    return rc;
}

int tri_op_rmsnorm_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps)
{
    const char *op = "rmsnorm_forward";
    int rc = check_rmsnorm(op, inp, w, rstd);
    if (!rc) rc = tri_need_float(op, "out", out);
    if (!rc) rc = tri_need_matrix(op, "out", out, tri_tensor_rows(inp), tri_tensor_cols(inp));
    if (!rc && !(eps > 0.0f))
        rc = TRI_ERR(TRI_EINVAL, "%s: eps %g must be positive", op, (double)eps);
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &out, true);
    tri_widen_arg(&wd, &inp, false);
    tri_widen_arg(&wd, &w, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, rmsnorm_forward, out, rstd, inp, w, eps));
}

/* As tri_op_add_layernorm_forward, for RMSNorm. */
int tri_op_add_rmsnorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor rstd, tri_tensor a,
                               tri_tensor b, tri_tensor w, float eps)
{
    const char *op = "add_rmsnorm_forward";
    int rc = check_residual(op, res, out, a, b);
    if (!rc) rc = check_rmsnorm(op, res, w, rstd);
    if (!rc && !(eps > 0.0f))
        rc = TRI_ERR(TRI_EINVAL, "%s: eps %g must be positive", op, (double)eps);
    if (rc)
        return rc;
    if (!d->ops->add_rmsnorm_forward || !d->native_bf16) {
        rc = tri_op_add(d, res, a, b);
        return rc ? rc : tri_op_rmsnorm_forward(d, out, rstd, res, w, eps);
    }
    return TRI_DISPATCH(d, add_rmsnorm_forward, res, out, rstd, a, b, w, eps);
}

int tri_op_rmsnorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp,
                            tri_tensor w, tri_tensor rstd)
{
    const char *op = "rmsnorm_backward";
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    if (dw.dtype == TRI_I64 && tri_tensor_present(dw)) {
        norm_rows a = {.dinp = dinp, .dout = dout, .inp = inp, .w = w, .rstd = rstd};
        int rc = check_rmsnorm(op, inp, w, rstd);
        if (!rc) rc = check_exact_rows(op, dinp, dout, N, C);
        return rc ? rc : tri_exact_grads_rows(d, op, N, TRI_COL_CHUNK, false, &dw, 1, rmsnorm_chunk, &a);
    }
    int rc = check_rmsnorm(op, inp, w, rstd);
    if (!rc) rc = tri_need_float(op, "dinp", dinp);
    if (!rc) rc = tri_need_float(op, "dw", dw);
    if (!rc) rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_matrix(op, "dinp", dinp, N, C);
    if (!rc) rc = tri_need_matrix(op, "dout", dout, N, C);
    if (!rc) rc = tri_need_numel(op, "dw", dw, C);
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &dinp, true);
    tri_widen_arg(&wd, &dw, true);
    tri_widen_arg(&wd, &dout, false);
    tri_widen_arg(&wd, &inp, false);
    tri_widen_arg(&wd, &w, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, rmsnorm_backward, dinp, dw, dout, inp, w, rstd));
}

/* ---- per-head RMSNorm (Qwen3's q_norm / k_norm) ---- */

static int check_rmsnorm_heads(const char *op, tri_tensor inp, tri_tensor q_w, tri_tensor k_w, tri_tensor rstd,
                               int64_t NH, int64_t NH_kv)
{
    int64_t N = tri_tensor_rows(inp), W = tri_tensor_cols(inp), HS = tri_tensor_numel(q_w);
    int rc = tri_need_float(op, "inp", inp);
    if (!rc) rc = tri_need_float(op, "q_w", q_w);
    if (!rc) rc = tri_need_float(op, "k_w", k_w);
    if (!rc) rc = tri_need(op, "rstd", rstd, TRI_F32);
    if (!rc && (NH < 1 || NH_kv < 1))
        rc = TRI_ERR(TRI_EINVAL, "%s: NH %lld and NH_kv %lld must be at least 1", op, (long long)NH,
                     (long long)NH_kv);
    if (!rc && HS < 1)
        rc = TRI_ERR(TRI_EINVAL, "%s: q_w is empty (it holds the head size HS)", op);
    if (!rc) rc = tri_need_numel(op, "k_w", k_w, HS);
    if (!rc && k_w.dtype != q_w.dtype)
        rc = TRI_ERR(TRI_EINVAL, "%s: k_w's dtype must be q_w's", op);
    if (!rc && (NH + NH_kv) * HS > W)
        rc = TRI_ERR(TRI_EINVAL, "%s: inp's rows of %lld columns cannot hold NH %lld + NH_kv %lld heads of HS %lld",
                     op, (long long)W, (long long)NH, (long long)NH_kv, (long long)HS);
    if (!rc) rc = tri_need_numel(op, "rstd", rstd, N * (NH + NH_kv));
    return rc;
}

int tri_op_rmsnorm_heads_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor q_w,
                                 tri_tensor k_w, int64_t NH, int64_t NH_kv, float eps)
{
    const char *op = "rmsnorm_heads_forward";
    int rc = check_rmsnorm_heads(op, inp, q_w, k_w, rstd, NH, NH_kv);
    if (!rc) rc = tri_need_float(op, "out", out);
    if (!rc) rc = tri_need_matrix(op, "out", out, tri_tensor_rows(inp), tri_tensor_cols(inp));
    if (!rc && out.data != inp.data && out.dtype != inp.dtype)
        rc = TRI_ERR(TRI_EINVAL, "%s: out and inp must have one dtype (the other columns are copied)", op);
    if (!rc && !(eps > 0.0f))
        rc = TRI_ERR(TRI_EINVAL, "%s: eps %g must be positive", op, (double)eps);
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &inp, false);
    tri_widen_arg(&wd, &out, true);
    tri_widen_arg(&wd, &q_w, false);
    tri_widen_arg(&wd, &k_w, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, rmsnorm_heads_forward, out, rstd, inp, q_w, k_w, NH, NH_kv,
                                                       eps));
}

int tri_op_rmsnorm_heads_backward(tri_device *d, tri_tensor dinp, tri_tensor dq_w, tri_tensor dk_w, tri_tensor dout,
                                  tri_tensor inp, tri_tensor q_w, tri_tensor k_w, tri_tensor rstd, int64_t NH,
                                  int64_t NH_kv)
{
    const char *op = "rmsnorm_heads_backward";
    int64_t N = tri_tensor_rows(inp), W = tri_tensor_cols(inp), HS = tri_tensor_numel(q_w);
    tri_tensor grads[2] = {dq_w, dk_w};
    bool exact;
    int rc = tri_exact_grads_check(op, grads, 2, &exact);
    if (!rc && exact) {
        rc = check_rmsnorm_heads(op, inp, q_w, k_w, rstd, NH, NH_kv); /* (rstd's rows are sliced per chunk) */
        if (!rc) rc = check_exact_rows(op, dinp, dout, N, W);
        norm_rows a = {.dinp = dinp, .dout = dout, .inp = inp, .w = q_w, .k_w = k_w, .rstd = rstd, .NH = NH,
                       .NH_kv = NH_kv};
        return rc ? rc : tri_exact_grads_rows(d, op, N, TRI_COL_CHUNK, false, grads, 2, rmsnorm_heads_chunk, &a);
    }
    if (!rc) rc = check_rmsnorm_heads(op, inp, q_w, k_w, rstd, NH, NH_kv);
    if (!rc) rc = tri_need_float(op, "dinp", dinp);
    if (!rc) rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_float(op, "dq_w", dq_w);
    if (!rc) rc = tri_need_float(op, "dk_w", dk_w);
    if (!rc) rc = tri_need_matrix(op, "dinp", dinp, N, W);
    if (!rc) rc = tri_need_matrix(op, "dout", dout, N, W);
    if (!rc && dinp.data != dout.data && dinp.dtype != dout.dtype)
        rc = TRI_ERR(TRI_EINVAL, "%s: dinp and dout must have one dtype (the other columns are copied)", op);
    if (!rc) rc = tri_need_numel(op, "dq_w", dq_w, HS);
    if (!rc) rc = tri_need_numel(op, "dk_w", dk_w, HS);
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &dout, false);
    tri_widen_arg(&wd, &dinp, true);
    tri_widen_arg(&wd, &dq_w, true);
    tri_widen_arg(&wd, &dk_w, true);
    tri_widen_arg(&wd, &inp, false);
    tri_widen_arg(&wd, &q_w, false);
    tri_widen_arg(&wd, &k_w, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, rmsnorm_heads_backward, dinp, dq_w, dk_w, dout, inp, q_w,
                                                       k_w, rstd, NH, NH_kv));
}
