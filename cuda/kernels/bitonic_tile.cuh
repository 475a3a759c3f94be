/* cuda/kernels/bitonic_tile.cuh - the pieces of a deterministic GPU sort of distinct 64-bit keys,
 * shared by the embedding backward's token links (cuda/embedding/token_links_fast.cuh) and the MoE
 * router's capacity (cuda/moe/capacity_fast.cuh): a block sorts a tile of TRI_LINKS_TILE keys in
 * shared memory with Batcher's bitonic network (Batcher 1968, "Sorting networks and their
 * applications"; the GPU form of Peters et al. 2011), then merge passes place each key of two sorted
 * runs by rank (its index in its run plus a binary search in the other). Distinct keys have one
 * sorted order, so any launch shape gives the same result. Device functions only (no __global__, so
 * two .cu files may include it); the shared tile's indices are tri_links_slot and tri_links_pair_lo,
 * which tests/test_access_patterns.cpp enumerates for a warp (8-byte words: at most 2-way). */
#ifndef TRIDENT_CUDA_KERNELS_BITONIC_TILE_CUH
#define TRIDENT_CUDA_KERNELS_BITONIC_TILE_CUH

#include <stdint.h>

#include "cuda/kernels/shim.h"
#include "engine/device/launch_shapes.h"

#define TRI_LINKS_THREADS 1024
#define TRI_LINKS_PAD UINT64_MAX /* above every key: a real key's position is below 2^32 - 1 */

/* Slot of a tile's element handled by thread t in round r of a strided pass (load, store, links):
 * a warp's lanes on 32 consecutive 8-byte words. */
TRI_HD int tri_links_slot(int t, int r)
{
    return r * TRI_LINKS_THREADS + t;
}

/* The lower slot of compare-exchange pair p in a bitonic step of distance j (a power of two): pairs
 * (lo, lo + j) with lo's bit j clear. For j >= 16 a half-warp's lanes read 16 consecutive words;
 * below, 16 lanes span 32 words, two per bank pair: 2-way at most. */
TRI_HD int tri_links_pair_lo(int p, int j)
{
    return ((p & ~(j - 1)) << 1) | (p & (j - 1));
}

/* Sorts tile[0, size) ascending in shared memory (size a power of two, at most TRI_LINKS_TILE), thread
 * t of a block of TRI_LINKS_THREADS: Batcher's bitonic network, each step's pairs at
 * tri_links_pair_lo. The tile is written before the call and read after it by the whole block: the
 * caller's barrier before, this function's after every step. Also the MoE capacity's sort
 * (cuda/moe/capacity_fast.cuh). */
__device__ __forceinline__ void tri_bitonic_sort_tile(uint64_t *tile, int size, int t)
{
    for (int k = 2; k <= size; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int p = t; p < size / 2; p += TRI_LINKS_THREADS) {
                int lo = tri_links_pair_lo(p, j), hi = lo + j;
                uint64_t a = tile[lo], b = tile[hi];
                if ((a > b) == ((lo & k) == 0)) { /* ascending where bit k of lo is clear */
                    tile[lo] = b;
                    tile[hi] = a;
                }
            }
            __syncthreads();
        }
}

/* Keys of sorted[0, n) below x (binary search). */
__device__ __forceinline__ int64_t tri_links_rank(const uint64_t *sorted, int64_t n, uint64_t x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The place in the merged run of src(N)'s key g, where src holds sorted runs of `width` keys and runs
 * 2i and 2i + 1 merge: its run's base, plus its index in its run, plus the keys of the other run below
 * it. */
__device__ __forceinline__ int64_t tri_merge_place(const uint64_t *src, int64_t N, int64_t width, int64_t g)
{
    int64_t base = g / (2 * width) * (2 * width), mid = base + width < N ? base + width : N;
    int64_t end = base + 2 * width < N ? base + 2 * width : N;
    bool left = g < mid;
    const uint64_t *other = src + (left ? mid : base);
    int64_t other_n = left ? end - mid : mid - base;
    return base + (g - (left ? base : mid)) + tri_links_rank(other, other_n, src[g]);
}

#endif
