/* engine/device/ops/moe_dispatch_math.h - the arithmetic and orders of the Mixture-of-Experts dispatch
 * (token permutation, combine), which the CPU backend and the CUDA kernels both call (TRI_HD).
 *
 * The block routes each of N tokens to K of E experts (Shazeer et al. 2017; top-k as GShard, Lepikhin
 * et al. 2020, and Mixtral, Jiang et al. 2024). The dispatch follows Megatron-Core's
 * megatron/core/transformer/moe/moe_utils.py `permute` / `unpermute`: the selections are sorted by
 * expert with a stable sort (Megatron's masked_select over the (experts, tokens) routing map), so
 * within an expert the tokens keep their order (n ascending, then k), the experts' rows are
 * contiguous, and the combine adds each token's K weighted expert outputs, in k order (Megatron's
 * scatter_add_ leaves that order undefined).
 *
 * The counting sort, the one order every backend produces (the result is the unique stable sort, so
 * the integers are identical however the work is split): the N*K selections are cut into chunks of
 * `chunk` consecutive flat indices; counts[e][c] = selections of expert e in chunk c; the exclusive
 * scan in (e, c) order gives each (expert, chunk) its first row; each (expert, chunk) places its
 * selections in index order from there. The CPU runs one chunk; the GPU one thread per (expert,
 * chunk) with chunks of TRI_MOE_CHUNK. No atomics.
 *
 * Sums: the combine and the gather's backward add a token's K terms in k order in fp32 from 0 (a
 * product then an addition, no FMA contraction: C11 and nvcc --fmad=false); the combine weight's
 * gradient is a dot product over C in engine/core/math.h's row order (256 slots, the fixed tree). */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_MOE_DISPATCH_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_MOE_DISPATCH_MATH_H

#include <stdint.h>

#include "engine/core/math.h"

#define TRI_MOE_CHUNK 1024 /* selections per chunk of the GPU's counting sort */
/* experts of the GPU's fast counting sort (cuda/moe/dispatch_fast.cuh: a warp's running counts in
 * shared memory, 32 KiB a block; layers/moe.h's TRI_MOE_MAX_EXPERTS); above, the simple twins */
#define TRI_MOE_FAST_MAX_E 1024

/* Number of chunks of `chunk` selections covering n (0 for n == 0). */
TRI_HD int64_t tri_moe_chunks(int64_t n, int64_t chunk)
{
    return (n + chunk - 1) / chunk;
}

/* The selections of expert e among expert_idx[i0 .. i1). */
TRI_HD int32_t tri_moe_chunk_count(const int32_t *expert_idx, int64_t i0, int64_t i1, int32_t e)
{
    int32_t n = 0;
    for (int64_t i = i0; i < i1; i++)
        n += expert_idx[i] == e;
    return n;
}

/* The exclusive scan of counts(E, nch) in (expert, chunk) order, in place: afterwards counts[e*nch + c]
 * is the first permuted row of expert e's selections in chunk c. tokens_per_expert(E) = each expert's
 * total. Returns R, the kept selections. */
TRI_HD int64_t tri_moe_scan(int32_t *counts, int32_t *tokens_per_expert, int64_t E, int64_t nch)
{
    int64_t row = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t first = row;
        for (int64_t c = 0; c < nch; c++) {
            int32_t v = counts[e * nch + c];
            counts[e * nch + c] = (int32_t)row;
            row += v;
        }
        tokens_per_expert[e] = (int32_t)(row - first);
    }
    return row;
}

/* Places expert e's selections among expert_idx[i0 .. i1) in index order from permuted row `row`:
 * row_id_map[i] = its row, sorted_indices[row] = i. */
TRI_HD void tri_moe_chunk_place(int32_t *row_id_map, int32_t *sorted_indices, const int32_t *expert_idx, int64_t i0,
                                int64_t i1, int32_t e, int32_t row)
{
    for (int64_t i = i0; i < i1; i++)
        if (expert_idx[i] == e) {
            row_id_map[i] = row;
            sorted_indices[row] = (int32_t)i;
            row++;
        }
}

/* Element (r, c) of a row-permuted copy: src(N, C)[s / K] times w[s] (w NULL: the value itself) for
 * s = sorted_indices[r] >= 0, else 0. The permutation (x_perm from x) and the combine's input
 * gradient (dy_perm from dy and w). */
TRI_HD float tri_moe_spread(const void *src, int src_bf16, const int32_t *sorted_indices, const float *w, int64_t r,
                            int64_t c, int64_t K, int64_t C)
{
    int32_t s = sorted_indices[r];
    if (s < 0)
        return 0.0f;
    float v = tri_load(src, src_bf16, (int64_t)(s / K) * C + c);
    return w ? w[s] * v : v;
}

/* Element (n, c) of the combine: sum over k = 0..K-1 in k order of w[n*K + k] * y_perm[row_id_map[n*K + k]]
 * (w NULL: weight 1, no multiplication: the gather's backward), dropped selections (row -1) skipped,
 * in fp32 from 0. */
TRI_HD float tri_moe_combine(const void *y_perm, int y_bf16, const int32_t *row_id_map, const float *w, int64_t n,
                             int64_t c, int64_t K, int64_t C)
{
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        int32_t r = row_id_map[n * K + k];
        if (r < 0)
            continue;
        float v = tri_load(y_perm, y_bf16, (int64_t)r * C + c);
        acc += w ? w[n * K + k] * v : v;
    }
    return acc;
}

/* dot(a(C), b(C)) in engine/core/math.h's row order: the combine weight's gradient
 * dw[n,k] = dot(dy[n], y_perm[row]). a and b point at the rows' starts. */
TRI_HD float tri_moe_dot(const void *a, int a_bf16, const void *b, int b_bf16, int64_t C)
{
    float acc[TRI_ROW_SLOTS];
    tri_row_slots_zero(acc);
    for (int64_t i0 = 0; i0 < C; i0 += TRI_ROW_SLOTS)
        for (int64_t s = 0, len = tri_row_slots_span(i0, C); s < len; s++)
            acc[s] += tri_load(a, a_bf16, i0 + s) * tri_load(b, b_bf16, i0 + s);
    return tri_row_slots_combine(acc);
}

/* dw[n*K + k] of the combine's backward: the dot of dy's row n and y_perm's row of selection (n, k),
 * 0 when it was dropped. */
TRI_HD float tri_moe_weight_grad(const void *dy, int dy_bf16, const void *y_perm, int y_bf16,
                                 const int32_t *row_id_map, int64_t i, int64_t K, int64_t C)
{
    int32_t r = row_id_map[i];
    if (r < 0)
        return 0.0f;
    return tri_moe_dot(tri_at(dy, dy_bf16, (i / K) * C), dy_bf16, tri_at(y_perm, y_bf16, (int64_t)r * C), y_bf16, C);
}

#endif
