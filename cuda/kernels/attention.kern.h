/* cuda/kernels/attention.kern.h - causal self-attention kernels (CUDA and C).
 *
 * Layouts (engine/device.h): qkv(B,T,3C) holds q | k | v, head h at columns h*HS of each part;
 * att(B,NH,T,T) the probabilities, row r = (b*NH + h)*T + t; out(B,T,C).
 *
 * Two sets. causal_softmax_kernel and causal_softmax_backward_kernel are the per-row pieces the
 * CUDA backend runs between its cuBLASLt products (scores = q k^T * scale, out = att v, ...): one
 * thread per attention row calling engine/math.h's causal softmax, as the CPU backend does between
 * its sgemm calls. The attention_*_kernel functions are the whole op in the simple form, plain
 * loops per (b, h, t) row with no GEMM library: the CPU suite checks them against the CPU backend
 * (sgemm based), and the GPU suite checks the cuBLASLt path against them. Backward is two
 * launches: rows (datt, the softmax backward, dq), then columns (dk and dv sum over the rows t >= j
 * of the finished dscores, in order, so no two threads write one element). */
#ifndef TRIDENT_CUDA_KERNELS_ATTENTION_KERN_H
#define TRIDENT_CUDA_KERNELS_ATTENTION_KERN_H

#include "cuda/kernels/shim.h"

/* att rows r < rows (of T, row r is query t = r % T): scores -> causal probabilities, in place */
TRI_KERNEL causal_softmax_kernel(float *att, int64_t rows, int64_t T)
{
    for (int64_t r = TRI_GLOBAL_ID; r < rows; r += TRI_GLOBAL_STRIDE)
        tri_causal_softmax_row(att + r * T, att + r * T, r % T, T);
}

/* datt rows: d probabilities -> d scores through the causal softmax, in place */
TRI_KERNEL causal_softmax_backward_kernel(float *datt, const float *att, int64_t rows, int64_t T)
{
    for (int64_t r = TRI_GLOBAL_ID; r < rows; r += TRI_GLOBAL_STRIDE)
        tri_causal_softmax_row_backward(datt + r * T, att + r * T, datt + r * T, r % T, T);
}

/* Whole forward, one thread per (b, h, t): att row = softmax(q_t . k_j * scale, j <= t),
 * out_t = sum_j att[j] v_j. */
TRI_KERNEL attention_forward_kernel(float *out, float *att, const float *qkv, int64_t B, int64_t T,
                                    int64_t C, int64_t NH)
{
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < B * NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
        const float *base = qkv + b * T * 3 * C + h * HS; /* q of token 0 of this (b, h) */
        const float *q = base + t * 3 * C;
        float *a = att + r * T;
        for (int64_t j = 0; j <= t; j++) {
            const float *k = base + j * 3 * C + C;
            float s = 0.0f;
            for (int64_t i = 0; i < HS; i++)
                s += q[i] * k[i];
            a[j] = s * scale;
        }
        tri_causal_softmax_row(a, a, t, T);
        float *o = out + (b * T + t) * C + h * HS;
        for (int64_t i = 0; i < HS; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j <= t; j++)
                acc += a[j] * base[j * 3 * C + 2 * C + i];
            o[i] = acc;
        }
    }
}

/* Backward pass 1, one thread per (b, h, t): datt row = dscores (d probabilities dout_t . v_j
 * through the softmax), dq_t = scale * sum_j dscores[j] k_j. */
TRI_KERNEL attention_backward_rows_kernel(float *dqkv, float *datt, const float *dout,
                                          const float *qkv, const float *att, int64_t B, int64_t T,
                                          int64_t C, int64_t NH)
{
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < B * NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
        const float *base = qkv + b * T * 3 * C + h * HS;
        const float *g = dout + (b * T + t) * C + h * HS;
        float *da = datt + r * T;
        for (int64_t j = 0; j <= t; j++) {
            const float *v = base + j * 3 * C + 2 * C;
            float s = 0.0f;
            for (int64_t i = 0; i < HS; i++)
                s += g[i] * v[i];
            da[j] = s;
        }
        tri_causal_softmax_row_backward(da, att + r * T, da, t, T);
        float *dq = dqkv + (b * T + t) * 3 * C + h * HS;
        for (int64_t i = 0; i < HS; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j <= t; j++)
                acc += da[j] * base[j * 3 * C + C + i];
            dq[i] = acc * scale;
        }
    }
}

/* Backward pass 2, one thread per (b, h, j): dv_j = sum_{t >= j} att[t][j] dout_t,
 * dk_j = scale * sum_{t >= j} dscores[t][j] q_t. */
TRI_KERNEL attention_backward_cols_kernel(float *dqkv, const float *datt, const float *dout,
                                          const float *qkv, const float *att, int64_t B, int64_t T,
                                          int64_t C, int64_t NH)
{
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < B * NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t j = r % T, bh = r / T, b = bh / NH, h = bh % NH;
        float *dk = dqkv + (b * T + j) * 3 * C + C + h * HS;
        float *dv = dk + C;
        for (int64_t i = 0; i < HS; i++) {
            float acc_k = 0.0f, acc_v = 0.0f;
            for (int64_t t = j; t < T; t++) {
                int64_t at = (bh * T + t) * T + j;
                acc_v += att[at] * dout[(b * T + t) * C + h * HS + i];
                acc_k += datt[at] * qkv[(b * T + t) * 3 * C + h * HS + i];
            }
            dv[i] = acc_v;
            dk[i] = acc_k * scale;
        }
    }
}

#endif
