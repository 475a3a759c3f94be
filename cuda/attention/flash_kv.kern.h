/* cuda/attention/flash_kv.kern.h - fused attention across a split sequence (context parallelism),
 * the simple twins (CUDA and C) of engine/device/ops_list.h's flash_attention_kv_forward,
 * _kv_backward_dq, _kv_backward_dkv, flash_attention_merge and copy_columns.
 *
 * flash.kern.h's twins with the queries and the keys/values in different buffers at global
 * positions (tri_flash_rows): queries are the q columns of qkv rows W wide, keys and values the
 * last 2 NH_kv HS columns of kv rows Wk wide; causal by global position. One thread per query row
 * (forward, dq) or key row (dk, dv); per row the key chunks in order, in each the tiles of
 * TRI_FLASH_BC keys ascending through tri_flash_row_update (forward), each score a left-to-right dot
 * product; the queries of a key in local order (ascending global position within and across the
 * two chunks). A row that sees no key gets out 0 and lse -inf. Against the CPU backend's sgemm-tiled
 * loops within flash.kern.h's tolerance (the summation order differs). */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_KV_KERN_H
#define TRIDENT_CUDA_ATTENTION_FLASH_KV_KERN_H

#include "cuda/attention/flash_twin_limits.h"
#include "cuda/kernels/shim.h"
#include "engine/device/ops/attention_math.h"

/* The split problem: queries' dims d (d.T query rows), the key buffer's rows and width, the rows'
 * global positions. */
typedef struct tri_flash_kv {
    tri_flash_dims d;
    int64_t Tk, Wk;
    tri_flash_rows qr, kr;
} tri_flash_kv;

/* Element offsets: query head h of query row t; key head g of key row j (its value at + NH_kv HS). */
TRI_HD int64_t tri_flash_kv_q_at(tri_flash_kv p, int64_t b, int64_t t, int64_t h)
{
    return (b * p.d.T + t) * tri_flash_width(p.d) + h * p.d.HS;
}

TRI_HD int64_t tri_flash_kv_k_at(tri_flash_kv p, int64_t b, int64_t j, int64_t g)
{
    return (b * p.Tk + j) * p.Wk + p.Wk - 2 * p.d.NH_kv * p.d.HS + g * p.d.HS;
}

/* The end of the key chunk that row j starts or lies in. */
TRI_HD int64_t tri_flash_kv_chunk_end(tri_flash_rows r, int64_t j, int64_t n)
{
    return j < r.Tc ? (r.Tc < n ? r.Tc : n) : n;
}

/* q . k * scale across two buffers. */
TRI_HD float tri_flash_kv_score(const void *qb, int q_bf16, int64_t q, const void *kb, int k_bf16, int64_t k,
                                int64_t HS, float scale)
{
    float s = 0.0f;
    for (int64_t i = 0; i < HS; i++)
        s += tri_load(qb, q_bf16, q + i) * tri_load(kb, k_bf16, k + i);
    return s * scale;
}

/* a thread per query row r = (b*NH + h)*T + t */
TRI_KERNEL flash_kv_forward_kernel(void *out, int out_bf16, float *lse, const void *qkv, int qkv_bf16, const void *kv,
                                   int kv_bf16, tri_flash_kv p)
{
    tri_flash_dims d = p.d;
    int64_t T = d.T, HS = d.HS, C = d.NH * HS, vo = d.NH_kv * HS;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < d.B * d.NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / d.NH, h = bh % d.NH, g = tri_flash_kv_head(d, h);
        int64_t q = tri_flash_kv_q_at(p, b, t, h), tp = tri_flash_pos(p.qr, t);
        float s[TRI_FLASH_BC], acc[TRI_FLASH_MAX_HS];
        float m = -INFINITY, l = 0.0f;
        for (int64_t i = 0; i < HS; i++)
            acc[i] = 0.0f;
        for (int64_t c = 0; c < p.Tk; c = tri_flash_kv_chunk_end(p.kr, c, p.Tk)) {
            int64_t end = tri_flash_kv_chunk_end(p.kr, c, p.Tk), kp = tri_flash_pos(p.kr, c);
            for (int64_t j0 = c; j0 < end && kp + (j0 - c) <= tp; j0 += TRI_FLASH_BC) {
                int64_t nc = end - j0 < TRI_FLASH_BC ? end - j0 : TRI_FLASH_BC, first = kp + (j0 - c);
                int64_t n = tp - first + 1 < nc ? tp - first + 1 : nc;
                for (int64_t j = 0; j < n; j++)
                    s[j] = tri_flash_kv_score(qkv, qkv_bf16, q, kv, kv_bf16, tri_flash_kv_k_at(p, b, j0 + j, g), HS,
                                              scale);
                float alpha = tri_flash_row_update(s, n, &m, &l);
                for (int64_t i = 0; i < HS; i++) {
                    float a = acc[i] * alpha;
                    for (int64_t j = 0; j < n; j++)
                        a += s[j] * tri_load(kv, kv_bf16, tri_flash_kv_k_at(p, b, j0 + j, g) + vo + i);
                    acc[i] = a;
                }
            }
        }
        float inv = l == 0.0f ? 0.0f : 1.0f / l;
        for (int64_t i = 0; i < HS; i++)
            tri_store(out, out_bf16, (b * T + t) * C + h * HS + i, acc[i] * inv);
        lse[r] = tri_flash_lse(m, l);
    }
}

/* dS_tj and P_tj of query offset q (dout offset o) against key row offset k (value at k + vo). */
TRI_HD float tri_flash_kv_dscore(const void *qkv, int qkv_bf16, const void *kv, int kv_bf16, const void *dout,
                                 int dout_bf16, int64_t q, int64_t k, int64_t vo, int64_t o, int64_t HS, float scale,
                                 float lse_t, float delta_t, float *p_out)
{
    float pr = tri_expf(tri_flash_kv_score(qkv, qkv_bf16, q, kv, kv_bf16, k, HS, scale) - lse_t);
    float dp = 0.0f;
    for (int64_t i = 0; i < HS; i++)
        dp += tri_load(dout, dout_bf16, o + i) * tri_load(kv, kv_bf16, k + vo + i);
    *p_out = pr;
    return pr * (dp - delta_t);
}

/* dq_t (+)= scale * sum_{keys j at or before t} dS_tj k_j, a thread per query row */
TRI_KERNEL flash_kv_backward_dq_kernel(void *dqkv, int dqkv_bf16, const void *dout, int dout_bf16, const void *qkv,
                                       int qkv_bf16, const void *kv, int kv_bf16, const float *lse,
                                       const float *delta, tri_flash_kv p, int accumulate)
{
    tri_flash_dims d = p.d;
    int64_t T = d.T, HS = d.HS, C = d.NH * HS, vo = d.NH_kv * HS;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < d.B * d.NH * T; r += TRI_GLOBAL_STRIDE) {
        int64_t t = r % T, bh = r / T, b = bh / d.NH, h = bh % d.NH, g = tri_flash_kv_head(d, h);
        int64_t q = tri_flash_kv_q_at(p, b, t, h), o = (b * T + t) * C + h * HS, tp = tri_flash_pos(p.qr, t);
        float acc[TRI_FLASH_MAX_HS], pr;
        for (int64_t i = 0; i < HS; i++)
            acc[i] = 0.0f;
        for (int64_t j = 0; j < p.Tk; j++) {
            if (tri_flash_pos(p.kr, j) > tp)
                continue;
            int64_t k = tri_flash_kv_k_at(p, b, j, g);
            float ds = tri_flash_kv_dscore(qkv, qkv_bf16, kv, kv_bf16, dout, dout_bf16, q, k, vo, o, HS, scale,
                                           lse[r], delta[r], &pr);
            for (int64_t i = 0; i < HS; i++)
                acc[i] += ds * tri_load(kv, kv_bf16, k + i);
        }
        for (int64_t i = 0; i < HS; i++)
            tri_store(dqkv, dqkv_bf16, q + i, (accumulate ? tri_load(dqkv, dqkv_bf16, q + i) : 0.0f) + acc[i] * scale);
    }
}

/* dv_j (+)= sum_h sum_{queries t at or after j} P_tj dout_t, dk_j (+)= scale * sum dS_tj q_t, the group's
 * query heads in order, a thread per key row r = (b*NH_kv + g)*Tk + j of dkv (kv's layout) */
TRI_KERNEL flash_kv_backward_dkv_kernel(void *dkv, int dkv_bf16, const void *dout, int dout_bf16, const void *qkv,
                                        int qkv_bf16, const void *kv, int kv_bf16, const float *lse,
                                        const float *delta, tri_flash_kv p, int accumulate)
{
    tri_flash_dims d = p.d;
    int64_t T = d.T, HS = d.HS, C = d.NH * HS, rep = d.NH / d.NH_kv, vo = d.NH_kv * HS;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t r = TRI_GLOBAL_ID; r < d.B * d.NH_kv * p.Tk; r += TRI_GLOBAL_STRIDE) {
        int64_t j = r % p.Tk, bg = r / p.Tk, b = bg / d.NH_kv, g = bg % d.NH_kv;
        int64_t k = tri_flash_kv_k_at(p, b, j, g), jp = tri_flash_pos(p.kr, j);
        float ak[TRI_FLASH_MAX_HS], av[TRI_FLASH_MAX_HS], pr;
        for (int64_t i = 0; i < HS; i++)
            ak[i] = av[i] = 0.0f;
        for (int64_t h = g * rep; h < (g + 1) * rep; h++)
            for (int64_t t = 0; t < T; t++) {
                if (tri_flash_pos(p.qr, t) < jp)
                    continue;
                int64_t q = tri_flash_kv_q_at(p, b, t, h), o = (b * T + t) * C + h * HS, rt = (b * d.NH + h) * T + t;
                float ds = tri_flash_kv_dscore(qkv, qkv_bf16, kv, kv_bf16, dout, dout_bf16, q, k, vo, o, HS, scale,
                                               lse[rt], delta[rt], &pr);
                for (int64_t i = 0; i < HS; i++) {
                    av[i] += pr * tri_load(dout, dout_bf16, o + i);
                    ak[i] += ds * tri_load(qkv, qkv_bf16, q + i);
                }
            }
        for (int64_t i = 0; i < HS; i++) {
            float k0 = accumulate ? tri_load(dkv, dkv_bf16, k + i) : 0.0f;
            float v0 = accumulate ? tri_load(dkv, dkv_bf16, k + vo + i) : 0.0f;
            tri_store(dkv, dkv_bf16, k + i, k0 + ak[i] * scale);
            tri_store(dkv, dkv_bf16, k + vo + i, v0 + av[i]);
        }
    }
}

/* a thread per (b, t, h) row: out, lse <- merge with out2, lse2 (tri_flash_merge_weights) */
TRI_KERNEL flash_merge_kernel(void *out, int out_bf16, float *lse, const void *out2, int out2_bf16, const float *lse2,
                              tri_flash_dims d)
{
    int64_t NH = d.NH, HS = d.HS, C = NH * HS;
    for (int64_t row = TRI_GLOBAL_ID; row < d.B * d.T * NH; row += TRI_GLOBAL_STRIDE) {
        int64_t h = row % NH, bt = row / NH, b = bt / d.T, t = bt % d.T, s = (b * NH + h) * d.T + t;
        float w1, w2;
        lse[s] = tri_flash_merge_weights(lse[s], lse2[s], &w1, &w2);
        for (int64_t i = 0, o = bt * C + h * HS; i < HS; i++)
            tri_store(out, out_bf16, o + i, tri_load(out, out_bf16, o + i) * w1 + tri_load(out2, out2_bf16, o + i) * w2);
    }
}

/* a thread per element of the n columns of the N rows */
TRI_KERNEL copy_columns_kernel(void *dst, int dst_bf16, int64_t Wd, int64_t dst_col, const void *src, int src_bf16,
                               int64_t Ws, int64_t src_col, int64_t N, int64_t n)
{
    for (int64_t e = TRI_GLOBAL_ID; e < N * n; e += TRI_GLOBAL_STRIDE) {
        int64_t r = e / n, i = e % n;
        tri_store(dst, dst_bf16, r * Wd + dst_col + i, tri_load(src, src_bf16, r * Ws + src_col + i));
    }
}

#endif
