/* cuda/elementwise/reduce_fast.cuh - the fast chunk totals of sum_squares, count_nonfinite and their
 * multi-tensor form (CUDA, and C++ on the CPU through cuda/kernels/cuda_emu.h): a block of
 * TRI_CHUNK_SLOTS threads adds the chunk sums of one reduction in engine/core/math.h's order
 * (tri_chunks_total: a thread per slot, chunks in order, then cuda/kernels/block_reduce.cuh's
 * tree in shared memory), the bits of
 * the one-thread twins of cuda/elementwise/reduce.kern.h. */
#ifndef TRIDENT_CUDA_ELEMENTWISE_REDUCE_FAST_CUH
#define TRIDENT_CUDA_ELEMENTWISE_REDUCE_FAST_CUH

#include "cuda/elementwise/reduce.kern.h"
#include "cuda/kernels/block_reduce.cuh"

/* *out += (float)tri_chunks_total(partial, n_chunks) by a block of TRI_CHUNK_SLOTS threads (acc: its
 * shared slots; the block leaves synchronised, so acc may be reused at once) */
__device__ void block_finish(float *out, double *acc, const double *partial, int64_t n_chunks)
{
    int s = (int)threadIdx.x;
    double a = 0.0, v[8];
    int64_t c = s;
    /* 8 loads in flight, then the additions in chunk order (the order of tri_chunks_total) */
    for (; c + 7 * TRI_CHUNK_SLOTS < n_chunks; c += 8 * TRI_CHUNK_SLOTS) {
        for (int k = 0; k < 8; k++)
            v[k] = partial[c + k * TRI_CHUNK_SLOTS];
        for (int k = 0; k < 8; k++)
            a += v[k];
    }
    for (; c < n_chunks; c += TRI_CHUNK_SLOTS)
        a += partial[c];
    acc[s] = a;
    double total = tri_block_halve(acc, s, TRI_CHUNK_SLOTS);
    if (s == 0)
        *out += (float)total;
}

/* out[0] += (float)tri_chunks_total(partial, n_chunks), one block of TRI_CHUNK_SLOTS threads */
__global__ void reduce_finish_fast_kernel(float *out, const double *partial, int64_t n_chunks)
{
    __shared__ double acc[TRI_CHUNK_SLOTS];
    block_finish(out, acc, partial, n_chunks);
}

/* A block per run of pieces with one slot (blockIdx.x = run), its pieces in order: the fast form
 * of reduce_multi_finish_kernel (cuda/elementwise/reduce.kern.h). */
__global__ void reduce_multi_finish_fast_kernel(float *out, const double *partial, tri_sq_group g)
{
    __shared__ double acc[TRI_CHUNK_SLOTS];
    int r = (int)blockIdx.x;
    for (int p = g.run[r]; p < g.run[r + 1]; p++)
        block_finish(out + g.slot[p], acc, partial + g.first[p], g.first[p + 1] - g.first[p]);
}

#endif
