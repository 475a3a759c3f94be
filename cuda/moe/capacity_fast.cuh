/* cuda/moe/capacity_fast.cuh - the MoE router's expert capacity by a sort: O(NK log^2 NK) work in
 * 3 + ceil(log2(ceil(NK / TRI_LINKS_TILE))) launches, instead of the simple twin's O((NK)^2) scan
 * (cuda/moe/router.kern.h moe_router_keep_kernel: every selection counts the selections of its
 * expert that precede it, tri_moe_queue_rank).
 *
 * Megatron-Core's token drop (moe_utils.py apply capacity: per expert, the top `capacity` of its
 * selections by probability, or by position) ranks each expert's selections by engine/device/ops/
 * moe_router_math.h's queue order tri_moe_precedes: weight descending then token ascending (policy
 * "probs"), or token ascending ("position"). Sort one 64-bit key per selection s = n K + j,
 *   key = expert (high bits) | order code of w_s (32 bits) | s (pb = tri_moe_cap_pos_bits bits),
 * ascending: an expert's selections are contiguous, in queue order (a token selects an expert at
 * most once, so s ascending is token ascending within an expert), and the keys are distinct, so
 * every correct sort gives the same order: deterministic by construction. A selection's rank is its
 * index in its expert's run, p - (the run's start, a binary search); kept when rank < capacity.
 * NaN weights: tri_moe_precedes is false both ways for a NaN, so on the CPU a NaN selection has rank
 * 0 (kept) and is in no other's count; its code sorts it after its expert's numbers, so the others'
 * indices are their ranks, and the keep kernel keeps it. The sort is the token links' (cuda/
 * kernels/bitonic_tile.cuh): the bitonic tile in shared memory, then merge passes by rank.
 *   1. moe_capacity_tile_kernel: keys of a tile built and sorted, written to keys(NK);
 *   2. moe_capacity_merge_kernel per doubling of the runs (TRI_LINKS_TILE, 2x, ... < NK);
 *   3. moe_capacity_keep_kernel: a thread per sorted key, kept_idx (expert, or -1 - expert);
 *   4. moe_capacity_count_kernel: a thread per expert, routed and kept counts from three searches.
 * The backend takes this form when the key holds E and NK (tri_moe_cap_fits: E <= 256 up to 2^24
 * selections) and the 16 NK bytes of keys fit the workspace; otherwise, or with the simple switch,
 * the twin. Bit for bit the twin's and the CPU's integers (tests/test_fast_kernels_cpu.cpp,
 * tests/gpu/test_gpu_ops.c). */
#ifndef TRIDENT_CUDA_MOE_CAPACITY_FAST_CUH
#define TRIDENT_CUDA_MOE_CAPACITY_FAST_CUH

#include <stdint.h>
#include <string.h>

#include "cuda/kernels/bitonic_tile.cuh"
#include "engine/device/ops/moe_router_math.h"

#define TRI_MOE_CAP_NAN 0xffffffffu /* the order code of a NaN weight: after every number */

/* The 32-bit order code of weight w: ascending codes are descending weights for TRI_MOE_DROP_PROBS
 * (-0 as +0, equal weights equal codes, NaN TRI_MOE_CAP_NAN, which no number reaches); 0 for
 * TRI_MOE_DROP_POSITION (token order alone). */
TRI_HD uint32_t tri_moe_cap_code(float w, int policy)
{
    if (policy == TRI_MOE_DROP_POSITION)
        return 0;
    if (w != w)
        return TRI_MOE_CAP_NAN;
    uint32_t u = 0;
    if (w != 0.0f)
        memcpy(&u, &w, sizeof u);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with w */
    return ~ord;
}

TRI_HD uint64_t tri_moe_cap_key(int64_t e, uint32_t code, int64_t s, int pb)
{
    return ((uint64_t)e << (32 + pb)) | ((uint64_t)code << pb) | (uint64_t)s;
}

TRI_HD int64_t tri_moe_cap_expert(uint64_t key, int pb)
{
    return (int64_t)(key >> (32 + pb));
}

TRI_HD uint32_t tri_moe_cap_key_code(uint64_t key, int pb)
{
    return (uint32_t)(key >> pb);
}

TRI_HD int64_t tri_moe_cap_pos(uint64_t key, int pb)
{
    return (int64_t)(key & (((uint64_t)1 << pb) - 1));
}

/* Sorts each tile of the NK selections' keys (idx(NK) experts, w(NK) weights) into keys(NK): sorted
 * runs of TRI_LINKS_TILE. A partial tile sorts the smallest power of two that holds it, padded with
 * TRI_LINKS_PAD (above every key: a key's expert bits are below 2^(32 - pb)). Block of
 * TRI_LINKS_THREADS, any grid. */
__global__ void __launch_bounds__(TRI_LINKS_THREADS)
    moe_capacity_tile_kernel(uint64_t *keys, const int32_t *idx, const float *w, int64_t NK, int policy, int pb)
{
    __shared__ uint64_t tile[TRI_LINKS_TILE]; /* 32 KiB */
    const int t = (int)threadIdx.x, rounds = TRI_LINKS_TILE / TRI_LINKS_THREADS;
    for (int64_t base = (int64_t)blockIdx.x * TRI_LINKS_TILE; base < NK;
         base += (int64_t)gridDim.x * TRI_LINKS_TILE) {
        int n = (int)(NK - base < TRI_LINKS_TILE ? NK - base : TRI_LINKS_TILE), size = 1;
        while (size < n)
            size <<= 1;
        for (int r = 0; r < rounds; r++) {
            int s = tri_links_slot(t, r);
            if (s < size)
                tile[s] = s < n ? tri_moe_cap_key(idx[base + s], tri_moe_cap_code(w[base + s], policy), base + s, pb)
                                : TRI_LINKS_PAD;
        }
        __syncthreads();
        tri_bitonic_sort_tile(tile, size, t);
        for (int r = 0; r < rounds; r++) {
            int s = tri_links_slot(t, r);
            if (s < n)
                keys[base + s] = tile[s];
        }
        __syncthreads(); /* the tile is read before the next one overwrites it */
    }
}

/* src(NK) holds sorted runs of `width` keys; merges runs 2i and 2i + 1 into dst(NK). A thread per
 * key, any grid. */
__global__ void moe_capacity_merge_kernel(uint64_t *dst, const uint64_t *src, int64_t NK, int64_t width)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < NK; g += stride)
        dst[tri_merge_place(src, NK, width, g)] = src[g];
}

/* Index of the first key of sorted(NK) at or above expert e's first possible key with code `code`. */
__device__ __forceinline__ int64_t tri_moe_cap_find(const uint64_t *sorted, int64_t NK, int64_t e, uint32_t code,
                                                    int pb)
{
    return tri_links_rank(sorted, NK, tri_moe_cap_key(e, code, 0, pb));
}

/* kept[s] for the selection of each sorted key p: its expert e when its rank p - (e's first index)
 * is below capacity, its weight is NaN, or capacity <= 0; else -1 - e. A thread per key, any grid. */
__global__ void moe_capacity_keep_kernel(int32_t *kept, const uint64_t *sorted, int64_t NK, int64_t capacity, int pb)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < NK; p += stride) {
        uint64_t x = sorted[p];
        int64_t e = tri_moe_cap_expert(x, pb);
        int64_t rank = p - tri_moe_cap_find(sorted, NK, e, 0, pb);
        bool ok = capacity <= 0 || tri_moe_cap_key_code(x, pb) == TRI_MOE_CAP_NAN || rank < capacity;
        kept[tri_moe_cap_pos(x, pb)] = ok ? (int32_t)e : -1 - (int32_t)e;
    }
}

/* routed[e], tokens[e]: expert e's selections (its run [lo, hi) of sorted(NK)) and those kept, the
 * numbers below capacity plus the NaNs (the run's tail from the code TRI_MOE_CAP_NAN). A thread per
 * expert, any grid. */
__global__ void moe_capacity_count_kernel(int32_t *tokens, int32_t *routed, const uint64_t *sorted, int64_t NK,
                                          int64_t E, int64_t capacity, int pb)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < E; e += stride) {
        int64_t lo = tri_moe_cap_find(sorted, NK, e, 0, pb);
        int64_t hi = e + 1 < E ? tri_moe_cap_find(sorted, NK, e + 1, 0, pb) : NK;
        int64_t nan0 = tri_moe_cap_find(sorted, NK, e, TRI_MOE_CAP_NAN, pb);
        nan0 = nan0 < hi ? nan0 : hi;
        int64_t numbers = nan0 - lo;
        routed[e] = (int32_t)(hi - lo);
        tokens[e] = (int32_t)(capacity <= 0 ? hi - lo : (numbers < capacity ? numbers : capacity) + (hi - nan0));
    }
}

#endif
