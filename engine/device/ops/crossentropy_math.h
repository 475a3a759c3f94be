/* engine/device/ops/crossentropy_math.h - the cross-entropy pieces over one row of a vocab shard,
 * written once.
 *
 * Inline functions (TRI_HD: C for the CPU backend, __host__ __device__ under nvcc) that the CPU loops
 * (crossentropy_cpu.c) and the CUDA kernels (cuda/crossentropy/crossentropy.kern.h,
 * crossentropy_fast.cuh) both call, so the backends agree bit for bit. */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_CROSSENTROPY_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_CROSSENTROPY_MATH_H

#include <math.h>
#include <stdint.h>

#include "engine/core/math.h"

/* ---- cross-entropy pieces over one row of a vocab shard ----
 * The max is exact in any order (TRI_LANES interleaved lanes, engine/core/math.h, so the loop
 * vectorizes). The sum of exponentials is a row of tens of thousands of logits (GPT-2: 50257),
 * summed in a block's order so that a GPU gives a whole block of TRI_CE_WARPS warps to a row
 * (llm.c's fused classifier: a few rows in flight per SM keep a row in L2 between its passes): the
 * row is cut into spans of TRI_ROW_SLOTS values, span m belongs to warp m % TRI_CE_WARPS, each warp
 * sums its spans as one row in the order of engine/core/math.h (value i of the row in slot i % 256
 * of warp (i / 256) % 16, each slot in index order, the warp's slots by tri_row_slots_combine), and
 * the warp sums are combined by halving (warp w += warp w + k for k = 8, 4, 2, 1). */

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

#endif
