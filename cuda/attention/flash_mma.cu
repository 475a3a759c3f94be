/* cuda/attention/flash_mma.cu - the tiled fused attention kernels as CUDA kernels, and their launches.
 *
 * The kernel bodies (and their description) are cuda/attention/flash_mma.kern.h, shared with the CPU
 * emulation that tests them (tests/test_flash_mma_cpu.cpp); here each is a __global__ function per
 * precision (bf16 on the tensor cores, fp32 on the CUDA cores) and head size, each taking the problem of
 * cuda/attention/flash_cut.h (today's uncut one, or a cut sequence's queries against keys in their
 * own buffer at global positions: context parallelism's kv ops), with its dynamic
 * shared memory (above 48 KiB: opted in per kernel before each launch). The emulated CUDA build
 * (tests/cuda_emu/) runs the same bodies through mma_shim.h's launch instead. */
#include <math.h>

#include "cuda/cuda_internal.h"
#include "cuda/attention/flash_mma.h"
#include "cuda/attention/flash_mma.kern.h"

#if !defined(TRI_CUDA_EMU_HOST)

template <class P, int HS>
__global__ void __launch_bounds__(THREADS) flash_forward_mma_kernel(typename P::global *out, float *lse,
                                                                    const typename P::global *q,
                                                                    const typename P::global *kv,
                                                                    tri_flash_mma_cut c, int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_forward_mma_body<P, HS>(smem, out, lse, q, kv, c, n_tiles);
}

template <class P, int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dkv_mma_kernel(typename P::global *dkv, const float *delta,
                                                                         const typename P::global *dout,
                                                                         const typename P::global *q,
                                                                         const typename P::global *kv,
                                                                         const float *lse, tri_flash_mma_cut c,
                                                                         int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dkv_mma_body<P, HS>(smem, dkv, delta, dout, q, kv, lse, c, n_tiles);
}

template <class P, int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dkv_f32_mma_kernel(float *dkv, const float *delta,
                                                                             const typename P::global *dout,
                                                                             const typename P::global *q,
                                                                             const typename P::global *kv,
                                                                             const float *lse, tri_flash_mma_cut c,
                                                                             int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dkv_mma_body<P, HS, float>(smem, dkv, delta, dout, q, kv, lse, c, n_tiles);
}

template <class P, int HS>
__global__ void __launch_bounds__(THREADS) flash_backward_dq_mma_kernel(typename P::global *dq, const float *delta,
                                                                        const typename P::global *dout,
                                                                        const typename P::global *q,
                                                                        const typename P::global *kv,
                                                                        const float *lse, tri_flash_mma_cut c,
                                                                        int64_t n_tiles)
{
    extern __shared__ __align__(128) unsigned char smem[];
    flash_backward_dq_mma_body<P, HS>(smem, dq, delta, dout, q, kv, lse, c, n_tiles);
}

#endif

/* ---- host side ---- */

#define FLASH_CHECK(expr, what) tri_cuda_check((expr), what, __FILE__, __LINE__)

#if !defined(TRI_CUDA_EMU_HOST)
/* rc when it is an error, else launch()'s status */
template <class F>
static int flash_then(int rc, F launch)
{
    return rc ? rc : launch();
}

/* kernel<P, HS> on a gx x gy grid of THREADS-lane blocks with `bytes` of dynamic shared memory, opted
 * in first (above 48 KiB a kernel must ask for it) */
#define FLASH_LAUNCH(kernel, body, gx, gy, bytes, s, ...)                                          \
    flash_then(FLASH_CHECK(cudaFuncSetAttribute(kernel<P, HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,   \
                                                (int)(bytes)),                                     \
                           "cudaFuncSetAttribute(" #kernel ")"),                                   \
               [&] {                                                                               \
                   kernel<P, HS><<<dim3((unsigned)(gx), (unsigned)(gy)), THREADS, bytes, s>>>(__VA_ARGS__); \
                   return FLASH_CHECK(cudaGetLastError(), "launch of " #kernel);                   \
               })
#else
/* the emulated CUDA build (tests/cuda_emu/): the kernel's body on mma_shim.h's emulated blocks, whose
 * shared memory starts as NaN bytes */
#define FLASH_LAUNCH(kernel, body, gx, gy, bytes, s, ...)                                          \
    (tri_mma_emu_launch((gx), (gy), THREADS, (bytes), (s), tri_mma_emu_bind(body<P, HS>, __VA_ARGS__)), \
     TRI_OK)
#endif

/* a block per (query tile, b, query head) */
template <class P, int HS>
static int forward_hs(cudaStream_t s, void *out, float *lse, const void *q, const void *kv, tri_flash_mma_cut c)
{
    typedef typename P::global G;
    size_t bytes = fwd_layout<P, HS>::bytes;
    int64_t tiles = (c.d.T + TILE - 1) / TILE;
    return FLASH_LAUNCH(flash_forward_mma_kernel, flash_forward_mma_body, tiles, c.d.B * c.d.NH, bytes, s, (G *)out,
                        lse, (const G *)q, (const G *)kv, c, tiles);
}

/* dk and dv: a block per (key tile, b, key/value head) */
template <class P, int HS>
static int dkv_hs(cudaStream_t s, void *dkv, const float *delta, const void *dout, const void *q, const void *kv,
                  const float *lse, tri_flash_mma_cut c)
{
    typedef typename P::global G;
    size_t bytes = bwd_layout<P, HS>::bytes;
    int64_t tiles = (c.Tk + TILE - 1) / TILE;
    return FLASH_LAUNCH(flash_backward_dkv_mma_kernel, flash_backward_dkv_mma_body, tiles, c.d.B * c.d.NH_kv, bytes,
                        s, (G *)dkv, delta, (const G *)dout, (const G *)q, (const G *)kv, lse, c, tiles);
}

/* the same with dk, dv stored fp32 */
template <class P, int HS>
static int dkv_f32_hs(cudaStream_t s, float *dkv, const float *delta, const void *dout, const void *q, const void *kv,
                      const float *lse, tri_flash_mma_cut c)
{
    typedef typename P::global G;
    size_t bytes = bwd_layout<P, HS>::bytes;
    int64_t tiles = (c.Tk + TILE - 1) / TILE;
    return FLASH_LAUNCH(flash_backward_dkv_f32_mma_kernel, flash_backward_dkv_f32_mma_body, tiles, c.d.B * c.d.NH_kv,
                        bytes, s, dkv, delta, (const G *)dout, (const G *)q, (const G *)kv, lse, c, tiles);
}

/* dq: a block per (query tile, b, query head) */
template <class P, int HS>
static int dq_hs(cudaStream_t s, void *dq, const float *delta, const void *dout, const void *q, const void *kv,
                 const float *lse, tri_flash_mma_cut c)
{
    typedef typename P::global G;
    size_t bytes = bwd_layout<P, HS>::bytes;
    int64_t tiles = (c.d.T + TILE - 1) / TILE;
    return FLASH_LAUNCH(flash_backward_dq_mma_kernel, flash_backward_dq_mma_body, tiles, c.d.B * c.d.NH, bytes, s,
                        (G *)dq, delta, (const G *)dout, (const G *)q, (const G *)kv, lse, c, tiles);
}

template <class P, int HS>
static size_t smem_hs(bool backward)
{
    return backward ? bwd_layout<P, HS>::bytes : fwd_layout<P, HS>::bytes;
}

bool tri_flash_mma_supports(int64_t HS)
{
    return tri_flash_mma_head_size(HS);
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

size_t tri_flash_mma_smem_bytes(int64_t HS, bool bf16, bool backward)
{
#define SMEM(P, hs) smem_hs<P, hs>(backward)
    FLASH_DISPATCH(SMEM, 0)
#undef SMEM
}

int tri_flash_mma_kv_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *q, const void *kv,
                             tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
#define FWD(P, hs) forward_hs<P, hs>(stream, out, lse, q, kv, c)
    FLASH_DISPATCH(FWD, NO_KERNEL)
#undef FWD
}

int tri_flash_mma_kv_backward_dq(cudaStream_t stream, bool bf16, void *dq, const float *delta, const void *dout,
                                 const void *q, const void *kv, const float *lse, tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
#define DQ(P, hs) dq_hs<P, hs>(stream, dq, delta, dout, q, kv, lse, c)
    FLASH_DISPATCH(DQ, NO_KERNEL)
#undef DQ
}

int tri_flash_mma_kv_backward_dkv(cudaStream_t stream, bool bf16, bool dkv_f32, void *dkv, const float *delta,
                                  const void *dout, const void *q, const void *kv, const float *lse,
                                  tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
    if (bf16 && dkv_f32) {
#define DKV32(P, hs) dkv_f32_hs<P, hs>(stream, (float *)dkv, delta, dout, q, kv, lse, c)
        FLASH_HEAD_SIZES(DKV32, tri_flash_bf16_mma, NO_KERNEL)
#undef DKV32
    }
#define DKV(P, hs) dkv_hs<P, hs>(stream, dkv, delta, dout, q, kv, lse, c)
    FLASH_DISPATCH(DKV, NO_KERNEL)
#undef DKV
}

int tri_flash_mma_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *qkv, tri_flash_dims d)
{
    return tri_flash_mma_kv_forward(stream, bf16, out, lse, qkv, qkv, tri_flash_mma_whole(d));
}

/* dk, dv first, then dq (as before the kv forms: the same launches in the same order) */
int tri_flash_mma_backward(cudaStream_t stream, bool bf16, void *dqkv, const float *delta, const void *dout,
                           const void *qkv, const float *lse, tri_flash_dims d)
{
    tri_flash_mma_cut c = tri_flash_mma_whole(d);
    int rc = tri_flash_mma_kv_backward_dkv(stream, bf16, false, dqkv, delta, dout, qkv, qkv, lse, c);
    if (!rc) rc = tri_flash_mma_kv_backward_dq(stream, bf16, dqkv, delta, dout, qkv, qkv, lse, c);
    return rc;
}
