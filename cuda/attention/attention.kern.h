/* cuda/attention/attention.kern.h - causal self-attention kernels (CUDA and C).
 *
 * Layouts (engine/device/device.h): qkv(B,T,3C) holds q | k | v, head h at columns h*HS of each part;
 * att(B,NH,T,T) the probabilities, row r = (b*NH + h)*T + t; out(B,T,C).
 *
 * Two sets. causal_softmax_kernel and causal_softmax_backward_kernel are the per-row pieces the
 * CUDA backend runs between its cuBLASLt products (scores = q k^T * scale, out = att v, ...): one
 * thread per attention row calling engine/device/ops/attention_math.h's causal softmax, as the CPU backend
 * does between its sgemm calls. The attention_*_kernel functions are the whole op in the simple form, plain
 * loops per (b, h, t) row with no GEMM library: the CPU suite checks them against the CPU backend
 * (sgemm based), and the GPU suite checks the cuBLASLt path against them. Backward is two
 * launches: rows (datt, the softmax backward, dq), then columns (dk and dv sum over the rows t >= j
 * of the finished dscores, in order, so no two threads write one element).
 *
 * qkv, att, out, dout, dqkv and datt are each fp32 or bf16 (their `_bf16` flags; engine/core/math.h
 * tri_load / tri_store) and the arithmetic is fp32. The rows are written to att / datt and read
 * back, as in the CPU backend (scores, then probabilities in place; d probabilities, then d
 * scores): with a bf16 att or datt these intermediates are rounded to bf16 in between, where the
 * CPU backend's widened path keeps them fp32 and rounds only the final values. */
#ifndef TRIDENT_CUDA_ATTENTION_ATTENTION_KERN_H
#define TRIDENT_CUDA_ATTENTION_ATTENTION_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/attention_math.h"

/* att rows r < rows (of T, row r is query t = r % T): scores -> causal probabilities, in place */
TRI_KERNEL causal_softmax_kernel(void *att, int att_bf16, int64_t rows, int64_t T)
{
    for (int64_t r = TRI_GLOBAL_ID; r < rows; r += TRI_GLOBAL_STRIDE) {
        void *row = tri_at(att, att_bf16, r * T);
        tri_causal_softmax_row_mixed(row, att_bf16, row, att_bf16, r % T, T);
    }
}

/* datt rows: d probabilities -> d scores through the causal softmax, in place */
TRI_KERNEL causal_softmax_backward_kernel(void *datt, int datt_bf16, const void *att, int att_bf16, int64_t rows,
                                          int64_t T)
{
    for (int64_t r = TRI_GLOBAL_ID; r < rows; r += TRI_GLOBAL_STRIDE) {
        void *row = tri_at(datt, datt_bf16, r * T);
        tri_causal_softmax_row_backward_mixed(row, datt_bf16, tri_at(att, att_bf16, r * T), att_bf16, row,
                                              datt_bf16, r % T, T);
    }
}

/* Whole forward, one thread per (b, h, t): att row = softmax(q_t . k_j * scale, j <= t),
 * out_t = sum_j att[j] v_j. Indices are elements of qkv (base: q of token 0 of this (b, h)). */
TRI_KERNEL attention_forward_kernel(void *out, int out_bf16, void *att, int att_bf16, const void *qkv,
                                    int qkv_bf16, int64_t B, int64_t T, int64_t C, int64_t NH)
{
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < B * NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
        int64_t base = b * T * 3 * C + h * HS, q = base + t * 3 * C;
        void *a = tri_at(att, att_bf16, r * T);
        for (int64_t j = 0; j <= t; j++) {
            int64_t k = base + j * 3 * C + C;
            float s = 0.0f;
            for (int64_t i = 0; i < HS; i++)
                s += tri_load(qkv, qkv_bf16, q + i) * tri_load(qkv, qkv_bf16, k + i);
            tri_store(a, att_bf16, j, s * scale);
        }
        tri_causal_softmax_row_mixed(a, att_bf16, a, att_bf16, t, T);
        int64_t o = (b * T + t) * C + h * HS;
        for (int64_t i = 0; i < HS; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j <= t; j++)
                acc += tri_load(a, att_bf16, j) * tri_load(qkv, qkv_bf16, base + j * 3 * C + 2 * C + i);
            tri_store(out, out_bf16, o + i, acc);
        }
    }
}

/* Backward pass 1, one thread per (b, h, t): datt row = dscores (d probabilities dout_t . v_j
 * through the softmax), dq_t = scale * sum_j dscores[j] k_j. */
TRI_KERNEL attention_backward_rows_kernel(void *dqkv, int dqkv_bf16, void *datt, int datt_bf16,
                                          const void *dout, int dout_bf16, const void *qkv, int qkv_bf16,
                                          const void *att, int att_bf16, int64_t B, int64_t T, int64_t C,
                                          int64_t NH)
{
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < B * NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
        int64_t base = b * T * 3 * C + h * HS, g = (b * T + t) * C + h * HS;
        void *da = tri_at(datt, datt_bf16, r * T);
        for (int64_t j = 0; j <= t; j++) {
            int64_t v = base + j * 3 * C + 2 * C;
            float s = 0.0f;
            for (int64_t i = 0; i < HS; i++)
                s += tri_load(dout, dout_bf16, g + i) * tri_load(qkv, qkv_bf16, v + i);
            tri_store(da, datt_bf16, j, s);
        }
        tri_causal_softmax_row_backward_mixed(da, datt_bf16, tri_at(att, att_bf16, r * T), att_bf16, da, datt_bf16,
                                              t, T);
        int64_t dq = (b * T + t) * 3 * C + h * HS;
        for (int64_t i = 0; i < HS; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j <= t; j++)
                acc += tri_load(da, datt_bf16, j) * tri_load(qkv, qkv_bf16, base + j * 3 * C + C + i);
            tri_store(dqkv, dqkv_bf16, dq + i, acc * scale);
        }
    }
}

/* Backward pass 2, one thread per (b, h, j): dv_j = sum_{t >= j} att[t][j] dout_t,
 * dk_j = scale * sum_{t >= j} dscores[t][j] q_t. */
TRI_KERNEL attention_backward_cols_kernel(void *dqkv, int dqkv_bf16, const void *datt, int datt_bf16,
                                          const void *dout, int dout_bf16, const void *qkv, int qkv_bf16,
                                          const void *att, int att_bf16, int64_t B, int64_t T, int64_t C,
                                          int64_t NH)
{
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < B * NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t j = r % T, bh = r / T, b = bh / NH, h = bh % NH;
        int64_t dk = (b * T + j) * 3 * C + C + h * HS, dv = dk + C;
        for (int64_t i = 0; i < HS; i++) {
            float acc_k = 0.0f, acc_v = 0.0f;
            for (int64_t t = j; t < T; t++) {
                int64_t at = (bh * T + t) * T + j;
                acc_v += tri_load(att, att_bf16, at) * tri_load(dout, dout_bf16, (b * T + t) * C + h * HS + i);
                acc_k += tri_load(datt, datt_bf16, at) * tri_load(qkv, qkv_bf16, (b * T + t) * 3 * C + h * HS + i);
            }
            tri_store(dqkv, dqkv_bf16, dv + i, acc_v);
            tri_store(dqkv, dqkv_bf16, dk + i, acc_k * scale);
        }
    }
}

#endif
