/* cuda/flash.cu - fused causal attention (FlashAttention-2, Dao 2023) on the GPU.
 *
 * Two forms of engine/core/math.h's tiled algorithm, neither storing a (T, T) matrix:
 * - the simple twins of cuda/kernels/flash.kern.h (a thread per query or key row), which the CPU
 *   suite runs against the CPU backend and which the device's simple switch selects;
 * - the tensor-core kernels of cuda/flash_mma.cu (bf16 operands, fp32 accumulation; bodies in
 *   cuda/kernels/flash_mma.kern.h, which the CPU suite runs in an emulation), used when qkv, out,
 *   dout and dqkv are all bf16 and the head size is one they are built for.
 * Backward: delta = rowsum(dout * out) first, then dq and dk/dv from separate launches (no atomics,
 * a fixed order of every sum: deterministic, as --deterministic-mode needs). */
#include <math.h>

#include "cuda/device_cuda.h"
#include "cuda/flash_mma.h"
#include "cuda/kernels/flash.kern.h"
#include "cuda/launch.cuh"
#include "cuda/warp.cuh"

/* Whether the tensor-core kernels take this problem: bf16 tensors on 16-byte boundaries (their tile
 * loads), a head size they are built for, and B * NH within a grid's y dimension. */
static bool mma_path(const tri_cuda *cu, tri_flash_dims f, tri_tensor a, tri_tensor b, tri_tensor c)
{
    return !cu->simple && tri_is_bf16(a) && tri_is_bf16(b) && tri_is_bf16(c) && tri_aligned16_host(a.data) &&
           tri_aligned16_host(b.data) && tri_aligned16_host(c.data) && tri_flash_mma_supports(f.HS) &&
           f.B * f.NH <= 65535;
}

static int check_head(const char *op, tri_flash_dims f)
{
    if (f.HS > TRI_FLASH_MAX_HS)
        return TRI_ERR(TRI_ENOTSUP, "%s: head size %lld is above the CUDA kernels' %d", op, (long long)f.HS,
                       TRI_FLASH_MAX_HS);
    return TRI_OK;
}

extern "C" int tri_cuda_flash_attention_forward(tri_device *dev, tri_tensor out, tri_tensor lse, tri_tensor qkv)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_dims f = tri_flash_dims_of(qkv, out, lse);
    int rc = check_head("flash_attention_forward", f);
    if (rc)
        return rc;
    if (mma_path(cu, f, qkv, out, out))
        return tri_flash_mma_forward(cu->stream, out.data, tri_fp(lse), qkv.data, f);
    return TRI_CUDA_LAUNCH_N(flash_forward_kernel, f.B * f.NH * f.T, cu->stream, tri_data(out), tri_is_bf16(out),
                             tri_fp(lse), tri_data(qkv), tri_is_bf16(qkv), f);
}

extern "C" int tri_cuda_flash_attention_backward(tri_device *dev, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                                 tri_tensor qkv, tri_tensor out, tri_tensor lse)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_dims f = tri_flash_dims_of(qkv, dout, lse);
    int64_t rows = f.B * f.NH * f.T, kv_rows = f.B * f.NH_kv * f.T;
    int rc = check_head("flash_attention_backward", f);
    if (rc)
        return rc;
    rc = TRI_CUDA_LAUNCH_N(flash_backward_delta_kernel, rows, cu->stream, tri_fp(delta), tri_data(dout),
                           tri_is_bf16(dout), tri_data(out), tri_is_bf16(out), f);
    if (rc)
        return rc;
    if (mma_path(cu, f, qkv, dout, dqkv))
        return tri_flash_mma_backward(cu->stream, dqkv.data, tri_fp(delta), dout.data, qkv.data, tri_fp(lse), f);
    rc = TRI_CUDA_LAUNCH_N(flash_backward_dq_kernel, rows, cu->stream, tri_data(dqkv), tri_is_bf16(dqkv),
                           tri_data(dout), tri_is_bf16(dout), tri_data(qkv), tri_is_bf16(qkv), tri_fp(lse),
                           tri_fp(delta), f);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(flash_backward_dkv_kernel, kv_rows, cu->stream, tri_data(dqkv), tri_is_bf16(dqkv),
                                    tri_data(dout), tri_is_bf16(dout), tri_data(qkv), tri_is_bf16(qkv), tri_fp(lse),
                                    tri_fp(delta), f);
    return rc;
}
