/* cuda/kernels/block_reduce.cuh - a block's reductions of one word a thread in shared memory
 * (device functions only: CUDA, and C++ through cuda/kernels/cuda_emu.h):
 *   - the sum by halving, engine/core/math.h's tri_slots_halve with a thread a slot: the chunk totals
 *     (cuda/elementwise/reduce_fast.cuh), Gram-Schmidt's dot products
 *     (cuda/compress/gram_schmidt_fast.cuh) and top-k's chunk counts (cuda/compress/topk_fast.cuh);
 *   - the inclusive scan by Hillis and Steele (1986): log2(threads) steps, thread t adding the word at
 *     tri_block_scan_slot(t, d) = t - d at distance d = 1, 2, 4, ..., and the exclusive scan of a
 *     longer array by tiles of it (integers, so any order's sums): the MoE counting sort's
 *     (cuda/moe/dispatch_fast.cuh) and top-k's. tests/test_access_patterns.cpp enumerates
 *     tri_block_scan_slot for a warp (1-way). */
#ifndef TRIDENT_CUDA_KERNELS_BLOCK_REDUCE_CUH
#define TRIDENT_CUDA_KERNELS_BLOCK_REDUCE_CUH

#include "cuda/kernels/shim.h"

/* part[0] = the sum of part(threads) (a power of two; the block's threads, every one calling it, t
 * its index) in tri_slots_halve's order: part[s] += part[s + k] for k = threads / 2, ..., 1. part is
 * written before the call and may be read and rewritten after it: the call begins and ends with
 * barriers; the total is returned to every thread. */
template <typename T> __device__ __forceinline__ T tri_block_halve(T *part, int t, int threads)
{
    __syncthreads();
    for (int k = threads / 2; k >= 1; k /= 2) {
        if (t < k)
            part[t] += part[t + k];
        __syncthreads();
    }
    T total = part[0];
    __syncthreads(); /* every thread has read the total before part is written again */
    return total;
}

/* The word thread t adds at distance d (t >= d). */
TRI_HD int tri_block_scan_slot(int t, int d)
{
    return t - d;
}

/* part[t] := part[0] + ... + part[t] for the block's `threads` threads (every one calls it, t its
 * index). part is written before the call, read after it: the call begins and ends with barriers. */
template <typename T> __device__ __forceinline__ void tri_block_scan(T *part, int t, int threads)
{
    __syncthreads();
    for (int d = 1; d < threads; d <<= 1) {
        T add = t >= d ? part[tri_block_scan_slot(t, d)] : T(0);
        __syncthreads();
        part[t] += add;
        __syncthreads();
    }
}

/* x(m) := its exclusive scan in index order, by tiles of `threads` words loaded coalesced, each
 * scanned by tri_block_scan, a carry from tile to tile; returns the total to every thread. part
 * holds `threads` words of shared memory. */
template <typename T> __device__ __forceinline__ T tri_block_exclusive_scan(T *x, int64_t m, T *part, int t, int threads)
{
    T carry = 0;
    for (int64_t base = 0; base < m; base += threads) {
        int64_t i = base + t;
        T v = i < m ? x[i] : T(0);
        part[t] = v;
        tri_block_scan(part, t, threads);
        if (i < m)
            x[i] = carry + part[t] - v;
        carry += part[threads - 1];
        __syncthreads(); /* the tile's total is read before the next tile overwrites part */
    }
    return carry;
}

#endif
