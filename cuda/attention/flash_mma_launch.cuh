/* cuda/attention/flash_mma_launch.cuh - the tiled attention kernels' __global__ wrappers and launchers,
 * shared by the two translation units that instantiate them: flash_mma.cu (the uncut form, CUT false,
 * and the public entry points) and flash_mma_cut.cu (the cut form, CUT true, context parallelism's kv
 * ops). Split in two so that nvcc compiles the two sets of instantiations in parallel (one unit held
 * both: 7.5 minutes of one core, the longest step of the build). Each includer instantiates only the
 * form it launches. Internal to cuda/attention/. */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_MMA_LAUNCH_CUH
#define TRIDENT_CUDA_ATTENTION_FLASH_MMA_LAUNCH_CUH

#include <math.h>

#include "cuda/cuda_internal.h"
#include "cuda/attention/flash_mma.h"
#include "cuda/attention/flash_mma.kern.h"

#if !defined(TRI_CUDA_EMU_HOST)

/* CUT: the body's instantiation for a cut sequence (true) or today's problem only (false) */
template <class P, int HS, bool CUT>
__global__ void __launch_bounds__(THREADS) flash_forward_mma_kernel(typename P::global *out, float *lse,
                                                                    const typename P::global *q,
                                                                    const typename P::global *kv,
                                                                    tri_flash_mma_cut c, int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_forward_mma_body<P, HS, CUT>(smem, out, lse, q, kv, c, n_tiles);
}

/* GO: dk and dv's storage (P::global, or float beside bf16 operands) */
template <class P, int HS, bool CUT, class GO>
__global__ void __launch_bounds__(THREADS) flash_backward_dkv_mma_kernel(GO *dkv, const float *delta,
                                                                         const typename P::global *dout,
                                                                         const typename P::global *q,
                                                                         const typename P::global *kv,
                                                                         const float *lse, tri_flash_mma_cut c,
                                                                         int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dkv_mma_body<P, HS, CUT, GO>(smem, dkv, delta, dout, q, kv, lse, c, n_tiles);
}

template <class P, int HS, bool CUT>
__global__ void __launch_bounds__(THREADS) flash_backward_dq_mma_kernel(typename P::global *dq, const float *delta,
                                                                        const typename P::global *dout,
                                                                        const typename P::global *q,
                                                                        const typename P::global *kv,
                                                                        const float *lse, tri_flash_mma_cut c,
                                                                        int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dq_mma_body<P, HS, CUT>(smem, dq, delta, dout, q, kv, lse, c, n_tiles);
}

#endif

/* ---- host side ---- */

#define FLASH_CHECK(expr, what) tri_cuda_check((expr), what, __FILE__, __LINE__)
#define FLASH_UNPAREN(...) __VA_ARGS__

#if !defined(TRI_CUDA_EMU_HOST)
/* kernel on a block of THREADS lanes per (tile of `rows` rows, y) with `bytes` of dynamic shared
 * memory, opted in first (above 48 KiB a kernel must ask for it); its arguments args, then the
 * tile count. name: the kernel's, for the error. */
template <class... K, class... A>
static int flash_launch(void (*kernel)(K...), const char *name, size_t bytes, int64_t rows, int64_t y, cudaStream_t s,
                        A... args)
{
    int64_t tiles = (rows + TILE - 1) / TILE;
    int rc = FLASH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), name);
    if (rc)
        return rc;
    kernel<<<dim3((unsigned)tiles, (unsigned)y), THREADS, bytes, s>>>(args..., tiles);
    return FLASH_CHECK(cudaGetLastError(), name);
}

/* The launch of kernel<targs> (targs: its template arguments in parentheses) as above: every
 * launcher's prologue */
#define FLASH_LAUNCH(kernel, body, targs, bytes, rows, y, s, ...)                                  \
    flash_launch(kernel<FLASH_UNPAREN targs>, #kernel, bytes, rows, y, s, __VA_ARGS__)
#else
/* the emulated CUDA build (tests/cuda_emu/): the kernel's body on mma_shim.h's emulated blocks, whose
 * shared memory starts as NaN bytes; checked through cudaGetLastError as on a GPU */
template <class F, class... A>
static int flash_launch(F body, size_t bytes, int64_t rows, int64_t y, cudaStream_t s, A... args)
{
    int64_t tiles = (rows + TILE - 1) / TILE;
    tri_mma_emu_launch(tiles, y, THREADS, bytes, s, tri_mma_emu_bind(body, args..., tiles));
    return FLASH_CHECK(cudaGetLastError(), "launch of a tiled attention kernel");
}

#define FLASH_LAUNCH(kernel, body, targs, bytes, rows, y, s, ...)                                  \
    flash_launch(body<FLASH_UNPAREN targs>, bytes, rows, y, s, __VA_ARGS__)
#endif

/* a block per (query tile, b, query head) */
template <class P, int HS, bool CUT>
static int forward_hs(cudaStream_t s, void *out, float *lse, const void *q, const void *kv, tri_flash_mma_cut c)
{
    typedef typename P::global G;
    return FLASH_LAUNCH(flash_forward_mma_kernel, flash_forward_mma_body, (P, HS, CUT), fwd_layout<P, HS>::bytes,
                        c.d.T, c.d.B * c.d.NH, s, (G *)out, lse, (const G *)q, (const G *)kv, c);
}

/* dk and dv (stored as GO): a block per (key tile, b, key/value head) */
template <class P, int HS, bool CUT, class GO>
static int dkv_hs(cudaStream_t s, void *dkv, const float *delta, const void *dout, const void *q, const void *kv,
                  const float *lse, tri_flash_mma_cut c)
{
    typedef typename P::global G;
    return FLASH_LAUNCH(flash_backward_dkv_mma_kernel, flash_backward_dkv_mma_body, (P, HS, CUT, GO),
                        bwd_layout<P, HS>::bytes, c.Tk, c.d.B * c.d.NH_kv, s, (GO *)dkv, delta, (const G *)dout,
                        (const G *)q, (const G *)kv, lse, c);
}

/* dq: a block per (query tile, b, query head) */
template <class P, int HS, bool CUT>
static int dq_hs(cudaStream_t s, void *dq, const float *delta, const void *dout, const void *q, const void *kv,
                 const float *lse, tri_flash_mma_cut c)
{
    typedef typename P::global G;
    return FLASH_LAUNCH(flash_backward_dq_mma_kernel, flash_backward_dq_mma_body, (P, HS, CUT),
                        bwd_layout<P, HS>::bytes, c.d.T, c.d.B * c.d.NH, s, (G *)dq, delta, (const G *)dout,
                        (const G *)q, (const G *)kv, lse, c);
}


/* return call_hs(P, hs) for head size HS with precision P, or `none` for a head size without a kernel
 * (the list is tri_flash_mma_head_size's) */
#define FLASH_HEAD_SIZES(call_hs, P, none)                                                         \
    switch (HS) {                                                                                  \
    case 32: return call_hs(P, 32);                                                                \
    case 64: return call_hs(P, 64);                                                                \
    case 80: return call_hs(P, 80);                                                                \
    case 96: return call_hs(P, 96);                                                                \
    case 128: return call_hs(P, 128);                                                              \
    default: return none;                                                                          \
    }

/* the same for the precision `bf16` names */
#define FLASH_DISPATCH(call_hs, none)                                                              \
    if (bf16) {                                                                                    \
        FLASH_HEAD_SIZES(call_hs, tri_flash_bf16_mma, none)                                        \
    }                                                                                              \
    FLASH_HEAD_SIZES(call_hs, tri_flash_fp32_simt, none)

#define NO_KERNEL TRI_ERR(TRI_ENOTSUP, "flash attention: no tiled kernel for head size %lld", (long long)HS)

#endif
