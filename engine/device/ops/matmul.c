/* engine/device/ops/matmul.c - the matmul ops' checked wrappers: matmul (transpose flags, bias,
 * accumulate) and bias_backward.
 *
 * Contracts in engine/device/ops_list.h. matmul checks that the inner dimensions agree and c is
 * (M, N), returns at once for an empty product, and dispatches; bias_backward checks dbias against
 * dout's columns. The grouped matmuls (the experts' GEMMs) check the stacked weights (G, out, in) and
 * the host counts (each >= 0, their sum within the rows). The CPU side is matmul_cpu.c; the CUDA one
 * cuda/matmul/matmul.cu (cuBLASLt) and cuda/matmul/grouped_matmul.cu. */
#include "engine/device/ops_internal.h"

/* ---- matmul ---- */

/* Exact weight gradients (exact_grads.c): c i64 += a^T b per chunk of a's and b's rows. */
typedef struct matmul_rows {
    tri_tensor a, b;
    bool grouped;
    const int32_t *counts;
} matmul_rows;

static int matmul_chunk(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp)
{
    const matmul_rows *m = ctx;
    if (m->grouped) /* the experts: the call's rows at once (exact_grads.c) */
        return tri_op_grouped_matmul_backward_weight(d, tmp[0], m->a, m->b, m->counts, 0.0f);
    return tri_op_matmul(d, tmp[0], tri_rows_view(m->a, r0, n), tri_rows_view(m->b, r0, n), tri_tensor_none(), true,
                         false, 0.0f);
}

static int matmul_exact(tri_device *d, const char *op, tri_tensor c, matmul_rows m, bool trans_a, bool trans_b,
                        float beta)
{
    char x[96], y[96];
    if (!trans_a || trans_b || beta != 1.0f)
        return TRI_ERR(TRI_EINVAL, "%s: an int64 c (exact gradient sums) takes c += a^T b (trans_a, not trans_b, beta "
                       "1), got trans_a %d trans_b %d beta %g", op, trans_a, trans_b, (double)beta);
    if (!m.grouped && tri_tensor_rows(m.a) != tri_tensor_rows(m.b))
        return TRI_ERR(TRI_EINVAL, "%s: inner dimensions differ: a %s^T, b %s", op, TRI_DESC(m.a, x), TRI_DESC(m.b, y));
    int64_t chunk = m.grouped ? 0 : TRI_COL_CHUNK;
    return tri_exact_grads_rows(d, op, tri_tensor_rows(m.a), chunk, !m.grouped, &c, 1, matmul_chunk, &m);
}

int tri_op_matmul(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias,
                  bool trans_a, bool trans_b, float beta)
{
    char x[96], y[96];
    if (c.dtype == TRI_I64 && tri_tensor_present(c) && !tri_tensor_present(bias))
        return matmul_exact(d, "matmul", c, (matmul_rows){.a = a, .b = b}, trans_a, trans_b, beta);
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
    /* deterministic mode (the device's exact gradients set): the rows of c in chunks of 64, so that
       each row is computed by a GEMM of the same shape in every layout (a BLAS or cuBLASLt may round
       a row differently by the call's row count: edge kernels, algorithm choice) */
    if (!trans_a && M > TRI_COL_CHUNK && tri_tensor_present(d->exact.scratch)) {
        for (int64_t r0 = 0; r0 < M && !rc; r0 += TRI_COL_CHUNK) {
            int64_t n = M - r0 < TRI_COL_CHUNK ? M - r0 : TRI_COL_CHUNK;
            rc = tri_op_matmul(d, tri_rows_view(c, r0, n), tri_rows_view(a, r0, n), b, bias, false, trans_b, beta);
        }
        return rc;
    }
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &c, true);
    tri_widen_arg(&w, &a, false);
    tri_widen_arg(&w, &b, false);
    tri_widen_arg(&w, &bias, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, matmul, c, a, b, bias, trans_a, trans_b, beta));
}

static int bias_chunk(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp)
{
    return tri_op_bias_backward(d, tmp[0], tri_rows_view(*(const tri_tensor *)ctx, r0, n));
}

int tri_op_bias_backward(tri_device *d, tri_tensor dbias, tri_tensor dout)
{
    if (dbias.dtype == TRI_I64 && tri_tensor_present(dbias)) /* exact sums per 64 rows (exact_grads.c) */
        return tri_exact_grads_rows(d, "bias_backward", tri_tensor_rows(dout), TRI_COL_CHUNK, false, &dbias, 1,
                                    bias_chunk, &dout);
    int rc = tri_need_float("bias_backward", "dbias", dbias);
    if (!rc) rc = tri_need_float("bias_backward", "dout", dout);
    if (!rc) rc = tri_need_numel("bias_backward", "dbias", dbias, tri_tensor_cols(dout));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dbias, true);
    tri_widen_arg(&w, &dout, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, bias_backward, dbias, dout));
}

/* ---- grouped matmul (the experts' GEMMs) ---- */

/* w is (G, N_out, C) and counts G non-negative ints summing to at most P rows; G, N_out, C out. */
static int check_grouped(const char *op, tri_tensor w, const char *w_name, const int32_t *counts, int64_t P,
                         int64_t *G, int64_t *N_out, int64_t *C)
{
    char x[96];
    int rc = tri_need_float(op, w_name, w);
    if (!rc && w.ndim != 3)
        rc = TRI_ERR(TRI_EINVAL, "%s: %s %s must be 3-d (groups, out, in)", op, w_name, TRI_DESC(w, x));
    if (!rc && !counts)
        rc = TRI_ERR(TRI_EINVAL, "%s: counts is NULL: expected a host array of %lld rows per group", op,
                     (long long)w.shape[0]);
    if (rc)
        return rc;
    *G = w.shape[0], *N_out = w.shape[1], *C = w.shape[2];
    int64_t sum = 0;
    for (int64_t g = 0; g < *G; g++) {
        if (counts[g] < 0)
            return TRI_ERR(TRI_EINVAL, "%s: counts[%lld] = %d: expected a row count >= 0", op, (long long)g,
                           (int)counts[g]);
        sum += counts[g];
    }
    if (sum > P)
        return TRI_ERR(TRI_EINVAL, "%s: counts sum to %lld rows: expected at most the %lld rows of the stacked "
                       "inputs", op, (long long)sum, (long long)P);
    return TRI_OK;
}

int tri_op_grouped_matmul_forward(tri_device *d, tri_tensor out, tri_tensor x, tri_tensor w, const int32_t *counts)
{
    const char *op = "grouped_matmul_forward";
    int64_t G, N_out, C, P = tri_tensor_rows(x);
    int rc = tri_need_float(op, "x", x);
    if (!rc) rc = tri_need_float(op, "out", out);
    if (!rc) rc = check_grouped(op, w, "w", counts, P, &G, &N_out, &C);
    if (!rc && w.dtype != x.dtype)
        rc = TRI_ERR(TRI_EINVAL, "%s: x and w must share a dtype (x %s, w %s)", op, tri_dtype_name(x.dtype),
                     tri_dtype_name(w.dtype));
    if (!rc) rc = tri_need_matrix(op, "x", x, P, C);
    if (!rc) rc = tri_need_matrix(op, "out", out, P, N_out);
    if (rc || P == 0 || G == 0)
        return rc;
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &out, true);
    tri_widen_arg(&wd, &x, false);
    tri_widen_arg(&wd, &w, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, grouped_matmul_forward, out, x, w, counts));
}

int tri_op_grouped_matmul_backward_input(tri_device *d, tri_tensor dx, tri_tensor dout, tri_tensor w,
                                         const int32_t *counts, float beta)
{
    const char *op = "grouped_matmul_backward_input";
    int64_t G, N_out, C, P = tri_tensor_rows(dout);
    int rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_float(op, "dx", dx);
    if (!rc) rc = check_grouped(op, w, "w", counts, P, &G, &N_out, &C);
    if (!rc && w.dtype != dout.dtype)
        rc = TRI_ERR(TRI_EINVAL, "%s: dout and w must share a dtype (dout %s, w %s)", op, tri_dtype_name(dout.dtype),
                     tri_dtype_name(w.dtype));
    if (!rc) rc = tri_need_matrix(op, "dout", dout, P, N_out);
    if (!rc) rc = tri_need_matrix(op, "dx", dx, P, C);
    if (rc || P == 0 || G == 0)
        return rc;
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &dx, true);
    tri_widen_arg(&wd, &dout, false);
    tri_widen_arg(&wd, &w, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, grouped_matmul_backward_input, dx, dout, w, counts, beta));
}

int tri_op_grouped_matmul_backward_weight(tri_device *d, tri_tensor dw, tri_tensor dout, tri_tensor x,
                                          const int32_t *counts, float beta)
{
    const char *op = "grouped_matmul_backward_weight";
    if (dw.dtype == TRI_I64 && tri_tensor_present(dw)) /* the call's GEMM added exactly (exact_grads.c) */
        return matmul_exact(d, op, dw, (matmul_rows){.a = dout, .b = x, .grouped = true, .counts = counts}, true, false,
                            beta);
    int64_t G, N_out, C, P = tri_tensor_rows(dout);
    int rc = tri_need_float(op, "dout", dout);
    if (!rc) rc = tri_need_float(op, "x", x);
    if (!rc) rc = check_grouped(op, dw, "dw", counts, P, &G, &N_out, &C);
    if (!rc && x.dtype != dout.dtype)
        rc = TRI_ERR(TRI_EINVAL, "%s: dout and x must share a dtype (dout %s, x %s)", op, tri_dtype_name(dout.dtype),
                     tri_dtype_name(x.dtype));
    if (!rc) rc = tri_need_matrix(op, "dout", dout, P, N_out);
    if (!rc) rc = tri_need_matrix(op, "x", x, P, C);
    if (rc || G == 0 || N_out == 0 || C == 0)
        return rc;
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &dw, true);
    tri_widen_arg(&wd, &dout, false);
    tri_widen_arg(&wd, &x, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, grouped_matmul_backward_weight, dw, dout, x, counts, beta));
}
