/* cuda/kernels/shim.h - one kernel source for nvcc and for the C compiler.
 *
 * The simple form of every CUDA kernel (cuda/kernels/<family>.kern.h) is written against the
 * macros below: a grid-stride loop over TRI_GLOBAL_ID / TRI_GLOBAL_STRIDE, one thread per element,
 * row or column, no shared memory and no warp intrinsics. Under nvcc the macros are CUDA's
 * (__global__, blockIdx.x * blockDim.x + threadIdx.x, ...), and the .cu files launch the kernels on
 * the device's stream. Under a C compiler TRI_KERNEL makes an ordinary static function and
 * TRI_LAUNCH runs it once per emulated (block, thread) pair, in order, on the calling thread, so
 * the CPU test suite (tests/test_cuda_kernels_cpu.c) runs the very same kernel text and checks its
 * indexing and bounds against the CPU backend. Each emulated thread runs its whole grid-stride
 * loop before the next starts: a simple kernel may therefore not depend on another thread of the
 * same launch (none does; dependent passes are separate launches, ordered like a CUDA stream).
 *
 * Storage and arithmetic (bf16 mixed precision, engine/device/device.h "Precision"): a kernel takes each
 * floating array as `void *` / `const void *` plus an `int x_bf16` flag (0 fp32, 1 bf16 raw bits)
 * and reads and writes its elements only through engine/core/math.h's tri_load / tri_store (tri_at for
 * a row's start), so it computes in fp32 whatever the storage: every element read is widened
 * exactly, every element written is rounded to nearest even. The arithmetic is the same math.h
 * functions in the same order as for fp32, so an output element written once from fp32 values is
 * the CPU backend's widened result bit for bit. Arrays the interface keeps fp32 (layernorm's mean
 * and rstd, the cross-entropy statistics, reduction outputs, AdamW, fixed point) stay `float *`. */
#ifndef TRIDENT_CUDA_KERNELS_SHIM_H
#define TRIDENT_CUDA_KERNELS_SHIM_H

#include <stdint.h>

#include "engine/core/math.h"

/* Threads per block of the simple kernels, and the most blocks one launch uses (beyond that the
 * grid-stride loops take over; CUDA allows 2^31 - 1 blocks in x). */
#define TRI_BLOCK 256
#define TRI_MAX_BLOCKS 65536

/* Blocks for n work items: enough for one item per thread, at least 1, at most TRI_MAX_BLOCKS. */
TRI_HD int64_t tri_grid_for(int64_t n, int64_t block)
{
    int64_t g = (n + block - 1) / block;
    return g < 1 ? 1 : (g > TRI_MAX_BLOCKS ? TRI_MAX_BLOCKS : g);
}

/* The multi-tensor kernels' piece lookup: the last k in [0, n) with first[k] <= i (first ascending,
 * first[0] <= i), by bisection. */
TRI_HD int tri_piece_of(const int64_t *first, int n, int64_t i)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

#if defined(__CUDACC__)

#define TRI_KERNEL __global__ void
#define TRI_BLOCK_ID ((int64_t)blockIdx.x)
#define TRI_THREAD_ID ((int64_t)threadIdx.x)
#define TRI_BLOCK_DIM ((int64_t)blockDim.x)
#define TRI_GRID_DIM ((int64_t)gridDim.x)

#elif defined(TRI_CUDA_EMU_HOST)

/* The emulated CUDA build (tests/cuda_emu/): C++ with cuda/kernels/cuda_emu.h included first, every
 * launch of cuda/launch.cuh run as CUDA blocks of emulated lanes, so the coordinates are CUDA's. */
#define TRI_KERNEL static inline void
#define TRI_BLOCK_ID ((int64_t)blockIdx.x)
#define TRI_THREAD_ID ((int64_t)threadIdx.x)
#define TRI_BLOCK_DIM ((int64_t)blockDim.x)
#define TRI_GRID_DIM ((int64_t)gridDim.x)

#else /* C: emulated launches */

/* The emulated launch coordinates, read by the kernel through the macros below. */
typedef struct tri_shim_coords {
    int64_t block, thread, block_dim, grid_dim;
} tri_shim_coords;

#if defined(__GNUC__)
__attribute__((unused))
#endif
#if defined(__cplusplus)
static thread_local tri_shim_coords tri_shim;
#else
static _Thread_local tri_shim_coords tri_shim;
#endif

#define TRI_KERNEL static inline void
#define TRI_BLOCK_ID (tri_shim.block)
#define TRI_THREAD_ID (tri_shim.thread)
#define TRI_BLOCK_DIM (tri_shim.block_dim)
#define TRI_GRID_DIM (tri_shim.grid_dim)

/* kernel<<<grid, block>>>(args...) as loops: every (block, thread) pair in order. The arguments
 * are evaluated once per emulated thread: pass variables, not calls. */
#define TRI_LAUNCH(kernel, GRID_, BLOCK_, ...)                                                      \
    do {                                                                                           \
        tri_shim.grid_dim = (GRID_);                                                                \
        tri_shim.block_dim = (BLOCK_);                                                             \
        for (tri_shim.block = 0; tri_shim.block < tri_shim.grid_dim; tri_shim.block++)             \
            for (tri_shim.thread = 0; tri_shim.thread < tri_shim.block_dim; tri_shim.thread++)     \
                kernel(__VA_ARGS__);                                                               \
    } while (0)

#endif

#define TRI_GLOBAL_ID (TRI_BLOCK_ID * TRI_BLOCK_DIM + TRI_THREAD_ID)
#define TRI_GLOBAL_STRIDE (TRI_GRID_DIM * TRI_BLOCK_DIM)

#endif
