/* engine/device/ops/attention.c - the attention ops' checked wrappers: causal attention with its
 * (T, T) probabilities, fused (FlashAttention-2) attention, and the rotary position embedding
 * applied to q and k before it.
 *
 * Contracts in engine/device/ops_list.h. The checks read the layout of qkv ([q | k | v], grouped
 * key/value heads for the fused ops) from the shapes of qkv, the probabilities or the row
 * statistics, and out; an empty batch or sequence returns before any backend sees it. The CPU
 * loops are attention_cpu.c and flash_cpu.c; the CUDA ones cuda/attention/ (attention.cu, flash.cu,
 * flash_mma.cu, flash_kv.cu, rope.cu). The split-sequence forms (flash_attention_kv_*, _delta,
 * _merge, copy_columns) serve context parallelism (layers/cp_attention.c). */
#include "engine/device/ops_internal.h"

/* ---- attention ---- */

/* out_name: "out" in forward; backward passes dout in that place. */
static int check_attention(const char *op, tri_tensor out, const char *out_name, tri_tensor att,
                           tri_tensor qkv)
{
    char x[96], y[96];
    int rc = tri_need_float(op, "qkv", qkv);
    if (!rc) rc = tri_need_float(op, "att", att);
    if (!rc) rc = tri_need_float(op, out_name, out);
    if (rc)
        return rc;
    if (qkv.ndim != 3 || att.ndim != 4 || qkv.shape[2] % 3 != 0)
        return TRI_ERR(TRI_EINVAL, "%s: qkv %s must be (B, T, 3*C_l), att %s (B, NH_l, T, T)", op,
                       TRI_DESC(qkv, x), TRI_DESC(att, y));
    int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3, NH = att.shape[1];
    if (att.shape[0] != B || att.shape[2] != T || att.shape[3] != T || NH == 0 || C % NH != 0)
        return TRI_ERR(TRI_EINVAL, "%s: att %s does not match qkv %s (B, T, 3*C_l) with C_l %% NH_l == 0",
                       op, TRI_DESC(att, x), TRI_DESC(qkv, y));
    return tri_need_matrix(op, out_name, out, B * T, C);
}

int tri_op_attention_forward(tri_device *d, tri_tensor out, tri_tensor att, tri_tensor qkv)
{
    tri_widen w = tri_widen_start(d, check_attention("attention_forward", out, "out", att, qkv));
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &att, true);
    tri_widen_arg(&w, &qkv, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, attention_forward, out, att, qkv));
}

int tri_op_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout,
                              tri_tensor qkv, tri_tensor att)
{
    const char *op = "attention_backward";
    int rc = check_attention(op, dout, "dout", att, qkv);
    if (!rc) rc = tri_need_float(op, "dqkv", dqkv);
    if (!rc) rc = tri_need_numel(op, "dqkv", dqkv, tri_tensor_numel(qkv));
    if (!rc) rc = tri_need_float(op, "datt", datt);
    if (!rc) rc = tri_need_numel(op, "datt", datt, tri_tensor_numel(att));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dqkv, true);
    tri_widen_arg(&w, &datt, true);
    tri_widen_arg(&w, &dout, false);
    tri_widen_arg(&w, &qkv, false);
    tri_widen_arg(&w, &att, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, attention_backward, dqkv, datt, dout, qkv, att));
}

/* ---- fused attention ---- */

/* qkv (B, T, W) with W = C_l + 2 C_kv (engine/device/ops/attention_math.h tri_flash_dims), the f32 row
 * statistics `stats` (lse or delta) (B, NH_l, T), and out (B*T, C_l) (out_name: "out" or "dout"): C_l % NH_l
 * == 0, C_kv a multiple of the head size HS = C_l / NH_l dividing NH_l's heads into equal groups. */
static int check_flash(const char *op, tri_tensor out, const char *out_name, tri_tensor stats,
                       const char *stats_name, tri_tensor qkv)
{
    char x[96], y[96], z[96];
    int rc = tri_need_float(op, "qkv", qkv);
    if (!rc) rc = tri_need(op, stats_name, stats, TRI_F32);
    if (!rc) rc = tri_need_float(op, out_name, out);
    if (rc)
        return rc;
    if (qkv.ndim != 3 || stats.ndim != 3)
        return TRI_ERR(TRI_EINVAL, "%s: qkv %s must be (B, T, C_l + 2 C_kv), %s %s (B, NH_l, T)", op, TRI_DESC(qkv, x),
                       stats_name, TRI_DESC(stats, y));
    int64_t B = qkv.shape[0], T = qkv.shape[1], NH = stats.shape[1], C = tri_tensor_cols(out);
    if (stats.shape[0] != B || stats.shape[2] != T || NH == 0 || C % NH != 0)
        return TRI_ERR(TRI_EINVAL, "%s: %s %s does not match qkv %s and %s %s (B, NH_l, T) with C_l %% NH_l == 0",
                       op, stats_name, TRI_DESC(stats, x), TRI_DESC(qkv, y), out_name, TRI_DESC(out, z));
    int64_t HS = C / NH, kv = qkv.shape[2] - C;
    if (kv <= 0 || kv % (2 * HS) != 0 || NH % (kv / (2 * HS)) != 0)
        return TRI_ERR(TRI_EINVAL, "%s: qkv %s is not [q | k | v] for %s %s: its last dimension must be C_l + 2 "
                       "NH_kv HS with HS %lld and NH_kv dividing NH_l %lld", op, TRI_DESC(qkv, x), out_name,
                       TRI_DESC(out, y), (long long)HS, (long long)NH);
    return tri_need_matrix(op, out_name, out, B * T, C);
}

/* An empty batch or sequence (B or T 0) has nothing to compute: the ops return before any backend
 * sees it (a CUDA grid of 0 blocks is an invalid launch). */
int tri_op_flash_attention_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv)
{
    int rc = check_flash("flash_attention_forward", out, "out", lse, "lse", qkv);
    if (rc || tri_tensor_numel(qkv) == 0)
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &qkv, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, flash_attention_forward, out, lse, qkv));
}

int tri_op_flash_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                    tri_tensor qkv, tri_tensor out, tri_tensor lse)
{
    const char *op = "flash_attention_backward";
    int rc = check_flash(op, dout, "dout", lse, "lse", qkv);
    if (!rc) rc = check_flash(op, out, "out", delta, "delta", qkv);
    if (!rc) rc = tri_need_float(op, "dqkv", dqkv);
    if (!rc) rc = tri_need_numel(op, "dqkv", dqkv, tri_tensor_numel(qkv));
    if (!rc) rc = tri_need_numel(op, "delta", delta, tri_tensor_numel(lse));
    if (rc || tri_tensor_numel(qkv) == 0)
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dqkv, true);
    tri_widen_arg(&w, &dout, false);
    tri_widen_arg(&w, &qkv, false);
    tri_widen_arg(&w, &out, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, flash_attention_backward, dqkv, delta, dout, qkv, out, lse));
}

/* ---- fused attention across a split sequence ---- */

/* rows of a buffer of n rows: positions non-negative; a split (Tc < n) at a multiple of 64; key
 * chunks (`key`) at multiples of 64 (the tiles' absolute places). */
static int check_rows(const char *op, const char *name, tri_flash_rows r, int64_t n, bool key)
{
    bool split = r.Tc < n;
    if (r.Tc < 0 || r.pos0 < 0 || (split && r.pos1 < 0) || (split && r.Tc % TRI_FLASH_BR != 0) ||
        (key && (r.pos0 % TRI_FLASH_BC != 0 || (split && r.pos1 % TRI_FLASH_BC != 0))))
        return TRI_ERR(TRI_EINVAL, "%s: %s {Tc %lld, pos0 %lld, pos1 %lld} of %lld rows: positions must be >= 0, a "
                       "split chunk length (Tc < rows) a multiple of %d%s", op, name, (long long)r.Tc,
                       (long long)r.pos0, (long long)r.pos1, (long long)n, TRI_FLASH_BR,
                       key ? " and the key chunks' positions multiples of 64" : "");
    return TRI_OK;
}

/* The queries' side as check_flash, and kv (B, Tk, Wk) with Wk >= 2 C_kv; both row descriptions. */
static int check_flash_kv(const char *op, tri_tensor out, const char *out_name, tri_tensor stats,
                          const char *stats_name, tri_tensor qkv, tri_tensor kv, tri_flash_rows qrows,
                          tri_flash_rows krows)
{
    char x[96], y[96];
    int rc = check_flash(op, out, out_name, stats, stats_name, qkv);
    if (!rc) rc = tri_need_float(op, "kv", kv);
    if (rc)
        return rc;
    int64_t kvw = qkv.shape[2] - tri_tensor_cols(out);
    if (kv.ndim != 3 || kv.shape[0] != qkv.shape[0] || kv.shape[2] < kvw)
        return TRI_ERR(TRI_EINVAL, "%s: kv %s must be (B, Tk, Wk) with B of qkv %s and Wk >= 2 C_kv = %lld", op,
                       TRI_DESC(kv, x), TRI_DESC(qkv, y), (long long)kvw);
    rc = check_rows(op, "qrows", qrows, qkv.shape[1], false);
    if (!rc) rc = check_rows(op, "krows", krows, kv.shape[1], true);
    return rc;
}

int tri_op_flash_attention_kv_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv, tri_tensor kv,
                                      tri_flash_rows qrows, tri_flash_rows krows)
{
    const char *op = "flash_attention_kv_forward";
    int rc = check_flash_kv(op, out, "out", lse, "lse", qkv, kv, qrows, krows);
    if (rc || tri_tensor_numel(qkv) == 0) /* Tk 0 runs: every row sees no key */
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &qkv, false);
    tri_widen_arg(&w, &kv, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, flash_attention_kv_forward, out, lse, qkv, kv, qrows, krows));
}

int tri_op_flash_attention_delta(tri_device *d, tri_tensor delta, tri_tensor dout, tri_tensor out)
{
    const char *op = "flash_attention_delta";
    char x[96], y[96], z[96];
    int rc = tri_need(op, "delta", delta, TRI_F32);
    if (!rc) rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_float(op, "out", out);
    if (rc)
        return rc;
    if (delta.ndim != 3 || dout.ndim != 3 || tri_tensor_numel(out) != tri_tensor_numel(dout) ||
        dout.shape[0] != delta.shape[0] || dout.shape[1] != delta.shape[2] || delta.shape[1] == 0 ||
        dout.shape[2] % delta.shape[1] != 0)
        return TRI_ERR(TRI_EINVAL, "%s: delta %s must be (B, NH_l, T) for dout %s and out %s (B, T, C_l), C_l %% NH_l "
                       "== 0", op, TRI_DESC(delta, x), TRI_DESC(dout, y), TRI_DESC(out, z));
    if (tri_tensor_numel(delta) == 0)
        return TRI_OK;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dout, false);
    tri_widen_arg(&w, &out, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, flash_attention_delta, delta, dout, out));
}

/* The backward passes' common checks: grad is dqkv (qkv's numel) or dkv (kv's numel). */
static int check_flash_kv_backward(const char *op, tri_tensor grad, const char *grad_name, int64_t numel,
                                   tri_tensor dout, tri_tensor qkv, tri_tensor kv, tri_tensor lse, tri_tensor delta,
                                   tri_flash_rows qrows, tri_flash_rows krows)
{
    int rc = check_flash_kv(op, dout, "dout", lse, "lse", qkv, kv, qrows, krows);
    if (!rc) rc = tri_need(op, "delta", delta, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "delta", delta, tri_tensor_numel(lse));
    if (!rc) rc = tri_need_float(op, grad_name, grad);
    if (!rc) rc = tri_need_numel(op, grad_name, grad, numel);
    return rc;
}

int tri_op_flash_attention_kv_backward_dq(tri_device *d, tri_tensor dqkv, tri_tensor dout, tri_tensor qkv,
                                          tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                          tri_flash_rows krows, bool accumulate)
{
    const char *op = "flash_attention_kv_backward_dq";
    int rc = check_flash_kv_backward(op, dqkv, "dqkv", tri_tensor_numel(qkv), dout, qkv, kv, lse, delta, qrows, krows);
    if (rc || tri_tensor_numel(qkv) == 0) /* Tk 0 runs: no gradient, dq zeroed unless accumulating */
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dqkv, true);
    tri_widen_arg(&w, &dout, false);
    tri_widen_arg(&w, &qkv, false);
    tri_widen_arg(&w, &kv, false);
    return tri_widen_end(&w, w.rc ? 0
                                  : TRI_DISPATCH(d, flash_attention_kv_backward_dq, dqkv, dout, qkv, kv, lse, delta,
                                                 qrows, krows, accumulate));
}

int tri_op_flash_attention_kv_backward_dkv(tri_device *d, tri_tensor dkv, tri_tensor dout, tri_tensor qkv,
                                           tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                           tri_flash_rows krows, bool accumulate)
{
    const char *op = "flash_attention_kv_backward_dkv";
    int rc = check_flash_kv_backward(op, dkv, "dkv", tri_tensor_numel(kv), dout, qkv, kv, lse, delta, qrows, krows);
    if (rc || tri_tensor_numel(kv) == 0) /* no query (T 0) runs: dkv zeroed unless accumulating */
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dkv, true);
    tri_widen_arg(&w, &dout, false);
    tri_widen_arg(&w, &qkv, false);
    tri_widen_arg(&w, &kv, false);
    return tri_widen_end(&w, w.rc ? 0
                                  : TRI_DISPATCH(d, flash_attention_kv_backward_dkv, dkv, dout, qkv, kv, lse, delta,
                                                 qrows, krows, accumulate));
}

int tri_op_flash_attention_kv_backward(tri_device *d, tri_tensor dqkv, tri_tensor dkv, tri_tensor dout, tri_tensor qkv,
                                       tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                       tri_flash_rows krows, bool accumulate)
{
    const char *op = "flash_attention_kv_backward";
    int rc = check_flash_kv_backward(op, dqkv, "dqkv", tri_tensor_numel(qkv), dout, qkv, kv, lse, delta, qrows, krows);
    if (!rc) rc = tri_need_float(op, "dkv", dkv);
    if (!rc) rc = tri_need_numel(op, "dkv", dkv, tri_tensor_numel(kv));
    if (rc || tri_tensor_numel(qkv) == 0 || tri_tensor_numel(kv) == 0) /* an empty side: each pass alone */
        return rc ? rc
                  : tri_tensor_numel(qkv) == 0
                        ? tri_op_flash_attention_kv_backward_dkv(d, dkv, dout, qkv, kv, lse, delta, qrows, krows, accumulate)
                        : tri_op_flash_attention_kv_backward_dq(d, dqkv, dout, qkv, kv, lse, delta, qrows, krows, accumulate);
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dqkv, true);
    tri_widen_arg(&w, &dkv, true);
    tri_widen_arg(&w, &dout, false);
    tri_widen_arg(&w, &qkv, false);
    tri_widen_arg(&w, &kv, false);
    return tri_widen_end(&w, w.rc ? 0
                                  : TRI_DISPATCH(d, flash_attention_kv_backward, dqkv, dkv, dout, qkv, kv, lse, delta,
                                                 qrows, krows, accumulate));
}

int tri_op_flash_attention_merge(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor out2, tri_tensor lse2)
{
    const char *op = "flash_attention_merge";
    char x[96], y[96];
    int rc = tri_need_float(op, "out", out);
    if (!rc) rc = tri_need_float(op, "out2", out2);
    if (!rc) rc = tri_need(op, "lse", lse, TRI_F32);
    if (!rc) rc = tri_need(op, "lse2", lse2, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "out2", out2, tri_tensor_numel(out));
    if (!rc) rc = tri_need_numel(op, "lse2", lse2, tri_tensor_numel(lse));
    if (rc)
        return rc;
    if (out.ndim != 3 || lse.ndim != 3 || lse.shape[0] != out.shape[0] || lse.shape[2] != out.shape[1] ||
        lse.shape[1] == 0 || out.shape[2] % lse.shape[1] != 0)
        return TRI_ERR(TRI_EINVAL, "%s: out %s must be (B, T, C_l) and lse %s (B, NH_l, T) with C_l %% NH_l == 0", op,
                       TRI_DESC(out, x), TRI_DESC(lse, y));
    if (tri_tensor_numel(out) == 0)
        return TRI_OK;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &out2, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, flash_attention_merge, out, lse, out2, lse2));
}

int tri_op_copy_columns(tri_device *d, tri_tensor dst, int64_t dst_col, tri_tensor src, int64_t src_col, int64_t n)
{
    const char *op = "copy_columns";
    char x[96], y[96];
    int rc = tri_need_float(op, "dst", dst);
    if (!rc) rc = tri_need_float(op, "src", src);
    if (rc)
        return rc;
    int64_t N = tri_tensor_rows(dst), Wd = tri_tensor_cols(dst), Ws = tri_tensor_cols(src);
    if (tri_tensor_rows(src) != N || n < 0 || dst_col < 0 || src_col < 0 || dst_col + n > Wd || src_col + n > Ws)
        return TRI_ERR(TRI_EINVAL, "%s: columns [%lld, %lld) of dst %s and [%lld, %lld) of src %s: the rows must agree "
                       "and the columns lie inside each", op, (long long)dst_col, (long long)(dst_col + n),
                       TRI_DESC(dst, x), (long long)src_col, (long long)(src_col + n), TRI_DESC(src, y));
    if (N == 0 || n == 0)
        return TRI_OK;
    return TRI_DISPATCH(d, copy_columns, dst, dst_col, src, src_col, n);
}

/* ---- rotary position embedding ---- */

static int check_rope(const char *op, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                      int64_t row0, int cp, int cp_rank)
{
    char a[96], b[96];
    int rc = tri_need_float(op, "x", x);
    if (!rc) rc = tri_need(op, "cos", cos, TRI_F32);
    if (!rc) rc = tri_need(op, "sin", sin, TRI_F32);
    if (rc)
        return rc;
    int64_t half = tri_tensor_cols(cos);
    if (tri_tensor_rows(sin) != tri_tensor_rows(cos) || tri_tensor_cols(sin) != half)
        return TRI_ERR(TRI_EINVAL, "%s: sin %s must match cos %s (positions, HS/2)", op, TRI_DESC(sin, a),
                       TRI_DESC(cos, b));
    if (half < 1 || n_heads < 1 || 2 * half * n_heads > tri_tensor_cols(x))
        return TRI_ERR(TRI_EINVAL, "%s: %lld heads of %lld (2 x cos's columns) do not fit x %s", op,
                       (long long)n_heads, (long long)(2 * half), TRI_DESC(x, a));
    if (T < 1 || T > tri_tensor_rows(cos) || row0 < 0)
        return TRI_ERR(TRI_EINVAL, "%s: positions up to T %lld (row0 %lld) need that many rows of cos %s", op,
                       (long long)T, (long long)row0, TRI_DESC(cos, a));
    return tri_check_seq_split(op, T, cp, cp_rank);
}

int tri_op_rope_forward(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                        int64_t row0, int cp, int cp_rank)
{
    tri_widen wd = tri_widen_start(d, check_rope("rope_forward", x, cos, sin, n_heads, T, row0, cp, cp_rank));
    tri_widen_arg(&wd, &x, true);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, rope_forward, x, cos, sin, n_heads, T, row0, cp, cp_rank));
}

int tri_op_rope_backward(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                         int64_t row0, int cp, int cp_rank)
{
    tri_widen wd = tri_widen_start(d, check_rope("rope_backward", dx, cos, sin, n_heads, T, row0, cp, cp_rank));
    tri_widen_arg(&wd, &dx, true);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, rope_backward, dx, cos, sin, n_heads, T, row0, cp, cp_rank));
}
