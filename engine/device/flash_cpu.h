/* engine/device/flash_cpu.h - the CPU backend's fused causal attention (FlashAttention-2).
 *
 * The tiled algorithm of engine/core/math.h "fused causal attention" on fp32 host arrays, the tile
 * products through sgemm: no (T, T) matrix is stored. The CPU backend's flash_attention ops call
 * these after the device wrappers have checked the shapes (and widened any bf16 argument). */
#ifndef TRIDENT_ENGINE_DEVICE_FLASH_CPU_H
#define TRIDENT_ENGINE_DEVICE_FLASH_CPU_H

#include <stdint.h>

/* out(B,T,C) and lse(B,NH,T) (the rows' logsumexp) from qkv(B,T,3C) = [q | k | v], head h at
 * columns h*HS of each part, HS = C/NH, scale 1/sqrt(HS). Parallel over (b, h, query tile) on
 * `threads` OpenMP threads; the result does not depend on the thread count. */
void tri_cpu_flash_forward(int threads, float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH);

/* dqkv(B,T,3C) = the gradient given dout(B,T,C) (overwritten), from the forward's qkv, out and lse;
 * delta(B,NH,T) receives the rows' dout . out (Dao 2023 Algorithm 2's D). Parallel over (b, h):
 * dq sums over the key tiles in ascending order, dk and dv over the query tiles in ascending order,
 * so the result is the same for any thread count and no two threads write one element. */
void tri_cpu_flash_backward(int threads, float *dqkv, float *delta, const float *dout, const float *qkv,
                            const float *out, const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH);

#endif
