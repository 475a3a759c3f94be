/* cuda/kernels/cuda_emu.h - CUDA's kernel-side names in C++ on the CPU, so that the fast kernels
 * (the cuda/kernels/..._fast.cuh headers: a warp or a block per row, shared memory, warp shuffles, 16-byte
 * accesses) run in the CPU suite as they are written, against the CPU backend; the emulation of the
 * tiled attention kernels (cuda/kernels/mma_shim.h) runs its blocks on it too.
 *
 * A launch (tri_emu_launch, tri_emu_launch_2d) runs its blocks one after another, each as blockDim.x
 * lanes with a barrier for the block (__syncthreads) and one per warp (__syncwarp). By default the
 * lanes are fibers on the launching thread (a stack each, kept from launch to launch; on x86-64 a
 * few instructions switch them, elsewhere ucontext's swapcontext): a lane runs until it reaches a
 * barrier or ends, then the next; a barrier lets its lanes go on once all have come. With
 * TRI_EMU_OS_THREADS defined they are OS threads from a pool, and the barriers pthread barriers,
 * which ThreadSanitizer understands (the ad hoc race checks of docs/cuda-correctness.md build so):
 * a missing barrier is then a reported race, where fibers, switching only at barriers, give one
 * fixed interleaving. Fibers cost a context switch per lane and barrier instead of a futex round
 * among hundreds of threads on a few cores: the emulated CUDA
 * build (tests/cuda_emu/) runs whole training steps on them. (AddressSanitizer is told of each
 * switch of stacks, so it checks the lanes' stacks as any other.) Either way
 * a kernel's `__shared__` arrays can be function statics: one block at a time uses them, and a
 * block finds the last one's values there, as a GPU block may find garbage, so a kernel
 * that reads shared memory before writing it is wrong in both. __shfl_xor_sync (float, double) and
 * __ballot_sync go through a per-warp exchange buffer and a warp barrier: every lane of the warp
 * must call them, as the full mask the kernels pass promises. The vector types are plain structs read through casts, as
 * on a GPU (the test builds with -fno-strict-aliasing). Only the names the kernels use are here.
 * Included instead of the CUDA headers, never with them (under nvcc the real ones apply). */
#ifndef TRIDENT_CUDA_KERNELS_CUDA_EMU_H
#define TRIDENT_CUDA_KERNELS_CUDA_EMU_H

#if defined(__CUDACC__)
#error "cuda_emu.h emulates CUDA on the CPU; nvcc has the real thing"
#endif

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

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
struct uint2 {
    uint32_t x, y;
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

static thread_local tri_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
static thread_local unsigned tri_emu_shfl_turn; /* which of the two buffers this lane's next shuffle uses */

#if defined(TRI_EMU_OS_THREADS) /* ---- a block's lanes as OS threads (for ThreadSanitizer) ---- */

/* The running block's barriers and the warps' shuffle buffers (two, used in turn). */
struct tri_emu_block {
    pthread_barrier_t block, warp[32];
    uint64_t xchg[2][32][32]; /* each lane's word: a float's, a double's or a vote's bits */
};
static thread_local tri_emu_block *tri_emu_cur;

static inline void __syncthreads(void)
{
    pthread_barrier_wait(&tri_emu_cur->block);
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    pthread_barrier_wait(&tri_emu_cur->warp[threadIdx.x / 32]);
}

/* The running block's shuffle buffers. */
static inline uint64_t (*tri_emu_xchg(void))[32][32]
{
    return tri_emu_cur->xchg;
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
 * `block` threads (1 to 1024; a last partial warp's shuffles see only its own lanes), as
 * <<<dim3(grid_x, grid_y), block>>> would, x fastest, and returns when all have ended. */
static inline void tri_emu_launch_2d(unsigned grid_x, unsigned grid_y, unsigned block,
                                     const std::function<void()> &kernel)
{
    tri_emu_pool &p = tri_emu_the_pool();
    tri_emu_block blk;
    pthread_barrier_init(&blk.block, NULL, block);
    for (unsigned w = 0; w < (block + 31) / 32; w++) /* a last, partial warp has its own count */
        pthread_barrier_init(&blk.warp[w], NULL, block - 32 * w < 32 ? block - 32 * w : 32);
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
    for (unsigned w = 0; w < (block + 31) / 32; w++)
        pthread_barrier_destroy(&blk.warp[w]);
}

#else /* ---- a block's lanes as fibers on the launching thread (the default) ---- */

/* Where a lane stands: running (or ready to), waiting at the block's or its warp's barrier, done. */
enum tri_emu_state { TRI_EMU_RUN, TRI_EMU_AT_BLOCK, TRI_EMU_AT_WARP, TRI_EMU_DONE };

/* AddressSanitizer is told of every switch between the scheduler's stack and a lane's
 * (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), so it checks the lanes'
 * stacks as any other. */
#if defined(__SANITIZE_ADDRESS__)
#define TRI_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRI_EMU_ASAN 1
#endif
#endif
#if defined(TRI_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(TRI_EMU_UCONTEXT)
/* A context is its saved stack pointer: the switch below pushes the callee-saved registers (rbp,
 * rbx, r12-r15; System V x86-64 ABI 3.2.1) on the stack it leaves, stores the stack pointer in
 * *from, loads `to` and pops the same from there: a function call's worth of work and no system
 * call, where glibc's swapcontext saves and restores the signal mask (rt_sigprocmask) at every
 * switch, ~75% of an emulated training step's time. The floating-point control words (MXCSR, the
 * x87 control word) are not switched: no kernel changes them, so every lane runs with the launching
 * thread's, and saving and loading them (stmxcsr/ldmxcsr, fnstcw/fldcw) was 85% of the switch's
 * cost. (The way libco switches; boost.context also switches the control words.) */
struct tri_emu_ctx {
    void *sp;
};

__attribute__((naked, noinline)) static inline void tri_emu_switch(void ** /* from: rdi */, void * /* to: rsi */)
{
    __asm__ volatile("pushq %rbp\n\t"
                     "pushq %rbx\n\t"
                     "pushq %r12\n\t"
                     "pushq %r13\n\t"
                     "pushq %r14\n\t"
                     "pushq %r15\n\t"
                     "movq %rsp, (%rdi)\n\t"
                     "movq %rsi, %rsp\n\t"
                     "popq %r15\n\t"
                     "popq %r14\n\t"
                     "popq %r13\n\t"
                     "popq %r12\n\t"
                     "popq %rbx\n\t"
                     "popq %rbp\n\t"
                     "ret\n\t");
}

/* A fresh context on [stack, stack + size) whose first switch to it calls entry() (which must never
 * return): the frame tri_emu_switch pops, laid below a null return address, so that entry() starts
 * with the stack aligned as after a call (rsp + 8 a multiple of 16). */
static inline void tri_emu_ctx_make(tri_emu_ctx *c, char *stack, size_t size, void (*entry)(void))
{
    uint64_t *sp = (uint64_t *)(((uintptr_t)stack + size) & ~(uintptr_t)15);
    *--sp = 0;                          /* entry()'s return address: none */
    *--sp = (uint64_t)(uintptr_t)entry; /* where the switch returns to */
    for (int r = 0; r < 6; r++)         /* rbp, rbx, r12-r15 */
        *--sp = 0;
    c->sp = sp;
}

/* Leaves for context `to`, saving this one in *from; returns when something switches back to it. */
static inline void tri_emu_ctx_swap(tri_emu_ctx *from, tri_emu_ctx *to)
{
    tri_emu_switch(&from->sp, to->sp);
}
#else
/* Elsewhere (or with TRI_EMU_UCONTEXT defined) the contexts are ucontext's. */
struct tri_emu_ctx {
    ucontext_t uc;
};

static inline void tri_emu_ctx_make(tri_emu_ctx *c, char *stack, size_t size, void (*entry)(void))
{
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = NULL; /* entry() never returns */
    makecontext(&c->uc, entry, 0);
}

static inline void tri_emu_ctx_swap(tri_emu_ctx *from, tri_emu_ctx *to)
{
    swapcontext(&from->uc, &to->uc);
}
#endif

struct tri_emu_lane {
    tri_emu_ctx ctx;
    int state;
    unsigned shfl_turn;
};

#define TRI_EMU_STACK_BYTES ((size_t)256 << 10) /* each lane's stack, a guard page at its end */
/* Each lane's stack starts (at its top) a lane-dependent distance below its region's end, so that the
 * lanes' top frames, which every switch reads, fall in different cache sets: at one stride of 256
 * KiB they all fell in the same sets of an 8-way L2 (128 KiB apart a set repeats there) and every
 * switch to a lane of a 1024-lane block missed it. The distance (below TRI_EMU_STACK_SPREAD, which
 * each region has beyond TRI_EMU_STACK_BYTES) is 1 KiB per lane to 127 KiB, plus 128 bytes per 128
 * lanes; the pages only a deeper stack would touch are never touched (MAP_NORESERVE). */
#define TRI_EMU_STACK_SPREAD ((size_t)132 << 10)
#define TRI_EMU_STACK_STRIDE (TRI_EMU_STACK_BYTES + TRI_EMU_STACK_SPREAD)

/* Lane t's region's lowest address (its guard page) in `stacks`, and its stack's size from there. */
static inline char *tri_emu_stack_base(char *stacks, unsigned t)
{
    return stacks + (size_t)t * TRI_EMU_STACK_STRIDE;
}

static inline size_t tri_emu_stack_size(unsigned t)
{
    return TRI_EMU_STACK_STRIDE - ((size_t)(t & 127) * 1024 + (size_t)((t >> 7) & 7) * 128);
}

/* The launching thread's fibers: one per lane of the largest block so far, with their stacks (kept
 * from launch to launch), the scheduler's context and the warps' shuffle buffers. */
struct tri_emu_fibers {
    tri_emu_ctx sched;
    tri_emu_lane *lane = nullptr;
    char *stacks = nullptr;
    unsigned cap = 0, cur = 0;
    const std::function<void()> *kernel = nullptr;
    uint64_t xchg[2][32][32]; /* each lane's word: a float's, a double's or a vote's bits */
#if defined(TRI_EMU_ASAN)
    const void *sched_bottom = nullptr; /* the scheduler's stack, as AddressSanitizer knows it */
    size_t sched_size = 0;
#endif

    void reserve(unsigned n)
    {
        if (n <= cap)
            return;
        release();
        stacks = (char *)mmap(NULL, n * TRI_EMU_STACK_STRIDE, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        lane = new tri_emu_lane[n];
        if (stacks == MAP_FAILED) {
            fprintf(stderr, "cuda_emu: cannot map the stacks of %u lanes\n", n);
            abort();
        }
        for (unsigned t = 0; t < n; t++) /* stacks grow down: the guard is each one's lowest page */
            mprotect(tri_emu_stack_base(stacks, t), 4096, PROT_NONE);
        cap = n;
    }

    void release()
    {
        if (cap) {
#if defined(TRI_EMU_ASAN) /* the lanes' last frames (never returned from) leave their redzones poisoned */
            for (unsigned t = 0; t < cap; t++)
                __asan_unpoison_memory_region(tri_emu_stack_base(stacks, t) + 4096, TRI_EMU_STACK_STRIDE - 4096);
#endif
            munmap(stacks, cap * TRI_EMU_STACK_STRIDE);
        }
        delete[] lane;
        lane = nullptr, stacks = nullptr, cap = 0;
    }

    ~tri_emu_fibers()
    {
        release();
    }
};
static thread_local tri_emu_fibers tri_emu_fib;

/* A lane's life: the kernel, then back to the scheduler for good (the next block starts its lanes
 * afresh on the same stacks). */
static inline void tri_emu_lane_main(void)
{
    tri_emu_fibers &F = tri_emu_fib;
#if defined(TRI_EMU_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &F.sched_bottom, &F.sched_size);
#endif
    (*F.kernel)();
    tri_emu_lane &l = F.lane[F.cur];
    l.state = TRI_EMU_DONE;
#if defined(TRI_EMU_ASAN)
    __sanitizer_start_switch_fiber(nullptr, F.sched_bottom, F.sched_size); /* this fiber ends */
#endif
    tri_emu_ctx_swap(&l.ctx, &F.sched);
    __builtin_unreachable();
}

/* The running lane waits at a barrier: the scheduler runs the others and resumes it when they
 * have all come (it sets threadIdx and the shuffle turn back before it does). */
static inline void tri_emu_wait(int state)
{
    tri_emu_fibers &F = tri_emu_fib;
    tri_emu_lane &l = F.lane[F.cur];
    l.state = state;
#if defined(TRI_EMU_ASAN)
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, F.sched_bottom, F.sched_size);
    tri_emu_ctx_swap(&l.ctx, &F.sched);
    __sanitizer_finish_switch_fiber(fake, &F.sched_bottom, &F.sched_size);
#else
    tri_emu_ctx_swap(&l.ctx, &F.sched);
#endif
}

/* The scheduler runs lane t until it waits at a barrier or ends. */
static inline void tri_emu_resume(unsigned t)
{
    tri_emu_fibers &F = tri_emu_fib;
#if defined(TRI_EMU_ASAN)
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, tri_emu_stack_base(F.stacks, t), TRI_EMU_STACK_STRIDE);
    tri_emu_ctx_swap(&F.sched, &F.lane[t].ctx);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    tri_emu_ctx_swap(&F.sched, &F.lane[t].ctx);
#endif
}

static inline void __syncthreads(void)
{
    tri_emu_wait(TRI_EMU_AT_BLOCK);
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    tri_emu_wait(TRI_EMU_AT_WARP);
}

/* The launching thread's shuffle buffers. */
static inline uint64_t (*tri_emu_xchg(void))[32][32]
{
    return tri_emu_fib.xchg;
}

/* Runs one block of n lanes: each lane runs until it waits at a barrier or ends, in lane order;
 * then every warp whose lanes all wait at __syncwarp (or have ended) goes on, or, when none does
 * and all the block's lanes wait at __syncthreads (or have ended), the block goes on. A lane that
 * ended counts as arrived, as in CUDA. Anything else can never go on (lanes of a warp split
 * between the two barriers, as CUDA leaves undefined): reported, and the process aborts. */
static inline void tri_emu_run_block(unsigned n)
{
    tri_emu_fibers &F = tri_emu_fib;
    for (unsigned t = 0; t < n; t++) {
        tri_emu_lane &l = F.lane[t];
        tri_emu_ctx_make(&l.ctx, tri_emu_stack_base(F.stacks, t), tri_emu_stack_size(t), tri_emu_lane_main);
        l.state = TRI_EMU_RUN;
        l.shfl_turn = 0;
    }
    for (;;) {
        for (unsigned t = 0; t < n; t++)
            if (F.lane[t].state == TRI_EMU_RUN) {
                F.cur = t;
                threadIdx = tri_emu_dim3{t, 0, 0};
                tri_emu_shfl_turn = F.lane[t].shfl_turn;
                tri_emu_resume(t);
                F.lane[t].shfl_turn = tri_emu_shfl_turn;
            }
        unsigned done = 0, at_block = 0;
        bool moved = false;
        for (unsigned w = 0; w < (n + 31) / 32; w++) {
            unsigned end = 32 * w + 32 < n ? 32 * w + 32 : n, at_warp = 0, here = 0;
            for (unsigned t = 32 * w; t < end; t++) {
                int st = F.lane[t].state;
                here += st == TRI_EMU_DONE;
                at_warp += st == TRI_EMU_AT_WARP;
                at_block += st == TRI_EMU_AT_BLOCK;
            }
            done += here;
            if (at_warp && at_warp + here == end - 32 * w) {
                for (unsigned t = 32 * w; t < end; t++)
                    if (F.lane[t].state == TRI_EMU_AT_WARP)
                        F.lane[t].state = TRI_EMU_RUN;
                moved = true;
            }
        }
        if (done == n)
            return;
        if (!moved && at_block + done == n) {
            for (unsigned t = 0; t < n; t++)
                if (F.lane[t].state == TRI_EMU_AT_BLOCK)
                    F.lane[t].state = TRI_EMU_RUN;
            moved = true;
        }
        if (!moved) {
            fprintf(stderr, "cuda_emu: block (%u, %u) of %u lanes cannot go on: a warp's lanes wait at "
                    "different barriers\n", blockIdx.x, blockIdx.y, n);
            abort();
        }
    }
}

/* Runs kernel() (a call of the kernel with its arguments) on a grid of grid_x x grid_y blocks of
 * `block` threads (1 to 1024), as <<<dim3(grid_x, grid_y), block>>> would, x fastest, and returns
 * when all have ended. */
static inline void tri_emu_launch_2d(unsigned grid_x, unsigned grid_y, unsigned block,
                                     const std::function<void()> &kernel)
{
    tri_emu_fibers &F = tri_emu_fib;
    F.reserve(block);
    F.kernel = &kernel;
    blockDim = tri_emu_dim3{block, 1, 1};
    gridDim = tri_emu_dim3{grid_x, grid_y, 1};
    for (unsigned y = 0; y < grid_y; y++)
        for (unsigned x = 0; x < grid_x; x++) {
            blockIdx = tri_emu_dim3{x, y, 0};
            tri_emu_run_block(block);
        }
}

#endif

/* Publishes this lane's word and returns the buffer of its warp's 32 words, once all have published.
 * Successive exchanges (shuffles, votes) alternate between two buffers, so one warp barrier each
 * suffices: a lane can write a buffer again only two exchanges later, after the next exchange's
 * barrier, which every lane reaches only after reading this one. Words move as bits (memcpy), so a
 * NaN's payload survives as on a GPU. */
static inline const uint64_t *tri_emu_exchange(unsigned mask, uint64_t word)
{
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32, b = tri_emu_shfl_turn;
    tri_emu_shfl_turn ^= 1u;
    tri_emu_xchg()[b][w][lane] = word;
    __syncwarp(mask);
    return tri_emu_xchg()[b][w];
}

/* v of lane (this lane ^ k) of this warp. */
static inline float __shfl_xor_sync(unsigned mask, float v, int k)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u = (uint32_t)tri_emu_exchange(mask, u)[(threadIdx.x % 32) ^ (unsigned)k];
    memcpy(&v, &u, sizeof v);
    return v;
}

static inline double __shfl_xor_sync(unsigned mask, double v, int k)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    u = tri_emu_exchange(mask, u)[(threadIdx.x % 32) ^ (unsigned)k];
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Bit l set when lane l's pred is non-zero (every lane of the warp votes, as the full mask says). */
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    const uint64_t *votes = tri_emu_exchange(mask, pred != 0);
    unsigned bits = 0;
    for (unsigned l = 0; l < 32; l++)
        bits |= (unsigned)(votes[l] != 0) << l;
    return bits;
}

/* atomicAdd on a 32-bit word (shared or global memory): returns the old value. A builtin atomic,
 * so that lanes as OS threads add safely too (fibers switch only at barriers). */
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

/* The same over a one-dimensional grid: <<<grid, block>>>. */
static inline void tri_emu_launch(unsigned grid, unsigned block, const std::function<void()> &kernel)
{
    tri_emu_launch_2d(grid, 1, block, kernel);
}

#endif
