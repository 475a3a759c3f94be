/* cuda/attention/flash_mma.h - the tiled fused attention kernels (CUDA only; see flash_mma.cu): bf16 on the
 * tensor cores, fp32 on the CUDA cores. */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_MMA_H
#define TRIDENT_CUDA_ATTENTION_FLASH_MMA_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/attention/flash_cut.h"
#include "engine/core/math.h"
#include "engine/device/ops/attention_math.h"

/* Whether the kernels are built for head size HS (32, 64, 80, 96 or 128). */
bool tri_flash_mma_supports(int64_t HS);

/* Dynamic shared memory (bytes) of the forward (backward false) or the two backward kernels of
 * head size HS in bf16 or fp32: a device whose per-block opt-in limit is smaller cannot run them.
 * 0 when HS has no kernel. */
size_t tri_flash_mma_smem_bytes(int64_t HS, bool bf16, bool backward);

/* out(B,T,NH*HS) and lse(B,NH,T) fp32 from qkv (engine/device/ops/attention_math.h tri_flash_dims); qkv and out
 * both bf16 (bf16 true) or both fp32, on 16-byte boundaries. TRI_ENOTSUP for a head size without a
 * kernel, TRI_EDEVICE for a failed launch. */
int tri_flash_mma_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *qkv, tri_flash_dims d);

/* dqkv (qkv's layout) from dout(B,T,NH*HS), qkv, lse and delta (already computed, fp32); dqkv,
 * dout and qkv all bf16 (bf16 true) or all fp32. Errors as the forward's. */
int tri_flash_mma_backward(cudaStream_t stream, bool bf16, void *dqkv, const float *delta, const void *dout,
                           const void *qkv, const float *lse, tri_flash_dims d);

/* The cut-sequence forms (context parallelism; engine/device/ops_list.h's flash_attention_kv_*): the
 * problem c (cuda/attention/flash_cut.h: queries q (B, T, c.W) against the keys and values of kv (B,
 * c.Tk, c.Wk) at the global positions c.qr, c.kr; both sides tri_flash_mma_rows_ok). out (B,T,NH*HS),
 * lse (B,NH,T) fp32; rows that see no key get out 0 and lse -inf. dq: the q columns of dq (q's
 * layout), dkv: the last 2 NH_kv HS columns of dkv (kv's layout; fp32 beside
 * bf16 operands with dkv_f32), overwritten or, with
 * c.accumulate, added to (tiles that meet nothing left as they are). All global tensors bf16 (bf16
 * true) or all fp32, on 16-byte boundaries, the row widths c.W, c.Wk (and so every head's column)
 * whole 16-byte units. tri_flash_mma_forward / _backward are these with tri_flash_mma_whole(d);
 * today's problem (q == kv, tri_flash_mma_whole's fields, not accumulating) takes the kernels' uncut
 * instantiation, anything else the cut one (their bits: the same launches). Errors as the forward's. */
int tri_flash_mma_kv_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *q, const void *kv,
                             tri_flash_mma_cut c);
int tri_flash_mma_kv_backward_dq(cudaStream_t stream, bool bf16, void *dq, const float *delta, const void *dout,
                                 const void *q, const void *kv, const float *lse, tri_flash_mma_cut c);
int tri_flash_mma_kv_backward_dkv(cudaStream_t stream, bool bf16, bool dkv_f32, void *dkv, const float *delta,
                                  const void *dout, const void *q, const void *kv, const float *lse,
                                  tri_flash_mma_cut c);

/* The cut form's launches (flash_mma_cut.cu), whatever the problem: the kv ops above take them for
 * any problem but today's whole one; tests/test_flash_mma_cpu.cpp also runs them on that one, whose
 * bits they must give as the uncut form does. Arguments and errors as the kv ops'. */
int tri_flash_mma_cut_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *q, const void *kv,
                              tri_flash_mma_cut c);
int tri_flash_mma_cut_backward_dq(cudaStream_t stream, bool bf16, void *dq, const float *delta, const void *dout,
                                  const void *q, const void *kv, const float *lse, tri_flash_mma_cut c);
int tri_flash_mma_cut_backward_dkv(cudaStream_t stream, bool bf16, bool dkv_f32, void *dkv, const float *delta,
                                   const void *dout, const void *q, const void *kv, const float *lse,
                                   tri_flash_mma_cut c);

#endif
