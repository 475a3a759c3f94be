/* cuda/attention/flash_mma_cut.cu - the tiled attention kernels' cut form (CUT true: a cut sequence's
 * queries against keys in their own buffer at global positions, skipped masked tiles, accumulation),
 * which context parallelism's kv ops launch for any problem but today's whole one (flash_mma.cu keeps
 * that one, the uncut form). Its own translation unit so that nvcc compiles the two forms in parallel;
 * kernels and launchers: flash_mma_launch.cuh. */
#include "cuda/attention/flash_mma_launch.cuh"

int tri_flash_mma_cut_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *q, const void *kv,
                              tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
#define FWD(P, hs) forward_hs<P, hs, true>(stream, out, lse, q, kv, c)
    FLASH_DISPATCH(FWD, NO_KERNEL)
#undef FWD
}

int tri_flash_mma_cut_backward_dq(cudaStream_t stream, bool bf16, void *dq, const float *delta, const void *dout,
                                  const void *q, const void *kv, const float *lse, tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
#define DQ(P, hs) dq_hs<P, hs, true>(stream, dq, delta, dout, q, kv, lse, c)
    FLASH_DISPATCH(DQ, NO_KERNEL)
#undef DQ
}

/* dk, dv stored as P's global type, or fp32 beside bf16 operands (dkv_f32) */
int tri_flash_mma_cut_backward_dkv(cudaStream_t stream, bool bf16, bool dkv_f32, void *dkv, const float *delta,
                                   const void *dout, const void *q, const void *kv, const float *lse,
                                   tri_flash_mma_cut c)
{
    int64_t HS = c.d.HS;
    if (bf16 && dkv_f32) {
#define DKV32(P, hs) dkv_hs<P, hs, true, float>(stream, dkv, delta, dout, q, kv, lse, c)
        FLASH_HEAD_SIZES(DKV32, tri_flash_bf16_mma, NO_KERNEL)
#undef DKV32
    }
#define DKV(P, hs) dkv_hs<P, hs, true, P::global>(stream, dkv, delta, dout, q, kv, lse, c)
    FLASH_DISPATCH(DKV, NO_KERNEL)
#undef DKV
}
