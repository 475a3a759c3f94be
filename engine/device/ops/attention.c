/* engine/device/ops/attention.c - the attention ops' checked wrappers: causal attention with its
 * (T, T) probabilities, fused (FlashAttention-2) attention, and the rotary position embedding
 * applied to q and k before it.
 *
 * Contracts in engine/device/ops_list.h. The checks read the layout of qkv ([q | k | v], grouped
 * key/value heads for the fused ops) from the shapes of qkv, the probabilities or the row
 * statistics, and out; an empty batch or sequence returns before any backend sees it. The CPU
 * loops are attention_cpu.c and flash_cpu.c; the CUDA ones cuda/attention/ (attention.cu, flash.cu,
 * flash_mma.cu, rope.cu). */
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
