/* engine/device/ops/flash_cpu.h - the CPU backend's fused causal attention (FlashAttention-2).
 *
 * The tiled algorithm of engine/device/ops/attention_math.h "fused causal attention" on fp32 host arrays, the
 * tile products through sgemm: no (T, T) matrix is stored. The CPU backend's flash_attention ops call
 * these after the device wrappers have checked the shapes (and widened any bf16 argument). */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_FLASH_CPU_H
#define TRIDENT_ENGINE_DEVICE_OPS_FLASH_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/math.h"
#include "engine/device/ops/attention_math.h"

/* out(B,T,NH*HS) and lse(B,NH,T) (the rows' logsumexp) from qkv (engine/device/ops/attention_math.h
 * tri_flash_dims: [q | k | v] rows, NH_kv <= NH key/value heads), scale 1/sqrt(HS). Parallel over (b, h, query
 * tile) on `threads` OpenMP threads; the result does not depend on the thread count. */
void tri_cpu_flash_forward(int threads, float *out, float *lse, const float *qkv, tri_flash_dims d);

/* dqkv (qkv's layout) = the gradient given dout(B,T,NH*HS) (overwritten), from the forward's qkv,
 * out and lse; delta(B,NH,T) receives the rows' dout . out (Dao 2023 Algorithm 2's D). Parallel over
 * (b, key/value head): dq sums over the key tiles in ascending order, dk and dv over the group's
 * query heads in order and, for each, the query tiles in ascending order, so the result is the same
 * for any thread count and no two threads write one element. */
void tri_cpu_flash_backward(int threads, float *dqkv, float *delta, const float *dout, const float *qkv,
                            const float *out, const float *lse, tri_flash_dims d);

/* The context-parallel forms (engine/device/ops_list.h flash_attention_kv_*): queries from the q
 * columns of qkv (B,T,W) at positions qr, keys and values from the last 2 NH_kv HS columns of kv
 * (B,Tk,Wk) at positions kr; the loops above run on them (today's op is qr = kr whole, kv = qkv). */
void tri_cpu_flash_kv_forward(int threads, float *out, float *lse, const float *qkv, const float *kv, int64_t Tk,
                              int64_t Wk, tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d);
/* delta(B,NH,T) = rows' dout . out, per head left to right. */
void tri_cpu_flash_delta(int threads, float *delta, const float *dout, const float *out, tri_flash_dims d);
/* dq columns of dqkv (qkv's layout) = (+=) the gradient through the keys of kv. */
void tri_cpu_flash_kv_backward_dq(int threads, float *dqkv, const float *delta, const float *dout,
                                  const float *qkv, const float *kv, const float *lse, int64_t Tk, int64_t Wk,
                                  tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d, bool accumulate);
/* dk, dv columns of dkv (kv's layout) = (+=) the gradient from the queries of qkv. */
void tri_cpu_flash_kv_backward_dkv(int threads, float *dkv, const float *delta, const float *dout,
                                   const float *qkv, const float *kv, const float *lse, int64_t Tk, int64_t Wk,
                                   tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d, bool accumulate);
/* Both: dq columns of dqkv and dk, dv columns of dkv (+=), one pass per (b, key/value head) when there
 * are at least as many such tasks as threads, else the two passes above (the same bits). */
void tri_cpu_flash_kv_backward(int threads, float *dqkv, float *dkv, const float *delta, const float *dout,
                               const float *qkv, const float *kv, const float *lse, int64_t Tk, int64_t Wk,
                               tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d, bool accumulate);
/* out, lse <- the log-sum-exp merge of (out, lse) and (out2, lse2), per row tri_flash_merge_weights. */
void tri_cpu_flash_merge(int threads, float *out, float *lse, const float *out2, const float *lse2, tri_flash_dims d);

#endif
