/* cuda/attention/flash_mma.kern.h - fused causal attention in tiles on the matrix units (FlashAttention-2, Dao 2023).
 *
 * The kernel bodies, written against cuda/kernels/mma_shim.h: cuda/attention/flash_mma.cu wraps them as CUDA
 * kernels, tests/test_flash_mma_cpu.cpp runs them on the CPU in the shim's emulation (fibers
 * for the lanes, barriers for __syncthreads/__syncwarp) against the CPU backend.
 *
 * Two precisions of one text, chosen by the policy P (below): bf16 operands on the tensor cores
 * through the WMMA API (16 x 16 x 16 fragments, fp32 accumulation, sm_80+), and fp32 operands on the
 * CUDA cores through the shim's SIMT fragments of the same shape (fp32 products, no TF32). A block
 * is 4 warps and owns one tile of 64 rows (TRI_FLASH_BR = TRI_FLASH_BC = 64); each warp owns 16 of
 * them. Tiles of q, k, v and dout are staged in shared memory with 16-byte loads (fp32 rows padded
 * by 4 floats, so a SIMT fragment's rows fall in different banks); products go through fragments,
 * and the element-wise steps (scale, online softmax, exp(s - lse), dS) run on the fp32 results
 * stored back to shared memory, with engine/core/math.h's functions:
 *   forward   S_w = Q_w K^T (16 x 64) -> per row tri_flash_row_update -> P_w ->
 *             O_w = alpha O_w + P_w V (O_w fp32 in shared memory), then O / l and the logsumexp;
 *   dk, dv    a block per key tile of a key/value head, its group's query heads in order
 *             (grouped-query attention; one head when NH_kv = NH), for each the query tiles at
 *             or past the key tile in ascending order:
 *             S^T = K_w Q^T, dP^T = V_w dout^T, P = exp(S - lse), dS = P (dP - delta),
 *             dV_w += P^T dout, dK_w += dS^T Q (fragments kept in registers);
 *   dq        a block per query tile, key tiles 0..diagonal ascending: dQ_w += dS K.
 * No atomics: every output element is summed by one warp, over tiles in a fixed order, so the
 * backward is deterministic. The bf16 form rounds P and dS to bf16 before their products (as
 * FlashAttention-2 does; the fp32 form keeps them fp32, in the score buffers); the scores, sums and
 * statistics stay fp32. The query tiles run heaviest first (the causal triangle). Differences from
 * the simple twins: the products' summation order (the tensor cores' own; k ascending with fmaf on
 * the CUDA cores) and, in bf16, the rounding of P and dS, all within the tests' tolerances. */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_MMA_KERN_H
#define TRIDENT_CUDA_ATTENTION_FLASH_MMA_KERN_H

#include <math.h>
#include <stdint.h>

#include "cuda/kernels/mma_shim.h"
#include "engine/core/math.h"
#include "engine/device/ops/attention_math.h"

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

/* The two precisions. elem: an operand tile's element in shared memory; global: an element of qkv,
 * out, dout and dqkv; the fragment types; pad: elements after each row of a shared tile (row
 * strides HS + pad and TILE + pad); p_in_scores: P and dS overwrite the fp32 scores they come from
 * (same type) instead of having buffers of their own; round: how P and dS enter their products;
 * to_global: how a result is stored. */
struct tri_flash_bf16_mma {
    typedef tri_mma_bf16 elem;
    typedef uint16_t global; /* bf16 bits */
    typedef tri_frag_acc acc;
    typedef tri_frag_a a;
    typedef tri_frag_b_row b_row;
    typedef tri_frag_b_col b_col;
    static constexpr int pad = 0;
    static constexpr bool p_in_scores = false;
    TRI_MMA_STATIC elem round(float x) { return tri_mma_to_bf16(x); }
    TRI_MMA_STATIC global to_global(float x) { return tri_float_to_bf16(x); }
};
struct tri_flash_fp32_simt {
    typedef float elem;
    typedef float global;
    typedef tri_sfrag_acc acc;
    typedef tri_sfrag_a a;
    typedef tri_sfrag_b_row b_row;
    typedef tri_sfrag_b_col b_col;
    static constexpr int pad = 4;
    static constexpr bool p_in_scores = true;
    TRI_MMA_STATIC elem round(float x) { return x; }
    TRI_MMA_STATIC global to_global(float x) { return x; }
};

/* rows r < valid of a (TILE, HS) tile from src (row stride ld elements) into dst (row stride
 * HS + P::pad), zeros after: 16-byte copies of the raw bits */
template <class P, int HS>
TRI_MMA_DEV void load_tile(typename P::elem *dst, const typename P::global *src, int64_t ld, int64_t valid)
{
    constexpr int PER = 16 / (int)sizeof(typename P::elem), CH = HS / PER, LD = HS + P::pad;
    for (int idx = TRI_MMA_TID; idx < TILE * CH; idx += THREADS) {
        int r = idx / CH, c = idx % CH;
        tri_mma_u128 v = {0u, 0u, 0u, 0u};
        if (r < valid)
            v = *reinterpret_cast<const tri_mma_u128 *>(src + r * ld + c * PER);
        *reinterpret_cast<tri_mma_u128 *>(dst + r * LD + c * PER) = v;
    }
}

/* c (WROWS x TILE, fp32, row stride TILE + P::pad) = a_rows (WROWS x HS) . b_rows (TILE x HS)^T,
 * both row-major with row stride HS + P::pad */
template <class P, int HS>
TRI_MMA_DEV void rows_times_rows_t(float *c, const typename P::elem *a_rows, const typename P::elem *b_rows)
{
    constexpr int LD = HS + P::pad;
    TRI_MMA_UNROLL
    for (int n = 0; n < TILE / 16; n++) {
        typename P::acc acc;
        tri_mma_fill(acc, 0.0f);
    TRI_MMA_UNROLL
        for (int k = 0; k < HS / 16; k++) {
            typename P::a a;
            typename P::b_col b;
            tri_mma_load(a, a_rows + k * 16, LD);
            tri_mma_load(b, b_rows + n * 16 * LD + k * 16, LD);
            tri_mma(acc, a, b);
        }
        tri_mma_store(c + n * 16, acc, TILE + P::pad);
    }
}

/* acc[n] += p (WROWS x TILE, row stride TILE + P::pad) . m (TILE x HS, row stride HS + P::pad),
 * column block n */
template <class P, int HS>
TRI_MMA_DEV void accumulate_p_times(typename P::acc (&acc)[HS / 16], const typename P::elem *p,
                                    const typename P::elem *m)
{
    constexpr int LD = HS + P::pad;
    TRI_MMA_UNROLL
    for (int k = 0; k < TILE / 16; k++) {
        typename P::a a;
        tri_mma_load(a, p + k * 16, TILE + P::pad);
    TRI_MMA_UNROLL
        for (int n = 0; n < HS / 16; n++) {
            typename P::b_row b;
            tri_mma_load(b, m + k * 16 * LD + n * 16, LD);
            tri_mma(acc[n], a, b);
        }
    }
}

/* Writes a warp's WROWS x HS fp32 accumulator rows (staged row-major in stage) times `mul` to dst
 * (row stride ld) for rows whose global index row0 + r < T. */
template <class P, int HS>
TRI_MMA_DEV void store_rows(typename P::global *dst, int64_t ld, float *stage, typename P::acc (&acc)[HS / 16],
                            float mul, int64_t row0, int64_t T)
{
    int lane = TRI_MMA_TID % 32;
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++)
        tri_mma_store(stage + n * 16, acc[n], HS);
    TRI_MMA_SYNC_WARP();
    for (int idx = lane; idx < WROWS * HS; idx += 32) {
        int64_t r = idx / HS;
        if (row0 + r < T)
            dst[r * ld + idx % HS] = P::to_global(stage[idx] * mul);
    }
    TRI_MMA_SYNC_WARP();
}

/* Keys of tile j0 (nc rows) that query t sees. */
TRI_MMA_DEV int64_t visible_keys(int64_t t, int64_t j0, int64_t nc)
{
    return t < j0 ? 0 : (t - j0 + 1 < nc ? t - j0 + 1 : nc);
}

/* Shared memory of the forward kernel: three (TILE, HS) operand tiles, the warps' fp32 scores and
 * their P (unless P overwrites the scores), the fp32 output accumulator and the rows' m, l, alpha. */
template <class P, int HS>
struct fwd_layout {
    static constexpr size_t E = sizeof(typename P::elem), LD = HS + P::pad, LS = TILE + P::pad;
    static constexpr size_t q = 0, k = q + TILE * LD * E, v = k + TILE * LD * E, s = v + TILE * LD * E,
                            s_end = s + WARPS * WROWS * LS * 4, p = P::p_in_scores ? s : s_end,
                            o = P::p_in_scores ? s_end : p + WARPS * WROWS * LS * E, m = o + TILE * LD * 4,
                            l = m + TILE * 4, alpha = l + TILE * 4, bytes = alpha + TILE * 4;
};

template <class P, int HS>
TRI_MMA_DEV void flash_forward_mma_body(unsigned char *smem, typename P::global *out, float *lse,
                                        const typename P::global *qkv, tri_flash_dims d, int64_t n_tiles)
{
    typedef fwd_layout<P, HS> L;
    typedef typename P::elem E;
    constexpr int LD = HS + P::pad, LS = TILE + P::pad;
    E *sq = (E *)(smem + L::q), *sk = (E *)(smem + L::k), *sv = (E *)(smem + L::v);
    float *sm = (float *)(smem + L::m), *sl = (float *)(smem + L::l), *sa = (float *)(smem + L::alpha);
    int warp = TRI_MMA_TID / 32, lane = TRI_MMA_TID % 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * LS, *ow = (float *)(smem + L::o) + warp * WROWS * LD;
    E *pw = (E *)(smem + L::p) + warp * WROWS * LS;
    int64_t T = d.T, C = d.NH * HS, W = tri_flash_width(d);
    int64_t i0 = (n_tiles - 1 - TRI_MMA_BX) * TILE, bh = TRI_MMA_BY, b = bh / d.NH, h = bh % d.NH;
    int64_t g = tri_flash_kv_head(d, h), nr = T - i0 < TILE ? T - i0 : TILE;
    const typename P::global *qb = qkv + tri_flash_q_at(d, b, 0, h), *kb = qkv + tri_flash_k_at(d, b, 0, g),
                             *vb = qkv + tri_flash_v_at(d, b, 0, g);
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<P, HS>(sq, qb + i0 * W, W, nr);
    for (int idx = TRI_MMA_TID; idx < TILE * HS; idx += THREADS)
        ((float *)(smem + L::o))[idx / HS * LD + idx % HS] = 0.0f;
    if (TRI_MMA_TID < TILE) {
        sm[TRI_MMA_TID] = -INFINITY;
        sl[TRI_MMA_TID] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < i0 + nr; j0 += TILE) {
        int64_t nc = T - j0 < TILE ? T - j0 : TILE;
        TRI_MMA_SYNC_BLOCK(); /* the previous tile's k and v are no longer read */
        load_tile<P, HS>(sk, kb + j0 * W, W, nc);
        load_tile<P, HS>(sv, vb + j0 * W, W, nc);
        TRI_MMA_SYNC_BLOCK();
        rows_times_rows_t<P, HS>(sw, sq + warp * WROWS * LD, sk);
        TRI_MMA_SYNC_WARP();
        if (lane < WROWS) {
            int r = warp * WROWS + lane;
            int64_t t = i0 + r, n = t < T ? visible_keys(t, j0, nc) : 0;
            float *row = sw + lane * LS;
            for (int64_t j = 0; j < n; j++)
                row[j] *= scale;
            sa[r] = tri_flash_row_update(row, n, &sm[r], &sl[r]);
            for (int j = 0; j < TILE; j++) /* in place when P overwrites the scores */
                pw[lane * LS + j] = P::round(j < n ? row[j] : 0.0f);
        }
        TRI_MMA_SYNC_WARP();
        for (int idx = lane; idx < WROWS * HS; idx += 32)
            ow[idx / HS * LD + idx % HS] *= sa[warp * WROWS + idx / HS];
        TRI_MMA_SYNC_WARP();
        typename P::acc acc[HS / 16];
    TRI_MMA_UNROLL
        for (int n = 0; n < HS / 16; n++)
            tri_mma_load(acc[n], ow + n * 16, LD);
        accumulate_p_times<P, HS>(acc, pw, sv);
    TRI_MMA_UNROLL
        for (int n = 0; n < HS / 16; n++)
            tri_mma_store(ow + n * 16, acc[n], LD);
        TRI_MMA_SYNC_WARP();
    }
    int64_t row0 = i0 + warp * WROWS;
    for (int idx = lane; idx < WROWS * HS; idx += 32) {
        int r = warp * WROWS + idx / HS;
        if (row0 + idx / HS < T)
            out[(b * T + row0 + idx / HS) * C + h * HS + idx % HS] = P::to_global(ow[idx / HS * LD + idx % HS] / sl[r]);
    }
    if (lane < WROWS && row0 + lane < T)
        lse[bh * T + row0 + lane] = tri_flash_lse(sm[warp * WROWS + lane], sl[warp * WROWS + lane]);
}

/* Shared memory of the two backward kernels: four (TILE, HS) operand tiles, two fp32
 * (WARPS*WROWS, TILE) score-shaped buffers (which double as the output stage: WARPS*WROWS*HS floats
 * fit for HS <= 2*TILE) and, unless P and dS overwrite them, two for P and dS; the tile's lse and
 * delta. */
template <class P, int HS>
struct bwd_layout {
    static constexpr size_t E = sizeof(typename P::elem), LD = HS + P::pad, LS = TILE + P::pad;
    static constexpr size_t t0 = 0, t1 = t0 + TILE * LD * E, t2 = t1 + TILE * LD * E, t3 = t2 + TILE * LD * E,
                            s = t3 + TILE * LD * E, dp = s + WARPS * WROWS * LS * 4,
                            dp_end = dp + WARPS * WROWS * LS * 4, p = P::p_in_scores ? s : dp_end,
                            ds = P::p_in_scores ? dp : p + WARPS * WROWS * LS * E,
                            lse = P::p_in_scores ? dp_end : ds + WARPS * WROWS * LS * E, delta = lse + TILE * 4,
                            bytes = delta + TILE * 4;
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

/* P and dS of a warp's WROWS x TILE block (row stride TILE + P::pad) from its scores s and dp (fp32,
 * scaled here), for query t and key j of element (a, c): transposed (a key, c query) in the dk/dv
 * kernel. Each lane writes only the elements it read, so p_out and ds_out may be s and dp. */
template <class P>
TRI_MMA_DEV void probabilities(typename P::elem *p_out, typename P::elem *ds_out, const float *s, const float *dp,
                               const float *slse, const float *sdelta, int64_t a0, int64_t c0, bool keys_are_rows,
                               int64_t T, float scale)
{
    constexpr int LS = TILE + P::pad;
    int lane = TRI_MMA_TID % 32;
    for (int idx = lane; idx < WROWS * TILE; idx += 32) {
        int a = idx / TILE, c = idx % TILE, e = a * LS + c;
        int qi = keys_are_rows ? c : (int)(a0 % TILE) + a;      /* row of the query tile's stats */
        int64_t t = keys_are_rows ? c0 + c : a0 + a, j = keys_are_rows ? a0 + a : c0 + c;
        float p = 0.0f, ds = 0.0f;
        if (t < T && j <= t) {
            p = tri_expf(s[e] * scale - slse[qi]);
            ds = p * (dp[e] - sdelta[qi]);
        }
        if (p_out)
            p_out[e] = P::round(p);
        ds_out[e] = P::round(ds);
    }
}

template <class P, int HS>
TRI_MMA_DEV void flash_backward_dkv_mma_body(unsigned char *smem, typename P::global *dqkv, const float *delta,
                                             const typename P::global *dout, const typename P::global *qkv,
                                             const float *lse, tri_flash_dims d, int64_t n_tiles)
{
    typedef bwd_layout<P, HS> L;
    typedef typename P::elem E;
    constexpr int LD = HS + P::pad, LS = TILE + P::pad;
    E *sk = (E *)(smem + L::t0), *sv = (E *)(smem + L::t1), *sq = (E *)(smem + L::t2), *sdo = (E *)(smem + L::t3);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = TRI_MMA_TID / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * LS, *dpw = (float *)(smem + L::dp) + warp * WROWS * LS;
    E *pw = (E *)(smem + L::p) + warp * WROWS * LS, *dsw = (E *)(smem + L::ds) + warp * WROWS * LS;
    (void)n_tiles; /* a block per key tile: the grid says how many */
    int64_t T = d.T, C = d.NH * HS, W = tri_flash_width(d), rep = d.NH / d.NH_kv;
    int64_t j0 = TRI_MMA_BX * TILE, bg = TRI_MMA_BY, b = bg / d.NH_kv, g = bg % d.NH_kv;
    int64_t nc = T - j0 < TILE ? T - j0 : TILE;
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<P, HS>(sk, qkv + tri_flash_k_at(d, b, j0, g), W, nc);
    load_tile<P, HS>(sv, qkv + tri_flash_v_at(d, b, j0, g), W, nc);
    typename P::acc dk[HS / 16], dv[HS / 16];
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
            load_tile<P, HS>(sq, qkv + tri_flash_q_at(d, b, i0, h), W, nr);
            load_tile<P, HS>(sdo, dout + (b * T + i0) * C + h * HS, C, nr);
            load_stats(slse, sdelta, lse, delta, (b * d.NH + h) * T + i0, nr);
            TRI_MMA_SYNC_BLOCK();
            rows_times_rows_t<P, HS>(sw, sk + warp * WROWS * LD, sq);   /* S^T: keys x queries */
            rows_times_rows_t<P, HS>(dpw, sv + warp * WROWS * LD, sdo); /* dP^T */
            TRI_MMA_SYNC_WARP();
            probabilities<P>(pw, dsw, sw, dpw, slse, sdelta, j0 + warp * WROWS, i0, true, T, scale);
            TRI_MMA_SYNC_WARP();
            accumulate_p_times<P, HS>(dv, pw, sdo);
            accumulate_p_times<P, HS>(dk, dsw, sq);
        }
    TRI_MMA_SYNC_BLOCK(); /* the score buffers become the output stage */
    float *stage = (float *)(smem + L::s) + warp * WROWS * HS;
    int64_t row0 = j0 + warp * WROWS;
    store_rows<P, HS>(dqkv + tri_flash_k_at(d, b, row0, g), W, stage, dk, scale, row0, T);
    store_rows<P, HS>(dqkv + tri_flash_v_at(d, b, row0, g), W, stage, dv, 1.0f, row0, T);
}

template <class P, int HS>
TRI_MMA_DEV void flash_backward_dq_mma_body(unsigned char *smem, typename P::global *dqkv, const float *delta,
                                            const typename P::global *dout, const typename P::global *qkv,
                                            const float *lse, tri_flash_dims d, int64_t n_tiles)
{
    typedef bwd_layout<P, HS> L;
    typedef typename P::elem E;
    constexpr int LD = HS + P::pad, LS = TILE + P::pad;
    E *sq = (E *)(smem + L::t0), *sdo = (E *)(smem + L::t1), *sk = (E *)(smem + L::t2), *sv = (E *)(smem + L::t3);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = TRI_MMA_TID / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * LS, *dpw = (float *)(smem + L::dp) + warp * WROWS * LS;
    E *dsw = (E *)(smem + L::ds) + warp * WROWS * LS;
    int64_t T = d.T, C = d.NH * HS, W = tri_flash_width(d);
    int64_t i0 = (n_tiles - 1 - TRI_MMA_BX) * TILE, bh = TRI_MMA_BY, b = bh / d.NH, h = bh % d.NH;
    int64_t g = tri_flash_kv_head(d, h), nr = T - i0 < TILE ? T - i0 : TILE;
    float scale = 1.0f / sqrtf((float)HS);

    load_tile<P, HS>(sq, qkv + tri_flash_q_at(d, b, i0, h), W, nr);
    load_tile<P, HS>(sdo, dout + (b * T + i0) * C + h * HS, C, nr);
    load_stats(slse, sdelta, lse, delta, bh * T + i0, nr);
    typename P::acc dq[HS / 16];
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++)
        tri_mma_fill(dq[n], 0.0f);
    for (int64_t j0 = 0; j0 < i0 + nr; j0 += TILE) {
        int64_t nc = T - j0 < TILE ? T - j0 : TILE;
        TRI_MMA_SYNC_BLOCK();
        load_tile<P, HS>(sk, qkv + tri_flash_k_at(d, b, j0, g), W, nc);
        load_tile<P, HS>(sv, qkv + tri_flash_v_at(d, b, j0, g), W, nc);
        TRI_MMA_SYNC_BLOCK();
        rows_times_rows_t<P, HS>(sw, sq + warp * WROWS * LD, sk);   /* S: queries x keys */
        rows_times_rows_t<P, HS>(dpw, sdo + warp * WROWS * LD, sv); /* dP */
        TRI_MMA_SYNC_WARP();
        probabilities<P>(NULL, dsw, sw, dpw, slse, sdelta, i0 + warp * WROWS, j0, false, T, scale);
        TRI_MMA_SYNC_WARP();
        accumulate_p_times<P, HS>(dq, dsw, sk);
    }
    TRI_MMA_SYNC_BLOCK();
    float *stage = (float *)(smem + L::s) + warp * WROWS * HS;
    int64_t row0 = i0 + warp * WROWS;
    store_rows<P, HS>(dqkv + tri_flash_q_at(d, b, row0, h), W, stage, dq, scale, row0, T);
}

#endif
