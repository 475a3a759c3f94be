/* cuda/attention/flash_mma.cu - the tiled fused attention kernels as CUDA kernels, and their launches.
 *
 * The kernel bodies (and their description) are cuda/attention/flash_mma.kern.h, shared with the CPU
 * emulation that tests them (tests/test_flash_mma_cpu.cpp); here each is a __global__ function per
 * precision (bf16 on the tensor cores, fp32 on the CUDA cores), head size and form, each taking the
 * problem of cuda/attention/flash_cut.h: the uncut form (CUT false) for today's problem, which
 * tri_flash_mma_forward / _backward and the kv ops on that problem launch (whole_problem), the cut
 * form for a cut sequence's queries against keys in their own buffer at global positions (context
 * parallelism's kv ops); each with its dynamic shared memory (above 48 KiB: opted in per kernel
 * before each launch, FLASH_LAUNCH). The cut form is instantiated in flash_mma_cut.cu (kernels and
 * launchers: flash_mma_launch.cuh). The emulated CUDA build
 * (tests/cuda_emu/) runs the same bodies through mma_shim.h's launch instead. */
#include "cuda/attention/flash_mma_launch.cuh"

template <class P, int HS>
static size_t smem_hs(bool backward)
{
    return backward ? bwd_layout<P, HS>::bytes : fwd_layout<P, HS>::bytes;
}

bool tri_flash_mma_supports(int64_t HS)
{
    return tri_flash_mma_head_size(HS);
}

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
    return tri_flash_mma_cut_forward(stream, bf16, out, lse, q, kv, c);
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
    return tri_flash_mma_cut_backward_dq(stream, bf16, dq, delta, dout, q, kv, lse, c);
}

int tri_flash_mma_kv_backward_dkv(cudaStream_t stream, bool bf16, bool dkv_f32, void *dkv, const float *delta,
                                  const void *dout, const void *q, const void *kv, const float *lse,
                                  tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
    if (!(bf16 && dkv_f32) && whole_problem(q, kv, c)) {
#define DKV(P, hs) dkv_hs<P, hs, false, P::global>(stream, dkv, delta, dout, q, kv, lse, c)
        FLASH_DISPATCH(DKV, NO_KERNEL)
#undef DKV
    }
    return tri_flash_mma_cut_backward_dkv(stream, bf16, dkv_f32, dkv, delta, dout, q, kv, lse, c);
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
