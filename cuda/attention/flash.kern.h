/* cuda/attention/flash.kern.h - fused causal attention (FlashAttention-2), the simple twins (CUDA and C).
 *
 * Layouts (engine/device/device.h, engine/device/ops/attention_math.h tri_flash_dims): qkv rows [q | k | v]
 * with NH query and NH_kv <= NH key/value heads (grouped-query attention); out(B,T,NH*HS); lse and delta
 * (B,NH,T) fp32, row r = (b*NH + h)*T + t. One thread per query row
 * (forward, dq) or key row (dk, dv), no shared memory, the whole head in a local array (HS <=
 * TRI_FLASH_MAX_HS): the plain form of engine/device/ops/attention_math.h's tiled algorithm, which the CPU
 * suite runs against the CPU backend's sgemm-tiled version (tests/test_cuda_kernels_cpu.c) and the GPU
 * suite against the fast kernel. Forward: the key tiles of TRI_FLASH_BC keys in ascending order
 * through tri_flash_row_update, each score a left-to-right dot product times 1/sqrt(HS). Backward
 * (Dao 2023 Algorithm 2 without atomics): delta_t = dout_t . out_t, then one launch for dq (a thread
 * per query row sums over its keys j <= t in order) and one for dk and dv (a thread per key row of
 * a key/value head sums over its group's query heads in order and, for each, its queries t >= j in
 * order), each probability recomputed as exp(s - lse). */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_KERN_H
#define TRIDENT_CUDA_ATTENTION_FLASH_KERN_H

#include "cuda/attention/flash_twin_limits.h" /* TRI_FLASH_MAX_HS */
#include "cuda/kernels/shim.h"
#include "engine/device/ops/attention_math.h"

/* q_t . k_j * scale for query element offset q and key element offset k of qkv. */
TRI_HD float tri_flash_score(const void *qkv, int qkv_bf16, int64_t q, int64_t k, int64_t HS, float scale)
{
    float s = 0.0f;
    for (int64_t i = 0; i < HS; i++)
        s += tri_load(qkv, qkv_bf16, q + i) * tri_load(qkv, qkv_bf16, k + i);
    return s * scale;
}

/* a thread per query row r = (b*NH + h)*T + t */
TRI_KERNEL flash_forward_kernel(void *out, int out_bf16, float *lse, const void *qkv, int qkv_bf16, tri_flash_dims d)
{
    int64_t T = d.T, HS = d.HS, C = d.NH * HS;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < d.B * d.NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / d.NH, h = bh % d.NH, g = tri_flash_kv_head(d, h);
        int64_t q = tri_flash_q_at(d, b, t, h), W = tri_flash_width(d);
        int64_t k0 = tri_flash_k_at(d, b, 0, g), v0 = tri_flash_v_at(d, b, 0, g);
        float s[TRI_FLASH_BC], acc[TRI_FLASH_MAX_HS];
        float m = -INFINITY, l = 0.0f;
        for (int64_t i = 0; i < HS; i++)
            acc[i] = 0.0f;
        for (int64_t j0 = 0; j0 <= t; j0 += TRI_FLASH_BC) {
            int64_t n = t - j0 + 1 < TRI_FLASH_BC ? t - j0 + 1 : TRI_FLASH_BC;
            for (int64_t j = 0; j < n; j++)
                s[j] = tri_flash_score(qkv, qkv_bf16, q, k0 + (j0 + j) * W, HS, scale);
            float alpha = tri_flash_row_update(s, n, &m, &l);
            for (int64_t i = 0; i < HS; i++) {
                float a = acc[i] * alpha;
                for (int64_t j = 0; j < n; j++)
                    a += s[j] * tri_load(qkv, qkv_bf16, v0 + (j0 + j) * W + i);
                acc[i] = a;
            }
        }
        float inv = 1.0f / l;
        for (int64_t i = 0; i < HS; i++)
            tri_store(out, out_bf16, (b * T + t) * C + h * HS + i, acc[i] * inv);
        lse[r] = tri_flash_lse(m, l);
    }
}

/* delta row r = dout_t . out_t over the head's columns, left to right */
TRI_KERNEL flash_backward_delta_kernel(float *delta, const void *dout, int dout_bf16, const void *out, int out_bf16,
                                       tri_flash_dims d)
{
    int64_t T = d.T, HS = d.HS, C = d.NH * HS;
    for (int64_t r = TRI_GLOBAL_ID; r < d.B * d.NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / d.NH, h = bh % d.NH, o = (b * T + t) * C + h * HS;
        float acc = 0.0f;
        for (int64_t i = 0; i < HS; i++)
            acc += tri_load(dout, dout_bf16, o + i) * tri_load(out, out_bf16, o + i);
        delta[r] = acc;
    }
}

/* dS_tj = P_tj (dout_t . v_j - delta_t) with P_tj = exp(s_tj - lse_t): query element offset q, key
 * element offset k and value element offset v of row j, dout element offset g. */
TRI_HD float tri_flash_dscore(const void *qkv, int qkv_bf16, const void *dout, int dout_bf16, int64_t q, int64_t k,
                              int64_t v, int64_t g, int64_t HS, float scale, float lse_t, float delta_t, float *p_out)
{
    float p = tri_expf(tri_flash_score(qkv, qkv_bf16, q, k, HS, scale) - lse_t);
    float dp = 0.0f;
    for (int64_t i = 0; i < HS; i++)
        dp += tri_load(dout, dout_bf16, g + i) * tri_load(qkv, qkv_bf16, v + i);
    *p_out = p;
    return p * (dp - delta_t);
}

/* dq_t = scale * sum_{j <= t} dS_tj k_j, a thread per query row */
TRI_KERNEL flash_backward_dq_kernel(void *dqkv, int dqkv_bf16, const void *dout, int dout_bf16, const void *qkv,
                                    int qkv_bf16, const float *lse, const float *delta, tri_flash_dims d)
{
    int64_t T = d.T, HS = d.HS, C = d.NH * HS;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < d.B * d.NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / d.NH, h = bh % d.NH, g = tri_flash_kv_head(d, h);
        int64_t q = tri_flash_q_at(d, b, t, h), o = (b * T + t) * C + h * HS;
        float acc[TRI_FLASH_MAX_HS], p;
        for (int64_t i = 0; i < HS; i++)
            acc[i] = 0.0f;
        for (int64_t j = 0; j <= t; j++) {
            int64_t k = tri_flash_k_at(d, b, j, g);
            float ds = tri_flash_dscore(qkv, qkv_bf16, dout, dout_bf16, q, k, tri_flash_v_at(d, b, j, g), o, HS,
                                        scale, lse[r], delta[r], &p);
            for (int64_t i = 0; i < HS; i++)
                acc[i] += ds * tri_load(qkv, qkv_bf16, k + i);
        }
        for (int64_t i = 0; i < HS; i++)
            tri_store(dqkv, dqkv_bf16, q + i, acc[i] * scale);
    }
}

/* dv_j = sum_h sum_{t >= j} P_tj dout_t, dk_j = scale * sum_h sum_{t >= j} dS_tj q_t over the query
 * heads h of key/value head g in order, a thread per key row r = (b*NH_kv + g)*T + j */
TRI_KERNEL flash_backward_dkv_kernel(void *dqkv, int dqkv_bf16, const void *dout, int dout_bf16, const void *qkv,
                                     int qkv_bf16, const float *lse, const float *delta, tri_flash_dims d)
{
    int64_t T = d.T, HS = d.HS, C = d.NH * HS, rep = d.NH / d.NH_kv;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < d.B * d.NH_kv * T; r += TRI_GLOBAL_STRIDE) {
        int64_t j = r % T, bg = r / T, b = bg / d.NH_kv, g = bg % d.NH_kv;
        int64_t k = tri_flash_k_at(d, b, j, g), v = tri_flash_v_at(d, b, j, g);
        float ak[TRI_FLASH_MAX_HS], av[TRI_FLASH_MAX_HS], p;
        for (int64_t i = 0; i < HS; i++)
            ak[i] = av[i] = 0.0f;
        for (int64_t h = g * rep; h < (g + 1) * rep; h++)
            for (int64_t t = j; t < T; t++) {
                int64_t q = tri_flash_q_at(d, b, t, h), o = (b * T + t) * C + h * HS, rt = (b * d.NH + h) * T + t;
                float ds = tri_flash_dscore(qkv, qkv_bf16, dout, dout_bf16, q, k, v, o, HS, scale, lse[rt], delta[rt],
                                            &p);
                for (int64_t i = 0; i < HS; i++) {
                    av[i] += p * tri_load(dout, dout_bf16, o + i);
                    ak[i] += ds * tri_load(qkv, qkv_bf16, q + i);
                }
            }
        for (int64_t i = 0; i < HS; i++) {
            tri_store(dqkv, dqkv_bf16, k + i, ak[i] * scale);
            tri_store(dqkv, dqkv_bf16, v + i, av[i]);
        }
    }
}

#endif
