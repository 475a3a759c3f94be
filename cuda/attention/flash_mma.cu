/* cuda/attention/flash_mma.cu - the tiled fused attention kernels as CUDA kernels, and their launches.
 *
 * The kernel bodies (and their description) are cuda/attention/flash_mma.kern.h, shared with the CPU
 * emulation that tests them (tests/test_flash_mma_cpu.cpp); here each is a __global__ function per
 * precision (bf16 on the tensor cores, fp32 on the CUDA cores), head size and form, each taking the
 * problem of cuda/attention/flash_cut.h: the uncut form (CUT false) for today's problem, which
 * tri_flash_mma_forward / _backward and the kv ops on that problem launch (whole_problem), the cut
 * form for a cut sequence's queries against keys in their own buffer at global positions (context
 * parallelism's kv ops); each with its dynamic shared memory (above 48 KiB: opted in per kernel
 * before each launch, FLASH_LAUNCH). The emulated CUDA build
 * (tests/cuda_emu/) runs the same bodies through mma_shim.h's launch instead. */
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
 * shared memory starts as NaN bytes */
template <class F, class... A>
static int flash_launch(F body, size_t bytes, int64_t rows, int64_t y, cudaStream_t s, A... args)
{
    int64_t tiles = (rows + TILE - 1) / TILE;
    tri_mma_emu_launch(tiles, y, THREADS, bytes, s, tri_mma_emu_bind(body, args..., tiles));
    return TRI_OK;
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

/* Whether c is today's problem with q the keys' buffer (tri_flash_mma_whole's, overwriting): the
 * kernels' uncut instantiation takes it (the same bits as the cut one, fewer registers). */
static bool whole_problem(const void *q, const void *kv, tri_flash_mma_cut c)
{
    bool one = q == kv && c.W == tri_flash_width(c.d) && c.Wk == c.W && c.Tk == c.d.T && !c.accumulate;
    return one && c.qr.Tc >= c.d.T && c.qr.pos0 == 0 && c.kr.Tc >= c.Tk && c.kr.pos0 == 0;
}

int tri_flash_mma_kv_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *q, const void *kv,
                             tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
    if (whole_problem(q, kv, c)) {
#define FWD(P, hs) forward_hs<P, hs, false>(stream, out, lse, q, kv, c)
        FLASH_DISPATCH(FWD, NO_KERNEL)
#undef FWD
    }
#define FWD(P, hs) forward_hs<P, hs, true>(stream, out, lse, q, kv, c)
    FLASH_DISPATCH(FWD, NO_KERNEL)
#undef FWD
}

int tri_flash_mma_kv_backward_dq(cudaStream_t stream, bool bf16, void *dq, const float *delta, const void *dout,
                                 const void *q, const void *kv, const float *lse, tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
    if (whole_problem(q, kv, c)) {
#define DQ(P, hs) dq_hs<P, hs, false>(stream, dq, delta, dout, q, kv, lse, c)
        FLASH_DISPATCH(DQ, NO_KERNEL)
#undef DQ
    }
#define DQ(P, hs) dq_hs<P, hs, true>(stream, dq, delta, dout, q, kv, lse, c)
    FLASH_DISPATCH(DQ, NO_KERNEL)
#undef DQ
}

int tri_flash_mma_kv_backward_dkv(cudaStream_t stream, bool bf16, bool dkv_f32, void *dkv, const float *delta,
                                  const void *dout, const void *q, const void *kv, const float *lse,
                                  tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
    if (bf16 && dkv_f32) {
#define DKV32(P, hs) dkv_hs<P, hs, true, float>(stream, dkv, delta, dout, q, kv, lse, c)
        FLASH_HEAD_SIZES(DKV32, tri_flash_bf16_mma, NO_KERNEL)
#undef DKV32
    }
    if (whole_problem(q, kv, c)) {
#define DKV(P, hs) dkv_hs<P, hs, false, P::global>(stream, dkv, delta, dout, q, kv, lse, c)
        FLASH_DISPATCH(DKV, NO_KERNEL)
#undef DKV
    }
#define DKV(P, hs) dkv_hs<P, hs, true, P::global>(stream, dkv, delta, dout, q, kv, lse, c)
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
