/* cuda/kernels/block_scan.cuh - a block's inclusive scan of one word a thread in shared memory, by
 * Hillis and Steele (1986), and the exclusive scan of a longer array by tiles of it: log2(threads) steps, thread t adding the word at tri_block_scan_slot(t,
 * d) = t - d at distance d = 1, 2, 4, ... (integers, so any order's sums). The scans of the MoE
 * counting sort (cuda/moe/dispatch_fast.cuh) and of the top-k selection (cuda/compress/topk_fast.cuh)
 * share it; tests/test_access_patterns.cpp enumerates tri_block_scan_slot for a warp (1-way).
 * Device functions only (CUDA, and C++ through cuda/kernels/cuda_emu.h). */
#ifndef TRIDENT_CUDA_KERNELS_BLOCK_SCAN_CUH
#define TRIDENT_CUDA_KERNELS_BLOCK_SCAN_CUH

#include "cuda/kernels/shim.h"

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
