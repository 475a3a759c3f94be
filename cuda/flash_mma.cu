/* cuda/flash_mma.cu - fused causal attention on the tensor cores (FlashAttention-2, Dao 2023).
 *
 * bf16 operands, fp32 accumulation, through the WMMA API (16 x 16 x 16 fragments, sm_80+). A block
 * is 4 warps and owns one tile of 64 rows (TRI_FLASH_BR = TRI_FLASH_BC = 64); each warp owns 16 of
 * them. Tiles of q, k, v and dout are staged in shared memory with 16-byte loads; products go
 * through fragments, and the element-wise steps (scale, online softmax, exp(s - lse), dS) run on
 * the fp32 results stored back to shared memory, with engine/core/math.h's functions:
 *   forward   S_w = Q_w K^T (16 x 64) -> per row tri_flash_row_update -> P_w (bf16) ->
 *             O_w = alpha O_w + P_w V (O_w fp32 in shared memory), then O / l and the logsumexp;
 *   dk, dv    a block per key tile, the query tiles at or past it in ascending order:
 *             S^T = K_w Q^T, dP^T = V_w dout^T, P = exp(S - lse), dS = P (dP - delta),
 *             dV_w += P^T dout, dK_w += dS^T Q (fragments kept in registers);
 *   dq        a block per query tile, key tiles 0..diagonal ascending: dQ_w += dS K.
 * No atomics: every output element is summed by one warp, over tiles in a fixed order, so the
 * backward is deterministic. P and dS are rounded to bf16 before their products (as FlashAttention-2
 * does); the scores, sums and statistics stay fp32. The query tiles run heaviest first (the causal
 * triangle). Differences from the simple twins: the products' summation order inside the tensor
 * cores and the bf16 rounding of P and dS, both within the bf16 tolerance of the tests. */
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "cuda/cuda_internal.h"
#include "cuda/flash_mma.h"
#include "engine/core/math.h"

using namespace nvcuda;

#define TILE 64     /* TRI_FLASH_BR == TRI_FLASH_BC */
#define WARPS 4
#define THREADS (32 * WARPS)
#define WROWS 16    /* rows of a tile per warp */

static_assert(TRI_FLASH_BR == TILE && TRI_FLASH_BC == TILE, "flash_mma.cu is written for 64-row tiles");

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;

/* rows r < valid of a (TILE, HS) tile from src (row stride ld elements) into dst, zeros after: 16-byte
 * copies of the raw bf16 bits */
template <int HS>
__device__ void load_tile(bf16 *dst, const uint16_t *src, int64_t ld, int64_t valid)
{
    constexpr int CH = HS / 8;
    for (int idx = threadIdx.x; idx < TILE * CH; idx += THREADS) {
        int r = idx / CH, c = idx % CH;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r < valid)
            v = *reinterpret_cast<const uint4 *>(src + r * ld + c * 8);
        *reinterpret_cast<uint4 *>(dst + r * HS + c * 8) = v;
    }
}

/* c (WROWS x TILE, fp32, row stride TILE) = a_rows (WROWS x HS) . b_rows (TILE x HS)^T, both bf16
 * row-major with row stride HS */
template <int HS>
__device__ void rows_times_rows_t(float *c, const bf16 *a_rows, const bf16 *b_rows)
{
#pragma unroll
    for (int n = 0; n < TILE / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < HS / 16; k++) {
            frag_a a;
            frag_b_col b;
            wmma::load_matrix_sync(a, a_rows + k * 16, HS);
            wmma::load_matrix_sync(b, b_rows + n * 16 * HS + k * 16, HS);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(c + n * 16, acc, TILE, wmma::mem_row_major);
    }
}

/* acc[n] += p (WROWS x TILE bf16, row stride TILE) . m (TILE x HS bf16, row stride HS), column block n */
template <int HS>
__device__ void accumulate_p_times(frag_acc (&acc)[HS / 16], const bf16 *p, const bf16 *m)
{
#pragma unroll
    for (int k = 0; k < TILE / 16; k++) {
        frag_a a;
        wmma::load_matrix_sync(a, p + k * 16, TILE);
#pragma unroll
        for (int n = 0; n < HS / 16; n++) {
            frag_b_row b;
            wmma::load_matrix_sync(b, m + k * 16 * HS + n * 16, HS);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

/* Writes a warp's WROWS x HS fp32 accumulator rows (staged row-major in stage) times `mul` to dst
 * (bf16, row stride ld) for rows whose global index row0 + r < T. */
template <int HS>
__device__ void store_rows(uint16_t *dst, int64_t ld, float *stage, frag_acc (&acc)[HS / 16], float mul, int64_t row0,
                           int64_t T)
{
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::store_matrix_sync(stage + n * 16, acc[n], HS, wmma::mem_row_major);
    __syncwarp();
    for (int idx = lane; idx < WROWS * HS; idx += 32) {
        int64_t r = idx / HS;
        if (row0 + r < T)
            dst[r * ld + idx % HS] = tri_float_to_bf16(stage[idx] * mul);
    }
    __syncwarp();
}

/* Keys of tile j0 (nc rows) that query t sees. */
__device__ __forceinline__ int64_t visible_keys(int64_t t, int64_t j0, int64_t nc)
{
    return t < j0 ? 0 : (t - j0 + 1 < nc ? t - j0 + 1 : nc);
}

template <int HS>
struct fwd_layout {
    static constexpr size_t q = 0, k = q + TILE * HS * 2, v = k + TILE * HS * 2, s = v + TILE * HS * 2,
                            p = s + WARPS * WROWS * TILE * 4, o = p + WARPS * WROWS * TILE * 2, m = o + TILE * HS * 4,
                            l = m + TILE * 4, alpha = l + TILE * 4, bytes = alpha + TILE * 4;
};

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_forward_mma_kernel(uint16_t *out, float *lse, const uint16_t *qkv,
                                                                    int64_t T, int64_t C, int64_t NH, int64_t n_tiles)
{
    typedef fwd_layout<HS> L;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *sq = (bf16 *)(smem + L::q), *sk = (bf16 *)(smem + L::k), *sv = (bf16 *)(smem + L::v);
    float *sm = (float *)(smem + L::m), *sl = (float *)(smem + L::l), *sa = (float *)(smem + L::alpha);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * TILE, *ow = (float *)(smem + L::o) + warp * WROWS * HS;
    bf16 *pw = (bf16 *)(smem + L::p) + warp * WROWS * TILE;
    int64_t i0 = (n_tiles - 1 - blockIdx.x) * TILE, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int64_t nr = T - i0 < TILE ? T - i0 : TILE;
    const uint16_t *base = qkv + b * T * 3 * C + h * HS;
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<HS>(sq, base + i0 * 3 * C, 3 * C, nr);
    for (int idx = threadIdx.x; idx < TILE * HS; idx += THREADS)
        ((float *)(smem + L::o))[idx] = 0.0f;
    if (threadIdx.x < TILE) {
        sm[threadIdx.x] = -INFINITY;
        sl[threadIdx.x] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < i0 + nr; j0 += TILE) {
        int64_t nc = T - j0 < TILE ? T - j0 : TILE;
        __syncthreads(); /* the previous tile's k and v are no longer read */
        load_tile<HS>(sk, base + C + j0 * 3 * C, 3 * C, nc);
        load_tile<HS>(sv, base + 2 * C + j0 * 3 * C, 3 * C, nc);
        __syncthreads();
        rows_times_rows_t<HS>(sw, sq + warp * WROWS * HS, sk);
        __syncwarp();
        if (lane < WROWS) {
            int r = warp * WROWS + lane;
            int64_t t = i0 + r, n = t < T ? visible_keys(t, j0, nc) : 0;
            float *row = sw + lane * TILE;
            for (int64_t j = 0; j < n; j++)
                row[j] *= scale;
            sa[r] = tri_flash_row_update(row, n, &sm[r], &sl[r]);
            for (int j = 0; j < TILE; j++)
                pw[lane * TILE + j] = __float2bfloat16_rn(j < n ? row[j] : 0.0f);
        }
        __syncwarp();
        for (int idx = lane; idx < WROWS * HS; idx += 32)
            ow[idx] *= sa[warp * WROWS + idx / HS];
        __syncwarp();
        frag_acc acc[HS / 16];
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
            wmma::load_matrix_sync(acc[n], ow + n * 16, HS, wmma::mem_row_major);
        accumulate_p_times<HS>(acc, pw, sv);
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
            wmma::store_matrix_sync(ow + n * 16, acc[n], HS, wmma::mem_row_major);
        __syncwarp();
    }
    int64_t row0 = i0 + warp * WROWS;
    for (int idx = lane; idx < WROWS * HS; idx += 32) {
        int r = warp * WROWS + idx / HS;
        if (row0 + idx / HS < T)
            out[(b * T + row0 + idx / HS) * C + h * HS + idx % HS] = tri_float_to_bf16(ow[idx] / sl[r]);
    }
    if (lane < WROWS && row0 + lane < T)
        lse[bh * T + row0 + lane] = tri_flash_lse(sm[warp * WROWS + lane], sl[warp * WROWS + lane]);
}

/* Shared memory of the two backward kernels: four (TILE, HS) bf16 tiles, two fp32 and two bf16
 * (WARPS*WROWS, TILE) score-shaped buffers (the fp32 pair doubles as the output stage:
 * WARPS*WROWS*HS floats fit for HS <= 2*TILE), and the tile's lse and delta. */
template <int HS>
struct bwd_layout {
    static constexpr size_t t0 = 0, t1 = t0 + TILE * HS * 2, t2 = t1 + TILE * HS * 2, t3 = t2 + TILE * HS * 2,
                            s = t3 + TILE * HS * 2, dp = s + WARPS * WROWS * TILE * 4,
                            p = dp + WARPS * WROWS * TILE * 4, ds = p + WARPS * WROWS * TILE * 2,
                            lse = ds + WARPS * WROWS * TILE * 2, delta = lse + TILE * 4, bytes = delta + TILE * 4;
    static_assert(WARPS * WROWS * HS * 4 <= 2 * WARPS * WROWS * TILE * 4, "output stage fits the score buffers");
};

/* The tile's lse and delta rows i0.. (zero past T). */
__device__ void load_stats(float *slse, float *sdelta, const float *lse, const float *delta, int64_t row, int64_t valid)
{
    if (threadIdx.x < TILE) {
        bool ok = threadIdx.x < valid;
        slse[threadIdx.x] = ok ? lse[row + threadIdx.x] : 0.0f;
        sdelta[threadIdx.x] = ok ? delta[row + threadIdx.x] : 0.0f;
    }
}

/* P and dS of a warp's WROWS x TILE block from its scores s and dp (fp32, scaled here), for query
 * t and key j of element (a, c): transposed (a key, c query) in the dk/dv kernel. */
__device__ void probabilities(bf16 *p_out, bf16 *ds_out, const float *s, const float *dp, const float *slse,
                              const float *sdelta, int64_t a0, int64_t c0, bool keys_are_rows, int64_t T, float scale)
{
    int lane = threadIdx.x % 32;
    for (int idx = lane; idx < WROWS * TILE; idx += 32) {
        int a = idx / TILE, c = idx % TILE;
        int qi = keys_are_rows ? c : (int)(a0 % TILE) + a;      /* row of the query tile's stats */
        int64_t t = keys_are_rows ? c0 + c : a0 + a, j = keys_are_rows ? a0 + a : c0 + c;
        float p = 0.0f, ds = 0.0f;
        if (t < T && j <= t) {
            p = tri_expf(s[idx] * scale - slse[qi]);
            ds = p * (dp[idx] - sdelta[qi]);
        }
        if (p_out)
            p_out[idx] = __float2bfloat16_rn(p);
        ds_out[idx] = __float2bfloat16_rn(ds);
    }
}

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dkv_mma_kernel(uint16_t *dqkv, const float *delta,
                                                                         const uint16_t *dout, const uint16_t *qkv,
                                                                         const float *lse, int64_t T, int64_t C,
                                                                         int64_t NH, int64_t n_tiles)
{
    typedef bwd_layout<HS> L;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *sk = (bf16 *)(smem + L::t0), *sv = (bf16 *)(smem + L::t1), *sq = (bf16 *)(smem + L::t2),
         *sdo = (bf16 *)(smem + L::t3);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = threadIdx.x / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * TILE, *dpw = (float *)(smem + L::dp) + warp * WROWS * TILE;
    bf16 *pw = (bf16 *)(smem + L::p) + warp * WROWS * TILE, *dsw = (bf16 *)(smem + L::ds) + warp * WROWS * TILE;
    int64_t j0 = blockIdx.x * TILE, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int64_t nc = T - j0 < TILE ? T - j0 : TILE;
    const uint16_t *base = qkv + b * T * 3 * C + h * HS, *gbase = dout + b * T * C + h * HS;
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<HS>(sk, base + C + j0 * 3 * C, 3 * C, nc);
    load_tile<HS>(sv, base + 2 * C + j0 * 3 * C, 3 * C, nc);
    frag_acc dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int64_t i0 = j0; i0 < T; i0 += TILE) {
        int64_t nr = T - i0 < TILE ? T - i0 : TILE;
        __syncthreads(); /* the previous query tile is no longer read */
        load_tile<HS>(sq, base + i0 * 3 * C, 3 * C, nr);
        load_tile<HS>(sdo, gbase + i0 * C, C, nr);
        load_stats(slse, sdelta, lse, delta, bh * T + i0, nr);
        __syncthreads();
        rows_times_rows_t<HS>(sw, sk + warp * WROWS * HS, sq);   /* S^T: keys x queries */
        rows_times_rows_t<HS>(dpw, sv + warp * WROWS * HS, sdo); /* dP^T */
        __syncwarp();
        probabilities(pw, dsw, sw, dpw, slse, sdelta, j0 + warp * WROWS, i0, true, T, scale);
        __syncwarp();
        accumulate_p_times<HS>(dv, pw, sdo);
        accumulate_p_times<HS>(dk, dsw, sq);
    }
    __syncthreads(); /* the score buffers become the output stage */
    float *stage = (float *)(smem + L::s) + warp * WROWS * HS;
    int64_t row0 = j0 + warp * WROWS;
    uint16_t *dst = dqkv + (b * T + row0) * 3 * C + h * HS;
    store_rows<HS>(dst + C, 3 * C, stage, dk, scale, row0, T);
    store_rows<HS>(dst + 2 * C, 3 * C, stage, dv, 1.0f, row0, T);
}

template <int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dq_mma_kernel(uint16_t *dqkv, const float *delta,
                                                                        const uint16_t *dout, const uint16_t *qkv,
                                                                        const float *lse, int64_t T, int64_t C,
                                                                        int64_t NH, int64_t n_tiles)
{
    typedef bwd_layout<HS> L;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *sq = (bf16 *)(smem + L::t0), *sdo = (bf16 *)(smem + L::t1), *sk = (bf16 *)(smem + L::t2),
         *sv = (bf16 *)(smem + L::t3);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = threadIdx.x / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * TILE, *dpw = (float *)(smem + L::dp) + warp * WROWS * TILE;
    bf16 *dsw = (bf16 *)(smem + L::ds) + warp * WROWS * TILE;
    int64_t i0 = (n_tiles - 1 - blockIdx.x) * TILE, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int64_t nr = T - i0 < TILE ? T - i0 : TILE;
    const uint16_t *base = qkv + b * T * 3 * C + h * HS, *gbase = dout + b * T * C + h * HS;
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<HS>(sq, base + i0 * 3 * C, 3 * C, nr);
    load_tile<HS>(sdo, gbase + i0 * C, C, nr);
    load_stats(slse, sdelta, lse, delta, bh * T + i0, nr);
    frag_acc dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::fill_fragment(dq[n], 0.0f);
    for (int64_t j0 = 0; j0 < i0 + nr; j0 += TILE) {
        int64_t nc = T - j0 < TILE ? T - j0 : TILE;
        __syncthreads();
        load_tile<HS>(sk, base + C + j0 * 3 * C, 3 * C, nc);
        load_tile<HS>(sv, base + 2 * C + j0 * 3 * C, 3 * C, nc);
        __syncthreads();
        rows_times_rows_t<HS>(sw, sq + warp * WROWS * HS, sk);   /* S: queries x keys */
        rows_times_rows_t<HS>(dpw, sdo + warp * WROWS * HS, sv); /* dP */
        __syncwarp();
        probabilities(NULL, dsw, sw, dpw, slse, sdelta, i0 + warp * WROWS, j0, false, T, scale);
        __syncwarp();
        accumulate_p_times<HS>(dq, dsw, sk);
    }
    __syncthreads();
    float *stage = (float *)(smem + L::s) + warp * WROWS * HS;
    int64_t row0 = i0 + warp * WROWS;
    store_rows<HS>(dqkv + (b * T + row0) * 3 * C + h * HS, 3 * C, stage, dq, scale, row0, T);
}

/* ---- host side ---- */

#define FLASH_CHECK(expr, what) tri_cuda_check((expr), what, __FILE__, __LINE__)

template <int HS>
static int forward_hs(cudaStream_t s, void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH)
{
    size_t bytes = fwd_layout<HS>::bytes;
    int64_t tiles = (T + TILE - 1) / TILE;
    int rc = FLASH_CHECK(cudaFuncSetAttribute(flash_forward_mma_kernel<HS>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                         "cudaFuncSetAttribute(flash_forward_mma_kernel)");
    if (rc)
        return rc;
    flash_forward_mma_kernel<HS><<<dim3((unsigned)tiles, (unsigned)(B * NH)), THREADS, bytes, s>>>(
        (uint16_t *)out, lse, (const uint16_t *)qkv, T, C, NH, tiles);
    return FLASH_CHECK(cudaGetLastError(), "launch of flash_forward_mma_kernel");
}

template <int HS>
static int backward_hs(cudaStream_t s, void *dqkv, const float *delta, const void *dout, const void *qkv,
                       const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH)
{
    size_t bytes = bwd_layout<HS>::bytes;
    int64_t tiles = (T + TILE - 1) / TILE;
    dim3 grid((unsigned)tiles, (unsigned)(B * NH));
    int rc = FLASH_CHECK(cudaFuncSetAttribute(flash_backward_dkv_mma_kernel<HS>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                         "cudaFuncSetAttribute(flash_backward_dkv_mma_kernel)");
    if (!rc) rc = FLASH_CHECK(cudaFuncSetAttribute(flash_backward_dq_mma_kernel<HS>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                              "cudaFuncSetAttribute(flash_backward_dq_mma_kernel)");
    if (rc)
        return rc;
    flash_backward_dkv_mma_kernel<HS><<<grid, THREADS, bytes, s>>>((uint16_t *)dqkv, delta, (const uint16_t *)dout,
                                                                   (const uint16_t *)qkv, lse, T, C, NH, tiles);
    rc = FLASH_CHECK(cudaGetLastError(), "launch of flash_backward_dkv_mma_kernel");
    if (rc)
        return rc;
    flash_backward_dq_mma_kernel<HS><<<grid, THREADS, bytes, s>>>((uint16_t *)dqkv, delta, (const uint16_t *)dout,
                                                                  (const uint16_t *)qkv, lse, T, C, NH, tiles);
    return FLASH_CHECK(cudaGetLastError(), "launch of flash_backward_dq_mma_kernel");
}

bool tri_flash_mma_supports(int64_t HS)
{
    return HS == 32 || HS == 64 || HS == 80 || HS == 96 || HS == 128;
}

#define FLASH_DISPATCH(call_hs)                                                                    \
    switch (C / NH) {                                                                              \
    case 32: return call_hs(32);                                                                   \
    case 64: return call_hs(64);                                                                   \
    case 80: return call_hs(80);                                                                   \
    case 96: return call_hs(96);                                                                   \
    case 128: return call_hs(128);                                                                 \
    default: return TRI_ERR(TRI_ENOTSUP, "flash attention: no tensor-core kernel for head size %lld", \
                            (long long)(C / NH));                                                  \
    }

int tri_flash_mma_forward(cudaStream_t stream, void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                          int64_t C, int64_t NH)
{
#define FWD(hs) forward_hs<hs>(stream, out, lse, qkv, B, T, C, NH)
    FLASH_DISPATCH(FWD)
#undef FWD
}

int tri_flash_mma_backward(cudaStream_t stream, void *dqkv, const float *delta, const void *dout, const void *qkv,
                           const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH)
{
#define BWD(hs) backward_hs<hs>(stream, dqkv, delta, dout, qkv, lse, B, T, C, NH)
    FLASH_DISPATCH(BWD)
#undef BWD
}
