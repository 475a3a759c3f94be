/* cuda/matmul/colsum_index.h - where the column sums' threads read and write (CUDA and C).
 *
 * The first pass of the two-pass column sums (the bias gradient's col_chunk_sums_kernel in
 * cuda/matmul/colsum.kern.h, layernorm's and RMSNorm's parameter-gradient chunk kernels) gives a
 * thread to every (chunk, column) cell of engine/core/math.h's column order (TRI_COL_CHUNK row
 * chunks); the second pass (col_chunks_finish_kernel) a thread to every column. Their global
 * indexing is the functions below, which the kernels call and tests/test_access_patterns.cpp
 * enumerates for the 32 lanes of a warp: consecutive threads take consecutive columns of one chunk,
 * so a warp reads 32 consecutive elements of one row (4 whole 32-byte sectors in fp32, 2 in bf16,
 * when the row length C is a multiple of 32 and the matrix starts 32-byte aligned) and writes 32
 * consecutive chunk sums; the per-row statistics (layernorm's mean and rstd) are one address for
 * the whole warp (a broadcast). When C is not a multiple of 32 a warp straddles two chunks, rows
 * TRI_COL_CHUNK apart, and uses partial sectors at the seam; GPT-2's and Llama's widths (768, 2304,
 * 3072, 4096, ... and their splits by tp up to 8) are multiples of 32. No shared memory: the
 * passes keep their sums in registers. The order of the additions is math.h's, so the kernels give
 * the CPU backend's bits. */
#ifndef TRIDENT_CUDA_MATMUL_COLSUM_INDEX_H
#define TRIDENT_CUDA_MATMUL_COLSUM_INDEX_H

#include <stdint.h>

#include "engine/core/math.h"

/* A cell of the first pass: chunk c (rows c * TRI_COL_CHUNK .. end - 1) of column j. */
typedef struct {
    int64_t c, j, begin, end;
} tri_col_cell;

/* The cell thread idx (of the grid-stride loop, idx < tri_col_chunks(N) * C) sums. */
TRI_HD tri_col_cell tri_col_cell_of(int64_t idx, int64_t N, int64_t C)
{
    tri_col_cell e;
    e.c = idx / C;
    e.j = idx % C;
    e.begin = e.c * TRI_COL_CHUNK;
    e.end = e.begin + TRI_COL_CHUNK < N ? e.begin + TRI_COL_CHUNK : N;
    return e;
}

/* Element (row n, column j) of a row-major (rows, C) matrix: the inputs read at row n of a cell,
 * and the chunk sums part (n_chunks, C) at row c. */
TRI_HD int64_t tri_col_at(int64_t n, int64_t j, int64_t C)
{
    return n * C + j;
}

#endif
