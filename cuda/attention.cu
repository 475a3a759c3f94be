/* cuda/attention.cu - causal multi-head self-attention on the GPU.
 *
 * The default path is the CPU backend's algorithm with cuBLASLt in place of sgemm: per sequence b,
 * one strided-batched product over the NH_l heads (a head's q, k, v are HS-wide column blocks of
 * qkv with row stride 3C, so head h starts h*HS elements after head 0: batch stride HS), and one
 * launch of the row kernels of cuda/kernels/attention.kern.h for the causal softmax (engine/math.h's
 * row functions, tested on the CPU):
 *   forward   scores = q k^T * scale -> att (in place) = causal softmax -> out = att v
 *   backward  datt = dout v^T, dv = att^T dout -> datt = dscores (softmax backward, in place)
 *             -> dq = dscores k * scale, dk = dscores^T q * scale
 * The full T x T products include the masked upper triangle (the softmax zeroes it), as the CPU
 * backend does. With the device's simple switch on, the whole op runs instead as the simple kernels
 * (plain loops per (b, h, t) row), which the CPU suite checks against the CPU backend and the GPU
 * suite checks against this path. A fused (flash) kernel would follow as a third twin. */
#include <math.h>
#include <string.h>

#include "cuda/kernels/attention.kern.h"
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

/* One product per head of sequence b: c_h = alpha op(a_h) op(b_h) with head strides. */
static int heads_gemm(tri_cuda *cu, const att_dims *d, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                      const float *a, int64_t lda, int64_t sa, const float *b, int64_t ldb, int64_t sb,
                      float *c, int64_t ldc, int64_t sc, float alpha)
{
    tri_cuda_gemm_args g;
    memset(&g, 0, sizeof g);
    g.M = M, g.N = N, g.K = K, g.trans_a = ta, g.trans_b = tb;
    g.a = a, g.lda = lda, g.stride_a = sa, g.b = b, g.ldb = ldb, g.stride_b = sb;
    g.c = c, g.ldc = ldc, g.stride_c = sc;
    g.batch = (int)d->NH, g.alpha = alpha, g.beta = 0.0f;
    return tri_cuda_gemm(cu, &g);
}

extern "C" int tri_cuda_attention_forward(tri_device *dev, tri_tensor out, tri_tensor att, tri_tensor qkv)
{
    tri_cuda *cu = tri_cuda_of(dev);
    att_dims d = dims_of(qkv, att);
    int64_t T = d.T, C = d.C, HS = d.HS, rows = d.B * d.NH * T;
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(attention_forward_kernel, rows, cu->stream, tri_fp(out), tri_fp(att),
                                 tri_fp(qkv), d.B, T, C, d.NH);
    int rc = TRI_OK;
    for (int64_t b = 0; b < d.B && !rc; b++) {
        const float *q = tri_fp(qkv) + b * T * 3 * C, *k = q + C;
        rc = heads_gemm(cu, &d, T, T, HS, false, true, q, 3 * C, HS, k, 3 * C, HS,
                        tri_fp(att) + b * d.NH * T * T, T, T * T, d.scale);
    }
    if (!rc) rc = TRI_CUDA_LAUNCH_N(causal_softmax_kernel, rows, cu->stream, tri_fp(att), rows, T);
    for (int64_t b = 0; b < d.B && !rc; b++) {
        const float *v = tri_fp(qkv) + b * T * 3 * C + 2 * C;
        rc = heads_gemm(cu, &d, T, HS, T, false, false, tri_fp(att) + b * d.NH * T * T, T, T * T, v, 3 * C, HS,
                        tri_fp(out) + b * T * C, C, HS, 1.0f);
    }
    return rc;
}

extern "C" int tri_cuda_attention_backward(tri_device *dev, tri_tensor dqkv, tri_tensor datt,
                                           tri_tensor dout, tri_tensor qkv, tri_tensor att)
{
    tri_cuda *cu = tri_cuda_of(dev);
    att_dims d = dims_of(qkv, att);
    int64_t T = d.T, C = d.C, HS = d.HS, rows = d.B * d.NH * T, TT = T * T;
    if (cu->simple) {
        int rc = TRI_CUDA_LAUNCH_N(attention_backward_rows_kernel, rows, cu->stream, tri_fp(dqkv), tri_fp(datt),
                                   tri_fp(dout), tri_fp(qkv), tri_fp(att), d.B, T, C, d.NH);
        if (!rc) rc = TRI_CUDA_LAUNCH_N(attention_backward_cols_kernel, rows, cu->stream, tri_fp(dqkv),
                                        tri_fp(datt), tri_fp(dout), tri_fp(qkv), tri_fp(att), d.B, T, C, d.NH);
        return rc;
    }
    int rc = TRI_OK;
    for (int64_t b = 0; b < d.B && !rc; b++) {
        const float *v = tri_fp(qkv) + b * T * 3 * C + 2 * C, *g = tri_fp(dout) + b * T * C;
        const float *a = tri_fp(att) + b * d.NH * TT;
        float *da = tri_fp(datt) + b * d.NH * TT, *dv = tri_fp(dqkv) + b * T * 3 * C + 2 * C;
        rc = heads_gemm(cu, &d, T, T, HS, false, true, g, C, HS, v, 3 * C, HS, da, T, TT, 1.0f);
        if (!rc) rc = heads_gemm(cu, &d, T, HS, T, true, false, a, T, TT, g, C, HS, dv, 3 * C, HS, 1.0f);
    }
    if (!rc) rc = TRI_CUDA_LAUNCH_N(causal_softmax_backward_kernel, rows, cu->stream, tri_fp(datt),
                                    tri_fp(att), rows, T);
    for (int64_t b = 0; b < d.B && !rc; b++) {
        const float *q = tri_fp(qkv) + b * T * 3 * C, *k = q + C;
        const float *ds = tri_fp(datt) + b * d.NH * TT;
        float *dq = tri_fp(dqkv) + b * T * 3 * C, *dk = dq + C;
        rc = heads_gemm(cu, &d, T, HS, T, false, false, ds, T, TT, k, 3 * C, HS, dq, 3 * C, HS, d.scale);
        if (!rc) rc = heads_gemm(cu, &d, T, HS, T, true, false, ds, T, TT, q, 3 * C, HS, dk, 3 * C, HS, d.scale);
    }
    return rc;
}
