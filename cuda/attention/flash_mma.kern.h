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
 * them. Tiles of q, k, v and dout are staged in shared memory with 16-byte asynchronous copies
 * (cp.async, sm_80+; every shared row padded by 16 bytes, so that no access of the main loops is
 * more than 2-way bank-conflicted: flash_strides below, checked by tests/test_access_patterns.cpp);
 * the tiles a loop streams (the forward's and dq's key/value tiles, dk/dv's query/dout tiles) are
 * double-buffered where the second buffers fit the A100's 163 KiB (tile_pipeline: tile t + 1 loads
 * while tile t is computed; the arithmetic is the same either way); products go through fragments,
 * and the element-wise steps (scale, online softmax, exp(s - lse), dS) run on the fp32 results
 * stored back to shared memory, with engine/core/math.h's functions:
 *   forward   S_w = Q_w K^T (16 x 64) -> per row tri_flash_row_update's arithmetic in its order
 *             (online_softmax: two lanes a row, bit for bit the function's values) -> P_w ->
 *             O_w = alpha O_w + P_w V (O_w fp32 in shared memory), then O / l and the logsumexp;
 *   dk, dv    a block per key tile of a key/value head, its group's query heads in order
 *             (grouped-query attention; one head when NH_kv = NH), for each the query tiles at
 *             or past the key tile in ascending order:
 *             S^T = K_w Q^T, dP^T = V_w dout^T, P = exp(S - lse), dS = P (dP - delta),
 *             dV_w += P^T dout, dK_w += dS^T Q (fragments kept in registers);
 *   dq        a block per query tile, key tiles 0..diagonal ascending: dQ_w += dS K.
 * The problem is cuda/attention/flash_cut.h's: the queries and the keys/values in their own
 * buffers (row widths W, Wk; today's problem: one qkv) at global positions (one chunk or a cp
 * rank's two a side, context parallelism), causal by global position; "the diagonal" above is
 * then, per tile, the last key tile (or first query tile) the mask lets through, and the tiles
 * past it are skipped (flash_key_tiles_of, flash_query_tiles_of). A query tile that sees no key
 * writes out 0 and lse -inf; the backward passes may accumulate into their gradient, dk and dv may
 * be stored fp32 beside bf16 operands. Each body has two instantiations (template argument CUT,
 * "the problem's two forms" below): the cut one for that problem, and today's problem alone with the
 * arithmetic of before the cut, which the everyday kernels run; both give the previous bodies' bits
 * on today's problem.
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

#include "cuda/attention/flash_cut.h"
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
 * out, dout and dqkv; the fragment types; p_in_scores: P and dS overwrite the fp32 scores they come
 * from (same type) instead of having buffers of their own; round: how P and dS enter their
 * products; store16: 16 bytes of them (8 bf16 or 4 floats) rounded so, one 16-byte store; to_global:
 * how a result is stored. */
struct tri_flash_bf16_mma {
    typedef tri_mma_bf16 elem;
    typedef uint16_t global; /* bf16 bits */
    typedef tri_frag_acc acc;
    typedef tri_frag_a a;
    typedef tri_frag_b_row b_row;
    typedef tri_frag_b_col b_col;
    static constexpr bool p_in_scores = false;
    TRI_MMA_STATIC elem round(float x) { return tri_mma_to_bf16(x); }
    TRI_MMA_STATIC void store16(elem *p, const float *v) { tri_mma_store8_bf16(p, v); }
    TRI_MMA_STATIC global to_global(float x) { return tri_float_to_bf16(x); }
};
struct tri_flash_fp32_simt {
    typedef float elem;
    typedef float global;
    typedef tri_sfrag_acc acc;
    typedef tri_sfrag_a a;
    typedef tri_sfrag_b_row b_row;
    typedef tri_sfrag_b_col b_col;
    static constexpr bool p_in_scores = true;
    TRI_MMA_STATIC elem round(float x) { return x; }
    TRI_MMA_STATIC void store16(elem *p, const float *v) { tri_sfrag_store4(p, v); }
    TRI_MMA_STATIC global to_global(float x) { return x; }
};

/* A gradient's storage type: bf16 bits or fp32 (dk, dv may be fp32 beside bf16 operands: the
 * all_gather backward's partials, layers/cp_attention.c). */
template <class GO>
struct flash_out;
template <>
struct flash_out<uint16_t> {
    TRI_MMA_STATIC uint16_t to(float x) { return tri_float_to_bf16(x); }
    TRI_MMA_STATIC float from(uint16_t x) { return tri_bf16_to_float(x); }
};
template <>
struct flash_out<float> {
    TRI_MMA_STATIC float to(float x) { return x; }
    TRI_MMA_STATIC float from(float x) { return x; }
};

/* ---- shared-memory layout and index functions ----
 * Row strides of the shared buffers, in elements of each buffer's type: LD for the operand tiles
 * (q, k, v, dout: elem), LS for the fp32 score rows (S, dP), LP for P and dS (elem; the scores
 * themselves when P overwrites them), LO for the fp32 output rows (the forward's accumulator, the
 * backward's output stage, LSTAGE). Every row is its data (a multiple of 32 bytes: HS and TILE are
 * multiples of 16) plus 16 bytes of padding, so a row stride is an odd number of 16-byte units and 8
 * consecutive rows start in the 8 different 16-byte groups of the 32 banks: a fragment's load or
 * store (8 rows of one 16-byte column a phase), the softmax's row reads (8 rows a quarter-warp) and
 * the stage's stores are conflict-free or 2-way (tests/test_access_patterns.cpp). */
template <class P, int HS>
struct flash_strides {
    static constexpr int E = (int)sizeof(typename P::elem), PAD = 16 / E;
    static constexpr int LD = HS + PAD, LS = TILE + 4, LP = P::p_in_scores ? LS : TILE + PAD, LO = HS + 4,
                         LSTAGE = LO;
};

/* Every shared-memory index of the kernels' main loops comes from the functions below (with the
 * strides above), which tests/test_access_patterns.cpp enumerates for the 32 lanes of a warp to
 * check bank conflicts and global sectors. flash_rc: a row and a column (elements) of a tile. */
struct flash_rc {
    int r, c;
};

TRI_HD int flash_at(flash_rc e, int ld)
{
    return e.r * ld + e.c;
}

/* The top-left element of 16 x 16 block (bi, bj) of a tile with row stride ld. */
TRI_HD int flash_frag_at(int bi, int bj, int ld)
{
    return 16 * bi * ld + 16 * bj;
}

/* issue_tile: the first element of the 16-byte piece thread tid copies at step `step` of a
 * (TILE, HS) tile of elements of e bytes (an even number of pieces a row: HS * e a multiple of 32).
 * Each warp's copy takes 16 consecutive rows and two neighbouring pieces of each (32 bytes, one
 * whole global sector a row: lane l row l % 16, piece l / 16 of the pair); the warps' copies go
 * over the pairs of pieces, then the blocks of 16 rows. A quarter-warp's 8 lanes thus store one
 * 16-byte column of 8 consecutive rows, which the odd row stride (in 16-byte units) puts in 8
 * different bank groups: conflict-free at every head size (row-major order put a quarter-warp
 * across a row's end and its padding, 2-way where a row is not a multiple of 128 bytes). */
TRI_HD flash_rc flash_stage_rc(int tid, int step, int HS, int e)
{
    int per = 16 / e, pairs = HS / per / 2, idx = tid + step * THREADS, copy = idx / 32, lane = idx % 32;
    flash_rc rc = {16 * (copy / pairs) + lane % 16, (2 * (copy % pairs) + lane / 16) * per};
    return rc;
}

/* Steps of issue_tile: TILE * HS * e / 16 pieces, THREADS a step. */
TRI_HD int flash_stage_steps(int HS, int e)
{
    return TILE * HS * e / 16 / THREADS;
}

/* Element lane + 32 step of a warp's rows of `width` elements, in row-major order (the element-wise
 * loops: rescaling the output, the output's store, P and dS in the backward). */
TRI_HD flash_rc flash_rows_rc(int lane, int step, int width)
{
    int idx = lane + 32 * step;
    flash_rc rc = {idx / width, idx % width};
    return rc;
}

/* The online softmax on all 32 lanes, two a row: lane l takes row l % WROWS of the warp's rows, the
 * columns of half l / WROWS of it (TILE / 2 each); the first element of its u-th piece of `per`
 * elements (16 bytes: per = 4 floats or 8 bf16). A quarter-warp reads 8 rows of one half. */
TRI_HD flash_rc flash_softmax_rc(int lane, int u, int per)
{
    flash_rc rc = {lane % WROWS, lane / WROWS * (TILE / 2) + u * per};
    return rc;
}

/* Issues the copy of rows r < valid of a (TILE, HS) tile from src (row stride ld elements) into dst
 * (row stride LD), zeros after: 16-byte asynchronous copies of the raw bits (cp.async, mma_shim.h),
 * in the thread's open group; the data is there after the wait covering the group and a block
 * barrier. Rows past valid read nothing (the tile's first row stands in as the source address). */
template <class P, int HS>
TRI_MMA_DEV void issue_tile(typename P::elem *dst, const typename P::global *src, int64_t ld, int64_t valid)
{
    constexpr int E = (int)sizeof(typename P::elem), LD = flash_strides<P, HS>::LD;
    static_assert(TILE * HS * E % (16 * THREADS) == 0, "whole steps of 16-byte pieces");
    static_assert(HS * E % 32 == 0 && TILE % 16 == 0, "pairs of pieces a row, blocks of 16 rows");
    TRI_MMA_ROLLED
    for (int step = 0; step < flash_stage_steps(HS, E); step++) {
        flash_rc e = flash_stage_rc(TRI_MMA_TID, step, HS, E);
        bool ok = e.r < valid;
        tri_mma_cp_async16(dst + flash_at(e, LD), src + (ok ? e.r * ld : 0) + e.c, ok);
    }
}

/* The tile pipeline of a loop over n tiles (t = 0 .. n - 1) whose tile 0 was issued and committed
 * before the loop: called at the top of iteration t, after a block barrier that frees the buffer
 * the next copies go to, and followed by a block barrier before tile t is read. Double-buffered,
 * it issues tile t + 1 (issue(t + 1), into the other buffer) and waits for tile t only, so tile t + 1
 * loads while tile t is computed; single-buffered (when the second buffers do not fit), it issues
 * tile t (t > 0) and waits for it. */
template <bool DOUBLE, class F>
TRI_MMA_DEV void tile_pipeline(int64_t t, int64_t n, F issue)
{
    if (DOUBLE) {
        if (t + 1 < n) {
            issue(t + 1);
            tri_mma_cp_async_commit();
            tri_mma_cp_async_wait<1>();
        } else {
            tri_mma_cp_async_wait<0>();
        }
    } else {
        if (t > 0) {
            issue(t);
            tri_mma_cp_async_commit();
        }
        tri_mma_cp_async_wait<0>();
    }
}

/* Buffer I (0 or 1) of the streaming tiles, as a type: on_buffer calls a tile's computation with
 * flash_buffer<0> or flash_buffer<1>, so each of the two calls finds its buffers at compile-time
 * offsets from the shared-memory base, as with one buffer. (With the pointer chosen at run time,
 * sk[t % 2], nvcc kept addresses in registers across the unrolled fragment loads: up to 77 more
 * registers a thread under ptxas for sm_90, and spills in dk/dv at HS 96 and 128.) */
template <int I>
struct flash_buffer {
    static constexpr int index = I;
};

/* compute(flash_buffer<t % 2>()) double-buffered, compute(flash_buffer<0>()) single-buffered */
template <bool DOUBLE, class F>
TRI_MMA_DEV void on_buffer(int64_t t, F compute)
{
    if (DOUBLE && t % 2)
        compute(flash_buffer<1>());
    else
        compute(flash_buffer<0>());
}

/* The most dynamic shared memory a block may have on the smallest target, the A100 (sm_80: 163 KiB;
 * sm_90, H100 and H200: 227 KiB). A layout takes its second streaming buffers only when they fit. */
#define TRI_FLASH_SMEM_MAX (163 * 1024)

/* c (WROWS x TILE, fp32, row stride LS) = a_rows (WROWS x HS) . b_rows (TILE x HS)^T, both
 * row-major with row stride LD */
template <class P, int HS>
TRI_MMA_DEV void rows_times_rows_t(float *c, const typename P::elem *a_rows, const typename P::elem *b_rows)
{
    typedef flash_strides<P, HS> S;
    TRI_MMA_UNROLL
    for (int n = 0; n < TILE / 16; n++) {
        typename P::acc acc;
        tri_mma_fill(acc, 0.0f);
    TRI_MMA_UNROLL
        for (int k = 0; k < HS / 16; k++) {
            typename P::a a;
            typename P::b_col b;
            tri_mma_load(a, a_rows + flash_frag_at(0, k, S::LD), S::LD);
            tri_mma_load(b, b_rows + flash_frag_at(n, k, S::LD), S::LD);
            tri_mma(acc, a, b);
        }
        tri_mma_store(c + flash_frag_at(0, n, S::LS), acc, S::LS);
    }
}

/* acc[n] += p (WROWS x TILE, row stride LP) . m (TILE x HS, row stride LD), column block n */
template <class P, int HS>
TRI_MMA_DEV void accumulate_p_times(typename P::acc (&acc)[HS / 16], const typename P::elem *p,
                                    const typename P::elem *m)
{
    typedef flash_strides<P, HS> S;
    TRI_MMA_UNROLL
    for (int k = 0; k < TILE / 16; k++) {
        typename P::a a;
        tri_mma_load(a, p + flash_frag_at(0, k, S::LP), S::LP);
    TRI_MMA_UNROLL
        for (int n = 0; n < HS / 16; n++) {
            typename P::b_row b;
            tri_mma_load(b, m + flash_frag_at(k, n, S::LD), S::LD);
            tri_mma(acc[n], a, b);
        }
    }
}

/* Writes a warp's WROWS x HS fp32 accumulator rows (staged row-major in stage, row stride LSTAGE)
 * times `mul` to dst (row stride ld) for rows whose index row0 + r < T; add: dst's value plus
 * them (one rounding to the output type), as the ops' accumulate flag. */
template <class P, int HS, class GO>
TRI_MMA_DEV void store_rows(GO *dst, int64_t ld, float *stage, typename P::acc (&acc)[HS / 16], float mul, int64_t row0,
                            int64_t T, bool add)
{
    constexpr int LST = flash_strides<P, HS>::LSTAGE;
    int lane = TRI_MMA_TID % 32;
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++)
        tri_mma_store(stage + flash_frag_at(0, n, LST), acc[n], LST);
    TRI_MMA_SYNC_WARP();
    TRI_MMA_ROLLED
    for (int step = 0; step < WROWS * HS / 32; step++) {
        flash_rc e = flash_rows_rc(lane, step, HS);
        if (row0 + e.r < T) {
            float x = stage[flash_at(e, LST)] * mul;
            dst[e.r * ld + e.c] = flash_out<GO>::to(add ? flash_out<GO>::from(dst[e.r * ld + e.c]) + x : x);
        }
    }
    TRI_MMA_SYNC_WARP();
}

/* Keys of tile j0 (nc rows) that query t sees (global positions). */
TRI_MMA_DEV int64_t visible_keys(int64_t t, int64_t j0, int64_t nc)
{
    return t < j0 ? 0 : (t - j0 + 1 < nc ? t - j0 + 1 : nc);
}

/* ---- the problem's two forms ----
 * Each body is instantiated twice, by its template argument CUT: true for cuda/attention/flash_cut.h's
 * problem as it comes (queries and keys in their own buffers at global positions, two chunks a side,
 * fully masked tiles skipped, the gradient overwritten or added to: context parallelism's kv ops),
 * false for today's problem only (tri_flash_mma_whole: one qkv, one chunk at 0 on both sides,
 * overwritten), where the helpers below reduce to the plain arithmetic of before the cut (a local
 * row is its own position, key tiles 0 .. the diagonal, query tiles from the diagonal on) and the
 * bodies' cut-only steps drop out at compile time, so the kernels of every training run
 * (tri_flash_mma_forward / _backward) keep their registers (docs/context_parallel.md). On today's
 * problem both give the same bits (tests/test_flash_mma_cpu.cpp). */

/* Global positions of query row i and key row j. */
template <bool CUT>
TRI_MMA_DEV int64_t flash_qpos(const tri_flash_mma_cut &c, int64_t i)
{
    return CUT ? tri_flash_pos(c.qr, i) : i;
}

template <bool CUT>
TRI_MMA_DEV int64_t flash_kpos(const tri_flash_mma_cut &c, int64_t j)
{
    return CUT ? tri_flash_pos(c.kr, j) : j;
}

/* The element of key row j of batch b, key head g (value head g with value) in the keys' buffer (today's
 * problem: qkv, as tri_flash_k_at / _v_at address it; written so, nvcc kept fewer registers). */
template <bool CUT>
TRI_MMA_DEV int64_t flash_kv_at(const tri_flash_mma_cut &c, int64_t b, int64_t j, int64_t g, bool value)
{
    if (!CUT)
        return value ? tri_flash_v_at(c.d, b, j, g) : tri_flash_k_at(c.d, b, j, g);
    return (b * c.Tk + j) * c.Wk + tri_flash_mma_k_col(c, g) + (value ? c.d.NH_kv * c.d.HS : 0);
}

/* ---- the tiles a tile meets ----
 * Chunk c (0 or 1) of a side of n rows: its first local row, its rows and its global position. */
struct flash_chunk {
    int64_t row, n, pos;
};

TRI_MMA_DEV flash_chunk flash_chunk_of(tri_flash_rows r, int64_t n, int c)
{
    int64_t n0 = r.Tc < n ? r.Tc : n;
    flash_chunk k = {c ? n0 : 0, c ? n - n0 : n0, c ? r.pos1 : r.pos0};
    return k;
}

/* Tiles of key chunk k that a query at global position `last` or before reaches: its first ones
 * (the rest are fully masked and skipped). */
TRI_MMA_DEV int64_t flash_tiles_upto(flash_chunk k, int64_t last)
{
    int64_t nt = (k.n + TILE - 1) / TILE, v = last < k.pos ? 0 : (last - k.pos) / TILE + 1;
    return v < nt ? v : nt;
}

/* The first tile of query chunk k whose last row is at or past global position `first` (the tiles
 * before it see no key from `first` on); its tile count when none is. */
TRI_MMA_DEV int64_t flash_tiles_before(flash_chunk k, int64_t first)
{
    int64_t nt = (k.n + TILE - 1) / TILE;
    if (first >= k.pos + k.n)
        return nt;
    return first <= k.pos ? 0 : (first - k.pos) / TILE;
}

/* The key tiles a query tile whose last row is at global position `last` meets, in the ops' order
 * (key chunk 0's, then chunk 1's, each ascending): n of them, n0 in chunk 0; tile u starts at local
 * key row flash_key_row(tiles, u). Today's problem: tiles 0 .. the diagonal. */
struct flash_key_tiles {
    int64_t n0, n, row1;
};

template <bool CUT>
TRI_MMA_DEV int64_t flash_key_row(flash_key_tiles k, int64_t u)
{
    return !CUT || u < k.n0 ? u * TILE : k.row1 + (u - k.n0) * TILE;
}

template <bool CUT>
TRI_MMA_DEV flash_key_tiles flash_key_tiles_of(const tri_flash_mma_cut &c, int64_t last)
{
    if (!CUT) {
        flash_key_tiles w = {last / TILE + 1, last / TILE + 1, 0};
        return w;
    }
    flash_chunk k0 = flash_chunk_of(c.kr, c.Tk, 0), k1 = flash_chunk_of(c.kr, c.Tk, 1);
    int64_t n0 = flash_tiles_upto(k0, last);
    flash_key_tiles t = {n0, n0 + flash_tiles_upto(k1, last), k1.row};
    return t;
}

/* The query tiles of one head a key tile whose first row is at global position `first` meets, in
 * the ops' order (query chunk 0's, then chunk 1's, each ascending): m0 + m1 of them, the ones of
 * chunk c from its tile f_c on; tile v starts at local query row flash_query_row(tiles, v). Today's problem: the
 * diagonal tile and those after it. */
struct flash_query_tiles {
    int64_t f0, m0, f1, m1, row1;
};

template <bool CUT>
TRI_MMA_DEV int64_t flash_query_row(flash_query_tiles q, int64_t v)
{
    return !CUT || v < q.m0 ? (q.f0 + v) * TILE : q.row1 + (q.f1 + v - q.m0) * TILE;
}

template <bool CUT>
TRI_MMA_DEV flash_query_tiles flash_query_tiles_of(const tri_flash_mma_cut &c, int64_t first)
{
    if (!CUT) {
        flash_query_tiles w = {first / TILE, (c.d.T + TILE - 1) / TILE - first / TILE, 0, 0, 0};
        return w;
    }
    flash_chunk q0 = flash_chunk_of(c.qr, c.d.T, 0), q1 = flash_chunk_of(c.qr, c.d.T, 1);
    int64_t f0 = flash_tiles_before(q0, first), f1 = flash_tiles_before(q1, first);
    flash_query_tiles t = {f0, (q0.n + TILE - 1) / TILE - f0, f1, (q1.n + TILE - 1) / TILE - f1, q1.row};
    return t;
}

/* Shared memory of the forward kernel (byte offsets): three (TILE, HS) operand tiles, the warps'
 * fp32 scores and their P (unless P overwrites the scores), the fp32 output accumulator and the
 * rows' m, l, alpha; then, when they fit under TRI_FLASH_SMEM_MAX, the second k and v buffers the
 * next key tile loads into (k1, v1; equal to k, v when single-buffered). */
template <class P, int HS>
struct fwd_layout {
    typedef flash_strides<P, HS> S;
    static constexpr size_t E = sizeof(typename P::elem), R = WARPS * WROWS;
    static constexpr size_t q = 0, k = q + TILE * S::LD * E, v = k + TILE * S::LD * E, s = v + TILE * S::LD * E,
                            s_end = s + R * S::LS * 4, p = P::p_in_scores ? s : s_end,
                            o = P::p_in_scores ? s_end : p + R * S::LP * E, m = o + TILE * S::LO * 4,
                            l = m + TILE * 4, alpha = l + TILE * 4, single = alpha + TILE * 4,
                            tile = TILE * S::LD * E;
    static constexpr bool double_buffered = single + 2 * tile <= TRI_FLASH_SMEM_MAX;
    static constexpr size_t k1 = double_buffered ? single : k, v1 = double_buffered ? single + tile : v,
                            bytes = double_buffered ? single + 2 * tile : single;
};

/* The online softmax of the warp's WROWS score rows sw (fp32, row stride LS) of query tile i0 (local
 * rows; rows at or past T are padding) at global position qp0 against the key tile at global
 * position j0 (nc keys), on all 32 lanes: lane l takes row l % WROWS, the columns of half l / WROWS
 * (flash_softmax_rc), read in 16-byte pieces into registers. It computes tri_flash_row_update's
 * values in that function's order, bit for bit: each visible score scaled; the row max, each half's
 * by the same comparison from m (low half) or -inf (high half), then the high half's if greater
 * (the serial loop's first maximum, so the same bits); the exponentials; their sum left to right,
 * the low half's lane adding its own, handing the partial sum to the high half's lane (a shuffle),
 * which adds its own after it. The high half's lane writes the row's m, l and alpha (to sm, sl,
 * sa); every lane writes its P (rounded, zero past the visible keys) to pw (row stride LP) in
 * 16-byte pieces: in place when P overwrites the scores (a lane writes only what it read). */
template <class P, int HS>
TRI_MMA_DEV void online_softmax(typename P::elem *pw, float *sw, float *sm, float *sl, float *sa, int64_t i0,
                                int64_t qp0, int64_t j0, int64_t nc, int64_t T, float scale)
{
    typedef flash_strides<P, HS> S;
    constexpr int HALF = TILE / 2, PER = 16 / (int)sizeof(typename P::elem);
    int warp = TRI_MMA_TID / 32, lane = TRI_MMA_TID % 32, high = lane / WROWS;
    flash_rc first = flash_softmax_rc(lane, 0, 4);
    int r = warp * WROWS + first.r;
    int64_t t = i0 + r, n = t < T ? visible_keys(qp0 + r, j0, nc) : 0, own = n - first.c; /* visible in this half */
    float e[HALF];
    TRI_MMA_UNROLL
    for (int u = 0; u < HALF / 4; u++) {
        tri_sfrag_f4 v = tri_sfrag_load4(sw + flash_at(flash_softmax_rc(lane, u, 4), S::LS));
        for (int i = 0; i < 4; i++)
            e[4 * u + i] = v.v[i];
    }
    float m = sm[r], l = sl[r], mx = high ? -INFINITY : m;
    TRI_MMA_UNROLL
    for (int j = 0; j < HALF; j++)
        if (j < own) {
            e[j] *= scale;
            mx = e[j] > mx ? e[j] : mx;
        }
    float other = __shfl_xor_sync(0xffffffffu, mx, WROWS);
    float low_max = high ? other : mx, high_max = high ? mx : other;
    mx = high_max > low_max ? high_max : low_max;
    float alpha = n == 0 ? 1.0f : m == -INFINITY ? 0.0f : tri_expf(m - mx), sum = 0.0f;
    TRI_MMA_UNROLL
    for (int j = 0; j < HALF; j++)
        e[j] = j < own ? tri_expf(e[j] - mx) : 0.0f;
    if (!high)
        for (int j = 0; j < HALF; j++)
            if (j < own)
                sum += e[j];
    float low_sum = __shfl_xor_sync(0xffffffffu, sum, WROWS);
    if (high) {
        sum = low_sum;
        for (int j = 0; j < HALF; j++)
            if (j < own)
                sum += e[j];
    }
    TRI_MMA_SYNC_WARP(); /* both lanes of a row have read its m and l */
    if (high) {
        if (n > 0) {
            sm[r] = mx;
            sl[r] = l * alpha + sum;
        }
        sa[r] = alpha;
    }
    TRI_MMA_UNROLL
    for (int u = 0; u < HALF / PER; u++)
        P::store16(pw + flash_at(flash_softmax_rc(lane, u, PER), S::LP), e + PER * u);
}

template <class P, int HS, bool CUT>
TRI_MMA_DEV void flash_forward_mma_body(unsigned char *smem, typename P::global *out, float *lse,
                                        const typename P::global *q, const typename P::global *kv,
                                        tri_flash_mma_cut c, int64_t n_tiles)
{
    typedef fwd_layout<P, HS> L;
    typedef flash_strides<P, HS> S;
    typedef typename P::elem E;
    E *sq = (E *)(smem + L::q);
    float *sm = (float *)(smem + L::m), *sl = (float *)(smem + L::l), *sa = (float *)(smem + L::alpha);
    int warp = TRI_MMA_TID / 32, lane = TRI_MMA_TID % 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * S::LS, *ow = (float *)(smem + L::o) + warp * WROWS * S::LO;
    E *pw = (E *)(smem + L::p) + warp * WROWS * S::LP;
    tri_flash_dims d = c.d;
    int64_t T = d.T, Tk = CUT ? c.Tk : T, C = d.NH * HS, W = CUT ? c.W : tri_flash_width(d), Wk = CUT ? c.Wk : W;
    int64_t i0 = (n_tiles - 1 - TRI_MMA_BX) * TILE, bh = TRI_MMA_BY, b = bh / d.NH, h = bh % d.NH;
    int64_t g = tri_flash_kv_head(d, h), nr = T - i0 < TILE ? T - i0 : TILE, qp0 = flash_qpos<CUT>(c, i0);
    const typename P::global *qb = q + b * T * W + h * HS, *kvs = CUT ? kv : q; /* today's problem: kv is q */
    const typename P::global *kb = kvs + flash_kv_at<CUT>(c, b, 0, g, false),
                             *vb = kvs + flash_kv_at<CUT>(c, b, 0, g, true);
    float scale = 1.0f / sqrtf((float)HS);
    flash_key_tiles kt = flash_key_tiles_of<CUT>(c, qp0 + nr - 1); /* today's problem: 0 .. the diagonal */
    int64_t n_kv = kt.n;
    auto issue = [&](int64_t t) { /* key tile t's k and v into buffer t % 2 */
        int64_t j0 = flash_key_row<CUT>(kt, t), nc = Tk - j0 < TILE ? Tk - j0 : TILE;
        issue_tile<P, HS>((E *)(smem + (t % 2 ? L::k1 : L::k)), kb + j0 * Wk, Wk, nc);
        issue_tile<P, HS>((E *)(smem + (t % 2 ? L::v1 : L::v)), vb + j0 * Wk, Wk, nc);
    };

    if (!CUT || n_kv > 0) { /* else the rows see no key: out 0, lse -inf */
        issue_tile<P, HS>(sq, qb + i0 * W, W, nr);
        issue(0);
        tri_mma_cp_async_commit();
    }
    TRI_MMA_ROLLED
    for (int step = 0; step < WROWS * HS / 32; step++)
        ow[flash_at(flash_rows_rc(lane, step, HS), S::LO)] = 0.0f;
    if (TRI_MMA_TID < TILE) {
        sm[TRI_MMA_TID] = -INFINITY;
        sl[TRI_MMA_TID] = 0.0f;
    }
    for (int64_t t = 0; t < n_kv; t++) {
        int64_t j0 = flash_key_row<CUT>(kt, t), nc = Tk - j0 < TILE ? Tk - j0 : TILE, kp0 = flash_kpos<CUT>(c, j0);
        TRI_MMA_SYNC_BLOCK(); /* the buffer the next copies go to is no longer read */
        tile_pipeline<L::double_buffered>(t, n_kv, issue);
        TRI_MMA_SYNC_BLOCK(); /* tile t's k and v (and at t = 0 q) have landed, from every lane */
        on_buffer<L::double_buffered>(t, [&](auto buf) {
            constexpr bool second = decltype(buf)::index == 1;
            const E *ck = (const E *)(smem + (second ? L::k1 : L::k));
            const E *cv = (const E *)(smem + (second ? L::v1 : L::v));
            rows_times_rows_t<P, HS>(sw, sq + warp * WROWS * S::LD, ck);
            TRI_MMA_SYNC_WARP();
            online_softmax<P, HS>(pw, sw, sm, sl, sa, i0, qp0, kp0, nc, T, scale);
            TRI_MMA_SYNC_WARP();
            TRI_MMA_ROLLED
            for (int step = 0; step < WROWS * HS / 32; step++) {
                flash_rc e = flash_rows_rc(lane, step, HS);
                ow[flash_at(e, S::LO)] *= sa[warp * WROWS + e.r];
            }
            TRI_MMA_SYNC_WARP();
            typename P::acc acc[HS / 16];
        TRI_MMA_UNROLL
            for (int n = 0; n < HS / 16; n++)
                tri_mma_load(acc[n], ow + flash_frag_at(0, n, S::LO), S::LO);
            accumulate_p_times<P, HS>(acc, pw, cv);
        TRI_MMA_UNROLL
            for (int n = 0; n < HS / 16; n++)
                tri_mma_store(ow + flash_frag_at(0, n, S::LO), acc[n], S::LO);
            TRI_MMA_SYNC_WARP();
        });
    }
    if (CUT && n_kv == 0)
        TRI_MMA_SYNC_BLOCK(); /* the rows' l, set by other warps' lanes, is seen (else the loop's barriers) */
    int64_t row0 = i0 + warp * WROWS;
    TRI_MMA_ROLLED
    for (int step = 0; step < WROWS * HS / 32; step++) {
        flash_rc e = flash_rows_rc(lane, step, HS);
        if (row0 + e.r < T) {
            float l = sl[warp * WROWS + e.r];
            out[(b * T + row0 + e.r) * C + h * HS + e.c] =
                P::to_global(CUT && l == 0.0f ? 0.0f : ow[flash_at(e, S::LO)] / l);
        }
    }
    if (lane < WROWS && row0 + lane < T)
        lse[bh * T + row0 + lane] = tri_flash_lse(sm[warp * WROWS + lane], sl[warp * WROWS + lane]);
}

/* Shared memory of the two backward kernels (byte offsets): four (TILE, HS) operand tiles, two fp32
 * (WARPS*WROWS, TILE) score-shaped buffers (which double as the output stage: WARPS*WROWS rows of
 * LSTAGE floats fit for HS <= 2*TILE) and, unless P and dS overwrite them, two for P and dS; the
 * tile's lse and delta; then, when they fit under TRI_FLASH_SMEM_MAX, second buffers for the two
 * streaming tiles t2, t3 (the query tiles of dk/dv, the key tiles of dq: t2b, t3b; equal to t2, t3
 * when single-buffered). */
template <class P, int HS>
struct bwd_layout {
    typedef flash_strides<P, HS> S;
    static constexpr size_t E = sizeof(typename P::elem), R = WARPS * WROWS;
    static constexpr size_t t0 = 0, t1 = t0 + TILE * S::LD * E, t2 = t1 + TILE * S::LD * E,
                            t3 = t2 + TILE * S::LD * E, s = t3 + TILE * S::LD * E, dp = s + R * S::LS * 4,
                            dp_end = dp + R * S::LS * 4, p = P::p_in_scores ? s : dp_end,
                            ds = P::p_in_scores ? dp : p + R * S::LP * E,
                            lse = P::p_in_scores ? dp_end : ds + R * S::LP * E, delta = lse + TILE * 4,
                            single = delta + TILE * 4, tile = TILE * S::LD * E;
    static constexpr bool double_buffered = single + 2 * tile <= TRI_FLASH_SMEM_MAX;
    static constexpr size_t t2b = double_buffered ? single : t2, t3b = double_buffered ? single + tile : t3,
                            bytes = double_buffered ? single + 2 * tile : single;
    static_assert(R * S::LSTAGE * 4 <= 2 * R * S::LS * 4, "output stage fits the score buffers");
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

/* P and dS of a warp's WROWS x TILE block (row stride LP) from its scores s and dp (fp32, row stride
 * LS, scaled here), for query t and key j of element (a, c): transposed (a key, c query) in the
 * dk/dv kernel. a0, c0: the block's first row and column as local rows of their buffers (query rows
 * at or past T and key rows at or past Tk are padding), ap0, cp0 as global positions (the causal
 * mask). Each lane writes only the elements it read, so p_out and ds_out may be s and dp. */
template <class P, int HS, bool CUT>
TRI_MMA_DEV void probabilities(typename P::elem *p_out, typename P::elem *ds_out, const float *s, const float *dp,
                               const float *slse, const float *sdelta, int64_t a0, int64_t ap0, int64_t c0,
                               int64_t cp0, bool keys_are_rows, int64_t T, int64_t Tk, float scale)
{
    typedef flash_strides<P, HS> S;
    int lane = TRI_MMA_TID % 32;
    TRI_MMA_ROLLED
    for (int step = 0; step < WROWS * TILE / 32; step++) {
        flash_rc e = flash_rows_rc(lane, step, TILE);
        int a = e.r, c = e.c, es = flash_at(e, S::LS), ep = flash_at(e, S::LP);
        int qi = keys_are_rows ? c : (int)(a0 % TILE) + a;      /* row of the query tile's stats */
        int64_t t = keys_are_rows ? c0 + c : a0 + a, j = keys_are_rows ? a0 + a : c0 + c;
        int64_t tp = keys_are_rows ? cp0 + c : ap0 + a, jp = keys_are_rows ? ap0 + a : cp0 + c;
        float p = 0.0f, ds = 0.0f;
        if (CUT ? t < T && j < Tk && jp <= tp : t < T && j <= t) {
            p = tri_expf(s[es] * scale - slse[qi]);
            ds = p * (dp[es] - sdelta[qi]);
        }
        if (p_out)
            p_out[ep] = P::round(p);
        ds_out[ep] = P::round(ds);
    }
}

template <class P, int HS, bool CUT, class GO = typename P::global>
TRI_MMA_DEV void flash_backward_dkv_mma_body(unsigned char *smem, GO *dkv, const float *delta,
                                             const typename P::global *dout, const typename P::global *q,
                                             const typename P::global *kv, const float *lse, tri_flash_mma_cut c,
                                             int64_t n_tiles)
{
    typedef bwd_layout<P, HS> L;
    typedef flash_strides<P, HS> S;
    typedef typename P::elem E;
    E *sk = (E *)(smem + L::t0), *sv = (E *)(smem + L::t1);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = TRI_MMA_TID / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * S::LS, *dpw = (float *)(smem + L::dp) + warp * WROWS * S::LS;
    E *pw = (E *)(smem + L::p) + warp * WROWS * S::LP, *dsw = (E *)(smem + L::ds) + warp * WROWS * S::LP;
    (void)n_tiles; /* a block per key tile: the grid says how many */
    tri_flash_dims d = c.d;
    int64_t T = d.T, Tk = CUT ? c.Tk : T, C = d.NH * HS, W = CUT ? c.W : tri_flash_width(d), Wk = CUT ? c.Wk : W;
    int64_t rep = d.NH / d.NH_kv, j0 = TRI_MMA_BX * TILE, bg = TRI_MMA_BY, b = bg / d.NH_kv, g = bg % d.NH_kv;
    int64_t nc = Tk - j0 < TILE ? Tk - j0 : TILE, kp0 = flash_kpos<CUT>(c, j0);
    float scale = 1.0f / sqrtf((float)HS);
    const typename P::global *kvs = CUT ? kv : q; /* today's problem: kv is q */
    /* the group's query heads in order, each with its query tiles that reach the key tile (today's
     * problem: from the diagonal on): tile t of n_q, head h and tile v of qt; (nh, nv) the next one's */
    flash_query_tiles qt = flash_query_tiles_of<CUT>(c, kp0);
    int64_t per = qt.m0 + qt.m1, n_q = rep * per, t = 0, h = g * rep, v = 0, nh = h, nv = v;
    auto issue = [&](int64_t u) { /* query tile u (t or t + 1)'s q and dout into buffer u % 2 */
        int64_t hu = u == t ? h : nh, iu = flash_query_row<CUT>(qt, u == t ? v : nv);
        int64_t nr = T - iu < TILE ? T - iu : TILE;
        issue_tile<P, HS>((E *)(smem + (u % 2 ? L::t2b : L::t2)), q + (b * T + iu) * W + hu * HS, W, nr);
        issue_tile<P, HS>((E *)(smem + (u % 2 ? L::t3b : L::t3)), dout + (b * T + iu) * C + hu * HS, C, nr);
    };

    if (!CUT || n_q > 0) { /* else no query sees these keys: dk, dv 0 (or left, accumulating) */
        issue_tile<P, HS>(sk, kvs + flash_kv_at<CUT>(c, b, j0, g, false), Wk, nc);
        issue_tile<P, HS>(sv, kvs + flash_kv_at<CUT>(c, b, j0, g, true), Wk, nc);
        issue(0);
        tri_mma_cp_async_commit();
    }
    typename P::acc dk[HS / 16], dv[HS / 16];
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++) {
        tri_mma_fill(dk[n], 0.0f);
        tri_mma_fill(dv[n], 0.0f);
    }
    for (h = g * rep; h < (g + 1) * rep; h++)
        for (v = 0; v < per; v++, t++) {
            int64_t i0 = flash_query_row<CUT>(qt, v), nr = T - i0 < TILE ? T - i0 : TILE, qp0 = flash_qpos<CUT>(c, i0);
            nh = v + 1 < per ? h : h + 1;
            nv = v + 1 < per ? v + 1 : 0;
            TRI_MMA_SYNC_BLOCK(); /* the buffer the next copies go to, and the stats, are no longer read */
            tile_pipeline<L::double_buffered>(t, n_q, issue);
            load_stats(slse, sdelta, lse, delta, (b * d.NH + h) * T + i0, nr);
            TRI_MMA_SYNC_BLOCK(); /* query tile t (and at t = 0 k, v) landed, from every lane */
            on_buffer<L::double_buffered>(t, [&](auto buf) {
                constexpr bool second = decltype(buf)::index == 1;
                const E *cq = (const E *)(smem + (second ? L::t2b : L::t2));
                const E *cdo = (const E *)(smem + (second ? L::t3b : L::t3));
                rows_times_rows_t<P, HS>(sw, sk + warp * WROWS * S::LD, cq);   /* S^T: keys x queries */
                rows_times_rows_t<P, HS>(dpw, sv + warp * WROWS * S::LD, cdo); /* dP^T */
                TRI_MMA_SYNC_WARP();
                probabilities<P, HS, CUT>(pw, dsw, sw, dpw, slse, sdelta, j0 + warp * WROWS, kp0 + warp * WROWS, i0,
                                          qp0, true, T, Tk, scale);
                TRI_MMA_SYNC_WARP();
                accumulate_p_times<P, HS>(dv, pw, cdo);
                accumulate_p_times<P, HS>(dk, dsw, cq);
            });
        }
    TRI_MMA_SYNC_BLOCK(); /* the score buffers become the output stage */
    bool add = CUT && c.accumulate != 0;
    if (n_q == 0 && add)
        return;
    float *stage = (float *)(smem + L::s) + warp * WROWS * S::LSTAGE;
    int64_t row0 = j0 + warp * WROWS;
    store_rows<P, HS, GO>(dkv + flash_kv_at<CUT>(c, b, row0, g, false), Wk, stage, dk, scale, row0, Tk, add);
    store_rows<P, HS, GO>(dkv + flash_kv_at<CUT>(c, b, row0, g, true), Wk, stage, dv, 1.0f, row0, Tk, add);
}

template <class P, int HS, bool CUT>
TRI_MMA_DEV void flash_backward_dq_mma_body(unsigned char *smem, typename P::global *dq, const float *delta,
                                            const typename P::global *dout, const typename P::global *q,
                                            const typename P::global *kv, const float *lse, tri_flash_mma_cut c,
                                            int64_t n_tiles)
{
    typedef bwd_layout<P, HS> L;
    typedef flash_strides<P, HS> S;
    typedef typename P::elem E;
    E *sq = (E *)(smem + L::t0), *sdo = (E *)(smem + L::t1);
    float *slse = (float *)(smem + L::lse), *sdelta = (float *)(smem + L::delta);
    int warp = TRI_MMA_TID / 32;
    float *sw = (float *)(smem + L::s) + warp * WROWS * S::LS, *dpw = (float *)(smem + L::dp) + warp * WROWS * S::LS;
    E *dsw = (E *)(smem + L::ds) + warp * WROWS * S::LP;
    tri_flash_dims d = c.d;
    int64_t T = d.T, Tk = CUT ? c.Tk : T, C = d.NH * HS, W = CUT ? c.W : tri_flash_width(d), Wk = CUT ? c.Wk : W;
    int64_t i0 = (n_tiles - 1 - TRI_MMA_BX) * TILE, bh = TRI_MMA_BY, b = bh / d.NH, h = bh % d.NH;
    int64_t g = tri_flash_kv_head(d, h), nr = T - i0 < TILE ? T - i0 : TILE, qp0 = flash_qpos<CUT>(c, i0);
    float scale = 1.0f / sqrtf((float)HS);
    const typename P::global *kvs = CUT ? kv : q; /* today's problem: kv is q */
    flash_key_tiles kt = flash_key_tiles_of<CUT>(c, qp0 + nr - 1); /* today's problem: 0 .. the diagonal */
    int64_t n_kv = kt.n;
    auto issue = [&](int64_t t) { /* key tile t's k and v into buffer t % 2 */
        int64_t j0 = flash_key_row<CUT>(kt, t), nc = Tk - j0 < TILE ? Tk - j0 : TILE;
        issue_tile<P, HS>((E *)(smem + (t % 2 ? L::t2b : L::t2)), kvs + flash_kv_at<CUT>(c, b, j0, g, false), Wk, nc);
        issue_tile<P, HS>((E *)(smem + (t % 2 ? L::t3b : L::t3)), kvs + flash_kv_at<CUT>(c, b, j0, g, true), Wk, nc);
    };

    if (!CUT || n_kv > 0) { /* else the rows see no key: dq 0 (or left, accumulating) */
        issue_tile<P, HS>(sq, q + (b * T + i0) * W + h * HS, W, nr);
        issue_tile<P, HS>(sdo, dout + (b * T + i0) * C + h * HS, C, nr);
        issue(0);
        tri_mma_cp_async_commit();
    }
    load_stats(slse, sdelta, lse, delta, bh * T + i0, nr);
    typename P::acc acc[HS / 16];
    TRI_MMA_UNROLL
    for (int n = 0; n < HS / 16; n++)
        tri_mma_fill(acc[n], 0.0f);
    for (int64_t t = 0; t < n_kv; t++) {
        int64_t j0 = flash_key_row<CUT>(kt, t), kp0 = flash_kpos<CUT>(c, j0);
        TRI_MMA_SYNC_BLOCK(); /* the buffer the next copies go to is no longer read */
        tile_pipeline<L::double_buffered>(t, n_kv, issue);
        TRI_MMA_SYNC_BLOCK(); /* key tile t (and at t = 0 q, dout) landed, from every lane */
        on_buffer<L::double_buffered>(t, [&](auto buf) {
            constexpr bool second = decltype(buf)::index == 1;
            const E *ck = (const E *)(smem + (second ? L::t2b : L::t2));
            const E *cv = (const E *)(smem + (second ? L::t3b : L::t3));
            rows_times_rows_t<P, HS>(sw, sq + warp * WROWS * S::LD, ck);   /* S: queries x keys */
            rows_times_rows_t<P, HS>(dpw, sdo + warp * WROWS * S::LD, cv); /* dP */
            TRI_MMA_SYNC_WARP();
            probabilities<P, HS, CUT>(NULL, dsw, sw, dpw, slse, sdelta, i0 + warp * WROWS, qp0 + warp * WROWS, j0,
                                      kp0, false, T, Tk, scale);
            TRI_MMA_SYNC_WARP();
            accumulate_p_times<P, HS>(acc, dsw, ck);
        });
    }
    TRI_MMA_SYNC_BLOCK();
    bool add = CUT && c.accumulate != 0;
    if (n_kv == 0 && add)
        return;
    float *stage = (float *)(smem + L::s) + warp * WROWS * S::LSTAGE;
    int64_t row0 = i0 + warp * WROWS;
    store_rows<P, HS, typename P::global>(dq + (b * T + row0) * W + h * HS, W, stage, acc, scale, row0, T, add);
}

#endif
