/* cuda/matmul/colsum.kern.h - column sums in two coalesced passes (CUDA and C).
 *
 * The fast form of the column reductions (bias gradient, layernorm's dw and db): engine/core/math.h
 * defines a column sum as chunk sums of TRI_COL_CHUNK rows, each from 0 in row order, added in chunk
 * order to the accumulator. A thread per column (the simple kernels) has only C threads walking N
 * rows; here the first pass gives a thread to every (chunk, column) pair, neighbouring threads
 * reading neighbouring columns of one row, and writes the chunk sums to part (fp32, n_chunks x C);
 * the second pass, a thread per column, adds them in chunk order to the accumulator and stores it
 * once. Same additions in the same order as the simple kernels and the CPU backend, so the same
 * bits. Other ops write their own first pass (layernorm.kern.h) and share the second through
 * tri_cuda_col_chunks_finish (cuda/matmul/matmul.cu; a __global__ function is defined in one .cu only). */
#ifndef TRIDENT_CUDA_MATMUL_COLSUM_KERN_H
#define TRIDENT_CUDA_MATMUL_COLSUM_KERN_H

#include "cuda/kernels/shim.h"
#include "cuda/matmul/colsum_index.h"

/* part[c * C + j] = sum of x[n * C + j] over the rows n of chunk c, in order; c < tri_col_chunks(N) */
TRI_KERNEL col_chunk_sums_kernel(float *part, const void *x, int x_bf16, int64_t N, int64_t C)
{
    int64_t total = tri_col_chunks(N) * C;
    for (int64_t idx = TRI_GLOBAL_ID; idx < total; idx += TRI_GLOBAL_STRIDE) {
        tri_col_cell e = tri_col_cell_of(idx, N, C);
        float s = 0.0f;
        for (int64_t n = e.begin; n < e.end; n++)
            s += tri_load(x, x_bf16, tri_col_at(n, e.j, C));
        part[tri_col_at(e.c, e.j, C)] = s;
    }
}

/* acc[j] += part[0 * C + j], part[1 * C + j], ... in chunk order, j < C; stored once */
TRI_KERNEL col_chunks_finish_kernel(void *acc, int acc_bf16, const float *part, int64_t n_chunks, int64_t C)
{
    for (int64_t j = TRI_GLOBAL_ID; j < C; j += TRI_GLOBAL_STRIDE) {
        float a = tri_load(acc, acc_bf16, j);
        for (int64_t c = 0; c < n_chunks; c++)
            a += part[tri_col_at(c, j, C)];
        tri_store(acc, acc_bf16, j, a);
    }
}

#endif
