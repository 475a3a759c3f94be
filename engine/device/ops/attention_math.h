/* engine/device/ops/attention_math.h - the attention family's arithmetic, written once: the rotary
 * embedding of one pair, the causal softmax of one attention row, and the tiles and online softmax
 * of fused attention.
 *
 * Inline functions (TRI_HD: C for the CPU backend, __host__ __device__ under nvcc) that the CPU loops
 * (attention_cpu.c, flash_cpu.c) and the CUDA kernels (cuda/attention/attention.kern.h,
 * softmax_fast.cuh, flash*.kern.h, rope*) both call; row sums follow engine/core/math.h's order. */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_ATTENTION_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_ATTENTION_MATH_H

#include <math.h>
#include <stdint.h>

#include "engine/core/math.h"

/* ---- rotary position embedding of one pair (Su et al. 2021), Hugging Face's rotate_half form ----
 * Elements i and i + HS/2 of a head, at a position with cos c and sin s of frequency i:
 * (a, b) <- (a c - b s, b c + a s), i.e. x cos + rotate_half(x) sin; the backward rotates back. */
TRI_HD void tri_rope_pair(float *a, float *b, float c, float s)
{
    float x = *a, y = *b;
    *a = x * c - y * s;
    *b = y * c + x * s;
}

TRI_HD void tri_rope_pair_backward(float *a, float *b, float c, float s)
{
    float x = *a, y = *b;
    *a = x * c + y * s;
    *b = y * c - x * s;
}

/* ---- causal softmax of one attention row: p[0..t] = softmax(s[0..t]), p[t+1..T) = 0 ----
 * p may be s (in place); p holds the exponentials before it is scaled (read back as stored). The
 * max is exact in any order; the sum of the exponentials is a row sum in engine/core/math.h's order. */
TRI_HD void tri_causal_softmax_row_mixed(void *p, int p_bf16, const void *s, int s_bf16, int64_t t, int64_t T)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j <= t; j++) {
        float sj = tri_load(s, s_bf16, j);
        mx = sj > mx ? sj : mx;
    }
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t j0 = 0; j0 <= t; j0 += TRI_ROW_SLOTS)
        for (int64_t k = 0, len = tri_row_slots_span(j0, t + 1); k < len; k++) {
            float e = tri_expf(tri_load(s, s_bf16, j0 + k) - mx);
            tri_store(p, p_bf16, j0 + k, e);
            acc[k] += e;
        }
    float inv = 1.0f / tri_row_slots_combine(acc);
    for (int64_t j = 0; j <= t; j++)
        tri_store(p, p_bf16, j, tri_load(p, p_bf16, j) * inv);
    for (int64_t j = t + 1; j < T; j++)
        tri_store(p, p_bf16, j, 0.0f);
}

TRI_HD void tri_causal_softmax_row(float *p, const float *s, int64_t t, int64_t T)
{
    tri_causal_softmax_row_mixed(p, 0, s, 0, t, T);
}

/* Softmax backward of one causal row: ds[j] = p[j] * (dp[j] - sum_k p[k] dp[k]), j <= t; 0 after.
 * ds may be dp (in place); the dot product is a row sum in engine/core/math.h's order. */
TRI_HD void tri_causal_softmax_row_backward_mixed(void *ds, int ds_bf16, const void *p, int p_bf16,
                                                  const void *dp, int dp_bf16, int64_t t, int64_t T)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t j0 = 0; j0 <= t; j0 += TRI_ROW_SLOTS)
        for (int64_t k = 0, len = tri_row_slots_span(j0, t + 1); k < len; k++)
            acc[k] += tri_load(p, p_bf16, j0 + k) * tri_load(dp, dp_bf16, j0 + k);
    float dot = tri_row_slots_combine(acc);
    for (int64_t j = 0; j <= t; j++)
        tri_store(ds, ds_bf16, j, tri_load(p, p_bf16, j) * (tri_load(dp, dp_bf16, j) - dot));
    for (int64_t j = t + 1; j < T; j++)
        tri_store(ds, ds_bf16, j, 0.0f);
}

TRI_HD void tri_causal_softmax_row_backward(float *ds, const float *p, const float *dp, int64_t t,
                                            int64_t T)
{
    tri_causal_softmax_row_backward_mixed(ds, 0, p, 0, dp, 0, t, T);
}

/* ---- fused causal attention (FlashAttention-2: Dao 2023 §3.1, Algorithm 1) ----
 * Queries go in tiles of TRI_FLASH_BR rows, keys and values in tiles of TRI_FLASH_BC; a query row t
 * sees the keys j <= t, so the key tiles past a query tile's diagonal are skipped. Each row keeps a
 * running max m and running sum l of the exponentials: after its scores s[0..n) of one key tile
 * (scaled by 1/sqrt(HS), only the n visible keys) tri_flash_row_update replaces s by the
 * exponentials p = exp(s - m_new) and returns alpha = exp(m - m_new), by which the row's output
 * accumulator is multiplied before p v is added. After the last tile the output is divided by l
 * and the row's logsumexp m + log(l) is saved: the backward recomputes each probability as
 * exp(s - lse) (Algorithm 2). The key tiles go in ascending order and each tile's sum adds its
 * exponentials left to right: that order is part of the op (the score and output products are
 * BLAS or tensor-core sums, so the op matches the materialised path within a tolerance, not bit
 * for bit). Context parallelism can feed a row key tiles from other ranks through the same update. */
#define TRI_FLASH_BR 64
#define TRI_FLASH_BC 64

/* The layout of one fused attention problem: qkv rows of W = (NH + 2 NH_kv) HS elements holding
 * [q | k | v], NH query heads and NH_kv key/value heads of HS each, head h of a part at column h*HS
 * of it; grouped-query attention (Ainslie et al. 2023) when NH_kv < NH: query head h reads
 * key/value head h / (NH / NH_kv), as Hugging Face's repeat_kv; NH_kv = NH is multi-head. out and
 * dout are (B, T, NH HS); lse and delta (B, NH, T). */
typedef struct tri_flash_dims {
    int64_t B, T, NH, NH_kv, HS;
} tri_flash_dims;

TRI_HD int64_t tri_flash_width(tri_flash_dims d)
{
    return (d.NH + 2 * d.NH_kv) * d.HS;
}

/* Element offsets in qkv of token t of sequence b: query head h, key head g, value head g. */
TRI_HD int64_t tri_flash_q_at(tri_flash_dims d, int64_t b, int64_t t, int64_t h)
{
    return (b * d.T + t) * tri_flash_width(d) + h * d.HS;
}

TRI_HD int64_t tri_flash_k_at(tri_flash_dims d, int64_t b, int64_t t, int64_t g)
{
    return (b * d.T + t) * tri_flash_width(d) + (d.NH + g) * d.HS;
}

TRI_HD int64_t tri_flash_v_at(tri_flash_dims d, int64_t b, int64_t t, int64_t g)
{
    return (b * d.T + t) * tri_flash_width(d) + (d.NH + d.NH_kv + g) * d.HS;
}

/* Elements of layers/cp_attention.h's scratch for a rank's local problem `local` (T = T_l rows) on cp
 * ranks: *act_n of the activations' dtype (forward and all_gather backward: kv_l, kv_r, kv_g of 2 C_kv
 * columns; deterministic backward: qkv_r, qkv_g, dout_r, dout_g when larger) and *f32_n f32
 * (all_gather backward: dkv_g, dkv_r, dkv_l; deterministic: stat_r, lse_g, delta_g). *fwd_act_n: the
 * forward's part of act. One function for the layer (tri_cp_scratch_numel) and the partitioner's plan
 * (partitioner/context_parallel.h tri_cp_scratch_bytes), so planned == allocated. */
static inline void tri_cp_scratch_counts(tri_flash_dims local, int64_t cp, int deterministic, int64_t *act_n,
                                         int64_t *f32_n, int64_t *fwd_act_n)
{
    int64_t B = local.B, T_l = local.T, T = T_l * cp, KV = 2 * local.NH_kv * local.HS, C = local.NH * local.HS;
    int64_t W = (local.NH + 2 * local.NH_kv) * local.HS;
    int64_t kv = B * T_l * KV * (1 + 2 * cp); /* kv_l, kv_r, kv_g */
    int64_t det = B * T * (2 * W + 2 * C);    /* qkv_r, qkv_g, dout_r, dout_g */
    *act_n = deterministic && det > kv ? det : kv;
    *f32_n = deterministic ? 3 * B * local.NH * T : kv; /* stat_r, lse_g, delta_g / dkv_g, dkv_r, dkv_l */
    *fwd_act_n = kv;
}

/* The same for the p2p ring (layers/cp_attention.c, not deterministic): act kv_a, kv_b (B, T_l, 2 C_kv)
 * (the block in hand and the one arriving) and o2 (B, T_l, C_l) (a block's partial out); f32 the
 * larger of the forward's l2 (B, NH_l, T_l) (its lse) and the backward's dkv_a, dkv_b, dkv_loc
 * (B, T_l, 2 C_kv) (the f32 dk|dv accumulator in hand, the one arriving, and this rank's share of
 * the block in hand). *fwd_act_n, *fwd_f32_n: the forward's. */
static inline void tri_cp_ring_scratch_counts(tri_flash_dims local, int64_t *act_n, int64_t *f32_n,
                                              int64_t *fwd_act_n, int64_t *fwd_f32_n)
{
    int64_t B = local.B, T_l = local.T, KV = 2 * local.NH_kv * local.HS, C = local.NH * local.HS;
    int64_t block = B * T_l * KV, part = B * local.NH * T_l;
    *act_n = *fwd_act_n = 2 * block + B * T_l * C;
    *fwd_f32_n = part;
    *f32_n = 3 * block > part ? 3 * block : part;
}

/* The key/value head query head h reads. */
TRI_HD int64_t tri_flash_kv_head(tri_flash_dims d, int64_t h)
{
    return h / (d.NH / d.NH_kv);
}

/* ---- fused attention across a split sequence (context parallelism) ----
 * Where the rows of a query or key/value buffer sit in the global sequence: rows [0, Tc) at global
 * positions pos0.., rows [Tc, rows) at pos1.. (Megatron-Core's two chunks of a cp rank: chunk i,
 * then chunk 2cp-1-i). Causality is by global position: a query at p sees the keys at j <= p.
 * One chunk (today's op): Tc >= the rows, pos0 = 0. The ops keep key tiles at absolute multiples of
 * TRI_FLASH_BC (pos0, pos1 and a split Tc multiples of 64), so a query row meets the same key tiles
 * in the same ascending order however the sequence is cut, which makes the cut bit-identical. */
typedef struct tri_flash_rows {
    int64_t Tc, pos0, pos1;
} tri_flash_rows;

/* The rows of a buffer of T rows as one chunk at global position 0 (today's op). */
TRI_HD tri_flash_rows tri_flash_rows_whole(int64_t T)
{
    tri_flash_rows r = {T, 0, T};
    return r;
}

/* Global position of local row t. */
TRI_HD int64_t tri_flash_pos(tri_flash_rows r, int64_t t)
{
    return t < r.Tc ? r.pos0 + t : r.pos1 + (t - r.Tc);
}

/* Merge of two partial attentions of one row over disjoint key sets (the ring's online softmax,
 * Milakov & Gimelshein 2018): lse = log(e^lse1 + e^lse2), out = out1 e^(lse1-lse) + out2
 * e^(lse2-lse), computed as m = max, lse = m + log(e^(lse1-m) + e^(lse2-m)); a row that saw no key
 * in either part (both -inf) gets lse -inf and weights 0. Sets *w1, *w2 and returns lse. */
TRI_HD float tri_flash_merge_weights(float lse1, float lse2, float *w1, float *w2)
{
    float m = lse1 > lse2 ? lse1 : lse2;
    if (m == -INFINITY) {
        *w1 = 0.0f, *w2 = 0.0f;
        return -INFINITY;
    }
    float e1 = lse1 == -INFINITY ? 0.0f : tri_expf(lse1 - m), e2 = lse2 == -INFINITY ? 0.0f : tri_expf(lse2 - m);
    float lse = m + logf(e1 + e2);
    *w1 = lse1 == -INFINITY ? 0.0f : tri_expf(lse1 - lse);
    *w2 = lse2 == -INFINITY ? 0.0f : tri_expf(lse2 - lse);
    return lse;
}

TRI_HD float tri_flash_row_update(float *s, int64_t n, float *m, float *l)
{
    float mx = *m;
    for (int64_t j = 0; j < n; j++)
        mx = s[j] > mx ? s[j] : mx;
    if (n == 0)
        return 1.0f;
    float alpha = *m == -INFINITY ? 0.0f : tri_expf(*m - mx);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        s[j] = tri_expf(s[j] - mx);
        sum += s[j];
    }
    *m = mx;
    *l = *l * alpha + sum;
    return alpha;
}

/* The row's logsumexp after its last tile (natural log); -inf for a row that saw no key (l 0: a
 * query before every key of a block, only under context parallelism). */
TRI_HD float tri_flash_lse(float m, float l)
{
    return l == 0.0f ? -INFINITY : m + logf(l);
}

#endif
