/* cuda/kernels/mma_shim.h - one source for the tiled (matrix-fragment) kernels, under nvcc and on the CPU.
 *
 * The block-tiled kernels of cuda/attention/flash_mma.kern.h use warps, shared memory, block and warp
 * barriers and 16 x 16 x 16 matrix fragments (bf16 on the tensor cores, fp32 on the CUDA cores).
 * They are written against the names below:
 * - under nvcc, CUDA's own: threadIdx/blockIdx, __syncthreads/__syncwarp, and the WMMA API
 *   (nvcuda::wmma fragments, load_matrix_sync, mma_sync, store_matrix_sync; bf16 operands, fp32
 *   accumulation; sm_80+);
 * - in C++ on the CPU (tests/test_flash_mma_cpu.cpp, the emulated CUDA build), an emulation:
 *   tri_mma_emu_launch runs each block as THREADS lanes with a barrier for the block and one per
 *   warp (the launch of cuda/kernels/cuda_emu.h: fibers, or OS threads for ThreadSanitizer), so
 *   the kernels' indexing, masking, tiling and synchronisation run as written. A fragment is the
 *   whole 16 x 16 tile held by lane 0 of its warp (the other lanes' fragment calls do nothing):
 *   its loads read shared memory as stored, its product adds k in order in fp32, its stores write
 *   the tile. Real WMMA spreads a tile over the 32 lanes in an unspecified layout, so the kernels
 *   never touch fragment elements directly, only through these calls, and every store is followed by
 *   a warp barrier before other lanes read it: the same discipline makes both forms correct.
 * Asynchronous copies (cp.async: tri_mma_cp_async16, commit, wait) are PTX under nvcc and, in the
 * emulation, recorded at issue and performed at the wait that covers them (below).
 * Summation order inside a product is the hardware's on a GPU and k-ascending here, so GPU and
 * emulated results agree within the tolerance of the products, not bit for bit.
 * The fp32 fragments at the end (tri_sfrag_*) take the same calls on the CUDA cores, in code that
 * runs as written in both forms, so their products agree bit for bit between GPU and emulation. */
#ifndef TRIDENT_CUDA_KERNELS_MMA_SHIM_H
#define TRIDENT_CUDA_KERNELS_MMA_SHIM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/core/math.h"

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <mma.h>

#define TRI_MMA_DEV __device__ __forceinline__
#define TRI_MMA_STATIC static __device__ __forceinline__ /* a static member function */
#define TRI_MMA_UNROLL _Pragma("unroll")
#define TRI_MMA_ROLLED _Pragma("unroll 1") /* a loop left rolled (fewer registers live) */
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
/* v[0..8) rounded to bf16 (to nearest even), one 16-byte store at p (16-byte aligned) */
TRI_MMA_DEV void tri_mma_store8_bf16(tri_mma_bf16 *p, const float *v)
{
    unsigned w[4];
    for (int i = 0; i < 4; i++)
        w[i] = (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i])) |
               (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i + 1])) << 16;
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
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

/* Asynchronous copies, global to shared (sm_80+: cp.async, PTX ISA "cp.async"): 16 bytes from src
 * (16-byte aligned; its bytes read only when valid) to dst in shared memory, zeros when not valid
 * (src-size 0), through L2 only (.cg); the copies a thread issued since its last commit form a group;
 * wait<N> returns when all but the N most recent of the thread's committed groups have landed. Other
 * threads see the data after a block barrier that follows their waits. Below sm_80 (never built:
 * cuda/CMakeLists.txt targets sm_80 and sm_90) a plain copy at issue. */
TRI_MMA_DEV void tri_mma_cp_async16(void *dst, const void *src, bool valid)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#else
    *reinterpret_cast<uint4 *>(dst) = valid ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0u, 0u, 0u, 0u);
#endif
}
TRI_MMA_DEV void tri_mma_cp_async_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
TRI_MMA_DEV void tri_mma_cp_async_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#else /* C++ emulation on the CPU */

#include "cuda/kernels/cuda_emu.h"

#define TRI_MMA_DEV static inline
#define TRI_MMA_STATIC static inline
#define TRI_MMA_UNROLL
#define TRI_MMA_ROLLED

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

/* The emulated block's coordinates and barriers: cuda/kernels/cuda_emu.h's. */
#define TRI_MMA_TID ((int)threadIdx.x)
#define TRI_MMA_BX ((int64_t)blockIdx.x)
#define TRI_MMA_BY ((int64_t)blockIdx.y)
#define TRI_MMA_SYNC_BLOCK() __syncthreads()
#define TRI_MMA_SYNC_WARP() __syncwarp()

static inline bool tri_mma_emu_lead(void)
{
    return threadIdx.x % 32 == 0;
}
static inline float tri_mma_emu_f(tri_mma_bf16 h)
{
    return tri_bf16_to_float(h.bits);
}
TRI_MMA_DEV tri_mma_bf16 tri_mma_to_bf16(float x)
{
    return tri_mma_bf16{tri_float_to_bf16(x)};
}
TRI_MMA_DEV void tri_mma_store8_bf16(tri_mma_bf16 *p, const float *v)
{
    for (int i = 0; i < 8; i++)
        p[i] = tri_mma_to_bf16(v[i]);
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

/* Asynchronous copies (cp.async) as a GPU may complete them at the latest: a copy is recorded at
 * issue (its destination, source and whether it reads) and performed only when the issuing lane's
 * wait covers its group, so a kernel that reads the destination before waiting (or before the
 * block barrier after the other lanes' waits) finds the old bytes there, as it may on a GPU, and
 * fails its test. Groups as in PTX: a lane's copies since its last commit form one; wait<N>
 * performs, in issue order, the copies of every committed group but the N most recent. The record
 * is per lane (threadIdx.x) and per OS thread (fibers of one block share their thread; an OS
 * thread a lane has its own), emptied when a block starts. */
struct tri_mma_emu_copy {
    void *dst;
    const void *src;
    bool valid;
    unsigned group;
};
struct tri_mma_emu_lane_copies {
    std::vector<tri_mma_emu_copy> pending;
    unsigned committed; /* groups committed so far: the open group's number */
};
static thread_local tri_mma_emu_lane_copies tri_mma_emu_copies[1024];

static inline void tri_mma_emu_copies_reset(void)
{
    tri_mma_emu_copies[threadIdx.x].pending.clear();
    tri_mma_emu_copies[threadIdx.x].committed = 0;
}
/* copies issued and not yet performed by the calling lane */
static inline size_t tri_mma_emu_copies_pending(void)
{
    return tri_mma_emu_copies[threadIdx.x].pending.size();
}
TRI_MMA_DEV void tri_mma_cp_async16(void *dst, const void *src, bool valid)
{
    tri_mma_emu_lane_copies &q = tri_mma_emu_copies[threadIdx.x];
    q.pending.push_back(tri_mma_emu_copy{dst, src, valid, q.committed});
}
TRI_MMA_DEV void tri_mma_cp_async_commit(void)
{
    tri_mma_emu_copies[threadIdx.x].committed++;
}
template <int N>
TRI_MMA_DEV void tri_mma_cp_async_wait(void)
{
    tri_mma_emu_lane_copies &q = tri_mma_emu_copies[threadIdx.x];
    size_t kept = 0;
    for (size_t i = 0; i < q.pending.size(); i++) {
        const tri_mma_emu_copy &c = q.pending[i];
        if (c.group + (unsigned)N < q.committed) { /* a committed group older than the N newest */
            if (c.valid)
                memcpy(c.dst, c.src, 16);
            else
                memset(c.dst, 0, 16);
        } else {
            q.pending[kept++] = c;
        }
    }
    q.pending.resize(kept);
}

/* Runs body(smem) as a grid gx x gy of blocks of `threads` lanes (a multiple of 32), one block
 * after another (cuda/kernels/cuda_emu.h's launch),
 * each with shared memory of smem_bytes filled with 0xFF bytes first (NaN as fp32 and as bf16: a
 * kernel that reads shared memory it did not write gets NaN, as uninitialised memory would give it
 * garbage on a GPU). */
static inline void tri_mma_emu_launch(int64_t gx, int64_t gy, int threads, size_t smem_bytes,
                                      const std::function<void(unsigned char *)> &body)
{
    std::vector<unsigned char> smem_store(smem_bytes + 128);
    unsigned char *smem = smem_store.data() + (128 - (uintptr_t)smem_store.data() % 128) % 128;
    tri_emu_launch_2d((unsigned)gx, (unsigned)gy, (unsigned)threads, [&] {
        if (threadIdx.x == 0)
            memset(smem, 0xFF, smem_bytes);
        __syncthreads(); /* the block starts on fresh shared memory */
        tri_mma_emu_copies_reset();
        body(smem);
    });
}

/* The same on a stream of the emulated runtime (tests/cuda_emu/cuda_runtime.h): at once, or recorded
 * while the stream captures, body kept by value. */
template <class S>
static inline void tri_mma_emu_launch(int64_t gx, int64_t gy, int threads, size_t smem_bytes, S stream,
                                      std::function<void(unsigned char *)> body)
{
    tri_emu_enqueue(stream, [=] { tri_mma_emu_launch(gx, gy, threads, smem_bytes, body); });
}

/* body(smem, args...) with the arguments evaluated now and kept by value (a recorded launch runs
 * after the caller's locals are gone). */
template <class F, class... A>
static inline std::function<void(unsigned char *)> tri_mma_emu_bind(F body, A... args)
{
    return [=](unsigned char *smem) { body(smem, args...); };
}

#endif

/* ---- fp32 fragments on the CUDA cores (SIMT) ----
 * The tensor cores take fp32 only as TF32 (10 mantissa bits), so the fp32 form of the tiled kernels
 * multiplies the same 16 x 16 x 16 fragments with the CUDA cores' FMAs, in code that is the same
 * under nvcc and in the emulation (each lane computes its own elements; no lane-0 stand-in).
 * An accumulator is spread over the warp: lane l holds rows l / 4 and l / 4 + 8, columns
 * 4 (l % 4) .. 4 (l % 4) + 3 (x[4 i + j] is row l / 4 + 8 i, column 4 (l % 4) + j). An operand
 * fragment is where its 16 x 16 tile lies in shared memory, and tri_mma reads it there: per 4 steps
 * of k, two 16-byte loads of a (the lane's rows) and four of b (its columns) feed 32 FMAs. Each
 * element adds its products for k = 0 .. 15 in order with fmaf (one rounding a step, what the FMA
 * units do; fmaf is explicit, so the library's --fmad=false leaves it alone), so a GPU and the
 * emulation give the same bits. Pointers and row strides (ld, elements) must be multiples of 4
 * floats (16 bytes); with ld = 4 (mod 32) the 8 rows a load instruction touches fall in 8
 * different groups of 4 banks. */
struct tri_sfrag_acc {
    float x[8];
};
struct tri_sfrag_a { /* element (r, k) at p[r * ld + k] */
    const float *p;
    unsigned ld;
};
struct tri_sfrag_b_row { /* element (k, c) at p[k * ld + c] */
    const float *p;
    unsigned ld;
};
struct tri_sfrag_b_col { /* element (k, c) at p[c * ld + k] */
    const float *p;
    unsigned ld;
};
struct tri_sfrag_f4 {
    float v[4];
};

/* four floats from a 16-byte boundary */
TRI_MMA_DEV tri_sfrag_f4 tri_sfrag_load4(const float *p)
{
    tri_sfrag_f4 f;
#if defined(__CUDACC__)
    float4 t = *reinterpret_cast<const float4 *>(p);
    f.v[0] = t.x;
    f.v[1] = t.y;
    f.v[2] = t.z;
    f.v[3] = t.w;
#else
    memcpy(f.v, p, sizeof f.v);
#endif
    return f;
}

TRI_MMA_DEV void tri_sfrag_store4(float *p, const float *v)
{
#if defined(__CUDACC__)
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
#else
    memcpy(p, v, 4 * sizeof *v);
#endif
}

/* The first row and first column of lane l's part of a fragment. */
TRI_MMA_DEV int tri_sfrag_row_of(int l)
{
    return l / 4;
}
TRI_MMA_DEV int tri_sfrag_col_of(int l)
{
    return 4 * (l % 4);
}

/* Where lane l's 16-byte accesses fall, in elements from the fragment's pointer (row stride ld):
 * the calls below use these, and tests/test_access_patterns.cpp enumerates them for lanes 0..31.
 * acc: the load or store of rows r + 8 i (i = 0, 1); a: rows r + 8 i at k = k0 .. k0 + 3; b_row: row
 * k0 + kk (kk = 0 .. 3) at the lane's 4 columns; b_col: column c + j (j = 0 .. 3) at k = k0 .. k0 + 3. */
TRI_MMA_DEV unsigned tri_sfrag_acc_at(int l, int i, unsigned ld)
{
    return (unsigned)(tri_sfrag_row_of(l) + 8 * i) * ld + (unsigned)tri_sfrag_col_of(l);
}
TRI_MMA_DEV unsigned tri_sfrag_a_at(int l, int k0, int i, unsigned ld)
{
    return (unsigned)(tri_sfrag_row_of(l) + 8 * i) * ld + (unsigned)k0;
}
TRI_MMA_DEV unsigned tri_sfrag_b_row_at(int l, int k0, int kk, unsigned ld)
{
    return (unsigned)(k0 + kk) * ld + (unsigned)tri_sfrag_col_of(l);
}
TRI_MMA_DEV unsigned tri_sfrag_b_col_at(int l, int k0, int j, unsigned ld)
{
    return (unsigned)(tri_sfrag_col_of(l) + j) * ld + (unsigned)k0;
}

TRI_MMA_DEV void tri_mma_fill(tri_sfrag_acc &f, float v)
{
    for (int e = 0; e < 8; e++)
        f.x[e] = v;
}
TRI_MMA_DEV void tri_mma_load(tri_sfrag_acc &f, const float *p, unsigned ld)
{
    int l = TRI_MMA_TID % 32;
    for (int i = 0; i < 2; i++) {
        tri_sfrag_f4 t = tri_sfrag_load4(p + tri_sfrag_acc_at(l, i, ld));
        for (int j = 0; j < 4; j++)
            f.x[4 * i + j] = t.v[j];
    }
}
TRI_MMA_DEV void tri_mma_store(float *p, const tri_sfrag_acc &f, unsigned ld)
{
    int l = TRI_MMA_TID % 32;
    for (int i = 0; i < 2; i++)
        tri_sfrag_store4(p + tri_sfrag_acc_at(l, i, ld), f.x + 4 * i);
}
TRI_MMA_DEV void tri_mma_load(tri_sfrag_a &f, const float *p, unsigned ld)
{
    f.p = p;
    f.ld = ld;
}
TRI_MMA_DEV void tri_mma_load(tri_sfrag_b_row &f, const float *p, unsigned ld)
{
    f.p = p;
    f.ld = ld;
}
TRI_MMA_DEV void tri_mma_load(tri_sfrag_b_col &f, const float *p, unsigned ld)
{
    f.p = p;
    f.ld = ld;
}

/* b's 4 x 4 block of k = k0 .. k0 + 3 and lane l's columns c ..: bk[kk].v[j] = b(k0 + kk, c + j) */
TRI_MMA_DEV void tri_sfrag_b_block(tri_sfrag_f4 (&bk)[4], const tri_sfrag_b_row &b, int k0, int l)
{
    for (int kk = 0; kk < 4; kk++)
        bk[kk] = tri_sfrag_load4(b.p + tri_sfrag_b_row_at(l, k0, kk, b.ld));
}
TRI_MMA_DEV void tri_sfrag_b_block(tri_sfrag_f4 (&bk)[4], const tri_sfrag_b_col &b, int k0, int l)
{
    for (int j = 0; j < 4; j++) {
        tri_sfrag_f4 t = tri_sfrag_load4(b.p + tri_sfrag_b_col_at(l, k0, j, b.ld));
        for (int kk = 0; kk < 4; kk++)
            bk[kk].v[j] = t.v[kk];
    }
}

/* d += a b over k = 0 .. 15 in order, one fmaf a step */
template <typename B>
TRI_MMA_DEV void tri_mma(tri_sfrag_acc &d, const tri_sfrag_a &a, const B &b)
{
    int l = TRI_MMA_TID % 32;
    TRI_MMA_UNROLL
    for (int k0 = 0; k0 < 16; k0 += 4) {
        tri_sfrag_f4 bk[4], ar[2];
        tri_sfrag_b_block(bk, b, k0, l);
        for (int i = 0; i < 2; i++)
            ar[i] = tri_sfrag_load4(a.p + tri_sfrag_a_at(l, k0, i, a.ld));
    TRI_MMA_UNROLL
        for (int kk = 0; kk < 4; kk++)
    TRI_MMA_UNROLL
            for (int i = 0; i < 2; i++)
    TRI_MMA_UNROLL
                for (int j = 0; j < 4; j++)
                    d.x[4 * i + j] = fmaf(ar[i].v[kk], bk[kk].v[j], d.x[4 * i + j]);
    }
}

#endif
