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

/* ---- row functions: each takes its rows as fp32 or bf16 storage (a `_bf16` flag per row, 0 or 1,
 * tri_load / tri_store above) and computes in fp32. The fp32 names below them are the same
 * function with every flag 0: the CPU backend calls those, the CUDA kernels the flagged form, so
 * both run one text. A row written and then read again inside a function (the softmax's
 * probabilities, in place over the scores) is read back as stored: in bf16 it is rounded in between. */

/* ---- layernorm over one row of C; mean and rstd are fp32 ---- */
TRI_HD void tri_layernorm_row_forward_mixed(void *out, int out_bf16, float *mean_out, float *rstd_out,
                                            const void *x, int x_bf16, const void *w, int w_bf16,
                                            const void *b, int b_bf16, int64_t C)
{
    float m = 0.0f;
    for (int64_t i = 0; i < C; i++)
        m += tri_load(x, x_bf16, i);
    m /= (float)C;
    float var = 0.0f;
    for (int64_t i = 0; i < C; i++) {
        float dx = tri_load(x, x_bf16, i) - m;
        var += dx * dx;
    }
    var /= (float)C;
    float s = 1.0f / sqrtf(var + TRI_LN_EPS);
    for (int64_t i = 0; i < C; i++)
        tri_store(out, out_bf16, i,
                  (tri_load(x, x_bf16, i) - m) * s * tri_load(w, w_bf16, i) + tri_load(b, b_bf16, i));
    *mean_out = m;
    *rstd_out = s;
}

TRI_HD void tri_layernorm_row_forward(float *out, float *mean_out, float *rstd_out, const float *x,
                                      const float *w, const float *b, int64_t C)
{
    tri_layernorm_row_forward_mixed(out, 0, mean_out, rstd_out, x, 0, w, 0, b, 0, C);
}

/* dx += d layernorm / dx given dout for one row. dw and db are accumulated by the caller
 * (their sums run over rows, which the backends order differently). */
TRI_HD void tri_layernorm_row_backward_input_mixed(void *dx, int dx_bf16, const void *dout, int dout_bf16,
                                                   const void *x, int x_bf16, const void *w, int w_bf16,
                                                   float mean, float rstd, int64_t C)
{
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int64_t i = 0; i < C; i++) {
        float norm = (tri_load(x, x_bf16, i) - mean) * rstd;
        float dnorm = tri_load(w, w_bf16, i) * tri_load(dout, dout_bf16, i);
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= (float)C;
    dnorm_norm_mean /= (float)C;
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

/* ---- causal softmax of one attention row: p[0..t] = softmax(s[0..t]), p[t+1..T) = 0 ----
 * p may be s (in place); p holds the exponentials before it is scaled. */
TRI_HD void tri_causal_softmax_row_mixed(void *p, int p_bf16, const void *s, int s_bf16, int64_t t, int64_t T)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j <= t; j++) {
        float sj = tri_load(s, s_bf16, j);
        mx = sj > mx ? sj : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= t; j++) {
        float e = tri_expf(tri_load(s, s_bf16, j) - mx);
        tri_store(p, p_bf16, j, e);
        sum += e;
    }
    float inv = 1.0f / sum;
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
 * ds may be dp (in place). */
TRI_HD void tri_causal_softmax_row_backward_mixed(void *ds, int ds_bf16, const void *p, int p_bf16,
                                                  const void *dp, int dp_bf16, int64_t t, int64_t T)
{
    float dot = 0.0f;
    for (int64_t j = 0; j <= t; j++)
        dot += tri_load(p, p_bf16, j) * tri_load(dp, dp_bf16, j);
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

/* ---- cross-entropy pieces over one row of a vocab shard ----
 * Row reductions accumulate in TRI_LANES interleaved partial results combined in a fixed order:
 * the same arithmetic on every backend and thread count, and loops the compiler can vectorize
 * without reassociating floating-point sums. */
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

TRI_HD float tri_ce_row_sumexp_mixed(const void *logits, int bf16, float mx, int64_t V_valid)
{
    float lane[TRI_LANES] = {0};
    int64_t j = 0;
    for (; j + TRI_LANES <= V_valid; j += TRI_LANES)
        for (int k = 0; k < TRI_LANES; k++)
            lane[k] += tri_expf(tri_load(logits, bf16, j + k) - mx);
    for (int k = 0; j + k < V_valid; k++)
        lane[k] += tri_expf(tri_load(logits, bf16, j + k) - mx);
    float sum = 0.0f;
    for (int k = 0; k < TRI_LANES; k++)
        sum += lane[k];
    return sum;
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

