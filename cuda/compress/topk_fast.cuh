/* cuda/compress/topk_fast.cuh - top-k selection on the device (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): engine/device/ops/compress_math.h's radix select, its counting spread
 * over blocks, so the payload is the CPU's bits (the selection is unique: the k largest |e_i|, ties
 * towards the lower index, in index order). Before, the tensor went to the host and back, a host
 * sync inside the step for every top-k bucket; the simple twin (cuda/compress/compress.kern.h) is
 * the same loop on one GPU thread. Each pass reads e once, coalesced; the choices and the offsets
 * stay on the device, in the op's scratch (the workspace, tri_topk_scratch_bytes):
 *   state (4 int64: T's digits so far, the elements still wanted among those matching them);
 *   counts (2 nch int64: each chunk's elements above T, then equal to T; scanned in place);
 *   part (G x 256 uint32: each histogram block's counts).
 * Launches, 12 for any n:
 *   1. four passes of 8 bits (bits 31..24, ..., 7..0 of the magnitude keys), each
 *      compress_topk_hist_kernel (G blocks, a histogram of the matching keys' digits in shared
 *      memory, then the block's 256 counts to part) and compress_topk_digit_kernel (one block: the
 *      digits' totals over the G blocks, then tri_compress_topk_digit, the CPU's choice);
 *   2. compress_topk_count_kernel: a block a chunk of TRI_TOPK_CHUNK elements, its elements above T
 *      and equal to T (a shared tree of the threads' counts);
 *   3. compress_topk_scan_kernel, twice: the exclusive scans of both counts in chunk order;
 *   4. compress_topk_emit_kernel: a block a chunk, staged in shared memory, TRI_TOPK_PER_THREAD
 *      consecutive elements a thread, a block scan of the threads' counts, then each taken element
 *      written at tri_compress_topk_place (the CPU's rule) from the counts before it.
 * Integer counts are exact in any order, so any grid gives the same payload. The histogram's shared
 * atomicAdd is the field's form (CUB's block histogram; PyTorch's radix select counts digits with
 * ballots): on gradients, whose magnitudes share a few exponents, the first pass's counters are
 * contended; later passes count only the keys under T's prefix. Tested bit for bit against the CPU
 * and the twin (tests/test_fast_kernels_cpu.cpp, tests/gpu/test_gpu_ops.c compress_exact). */
#ifndef TRIDENT_CUDA_COMPRESS_TOPK_FAST_CUH
#define TRIDENT_CUDA_COMPRESS_TOPK_FAST_CUH

#include <stdint.h>

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/kernels/shim.h"
#include "engine/device/launch_shapes.h"
#include "engine/device/ops/compress_math.h"

#if TRI_TOPK_THREADS != 256
#error "the top-k kernels give each of the 256 digits a thread"
#endif

#define TRI_TOPK_SCAN_THREADS 1024 /* the block of the chunk counts' scan */

/* Words of the select's state (int64): T's digits found so far, and the elements still wanted. */
#define TRI_TOPK_PREFIX 0
#define TRI_TOPK_WANT 1

/* ---- the shared indices (tests/test_access_patterns.cpp) ---- */

/* The shared slot of a chunk's element p: a padding word every 32, so that the coalesced load (a
 * warp on 32 consecutive p) and the threads' walks of their runs (lane l on p = 16 l + j) each hit
 * 32 distinct banks. */
TRI_HD int tri_topk_slot(int p)
{
    return p + p / 32;
}

/* Element j of thread t's run in its chunk. */
TRI_HD int tri_topk_run_at(int t, int j)
{
    return t * TRI_TOPK_PER_THREAD + j;
}

/* Element of round r of a chunk's coalesced load by thread t. */
TRI_HD int tri_topk_load_at(int t, int r)
{
    return r * TRI_TOPK_THREADS + t;
}

/* part[b * 256 + d] = the keys of e(n) matching T's digits so far (state; all of them in the first
 * pass) whose digit at `shift` is d, among block b's grid-stride share. Block of TRI_TOPK_THREADS;
 * the grid is G, which the digit kernel is told. */
__global__ void __launch_bounds__(TRI_TOPK_THREADS)
    compress_topk_hist_kernel(uint32_t *part, const float *e, int64_t n, const int64_t *state, int shift)
{
    __shared__ uint32_t hist[256];
    const int t = (int)threadIdx.x;
    hist[t] = 0;
    __syncthreads();
    uint32_t prefix = shift == TRI_TOPK_FIRST_SHIFT ? 0u : (uint32_t)state[TRI_TOPK_PREFIX];
    int64_t stride = (int64_t)gridDim.x * TRI_TOPK_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * TRI_TOPK_THREADS + t; i < n; i += stride) {
        uint32_t key = tri_compress_abs_key(e[i]);
        if (tri_compress_topk_matches(key, prefix, shift))
            atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    part[(int64_t)blockIdx.x * 256 + t] = hist[t];
}

/* The pass's choice: the digits' totals over the G blocks of part (thread d: digit d), then thread
 * 0 makes tri_compress_topk_digit's choice into state. The first pass starts from no digits and k
 * wanted. One block of TRI_TOPK_THREADS. */
__global__ void __launch_bounds__(TRI_TOPK_THREADS)
    compress_topk_digit_kernel(int64_t *state, const uint32_t *part, int64_t G, int shift, int64_t k)
{
    __shared__ int64_t hist[256];
    const int t = (int)threadIdx.x;
    int64_t s = 0;
    for (int64_t b = 0; b < G; b++)
        s += part[b * 256 + t];
    hist[t] = s;
    __syncthreads();
    if (t == 0) {
        bool first = shift == TRI_TOPK_FIRST_SHIFT;
        uint32_t prefix = first ? 0u : (uint32_t)state[TRI_TOPK_PREFIX];
        int64_t want = first ? k : state[TRI_TOPK_WANT];
        tri_compress_topk_digit(hist, shift, &prefix, &want);
        state[TRI_TOPK_PREFIX] = (int64_t)prefix;
        state[TRI_TOPK_WANT] = want;
    }
}

/* counts[c], counts[nch + c]: chunk c of the nch (tri_topk_chunks(n)) of e(n), its elements above T
 * and equal to T (state's prefix, complete after the four passes). A block a chunk (TRI_TOPK_THREADS), any grid. */
__global__ void __launch_bounds__(TRI_TOPK_THREADS)
    compress_topk_count_kernel(int64_t *counts, const float *e, int64_t n, int64_t nch, const int64_t *state)
{
    __shared__ int32_t above[TRI_TOPK_THREADS], ties[TRI_TOPK_THREADS];
    const int t = (int)threadIdx.x;
    const uint32_t T = (uint32_t)state[TRI_TOPK_PREFIX];
    for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
        int32_t a = 0, q = 0;
        for (int r = 0; r < TRI_TOPK_PER_THREAD; r++) {
            int64_t i = c * TRI_TOPK_CHUNK + tri_topk_load_at(t, r);
            if (i < n) {
                uint32_t key = tri_compress_abs_key(e[i]);
                a += key > T;
                q += key == T;
            }
        }
        above[t] = a;
        ties[t] = q;
        int32_t total_above = tri_block_halve(above, t, TRI_TOPK_THREADS);
        int32_t total_ties = tri_block_halve(ties, t, TRI_TOPK_THREADS);
        if (t == 0) {
            counts[c] = total_above;
            counts[nch + c] = total_ties;
        }
    }
}

/* x(m) := its exclusive scan, in index order (cuda/kernels/block_reduce.cuh: tiles of the block's
 * words, a carry from tile to tile; integers, so any order's sums). One block of
 * TRI_TOPK_SCAN_THREADS. */
__global__ void __launch_bounds__(TRI_TOPK_SCAN_THREADS) compress_topk_scan_kernel(int64_t *x, int64_t m)
{
    __shared__ int64_t part[TRI_TOPK_SCAN_THREADS];
    tri_block_exclusive_scan(x, m, part, (int)threadIdx.x, TRI_TOPK_SCAN_THREADS);
}

/* payload(2k): every taken element of chunk c of e(n) at tri_compress_topk_place, from offsets (the
 * scanned counts: the elements above T and equal to T before the chunk) and the block's scan of
 * its threads' counts. A block a chunk (TRI_TOPK_THREADS), any grid. */
__global__ void __launch_bounds__(TRI_TOPK_THREADS)
    compress_topk_emit_kernel(int32_t *payload, const float *e, int64_t n, int64_t nch, const int64_t *state,
                              const int64_t *offsets)
{
    __shared__ float vals[TRI_TOPK_CHUNK + TRI_TOPK_CHUNK / 32]; /* 16.5 KiB */
    __shared__ int64_t above[TRI_TOPK_THREADS], ties[TRI_TOPK_THREADS];
    const int t = (int)threadIdx.x;
    const uint32_t T = (uint32_t)state[TRI_TOPK_PREFIX];
    const int64_t want = state[TRI_TOPK_WANT];
    for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
        const int64_t base = c * TRI_TOPK_CHUNK;
        for (int r = 0; r < TRI_TOPK_PER_THREAD; r++) {
            int p = tri_topk_load_at(t, r);
            vals[tri_topk_slot(p)] = base + p < n ? e[base + p] : 0.0f;
        }
        __syncthreads();
        int64_t a = 0, q = 0;
        for (int j = 0; j < TRI_TOPK_PER_THREAD; j++) {
            int p = tri_topk_run_at(t, j);
            if (base + p < n) {
                uint32_t key = tri_compress_abs_key(vals[tri_topk_slot(p)]);
                a += key > T;
                q += key == T;
            }
        }
        above[t] = a;
        ties[t] = q;
        tri_block_scan(above, t, TRI_TOPK_THREADS);
        tri_block_scan(ties, t, TRI_TOPK_THREADS);
        int64_t A = offsets[c] + above[t] - a, Q = offsets[nch + c] + ties[t] - q;
        for (int j = 0; j < TRI_TOPK_PER_THREAD; j++) {
            int p = tri_topk_run_at(t, j);
            if (base + p >= n)
                break;
            float v = vals[tri_topk_slot(p)];
            uint32_t key = tri_compress_abs_key(v);
            int64_t at = tri_compress_topk_place(key, T, want, A, Q);
            if (at >= 0) {
                payload[2 * at] = (int32_t)(uint32_t)(base + p);
                payload[2 * at + 1] = tri_compress_float_word(v);
            }
            A += key > T;
            Q += key == T;
        }
        __syncthreads(); /* vals and the scans are read before the next chunk overwrites them */
    }
}

#endif
