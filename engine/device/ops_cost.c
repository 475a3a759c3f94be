/* engine/device/ops_cost.c - what each op's GPU kernels move and compute, for the cost device
 * (engine/device/device_cost.h says the units and the counting rules).
 *
 * One function per row of engine/device/ops_list.h, with the row's params, mirroring the kernels
 * the CUDA backend launches for it (cuda/<family>/<family>.cu, the fast path: the simple twins and
 * the mixed-dtype fallbacks are not modelled). Each starts the call (tri_cost_call) and appends
 * one record per launch (tri_cost_kernel). Bytes count every tensor a kernel reads or writes once
 * at its dtype's size; an accumulating output (+=) is read and written; a row a kernel walks
 * several times (a softmax row: max, sum, write) is counted once, assumed held in L1/L2. FLOPs of
 * element-wise kernels are rough per-element counts (they never bind: an H100's fp32 rate of 67
 * TFLOP/s against 3.35 TB/s needs 20 FLOPs a byte to). */
#include <stdint.h>

#include "engine/core/math.h"
#include "engine/core/status.h"
#include "engine/device/cost_ops.h"
#include "engine/device/launch_shapes.h"
#include "engine/device/ops/attention_math.h"
#include "engine/device/ops/moe_dispatch_math.h"
#include "engine/device/ops/moe_router_math.h"

/* FLOPs per element of the element-wise families (rough: their kernels are memory bound). */
#define NORM_FWD_FLOPS 8.0   /* mean, variance, normalise, scale and shift */
#define NORM_BWD_FLOPS 12.0  /* the two row sums and the input gradient */
#define GELU_FLOPS 15.0      /* tanh approximation: cube, polynomial, tanh, products */
#define EXP_FLOPS 4.0        /* an exp, a subtraction, a sum */
#define ADAMW_FLOPS 15.0     /* moments, bias corrections, sqrt, division, decay */

/* The backend's launch shapes (engine/device/launch_shapes.h, which cuda/ includes too) and the
 * fused attention's tiles (TRI_FLASH_BR, engine/device/ops/attention_math.h). */

static double bytes(tri_tensor t)
{
    return tri_tensor_present(t) ? (double)tri_tensor_bytes(t) : 0.0;
}

static double numel(tri_tensor t)
{
    return tri_tensor_present(t) ? (double)tri_tensor_numel(t) : 0.0;
}

static double esize(tri_tensor t)
{
    return (double)tri_dtype_size(t.dtype);
}

/* Chunks of an n-element reduction (cuda/elementwise/reduce.cu chunk_for). */
static int64_t reduce_chunks(int64_t n)
{
    int64_t chunk = (n + TRI_CUDA_MAX_PARTIALS - 1) / TRI_CUDA_MAX_PARTIALS;
    chunk = chunk < TRI_REDUCE_MIN_CHUNK ? TRI_REDUCE_MIN_CHUNK : chunk;
    return (n + chunk - 1) / chunk;
}

/* A one-kernel op. */
static int one(tri_device *d, const char *name, double b, double flops)
{
    tri_cost_call(d, name);
    return tri_cost_kernel(d, b, 0, flops);
}

/* The two launches of a full reduction of x (chunk sums in double, then their total into out). */
static int reduction(tri_device *d, const char *name, tri_tensor out, tri_tensor x, double flops_per_element)
{
    double partials = 8.0 * (double)reduce_chunks(tri_tensor_numel(x));
    tri_cost_call(d, name);
    int rc = tri_cost_kernel(d, bytes(x) + partials, 0, flops_per_element * numel(x));
    return rc ? rc : tri_cost_kernel(d, partials + 2 * bytes(out), 0, partials / 8);
}

/* Column sums of dout(N, C) into acc(C) (+=) through fp32 chunk partials: the second pass of
 * cuda/matmul/colsum.kern.h (the first pass is the caller's). */
static int col_finish(tri_device *d, tri_tensor acc, int64_t N, int64_t C)
{
    double partials = 4.0 * (double)tri_col_chunks(N) * (double)C;
    return tri_cost_kernel(d, partials + 2 * bytes(acc), 0, partials / 4);
}

/* ---- element-wise and reductions ---- */

int tri_cost_fill(tri_device *d, tri_tensor x, float value)
{
    (void)value;
    return one(d, "fill", bytes(x), 0);
}

int tri_cost_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b)
{
    return one(d, "add", bytes(a) + bytes(b) + bytes(out), numel(out));
}

int tri_cost_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x)
{
    (void)alpha;
    return one(d, "axpy", bytes(x) + 2 * bytes(y), 2 * numel(y));
}

int tri_cost_scale(tri_device *d, tri_tensor x, float s)
{
    (void)s;
    return one(d, "scale", 2 * bytes(x), numel(x));
}

int tri_cost_sum_squares(tri_device *d, tri_tensor out, tri_tensor x)
{
    return reduction(d, "sum_squares", out, x, 2);
}

int tri_cost_count_nonfinite(tri_device *d, tri_tensor out, tri_tensor x)
{
    return reduction(d, "count_nonfinite", out, x, 1);
}

/* Groups of TRI_SQ_GROUP pieces, two launches a group (the workspace limit on a group's chunks is not
 * modelled: GPT-2 124M's 148 parameters are one group). */
int tri_cost_sum_squares_multi(tri_device *d, tri_tensor out, const tri_tensor *xs, const int64_t *slots, int n)
{
    (void)slots;
    tri_cost_call(d, "sum_squares_multi");
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k += TRI_SQ_GROUP) {
        double b = 0, partials = 0, flops = 0;
        for (int j = k; j < n && j < k + TRI_SQ_GROUP; j++) {
            b += bytes(xs[j]);
            partials += 8.0 * (double)reduce_chunks(tri_tensor_numel(xs[j]));
            flops += 2 * numel(xs[j]);
        }
        rc = tri_cost_kernel(d, b + partials, 0, flops);
        if (!rc) rc = tri_cost_kernel(d, partials + 2 * bytes(out), 0, partials / 8);
    }
    return rc;
}

int tri_cost_convert(tri_device *d, tri_tensor dst, tri_tensor src)
{
    return one(d, "convert", bytes(dst) + bytes(src), 0);
}

/* ---- matmul ---- */

/* c(M,N) = op(a) op(b) (+ bias) (+ beta c): a, b and c once each (c read too when beta != 0), 2 M N K
 * FLOPs on the tensor cores for bf16 operands, on the CUDA cores for fp32 (COMPUTE_32F, no TF32). A
 * bias less than 16-byte aligned is broadcast into c by a kernel first, then c = a b + 1 c. */
int tri_cost_matmul(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias, bool trans_a,
                    bool trans_b, float beta)
{
    double M = (double)(trans_a ? tri_tensor_cols(a) : tri_tensor_rows(a));
    double K = (double)(trans_a ? tri_tensor_rows(a) : tri_tensor_cols(a));
    double N = (double)(trans_b ? tri_tensor_rows(b) : tri_tensor_cols(b));
    bool tc = a.dtype == TRI_BF16;
    tri_cost_call(d, "matmul");
    int rc = TRI_OK;
    bool reads_c = beta != 0.0f;
    if (tri_tensor_present(bias) && (uintptr_t)bias.data % TRI_BIAS_EPILOGUE_ALIGN != 0) {
        rc = tri_cost_kernel(d, bytes(c) + bytes(bias), 0, 0);
        bias = tri_tensor_none();
        reads_c = true;
    }
    double flops = 2 * M * N * K;
    double traffic = bytes(a) + bytes(b) + bytes(c) * (reads_c ? 2 : 1) + bytes(bias);
    return rc ? rc : tri_cost_kernel(d, traffic, tc ? flops : 0, tc ? 0 : flops);
}

/* The grouped matmuls: one product per group of rows, as cuda/matmul/grouped_matmul.cu launches them
 * (tri_cost_matmul's accounting per group, under one call). */
static int grouped(tri_device *d, const char *name, tri_tensor rows, tri_tensor stacked, tri_tensor w,
                   const int32_t *counts, float beta, int kind)
{
    int64_t G = w.shape[0], N_out = w.shape[1], C = w.shape[2], r_cols = tri_tensor_cols(rows);
    double rsz = esize(rows), ssz = esize(stacked), wsz = esize(w), mat = (double)N_out * (double)C;
    bool tc = stacked.dtype == TRI_BF16;
    tri_cost_call(d, name);
    int rc = TRI_OK;
    for (int64_t g = 0; g < G && !rc; g++) {
        double m = (double)counts[g];
        if (m == 0 && kind != 2)
            continue;
        double flops = 2 * m * mat, traffic;
        if (kind == 0) /* out(m, N_out) = x(m, C) w^T */
            traffic = m * (double)C * ssz + mat * wsz + m * (double)N_out * rsz;
        else if (kind == 1) /* dx(m, C) = dout(m, N_out) w (+ beta dx) */
            traffic = m * (double)N_out * ssz + mat * wsz + m * (double)r_cols * rsz * (beta != 0.0f ? 2 : 1);
        else /* dw = dout^T x + beta dw */
            traffic = m * (double)N_out * ssz + m * (double)r_cols * rsz + mat * wsz * (beta != 0.0f ? 2 : 1);
        rc = tri_cost_kernel(d, traffic, tc ? flops : 0, tc ? 0 : flops);
    }
    return rc;
}

int tri_cost_grouped_matmul_forward(tri_device *d, tri_tensor out, tri_tensor x, tri_tensor w, const int32_t *counts)
{
    return grouped(d, "grouped_matmul_forward", out, x, w, counts, 0.0f, 0);
}

int tri_cost_grouped_matmul_backward_input(tri_device *d, tri_tensor dx, tri_tensor dout, tri_tensor w,
                                           const int32_t *counts, float beta)
{
    return grouped(d, "grouped_matmul_backward_input", dx, dout, w, counts, beta, 1);
}

int tri_cost_grouped_matmul_backward_weight(tri_device *d, tri_tensor dw, tri_tensor dout, tri_tensor x,
                                            const int32_t *counts, float beta)
{
    return grouped(d, "grouped_matmul_backward_weight", x, dout, dw, counts, beta, 2);
}

/* Two passes: column chunk sums of dout into fp32 partials, then their total into dbias. */
int tri_cost_bias_backward(tri_device *d, tri_tensor dbias, tri_tensor dout)
{
    int64_t N = tri_tensor_rows(dout), OC = tri_tensor_cols(dout);
    double partials = 4.0 * (double)tri_col_chunks(N) * (double)OC;
    tri_cost_call(d, "bias_backward");
    int rc = tri_cost_kernel(d, bytes(dout) + partials, 0, numel(dout));
    return rc ? rc : col_finish(d, dbias, N, OC);
}

/* ---- norms: a warp per row forward; backward the input gradient a warp per row, then the
 * parameter gradients as column chunk sums (a pass over dout and inp) and one finish each ---- */

int tri_cost_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd, tri_tensor inp,
                               tri_tensor w, tri_tensor b)
{
    return one(d, "layernorm_forward",
               bytes(inp) + bytes(w) + bytes(b) + bytes(out) + bytes(mean) + bytes(rstd),
               NORM_FWD_FLOPS * numel(inp));
}

int tri_cost_add_layernorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                   tri_tensor a, tri_tensor b, tri_tensor w, tri_tensor bias)
{
    return one(d, "add_layernorm_forward",
               bytes(a) + bytes(b) + bytes(res) + bytes(out) + bytes(mean) + bytes(rstd) + bytes(w) + bytes(bias),
               (NORM_FWD_FLOPS + 1) * numel(a));
}

int tri_cost_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db, tri_tensor dout,
                                tri_tensor inp, tri_tensor w, tri_tensor mean, tri_tensor rstd)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    double stats = bytes(mean) + bytes(rstd), partials = 2 * 4.0 * (double)tri_col_chunks(N) * (double)C;
    tri_cost_call(d, "layernorm_backward");
    int rc = tri_cost_kernel(d, bytes(dout) + bytes(inp) + bytes(w) + stats + 2 * bytes(dinp), 0,
                             NORM_BWD_FLOPS * numel(inp));
    if (!rc) rc = tri_cost_kernel(d, bytes(dout) + bytes(inp) + stats + partials, 0, 4 * numel(inp));
    if (!rc) rc = col_finish(d, dw, N, C);
    if (!rc) rc = col_finish(d, db, N, C);
    return rc;
}

int tri_cost_rmsnorm_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps)
{
    (void)eps;
    return one(d, "rmsnorm_forward", bytes(inp) + bytes(w) + bytes(out) + bytes(rstd), NORM_FWD_FLOPS * numel(inp));
}

int tri_cost_add_rmsnorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor rstd, tri_tensor a,
                                 tri_tensor b, tri_tensor w, float eps)
{
    (void)eps;
    return one(d, "add_rmsnorm_forward",
               bytes(a) + bytes(b) + bytes(res) + bytes(out) + bytes(rstd) + bytes(w),
               (NORM_FWD_FLOPS + 1) * numel(a));
}

int tri_cost_rmsnorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp,
                              tri_tensor w, tri_tensor rstd)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    double partials = 4.0 * (double)tri_col_chunks(N) * (double)C;
    tri_cost_call(d, "rmsnorm_backward");
    int rc = tri_cost_kernel(d, bytes(dout) + bytes(inp) + bytes(w) + bytes(rstd) + 2 * bytes(dinp), 0,
                             NORM_BWD_FLOPS * numel(inp));
    if (!rc) rc = tri_cost_kernel(d, bytes(dout) + bytes(inp) + bytes(rstd) + partials, 0, 3 * numel(inp));
    if (!rc) rc = col_finish(d, dw, N, C);
    return rc;
}

/* Per-head RMSNorm: the head columns (N H HS elements) as rmsnorm's rows, the other columns copied
 * by a second launch when out is not inp; backward: the input gradient, then per group (q, k) the
 * chunk sums of its head rows and their finish (cuda/norms/rmsnorm_heads.cu). */
static int rest_copy(tri_device *d, tri_tensor dst, tri_tensor src, double heads)
{
    double rest = numel(src) - heads;
    if (dst.data == src.data || rest <= 0)
        return TRI_OK;
    return tri_cost_kernel(d, 2 * rest * esize(src), 0, 0);
}

int tri_cost_rmsnorm_heads_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor q_w,
                                   tri_tensor k_w, int64_t NH, int64_t NH_kv, float eps)
{
    (void)eps;
    double heads = (double)tri_tensor_rows(inp) * (double)(NH + NH_kv) * numel(q_w);
    int rc = one(d, "rmsnorm_heads_forward", heads * (esize(inp) + esize(out)) + bytes(q_w) + bytes(k_w) + bytes(rstd),
                 NORM_FWD_FLOPS * heads);
    return rc ? rc : rest_copy(d, out, inp, heads);
}

int tri_cost_rmsnorm_heads_backward(tri_device *d, tri_tensor dinp, tri_tensor dq_w, tri_tensor dk_w, tri_tensor dout,
                                    tri_tensor inp, tri_tensor q_w, tri_tensor k_w, tri_tensor rstd, int64_t NH,
                                    int64_t NH_kv)
{
    int64_t N = tri_tensor_rows(inp), HS = tri_tensor_numel(q_w);
    double heads = (double)N * (double)(NH + NH_kv) * (double)HS;
    tri_cost_call(d, "rmsnorm_heads_backward");
    int rc = TRI_OK;
    for (int k = 0; k < 2 && !rc; k++) {
        int64_t M = N * (k == 0 ? NH : NH_kv);
        double e = (double)M * (double)HS, partials = 4.0 * (double)tri_col_chunks(M) * (double)HS;
        rc = tri_cost_kernel(d, e * (esize(dout) + esize(inp)) + 4.0 * (double)M + partials, 0, 3 * e);
        if (!rc) rc = col_finish(d, k == 0 ? dq_w : dk_w, M, HS);
    }
    if (!rc) rc = tri_cost_kernel(d, heads * (esize(dout) + esize(inp) + esize(dinp)) + bytes(q_w) + bytes(k_w) +
                                         bytes(rstd), 0, NORM_BWD_FLOPS * heads);
    return rc ? rc : rest_copy(d, dinp, dout, heads);
}

/* ---- attention ---- */

/* The unfused attention's dims: qkv (B, T, 3C), att (B, NH, T, T). */
typedef struct att_shape {
    double B, T, C, NH, HS;
} att_shape;

static att_shape att_shape_of(tri_tensor qkv, tri_tensor att)
{
    att_shape s = {(double)qkv.shape[0], (double)qkv.shape[1], (double)(qkv.shape[2] / 3), (double)att.shape[1], 0};
    s.HS = s.C / s.NH;
    return s;
}

/* One strided-batched cuBLASLt product of one sequence over its NH heads (cuda/attention/attention.cu
 * heads_gemm): m x n x k per head, reading ab_bytes and writing (or accumulating) c_bytes. */
static int heads_gemm(tri_device *d, const att_shape *s, double m, double n, double k, double ab_bytes,
                      double c_bytes, bool tc)
{
    double flops = 2 * s->NH * m * n * k;
    return tri_cost_kernel(d, ab_bytes + c_bytes, tc ? flops : 0, tc ? 0 : flops);
}

/* Per sequence b: scores = q k^T (T x T x HS, the masked half included) into att; one softmax launch
 * over all rows (reads and writes att); per sequence out = att v (T x HS x T). */
int tri_cost_attention_forward(tri_device *d, tri_tensor out, tri_tensor att, tri_tensor qkv)
{
    att_shape s = att_shape_of(qkv, att);
    double TT = s.NH * s.T * s.T * esize(att), TC = s.T * s.C * esize(qkv), TCo = s.T * s.C * esize(out);
    bool tc = qkv.dtype == TRI_BF16;
    tri_cost_call(d, "attention_forward");
    int rc = TRI_OK;
    for (int64_t b = 0; b < (int64_t)s.B && !rc; b++)
        rc = heads_gemm(d, &s, s.T, s.T, s.HS, 2 * TC, TT, tc);
    if (!rc) rc = tri_cost_kernel(d, 2 * bytes(att), 0, EXP_FLOPS * numel(att) / 2);
    for (int64_t b = 0; b < (int64_t)s.B && !rc; b++)
        rc = heads_gemm(d, &s, s.T, s.HS, s.T, TT + TC, TCo, tc);
    return rc;
}

/* Per sequence: datt = dout v^T, dv = att^T dout; one softmax-backward launch (reads att and datt,
 * writes datt); per sequence: dq = ds k, dk = ds^T q. */
int tri_cost_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout, tri_tensor qkv,
                                tri_tensor att)
{
    att_shape s = att_shape_of(qkv, att);
    double TT = s.NH * s.T * s.T * esize(att), TC = s.T * s.C * esize(qkv), TCg = s.T * s.C * esize(dout);
    double TCd = s.T * s.C * esize(dqkv);
    bool tc = qkv.dtype == TRI_BF16;
    tri_cost_call(d, "attention_backward");
    int rc = TRI_OK;
    for (int64_t b = 0; b < (int64_t)s.B && !rc; b++) {
        rc = heads_gemm(d, &s, s.T, s.T, s.HS, TCg + TC, TT, tc);
        if (!rc) rc = heads_gemm(d, &s, s.T, s.HS, s.T, TT + TCg, TCd, tc);
    }
    if (!rc) rc = tri_cost_kernel(d, bytes(att) + 2 * bytes(datt), 0, 3 * numel(att) / 2);
    for (int64_t b = 0; b < (int64_t)s.B && !rc; b++) {
        rc = heads_gemm(d, &s, s.T, s.HS, s.T, TT + TC, TCd, tc);
        if (!rc) rc = heads_gemm(d, &s, s.T, s.HS, s.T, TT + TC, TCd, tc);
    }
    return rc;
}

/* FLOPs of one T x T x HS product per head over the causal tiles the fused kernels visit: query tile
 * i meets key tiles 0..i, nt (nt + 1) / 2 tile pairs of nt = ceil(T / TILE). */
static double flash_product_flops(tri_flash_dims f)
{
    double nt = (double)((f.T + TRI_FLASH_BR - 1) / TRI_FLASH_BR);
    return 2.0 * (double)(f.B * f.NH) * nt * (nt + 1) / 2 * TRI_FLASH_BR * TRI_FLASH_BR * (double)f.HS;
}

/* One launch: q, k, v read once (a key tile is re-read by every query tile after it, from L2),
 * out and lse written; two products per tile pair (S = q k^T, O += P v). */
int tri_cost_flash_attention_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv)
{
    tri_flash_dims f = tri_flash_dims_of(qkv, out, lse);
    double flops = 2 * flash_product_flops(f);
    bool tc = qkv.dtype == TRI_BF16;
    tri_cost_call(d, "flash_attention_forward");
    return tri_cost_kernel(d, bytes(qkv) + bytes(out) + bytes(lse), tc ? flops : 0, tc ? 0 : flops);
}

/* Three launches: delta = rowsum(dout * out); dq (recomputes S and dP = dout v^T, then dq = dS k:
 * three products a tile pair); dk, dv (S, dP, dv = P^T dout, dk = dS^T q: four). */
int tri_cost_flash_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                      tri_tensor qkv, tri_tensor out, tri_tensor lse)
{
    tri_flash_dims f = tri_flash_dims_of(qkv, out, lse);
    double p = flash_product_flops(f), q_share = (double)(f.NH * f.HS) / (double)qkv.shape[2];
    bool tc = qkv.dtype == TRI_BF16;
    double reads = bytes(qkv) + bytes(dout) + bytes(lse) + bytes(delta);
    tri_cost_call(d, "flash_attention_backward");
    int rc = tri_cost_kernel(d, bytes(dout) + bytes(out) + bytes(delta), 0, 2 * numel(out));
    if (!rc) rc = tri_cost_kernel(d, reads + q_share * bytes(dqkv), tc ? 3 * p : 0, tc ? 0 : 3 * p);
    if (!rc) rc = tri_cost_kernel(d, reads + (1 - q_share) * bytes(dqkv), tc ? 4 * p : 0, tc ? 0 : 4 * p);
    return rc;
}

/* The context-parallel forms: the tile pairs a (B, NH) problem of Tq query rows against Tk keys
 * visits, priced as the whole rectangle (an upper bound: causal blocks skip about half of the
 * diagonal ones; the cp partitioner plans the exact traffic, not these FLOPs). */
static double flash_kv_product_flops(tri_flash_dims f, int64_t Tk)
{
    double nq = (double)((f.T + TRI_FLASH_BR - 1) / TRI_FLASH_BR), nk = (double)((Tk + TRI_FLASH_BC - 1) / TRI_FLASH_BC);
    return 2.0 * (double)(f.B * f.NH) * nq * nk * TRI_FLASH_BR * TRI_FLASH_BC * (double)f.HS;
}

int tri_cost_flash_attention_kv_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv, tri_tensor kv,
                                        tri_flash_rows qrows, tri_flash_rows krows)
{
    (void)qrows, (void)krows;
    double flops = 2 * flash_kv_product_flops(tri_flash_dims_of(qkv, out, lse), kv.shape[1]);
    bool tc = qkv.dtype == TRI_BF16;
    tri_cost_call(d, "flash_attention_kv_forward");
    return tri_cost_kernel(d, bytes(qkv) + bytes(kv) + bytes(out) + bytes(lse), tc ? flops : 0, tc ? 0 : flops);
}

int tri_cost_flash_attention_delta(tri_device *d, tri_tensor delta, tri_tensor dout, tri_tensor out)
{
    return one(d, "flash_attention_delta", bytes(dout) + bytes(out) + bytes(delta), 2 * numel(out));
}

/* dq: three products a tile pair (S, dP, dS k); dk, dv: four (S, dP, P^T dout, dS^T q). */
static int flash_kv_pass(tri_device *d, const char *name, tri_tensor grad, tri_tensor dout, tri_tensor qkv,
                         tri_tensor kv, tri_tensor lse, tri_tensor delta, double products)
{
    double p = products * flash_kv_product_flops(tri_flash_dims_of(qkv, dout, lse), kv.shape[1]);
    bool tc = qkv.dtype == TRI_BF16;
    tri_cost_call(d, name);
    return tri_cost_kernel(d, bytes(qkv) + bytes(kv) + bytes(dout) + bytes(lse) + bytes(delta) + bytes(grad),
                           tc ? p : 0, tc ? 0 : p);
}

int tri_cost_flash_attention_kv_backward_dq(tri_device *d, tri_tensor dqkv, tri_tensor dout, tri_tensor qkv,
                                            tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                            tri_flash_rows krows, bool accumulate)
{
    (void)qrows, (void)krows, (void)accumulate;
    return flash_kv_pass(d, "flash_attention_kv_backward_dq", dqkv, dout, qkv, kv, lse, delta, 3);
}

int tri_cost_flash_attention_kv_backward_dkv(tri_device *d, tri_tensor dkv, tri_tensor dout, tri_tensor qkv,
                                             tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                             tri_flash_rows krows, bool accumulate)
{
    (void)qrows, (void)krows, (void)accumulate;
    return flash_kv_pass(d, "flash_attention_kv_backward_dkv", dkv, dout, qkv, kv, lse, delta, 4);
}

/* One pass: five products a tile pair (S, dP once; P^T dout, dS^T q, dS k). */
int tri_cost_flash_attention_kv_backward(tri_device *d, tri_tensor dqkv, tri_tensor dkv, tri_tensor dout,
                                         tri_tensor qkv, tri_tensor kv, tri_tensor lse, tri_tensor delta,
                                         tri_flash_rows qrows, tri_flash_rows krows, bool accumulate)
{
    (void)qrows, (void)krows, (void)accumulate;
    double p = 5 * flash_kv_product_flops(tri_flash_dims_of(qkv, dout, lse), kv.shape[1]);
    bool tc = qkv.dtype == TRI_BF16;
    tri_cost_call(d, "flash_attention_kv_backward");
    return tri_cost_kernel(d, bytes(qkv) + bytes(kv) + bytes(dout) + bytes(lse) + bytes(delta) + bytes(dqkv) +
                                  bytes(dkv), tc ? p : 0, tc ? 0 : p);
}

int tri_cost_flash_attention_merge(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor out2, tri_tensor lse2)
{
    return one(d, "flash_attention_merge", 2 * bytes(out) + bytes(out2) + 2 * bytes(lse) + bytes(lse2), 3 * numel(out));
}

int tri_cost_copy_columns(tri_device *d, tri_tensor dst, int64_t dst_col, tri_tensor src, int64_t src_col, int64_t n)
{
    (void)dst_col, (void)src_col;
    double rows = (double)tri_tensor_rows(dst);
    return one(d, "copy_columns", rows * (double)n * (esize(dst) + esize(src)), 0);
}

/* In place on the first n_heads heads of each row; the cos / sin tables read once. */
static int rope(tri_device *d, const char *name, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads)
{
    double HS = 2.0 * (double)tri_tensor_cols(cos), elems = (double)tri_tensor_rows(x) * (double)n_heads * HS;
    return one(d, name, 2 * elems * esize(x) + bytes(cos) + bytes(sin), 3 * elems);
}

int tri_cost_rope_forward(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                          int64_t row0, int cp, int cp_rank)
{
    (void)T, (void)row0, (void)cp, (void)cp_rank;
    return rope(d, "rope_forward", x, cos, sin, n_heads);
}

int tri_cost_rope_backward(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                           int64_t row0, int cp, int cp_rank)
{
    (void)T, (void)row0, (void)cp, (void)cp_rank;
    return rope(d, "rope_backward", dx, cos, sin, n_heads);
}

/* ---- activations ---- */

int tri_cost_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp)
{
    return one(d, "gelu_forward", bytes(inp) + bytes(out), GELU_FLOPS * numel(inp));
}

int tri_cost_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    return one(d, "gelu_backward", bytes(inp) + bytes(dout) + bytes(dinp), (GELU_FLOPS + 5) * numel(inp));
}

int tri_cost_bias_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp, tri_tensor bias)
{
    return one(d, "bias_gelu_forward", bytes(inp) + bytes(bias) + bytes(out), (GELU_FLOPS + 1) * numel(inp));
}

int tri_cost_swiglu_forward(tri_device *d, tri_tensor out, tri_tensor gate_up)
{
    return one(d, "swiglu_forward", bytes(gate_up) + bytes(out), 6 * numel(out));
}

int tri_cost_swiglu_backward(tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout)
{
    return one(d, "swiglu_backward", bytes(gate_up) + bytes(dout) + bytes(dgate_up), 10 * numel(dout));
}

/* ---- MoE router (cuda/moe/router.cu): a thread per token, per selection, per expert, per chunk ---- */

int tri_cost_moe_router_forward(tri_device *d, tri_tensor expert_idx, tri_tensor expert_w, tri_tensor scores,
                                tri_tensor logits, tri_tensor expert_bias, int score_func, bool norm_topk)
{
    (void)score_func, (void)norm_topk;
    double K = (double)tri_tensor_cols(expert_idx);
    return one(d, "moe_router_forward",
               bytes(logits) + bytes(scores) + bytes(expert_idx) + bytes(expert_w) + bytes(expert_bias),
               (EXP_FLOPS + 2 * K) * numel(logits));
}

static double bitonic_compares(int64_t n); /* beside the token links' cost, below */

/* Where the sort key holds E and NK (tri_moe_cap_fits; the workspace's 16 NK bytes assumed to fit):
 * the sort of cuda/moe/capacity_fast.cuh, as the token links' (a tile sort: expert and weight read,
 * 8-byte keys written, the bitonic compare-exchanges as work; merge passes of N keys read and
 * written, a binary search a key), then a thread per key (key read, kept written, a search of its
 * expert's start) and a thread per expert (three searches; their reads hit the L2). Otherwise the
 * twins: each selection scans all N K selections (held in L2) when there is a capacity, then a
 * thread per expert over all of them. */
int tri_cost_moe_router_capacity(tri_device *d, tri_tensor kept_idx, tri_tensor tokens_per_expert,
                                 tri_tensor routed_per_expert, tri_tensor expert_idx, tri_tensor expert_w,
                                 int64_t capacity, int drop_policy)
{
    (void)drop_policy;
    int64_t nk = tri_tensor_numel(expert_idx);
    double NK = numel(expert_idx), E = numel(tokens_per_expert);
    double counts = bytes(tokens_per_expert) + bytes(routed_per_expert);
    tri_cost_call(d, "moe_router_capacity");
    if (tri_moe_cap_fits(nk, (int64_t)E)) {
        int64_t full = nk / TRI_LINKS_TILE, rest = nk % TRI_LINKS_TILE;
        double sort = (double)full * bitonic_compares(TRI_LINKS_TILE) + (rest ? bitonic_compares(rest) : 0.0);
        int rc = tri_cost_kernel(d, bytes(expert_idx) + bytes(expert_w) + 8.0 * NK, 0, sort);
        int lg = 0;
        for (int64_t w = TRI_LINKS_TILE; !rc && w < nk; w *= 2) {
            while (((int64_t)1 << lg) < w)
                lg++;
            rc = tri_cost_kernel(d, 16.0 * NK, 0, NK * (lg + 1));
        }
        double search = (double)tri_moe_cap_pos_bits(nk) + 1;
        if (!rc) rc = tri_cost_kernel(d, 8.0 * NK + bytes(kept_idx), 0, NK * search);
        return rc ? rc : tri_cost_kernel(d, counts, 0, 3 * E * search);
    }
    int rc = tri_cost_kernel(d, bytes(expert_idx) + bytes(expert_w) + bytes(kept_idx), 0,
                             capacity > 0 ? 2 * NK * NK : NK);
    return rc ? rc : tri_cost_kernel(d, bytes(expert_idx) + bytes(kept_idx) + counts, 0, 2 * E * NK);
}

int tri_cost_moe_router_backward(tri_device *d, tri_tensor dlogits, tri_tensor d_expert_w, tri_tensor kept_idx,
                                 tri_tensor scores, int score_func, bool norm_topk)
{
    (void)score_func, (void)norm_topk;
    double K = (double)tri_tensor_cols(kept_idx);
    return one(d, "moe_router_backward", bytes(scores) + bytes(d_expert_w) + bytes(kept_idx) + bytes(dlogits),
               (3 + K) * numel(scores));
}

/* partials (a thread per chunk of TRI_COL_CHUNK rows), their total, the rows' gradients (+=) */
static int moe_loss(tri_device *d, const char *name, tri_tensor loss, tri_tensor dlogits, tri_tensor rows,
                    double counts_bytes)
{
    double partials = 8.0 * (double)tri_col_chunks(tri_tensor_rows(rows));
    tri_cost_call(d, name);
    int rc = tri_cost_kernel(d, bytes(rows) + counts_bytes + partials, 0, EXP_FLOPS * numel(rows));
    if (!rc) rc = tri_cost_kernel(d, partials + bytes(loss), 0, partials / 8);
    if (!rc && tri_tensor_present(dlogits))
        rc = tri_cost_kernel(d, bytes(rows) + counts_bytes + 2 * bytes(dlogits), 0, 2 * EXP_FLOPS * numel(rows));
    return rc;
}

int tri_cost_moe_aux_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor scores,
                          tri_tensor routed_per_expert, int64_t K, int score_func, float coeff, float dloss)
{
    (void)K, (void)score_func, (void)coeff, (void)dloss;
    return moe_loss(d, "moe_aux_loss", loss, dlogits, scores, bytes(routed_per_expert));
}

int tri_cost_moe_z_loss(tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor logits, float coeff, float dloss)
{
    (void)coeff, (void)dloss;
    return moe_loss(d, "moe_z_loss", loss, dlogits, logits, 0);
}

int tri_cost_moe_expert_bias_update(tri_device *d, tri_tensor expert_bias, tri_tensor tokens_per_expert, float rate)
{
    (void)rate;
    return one(d, "moe_expert_bias_update", 2 * bytes(expert_bias) + bytes(tokens_per_expert),
               numel(expert_bias) * numel(tokens_per_expert));
}

/* ---- embeddings ---- */

int tri_cost_embedding_forward(tri_device *d, tri_tensor out, tri_tensor tokens, tri_tensor wte, int64_t vocab_start)
{
    (void)vocab_start;
    return one(d, "embedding_forward", bytes(tokens) + numel(out) * esize(wte) + bytes(out), 0);
}

/* Compare-exchanges of Batcher's bitonic network on n keys padded to the power of two s: s/2 a step,
 * log2(s) (log2(s) + 1) / 2 steps. */
static double bitonic_compares(int64_t n)
{
    int64_t s = 1;
    int lg = 0;
    while (s < n) {
        s <<= 1;
        lg++;
    }
    return (double)s / 2 * lg * (lg + 1) / 2;
}

/* Up to TRI_EMBEDDING_LINKS_MAX tokens: the token links by a sort (cuda/embedding/token_links_fast.cuh),
 * then a kernel per (first occurrence, column) walking its links: dout read once, each token's dwte
 * row read and written (at most N rows). The links: a tile sort (tokens read, 8-byte keys written,
 * or the links when one tile holds the call; bitonic compare-exchanges as CUDA-core work), then
 * tri_links_merges(N) merge passes, each reading and writing N keys (the last writes the links, 8 N
 * bytes) with a binary search of log2(w) + 1 compares a key (its reads hit the L2, not counted as
 * bytes). Beyond the limit: a thread per column. */
int tri_cost_embedding_backward(tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                                int64_t vocab_start)
{
    (void)vocab_start;
    int64_t N = tri_tensor_numel(tokens), V_l = tri_tensor_rows(dwte);
    double rows = (double)(N < V_l ? N : V_l), C = (double)tri_tensor_cols(dwte);
    double update = bytes(dout) + 2 * rows * C * esize(dwte);
    tri_cost_call(d, "embedding_backward");
    if (N > TRI_EMBEDDING_LINKS_MAX)
        return tri_cost_kernel(d, update + bytes(tokens), 0, numel(dout));
    int64_t full = N / TRI_LINKS_TILE, rest = N % TRI_LINKS_TILE;
    double sort = (double)full * bitonic_compares(TRI_LINKS_TILE) + (rest ? bitonic_compares(rest) : 0.0);
    int rc = tri_cost_kernel(d, bytes(tokens) + 8.0 * (double)N, 0, sort);
    int lg = 0;
    for (int64_t w = TRI_LINKS_TILE; !rc && w < N; w *= 2) {
        while (((int64_t)1 << lg) < w)
            lg++;
        rc = tri_cost_kernel(d, 16.0 * (double)N, 0, (double)N * (lg + 1));
    }
    return rc ? rc : tri_cost_kernel(d, update + 8.0 * (double)N, 0, numel(dout));
}

int tri_cost_position_forward(tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0, int cp,
                              int cp_rank)
{
    (void)row0, (void)cp, (void)cp_rank;
    int64_t N = tri_tensor_rows(out);
    double rows = (double)(N < T ? N : T);
    return one(d, "position_forward", 2 * bytes(out) + rows * (double)tri_tensor_cols(wpe) * esize(wpe), numel(out));
}

int tri_cost_position_backward(tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T, int64_t row0, int cp,
                               int cp_rank)
{
    (void)row0, (void)cp, (void)cp_rank;
    int64_t N = tri_tensor_rows(dout);
    double rows = (double)(N < T ? N : T);
    return one(d, "position_backward", bytes(dout) + 2 * rows * (double)tri_tensor_cols(dwpe) * esize(dwpe),
               numel(dout));
}

/* ---- cross-entropy: every piece a pass over the logits ---- */

int tri_cost_ce_row_max(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid)
{
    (void)V_valid;
    return one(d, "ce_row_max", bytes(logits) + bytes(maxes), numel(logits));
}

int tri_cost_ce_sumexp_target(tri_device *d, tri_tensor stats, tri_tensor logits, tri_tensor maxes,
                              tri_tensor targets, int64_t vocab_start, int64_t V_valid)
{
    (void)vocab_start, (void)V_valid;
    return one(d, "ce_sumexp_target", bytes(logits) + bytes(maxes) + bytes(targets) + bytes(stats),
               EXP_FLOPS * numel(logits));
}

int tri_cost_ce_loss(tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats)
{
    return one(d, "ce_loss", bytes(losses) + bytes(maxes) + bytes(stats), 3 * numel(losses));
}

int tri_cost_ce_backward(tri_device *d, tri_tensor dlogits, tri_tensor logits, tri_tensor maxes, tri_tensor stats,
                         tri_tensor targets, int64_t vocab_start, int64_t V_valid, float dloss)
{
    (void)vocab_start, (void)V_valid, (void)dloss;
    return one(d, "ce_backward", bytes(logits) + bytes(dlogits) + bytes(maxes) + bytes(stats) + bytes(targets),
               EXP_FLOPS * numel(logits));
}

/* HEAD: one block per row reads its logits once (the row's three walks from L2) and writes dlogits.
 * The 2026-11-27 op set ran the four pieces: recorded as those four calls. */
int tri_cost_ce_fused(tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                      int64_t V_valid, float dloss)
{
    if (!tri_cost_fused(d)) {
        int64_t N = tri_tensor_rows(logits); /* the pieces' fp32 maxes(N) and stats(N, 2), never touched */
        tri_tensor maxes = tri_tensor_1d(losses.data, TRI_F32, N), stats = tri_tensor_2d(losses.data, TRI_F32, N, 2);
        int rc = tri_cost_ce_row_max(d, maxes, logits, V_valid);
        if (!rc) rc = tri_cost_ce_sumexp_target(d, stats, logits, maxes, targets, 0, V_valid);
        if (!rc) rc = tri_cost_ce_loss(d, losses, maxes, stats);
        if (!rc && tri_tensor_present(dlogits))
            rc = tri_cost_ce_backward(d, dlogits, logits, maxes, stats, targets, 0, V_valid, dloss);
        return rc;
    }
    return one(d, "ce_fused", bytes(logits) + bytes(dlogits) + bytes(targets) + bytes(losses),
               2 * EXP_FLOPS * numel(logits));
}

/* ---- Mixture-of-Experts dispatch (cuda/moe/dispatch.cu) ---- */

/* The counting sort: the index fills, the counts per (expert, chunk), the scan, the placement. Up to
 * TRI_MOE_FAST_MAX_E experts (cuda/moe/dispatch_fast.cuh): a warp per chunk reads its selections once
 * (32 shared compares a selection) for the counts, and again for the placement with its chunk's E
 * first rows; the scan one block over the E x chunks counts, read and written. Above, the twins: a
 * thread per (expert, chunk) reads the whole chunk (E x NK reads), the scan one thread. */
int tri_cost_moe_permute_map(tri_device *d, tri_tensor row_id_map, tri_tensor sorted_indices,
                             tri_tensor tokens_per_expert, tri_tensor expert_idx)
{
    double E = numel(tokens_per_expert), chunks = (double)tri_moe_chunks(tri_tensor_numel(expert_idx), TRI_MOE_CHUNK);
    double reads = E <= TRI_MOE_FAST_MAX_E ? 1.0 : E, cmp = E <= TRI_MOE_FAST_MAX_E ? 32 * numel(expert_idx) : 0;
    tri_cost_call(d, "moe_permute_map");
    int rc = tri_cost_kernel(d, bytes(row_id_map) + bytes(sorted_indices), 0, 0);
    if (!rc) rc = tri_cost_kernel(d, reads * bytes(expert_idx) + 4 * E * chunks, 0, cmp);
    if (!rc) rc = tri_cost_kernel(d, 8 * E * chunks + bytes(tokens_per_expert), 0, E * chunks);
    return rc ? rc
              : tri_cost_kernel(d, reads * bytes(expert_idx) + 4 * E * chunks + bytes(row_id_map) +
                                       bytes(sorted_indices), 0, cmp);
}

/* The row copies: a warp per row, 16-byte accesses (cuda/moe/dispatch_fast.cuh); each row read and
 * written once, as the twins' thread per element. */
int tri_cost_moe_permute(tri_device *d, tri_tensor x_perm, tri_tensor x, tri_tensor sorted_indices)
{
    return one(d, "moe_permute", bytes(x_perm) * (1 + esize(x) / esize(x_perm)) + bytes(sorted_indices), 0);
}

int tri_cost_moe_permute_backward(tri_device *d, tri_tensor dx, tri_tensor dx_perm, tri_tensor row_id_map)
{
    return one(d, "moe_permute_backward", bytes(dx_perm) + bytes(dx) + bytes(row_id_map), numel(dx_perm));
}

int tri_cost_moe_unpermute(tri_device *d, tri_tensor y, tri_tensor y_perm, tri_tensor row_id_map, tri_tensor w)
{
    return one(d, "moe_unpermute", bytes(y_perm) + bytes(y) + bytes(row_id_map) + bytes(w), 2 * numel(y_perm));
}

/* Two kernels: the weighted spread of dy into dy_perm, the dot products into dw. */
int tri_cost_moe_unpermute_backward(tri_device *d, tri_tensor dy_perm, tri_tensor dw, tri_tensor dy, tri_tensor y_perm,
                                    tri_tensor sorted_indices, tri_tensor row_id_map, tri_tensor w)
{
    tri_cost_call(d, "moe_unpermute_backward");
    int rc = tri_cost_kernel(d, bytes(dy_perm) * (1 + esize(dy) / esize(dy_perm)) + bytes(sorted_indices) + bytes(w),
                             0, numel(dy_perm));
    double K = tri_tensor_rows(dy) > 0 ? numel(dw) / (double)tri_tensor_rows(dy) : 0; /* dy's rows read K times */
    return rc ? rc : tri_cost_kernel(d, bytes(y_perm) + K * bytes(dy) + bytes(row_id_map) + bytes(dw), 0,
                                     2 * numel(y_perm));
}

/* ---- optimizer: param, m, v read and written, grad read (fp32) ---- */

static double adamw_bytes(tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v)
{
    return 2 * bytes(param) + bytes(grad) + 2 * bytes(m) + 2 * bytes(v);
}

int tri_cost_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                   const tri_adamw_hparams *hp)
{
    (void)hp;
    return one(d, "adamw", adamw_bytes(param, grad, m, v), ADAMW_FLOPS * numel(param));
}

/* One launch per group of TRI_ADAMW_GROUP pieces. */
int tri_cost_adamw_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp)
{
    (void)hp;
    tri_cost_call(d, "adamw_multi");
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k += TRI_ADAMW_GROUP) {
        double b = 0, flops = 0;
        for (int j = k; j < n && j < k + TRI_ADAMW_GROUP; j++) {
            const tri_adamw_piece *p = &pieces[j];
            b += adamw_bytes(p->param, p->grad, p->m, p->v);
            flops += ADAMW_FLOPS * numel(p->param);
        }
        rc = tri_cost_kernel(d, b, 0, flops);
    }
    return rc;
}

/* AdamW with the bf16 publish and the gradient zeroing in the same pass, one launch per group of
 * TRI_ADAMW_GROUP pieces: AdamW's traffic (one read of p, g, m, v; p, m, v written) plus the bf16
 * weights written and the gradient's zeros. It replaces the update's launches, a convert per owned
 * range (2 + 4 bytes an element) and the next step's fill of the gradients (4 bytes). */
int tri_cost_adamw_fused_multi(tri_device *d, const tri_adamw_piece *pieces, const tri_tensor *models, int n,
                               const tri_adamw_hparams *hp)
{
    (void)hp;
    tri_cost_call(d, "adamw_fused_multi");
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k += TRI_ADAMW_GROUP) {
        double b = 0, flops = 0;
        for (int j = k; j < n && j < k + TRI_ADAMW_GROUP; j++) {
            const tri_adamw_piece *p = &pieces[j];
            b += adamw_bytes(p->param, p->grad, p->m, p->v) + bytes(p->grad);
            if (models)
                b += bytes(models[j]);
            flops += ADAMW_FLOPS * numel(p->param);
        }
        rc = tri_cost_kernel(d, b, 0, flops);
    }
    return rc;
}

/* Momentum SGD / LARS: read p, g, buf, write p, buf; a launch per piece (cuda/optimizer/momentum.cu). */
int tri_cost_sgd_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, const tri_sgd_hparams *hp)
{
    (void)ratios;
    (void)hp;
    tri_cost_call(d, "sgd_multi");
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++)
        rc = tri_cost_kernel(d, 2 * bytes(pieces[k].param) + bytes(pieces[k].grad) + 2 * bytes(pieces[k].buf), 0,
                             6 * numel(pieces[k].param));
    return rc;
}

/* LAMB's direction: AdamW's traffic (the direction written over the gradient), a launch per piece. */
int tri_cost_lamb_direction_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp)
{
    (void)hp;
    tri_cost_call(d, "lamb_direction_multi");
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++)
        rc = tri_cost_kernel(d, adamw_bytes(pieces[k].param, pieces[k].grad, pieces[k].m, pieces[k].v) +
                                    bytes(pieces[k].grad), 0, ADAMW_FLOPS * numel(pieces[k].param));
    return rc;
}

/* LAMB's update: read p and r, write p, a launch per piece. */
int tri_cost_lamb_update_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, float lr)
{
    (void)ratios;
    (void)lr;
    tri_cost_call(d, "lamb_update_multi");
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++)
        rc = tri_cost_kernel(d, 2 * bytes(pieces[k].param) + bytes(pieces[k].grad), 0, 2 * numel(pieces[k].param));
    return rc;
}

int tri_cost_trust_ratio(tri_device *d, tri_tensor ratios, tri_tensor sums, int64_t span, const tri_trust_hparams *hp)
{
    (void)span;
    (void)hp;
    return one(d, "trust_ratio", bytes(sums) + bytes(ratios), numel(sums));
}

/* ---- fixed point (deterministic mode) ---- */

int tri_cost_fixed_accumulate(tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad)
{
    (void)bits;
    double partials = 8.0 * (double)reduce_chunks(tri_tensor_numel(x));
    tri_cost_call(d, "fixed_accumulate");
    int rc = tri_cost_kernel(d, bytes(x) + 2 * bytes(acc), 0, numel(x));
    if (!rc) rc = tri_cost_kernel(d, bytes(x) + partials, 0, numel(x));
    if (!rc) rc = tri_cost_kernel(d, partials + 2 * bytes(bad), 0, partials / 8);
    return rc;
}

int tri_cost_fixed_to_float(tri_device *d, tri_tensor out, tri_tensor acc, int bits)
{
    (void)bits;
    return one(d, "fixed_to_float", bytes(acc) + bytes(out), numel(out));
}

int tri_cost_add_i64(tri_device *d, tri_tensor y, tri_tensor x)
{
    return one(d, "add_i64", bytes(x) + 2 * bytes(y), 0);
}

int tri_cost_fixed_sum_squares(tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad)
{
    (void)bits;
    double partials = 6 * 8.0 * (double)reduce_chunks(tri_tensor_numel(x));
    tri_cost_call(d, "fixed_sum_squares");
    int rc = tri_cost_kernel(d, bytes(x) + partials, 0, 2 * numel(x));
    return rc ? rc : tri_cost_kernel(d, partials + 2 * bytes(limbs) + 2 * bytes(bad), 0, partials / 8);
}

/* ---- gradient compression: what cuda/compress/compress.cu launches (a scale pass and a pack
 * pass reading e twice; decode-add reads the payload words its elements need) ---- */

int tri_cost_compress_sign_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block)
{
    (void)block;
    tri_cost_call(d, "compress_sign_pack");
    int rc = tri_cost_kernel(d, bytes(e), 0, numel(e));
    return rc ? rc : tri_cost_kernel(d, bytes(e) + bytes(payload), 0, numel(e));
}

int tri_cost_compress_qsgd_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels, uint64_t seed,
                                uint64_t stream)
{
    (void)block, (void)levels, (void)seed, (void)stream;
    tri_cost_call(d, "compress_qsgd_pack");
    int rc = tri_cost_kernel(d, bytes(e), 0, 2 * numel(e));
    return rc ? rc : tri_cost_kernel(d, bytes(e) + bytes(payload), 0, 8 * numel(e));
}

int tri_cost_compress_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t n, int64_t first, int block,
                                 int levels, float alpha)
{
    (void)n, (void)first, (void)block, (void)levels, (void)alpha;
    return one(d, "compress_unpack_add", 2 * bytes(out) + bytes(payload), 3 * numel(out));
}

/* The device radix select (cuda/compress/topk_fast.cuh): four histogram passes over e (each
 * block's 256 counts written, then added by one block), the chunks' counts, their two scans and
 * the emission (e read again, the payload written). */
int tri_cost_compress_topk_pack(tri_device *d, tri_tensor payload, tri_tensor e)
{
    int64_t n = tri_tensor_numel(e);
    double N = numel(e), part = 1024.0 * (double)tri_topk_hist_grid(n), counts = 16.0 * (double)tri_topk_chunks(n);
    tri_cost_call(d, "compress_topk_pack");
    int rc = TRI_OK;
    for (int pass = 0; pass < 4 && !rc; pass++) {
        rc = tri_cost_kernel(d, bytes(e) + part, 0, 2 * N);
        if (!rc) rc = tri_cost_kernel(d, part, 0, part / 4);
    }
    if (!rc) rc = tri_cost_kernel(d, bytes(e) + counts, 0, 2 * N);
    for (int scan = 0; scan < 2 && !rc; scan++)
        rc = tri_cost_kernel(d, counts, 0, counts / 16);
    return rc ? rc : tri_cost_kernel(d, bytes(e) + counts + bytes(payload), 0, 4 * N);
}

int tri_cost_compress_topk_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t first, float alpha)
{
    (void)first, (void)alpha;
    return one(d, "compress_topk_unpack_add", 3 * bytes(payload), numel(payload));
}

int tri_cost_orthonormalize_rows(tri_device *d, tri_tensor x)
{
    int64_t n = x.shape[x.ndim - 1], r = n > 0 ? tri_tensor_numel(x) / n : 0;
    return one(d, "orthonormalize_rows", (double)(r + 1) * bytes(x), 2.0 * (double)(r + 1) * numel(x));
}
