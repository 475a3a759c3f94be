/* engine/core/math.h - the per-element and per-row arithmetic of every device op, written once.
 *
 * These inline functions compile as C for the CPU backend and as __host__ __device__ functions for
 * the CUDA backend (cuda/), so the CPU tests exercise the exact arithmetic the GPU kernels run.
 * Rows are contiguous arrays; nothing here allocates or knows about threads. Formulas:
 * GELU tanh form (Hendrycks & Gimpel 2016), layernorm (Ba et al. 2016, eps 1e-5 as GPT-2),
 * AdamW (Loshchilov & Hutter 2019), bf16 round-to-nearest-even (as torch and CUDA's __float2bfloat16). */
#ifndef TRIDENT_ENGINE_CORE_MATH_H
#define TRIDENT_ENGINE_CORE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TRI_HD static inline __host__ __device__
#else
#define TRI_HD static inline
#endif

#define TRI_LN_EPS 1e-5f
#define TRI_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* ---- exp ----
 * exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2] (Cody & Waite 1980
 * two-constant reduction), exp(r) by the Cephes expf minimax polynomial (Moshier 1989); relative
 * error below 2e-7 over the range. Branch-free so loops over it vectorize (libm's expf does not
 * without -ffast-math). Inputs are clamped to [-87.3, 88.3] (results ~1e-38 and ~2e38 at the
 * ends); NaN propagates. */
TRI_HD float tri_expf(float x)
{
    float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    xc = xc == xc ? xc : 0.0f; /* NaN takes the integer path with 0 and is restored at the end */
    float k = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x == x ? y : x;
}

/* ---- bf16: the high 16 bits of an fp32, rounded to nearest even; NaN stays NaN ---- */
TRI_HD uint16_t tri_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

TRI_HD float tri_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- storage of floating tensors: fp32 or bf16, computed in fp32 ----
 * Mixed precision (Micikevicius et al. 2018; bf16 as Megatron-LM's --bf16) stores activations and
 * weights as bf16 and computes in fp32: an op widens every element it reads (exact) and rounds
 * every element it writes to nearest even. `bf16` says how the array is stored: 0 fp32, 1 bf16
 * (raw bits as uint16_t). Kernels take one such flag per floating argument. */
TRI_HD float tri_load(const void *p, int bf16, int64_t i)
{
    return bf16 ? tri_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

TRI_HD void tri_store(void *p, int bf16, int64_t i, float v)
{
    if (bf16)
        ((uint16_t *)p)[i] = tri_float_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* The value bf16 storage keeps of x (x rounded to bf16 and widened back). */
TRI_HD float tri_round_bf16(float x)
{
    return tri_bf16_to_float(tri_float_to_bf16(x));
}

/* The address of element i of an array stored as `bf16` says (a row's start, for the row functions
 * below). Takes a const pointer and returns a plain one, as strchr does: the caller keeps constness. */
TRI_HD void *tri_at(const void *p, int bf16, int64_t i)
{
    return (void *)((uintptr_t)p + (uintptr_t)(i * (bf16 ? 2 : 4)));
}

/* ---- GELU ----
 * The tanh form 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as the identical
 * x * sigmoid(2u) = x / (1 + exp(-2u)), which is stable at both ends and vectorizes. */
TRI_HD float tri_gelu(float x)
{
    float u = TRI_GELU_K * (x + 0.044715f * x * x * x);
    return x / (1.0f + tri_expf(-2.0f * u));
}

/* d gelu(x) / dx = s + 2 x s (1 - s) u', s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2);
 * equal to the tanh form's 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t = 2s - 1. 1 - s is computed as
 * e s (e = exp(-2u)), which does not cancel where s rounds to 1. */
TRI_HD float tri_gelu_grad(float x)
{
    float u = TRI_GELU_K * (x + 0.044715f * x * x * x);
    float du = TRI_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    float e = tri_expf(-2.0f * u);
    float s = 1.0f / (1.0f + e);
    return s + 2.0f * x * (e * s) * s * du;
}

/* ---- row reductions: the order every backend sums a row in (DESIGN.md §11) ----
 * A row of n values is summed over TRI_ROW_SLOTS = 256 slots: value i goes to slot i % 256, and each
 * slot adds its values in index order, starting from 0. The slots are then combined by a fixed tree:
 * inside each group of TRI_ROW_GROUP = 8 consecutive slots by halving (slot s += slot s + k for
 * k = 4, 2, 1), then the 32 group sums by halving (group g += group g + k for k = 16, 8, 4, 2, 1).
 * This is the order a CUDA warp sums a row in: lane l holds slots 8l .. 8l+7 in registers (one
 * 16-byte load of 8 bf16, or two of 4 floats, per 256 values), reduces its 8 registers, then the 32
 * lanes by __shfl_xor_sync with offsets 16 .. 1 (a + b == b + a in IEEE arithmetic, so every lane
 * ends with the bits of slot 0). On a CPU the 256 slots are vector adds with no reassociation. The
 * simple kernels and the CPU backend call the row functions below, the fast kernels
 * (cuda/kernels/..._fast.cuh) run the same sums a warp per row, so the three agree bit for bit
 * (kernels are built without FMA contraction, as the CPU code is). */
#define TRI_ROW_SLOTS 256
#define TRI_ROW_GROUP 8
#define TRI_ROW_LANES 32

/* The sum of one group of TRI_ROW_GROUP slot sums r[0..8) by halving; r is overwritten. */
TRI_HD float tri_row_group_combine(float *r)
{
    for (int k = TRI_ROW_GROUP / 2; k >= 1; k /= 2)
        for (int s = 0; s < k; s++)
            r[s] += r[s + k];
    return r[0];
}

/* The row sum from its TRI_ROW_SLOTS slot sums acc[0..256) (overwritten): groups, then lanes. */
TRI_HD float tri_row_slots_combine(float *acc)
{
    for (int g = 0; g < TRI_ROW_LANES; g++)
        tri_row_group_combine(acc + g * TRI_ROW_GROUP);
    for (int k = TRI_ROW_LANES / 2; k >= 1; k /= 2)
        for (int g = 0; g < k; g++)
            acc[g * TRI_ROW_GROUP] += acc[(g + k) * TRI_ROW_GROUP];
    return acc[0];
}

TRI_HD void tri_row_slots_zero(float *acc)
{
    for (int s = 0; s < TRI_ROW_SLOTS; s++)
        acc[s] = 0.0f;
}

/* How many of the n values from index i0 fall in this pass over the slots: min(n - i0, 256). A
 * plain bound keeps the slot loops countable, so a C compiler vectorizes them. */
TRI_HD int64_t tri_row_slots_span(int64_t i0, int64_t n)
{
    return n - i0 < TRI_ROW_SLOTS ? n - i0 : TRI_ROW_SLOTS;
}

/* ---- column reductions: the order every backend sums a column over rows (bias and layernorm
 * parameter gradients) ----
 * Rows are taken in chunks of TRI_COL_CHUNK = 64 (the last may be shorter); each chunk's column sum
 * starts from 0 and adds its rows in order; the accumulator (the gradient's previous value) then adds
 * the chunk sums in chunk order. A GPU computes the chunk sums in parallel (a thread per chunk and
 * column, coalesced along the row) and a second pass adds them in order; the CPU walks the same
 * chunks; the simple kernel does both in one thread per column. */
#define TRI_COL_CHUNK 64

/* Number of TRI_COL_CHUNK row chunks of N rows. */
TRI_HD int64_t tri_col_chunks(int64_t N)
{
    return (N + TRI_COL_CHUNK - 1) / TRI_COL_CHUNK;
}

/* ---- row functions: each takes its rows as fp32 or bf16 storage (a `_bf16` flag per row, 0 or 1,
 * tri_load / tri_store above) and computes in fp32. The fp32 names below them are the same
 * function with every flag 0: the CPU backend calls those, the CUDA kernels the flagged form, so
 * both run one text. A row written and then read again inside a function (the softmax's
 * probabilities, in place over the scores) is read back as stored: in bf16 it is rounded in between. */

/* ---- layernorm over one row of C; mean and rstd are fp32 ----
 * mean = sum(x) / C, var = sum((x - mean)^2) / C, each sum in the row order above. */
TRI_HD void tri_layernorm_row_forward_mixed(void *out, int out_bf16, float *mean_out, float *rstd_out,
                                            const void *x, int x_bf16, const void *w, int w_bf16,
                                            const void *b, int b_bf16, int64_t C)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++)
            acc[s] += tri_load(x, x_bf16, i0 + s);
    float m = tri_row_slots_combine(acc) / (float)C;
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float dx = tri_load(x, x_bf16, i0 + s) - m;
            acc[s] += dx * dx;
        }
    float var = tri_row_slots_combine(acc) / (float)C;
    float rs = 1.0f / sqrtf(var + TRI_LN_EPS);
    for (int64_t i = 0; i < C; i++)
        tri_store(out, out_bf16, i,
                  (tri_load(x, x_bf16, i) - m) * rs * tri_load(w, w_bf16, i) + tri_load(b, b_bf16, i));
    *mean_out = m;
    *rstd_out = rs;
}

TRI_HD void tri_layernorm_row_forward(float *out, float *mean_out, float *rstd_out, const float *x,
                                      const float *w, const float *b, int64_t C)
{
    tri_layernorm_row_forward_mixed(out, 0, mean_out, rstd_out, x, 0, w, 0, b, 0, C);
}

/* dx += d layernorm / dx given dout for one row: the means of dnorm = w * dout and of dnorm * norm
 * are row sums in the order above. dw and db are the caller's column sums (TRI_COL_CHUNK). */
TRI_HD void tri_layernorm_row_backward_input_mixed(void *dx, int dx_bf16, const void *dout, int dout_bf16,
                                                   const void *x, int x_bf16, const void *w, int w_bf16,
                                                   float mean, float rstd, int64_t C)
{
    float a1[TRI_ROW_SLOTS], a2[TRI_ROW_SLOTS];
    tri_row_slots_zero(a1);
    tri_row_slots_zero(a2);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float norm = (tri_load(x, x_bf16, i0 + s) - mean) * rstd;
            float dnorm = tri_load(w, w_bf16, i0 + s) * tri_load(dout, dout_bf16, i0 + s);
            a1[s] += dnorm;
            a2[s] += dnorm * norm;
        }
    float dnorm_mean = tri_row_slots_combine(a1) / (float)C;
    float dnorm_norm_mean = tri_row_slots_combine(a2) / (float)C;
    for (int64_t i = 0; i < C; i++) {
        float norm = (tri_load(x, x_bf16, i) - mean) * rstd;
        float dnorm = tri_load(w, w_bf16, i) * tri_load(dout, dout_bf16, i);
        tri_store(dx, dx_bf16, i,
                  tri_load(dx, dx_bf16, i) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd);
    }
}

TRI_HD void tri_layernorm_row_backward_input(float *dx, const float *dout, const float *x,
                                             const float *w, float mean, float rstd, int64_t C)
{
    tri_layernorm_row_backward_input_mixed(dx, 0, dout, 0, x, 0, w, 0, mean, rstd, C);
}

/* ---- RMSNorm over one row of C (Zhang & Sennrich 2019; Hugging Face's LlamaRMSNorm): rstd fp32 ----
 * rstd = 1 / sqrt(sum(x^2) / C + eps) with the sum in the row order above; out = (x * rstd) * w. */
TRI_HD void tri_rmsnorm_row_forward_mixed(void *out, int out_bf16, float *rstd_out, const void *x, int x_bf16,
                                          const void *w, int w_bf16, int64_t C, float eps)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float v = tri_load(x, x_bf16, i0 + s);
            acc[s] += v * v;
        }
    float rs = 1.0f / sqrtf(tri_row_slots_combine(acc) / (float)C + eps);
    for (int64_t i = 0; i < C; i++)
        tri_store(out, out_bf16, i, tri_load(x, x_bf16, i) * rs * tri_load(w, w_bf16, i));
    *rstd_out = rs;
}

/* dx += d rmsnorm / dx given dout for one row: with norm = x rstd and dnorm = w dout,
 * dx = (dnorm - norm * sum(dnorm norm) / C) rstd, the sum in the row order above. dw is the
 * caller's column sum of dout * norm (TRI_COL_CHUNK). */
TRI_HD void tri_rmsnorm_row_backward_input_mixed(void *dx, int dx_bf16, const void *dout, int dout_bf16,
                                                 const void *x, int x_bf16, const void *w, int w_bf16, float rstd,
                                                 int64_t C)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++) {
            float norm = tri_load(x, x_bf16, i0 + s) * rstd;
            acc[s] += tri_load(w, w_bf16, i0 + s) * tri_load(dout, dout_bf16, i0 + s) * norm;
        }
    float dnorm_norm_mean = tri_row_slots_combine(acc) / (float)C;
    for (int64_t i = 0; i < C; i++) {
        float norm = tri_load(x, x_bf16, i) * rstd;
        float dnorm = tri_load(w, w_bf16, i) * tri_load(dout, dout_bf16, i);
        tri_store(dx, dx_bf16, i, tri_load(dx, dx_bf16, i) + (dnorm - norm * dnorm_norm_mean) * rstd);
    }
}

/* ---- SwiGLU (Shazeer 2020), as Hugging Face's LlamaMLP: silu(gate) * up ----
 * silu(g) = g sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g)). */
TRI_HD float tri_sigmoid(float g)
{
    return 1.0f / (1.0f + tri_expf(-g));
}

TRI_HD float tri_swiglu(float gate, float up)
{
    return gate * tri_sigmoid(gate) * up;
}

/* d out / d gate and d out / d up, times dout. */
TRI_HD void tri_swiglu_backward(float gate, float up, float dout, float *dgate, float *dup)
{
    float sg = tri_sigmoid(gate);
    *dup = dout * (gate * sg);
    *dgate = dout * up * (sg * (1.0f + gate * (1.0f - sg)));
}

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
 * max is exact in any order; the sum of the exponentials is a row sum in the order above. */
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
 * ds may be dp (in place); the dot product is a row sum in the order above. */
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

/* The key/value head query head h reads. */
TRI_HD int64_t tri_flash_kv_head(tri_flash_dims d, int64_t h)
{
    return h / (d.NH / d.NH_kv);
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

/* The row's logsumexp after its last tile (natural log). */
TRI_HD float tri_flash_lse(float m, float l)
{
    return m + logf(l);
}

/* ---- cross-entropy pieces over one row of a vocab shard ----
 * The max is exact in any order (TRI_LANES interleaved lanes, so the loop vectorizes). The sum of
 * exponentials is a row of tens of thousands of logits (GPT-2: 50257), summed in a block's order so
 * that a GPU gives a whole block of TRI_CE_WARPS warps to a row (llm.c's fused classifier: a few rows
 * in flight per SM keep a row in L2 between its passes): the row is cut into spans of TRI_ROW_SLOTS
 * values, span m belongs to warp m % TRI_CE_WARPS, each warp sums its spans as one row in the order
 * above (value i of the row in slot i % 256 of warp (i / 256) % 16, each slot in index order, the
 * warp's slots by tri_row_slots_combine), and the warp sums are combined by halving (warp w += warp
 * w + k for k = 8, 4, 2, 1). TRI_LANES also sets the double lanes of the range sums below. */
#define TRI_LANES 8

TRI_HD float tri_ce_row_max_mixed(const void *logits, int bf16, int64_t V_valid)
{
    /* -FLT_MAX start: an empty shard must not turn the reduced max into -inf */
    float lane[TRI_LANES];
    for (int k = 0; k < TRI_LANES; k++)
        lane[k] = -3.402823466e38f;
    int64_t j = 0;
    for (; j + TRI_LANES <= V_valid; j += TRI_LANES)
        for (int k = 0; k < TRI_LANES; k++) {
            float v = tri_load(logits, bf16, j + k);
            lane[k] = v > lane[k] ? v : lane[k];
        }
    for (int k = 0; j + k < V_valid; k++) {
        float v = tri_load(logits, bf16, j + k);
        lane[k] = v > lane[k] ? v : lane[k];
    }
    float mx = lane[0];
    for (int k = 1; k < TRI_LANES; k++)
        mx = lane[k] > mx ? lane[k] : mx;
    return mx;
}

TRI_HD float tri_ce_row_max(const float *logits, int64_t V_valid)
{
    return tri_ce_row_max_mixed(logits, 0, V_valid);
}

#define TRI_CE_WARPS 16
#define TRI_CE_SLOTS (TRI_CE_WARPS * TRI_ROW_SLOTS) /* 4096 values per pass of a block */

/* The sum of TRI_CE_WARPS warp sums w[0..16) by halving; w is overwritten. */
TRI_HD float tri_ce_warps_combine(float *w)
{
    for (int k = TRI_CE_WARPS / 2; k >= 1; k /= 2)
        for (int s = 0; s < k; s++)
            w[s] += w[s + k];
    return w[0];
}

/* sum of exp(logit - mx) over the valid columns in the block order above: warp w's spans start at
 * w * 256, w * 256 + 4096, ...; a warp with no span sums to +0, which the halving adds exactly */
TRI_HD float tri_ce_row_sumexp_mixed(const void *logits, int bf16, float mx, int64_t V_valid)
{
    float acc[TRI_ROW_SLOTS], warp_sum[TRI_CE_WARPS];
    for (int w = 0; w < TRI_CE_WARPS; w++) {
        warp_sum[w] = 0.0f;
        if ((int64_t)w * TRI_ROW_SLOTS >= V_valid)
            continue;
        tri_row_slots_zero(acc);
        for (int64_t j0 = (int64_t)w * TRI_ROW_SLOTS; j0 < V_valid; j0 += TRI_CE_SLOTS)
            for (int64_t k = 0, len = tri_row_slots_span(j0, V_valid); k < len; k++)
                acc[k] += tri_expf(tri_load(logits, bf16, j0 + k) - mx);
        warp_sum[w] = tri_row_slots_combine(acc);
    }
    return tri_ce_warps_combine(warp_sum);
}

TRI_HD float tri_ce_row_sumexp(const float *logits, float mx, int64_t V_valid)
{
    return tri_ce_row_sumexp_mixed(logits, 0, mx, V_valid);
}

TRI_HD float tri_ce_loss(float mx, float sumexp, float target_logit)
{
    return logf(sumexp) + mx - target_logit;
}

/* dlogit of column j (local) given the reduced max and sum-exp; `is_target` marks the label. */
TRI_HD float tri_ce_dlogit(float logit, float mx, float sumexp, int is_target, float dloss)
{
    float p = tri_expf(logit - mx) / sumexp;
    return (p - (is_target ? 1.0f : 0.0f)) * dloss;
}

/* ---- reductions over a range of a flat buffer (gradient norm, non-finite check) ----
 * In double, over TRI_LANES interleaved lanes combined in order: the CPU backend sums its fixed
 * chunks with these, the CUDA kernels their chunks, so each chunk's sum is the same arithmetic. */
TRI_HD int tri_isfinite(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

/* sum of x[i]^2 for i in [lo, hi) */
TRI_HD double tri_sum_squares_range_mixed(const void *x, int bf16, int64_t lo, int64_t hi)
{
    double lane[TRI_LANES] = {0};
    int64_t i = lo;
    for (; i + TRI_LANES <= hi; i += TRI_LANES)
        for (int k = 0; k < TRI_LANES; k++) {
            float v = tri_load(x, bf16, i + k);
            lane[k] += (double)v * v;
        }
    for (; i < hi; i++) {
        float v = tri_load(x, bf16, i);
        lane[0] += (double)v * v;
    }
    double acc = 0.0;
    for (int k = 0; k < TRI_LANES; k++)
        acc += lane[k];
    return acc;
}

TRI_HD double tri_sum_squares_range(const float *x, int64_t lo, int64_t hi)
{
    return tri_sum_squares_range_mixed(x, 0, lo, hi);
}

/* number of NaN or Inf among x[lo, hi) (exact in double up to 2^53) */
TRI_HD double tri_count_nonfinite_range_mixed(const void *x, int bf16, int64_t lo, int64_t hi)
{
    double n = 0.0;
    for (int64_t i = lo; i < hi; i++)
        n += tri_isfinite(tri_load(x, bf16, i)) ? 0.0 : 1.0;
    return n;
}

TRI_HD double tri_count_nonfinite_range(const float *x, int64_t lo, int64_t hi)
{
    return tri_count_nonfinite_range_mixed(x, 0, lo, hi);
}

/* The total of n_chunks chunk sums part[0 .. n_chunks) (sum_squares, count_nonfinite): in
 * TRI_CHUNK_SLOTS = 256 slots, chunk c in slot c % 256, each slot adding its chunks in order from 0;
 * then the slots by halving (slot s += slot s + k for k = 128, 64, ..., 1). A block of 256 GPU
 * threads runs exactly this (a thread per slot, then a tree in shared memory), one thread or the
 * CPU the same loops; the chunking itself depends only on the element count. */
#define TRI_CHUNK_SLOTS 256

TRI_HD double tri_chunks_total(const double *part, int64_t n_chunks)
{
    double acc[TRI_CHUNK_SLOTS];
    for (int s = 0; s < TRI_CHUNK_SLOTS; s++)
        acc[s] = 0.0;
    for (int64_t c = 0; c < n_chunks; c++)
        acc[c % TRI_CHUNK_SLOTS] += part[c];
    for (int k = TRI_CHUNK_SLOTS / 2; k >= 1; k /= 2)
        for (int s = 0; s < k; s++)
            acc[s] += acc[s + k];
    return acc[0];
}

/* ---- AdamW on one element (Loshchilov & Hutter 2019, Algorithm 2) ----
 * In torch.optim.AdamW's order of operations: decay first, then the Adam step.
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. */
TRI_HD void tri_adamw_element(float *p, float g, float *m, float *v, float lr, float beta1,
                              float beta2, float eps, float wd, float bc1, float bc2)
{
    float mm = beta1 * *m + (1.0f - beta1) * g;
    float vv = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mm;
    *v = vv;
    float pp = *p * (1.0f - lr * wd);
    *p = pp - (lr / bc1) * mm / (sqrtf(vv) / sqrtf(bc2) + eps);
}

/* ---- fixed point: exact, order-independent sums (deterministic mode) ----
 * A gradient contribution x becomes round(x * 2^bits) as an int64; integer sums are exact, so any
 * grouping of them (micro-batches, data-parallel ranks, ZeRO shards) gives the same bits. */
#define TRI_FIXED_LIMIT 4611686018427387904.0 /* 2^62: headroom for sums of up to 2 values */

/* *out = round(x * 2^bits); returns 0 (and *out = 0) when x is not finite or out of range. */
TRI_HD int tri_fixed_from_float(float x, int bits, int64_t *out)
{
    double v = ldexp((double)x, bits);
    if (!(v > -TRI_FIXED_LIMIT && v < TRI_FIXED_LIMIT)) {
        *out = 0;
        return 0;
    }
    *out = (int64_t)llrint(v);
    return 1;
}

/* a + b modulo 2^64 (two's complement). Modular sums are associative, so any grouping still gives
 * the same bits; only a final sum beyond int64 range is wrong, and there each term is < 2^62. */
TRI_HD int64_t tri_fixed_add(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

TRI_HD float tri_fixed_to_float(int64_t a, int bits)
{
    return (float)ldexp((double)a, -bits);
}

/* w (192-bit unsigned, little-endian words) += the exact sum of round(x[i] * 2^bits)^2 over
 * [lo, hi); returns how many elements were not representable (left out). */
TRI_HD int64_t tri_fixed_sum_squares_range(const float *x, int bits, int64_t lo, int64_t hi, uint64_t w[3])
{
    int64_t bad = 0;
    for (int64_t i = lo; i < hi; i++) {
        int64_t a;
        if (!tri_fixed_from_float(x[i], bits, &a)) {
            bad++;
            continue;
        }
        uint64_t m = a < 0 ? (uint64_t)0 - (uint64_t)a : (uint64_t)a;
        unsigned __int128 sq = (unsigned __int128)m * m;
        uint64_t lo64 = (uint64_t)sq, hi64 = (uint64_t)(sq >> 64);
        uint64_t s0 = w[0] + lo64;
        uint64_t c0 = s0 < lo64;
        uint64_t s1 = w[1] + hi64 + c0;
        uint64_t c1 = s1 < hi64 || (c0 && s1 == hi64);
        w[0] = s0;
        w[1] = s1;
        w[2] += c1;
    }
    return bad;
}

#endif

