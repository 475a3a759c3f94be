/* cuda/kernels/cuda_emu.h - CUDA's kernel-side names in C++ on the CPU, so that the fast kernels
 * (the cuda/kernels/..._fast.cuh headers: a warp or a block per row, shared memory, warp shuffles, 16-byte
 * accesses) run in the CPU suite as they are written, against the CPU backend; the emulation of the
 * tiled attention kernels (cuda/kernels/mma_shim.h) runs its blocks on it too.
 *
 * A launch (tri_emu_launch, tri_emu_launch_2d) runs each block as blockDim.x real threads (a pool
 * of std::threads kept for every launch), a multiple of 32, with a barrier for the block
 * (__syncthreads) and one per warp (__syncwarp); blocks run one after another on the same threads. So a kernel's `__shared__` arrays can be function statics: one block at a time uses
 * them, and a block finds the last one's values there, as a GPU block may find garbage, so a kernel
 * that reads shared memory before writing it is wrong in both. __shfl_xor_sync goes through a
 * per-warp exchange buffer and a warp barrier: every lane of the warp must call it, as the full
 * mask the kernels pass promises. The vector types are plain structs read through casts, as
 * on a GPU (the test builds with -fno-strict-aliasing). Only the names the kernels use are here.
 * Included instead of the CUDA headers, never with them (under nvcc the real ones apply). */
#ifndef TRIDENT_CUDA_KERNELS_CUDA_EMU_H
#define TRIDENT_CUDA_KERNELS_CUDA_EMU_H

#if defined(__CUDACC__)
#error "cuda_emu.h emulates CUDA on the CPU; nvcc has the real thing"
#endif

#include <pthread.h>
#include <stdint.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#define __global__ static inline
#define __device__ static inline
#define __forceinline__
#define __launch_bounds__(...)
#define __shared__ static

struct tri_emu_dim3 {
    unsigned x, y, z;
};
struct uint4 {
    uint32_t x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w)
{
    return float4{x, y, z, w};
}

/* The running block's barriers and the warps' shuffle buffers (two, used in turn). */
struct tri_emu_block {
    pthread_barrier_t block, warp[32];
    float xchg[2][32][32];
};
static thread_local tri_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
static thread_local tri_emu_block *tri_emu_cur;
static thread_local unsigned tri_emu_shfl_turn; /* which of the two buffers this lane's next shuffle uses */

static inline void __syncthreads(void)
{
    pthread_barrier_wait(&tri_emu_cur->block);
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    pthread_barrier_wait(&tri_emu_cur->warp[threadIdx.x / 32]);
}

/* v of lane (this lane ^ k) of this warp. Successive shuffles alternate between two buffers, so one
 * barrier each suffices: a lane can write a buffer again only two shuffles later, after the next
 * shuffle's barrier, which every lane reaches only after reading this one. */
static inline float __shfl_xor_sync(unsigned mask, float v, int k)
{
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32, b = tri_emu_shfl_turn;
    tri_emu_shfl_turn ^= 1u;
    tri_emu_cur->xchg[b][w][lane] = v;
    __syncwarp(mask);
    return tri_emu_cur->xchg[b][w][lane ^ (unsigned)k];
}

/* The threads that run the blocks, created once and kept for every launch (starting 512 threads a
 * launch was most of the test's time): thread t runs its part of each launch with t < block. */
struct tri_emu_pool {
    std::mutex mu;
    std::condition_variable start, done;
    std::vector<std::thread> threads;
    uint64_t generation = 0;
    unsigned running = 0, grid_x = 0, grid_y = 0, block = 0;
    const std::function<void()> *kernel = nullptr;
    tri_emu_block *blk = nullptr;
    bool quit = false;

    void work(unsigned t)
    {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lk(mu);
        for (;;) {
            start.wait(lk, [&] { return quit || generation != seen; });
            if (quit)
                return;
            seen = generation;
            if (t >= block)
                continue;
            unsigned gx = grid_x, gy = grid_y, b = block;
            const std::function<void()> *k = kernel;
            tri_emu_cur = blk;
            lk.unlock();
            threadIdx = tri_emu_dim3{t, 0, 0};
            blockDim = tri_emu_dim3{b, 1, 1};
            gridDim = tri_emu_dim3{gx, gy, 1};
            for (unsigned y = 0; y < gy; y++)
                for (unsigned x = 0; x < gx; x++) {
                    pthread_barrier_wait(&tri_emu_cur->block); /* the last block has ended on every thread */
                    blockIdx = tri_emu_dim3{x, y, 0};
                    tri_emu_shfl_turn = 0;
                    (*k)();
                }
            lk.lock();
            if (--running == 0)
                done.notify_one();
        }
    }

    ~tri_emu_pool()
    {
        {
            std::lock_guard<std::mutex> lk(mu);
            quit = true;
        }
        start.notify_all();
        for (auto &th : threads)
            th.join();
    }
};

static inline tri_emu_pool &tri_emu_the_pool(void)
{
    static tri_emu_pool pool;
    return pool;
}

/* Runs kernel() (a call of the kernel with its arguments) on a grid of grid_x x grid_y blocks of
 * `block` threads (block a multiple of 32, at most 1024), as <<<dim3(grid_x, grid_y), block>>>
 * would, x fastest, and returns when all have ended. */
static inline void tri_emu_launch_2d(unsigned grid_x, unsigned grid_y, unsigned block,
                                     const std::function<void()> &kernel)
{
    tri_emu_pool &p = tri_emu_the_pool();
    tri_emu_block blk;
    pthread_barrier_init(&blk.block, NULL, block);
    for (unsigned w = 0; w < block / 32; w++)
        pthread_barrier_init(&blk.warp[w], NULL, 32);
    {
        std::unique_lock<std::mutex> lk(p.mu);
        while (p.threads.size() < block) {
            unsigned t = (unsigned)p.threads.size();
            p.threads.emplace_back([&p, t] { p.work(t); });
        }
        p.grid_x = grid_x;
        p.grid_y = grid_y;
        p.block = block;
        p.kernel = &kernel;
        p.blk = &blk;
        p.running = block;
        p.generation++;
        p.start.notify_all();
        p.done.wait(lk, [&] { return p.running == 0; });
    }
    pthread_barrier_destroy(&blk.block);
    for (unsigned w = 0; w < block / 32; w++)
        pthread_barrier_destroy(&blk.warp[w]);
}

/* The same over a one-dimensional grid: <<<grid, block>>>. */
static inline void tri_emu_launch(unsigned grid, unsigned block, const std::function<void()> &kernel)
{
    tri_emu_launch_2d(grid, 1, block, kernel);
}

#endif
