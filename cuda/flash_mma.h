/* cuda/flash_mma.h - the tensor-core fused attention kernels (CUDA only; see flash_mma.cu). */
#ifndef TRIDENT_CUDA_FLASH_MMA_H
#define TRIDENT_CUDA_FLASH_MMA_H

#include <cuda_runtime.h>
#include <stdint.h>

/* Whether the kernels are built for head size HS (a multiple of 16 up to 128). */
bool tri_flash_mma_supports(int64_t HS);

/* out(B,T,C) bf16 and lse(B,NH,T) fp32 from qkv(B,T,3C) bf16 (engine/device/device.h's layout). */
int tri_flash_mma_forward(cudaStream_t stream, void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                          int64_t C, int64_t NH);

/* dqkv(B,T,3C) bf16 from dout(B,T,C) bf16, qkv, lse and delta (already computed, fp32). */
int tri_flash_mma_backward(cudaStream_t stream, void *dqkv, const float *delta, const void *dout, const void *qkv,
                           const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH);

#endif
