/* cuda/embedding/token_links_fast.cuh - the embedding backward's token links by a sort, O(N log^2 N)
 * work in 1 + ceil(log2(ceil(N / TRI_LINKS_TILE))) launches instead of the simple twin's O(N^2) scan.
 *
 * The links (cuda/embedding/embedding.kern.h token_links_kernel, the simple twin): next[n] = the
 * smallest m > n with tokens[m] == tokens[n] (-1 if none), first[n] = 1 when no m < n has it. Sort
 * the keys (token, position) ascending: equal tokens then sit side by side in position order, so
 * next[n] is the position of the key right after n's when that key has n's token, and first[n] says
 * the key right before n's has another token. The keys are distinct (positions are), so every
 * correct sort gives the same order and the arrays are exactly the twin's, whatever the launch
 * shape: deterministic by construction (no atomics, no ties).
 *   1. token_links_tile_kernel: a block of TRI_LINKS_THREADS sorts a tile of TRI_LINKS_TILE keys in
 *      shared memory with Batcher's bitonic sorting network (Batcher 1968, "Sorting networks and their
 *      applications"; the GPU form of Peters et al. 2011), tokens loaded coalesced. When the whole
 *      call is one tile (N <= TRI_LINKS_TILE: 4096, half a GPT-2 micro-batch of B 8 T 1024) it
 *      writes the links from the sorted tile and is the only launch.
 *   2. token_links_merge_kernel, once per doubling of the sorted runs (TRI_LINKS_TILE, 2x, ... < N):
 *      merges runs pairwise by rank, a thread per key: the key's place in the merged run is its
 *      index in its own run plus the number of keys of the other run below it (a binary search).
 *      The last pass writes no keys: a key's neighbours in the merged run are the nearer of its own
 *      run's neighbours and the other run's keys around its rank, which give the links at once.
 * Scratch: 2N uint64 keys (16 N bytes) beside next/first in the device workspace (embedding.cu).
 * The tile sort, its shared indices (tri_links_slot, tri_links_pair_lo, which tests/
 * test_access_patterns.cpp enumerates for a warp: at most 2-way bank conflicts) and the binary
 * search are cuda/kernels/bitonic_tile.cuh's, shared with the MoE capacity's sort. */
#ifndef TRIDENT_CUDA_EMBEDDING_TOKEN_LINKS_FAST_CUH
#define TRIDENT_CUDA_EMBEDDING_TOKEN_LINKS_FAST_CUH

#include <stdint.h>

#include "cuda/kernels/bitonic_tile.cuh"
#include "cuda/kernels/shim.h"
#include "engine/device/launch_shapes.h"

/* The key of token t at position n: the token's bits with the sign flipped (so unsigned order is
 * int32 order) above the position. */
TRI_HD uint64_t tri_links_key(int32_t t, int64_t n)
{
    return ((uint64_t)((uint32_t)t ^ 0x80000000u) << 32) | (uint64_t)(uint32_t)n;
}

TRI_HD uint32_t tri_links_token(uint64_t key)
{
    return (uint32_t)(key >> 32);
}

TRI_HD int32_t tri_links_pos(uint64_t key)
{
    return (int32_t)(uint32_t)key;
}

/* The links of key x from its neighbours in sorted order (has_pred / has_succ: whether there is one). */
__device__ __forceinline__ void tri_links_write(int32_t *next, int32_t *first, uint64_t x, bool has_pred,
                                                uint64_t pred, bool has_succ, uint64_t succ)
{
    uint32_t t = tri_links_token(x);
    next[tri_links_pos(x)] = has_succ && tri_links_token(succ) == t ? tri_links_pos(succ) : -1;
    first[tri_links_pos(x)] = !(has_pred && tri_links_token(pred) == t);
}

/* Sorts each tile of keys(N) of tokens(N) into keys(N) (sorted runs of TRI_LINKS_TILE), or, when
 * N <= TRI_LINKS_TILE, writes next(N) and first(N) from the one sorted tile. A partial tile sorts
 * the smallest power of two that holds it, padded with TRI_LINKS_PAD. Block of TRI_LINKS_THREADS,
 * any grid (the loop strides over tiles). */
__global__ void __launch_bounds__(TRI_LINKS_THREADS)
    token_links_tile_kernel(uint64_t *keys, int32_t *next, int32_t *first, const int32_t *tokens, int64_t N)
{
    __shared__ uint64_t tile[TRI_LINKS_TILE]; /* 32 KiB */
    const int t = (int)threadIdx.x, rounds = TRI_LINKS_TILE / TRI_LINKS_THREADS;
    for (int64_t base = (int64_t)blockIdx.x * TRI_LINKS_TILE; base < N; base += (int64_t)gridDim.x * TRI_LINKS_TILE) {
        int n = (int)(N - base < TRI_LINKS_TILE ? N - base : TRI_LINKS_TILE), size = 1;
        while (size < n)
            size <<= 1;
        for (int r = 0; r < rounds; r++) {
            int s = tri_links_slot(t, r);
            if (s < size)
                tile[s] = s < n ? tri_links_key(tokens[base + s], base + s) : TRI_LINKS_PAD;
        }
        __syncthreads();
        tri_bitonic_sort_tile(tile, size, t);
        for (int r = 0; r < rounds; r++) {
            int s = tri_links_slot(t, r);
            if (s >= n)
                continue;
            if (N <= TRI_LINKS_TILE)
                tri_links_write(next, first, tile[s], s > 0, s > 0 ? tile[s - 1] : 0, s + 1 < n,
                                s + 1 < n ? tile[s + 1] : 0);
            else
                keys[base + s] = tile[s];
        }
        __syncthreads(); /* the tile is read before the next one overwrites it */
    }
}

/* src(N) holds sorted runs of `width` keys; merges runs 2i and 2i + 1 into dst(N), or, when links is
 * set (the last pass: 2 width >= N), writes next(N) and first(N) instead. A thread per key, any grid. */
__global__ void token_links_merge_kernel(uint64_t *dst, int32_t *next, int32_t *first, const uint64_t *src,
                                         int64_t N, int64_t width, int links)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < N; g += stride) {
        int64_t base = g / (2 * width) * (2 * width), mid = base + width < N ? base + width : N;
        int64_t end = base + 2 * width < N ? base + 2 * width : N;
        bool left = g < mid;
        const uint64_t *own = src + (left ? base : mid), *other = src + (left ? mid : base);
        int64_t own_n = left ? mid - base : end - mid, other_n = left ? end - mid : mid - base;
        int64_t i = g - (left ? base : mid);
        uint64_t x = src[g];
        int64_t c = tri_links_rank(other, other_n, x);
        if (!links) {
            dst[base + i + c] = x;
            continue;
        }
        /* neighbours in the merged run: the nearer of own[i -+ 1] and other[c - 1] / other[c] */
        bool has_pred = i > 0 || c > 0, has_succ = i + 1 < own_n || c < other_n;
        uint64_t pred = 0, succ = TRI_LINKS_PAD;
        if (i > 0)
            pred = own[i - 1];
        if (c > 0 && other[c - 1] > pred)
            pred = other[c - 1];
        if (i + 1 < own_n)
            succ = own[i + 1];
        if (c < other_n && other[c] < succ)
            succ = other[c];
        tri_links_write(next, first, x, has_pred, pred, has_succ, succ);
    }
}

#endif
