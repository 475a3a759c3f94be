/* cuda/attention/flash_kv.cu - fused attention across a split sequence (context parallelism) on the
 * GPU: the launchers of engine/device/ops_list.h's flash_attention_kv_forward, _kv_backward_dq,
 * _kv_backward_dkv, flash_attention_merge and copy_columns (flash_attention_delta is flash.cu's
 * first backward step, launched there).
 *
 * The simple twins of cuda/attention/flash_kv.kern.h run every problem. The fast path is taken
 * where the problem is today's (one chunk at position 0, kv the same buffer as qkv): the forward
 * then is flash_attention_forward (the tiled kernels of flash_mma.cu). Not built yet: the tiled
 * kernels with row offsets and two buffers (the MMA bodies take one qkv and positions from 0), so a
 * cut sequence runs the twins (a thread per row: correct, not fast). */
#include <math.h>

#include "cuda/device_cuda.h"
#include "cuda/attention/flash_kv.kern.h"
#include "cuda/launch.cuh"
#include "engine/device/ops/attention_math.h"

static tri_flash_kv problem_of(tri_tensor qkv, tri_tensor out, tri_tensor lse, tri_tensor kv, tri_flash_rows qrows,
                               tri_flash_rows krows)
{
    tri_flash_kv p;
    p.d = tri_flash_dims_of(qkv, out, lse);
    p.Tk = kv.shape[1];
    p.Wk = kv.shape[2];
    p.qr = qrows;
    p.kr = krows;
    return p;
}

static int check_head(const char *op, tri_flash_dims f)
{
    if (f.HS > TRI_FLASH_MAX_HS)
        return TRI_ERR(TRI_ENOTSUP, "%s: head size %lld is above the CUDA kernels' %d", op, (long long)f.HS,
                       TRI_FLASH_MAX_HS);
    return TRI_OK;
}

/* Today's problem: one chunk at 0 on both sides, the keys the queries' own buffer. */
static bool whole(tri_flash_rows r, int64_t n)
{
    return r.Tc >= n && r.pos0 == 0;
}

extern "C" int tri_cuda_flash_attention_kv_forward(tri_device *dev, tri_tensor out, tri_tensor lse, tri_tensor qkv,
                                                   tri_tensor kv, tri_flash_rows qrows, tri_flash_rows krows)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_kv p = problem_of(qkv, out, lse, kv, qrows, krows);
    int rc = check_head("flash_attention_kv_forward", p.d);
    if (rc)
        return rc;
    if (kv.data == qkv.data && kv.dtype == qkv.dtype && p.Tk == p.d.T && p.Wk == tri_flash_width(p.d) &&
        whole(qrows, p.d.T) && whole(krows, p.Tk))
        return tri_cuda_flash_attention_forward(dev, out, lse, qkv);
    return TRI_CUDA_LAUNCH_N(flash_kv_forward_kernel, p.d.B * p.d.NH * p.d.T, cu->stream, tri_data(out),
                             tri_is_bf16(out), tri_fp(lse), tri_data(qkv), tri_is_bf16(qkv), tri_data(kv),
                             tri_is_bf16(kv), p);
}

extern "C" int tri_cuda_flash_attention_kv_backward_dq(tri_device *dev, tri_tensor dqkv, tri_tensor dout,
                                                       tri_tensor qkv, tri_tensor kv, tri_tensor lse, tri_tensor delta,
                                                       tri_flash_rows qrows, tri_flash_rows krows, bool accumulate)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_kv p = problem_of(qkv, dout, lse, kv, qrows, krows);
    int rc = check_head("flash_attention_kv_backward_dq", p.d);
    if (rc)
        return rc;
    return TRI_CUDA_LAUNCH_N(flash_kv_backward_dq_kernel, p.d.B * p.d.NH * p.d.T, cu->stream, tri_data(dqkv),
                             tri_is_bf16(dqkv), tri_data(dout), tri_is_bf16(dout), tri_data(qkv), tri_is_bf16(qkv),
                             tri_data(kv), tri_is_bf16(kv), tri_fp(lse), tri_fp(delta), p, accumulate ? 1 : 0);
}

extern "C" int tri_cuda_flash_attention_kv_backward_dkv(tri_device *dev, tri_tensor dkv, tri_tensor dout,
                                                        tri_tensor qkv, tri_tensor kv, tri_tensor lse,
                                                        tri_tensor delta, tri_flash_rows qrows, tri_flash_rows krows,
                                                        bool accumulate)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_kv p = problem_of(qkv, dout, lse, kv, qrows, krows);
    int rc = check_head("flash_attention_kv_backward_dkv", p.d);
    if (rc)
        return rc;
    return TRI_CUDA_LAUNCH_N(flash_kv_backward_dkv_kernel, p.d.B * p.d.NH_kv * p.Tk, cu->stream, tri_data(dkv),
                             tri_is_bf16(dkv), tri_data(dout), tri_is_bf16(dout), tri_data(qkv), tri_is_bf16(qkv),
                             tri_data(kv), tri_is_bf16(kv), tri_fp(lse), tri_fp(delta), p, accumulate ? 1 : 0);
}

/* The simple twin of the one-pass backward: the dq pass's kernel, then the dk, dv pass's (a thread per
 * row each, recomputing P and dS; the CPU's one pass gives the same results as its two passes). */
extern "C" int tri_cuda_flash_attention_kv_backward(tri_device *dev, tri_tensor dqkv, tri_tensor dkv, tri_tensor dout,
                                                    tri_tensor qkv, tri_tensor kv, tri_tensor lse, tri_tensor delta,
                                                    tri_flash_rows qrows, tri_flash_rows krows, bool accumulate)
{
    int rc = tri_cuda_flash_attention_kv_backward_dq(dev, dqkv, dout, qkv, kv, lse, delta, qrows, krows, accumulate);
    return rc ? rc
              : tri_cuda_flash_attention_kv_backward_dkv(dev, dkv, dout, qkv, kv, lse, delta, qrows, krows, accumulate);
}

extern "C" int tri_cuda_flash_attention_merge(tri_device *dev, tri_tensor out, tri_tensor lse, tri_tensor out2,
                                              tri_tensor lse2)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_dims f = {lse.shape[0], lse.shape[2], lse.shape[1], lse.shape[1], out.shape[2] / lse.shape[1]};
    return TRI_CUDA_LAUNCH_N(flash_merge_kernel, f.B * f.T * f.NH, cu->stream, tri_data(out), tri_is_bf16(out),
                             tri_fp(lse), tri_data(out2), tri_is_bf16(out2), tri_fp(lse2), f);
}

extern "C" int tri_cuda_copy_columns(tri_device *dev, tri_tensor dst, int64_t dst_col, tri_tensor src,
                                     int64_t src_col, int64_t n)
{
    tri_cuda *cu = tri_cuda_of(dev);
    int64_t N = tri_tensor_rows(dst);
    return TRI_CUDA_LAUNCH_N(copy_columns_kernel, N * n, cu->stream, tri_data(dst), tri_is_bf16(dst),
                             tri_tensor_cols(dst), dst_col, tri_data(src), tri_is_bf16(src), tri_tensor_cols(src),
                             src_col, N, n);
}
