/* cuda/launch.cuh - launching the kernels of cuda/kernels/ on the device's stream (CUDA only).
 *
 * TRI_CUDA_LAUNCH is an expression: it launches kernel<<<grid, block, 0, stream>>>(args...) and
 * evaluates to the status of the launch (cudaGetLastError recorded with the kernel's name), so a
 * caller writes `rc = TRI_CUDA_LAUNCH(...)`. Errors while the kernel runs surface at the next
 * wait (tri_cuda_wait) with CUDA's message. Shapes come from tri_grid_for (cuda/kernels/shim.h). */
#ifndef TRIDENT_CUDA_LAUNCH_CUH
#define TRIDENT_CUDA_LAUNCH_CUH

#include "cuda/cuda_internal.h"
#include "cuda/kernels/shim.h"

#define TRI_CUDA_LAUNCH(kernel, grid, block, stream, ...)                                          \
    (kernel<<<(unsigned)(grid), (unsigned)(block), 0, (stream)>>>(__VA_ARGS__),                    \
     tri_cuda_check(cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__))

/* One launch over n work items with the simple kernels' shape. */
#define TRI_CUDA_LAUNCH_N(kernel, n, stream, ...)                                                  \
    TRI_CUDA_LAUNCH(kernel, tri_grid_for((n), TRI_BLOCK), TRI_BLOCK, stream, __VA_ARGS__)

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
