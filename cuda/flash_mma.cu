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
                                                                    tri_flash_dims d, int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_forward_mma_body<HS>(smem, out, lse, qkv, d, n_tiles);
}

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dkv_mma_kernel(uint16_t *dqkv, const float *delta,
                                                                         const uint16_t *dout, const uint16_t *qkv,
                                                                         const float *lse, tri_flash_dims d,
                                                                         int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dkv_mma_body<HS>(smem, dqkv, delta, dout, qkv, lse, d, n_tiles);
}

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dq_mma_kernel(uint16_t *dqkv, const float *delta,
                                                                        const uint16_t *dout, const uint16_t *qkv,
                                                                        const float *lse, tri_flash_dims d,
                                                                        int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dq_mma_body<HS>(smem, dqkv, delta, dout, qkv, lse, d, n_tiles);
}

/* ---- host side ---- */

#define FLASH_CHECK(expr, what) tri_cuda_check((expr), what, __FILE__, __LINE__)

template <int HS>
static int forward_hs(cudaStream_t s, void *out, float *lse, const void *qkv, tri_flash_dims d)
{
    size_t bytes = fwd_layout<HS>::bytes;
    int64_t tiles = (d.T + TILE - 1) / TILE;
    int rc = FLASH_CHECK(cudaFuncSetAttribute(flash_forward_mma_kernel<HS>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                         "cudaFuncSetAttribute(flash_forward_mma_kernel)");
    if (rc)
        return rc;
    flash_forward_mma_kernel<HS><<<dim3((unsigned)tiles, (unsigned)(d.B * d.NH)), THREADS, bytes, s>>>(
        (uint16_t *)out, lse, (const uint16_t *)qkv, d, tiles);
    return FLASH_CHECK(cudaGetLastError(), "launch of flash_forward_mma_kernel");
}

/* dk and dv: a block per (key tile, b, key/value head); dq: a block per (query tile, b, query head). */
template <int HS>
static int backward_hs(cudaStream_t s, void *dqkv, const float *delta, const void *dout, const void *qkv,
                       const float *lse, tri_flash_dims d)
{
    size_t bytes = bwd_layout<HS>::bytes;
    int64_t tiles = (d.T + TILE - 1) / TILE;
    int rc = FLASH_CHECK(cudaFuncSetAttribute(flash_backward_dkv_mma_kernel<HS>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                         "cudaFuncSetAttribute(flash_backward_dkv_mma_kernel)");
    if (!rc) rc = FLASH_CHECK(cudaFuncSetAttribute(flash_backward_dq_mma_kernel<HS>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                              "cudaFuncSetAttribute(flash_backward_dq_mma_kernel)");
    if (rc)
        return rc;
    flash_backward_dkv_mma_kernel<HS><<<dim3((unsigned)tiles, (unsigned)(d.B * d.NH_kv)), THREADS, bytes, s>>>(
        (uint16_t *)dqkv, delta, (const uint16_t *)dout, (const uint16_t *)qkv, lse, d, tiles);
    rc = FLASH_CHECK(cudaGetLastError(), "launch of flash_backward_dkv_mma_kernel");
    if (rc)
        return rc;
    flash_backward_dq_mma_kernel<HS><<<dim3((unsigned)tiles, (unsigned)(d.B * d.NH)), THREADS, bytes, s>>>(
        (uint16_t *)dqkv, delta, (const uint16_t *)dout, (const uint16_t *)qkv, lse, d, tiles);
    return FLASH_CHECK(cudaGetLastError(), "launch of flash_backward_dq_mma_kernel");
}

bool tri_flash_mma_supports(int64_t HS)
{
    return tri_flash_mma_head_size(HS);
}

#define FLASH_DISPATCH(call_hs)                                                                    \
    switch (d.HS) {                                                                                \
    case 32: return call_hs(32);                                                                   \
    case 64: return call_hs(64);                                                                   \
    case 80: return call_hs(80);                                                                   \
    case 96: return call_hs(96);                                                                   \
    case 128: return call_hs(128);                                                                 \
    default: return TRI_ERR(TRI_ENOTSUP, "flash attention: no tensor-core kernel for head size %lld", \
                            (long long)d.HS);                                                      \
    }

int tri_flash_mma_forward(cudaStream_t stream, void *out, float *lse, const void *qkv, tri_flash_dims d)
{
#define FWD(hs) forward_hs<hs>(stream, out, lse, qkv, d)
    FLASH_DISPATCH(FWD)
#undef FWD
}

int tri_flash_mma_backward(cudaStream_t stream, void *dqkv, const float *delta, const void *dout, const void *qkv,
                           const float *lse, tri_flash_dims d)
{
#define BWD(hs) backward_hs<hs>(stream, dqkv, delta, dout, qkv, lse, d)
    FLASH_DISPATCH(BWD)
#undef BWD
}
