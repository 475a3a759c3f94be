/* cuda/moe/dispatch.kern.h - the Mixture-of-Experts dispatch kernels (CUDA and C): the counting sort
 * of the selections by expert in (expert, chunk) pieces, the row permutation and the combine, each a
 * grid-stride loop calling engine/device/ops/moe_dispatch_math.h, the arithmetic and orders the CPU
 * backend runs, so every integer and every float is the CPU's bit for bit. No atomics: the counting
 * sort's threads own disjoint (expert, chunk) pieces, the scan is one thread over E x chunks values.
 * Floating arrays are fp32 or bf16 as their `_bf16` flag says (tri_load / tri_store, fp32 math). */
#ifndef TRIDENT_CUDA_MOE_DISPATCH_KERN_H
#define TRIDENT_CUDA_MOE_DISPATCH_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/moe_dispatch_math.h"

/* a[i] = v, i < n */
TRI_KERNEL moe_fill_i32_kernel(int32_t *a, int64_t n, int32_t v)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        a[i] = v;
}

/* counts[e * nch + c] = expert e's selections in chunk c (`chunk` flat indices of NK); a thread per (e, c) */
TRI_KERNEL moe_count_kernel(int32_t *counts, const int32_t *expert_idx, int64_t NK, int64_t E, int64_t nch,
                            int64_t chunk)
{
    for (int64_t t = TRI_GLOBAL_ID; t < E * nch; t += TRI_GLOBAL_STRIDE) {
        int64_t e = t / nch, c = t % nch, i1 = (c + 1) * chunk < NK ? (c + 1) * chunk : NK;
        counts[t] = tri_moe_chunk_count(expert_idx, c * chunk, i1, (int32_t)e);
    }
}

/* The exclusive scan of counts(E, nch) in place and tokens_per_expert(E): one thread */
TRI_KERNEL moe_scan_kernel(int32_t *counts, int32_t *tokens_per_expert, int64_t E, int64_t nch)
{
    for (int64_t t = TRI_GLOBAL_ID; t < 1; t += TRI_GLOBAL_STRIDE)
        tri_moe_scan(counts, tokens_per_expert, E, nch);
}

/* Each (e, c) places its selections from its first row first[e * nch + c]; a thread per (e, c) */
TRI_KERNEL moe_place_kernel(int32_t *row_id_map, int32_t *sorted_indices, const int32_t *expert_idx,
                            const int32_t *first, int64_t NK, int64_t E, int64_t nch, int64_t chunk)
{
    for (int64_t t = TRI_GLOBAL_ID; t < E * nch; t += TRI_GLOBAL_STRIDE) {
        int64_t e = t / nch, c = t % nch, i1 = (c + 1) * chunk < NK ? (c + 1) * chunk : NK;
        tri_moe_chunk_place(row_id_map, sorted_indices, expert_idx, c * chunk, i1, (int32_t)e, first[t]);
    }
}

/* out(P, C) = tri_moe_spread of src(N, C): the permutation (w NULL) or the combine's input gradient */
TRI_KERNEL moe_spread_kernel(void *out, int out_bf16, const void *src, int src_bf16, const int32_t *sorted_indices,
                             const float *w, int64_t P, int64_t C, int64_t K)
{
    for (int64_t e = TRI_GLOBAL_ID; e < P * C; e += TRI_GLOBAL_STRIDE)
        tri_store(out, out_bf16, e, tri_moe_spread(src, src_bf16, sorted_indices, w, e / C, e % C, K, C));
}

/* out(N, C) = tri_moe_combine of perm(N*K, C): the combine (w) or the permutation's backward (w NULL) */
TRI_KERNEL moe_combine_kernel(void *out, int out_bf16, const void *perm, int perm_bf16, const int32_t *row_id_map,
                              const float *w, int64_t N, int64_t C, int64_t K)
{
    for (int64_t e = TRI_GLOBAL_ID; e < N * C; e += TRI_GLOBAL_STRIDE)
        tri_store(out, out_bf16, e, tri_moe_combine(perm, perm_bf16, row_id_map, w, e / C, e % C, K, C));
}

/* dw(NK) = tri_moe_weight_grad: a thread per selection, the row's dot in engine/core/math.h's order */
TRI_KERNEL moe_weight_grad_kernel(float *dw, const void *dy, int dy_bf16, const void *y_perm, int y_bf16,
                                  const int32_t *row_id_map, int64_t NK, int64_t K, int64_t C)
{
    for (int64_t i = TRI_GLOBAL_ID; i < NK; i += TRI_GLOBAL_STRIDE)
        dw[i] = tri_moe_weight_grad(dy, dy_bf16, y_perm, y_bf16, row_id_map, i, K, C);
}

#endif
