/* cuda/attention/flash_kv.cu - fused attention across a split sequence (context parallelism) on the
 * GPU: the launchers of engine/device/ops_list.h's flash_attention_kv_forward, _kv_backward_dq,
 * _kv_backward_dkv, flash_attention_merge and copy_columns (flash_attention_delta is flash.cu's
 * first backward step, launched there).
 *
 * Two forms: the tiled kernels of cuda/attention/flash_mma.cu (the fast path: bf16 on the tensor
 * cores, fp32 on the CUDA cores; queries and keys in their own buffers at global positions, fully
 * masked tiles skipped, cuda/attention/flash_cut.h) where they take the problem (tiled_kv below),
 * else the simple twins of cuda/attention/flash_kv.kern.h (a thread per row), which the simple
 * switch also selects. Today's problem through the kv ops runs the same tiled launches as
 * flash_attention_forward / _backward, so it gives their bits. */
#include <math.h>

#include "cuda/device_cuda.h"
#include "cuda/attention/flash_kv.kern.h"
#include "cuda/attention/flash_mma.h"
#include "cuda/warp.cuh"
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

/* Today's problem: one chunk at 0 on both sides, the keys the queries' own buffer. */
static bool whole(tri_flash_rows r, int64_t n)
{
    return r.Tc >= n && r.pos0 == 0;
}

static tri_flash_mma_cut cut_of(tri_flash_kv p, bool accumulate)
{
    tri_flash_mma_cut c;
    c.d = p.d;
    c.W = tri_flash_width(p.d);
    c.Tk = p.Tk;
    c.Wk = p.Wk;
    c.qr = p.qr;
    c.kr = p.kr;
    c.accumulate = accumulate ? 1 : 0;
    return c;
}

/* Whether the tiled kernels take problem p with the n tensors t (its global operands, t[0] the
 * output): not the simple switch; all bf16 (the tensor cores) or all fp32 (the CUDA cores), the
 * output also fp32 beside bf16 where f32_out allows (dk, dv); on 16-byte boundaries, with rows of
 * whole 16-byte units (the tile copies); a head size they are built for; each side one chunk or
 * chunks of whole tiles; B * NH within a grid's y dimension; their shared memory within this
 * device's opt-in limit. */
static bool tiled_kv(const tri_cuda *cu, tri_flash_kv p, const tri_tensor *t, int n, bool backward, bool f32_out)
{
    bool bf16 = tri_is_bf16(t[1]), ok = !cu->simple;
    size_t e = bf16 ? 2 : 4;
    ok = ok && (tri_is_bf16(t[0]) == bf16 || (f32_out && bf16 && t[0].dtype == TRI_F32));
    for (int i = 0; i < n; i++)
        ok = ok && (i == 0 || tri_is_bf16(t[i]) == bf16) && tri_aligned16_host(t[i].data);
    return ok && tri_flash_width(p.d) * e % 16 == 0 && p.Wk * e % 16 == 0 && tri_flash_mma_supports(p.d.HS) &&
           tri_flash_mma_rows_ok(p.qr, p.d.T) && tri_flash_mma_rows_ok(p.kr, p.Tk) && p.d.B * p.d.NH <= 65535 &&
           tri_flash_mma_smem_bytes(p.d.HS, bf16, backward) <= cu->smem_optin;
}

/* The calls of the kv ops that took the tiled kernels, per device (tests assert the path). */
extern "C" int64_t tri_cuda_flash_kv_tiled_calls(tri_device *dev)
{
    return tri_cuda_of(dev)->flash_kv_tiled;
}

/* Where a kv op goes (every op's prologue, kv_path below): an error (rc), nothing to do (done), the
 * tiled kernels (tiled, counted) or the simple twins. */
typedef struct {
    int rc;
    bool done, tiled;
} kv_route;

/* The route of op's problem p with `items` outputs (rows of the op's kernels; none: done) and the n
 * tensors t as tiled_kv takes them. */
static kv_route kv_path(tri_cuda *cu, const char *op, tri_flash_kv p, int64_t items, const tri_tensor *t, int n,
                        bool backward, bool f32_out)
{
    kv_route r = {tri_flash_check_head(op, p.d), false, false};
    r.done = r.rc != TRI_OK || items == 0;
    r.tiled = !r.done && tiled_kv(cu, p, t, n, backward, f32_out);
    if (r.tiled)
        cu->flash_kv_tiled++;
    return r;
}

extern "C" int tri_cuda_flash_attention_kv_forward(tri_device *dev, tri_tensor out, tri_tensor lse, tri_tensor qkv,
                                                   tri_tensor kv, tri_flash_rows qrows, tri_flash_rows krows)
{
    tri_cuda *cu = tri_cuda_of(dev);
    tri_flash_kv p = problem_of(qkv, out, lse, kv, qrows, krows);
    tri_tensor ts[3] = {out, qkv, kv};
    kv_route r = kv_path(cu, "flash_attention_kv_forward", p, p.d.B * p.d.NH * p.d.T, ts, 3, false, false);
    if (r.done)
        return r.rc;
    if (r.tiled)
        return tri_flash_mma_kv_forward(cu->stream, tri_is_bf16(out), out.data, tri_fp(lse), qkv.data, kv.data,
                                        cut_of(p, false));
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
    tri_tensor ts[4] = {dqkv, dout, qkv, kv};
    kv_route r = kv_path(cu, "flash_attention_kv_backward_dq", p, p.d.B * p.d.NH * p.d.T, ts, 4, true, false);
    if (r.done)
        return r.rc;
    if (r.tiled)
        return tri_flash_mma_kv_backward_dq(cu->stream, tri_is_bf16(dqkv), dqkv.data, tri_fp(delta), dout.data,
                                            qkv.data, kv.data, tri_fp(lse), cut_of(p, accumulate));
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
    tri_tensor ts[4] = {dkv, dout, qkv, kv};
    kv_route r = kv_path(cu, "flash_attention_kv_backward_dkv", p, p.d.B * p.d.NH_kv * p.Tk, ts, 4, true, true);
    if (r.done)
        return r.rc;
    if (r.tiled)
        return tri_flash_mma_kv_backward_dkv(cu->stream, tri_is_bf16(qkv), !tri_is_bf16(dkv), dkv.data, tri_fp(delta),
                                             dout.data, qkv.data, kv.data, tri_fp(lse), cut_of(p, accumulate));
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
