/* cuda/attention/attention.cu - causal multi-head self-attention on the GPU.
 *
 * The default path is the CPU backend's algorithm with cuBLASLt in place of sgemm: per sequence b,
 * one strided-batched product over the NH_l heads (a head's q, k, v are HS-wide column blocks of
 * qkv with row stride 3C, so head h starts h*HS elements after head 0: batch stride HS), and one
 * launch of the row kernels of cuda/attention/attention.kern.h for the causal softmax
 * (engine/device/ops/attention_math.h's row functions, tested on the CPU):
 *   forward   scores = q k^T * scale -> att (in place) = causal softmax -> out = att v
 *   backward  datt = dout v^T, dv = att^T dout -> datt = dscores (softmax backward, in place)
 *             -> dq = dscores k * scale, dk = dscores^T q * scale
 * The full T x T products include the masked upper triangle (the softmax zeroes it), as the CPU
 * backend does. The softmax rows run a warp per row (cuda/attention/softmax_fast.cuh, also run on the
 * CPU: whole-sector loads, math.h's row sums across the lanes, cuda/warp.cuh), the same bits as the row
 * functions. With the device's simple switch on, the whole op runs instead as the simple kernels
 * (plain loops per (b, h, t) row), which the CPU suite checks against the CPU backend and the GPU
 * suite checks against this path. A fused (flash) kernel would follow as a third twin.
 *
 * bf16 (engine/device/device.h "Precision"): the products take bf16 operands when the tensors are bf16
 * (cuBLASLt CUDA_R_16BF A/B, fp32 accumulation, C/D in the output's dtype). cuBLASLt multiplies two
 * operands of one type only, so when the tensors that meet in a product differ in dtype (att and
 * qkv forward; dout, att, datt and qkv backward) the op runs its simple kernels instead, which take
 * every mix. As in the simple kernels, a bf16 att or datt holds the scores and d probabilities
 * rounded to bf16 between the products and the softmax. */
#include <math.h>
#include <string.h>

#include "cuda/device_cuda.h"
#include "cuda/attention/attention.kern.h"
#include "cuda/attention/softmax_fast.cuh"
#include "cuda/launch.cuh"

typedef struct att_dims {
    int64_t B, T, C, NH, HS;
    float scale;
} att_dims;

static att_dims dims_of(tri_tensor qkv, tri_tensor att)
{
    att_dims a;
    a.B = qkv.shape[0], a.T = qkv.shape[1], a.C = qkv.shape[2] / 3, a.NH = att.shape[1];
    a.HS = a.C / a.NH;
    a.scale = 1.0f / sqrtf((float)a.HS);
    return a;
}

/* Element e of tensor t (fp32 or bf16): a head's or a sequence's start. */
static void *at(tri_tensor t, int64_t e)
{
    return tri_at(t.data, tri_is_bf16(t), e);
}

/* One product per head of sequence b: c_h = alpha op(a_h) op(b_h) with head strides; a and b share
 * a dtype (ab), c has its own. */
static int heads_gemm(tri_cuda *cu, const att_dims *d, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                      tri_tensor ab, const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb,
                      tri_tensor ct, void *c, int64_t ldc, int64_t sc, float alpha)
{
    tri_cuda_gemm_args g;
    memset(&g, 0, sizeof g);
    g.M = M, g.N = N, g.K = K, g.trans_a = ta, g.trans_b = tb;
    g.ab_bf16 = tri_is_bf16(ab), g.c_bf16 = tri_is_bf16(ct);
    g.a = a, g.lda = lda, g.stride_a = sa, g.b = b, g.ldb = ldb, g.stride_b = sb;
    g.c = c, g.ldc = ldc, g.stride_c = sc;
    g.batch = (int)d->NH, g.alpha = alpha, g.beta = 0.0f;
    return tri_cuda_gemm(cu, &g);
}

/* The softmax rows of the cuBLASLt path: the fast kernels, or their simple twins (simple switch). */
static int softmax_rows(tri_cuda *cu, tri_tensor att, int64_t rows, int64_t T)
{
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(causal_softmax_kernel, rows, cu->stream, tri_data(att), tri_is_bf16(att), rows, T);
    return TRI_CUDA_LAUNCH(causal_softmax_fast_kernel, tri_warp_grid(rows), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_data(att), tri_is_bf16(att), rows, T);
}

static int softmax_rows_backward(tri_cuda *cu, tri_tensor datt, tri_tensor att, int64_t rows, int64_t T)
{
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(causal_softmax_backward_kernel, rows, cu->stream, tri_data(datt),
                                 tri_is_bf16(datt), tri_data(att), tri_is_bf16(att), rows, T);
    return TRI_CUDA_LAUNCH(causal_softmax_backward_fast_kernel, tri_warp_grid(rows), 32 * TRI_ROWS_PER_BLOCK,
                           cu->stream, tri_data(datt), tri_is_bf16(datt), tri_data(att), tri_is_bf16(att), rows, T);
}

extern "C" int tri_cuda_causal_softmax_rows(tri_device *d, tri_tensor att, int64_t T)
{
    if (!tri_device_is_cuda(d) || T < 1 || tri_tensor_numel(att) % T)
        return TRI_ERR(TRI_EINVAL, "tri_cuda_causal_softmax_rows: need a CUDA device and rows of T = %lld",
                       (long long)T);
    return softmax_rows(tri_cuda_of(d), att, tri_tensor_numel(att) / T, T);
}

extern "C" int tri_cuda_causal_softmax_rows_backward(tri_device *d, tri_tensor datt, tri_tensor att, int64_t T)
{
    if (!tri_device_is_cuda(d) || T < 1 || tri_tensor_numel(att) % T || tri_tensor_numel(datt) != tri_tensor_numel(att))
        return TRI_ERR(TRI_EINVAL, "tri_cuda_causal_softmax_rows_backward: need a CUDA device and rows of T = %lld",
                       (long long)T);
    return softmax_rows_backward(tri_cuda_of(d), datt, att, tri_tensor_numel(att) / T, T);
}

static int simple_forward(tri_cuda *cu, const att_dims *d, tri_tensor out, tri_tensor att, tri_tensor qkv)
{
    return TRI_CUDA_LAUNCH_N(attention_forward_kernel, d->B * d->NH * d->T, cu->stream, tri_data(out),
                             tri_is_bf16(out), tri_data(att), tri_is_bf16(att), tri_data(qkv), tri_is_bf16(qkv),
                             d->B, d->T, d->C, d->NH);
}

extern "C" int tri_cuda_attention_forward(tri_device *dev, tri_tensor out, tri_tensor att, tri_tensor qkv)
{
    tri_cuda *cu = tri_cuda_of(dev);
    att_dims d = dims_of(qkv, att);
    int64_t T = d.T, C = d.C, HS = d.HS, rows = d.B * d.NH * T;
    if (cu->simple || att.dtype != qkv.dtype) /* att v needs one operand type */
        return simple_forward(cu, &d, out, att, qkv);
    int rc = TRI_OK;
    for (int64_t b = 0; b < d.B && !rc; b++) {
        int64_t q = b * T * 3 * C, k = q + C;
        rc = heads_gemm(cu, &d, T, T, HS, false, true, qkv, at(qkv, q), 3 * C, HS, at(qkv, k), 3 * C, HS, att,
                        at(att, b * d.NH * T * T), T, T * T, d.scale);
    }
    if (!rc) rc = softmax_rows(cu, att, rows, T);
    for (int64_t b = 0; b < d.B && !rc; b++) {
        int64_t v = b * T * 3 * C + 2 * C;
        rc = heads_gemm(cu, &d, T, HS, T, false, false, att, at(att, b * d.NH * T * T), T, T * T, at(qkv, v), 3 * C,
                        HS, out, at(out, b * T * C), C, HS, 1.0f);
    }
    return rc;
}

static int simple_backward(tri_cuda *cu, const att_dims *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout,
                           tri_tensor qkv, tri_tensor att)
{
    int64_t rows = d->B * d->NH * d->T;
    int rc = TRI_CUDA_LAUNCH_N(attention_backward_rows_kernel, rows, cu->stream, tri_data(dqkv), tri_is_bf16(dqkv),
                               tri_data(datt), tri_is_bf16(datt), tri_data(dout), tri_is_bf16(dout), tri_data(qkv),
                               tri_is_bf16(qkv), tri_data(att), tri_is_bf16(att), d->B, d->T, d->C, d->NH);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(attention_backward_cols_kernel, rows, cu->stream, tri_data(dqkv),
                                    tri_is_bf16(dqkv), tri_data(datt), tri_is_bf16(datt), tri_data(dout),
                                    tri_is_bf16(dout), tri_data(qkv), tri_is_bf16(qkv), tri_data(att),
                                    tri_is_bf16(att), d->B, d->T, d->C, d->NH);
    return rc;
}

extern "C" int tri_cuda_attention_backward(tri_device *dev, tri_tensor dqkv, tri_tensor datt,
                                           tri_tensor dout, tri_tensor qkv, tri_tensor att)
{
    tri_cuda *cu = tri_cuda_of(dev);
    att_dims d = dims_of(qkv, att);
    int64_t T = d.T, C = d.C, HS = d.HS, rows = d.B * d.NH * T, TT = T * T;
    /* dout v^T, att^T dout, ds k and ds^T q each need one operand type */
    bool one_type = dout.dtype == qkv.dtype && att.dtype == qkv.dtype && datt.dtype == qkv.dtype;
    if (cu->simple || !one_type)
        return simple_backward(cu, &d, dqkv, datt, dout, qkv, att);
    int rc = TRI_OK;
    for (int64_t b = 0; b < d.B && !rc; b++) {
        int64_t v = b * T * 3 * C + 2 * C, g = b * T * C, a = b * d.NH * TT;
        rc = heads_gemm(cu, &d, T, T, HS, false, true, dout, at(dout, g), C, HS, at(qkv, v), 3 * C, HS, datt,
                        at(datt, a), T, TT, 1.0f);
        if (!rc) rc = heads_gemm(cu, &d, T, HS, T, true, false, att, at(att, a), T, TT, at(dout, g), C, HS, dqkv,
                                 at(dqkv, v), 3 * C, HS, 1.0f);
    }
    if (!rc) rc = softmax_rows_backward(cu, datt, att, rows, T);
    for (int64_t b = 0; b < d.B && !rc; b++) {
        int64_t q = b * T * 3 * C, k = q + C, ds = b * d.NH * TT;
        rc = heads_gemm(cu, &d, T, HS, T, false, false, datt, at(datt, ds), T, TT, at(qkv, k), 3 * C, HS, dqkv,
                        at(dqkv, q), 3 * C, HS, d.scale);
        if (!rc) rc = heads_gemm(cu, &d, T, HS, T, true, false, datt, at(datt, ds), T, TT, at(qkv, q), 3 * C, HS,
                                 dqkv, at(dqkv, k), 3 * C, HS, d.scale);
    }
    return rc;
}
