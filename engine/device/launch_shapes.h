/* engine/device/launch_shapes.h - the CUDA backend's launch shapes that decide how many kernels an op
 * launches and what they move: stated once, for the kernels (cuda/) and for the cost device that
 * models them (engine/device/ops_cost.c), so the kernel-time model cannot drift from the backend. */
#ifndef TRIDENT_ENGINE_DEVICE_LAUNCH_SHAPES_H
#define TRIDENT_ENGINE_DEVICE_LAUNCH_SHAPES_H

#include <stdint.h>

/* Chunk sums of one reduction the device's partials buffer holds (doubles): sum_squares,
 * count_nonfinite, the fixed-point reductions (cuda/elementwise/reduce.cu, cuda/fixed/fixed.cu). */
#define TRI_CUDA_MAX_PARTIALS 65536

/* The smallest chunk of a floating-point reduction. Every chunk is one thread's serial walk (8 loads
 * in flight), so the chunk length is the latency of the whole op: 64 elements keeps a 768-element
 * bias at 12 threads (the first GPU profile, with 4096, spent ~200 us per call walking small
 * parameters in one thread). */
#define TRI_REDUCE_MIN_CHUNK 64

/* Pieces of one launch of the multi-tensor ops, passed by value in the kernels' parameters (CUDA 12.1
 * and later take 32 KiB of parameters on sm_70 and newer): sum_squares_multi (8.8 KiB a group, two
 * launches: cuda/elementwise/reduce.kern.h), adamw_multi (6.9 KiB, one launch) and adamw_fused_multi
 * (8.1 KiB with the bf16 outputs, one launch: cuda/optimizer/adamw.kern.h). */
#define TRI_SQ_GROUP 160
#define TRI_ADAMW_GROUP 160

/* Bytes of alignment the bias epilogue's vector gets: there is no heuristic preference for the bias
 * pointer (only A, B, C and D have CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), and kernels load the vector
 * in 16-byte pieces, so a less aligned bias (a view into a flat parameter buffer at an odd offset)
 * takes the unfused path: bias_broadcast_kernel, then the product with beta 1 (cuda/matmul/matmul.cu). */
#define TRI_BIAS_EPILOGUE_ALIGN 16

/* The embedding backward's linked form (a thread per first occurrence and column) needs the token links:
 * 2N ints, found by sorting (token, position) keys, 16 N bytes of scratch more, all in the workspace
 * (24 N bytes; cuda/embedding/embedding.cu). Up to this many tokens a micro-batch (more take the
 * simple kernel, a thread per column): 24 MiB of the 32 MiB workspace. */
#define TRI_EMBEDDING_LINKS_MAX ((int64_t)1 << 20)

/* Keys one block sorts in shared memory (cuda/embedding/token_links_fast.cuh: 32 KiB of uint64);
 * longer calls merge the sorted tiles pairwise, a launch per doubling. */
#define TRI_LINKS_TILE 4096

/* Merge launches of the token links for N tokens: ceil(log2(ceil(N / TRI_LINKS_TILE))); the links
 * take this plus one launch (the tile sort). */
static inline int tri_links_merges(int64_t N)
{
    int m = 0;
    for (int64_t w = TRI_LINKS_TILE; w < N; w *= 2)
        m++;
    return m;
}

/* The device top-k selection (cuda/compress/topk_fast.cuh): blocks of TRI_TOPK_THREADS threads;
 * the histogram passes use at most TRI_TOPK_MAX_GRID blocks (each writes its 256 counts, which the
 * next launch adds in block order); the emission walks chunks of TRI_TOPK_CHUNK elements, a block a
 * chunk, TRI_TOPK_PER_THREAD consecutive elements a thread. */
#define TRI_TOPK_THREADS 256
#define TRI_TOPK_PER_THREAD 16
#define TRI_TOPK_CHUNK (TRI_TOPK_THREADS * TRI_TOPK_PER_THREAD)
#define TRI_TOPK_MAX_GRID 512

/* Chunks of the emission over n elements. */
static inline int64_t tri_topk_chunks(int64_t n)
{
    return (n + TRI_TOPK_CHUNK - 1) / TRI_TOPK_CHUNK;
}

/* Blocks of a histogram pass over n elements: a chunk's worth a block, 1 to TRI_TOPK_MAX_GRID. */
static inline int64_t tri_topk_hist_grid(int64_t n)
{
    int64_t g = tri_topk_chunks(n);
    return g < 1 ? 1 : (g > TRI_TOPK_MAX_GRID ? TRI_TOPK_MAX_GRID : g);
}

/* Scratch bytes of a selection over n elements: the select's state (4 int64), the chunks' counts
 * (2 int64 a chunk), the histogram blocks' counts (256 uint32 a block). */
static inline int64_t tri_topk_scratch_bytes(int64_t n)
{
    return 8 * (4 + 2 * tri_topk_chunks(n)) + 4 * 256 * tri_topk_hist_grid(n);
}

#endif
