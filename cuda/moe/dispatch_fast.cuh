/* cuda/moe/dispatch_fast.cuh - the fast forms of the Mixture-of-Experts dispatch (CUDA, and C++ on the
 * CPU through cuda/kernels/cuda_emu.h), each computing its simple twin's integers and floats
 * (cuda/moe/dispatch.kern.h, engine/device/ops/moe_dispatch_math.h's orders), so the CPU's bits:
 *   - the counting sort's counts and placement, a warp per chunk of selections (the twins: a thread
 *     per (expert, chunk) reading the whole chunk, E x NK reads): 32 selections a step, each lane's
 *     rank among the step's lanes of its expert from the step's experts in shared memory (ids, read
 *     by all lanes at once: broadcasts), the step's last lane of an expert adding the step's count to
 *     the warp's running count of that expert (run, E of them a warp: no atomics, one writer an
 *     expert). NK reads and 32 NK shared compares, E <= TRI_MOE_FAST_MAX_E (run's 32 KiB a block);
 *   - the scan of the E x chunks counts, a block of TRI_MOE_SCAN_THREADS (the twin: one thread): tiles
 *     of the flat (expert, chunk) array loaded coalesced, a Hillis-Steele scan of each tile in shared
 *     memory (cuda/kernels/block_reduce.cuh), a carry from tile to tile; integers, so any order's sums;
 *   - the permutation, the combine and their backwards, a warp per row in whole-sector accesses
 *     (cuda/warp.cuh tri_row_load8 / tri_row_store8: the row kernels' lane map, 8 elements a lane a pass
 *     as two runs of 4; the twins: a thread per element),
 *     each element's arithmetic the twin's: a product, or the K terms added in k order;
 *   - the combine weight's gradient, a warp per selection, the dot in engine/core/math.h's row order
 *     across the lanes (cuda/warp.cuh: lane l holds slots 4l .. 4l+3 and 128+4l .. 128+4l+3, read in
 *     whole-sector accesses of 512 (fp32) or 256 bytes (bf16); tri_warp_row_sum's tree).
 * The shared indices are tri_moe_warp_slot, tri_moe_run_at and the scan's tri_block_scan_slot, which
 * tests/test_access_patterns.cpp enumerates for a warp (with the row copies' global sectors). */
#ifndef TRIDENT_CUDA_MOE_DISPATCH_FAST_CUH
#define TRIDENT_CUDA_MOE_DISPATCH_FAST_CUH

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/warp.cuh"
#include "engine/device/ops/moe_dispatch_math.h"

/* dw[i] = dot(dy[i / K], y_perm[row_id_map[i]]) (0 for a dropped selection), a warp per selection i */
__global__ void moe_weight_grad_fast_kernel(float *dw, const void *dy, int dy_bf16, const void *y_perm, int y_bf16,
                                            const int32_t *row_id_map, int64_t NK, int64_t K, int64_t C)
{
    int64_t i = tri_warp_row();
    if (i >= NK)
        return;
    int32_t r = row_id_map[i]; /* the same for the whole warp: it returns or sums together */
    if (r < 0) {
        if (tri_lane() == 0)
            dw[i] = 0.0f;
        return;
    }
    const void *a = tri_at(dy, dy_bf16, (i / K) * C), *b = tri_at(y_perm, y_bf16, (int64_t)r * C);
    bool va = tri_aligned16(a), vb = tri_aligned16(b);
    float s[8] = {0}, av[8] = {0}, bv[8] = {0};
    for (int64_t j = tri_row_first(tri_lane()); j < C; j += TRI_ROW_SLOTS) {
        tri_row_load8(av, a, dy_bf16, j, C, va);
        tri_row_load8(bv, b, y_bf16, j, C, vb);
        for (int k = 0; k < 8 && j + tri_row_at(k) < C; k++)
            s[k] += av[k] * bv[k];
    }
    float v = tri_warp_row_sum(s);
    if (tri_lane() == 0)
        dw[i] = v;
}


#define TRI_MOE_SCAN_THREADS 1024   /* the block of the counting sort's scan */

/* ---- the shared indices (tests/test_access_patterns.cpp) ---- */

/* Lane l's word of warp w's step experts ids(TRI_ROWS_PER_BLOCK x 32): written by each lane, then read
 * at j by all lanes together. */
TRI_HD int tri_moe_warp_slot(int w, int l)
{
    return 32 * w + l;
}

/* Warp w's running count of expert e (run(TRI_ROWS_PER_BLOCK x E)). */
TRI_HD int tri_moe_run_at(int w, int64_t e, int64_t E)
{
    return (int)(w * E + e);
}

/* This lane's rank among the lanes of its warp's step with expert e (those before it), and whether
 * it is the last of them. ids is the warp's 32 words; e < 0 for no selection. */
__device__ __forceinline__ int tri_moe_step_rank(int32_t *ids, int w, int lane, int32_t e, bool *last)
{
    ids[tri_moe_warp_slot(w, lane)] = e;
    __syncwarp();
    int rank = 0;
    bool later = false;
    for (int j = 0; j < 32; j++) {
        int32_t o = ids[tri_moe_warp_slot(w, j)];
        rank += j < lane && o == e;
        later = later || (j > lane && o == e);
    }
    __syncwarp(); /* every lane read ids before the next step writes it */
    *last = !later;
    return rank;
}

/* The counting sort of the selections expert_idx(NK) by expert, a warp per chunk of `chunk`: with
 * first NULL, counts[e * nch + c] = expert e's selections in chunk c; with first (the scanned counts),
 * each selection's row, row_id_map[i] and sorted_indices[row]. Experts outside [0, E) are skipped.
 * Block of 32 TRI_ROWS_PER_BLOCK threads, any grid; E <= TRI_MOE_FAST_MAX_E. */
__global__ void __launch_bounds__(32 * TRI_ROWS_PER_BLOCK)
    moe_sort_fast_kernel(int32_t *counts, int32_t *row_id_map, int32_t *sorted_indices, const int32_t *first,
                         const int32_t *expert_idx, int64_t NK, int64_t E, int64_t nch, int64_t chunk)
{
    __shared__ int32_t run[TRI_ROWS_PER_BLOCK * TRI_MOE_FAST_MAX_E]; /* 32 KiB */
    __shared__ int32_t ids[TRI_ROWS_PER_BLOCK * 32];
    const int w = (int)(threadIdx.x / 32), lane = tri_lane();
    for (int64_t c = (int64_t)blockIdx.x * TRI_ROWS_PER_BLOCK + w; c < nch;
         c += (int64_t)gridDim.x * TRI_ROWS_PER_BLOCK) {
        for (int64_t e = lane; e < E; e += 32)
            run[tri_moe_run_at(w, e, E)] = first ? first[e * nch + c] : 0;
        __syncwarp();
        int64_t i1 = (c + 1) * chunk < NK ? (c + 1) * chunk : NK;
        for (int64_t i0 = c * chunk; i0 < i1; i0 += 32) {
            int64_t i = i0 + lane;
            int32_t e = i < i1 ? expert_idx[i] : -1;
            e = e < E ? e : -1;
            bool last;
            int rank = tri_moe_step_rank(ids, w, lane, e, &last);
            int32_t row = e >= 0 ? run[tri_moe_run_at(w, e, E)] + rank : 0;
            __syncwarp(); /* every lane read its run before the last lanes add to it */
            if (e >= 0 && first) {
                row_id_map[i] = row;
                sorted_indices[row] = (int32_t)i;
            }
            if (e >= 0 && last)
                run[tri_moe_run_at(w, e, E)] += rank + 1;
            __syncwarp();
        }
        if (!first)
            for (int64_t e = lane; e < E; e += 32)
                counts[e * nch + c] = run[tri_moe_run_at(w, e, E)];
        __syncwarp(); /* run is read before the next chunk overwrites it */
    }
}

/* The exclusive scan of counts(E, nch) in (expert, chunk) order in place, and tokens_per_expert(E):
 * one block of TRI_MOE_SCAN_THREADS (tri_moe_scan's integers). */
__global__ void __launch_bounds__(TRI_MOE_SCAN_THREADS)
    moe_scan_fast_kernel(int32_t *counts, int32_t *tokens_per_expert, int64_t E, int64_t nch)
{
    __shared__ int32_t part[TRI_MOE_SCAN_THREADS];
    const int t = (int)threadIdx.x;
    int32_t carry = tri_block_exclusive_scan(counts, E * nch, part, t, TRI_MOE_SCAN_THREADS);
    for (int64_t e = t; e < E; e += TRI_MOE_SCAN_THREADS)
        tokens_per_expert[e] = nch ? (e + 1 < E ? counts[(e + 1) * nch] : carry) - counts[e * nch] : 0;
}

/* out(P, C) = tri_moe_spread of src(N, C), a warp per row r: the permutation (w NULL) or the
 * combine's input gradient; a padding row (sorted_indices[r] < 0) zeros. Block of 32 TRI_ROWS_PER_BLOCK, any grid. */
__global__ void moe_spread_fast_kernel(void *out, int out_bf16, const void *src, int src_bf16,
                                       const int32_t *sorted_indices, const float *w, int64_t P, int64_t C, int64_t K)
{
    for (int64_t r = tri_warp_row(); r < P; r += (int64_t)gridDim.x * TRI_ROWS_PER_BLOCK) {
        int32_t s = sorted_indices[r];
        void *o = tri_at(out, out_bf16, r * C);
        const void *x = s >= 0 ? tri_at(src, src_bf16, (int64_t)(s / K) * C) : src;
        bool vo = tri_aligned16(o), vx = tri_aligned16(x);
        float f = s >= 0 && w ? w[s] : 1.0f;
        for (int64_t j = tri_row_first(tri_lane()); j < C; j += TRI_ROW_SLOTS) {
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (s >= 0) {
                tri_row_load8(v, x, src_bf16, j, C, vx);
                if (w)
                    for (int k = 0; k < 8; k++)
                        v[k] = f * v[k];
            }
            tri_row_store8(o, out_bf16, j, C, v, vo);
        }
    }
}

/* out(N, C) = tri_moe_combine of perm(N*K, C), a warp per token n: the combine (w) or the
 * permutation's backward (w NULL), each element's K terms in k order. Block of 32 TRI_ROWS_PER_BLOCK, any grid. */
__global__ void moe_combine_fast_kernel(void *out, int out_bf16, const void *perm, int perm_bf16,
                                        const int32_t *row_id_map, const float *w, int64_t N, int64_t C, int64_t K)
{
    for (int64_t n = tri_warp_row(); n < N; n += (int64_t)gridDim.x * TRI_ROWS_PER_BLOCK) {
        void *o = tri_at(out, out_bf16, n * C);
        bool vo = tri_aligned16(o);
        for (int64_t j = tri_row_first(tri_lane()); j < C; j += TRI_ROW_SLOTS) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t k = 0; k < K; k++) {
                int32_t r = row_id_map[n * K + k];
                if (r < 0)
                    continue;
                const void *y = tri_at(perm, perm_bf16, (int64_t)r * C);
                float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                tri_row_load8(v, y, perm_bf16, j, C, tri_aligned16(y));
                for (int q = 0; q < 8; q++)
                    acc[q] += w ? w[n * K + k] * v[q] : v[q];
            }
            tri_row_store8(o, out_bf16, j, C, acc, vo);
        }
    }
}

#endif
