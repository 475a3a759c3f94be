/* cuda/attention/flash.cu - fused causal attention (FlashAttention-2, Dao 2023) on the GPU.
 *
 * Two forms of engine/device/ops/attention_math.h's tiled algorithm, neither storing a (T, T) matrix:
 * - the simple twins of cuda/attention/flash.kern.h (a thread per query or key row), which the CPU
 *   suite runs against the CPU backend and which the device's simple switch selects;
 * - the tiled kernels of cuda/attention/flash_mma.cu (bodies in cuda/attention/flash_mma.kern.h, which the CPU
 *   suite runs in an emulation): bf16 operands on the tensor cores with fp32 accumulation, fp32
 *   operands on the CUDA cores, used when qkv, out, dout and dqkv are all bf16 or all fp32 and the
 *   head size is one they are built for (mixed precisions and other head sizes: the twins).
 * Backward: delta = rowsum(dout * out) first, then dq and dk/dv from separate launches (no atomics,
 * a fixed order of every sum: deterministic, as --deterministic-mode needs). */
#include <math.h>

#include "cuda/device_cuda.h"
#include "cuda/attention/flash_mma.h"
#include "cuda/attention/flash.kern.h"
#include "cuda/attention/flash_delta_fast.cuh"
#include "cuda/launch.cuh"
#include "cuda/warp.cuh"
#include "engine/device/ops/attention_math.h"

/* Whether the tiled kernels take this problem: all three tensors bf16 (the tensor cores) or all
 * fp32 (the CUDA cores), on 16-byte boundaries (their tile loads), a head size they are built for,
 * B * NH within a grid's y dimension, and their shared memory within this device's opt-in limit
 * (fp32 at head size 128 needs 167 KiB in the backward: an H100 or H200 has it, an A100 not). */
static bool tiled_path(const tri_cuda *cu, tri_flash_dims f, tri_tensor a, tri_tensor b, tri_tensor c, bool backward)
{
    bool bf16 = tri_is_bf16(a) && tri_is_bf16(b) && tri_is_bf16(c);
    bool fp32 = !tri_is_bf16(a) && !tri_is_bf16(b) && !tri_is_bf16(c);
    return !cu->simple && (bf16 || fp32) && tri_aligned16_host(a.data) && tri_aligned16_host(b.data) &&
           tri_aligned16_host(c.data) && tri_flash_mma_supports(f.HS) && f.B * f.NH <= 65535 &&
           tri_flash_mma_smem_bytes(f.HS, bf16, backward) <= cu->smem_optin;
}

/* delta = rowsum(dout * out) per (b, h, t): the fast kernel (the same bits, coalesced:
 * flash_delta_fast.cuh) or the simple twin. Only f.B, f.T, f.NH and f.HS are read. */
static int launch_delta(tri_cuda *cu, tri_tensor delta, tri_tensor dout, tri_tensor out, tri_flash_dims f)
{
    int64_t rows = f.B * f.NH * f.T;
    if (!cu->simple && f.HS <= TRI_DELTA_MAX_HS)
        return TRI_CUDA_LAUNCH(flash_backward_delta_fast_kernel,
                               tri_row_blocks((rows + TRI_DELTA_ROWS - 1) / TRI_DELTA_ROWS), TRI_DELTA_THREADS,
                               cu->stream, tri_fp(delta), tri_data(dout), tri_is_bf16(dout), tri_data(out),
                               tri_is_bf16(out), f);
    return TRI_CUDA_LAUNCH_N(flash_backward_delta_kernel, rows, cu->stream, tri_fp(delta), tri_data(dout),
                             tri_is_bf16(dout), tri_data(out), tri_is_bf16(out), f);
}

extern "C" int tri_cuda_flash_attention_forward(tri_device *dev, tri_tensor out, tri_tensor lse, tri_tensor qkv)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_dims f = tri_flash_dims_of(qkv, out, lse);
    int rc = tri_flash_check_head("flash_attention_forward", f);
    if (rc)
        return rc;
    if (tiled_path(cu, f, qkv, out, out, false))
        return tri_flash_mma_forward(cu->stream, tri_is_bf16(out), out.data, tri_fp(lse), qkv.data, f);
    return TRI_CUDA_LAUNCH_N(flash_forward_kernel, f.B * f.NH * f.T, cu->stream, tri_data(out), tri_is_bf16(out),
                             tri_fp(lse), tri_data(qkv), tri_is_bf16(qkv), f);
}

extern "C" int tri_cuda_flash_attention_backward(tri_device *dev, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                                 tri_tensor qkv, tri_tensor out, tri_tensor lse)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_dims f = tri_flash_dims_of(qkv, dout, lse);
    int64_t rows = f.B * f.NH * f.T, kv_rows = f.B * f.NH_kv * f.T;
    int rc = tri_flash_check_head("flash_attention_backward", f);
    if (!rc) rc = launch_delta(cu, delta, dout, out, f);
    if (rc)
        return rc;
    if (tiled_path(cu, f, qkv, dout, dqkv, true))
        return tri_flash_mma_backward(cu->stream, tri_is_bf16(dqkv), dqkv.data, tri_fp(delta), dout.data, qkv.data,
                                      tri_fp(lse), f);
    rc = TRI_CUDA_LAUNCH_N(flash_backward_dq_kernel, rows, cu->stream, tri_data(dqkv), tri_is_bf16(dqkv),
                           tri_data(dout), tri_is_bf16(dout), tri_data(qkv), tri_is_bf16(qkv), tri_fp(lse),
                           tri_fp(delta), f);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(flash_backward_dkv_kernel, kv_rows, cu->stream, tri_data(dqkv), tri_is_bf16(dqkv),
                                    tri_data(dout), tri_is_bf16(dout), tri_data(qkv), tri_is_bf16(qkv), tri_fp(lse),
                                    tri_fp(delta), f);
    return rc;
}

/* flash_attention_delta: the backward's first step alone (context parallelism gathers it). */
extern "C" int tri_cuda_flash_attention_delta(tri_device *dev, tri_tensor delta, tri_tensor dout, tri_tensor out)
{
    tri_flash_dims f = {delta.shape[0], delta.shape[2], delta.shape[1], delta.shape[1], dout.shape[2] / delta.shape[1]};
    return launch_delta(tri_cuda_of(dev), delta, dout, out, f);
}
