/* cuda/attention/flash_score.h - what the fused attention's simple twins share (CUDA and C): the head
 * size bound (and its check, for both launchers) and the score of one query and key, a left-to-right
 * dot product times 1/sqrt(HS).
 * flash.kern.h (one sequence) and flash_kv.kern.h (a split sequence, context parallelism) both include
 * it; they define their kernels apart, so each .cu holds only its own (on nvcc the kernels are extern:
 * one header of kernels included by two .cu files would define them twice at link time). */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_SCORE_H
#define TRIDENT_CUDA_ATTENTION_FLASH_SCORE_H

#include "cuda/kernels/shim.h"
#include "engine/core/status.h"
#include "engine/device/ops/attention_math.h"

#define TRI_FLASH_MAX_HS 256

/* TRI_OK, or TRI_ENOTSUP naming op when the head size is above what the kernels hold (host code). */
static inline int tri_flash_check_head(const char *op, tri_flash_dims f)
{
    if (f.HS > TRI_FLASH_MAX_HS)
        return TRI_ERR(TRI_ENOTSUP, "%s: head size %lld is above the CUDA kernels' %d", op, (long long)f.HS,
                       TRI_FLASH_MAX_HS);
    return TRI_OK;
}

/* q_t . k_j * scale for query element offset q and key element offset k of qkv. */
TRI_HD float tri_flash_score(const void *qkv, int qkv_bf16, int64_t q, int64_t k, int64_t HS, float scale)
{
    float s = 0.0f;
    for (int64_t i = 0; i < HS; i++)
        s += tri_load(qkv, qkv_bf16, q + i) * tri_load(qkv, qkv_bf16, k + i);
    return s * scale;
}

#endif
