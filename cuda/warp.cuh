/* cuda/warp.cuh - the pieces of the fast row kernels (CUDA only): a warp per row, whole-sector
 * loads, and engine/core/math.h's row order.
 *
 * math.h sums a row over 256 slots (value i in slot i % 256, each slot in index order), then combines
 * each group of 8 slots by halving and the 32 group sums by halving. In a warp, lane l owns slots
 * 4l .. 4l+3 and 128+4l .. 128+4l+3 (its values k = 0..3 and 4..7): it walks the row at i = 4l,
 * 4l + 256, ..., loading its two runs of 4 at i and i + 128, each in one access (a float4 for fp32, 8
 * bytes for bf16) when the row start is 16-byte aligned and the run is inside the row, one by one
 * otherwise (same values, same slots), and adds value k to register r[k]. So each access of the warp
 * is 512 (fp32) or 256 (bf16) contiguous bytes: whole 32-byte sectors. tri_warp_row_sum then makes
 * math.h's additions in math.h's order: group g's first halving step (slot 8g+s += slot 8g+s+4) adds
 * lane 2g's r[s] and lane 2g+1's (g < 16; r[4+s] of lanes 2g-32, 2g-31 for g >= 16), a shuffle xor 1
 * of 8 values; the group's other steps are each lane's own; the lane tree's first step (group g +=
 * g + 16) is a lane's r[0] += r[4]; the rest are shuffles xor 16, 8, 4, 2 (lane pairs m, m + k of
 * math.h's tree are lanes 2m, 2(m + k)). A lane whose operand order is the mirror of math.h's gets
 * the same sum (IEEE addition commutes). So a fast kernel's sums are the simple kernel's and the CPU
 * backend's, bit for bit: 12 shuffles a row instead of 5, and no shuffle in the loops. */
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
 * per row: warp t / 32 of the block takes the row's spans of 256 at 256 (t / 32), lane t % 32 in
 * them) holds math.h's slots 4l .. 4l+3 and 128+4l .. 128+4l+3 of its warp's spans (l = t % 32):
 * its first element is tri_row_first(t), its value k lies tri_row_at(k) after it, and the next
 * ones a pass (TRI_ROW_SLOTS, or TRI_CE_SLOTS for a block) later. tri_row_load8 / tri_row_store8
 * move the 8 in TRI_ROW_PIECES accesses of 4 elements, piece q at tri_row_piece(q) after the first.
 * The kernels take their indices from these; tests/test_access_patterns.cpp enumerates them for a
 * warp's 32 lanes and checks the global sectors of each access. */
#define TRI_ROW_HALF (TRI_ROW_SLOTS / 2) /* 128: the second run of a lane's slots */
#define TRI_ROW_PIECES 2                  /* accesses a lane makes for its 8 values of a pass */

TRI_HD int64_t tri_row_first(int t)
{
    return (int64_t)TRI_ROW_SLOTS * (t / 32) + 4 * (int64_t)(t % 32);
}

/* Where a thread's value k (0..7) lies after its first element. */
TRI_HD int64_t tri_row_at(int k)
{
    return k < 4 ? k : TRI_ROW_HALF - 4 + k;
}

/* Where a thread's access q (0, 1) starts after its first element; it moves values 4q .. 4q+3. */
TRI_HD int64_t tri_row_piece(int q)
{
    return (int64_t)TRI_ROW_HALF * q;
}

/* o[k] = element j + k of row (fp32 or bf16) for k < 4 where j + k < n, in one access when vec and
 * all 4 are in the row; the rest of o is left as it was. */
__device__ __forceinline__ void tri_row_load4(float *o, const void *row, int bf16, int64_t j, int64_t n, bool vec)
{
    if (vec && j + 4 <= n) {
        if (bf16) {
            uint2 u = *(const uint2 *)((const uint16_t *)row + j);
            o[0] = tri_bf16_to_float((uint16_t)(u.x & 0xffffu)), o[1] = tri_bf16_to_float((uint16_t)(u.x >> 16));
            o[2] = tri_bf16_to_float((uint16_t)(u.y & 0xffffu)), o[3] = tri_bf16_to_float((uint16_t)(u.y >> 16));
        } else {
            float4 a = *(const float4 *)((const float *)row + j);
            o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
        }
        return;
    }
    for (int k = 0; k < 4 && j + k < n; k++)
        o[k] = tri_load(row, bf16, j + k);
}

/* Stores o[k] to element j + k of row for k < 4 where j + k < n, each rounded once when bf16. */
__device__ __forceinline__ void tri_row_store4(void *row, int bf16, int64_t j, int64_t n, const float *o, bool vec)
{
    if (vec && j + 4 <= n) {
        if (bf16) {
            uint2 u;
            u.x = tri_float_to_bf16(o[0]) | ((uint32_t)tri_float_to_bf16(o[1]) << 16);
            u.y = tri_float_to_bf16(o[2]) | ((uint32_t)tri_float_to_bf16(o[3]) << 16);
            *(uint2 *)((uint16_t *)row + j) = u;
        } else {
            *(float4 *)((float *)row + j) = make_float4(o[0], o[1], o[2], o[3]);
        }
        return;
    }
    for (int k = 0; k < 4 && j + k < n; k++)
        tri_store(row, bf16, j + k, o[k]);
}

/* v[k] = element i + tri_row_at(k) of row (fp32 or bf16) where that is < n; the rest of v is left as
 * it was. vec: the row starts 16-byte aligned (i is a multiple of 4, so each run is aligned). */
__device__ __forceinline__ void tri_row_load8(float v[8], const void *row, int bf16, int64_t i, int64_t n, bool vec)
{
    tri_row_load4(v, row, bf16, i + tri_row_piece(0), n, vec);
    tri_row_load4(v + 4, row, bf16, i + tri_row_piece(1), n, vec);
}

/* Stores v[k] to element i + tri_row_at(k) of row where that is < n, each rounded once when bf16. */
__device__ __forceinline__ void tri_row_store8(void *row, int bf16, int64_t i, int64_t n, const float v[8], bool vec)
{
    tri_row_store4(row, bf16, i + tri_row_piece(0), n, v, vec);
    tri_row_store4(row, bf16, i + tri_row_piece(1), n, v + 4, vec);
}

/* ---- flat element-wise kernels' 8 consecutive elements (a thread per 8) ----
 * tri_load8 / tri_store8 move a thread's elements i .. i+7 in tri_vec8_pieces 16-byte accesses,
 * piece q at element i + tri_vec8_piece. */
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

/* The row sum of a warp whose lanes hold their 8 slot sums in r (lane l: slots 4l+k and 128+4l+k-4,
 * overwritten), in math.h's order (the header's comment): every lane returns it. */
__device__ __forceinline__ float tri_warp_row_sum(float r[8])
{
    for (int k = 0; k < 8; k++) /* groups' first step: slot 8g+s += slot 8g+s+4, lanes 2g and 2g+1 */
        r[k] += __shfl_xor_sync(TRI_WARP_FULL, r[k], 1);
    for (int k = 0; k < 2; k++) { /* the groups' other steps: group l/2 in r[0..4), 16+l/2 in r[4..8) */
        r[k] += r[k + 2];
        r[4 + k] += r[6 + k];
    }
    float v = (r[0] + r[1]) + (r[4] + r[5]); /* group g += group g + 16 */
    for (int k = TRI_ROW_LANES / 2; k >= 2; k /= 2)
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
        tri_row_load8(v, x, bf16, i, C, vx);
        for (int k = 0; k < 8 && i + tri_row_at(k) < C; k++)
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
        tri_row_load8(v, a, a_bf16, i, C, va);
        tri_row_load8(bv, b, b_bf16, i, C, vb);
        for (int k = 0; k < 8; k++) {
            v[k] = v[k] + bv[k];
            if (res_bf16)
                v[k] = tri_bf16_to_float(tri_float_to_bf16(v[k]));
        }
        tri_row_store8(res, res_bf16, i, C, v, vr);
        for (int k = 0; k < 8 && i + tri_row_at(k) < C; k++)
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
