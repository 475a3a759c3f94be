/* cuda/crossentropy/crossentropy_fast.cuh - the fast cross-entropy kernels (CUDA, and C++ on the CPU
 * through cuda/kernels/cuda_emu.h): the row max a warp per row; the sum of exponentials, the
 * gradient and the fused classifier a block of TRI_CE_WARPS warps per row (grid-stride over the
 * rows, launched with cuda/warp.cuh's tri_row_blocks), in engine/device/ops/crossentropy_math.h's block
 * order, with whole-sector loads and stores (cuda/warp.cuh). They give the simple kernels' bits
 * (cuda/crossentropy/crossentropy.kern.h); tests/test_fast_kernels_cpu.cpp runs them on the CPU against
 * the CPU backend, tests/gpu/test_gpu_ops.c on a GPU. */
#ifndef TRIDENT_CUDA_CROSSENTROPY_CROSSENTROPY_FAST_CUH
#define TRIDENT_CUDA_CROSSENTROPY_CROSSENTROPY_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/crossentropy_math.h"

/* The row max, a warp per row (cuda/warp.cuh): exact in any order, from -FLT_MAX as math.h's
 * tri_ce_row_max_mixed, so the simple kernel's bits. */
__global__ void ce_row_max_fast_kernel(float *maxes, const void *logits, int logits_bf16, int64_t N, int64_t V_l,
                                       int64_t V_valid)
{
    int64_t n = tri_warp_row();
    if (n >= N)
        return;
    const void *row = tri_at(logits, logits_bf16, n * V_l);
    bool vec = tri_aligned16(row);
    float v[8] = {0}, mx = -3.402823466e38f;
    for (int64_t i = tri_row_first(tri_lane()); i < V_valid; i += TRI_ROW_SLOTS) {
        tri_row_load8(v, row, logits_bf16, i, V_valid, vec);
        for (int k = 0; k < 8 && i + tri_row_at(k) < V_valid; k++)
            mx = v[k] > mx ? v[k] : mx;
    }
    mx = tri_warp_max(mx);
    if (tri_lane() == 0)
        maxes[n] = mx;
}

/* ---- a block of TRI_CE_WARPS warps per row (math.h's block order of the sum of exponentials) ----
 * Thread t = 32 w + l of the block owns the values at tri_row_first(t) of every TRI_CE_SLOTS (4096) of
 * the row: warp w walks spans w, w + 16, ... of 256 values with lane l on slots 4l .. 4l+3 and
 * 128+4l .. 128+4l+3 (cuda/warp.cuh), so each warp sums
 * exactly math.h's spans of warp w in its row order (tri_warp_row_sum), and the block halves the 16
 * warp sums (tri_ce_warps_combine): the bits of tri_ce_row_sumexp_mixed. A few such blocks per SM
 * keep their rows in L2 between the passes over them. */
#define TRI_CE_THREADS (32 * TRI_CE_WARPS)

/* The max over the block (exact in any order); every thread returns it. red: TRI_CE_WARPS floats. */
__device__ __forceinline__ float ce_block_max(float v, float *red)
{
    v = tri_warp_max(v);
    if (tri_lane() == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float mx = red[0];
    for (int w = 1; w < TRI_CE_WARPS; w++)
        mx = red[w] > mx ? red[w] : mx;
    __syncthreads(); /* red is free again */
    return mx;
}

/* The block's sum of its lanes' slot sums r (overwritten) in math.h's block order; every thread
 * returns it. red: TRI_CE_WARPS floats. */
__device__ __forceinline__ float ce_block_sum(float r[8], float *red)
{
    float v = tri_warp_row_sum(r);
    if (tri_lane() == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float w[TRI_CE_WARPS];
    for (int k = 0; k < TRI_CE_WARPS; k++)
        w[k] = red[k];
    __syncthreads();
    return tri_ce_warps_combine(w);
}

/* This thread's first value of the row and its stride (the block's values per pass). */
__device__ __forceinline__ int64_t ce_first(void)
{
    return tri_row_first((int)threadIdx.x);
}

/* The row max over the block, reading every valid value once. */
__device__ __forceinline__ float ce_block_row_max(const void *row, int bf16, int64_t V_valid, bool vec, float *red)
{
    float v[8] = {0}, mx = -3.402823466e38f;
    for (int64_t i = ce_first(); i < V_valid; i += TRI_CE_SLOTS) {
        tri_row_load8(v, row, bf16, i, V_valid, vec);
        for (int k = 0; k < 8 && i + tri_row_at(k) < V_valid; k++)
            mx = v[k] > mx ? v[k] : mx;
    }
    return ce_block_max(mx, red);
}

/* The sum of exp(logit - mx) over the valid values in math.h's block order. */
__device__ __forceinline__ float ce_block_row_sumexp(const void *row, int bf16, float mx, int64_t V_valid, bool vec,
                                                     float *red)
{
    float v[8] = {0}, acc[8] = {0};
    for (int64_t i = ce_first(); i < V_valid; i += TRI_CE_SLOTS) {
        tri_row_load8(v, row, bf16, i, V_valid, vec);
        for (int k = 0; k < 8 && i + tri_row_at(k) < V_valid; k++)
            acc[k] += tri_expf(v[k] - mx);
    }
    return ce_block_sum(acc, red);
}

/* drow = dloss (softmax - onehot(r)) on the valid columns, 0 on the padding; each value is read
 * before the same thread writes it, so drow may be the row itself. */
__device__ __forceinline__ void ce_block_row_backward(void *drow, int dbf16, const void *row, int bf16, float mx,
                                                      float sum, int64_t r, int64_t V_l, int64_t V_valid, float dloss)
{
    bool vec = tri_aligned16(row), dvec = tri_aligned16(drow);
    float v[8] = {0}, g[8];
    for (int64_t i = ce_first(); i < V_l; i += TRI_CE_SLOTS) {
        tri_row_load8(v, row, bf16, i, V_valid, vec);
        for (int k = 0; k < 8; k++) {
            int64_t j = i + tri_row_at(k);
            g[k] = j < V_valid ? tri_ce_dlogit(v[k], mx, sum, j == r, dloss) : 0.0f;
        }
        tri_row_store8(drow, dbf16, i, V_l, g, dvec);
    }
}

__global__ void __launch_bounds__(TRI_CE_THREADS)
    ce_sumexp_target_fast_kernel(float *stats, const void *logits, int logits_bf16, const float *maxes,
                                 const int32_t *targets, int64_t N, int64_t V_l, int64_t vocab_start, int64_t V_valid)
{
    __shared__ float red[TRI_CE_WARPS];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const void *row = tri_at(logits, logits_bf16, n * V_l);
        float sum = ce_block_row_sumexp(row, logits_bf16, maxes[n], V_valid, tri_aligned16(row), red);
        if (threadIdx.x == 0) {
            int64_t r = (int64_t)targets[n] - vocab_start;
            stats[2 * n] = sum;
            stats[2 * n + 1] = (r >= 0 && r < V_valid) ? tri_load(row, logits_bf16, r) : 0.0f;
        }
    }
}

__global__ void __launch_bounds__(TRI_CE_THREADS)
    ce_backward_fast_kernel(void *dlogits, int dlogits_bf16, const void *logits, int logits_bf16, const float *maxes,
                            const float *stats, const int32_t *targets, int64_t N, int64_t V_l, int64_t vocab_start,
                            int64_t V_valid, float dloss)
{
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x)
        ce_block_row_backward(tri_at(dlogits, dlogits_bf16, n * V_l), dlogits_bf16,
                              tri_at(logits, logits_bf16, n * V_l), logits_bf16, maxes[n], stats[2 * n],
                              (int64_t)targets[n] - vocab_start, V_l, V_valid, dloss);
}

/* The fused classifier (llm.c's fused_classifier, with math.h's order): a block per row reads it for
 * the max, again for the sum (from L2) and once more for the gradient, written over the logits when
 * in place; the loss from the target logit, read by thread 0 before any thread writes. */
__global__ void __launch_bounds__(TRI_CE_THREADS)
    ce_fused_fast_kernel(float *losses, void *dlogits, int dlogits_bf16, const void *logits, int logits_bf16,
                         const int32_t *targets, int64_t N, int64_t V_l, int64_t V_valid, float dloss)
{
    __shared__ float red[TRI_CE_WARPS];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const void *row = tri_at(logits, logits_bf16, n * V_l);
        bool vec = tri_aligned16(row);
        int64_t r = targets[n];
        float target_logit = (threadIdx.x == 0 && r >= 0 && r < V_valid) ? tri_load(row, logits_bf16, r) : 0.0f;
        float mx = ce_block_row_max(row, logits_bf16, V_valid, vec, red);
        float sum = ce_block_row_sumexp(row, logits_bf16, mx, V_valid, vec, red);
        if (threadIdx.x == 0)
            losses[n] = tri_ce_loss(mx, sum, target_logit);
        if (dlogits)
            ce_block_row_backward(tri_at(dlogits, dlogits_bf16, n * V_l), dlogits_bf16, row, logits_bf16, mx, sum,
                                  r, V_l, V_valid, dloss);
    }
}

#endif
