/* cuda/flash_mma.h - the tensor-core fused attention kernels (CUDA only; see flash_mma.cu). */
#ifndef TRIDENT_CUDA_FLASH_MMA_H
#define TRIDENT_CUDA_FLASH_MMA_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "engine/core/math.h"

/* Whether the kernels are built for head size HS (a multiple of 16 up to 128). */
bool tri_flash_mma_supports(int64_t HS);

/* out(B,T,NH*HS) bf16 and lse(B,NH,T) fp32 from qkv bf16 (engine/core/math.h tri_flash_dims). */
int tri_flash_mma_forward(cudaStream_t stream, void *out, float *lse, const void *qkv, tri_flash_dims d);

/* dqkv bf16 (qkv's layout) from dout(B,T,NH*HS) bf16, qkv, lse and delta (already computed, fp32). */
int tri_flash_mma_backward(cudaStream_t stream, void *dqkv, const float *delta, const void *dout, const void *qkv,
                           const float *lse, tri_flash_dims d);

#endif
