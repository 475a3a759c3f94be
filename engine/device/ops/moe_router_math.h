/* engine/device/ops/moe_router_math.h - the Mixture-of-Experts router's arithmetic, written once: the
 * scores, the top-k selection, the capacity ranks, the backward through the weights, the
 * load-balancing losses and the expert-bias update.
 *
 * Inline functions (TRI_HD: C for the CPU backend, __host__ __device__ under nvcc) that the CPU loops
 * (moe_router_cpu.c) and the CUDA kernels (cuda/moe/router.kern.h) both call, so the backends agree
 * bit for bit. Every sum here has its order written down: over the E experts of a row and the K
 * selections of a token, in index order from 0 (one thread owns a row: E and K are small, 8 to 256);
 * over the N tokens (the two losses' scalars), in chunks of TRI_COL_CHUNK rows summed in double, the
 * chunks totalled by tri_chunks_total (engine/core/math.h).
 *
 * The math and its sources (docs/moe.md "The router"):
 *   scores  s = softmax(logits) (Shazeer et al. 2017; Mixtral, Qwen3-MoE) or sigmoid(logits)
 *           (DeepSeek-V3 2024 §2.1.2), in fp32;
 *   select  the K experts of largest s_e + bias_e (bias: DeepSeek-V3's auxiliary-loss-free balancing,
 *           selection only), ties to the lower expert index, in descending order;
 *   weights w_j = s_{e_j}, or with norm_topk w_j = s_{e_j} / (sum_i s_{e_i}) (softmax, Hugging Face's
 *           Mixtral order: softmax over all E, top-k, renormalise) or / (sum_i s_{e_i} + 1e-20)
 *           (sigmoid, Megatron-Core and DeepSeek-V3);
 *   aux     coeff * E / (K N^2) * sum_e c_e * sum_n p_ne (Megatron-Core's
 *           switch_load_balancing_loss_func; Fedus et al. 2021 §2.2), c_e the selections of expert e,
 *           p = softmax scores, or sigmoid scores normalised per token (+ 1e-20);
 *   z-loss  coeff * mean_n (logsumexp_e logits_ne)^2 (Zoph et al. 2022, ST-MoE §3.1);
 *   bias    bias_e += rate * sign(mean_e c - c_e) (DeepSeek-V3 §2.1.2; Megatron-Core's
 *           get_updated_expert_bias). */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_MOE_ROUTER_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_MOE_ROUTER_MATH_H

#include <math.h>
#include <stdint.h>

#include "engine/core/math.h"

/* score functions (Megatron-Core's --moe-router-score-function) */
#define TRI_MOE_SOFTMAX 0
#define TRI_MOE_SIGMOID 1
/* capacity drop policies (Megatron-Core's --moe-token-drop-policy) */
#define TRI_MOE_DROP_PROBS 0    /* an expert keeps its `capacity` selections of largest weight */
#define TRI_MOE_DROP_POSITION 1 /* an expert keeps its first `capacity` selections in token order */
/* the sigmoid renormalisations' guard (Megatron-Core, DeepSeek-V3) */
#define TRI_MOE_SIGMOID_EPS 1e-20f
/* the losses' token chunks: TRI_COL_CHUNK rows each, at most this many chunks (the CUDA backend's
 * partials buffer, engine/device/launch_shapes.h) */
#define TRI_MOE_MAX_CHUNKS 65536

/* A dropped selection of expert e is stored as -1 - e: negative, so the dispatch skips it, and the
 * expert still known to the backward (its score is in the renormalisation's sum). */
TRI_HD int32_t tri_moe_expert_of(int32_t idx)
{
    return idx < 0 ? -1 - idx : idx;
}

/* Megatron-Core's get_capacity(num_tokens = N * K, num_experts = E, capacity_factor):
 * ceil((N K / E) * factor) in double, as Python computes it. */
TRI_HD int64_t tri_moe_capacity(int64_t N, int64_t K, int64_t E, double capacity_factor)
{
    return (int64_t)ceil(((double)(N * K) / (double)E) * capacity_factor);
}

TRI_HD float tri_moe_sigmoid(float x)
{
    return 1.0f / (1.0f + tri_expf(-x));
}

/* s(E) = the row's scores. softmax: the max, then e_i = exp(l_i - max) and their sum in index order,
 * then s_i = e_i / sum; sigmoid: s_i = 1 / (1 + exp(-l_i)). s may not alias logits. */
TRI_HD void tri_moe_scores_row(float *s, const float *logits, int64_t E, int score_func)
{
    if (score_func == TRI_MOE_SIGMOID) {
        for (int64_t e = 0; e < E; e++)
            s[e] = tri_moe_sigmoid(logits[e]);
        return;
    }
    float mx = logits[0], sum = 0.0f;
    for (int64_t e = 1; e < E; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    for (int64_t e = 0; e < E; e++) {
        s[e] = tri_expf(logits[e] - mx);
        sum += s[e];
    }
    for (int64_t e = 0; e < E; e++)
        s[e] = s[e] / sum;
}

/* The renormalisation's denominator over the K selections (dropped ones included, by their
 * expert): their scores summed in selection order (+ the guard for sigmoid). */
TRI_HD float tri_moe_topk_sum(const int32_t *idx, const float *s, int K, int score_func)
{
    float sum = 0.0f;
    for (int j = 0; j < K; j++)
        sum += s[tri_moe_expert_of(idx[j])];
    return score_func == TRI_MOE_SIGMOID ? sum + TRI_MOE_SIGMOID_EPS : sum;
}

/* One token's selection: idx(K) the experts of largest key s_e + bias_e (bias NULL: key s_e), each
 * pass taking the largest key among the experts not yet chosen, the first (lowest index) on ties;
 * w(K) their unbiased scores, divided by tri_moe_topk_sum when norm_topk. */
TRI_HD void tri_moe_topk_row(int32_t *idx, float *w, const float *s, const float *bias, int64_t E, int K,
                             int norm_topk, int score_func)
{
    for (int j = 0; j < K; j++) {
        int64_t best = -1;
        float best_key = 0.0f;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++)
                taken |= idx[i] == (int32_t)e;
            if (taken)
                continue;
            float key = bias ? s[e] + bias[e] : s[e];
            if (best < 0 || key > best_key) {
                best = e;
                best_key = key;
            }
        }
        idx[j] = (int32_t)best;
        w[j] = s[best];
    }
    if (!norm_topk)
        return;
    float sum = tri_moe_topk_sum(idx, s, K, score_func);
    for (int j = 0; j < K; j++)
        w[j] = w[j] / sum;
}

/* Whether selection (m, wm) goes before (n, wn) in an expert's queue: by weight (descending, then
 * token order) for TRI_MOE_DROP_PROBS, by token order for TRI_MOE_DROP_POSITION. */
TRI_HD int tri_moe_precedes(int64_t m, float wm, int64_t n, float wn, int policy)
{
    if (policy == TRI_MOE_DROP_POSITION)
        return m < n;
    return wm > wn || (wm == wn && m < n);
}

/* The place of token n's selection j in its expert's queue: how many selections of the same expert
 * precede it (tri_moe_precedes), over all N tokens' K selections idx(N,K), w(N,K). A token selects
 * an expert at most once, so the places of one expert's selections are 0 .. count - 1. */
TRI_HD int64_t tri_moe_queue_rank(const int32_t *idx, const float *w, int64_t N, int K, int64_t n, int j, int policy)
{
    int32_t e = idx[n * K + j];
    float wn = w[n * K + j];
    int64_t rank = 0;
    for (int64_t m = 0; m < N; m++)
        for (int i = 0; i < K; i++)
            if (idx[m * K + i] == e && tri_moe_precedes(m, w[m * K + i], n, wn, policy))
                rank++;
    return rank;
}

/* The CUDA capacity's sort key (cuda/moe/capacity_fast.cuh: expert | weight's order code | position),
 * here for the cost model too: bits of a selection's position, those of NK - 1, at least 1. */
TRI_HD int tri_moe_cap_pos_bits(int64_t NK)
{
    int b = 1;
    while (b < 62 && ((int64_t)1 << b) < NK)
        b++;
    return b;
}

/* Whether a key holds E experts and NK positions: expert E - 1 in the 32 - pb high bits. */
TRI_HD int tri_moe_cap_fits(int64_t NK, int64_t E)
{
    int pb = tri_moe_cap_pos_bits(NK);
    return NK > 0 && E > 0 && pb <= 31 && (uint64_t)(E - 1) < ((uint64_t)1 << (32 - pb));
}

/* One token's gradient through the weights: dl(E) (overwritten) from dw(K), the kept-or-dropped
 * selections idx(K) (a dropped one's weight does not reach the output: its gradient g_j is 0) and
 * the scores s(E); g_j = dw_j for a kept selection.
 *   softmax, norm_topk: the weights are the softmax over the K selected logits (renormalising the
 *     top-k of a softmax cancels the other logits), so with w_j = s_{e_j} / S and dot = sum_j g_j w_j:
 *     dl_{e_j} = w_j (g_j - dot), 0 off the selections (exactly, not a cancellation's residue);
 *   softmax: dl_e = s_e (g_e - sum_j s_{e_j} g_j)  (g_e 0 off the selections);
 *   sigmoid, norm_topk: dl_{e_j} = ((g_j - dot) / S) s_{e_j} (1 - s_{e_j}), S with the 1e-20 guard;
 *   sigmoid: dl_{e_j} = g_j s_{e_j} (1 - s_{e_j}); both 0 off the selections.
 * S = tri_moe_topk_sum; the sums over j in selection order. */
TRI_HD void tri_moe_router_backward_row(float *dl, const float *dw, const int32_t *idx, const float *s, int64_t E,
                                        int K, int norm_topk, int score_func)
{
    int sig = score_func == TRI_MOE_SIGMOID;
    float S = norm_topk ? tri_moe_topk_sum(idx, s, K, score_func) : 1.0f, dot = 0.0f;
    for (int j = 0; j < K; j++) {
        float g = idx[j] >= 0 ? dw[j] : 0.0f, sj = s[tri_moe_expert_of(idx[j])];
        dot += g * (norm_topk ? sj / S : sj);
    }
    for (int64_t e = 0; e < E; e++) {
        float v = (!sig && !norm_topk) ? -s[e] * dot : 0.0f;
        for (int j = 0; j < K; j++) {
            if (tri_moe_expert_of(idx[j]) != (int32_t)e)
                continue;
            float g = idx[j] >= 0 ? dw[j] : 0.0f;
            if (sig)
                v = (norm_topk ? (g - dot) / S : g) * (s[e] * (1.0f - s[e]));
            else
                v = norm_topk ? (s[e] / S) * (g - dot) : s[e] * (g - dot);
        }
        dl[e] = v;
    }
}

/* ---- the auxiliary load-balancing loss ----
 * p_ne = s_ne (softmax) or s_ne / Z_n, Z_n = sum_e s_ne + 1e-20 (sigmoid; Megatron-Core's
 * compute_routing_scores_for_aux_loss). loss = scale * sum_n r_n with r_n = sum_e c_e p_ne (each
 * product and the row's sum in double) and scale = coeff E / (K N^2) in double: Megatron's
 * sum_e c_e (sum_n p_ne) * scale, summed by token first so a row's work stays in one thread. */
TRI_HD double tri_moe_aux_scale(double coeff, int64_t E, int64_t K, int64_t N)
{
    return N > 0 ? coeff * (double)E / ((double)K * (double)N * (double)N) : 0.0;
}

/* The z-loss's scale coeff / N (the mean over tokens). */
TRI_HD double tri_moe_z_scale(double coeff, int64_t N)
{
    return N > 0 ? coeff / (double)N : 0.0;
}

/* The fp32 factor of a loss's row gradient: aux gs = scale dloss, z-loss gz = 2 scale dloss. */
TRI_HD float tri_moe_loss_grad(double scale, float dloss, int z_loss)
{
    return (float)((z_loss ? 2.0 : 1.0) * scale * (double)dloss);
}

TRI_HD float tri_moe_aux_norm(const float *s, int64_t E, int score_func)
{
    if (score_func != TRI_MOE_SIGMOID)
        return 1.0f;
    float Z = 0.0f;
    for (int64_t e = 0; e < E; e++)
        Z += s[e];
    return Z + TRI_MOE_SIGMOID_EPS;
}

TRI_HD double tri_moe_aux_row(const float *s, const int32_t *counts, int64_t E, int score_func)
{
    float Z = tri_moe_aux_norm(s, E, score_func);
    double r = 0.0;
    for (int64_t e = 0; e < E; e++)
        r += (double)counts[e] * (double)(score_func == TRI_MOE_SIGMOID ? s[e] / Z : s[e]);
    return r;
}

/* dl(E) += the aux loss's gradient on one token's logits, times dloss: with g_e = gs c_e,
 * gs = tri_moe_loss_grad(scale, dloss, 0), dot = sum_i p_i g_i:
 *   softmax: dl_e += p_e (g_e - dot);  sigmoid: dl_e += ((g_e - dot) / Z) s_e (1 - s_e). */
TRI_HD void tri_moe_aux_backward_row(float *dl, const float *s, const int32_t *counts, int64_t E, int score_func,
                                     float gs)
{
    float Z = tri_moe_aux_norm(s, E, score_func), dot = 0.0f;
    int sig = score_func == TRI_MOE_SIGMOID;
    for (int64_t e = 0; e < E; e++)
        dot += (sig ? s[e] / Z : s[e]) * (gs * (float)counts[e]);
    for (int64_t e = 0; e < E; e++) {
        float g = gs * (float)counts[e] - dot;
        dl[e] += sig ? (g / Z) * (s[e] * (1.0f - s[e])) : s[e] * g;
    }
}

/* ---- the router z-loss ----
 * lse_n = max + log(sum_e exp(l_e - max)) (index order; tri_logf, which every backend shares: libm's
 * and CUDA's logf differ in the last bit, which an H200 showed in the gradients); loss = coeff / N * sum_n lse_n^2 (squares in
 * double); dl_e += (gz lse_n) p_e with gz = tri_moe_loss_grad(coeff / N, dloss, 1), p_e = exp(l_e - max) / sum. */
TRI_HD float tri_moe_lse_row(const float *logits, int64_t E, float *mx_out, float *sum_out)
{
    float mx = logits[0], sum = 0.0f;
    for (int64_t e = 1; e < E; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    for (int64_t e = 0; e < E; e++)
        sum += tri_expf(logits[e] - mx);
    *mx_out = mx;
    *sum_out = sum;
    return mx + tri_logf(sum);
}

TRI_HD void tri_moe_z_backward_row(float *dl, const float *logits, int64_t E, float gz)
{
    float mx, sum;
    float lse = tri_moe_lse_row(logits, E, &mx, &sum);
    float f = gz * lse;
    for (int64_t e = 0; e < E; e++)
        dl[e] += f * (tri_expf(logits[e] - mx) / sum);
}

/* The sum over chunk c's rows [c * TRI_COL_CHUNK, ..) of the aux loss's r_n (z_loss 0) or of
 * lse_n^2 (z_loss 1), in row order in double: the losses' per-chunk partials. */
TRI_HD double tri_moe_loss_chunk(const float *rows, const int32_t *counts, int64_t N, int64_t E, int score_func,
                                 int z_loss, int64_t c)
{
    int64_t lo = c * TRI_COL_CHUNK, hi = lo + TRI_COL_CHUNK < N ? lo + TRI_COL_CHUNK : N;
    double acc = 0.0;
    for (int64_t n = lo; n < hi; n++) {
        if (z_loss) {
            float mx, sum;
            double lse = (double)tri_moe_lse_row(rows + n * E, E, &mx, &sum);
            acc += lse * lse;
        } else {
            acc += tri_moe_aux_row(rows + n * E, counts, E, score_func);
        }
    }
    return acc;
}

/* ---- DeepSeek-V3's expert-bias update (no gradient) ----
 * bias_e += rate * sign(mean - c_e) over the step's counts c(E); the sign from the exact integer
 * comparison sum_i c_i vs E c_e (the same sign as mean - c_e, with no rounding). */
TRI_HD float tri_moe_bias_step(const int32_t *counts, int64_t E, int64_t e, float rate)
{
    int64_t total = 0;
    for (int64_t i = 0; i < E; i++)
        total += counts[i];
    int64_t off = total - E * (int64_t)counts[e];
    return off > 0 ? rate : (off < 0 ? -rate : 0.0f);
}

#endif
