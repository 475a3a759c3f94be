/* cuda/launch.cuh - launching the kernels of cuda/<family>/ on the device's stream (CUDA only).
 *
 * TRI_CUDA_LAUNCH is an expression: it launches kernel<<<grid, block, 0, stream>>>(args...) and
 * evaluates to the status of the launch (cudaGetLastError recorded with the kernel's name), so a
 * caller writes `rc = TRI_CUDA_LAUNCH(...)`. Errors while the kernel runs surface at the next
 * wait (tri_cuda_wait) with CUDA's message. Shapes come from tri_grid_for (cuda/kernels/shim.h). */
#ifndef TRIDENT_CUDA_LAUNCH_CUH
#define TRIDENT_CUDA_LAUNCH_CUH

#include "cuda/cuda_internal.h"
#include "cuda/kernels/shim.h"

#if !defined(TRI_CUDA_EMU_HOST)

#define TRI_CUDA_LAUNCH(kernel, grid, block, stream, ...)                                          \
    (kernel<<<(unsigned)(grid), (unsigned)(block), 0, (stream)>>>(__VA_ARGS__),                    \
     tri_cuda_check(cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__))

/* One launch over n work items with the simple kernels' shape. */
#define TRI_CUDA_LAUNCH_N(kernel, n, stream, ...)                                                  \
    TRI_CUDA_LAUNCH(kernel, tri_grid_for((n), TRI_BLOCK), TRI_BLOCK, stream, __VA_ARGS__)

/* A launch of a fast kernel that strides over its work by the grid's size (8 elements a thread, or
 * a block a row), so that any grid gives its result: on a GPU the same as TRI_CUDA_LAUNCH. */
#define TRI_CUDA_LAUNCH_STRIDED(kernel, grid, block, stream, ...)                                  \
    TRI_CUDA_LAUNCH(kernel, grid, block, stream, __VA_ARGS__)

#else /* the emulated CUDA build (tests/cuda_emu/): the launch runs at once, as blocks of threads */

/* A launch CUDA would refuse (an empty grid, a block of 0 or over 1024 threads) fails as there, its
 * error kept as the thread's last error for the cudaGetLastError that follows every launch (as a GPU
 * reports a launch); a valid one runs at once, or is recorded when stream is capturing
 * (tests/cuda_emu/cuda_runtime.h). */
static inline cudaError_t tri_emu_cuda_launch(int64_t grid, int64_t block, cudaStream_t stream,
                                              std::function<void()> kernel)
{
    if (grid < 1 || grid > 2147483647 || block < 1 || block > 1024)
        return tri_emu_error(cudaErrorInvalidValue);
    unsigned g = (unsigned)grid, b = (unsigned)block;
    tri_emu_enqueue(stream, [g, b, kernel] { tri_emu_launch(g, b, kernel); });
    return cudaSuccess;
}

/* kernel(args...) with the arguments evaluated now and kept by value, as a launch takes them: a
 * recorded launch (a graph's node) runs later, after the caller's locals are gone. */
template <class K, class... A>
static inline std::function<void()> tri_emu_bind(K kernel, A... args)
{
    return [=] { kernel(args...); };
}

/* grid blocks, at most cap (the launches of kernels that stride over their work) */
static inline int64_t tri_emu_grid_cap(int64_t grid, int64_t cap)
{
    return grid < cap ? grid : cap;
}

/* checked as on a GPU: through cudaGetLastError, which also returns an earlier call's unreset error */
#define TRI_CUDA_LAUNCH(kernel, grid, block, stream, ...)                                          \
    ((void)tri_emu_cuda_launch((grid), (block), (stream), tri_emu_bind(kernel, __VA_ARGS__)),      \
     tri_cuda_check(cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__))

/* The simple kernels stride over their n items (cuda/kernels/shim.h), so any grid gives their
 * result: the emulation runs at most 8 blocks of one warp, which makes the loops turn and keeps
 * the launch cheap. */
#define TRI_CUDA_LAUNCH_N(kernel, n, stream, ...)                                                  \
    TRI_CUDA_LAUNCH(kernel, tri_emu_grid_cap(tri_grid_for((n), 32), 8), 32, stream, __VA_ARGS__)

/* The fast kernels that stride: their real block (shared memory and warp sums are sized by it) on at
 * most 2 blocks, so the grid loop turns and a launch over millions of elements stays cheap. */
#define TRI_CUDA_LAUNCH_STRIDED(kernel, grid, block, stream, ...)                                  \
    TRI_CUDA_LAUNCH(kernel, tri_emu_grid_cap((grid), 2), block, stream, __VA_ARGS__)

#endif

/* An argument the interface keeps fp32 (mean, rstd, statistics, AdamW, fixed point). */
static inline float *tri_fp(tri_tensor t)
{
    return (float *)t.data;
}

/* A floating argument as the kernels take it: the data and its storage flag (1 bf16, 0 fp32). */
static inline void *tri_data(tri_tensor t)
{
    return t.data;
}

static inline int tri_is_bf16(tri_tensor t)
{
    return t.dtype == TRI_BF16;
}

static inline const int32_t *tri_ip(tri_tensor t)
{
    return (const int32_t *)t.data;
}

#endif
