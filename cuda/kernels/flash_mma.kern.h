/* cuda/kernels/flash_mma.kern.h - fused causal attention on the tensor cores (FlashAttention-2, Dao 2023).
 *
 * The kernel bodies, written against cuda/kernels/mma_shim.h: cuda/flash_mma.cu wraps them as CUDA
 * kernels (WMMA), tests/test_flash_mma_cpu.cpp runs them on the CPU in the shim's emulation (real
 * threads for the lanes, barriers for __syncthreads/__syncwarp) against the CPU backend.
 *
 * bf16 operands, fp32 accumulation, through the WMMA API (16 x 16 x 16 fragments, sm_80+). A block
 * is 4 warps and owns one tile of 64 rows (TRI_FLASH_BR = TRI_FLASH_BC = 64); each warp owns 16 of
 * them. Tiles of q, k, v and dout are staged in shared memory with 16-byte loads; products go
 * through fragments, and the element-wise steps (scale, online softmax, exp(s - lse), dS) run on
 * the fp32 results stored back to shared memory, with engine/core/math.h's functions:
 *   forward   S_w = Q_w K^T (16 x 64) -> per row tri_flash_row_update -> P_w (bf16) ->
 *             O_w = alpha O_w + P_w V (O_w fp32 in shared memory), then O / l and the logsumexp;
 *   dk, dv    a block per key tile of a key/value head, its group's query heads in order
 *             (grouped-query attention; one head when NH_kv = NH), for each the query tiles at
 *             or past the key tile in ascending order:
 *             S^T = K_w Q^T, dP^T = V_w dout^T, P = exp(S - lse), dS = P (dP - delta),
 *             dV_w += P^T dout, dK_w += dS^T Q (fragments kept in registers);
 *   dq        a block per query tile, key tiles 0..diagonal ascending: dQ_w += dS K.
 * No atomics: every output element is summed by one warp, over tiles in a fixed order, so the
 * backward is deterministic. P and dS are rounded to bf16 before their products (as FlashAttention-2
 * does); the scores, sums and statistics stay fp32. The query tiles run heaviest first (the causal
 * triangle). Differences from the simple twins: the products' summation order inside the tensor
 * cores and the bf16 rounding of P and dS, both within the bf16 tolerance of the tests. */
#ifndef TRIDENT_CUDA_KERNELS_FLASH_MMA_KERN_H
#define TRIDENT_CUDA_KERNELS_FLASH_MMA_KERN_H

#include <math.h>
#include <stdint.h>

#include "cuda/kernels/mma_shim.h"
#include "engine/core/math.h"

#define TILE 64     /* TRI_FLASH_BR == TRI_FLASH_BC */
#define WARPS 4
#define THREADS (32 * WARPS)
#define WROWS 16    /* rows of a tile per warp */

static_assert(TRI_FLASH_BR == TILE && TRI_FLASH_BC == TILE, "flash_mma.kern.h is written for 64-row tiles");

/* Head sizes the kernels are instantiated for (multiples of 16 up to 128: the output stage fits the
 * score buffers). */
TRI_HD bool tri_flash_mma_head_size(int64_t HS)
{
    return HS == 32 || HS == 64 || HS == 80 || HS == 96 || HS == 128;
}

/* rows r < valid of a (TILE, HS) tile from src (row stride ld elements) into dst, zeros after: 16-byte
 * copies of the raw bf16 bits */
template <int HS>
TRI_MMA_DEV void load_tile(tri_mma_bf16 *dst, const uint16_t *src, int64_t ld, int64_t valid)
{
    constexpr int CH = HS / 8;
    for (int idx = TRI_MMA_TID; idx < TILE * CH; idx += THREADS) {
        int r = idx / CH, c = idx % CH;
        tri_mma_u128 v = {0u, 0u, 0u, 0u};
        if (r < valid)
            v = *reinterpret_cast<const tri_mma_u128 *>(src + r * ld + c * 8);
        *reinterpret_cast<tri_mma_u128 *>(dst + r * HS + c * 8) = v;
    }
}

/* c (WROWS x TILE, fp32, row stride TILE) = a_rows (WROWS x HS) . b_rows (TILE x HS)^T, both bf16
 * row-major with row stride HS */
template <int HS>
TRI_MMA_DEV void rows_times_rows_t(float *c, const tri_mma_bf16 *a_rows, const tri_mma_bf16 *b_rows)
{
    TRI_MMA_UNROLL
    for (int n = 0; n < TILE / 16; n++) {
        tri_frag_acc acc;
        tri_mma_fill(acc, 0.0f);
    TRI_MMA_UNROLL
        for (int k = 0; k < HS / 16; k++) {
            tri_frag_a a;
            tri_frag_b_col b;
            tri_mma_load(a, a_rows + k * 16, HS);
            tri_mma_load(b, b_rows + n * 16 * HS + k * 16, HS);
            tri_mma(acc, a, b);
        }
        tri_mma_store(c + n * 16, acc, TILE);
    }
}

/* acc[n] += p (WROWS x TILE bf16, row stride TILE) . m (TILE x HS bf16, row stride HS), column block n */
template <int HS>
TRI_MMA_DEV void accumulate_p_times(tri_frag_acc (&acc)[HS / 16], const tri_mma_bf16 *p, const tri_mma_bf16 *m)
{
    TRI_MMA_UNROLL
    for (int k = 0; k < TILE / 16; k++) {
        tri_frag_a a;
        tri_mma_load(a, p + k * 16, TILE);
    TRI_MMA_UNROLL
        for (int n = 0; n < HS / 16; n++) {
            tri_frag_b_row b;
            tri_mma_load(b, m + k * 16 * HS + n * 16, HS);
            tri_mma(acc[n], a, b);
        }
    }
}

/* Writes a warp's WROWS x HS fp32 accumulator rows (staged row-major in stage) times `mul` to dst
 * (bf16, row stride ld) for rows whose global index row0 + r < T. */
template <int HS>
TRI_MMA_DEV void store_rows(uint16_t *dst, int64_t ld, float *stage, tri_frag_acc (&acc)[HS / 16], float mul, int64_t row0,
                           int64_t T)
{
    int lane = TRI_MMA_TID % 32;
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++)
        tri_mma_store(stage + n * 16, acc[n], HS);
    TRI_MMA_SYNC_WARP();
    for (int idx = lane; idx < WROWS * HS; idx += 32) {
        int64_t r = idx / HS;
        if (row0 + r < T)
            dst[r * ld + idx % HS] = tri_float_to_bf16(stage[idx] * mul);
    }
    TRI_MMA_SYNC_WARP();
}

/* Keys of tile j0 (nc rows) that query t sees. */
TRI_MMA_DEV int64_t visible_keys(int64_t t, int64_t j0, int64_t nc)
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
TRI_MMA_DEV void flash_forward_mma_body(unsigned char *smem, uint16_t *out, float *lse, const uint16_t *qkv,
                                        tri_flash_dims d, int64_t n_tiles)
{
    typedef fwd_layout<HS> L;
    tri_mma_bf16 *sq = (tri_mma_bf16 *)(smem + L::q), *sk = (tri_mma_bf16 *)(smem + L::k), *sv = (tri_mma_bf16 *)(smem + L::v);
    float *sm = (float *)(smem + L::m), *sl = (float *)(smem + L::l), *sa = (float *)(smem + L::alpha);
    int warp = TRI_MMA_TID / 32, lane = TRI_MMA_TID % 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * TILE, *ow = (float *)(smem + L::o) + warp * WROWS * HS;
    tri_mma_bf16 *pw = (tri_mma_bf16 *)(smem + L::p) + warp * WROWS * TILE;
    int64_t T = d.T, C = d.NH * HS, W = tri_flash_width(d);
    int64_t i0 = (n_tiles - 1 - TRI_MMA_BX) * TILE, bh = TRI_MMA_BY, b = bh / d.NH, h = bh % d.NH;
    int64_t g = tri_flash_kv_head(d, h), nr = T - i0 < TILE ? T - i0 : TILE;
    const uint16_t *qb = qkv + tri_flash_q_at(d, b, 0, h), *kb = qkv + tri_flash_k_at(d, b, 0, g),
                   *vb = qkv + tri_flash_v_at(d, b, 0, g);
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<HS>(sq, qb + i0 * W, W, nr);
    for (int idx = TRI_MMA_TID; idx < TILE * HS; idx += THREADS)
        ((float *)(smem + L::o))[idx] = 0.0f;
    if (TRI_MMA_TID < TILE) {
        sm[TRI_MMA_TID] = -INFINITY;
        sl[TRI_MMA_TID] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < i0 + nr; j0 += TILE) {
        int64_t nc = T - j0 < TILE ? T - j0 : TILE;
        TRI_MMA_SYNC_BLOCK(); /* the previous tile's k and v are no longer read */
        load_tile<HS>(sk, kb + j0 * W, W, nc);
        load_tile<HS>(sv, vb + j0 * W, W, nc);
        TRI_MMA_SYNC_BLOCK();
        rows_times_rows_t<HS>(sw, sq + warp * WROWS * HS, sk);
        TRI_MMA_SYNC_WARP();
        if (lane < WROWS) {
            int r = warp * WROWS + lane;
            int64_t t = i0 + r, n = t < T ? visible_keys(t, j0, nc) : 0;
            float *row = sw + lane * TILE;
            for (int64_t j = 0; j < n; j++)
                row[j] *= scale;
            sa[r] = tri_flash_row_update(row, n, &sm[r], &sl[r]);
            for (int j = 0; j < TILE; j++)
                pw[lane * TILE + j] = tri_mma_to_bf16(j < n ? row[j] : 0.0f);
        }
        TRI_MMA_SYNC_WARP();
        for (int idx = lane; idx < WROWS * HS; idx += 32)
            ow[idx] *= sa[warp * WROWS + idx / HS];
        TRI_MMA_SYNC_WARP();
        tri_frag_acc acc[HS / 16];
    TRI_MMA_UNROLL
        for (int n = 0; n < HS / 16; n++)
            tri_mma_load(acc[n], ow + n * 16, HS);
        accumulate_p_times<HS>(acc, pw, sv);
    TRI_MMA_UNROLL
        for (int n = 0; n < HS / 16; n++)
            tri_mma_store(ow + n * 16, acc[n], HS);
        TRI_MMA_SYNC_WARP();
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
TRI_MMA_DEV void load_stats(float *slse, float *sdelta, const float *lse, const float *delta, int64_t row, int64_t valid)
{
    if (TRI_MMA_TID < TILE) {
        bool ok = TRI_MMA_TID < valid;
        slse[TRI_MMA_TID] = ok ? lse[row + TRI_MMA_TID] : 0.0f;
        sdelta[TRI_MMA_TID] = ok ? delta[row + TRI_MMA_TID] : 0.0f;
    }
}

/* P and dS of a warp's WROWS x TILE block from its scores s and dp (fp32, scaled here), for query
 * t and key j of element (a, c): transposed (a key, c query) in the dk/dv kernel. */
TRI_MMA_DEV void probabilities(tri_mma_bf16 *p_out, tri_mma_bf16 *ds_out, const float *s, const float *dp, const float *slse,
                              const float *sdelta, int64_t a0, int64_t c0, bool keys_are_rows, int64_t T, float scale)
{
    int lane = TRI_MMA_TID % 32;
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
            p_out[idx] = tri_mma_to_bf16(p);
        ds_out[idx] = tri_mma_to_bf16(ds);
    }
}

template <int HS>
TRI_MMA_DEV void flash_backward_dkv_mma_body(unsigned char *smem, uint16_t *dqkv, const float *delta,
                                             const uint16_t *dout, const uint16_t *qkv, const float *lse,
                                             tri_flash_dims d, int64_t n_tiles)
{
    typedef bwd_layout<HS> L;
    tri_mma_bf16 *sk = (tri_mma_bf16 *)(smem + L::t0), *sv = (tri_mma_bf16 *)(smem + L::t1), *sq = (tri_mma_bf16 *)(smem + L::t2),
         *sdo = (tri_mma_bf16 *)(smem + L::t3);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = TRI_MMA_TID / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * TILE, *dpw = (float *)(smem + L::dp) + warp * WROWS * TILE;
    tri_mma_bf16 *pw = (tri_mma_bf16 *)(smem + L::p) + warp * WROWS * TILE, *dsw = (tri_mma_bf16 *)(smem + L::ds) + warp * WROWS * TILE;
    (void)n_tiles; /* a block per key tile: the grid says how many */
    int64_t T = d.T, C = d.NH * HS, W = tri_flash_width(d), rep = d.NH / d.NH_kv;
    int64_t j0 = TRI_MMA_BX * TILE, bg = TRI_MMA_BY, b = bg / d.NH_kv, g = bg % d.NH_kv;
    int64_t nc = T - j0 < TILE ? T - j0 : TILE;
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<HS>(sk, qkv + tri_flash_k_at(d, b, j0, g), W, nc);
    load_tile<HS>(sv, qkv + tri_flash_v_at(d, b, j0, g), W, nc);
    tri_frag_acc dk[HS / 16], dv[HS / 16];
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++) {
        tri_mma_fill(dk[n], 0.0f);
        tri_mma_fill(dv[n], 0.0f);
    }
    /* the group's query heads in order, each with its query tiles from the diagonal on */
    for (int64_t h = g * rep; h < (g + 1) * rep; h++)
        for (int64_t i0 = j0; i0 < T; i0 += TILE) {
            int64_t nr = T - i0 < TILE ? T - i0 : TILE;
            TRI_MMA_SYNC_BLOCK(); /* the previous query tile is no longer read */
            load_tile<HS>(sq, qkv + tri_flash_q_at(d, b, i0, h), W, nr);
            load_tile<HS>(sdo, dout + (b * T + i0) * C + h * HS, C, nr);
            load_stats(slse, sdelta, lse, delta, (b * d.NH + h) * T + i0, nr);
            TRI_MMA_SYNC_BLOCK();
            rows_times_rows_t<HS>(sw, sk + warp * WROWS * HS, sq);   /* S^T: keys x queries */
            rows_times_rows_t<HS>(dpw, sv + warp * WROWS * HS, sdo); /* dP^T */
            TRI_MMA_SYNC_WARP();
            probabilities(pw, dsw, sw, dpw, slse, sdelta, j0 + warp * WROWS, i0, true, T, scale);
            TRI_MMA_SYNC_WARP();
            accumulate_p_times<HS>(dv, pw, sdo);
            accumulate_p_times<HS>(dk, dsw, sq);
        }
    TRI_MMA_SYNC_BLOCK(); /* the score buffers become the output stage */
    float *stage = (float *)(smem + L::s) + warp * WROWS * HS;
    int64_t row0 = j0 + warp * WROWS;
    store_rows<HS>(dqkv + tri_flash_k_at(d, b, row0, g), W, stage, dk, scale, row0, T);
    store_rows<HS>(dqkv + tri_flash_v_at(d, b, row0, g), W, stage, dv, 1.0f, row0, T);
}

template <int HS>
TRI_MMA_DEV void flash_backward_dq_mma_body(unsigned char *smem, uint16_t *dqkv, const float *delta,
                                            const uint16_t *dout, const uint16_t *qkv, const float *lse,
                                            tri_flash_dims d, int64_t n_tiles)
{
    typedef bwd_layout<HS> L;
    tri_mma_bf16 *sq = (tri_mma_bf16 *)(smem + L::t0), *sdo = (tri_mma_bf16 *)(smem + L::t1), *sk = (tri_mma_bf16 *)(smem + L::t2),
         *sv = (tri_mma_bf16 *)(smem + L::t3);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = TRI_MMA_TID / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * TILE, *dpw = (float *)(smem + L::dp) + warp * WROWS * TILE;
    tri_mma_bf16 *dsw = (tri_mma_bf16 *)(smem + L::ds) + warp * WROWS * TILE;
    int64_t T = d.T, C = d.NH * HS, W = tri_flash_width(d);
    int64_t i0 = (n_tiles - 1 - TRI_MMA_BX) * TILE, bh = TRI_MMA_BY, b = bh / d.NH, h = bh % d.NH;
    int64_t g = tri_flash_kv_head(d, h), nr = T - i0 < TILE ? T - i0 : TILE;
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<HS>(sq, qkv + tri_flash_q_at(d, b, i0, h), W, nr);
    load_tile<HS>(sdo, dout + (b * T + i0) * C + h * HS, C, nr);
    load_stats(slse, sdelta, lse, delta, bh * T + i0, nr);
    tri_frag_acc dq[HS / 16];
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++)
        tri_mma_fill(dq[n], 0.0f);
    for (int64_t j0 = 0; j0 < i0 + nr; j0 += TILE) {
        int64_t nc = T - j0 < TILE ? T - j0 : TILE;
        TRI_MMA_SYNC_BLOCK();
        load_tile<HS>(sk, qkv + tri_flash_k_at(d, b, j0, g), W, nc);
        load_tile<HS>(sv, qkv + tri_flash_v_at(d, b, j0, g), W, nc);
        TRI_MMA_SYNC_BLOCK();
        rows_times_rows_t<HS>(sw, sq + warp * WROWS * HS, sk);   /* S: queries x keys */
        rows_times_rows_t<HS>(dpw, sdo + warp * WROWS * HS, sv); /* dP */
        TRI_MMA_SYNC_WARP();
        probabilities(NULL, dsw, sw, dpw, slse, sdelta, i0 + warp * WROWS, j0, false, T, scale);
        TRI_MMA_SYNC_WARP();
        accumulate_p_times<HS>(dq, dsw, sk);
    }
    TRI_MMA_SYNC_BLOCK();
    float *stage = (float *)(smem + L::s) + warp * WROWS * HS;
    int64_t row0 = i0 + warp * WROWS;
    store_rows<HS>(dqkv + tri_flash_q_at(d, b, row0, h), W, stage, dq, scale, row0, T);
}

#endif
