/* engine/device/ops/matmul.c - the matmul ops' checked wrappers: matmul (transpose flags, bias,
 * accumulate) and bias_backward.
 *
 * Contracts in engine/device/ops_list.h. matmul checks that the inner dimensions agree and c is
 * (M, N), returns at once for an empty product, and dispatches; bias_backward checks dbias against
 * dout's columns. The CPU side is matmul_cpu.c; the CUDA one cuda/matmul/matmul.cu (cuBLASLt). */
#include "engine/device/ops_internal.h"

/* ---- matmul ---- */

int tri_op_matmul(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias,
                  bool trans_a, bool trans_b, float beta)
{
    char x[96], y[96];
    int rc = tri_need_float("matmul", "a", a);
    if (!rc) rc = tri_need_float("matmul", "b", b);
    if (!rc) rc = tri_need_float("matmul", "c", c);
    if (!rc && a.dtype != b.dtype)
        rc = TRI_ERR(TRI_EINVAL, "matmul: a %s and b %s must share a dtype", TRI_DESC(a, x), TRI_DESC(b, y));
    if (rc)
        return rc;
    int64_t M = trans_a ? tri_tensor_cols(a) : tri_tensor_rows(a);
    int64_t K = trans_a ? tri_tensor_rows(a) : tri_tensor_cols(a);
    int64_t Kb = trans_b ? tri_tensor_cols(b) : tri_tensor_rows(b);
    int64_t N = trans_b ? tri_tensor_rows(b) : tri_tensor_cols(b);
    if (K != Kb) {
        return TRI_ERR(TRI_EINVAL, "matmul: inner dimensions differ: a %s%s, b %s%s", TRI_DESC(a, x),
                       trans_a ? "^T" : "", TRI_DESC(b, y), trans_b ? "^T" : "");
    }
    rc = tri_need_matrix("matmul", "c", c, M, N);
    if (!rc && tri_tensor_present(bias)) {
        rc = tri_need("matmul", "bias", bias, c.dtype);
        if (!rc) rc = tri_need_numel("matmul", "bias", bias, N);
        if (!rc && beta != 0.0f)
            rc = TRI_ERR(TRI_EINVAL, "matmul: a bias needs beta == 0 (got %g)", (double)beta);
    }
    if (rc || M == 0 || N == 0)
        return rc;
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &c, true);
    tri_widen_arg(&w, &a, false);
    tri_widen_arg(&w, &b, false);
    tri_widen_arg(&w, &bias, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, matmul, c, a, b, bias, trans_a, trans_b, beta));
}

int tri_op_bias_backward(tri_device *d, tri_tensor dbias, tri_tensor dout)
{
    int rc = tri_need_float("bias_backward", "dbias", dbias);
    if (!rc) rc = tri_need_float("bias_backward", "dout", dout);
    if (!rc) rc = tri_need_numel("bias_backward", "dbias", dbias, tri_tensor_cols(dout));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dbias, true);
    tri_widen_arg(&w, &dout, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, bias_backward, dbias, dout));
}
