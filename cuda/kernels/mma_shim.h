/* cuda/kernels/mma_shim.h - one source for the tensor-core kernels, under nvcc and on the CPU.
 *
 * The block-tiled kernels of cuda/kernels/flash_mma.kern.h use warps, shared memory, block and warp
 * barriers and 16 x 16 x 16 bf16 matrix fragments. They are written against the names below:
 * - under nvcc, CUDA's own: threadIdx/blockIdx, __syncthreads/__syncwarp, and the WMMA API
 *   (nvcuda::wmma fragments, load_matrix_sync, mma_sync, store_matrix_sync; bf16 operands, fp32
 *   accumulation; sm_80+);
 * - in C++ on the CPU (tests/test_flash_mma_cpu.cpp), an emulation: tri_mma_emu_launch runs each
 *   block as THREADS real threads (std::thread) with a barrier for the block and one per warp, so
 *   the kernels' indexing, masking, tiling and synchronisation run as written. A fragment is the
 *   whole 16 x 16 tile held by lane 0 of its warp (the other lanes' fragment calls do nothing):
 *   its loads read shared memory as stored, its product adds k in order in fp32, its stores write
 *   the tile. Real WMMA spreads a tile over the 32 lanes in an unspecified layout, so the kernels
 *   never touch fragment elements directly, only through these calls, and every store is followed by
 *   a warp barrier before other lanes read it: the same discipline makes both forms correct.
 * Summation order inside a product is the hardware's on a GPU and k-ascending here, so GPU and
 * emulated results agree within the tolerance of the products, not bit for bit. */
#ifndef TRIDENT_CUDA_KERNELS_MMA_SHIM_H
#define TRIDENT_CUDA_KERNELS_MMA_SHIM_H

#include <stdint.h>

#include "engine/core/math.h"

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <mma.h>

#define TRI_MMA_DEV __device__ __forceinline__
#define TRI_MMA_UNROLL _Pragma("unroll")
#define TRI_MMA_TID ((int)threadIdx.x)
#define TRI_MMA_BX ((int64_t)blockIdx.x)
#define TRI_MMA_BY ((int64_t)blockIdx.y)
#define TRI_MMA_SYNC_BLOCK() __syncthreads()
#define TRI_MMA_SYNC_WARP() __syncwarp()

typedef __nv_bfloat16 tri_mma_bf16;
typedef uint4 tri_mma_u128;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> tri_frag_acc;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, tri_mma_bf16, nvcuda::wmma::row_major> tri_frag_a;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, tri_mma_bf16, nvcuda::wmma::row_major> tri_frag_b_row;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, tri_mma_bf16, nvcuda::wmma::col_major> tri_frag_b_col;

TRI_MMA_DEV tri_mma_bf16 tri_mma_to_bf16(float x)
{
    return __float2bfloat16_rn(x);
}
TRI_MMA_DEV void tri_mma_fill(tri_frag_acc &f, float v)
{
    nvcuda::wmma::fill_fragment(f, v);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_a &f, const tri_mma_bf16 *p, unsigned ld)
{
    nvcuda::wmma::load_matrix_sync(f, p, ld);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_b_row &f, const tri_mma_bf16 *p, unsigned ld)
{
    nvcuda::wmma::load_matrix_sync(f, p, ld);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_b_col &f, const tri_mma_bf16 *p, unsigned ld)
{
    nvcuda::wmma::load_matrix_sync(f, p, ld);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_acc &f, const float *p, unsigned ld)
{
    nvcuda::wmma::load_matrix_sync(f, p, ld, nvcuda::wmma::mem_row_major);
}
TRI_MMA_DEV void tri_mma_store(float *p, const tri_frag_acc &f, unsigned ld)
{
    nvcuda::wmma::store_matrix_sync(p, f, ld, nvcuda::wmma::mem_row_major);
}
template <typename B>
TRI_MMA_DEV void tri_mma(tri_frag_acc &d, const tri_frag_a &a, const B &b)
{
    nvcuda::wmma::mma_sync(d, a, b, d);
}

#else /* C++ emulation on the CPU */

#include <pthread.h>
#include <string.h>

#include <functional>
#include <thread>
#include <vector>

#define TRI_MMA_DEV static inline
#define TRI_MMA_UNROLL

struct tri_mma_bf16 {
    uint16_t bits;
};
struct tri_mma_u128 {
    uint32_t x, y, z, w;
};
/* A 16 x 16 tile; `col` marks a column-major operand (element (r, c) loaded from p[c * ld + r]). */
struct tri_frag_acc {
    float x[256];
};
struct tri_frag_a {
    float x[256];
};
struct tri_frag_b_row {
    float x[256];
};
struct tri_frag_b_col {
    float x[256];
};

/* The emulated block a thread belongs to, and its coordinates. */
struct tri_mma_emu_block {
    pthread_barrier_t block, warp[32];
};
static thread_local int tri_mma_emu_tid;
static thread_local int64_t tri_mma_emu_bx, tri_mma_emu_by;
static thread_local tri_mma_emu_block *tri_mma_emu_cur;

#define TRI_MMA_TID (tri_mma_emu_tid)
#define TRI_MMA_BX (tri_mma_emu_bx)
#define TRI_MMA_BY (tri_mma_emu_by)
#define TRI_MMA_SYNC_BLOCK() pthread_barrier_wait(&tri_mma_emu_cur->block)
#define TRI_MMA_SYNC_WARP() pthread_barrier_wait(&tri_mma_emu_cur->warp[tri_mma_emu_tid / 32])

static inline bool tri_mma_emu_lead(void)
{
    return tri_mma_emu_tid % 32 == 0;
}
static inline float tri_mma_emu_f(tri_mma_bf16 h)
{
    return tri_bf16_to_float(h.bits);
}
TRI_MMA_DEV tri_mma_bf16 tri_mma_to_bf16(float x)
{
    return tri_mma_bf16{tri_float_to_bf16(x)};
}
TRI_MMA_DEV void tri_mma_fill(tri_frag_acc &f, float v)
{
    if (tri_mma_emu_lead())
        for (int i = 0; i < 256; i++)
            f.x[i] = v;
}
template <typename F>
static inline void tri_mma_emu_load(F &f, const tri_mma_bf16 *p, unsigned ld, bool col)
{
    if (tri_mma_emu_lead())
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                f.x[r * 16 + c] = tri_mma_emu_f(col ? p[c * ld + r] : p[r * ld + c]);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_a &f, const tri_mma_bf16 *p, unsigned ld)
{
    tri_mma_emu_load(f, p, ld, false);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_b_row &f, const tri_mma_bf16 *p, unsigned ld)
{
    tri_mma_emu_load(f, p, ld, false);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_b_col &f, const tri_mma_bf16 *p, unsigned ld)
{
    tri_mma_emu_load(f, p, ld, true);
}
TRI_MMA_DEV void tri_mma_load(tri_frag_acc &f, const float *p, unsigned ld)
{
    if (tri_mma_emu_lead())
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                f.x[r * 16 + c] = p[r * ld + c];
}
TRI_MMA_DEV void tri_mma_store(float *p, const tri_frag_acc &f, unsigned ld)
{
    if (tri_mma_emu_lead())
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                p[r * ld + c] = f.x[r * 16 + c];
}
template <typename B>
static inline void tri_mma(tri_frag_acc &d, const tri_frag_a &a, const B &b)
{
    if (tri_mma_emu_lead())
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) {
                float s = d.x[r * 16 + c];
                for (int k = 0; k < 16; k++)
                    s += a.x[r * 16 + k] * b.x[k * 16 + c];
                d.x[r * 16 + c] = s;
            }
}

/* Runs body(smem) as a grid gx x gy of blocks of `threads` threads (a multiple of 32), one block
 * after another, each with shared memory of smem_bytes filled with 0xFF bytes first (NaN as fp32 and
 * as bf16: a kernel that reads shared memory it did not write gets NaN, as uninitialised memory
 * would give it garbage on a GPU). The same `threads` threads run every block of the launch (a
 * block barrier before and after each): creating them per block was most of the suite's time, 128
 * thread starts a block (under the sanitizers especially). */
static inline void tri_mma_emu_launch(int64_t gx, int64_t gy, int threads, size_t smem_bytes,
                                      const std::function<void(unsigned char *)> &body)
{
    std::vector<unsigned char> smem_store(smem_bytes + 128);
    unsigned char *smem = smem_store.data() + (128 - (uintptr_t)smem_store.data() % 128) % 128;
    tri_mma_emu_block blk;
    pthread_barrier_init(&blk.block, NULL, (unsigned)threads);
    for (int w = 0; w < threads / 32; w++)
        pthread_barrier_init(&blk.warp[w], NULL, 32);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++)
        pool.emplace_back([&, t] {
            tri_mma_emu_tid = t;
            tri_mma_emu_cur = &blk;
            for (int64_t by = 0; by < gy; by++)
                for (int64_t bx = 0; bx < gx; bx++) {
                    if (t == 0)
                        memset(smem, 0xFF, smem_bytes);
                    pthread_barrier_wait(&blk.block); /* the block starts on fresh shared memory */
                    tri_mma_emu_bx = bx;
                    tri_mma_emu_by = by;
                    body(smem);
                    pthread_barrier_wait(&blk.block); /* ... and ends before the next one's fill */
                }
        });
    for (auto &th : pool)
        th.join();
    pthread_barrier_destroy(&blk.block);
    for (int w = 0; w < threads / 32; w++)
        pthread_barrier_destroy(&blk.warp[w]);
}

#endif

#endif
