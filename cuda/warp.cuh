/* cuda/warp.cuh - the pieces of the fast row kernels (CUDA only): a warp per row, 16-byte loads, and
 * engine/core/math.h's row order.
 *
 * math.h sums a row over 256 slots (value i in slot i % 256, each slot in index order), then combines
 * each group of 8 slots by halving and the 32 group sums by halving. In a warp, lane l owns slots
 * 8l .. 8l+7: it walks the row at i = 8l, 8l + 256, ..., loading the 8 values i .. i+7 in one 16-byte
 * load (bf16) or two (fp32) when the row start is 16-byte aligned and the 8 are inside the row, one
 * by one otherwise (same values, same slots), and adds value k to register r[k]. tri_warp_row_sum
 * then combines r as math.h's tri_row_group_combine does and the lanes by __shfl_xor_sync with
 * offsets 16, 8, 4, 2, 1: lane g < k adds lane g + k, exactly math.h's group tree, and the lanes
 * above get the same sum (IEEE addition commutes). So a fast kernel's sums are the simple kernel's
 * and the CPU backend's, bit for bit. */
#ifndef TRIDENT_CUDA_WARP_CUH
#define TRIDENT_CUDA_WARP_CUH

#include <stdint.h>

#include "cuda/kernels/shim.h"
#include "engine/core/math.h"

#define TRI_WARP_FULL 0xffffffffu
#define TRI_ROWS_PER_BLOCK 8 /* warps (rows) per 256-thread block */

/* Whether p is 16-byte aligned (the vector path of a row). */
__device__ __forceinline__ bool tri_aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* The same test on the host (a kernel told whether all its tensors take the vector path). */
static inline bool tri_aligned16_host(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* ---- where a thread's values of a row lie (the index functions of the row kernels) ----
 * Thread t of those sharing a row (a lane of a warp per row, or a thread of cross-entropy's block
 * per row) holds math.h's slots 8t .. 8t+7: its first element is tri_row_first(t), the next ones
 * a pass (TRI_ROW_SLOTS, or TRI_CE_SLOTS for a block) later. tri_load8 / tri_store8 move a thread's
 * 8 elements at i in tri_vec8_pieces 16-byte accesses, piece q at element i + tri_vec8_piece. The
 * kernels take their indices from these; tests/test_access_patterns.cpp enumerates them for a
 * warp's 32 lanes and checks the global sectors. */
TRI_HD int64_t tri_row_first(int t)
{
    return 8 * (int64_t)t;
}

TRI_HD int tri_vec8_pieces(int bf16)
{
    return bf16 ? 1 : 2;
}

TRI_HD int64_t tri_vec8_piece(int bf16, int q)
{
    return bf16 ? 0 : 4 * (int64_t)q;
}

/* v[k] = element i + k of row (fp32 or bf16) for i + k < n; the rest of v is left as it was. */
__device__ __forceinline__ void tri_load8(float v[8], const void *row, int bf16, int64_t i, int64_t n, bool vec)
{
    if (vec && i + 8 <= n) {
        if (bf16) {
            uint4 u = *(const uint4 *)((const uint16_t *)row + i);
            uint32_t w[4] = {u.x, u.y, u.z, u.w};
            for (int k = 0; k < 4; k++) {
                v[2 * k] = tri_bf16_to_float((uint16_t)(w[k] & 0xffffu));
                v[2 * k + 1] = tri_bf16_to_float((uint16_t)(w[k] >> 16));
            }
        } else {
            float4 a = *(const float4 *)((const float *)row + i + tri_vec8_piece(0, 0)),
                   b = *(const float4 *)((const float *)row + i + tri_vec8_piece(0, 1));
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        }
        return;
    }
    for (int k = 0; k < 8 && i + k < n; k++)
        v[k] = tri_load(row, bf16, i + k);
}

/* Stores v[k] to element i + k of row for i + k < n, each rounded once when bf16. */
__device__ __forceinline__ void tri_store8(void *row, int bf16, int64_t i, int64_t n, const float v[8], bool vec)
{
    if (vec && i + 8 <= n) {
        if (bf16) {
            uint4 u;
            u.x = tri_float_to_bf16(v[0]) | ((uint32_t)tri_float_to_bf16(v[1]) << 16);
            u.y = tri_float_to_bf16(v[2]) | ((uint32_t)tri_float_to_bf16(v[3]) << 16);
            u.z = tri_float_to_bf16(v[4]) | ((uint32_t)tri_float_to_bf16(v[5]) << 16);
            u.w = tri_float_to_bf16(v[6]) | ((uint32_t)tri_float_to_bf16(v[7]) << 16);
            *(uint4 *)((uint16_t *)row + i) = u;
        } else {
            *(float4 *)((float *)row + i + tri_vec8_piece(0, 0)) = make_float4(v[0], v[1], v[2], v[3]);
            *(float4 *)((float *)row + i + tri_vec8_piece(0, 1)) = make_float4(v[4], v[5], v[6], v[7]);
        }
        return;
    }
    for (int k = 0; k < 8 && i + k < n; k++)
        tri_store(row, bf16, i + k, v[k]);
}

/* ---- flat element-wise kernels: a thread per 8 consecutive elements in a grid-stride loop ----
 * The first element of this thread's first 8, and the loop's stride; tri_vec8_grid gives the blocks
 * of TRI_BLOCK threads for n elements. With tri_load8 / tri_store8 (16-byte accesses when every
 * tensor starts 16-byte aligned) each element is computed as a thread-per-element kernel computes it,
 * so the simple twins' bits. */
__device__ __forceinline__ int64_t tri_vec8_first(void)
{
    return 8 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
}

__device__ __forceinline__ int64_t tri_vec8_stride(void)
{
    return 8 * (int64_t)gridDim.x * blockDim.x;
}

static inline int64_t tri_vec8_grid(int64_t n)
{
    return tri_grid_for((n + 7) / 8, TRI_BLOCK);
}

/* Blocks of a launch with a block per row that strides over the rows past TRI_MAX_BLOCKS (at least
 * 1: CUDA refuses an empty grid). */
static inline int64_t tri_row_blocks(int64_t rows)
{
    return rows < 1 ? 1 : rows > TRI_MAX_BLOCKS ? TRI_MAX_BLOCKS : rows;
}

/* The row sum of a warp whose lanes hold their 8 slot sums in r (overwritten): every lane returns it. */
__device__ __forceinline__ float tri_warp_row_sum(float r[8])
{
    float v = tri_row_group_combine(r);
    for (int k = TRI_ROW_LANES / 2; k >= 1; k /= 2)
        v += __shfl_xor_sync(TRI_WARP_FULL, v, k);
    return v;
}

/* The max over a warp (exact in any order); NaN-free inputs as the row functions keep them. */
__device__ __forceinline__ float tri_warp_max(float v)
{
    for (int k = TRI_ROW_LANES / 2; k >= 1; k /= 2) {
        float o = __shfl_xor_sync(TRI_WARP_FULL, v, k);
        v = o > v ? o : v;
    }
    return v;
}

/* The row of this warp in a launch of TRI_ROWS_PER_BLOCK warps per block, and this thread's lane. */
__device__ __forceinline__ int64_t tri_warp_row(void)
{
    return (int64_t)blockIdx.x * TRI_ROWS_PER_BLOCK + threadIdx.x / 32;
}

__device__ __forceinline__ int tri_lane(void)
{
    return (int)(threadIdx.x & 31);
}

/* The first pass of a norm over a row x of C (fp32 or bf16): adds each of the lane's values, or its
 * square when `squares`, into the lane's slot sums r (math.h's slots; tri_warp_row_sum combines them). */
__device__ __forceinline__ void tri_row_sums(float r[8], const void *x, int bf16, int64_t C, bool squares)
{
    bool vx = tri_aligned16(x);
    float v[8] = {0};
    for (int64_t i = tri_row_first(tri_lane()); i < C; i += TRI_ROW_SLOTS) {
        tri_load8(v, x, bf16, i, C, vx);
        for (int k = 0; k < 8 && i + k < C; k++)
            r[k] += squares ? v[k] * v[k] : v[k];
    }
}

/* The first pass of a row's residual add fused into a norm: res = a + b over the lane's slots of
 * the row (each element rounded once to res's dtype and stored), adding each stored value, or its
 * square when `squares`, into the lane's slot sums r (what the norm's first pass over res would add). */
__device__ __forceinline__ void tri_residual_row_sums(float r[8], void *res, int res_bf16, const void *a, int a_bf16,
                                                      const void *b, int b_bf16, int64_t C, bool squares)
{
    bool vr = tri_aligned16(res), va = tri_aligned16(a), vb = tri_aligned16(b);
    float v[8] = {0}, bv[8] = {0};
    for (int64_t i = tri_row_first(tri_lane()); i < C; i += TRI_ROW_SLOTS) {
        tri_load8(v, a, a_bf16, i, C, va);
        tri_load8(bv, b, b_bf16, i, C, vb);
        for (int k = 0; k < 8; k++) {
            v[k] = v[k] + bv[k];
            if (res_bf16)
                v[k] = tri_bf16_to_float(tri_float_to_bf16(v[k]));
        }
        tri_store8(res, res_bf16, i, C, v, vr);
        for (int k = 0; k < 8 && i + k < C; k++)
            r[k] += squares ? v[k] * v[k] : v[k];
    }
}

/* Blocks for one warp per row over n rows (CUDA's grid limit 2^31 - 1 blocks in x is far). */
static inline int64_t tri_warp_grid(int64_t rows)
{
    int64_t g = (rows + TRI_ROWS_PER_BLOCK - 1) / TRI_ROWS_PER_BLOCK;
    return g < 1 ? 1 : g;
}

#endif
