/* cuda/flash_mma.cu - the tensor-core fused attention kernels as CUDA kernels, and their launches.
 *
 * The kernel bodies (and their description) are cuda/kernels/flash_mma.kern.h, shared with the CPU
 * emulation that tests them (tests/test_flash_mma_cpu.cpp); here each is a __global__ function with
 * its dynamic shared memory (above 48 KiB: opted in per kernel before each launch). */
#include <math.h>

#include "cuda/cuda_internal.h"
#include "cuda/flash_mma.h"
#include "cuda/kernels/flash_mma.kern.h"

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_forward_mma_kernel(uint16_t *out, float *lse, const uint16_t *qkv,
                                                                    int64_t T, int64_t C, int64_t NH, int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_forward_mma_body<HS>(smem, out, lse, qkv, T, C, NH, n_tiles);
}

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dkv_mma_kernel(uint16_t *dqkv, const float *delta,
                                                                         const uint16_t *dout, const uint16_t *qkv,
                                                                         const float *lse, int64_t T, int64_t C,
                                                                         int64_t NH, int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dkv_mma_body<HS>(smem, dqkv, delta, dout, qkv, lse, T, C, NH, n_tiles);
}

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dq_mma_kernel(uint16_t *dqkv, const float *delta,
                                                                        const uint16_t *dout, const uint16_t *qkv,
                                                                        const float *lse, int64_t T, int64_t C,
                                                                        int64_t NH, int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dq_mma_body<HS>(smem, dqkv, delta, dout, qkv, lse, T, C, NH, n_tiles);
}

/* ---- host side ---- */

#define FLASH_CHECK(expr, what) tri_cuda_check((expr), what, __FILE__, __LINE__)

template <int HS>
static int forward_hs(cudaStream_t s, void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH)
{
    size_t bytes = fwd_layout<HS>::bytes;
    int64_t tiles = (T + TILE - 1) / TILE;
    int rc = FLASH_CHECK(cudaFuncSetAttribute(flash_forward_mma_kernel<HS>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                         "cudaFuncSetAttribute(flash_forward_mma_kernel)");
    if (rc)
        return rc;
    flash_forward_mma_kernel<HS><<<dim3((unsigned)tiles, (unsigned)(B * NH)), THREADS, bytes, s>>>(
        (uint16_t *)out, lse, (const uint16_t *)qkv, T, C, NH, tiles);
    return FLASH_CHECK(cudaGetLastError(), "launch of flash_forward_mma_kernel");
}

template <int HS>
static int backward_hs(cudaStream_t s, void *dqkv, const float *delta, const void *dout, const void *qkv,
                       const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH)
{
    size_t bytes = bwd_layout<HS>::bytes;
    int64_t tiles = (T + TILE - 1) / TILE;
    dim3 grid((unsigned)tiles, (unsigned)(B * NH));
    int rc = FLASH_CHECK(cudaFuncSetAttribute(flash_backward_dkv_mma_kernel<HS>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                         "cudaFuncSetAttribute(flash_backward_dkv_mma_kernel)");
    if (!rc) rc = FLASH_CHECK(cudaFuncSetAttribute(flash_backward_dq_mma_kernel<HS>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                              "cudaFuncSetAttribute(flash_backward_dq_mma_kernel)");
    if (rc)
        return rc;
    flash_backward_dkv_mma_kernel<HS><<<grid, THREADS, bytes, s>>>((uint16_t *)dqkv, delta, (const uint16_t *)dout,
                                                                   (const uint16_t *)qkv, lse, T, C, NH, tiles);
    rc = FLASH_CHECK(cudaGetLastError(), "launch of flash_backward_dkv_mma_kernel");
    if (rc)
        return rc;
    flash_backward_dq_mma_kernel<HS><<<grid, THREADS, bytes, s>>>((uint16_t *)dqkv, delta, (const uint16_t *)dout,
                                                                  (const uint16_t *)qkv, lse, T, C, NH, tiles);
    return FLASH_CHECK(cudaGetLastError(), "launch of flash_backward_dq_mma_kernel");
}

bool tri_flash_mma_supports(int64_t HS)
{
    return tri_flash_mma_head_size(HS);
}

#define FLASH_DISPATCH(call_hs)                                                                    \
    switch (C / NH) {                                                                              \
    case 32: return call_hs(32);                                                                   \
    case 64: return call_hs(64);                                                                   \
    case 80: return call_hs(80);                                                                   \
    case 96: return call_hs(96);                                                                   \
    case 128: return call_hs(128);                                                                 \
    default: return TRI_ERR(TRI_ENOTSUP, "flash attention: no tensor-core kernel for head size %lld", \
                            (long long)(C / NH));                                                  \
    }

int tri_flash_mma_forward(cudaStream_t stream, void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                          int64_t C, int64_t NH)
{
#define FWD(hs) forward_hs<hs>(stream, out, lse, qkv, B, T, C, NH)
    FLASH_DISPATCH(FWD)
#undef FWD
}

int tri_flash_mma_backward(cudaStream_t stream, void *dqkv, const float *delta, const void *dout, const void *qkv,
                           const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH)
{
#define BWD(hs) backward_hs<hs>(stream, dqkv, delta, dout, qkv, lse, B, T, C, NH)
    FLASH_DISPATCH(BWD)
#undef BWD
}
