/* engine/device/ops/attention_cpu.c - the attention ops on the CPU backend.
 *
 * Causal attention per (batch, head): scores = q k^T * scale and the products with v are OpenBLAS
 * sgemms, the causal softmax (and its backward) a row at a time by engine/device/ops/attention_math.h, parallel
 * over (batch, head). Fused attention is engine/device/ops/flash_cpu.c's tiled loops. The rotary
 * embedding rotates each row's head pairs in place by math.h's pair functions. */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>

#include "engine/core/math.h"
#include "engine/device/ops/attention_math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"
#include "engine/device/ops/flash_cpu.h"
#include "engine/device/ops/positions_math.h"

/* ---- attention: per (batch, head), scores = q k^T * scale, causal softmax, out = att v ---- */

static void attention_forward_loop(tri_tensor out, tri_tensor att, tri_tensor qkv)
{
    int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3, NH = att.shape[1];
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        int64_t b = bh / NH, h = bh % NH;
        const float *q = fp(qkv) + b * T * 3 * C + h * HS;
        const float *k = q + C, *v = q + 2 * C;
        float *a = fp(att) + bh * T * T;
        float *o = fp(out) + b * T * C + h * HS;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)HS, scale, q,
                    (int)(3 * C), k, (int)(3 * C), 0.0f, a, (int)T);
        for (int64_t t = 0; t < T; t++)
            tri_causal_softmax_row(a + t * T, a + t * T, t, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)HS, (int)T, 1.0f, a,
                    (int)T, v, (int)(3 * C), 0.0f, o, (int)C);
    }
}

int tri_cpu_attention_forward(tri_device *d, tri_tensor out, tri_tensor att, tri_tensor qkv)
{
    TRI_ON_THREADS(nthreads(d), attention_forward_loop(out, att, qkv));
    return TRI_OK;
}

static void attention_backward_loop(tri_tensor dqkv, tri_tensor datt, tri_tensor dout,
                                  tri_tensor qkv, tri_tensor att)
{
    int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3, NH = att.shape[1];
    int64_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    int ld3 = (int)(3 * C);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        int64_t b = bh / NH, h = bh % NH;
        const float *q = fp(qkv) + b * T * 3 * C + h * HS;
        const float *k = q + C, *v = q + 2 * C;
        float *dq = fp(dqkv) + b * T * 3 * C + h * HS;
        float *dk = dq + C, *dv = dq + 2 * C;
        const float *a = fp(att) + bh * T * T;
        float *da = fp(datt) + bh * T * T;
        const float *g = fp(dout) + b * T * C + h * HS;
        /* datt = dout v^T; dv = att^T dout */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)HS, 1.0f, g,
                    (int)C, v, ld3, 0.0f, da, (int)T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)HS, (int)T, 1.0f, a,
                    (int)T, g, (int)C, 0.0f, dv, ld3);
        /* dscores through the causal softmax, in place */
        for (int64_t t = 0; t < T; t++)
            tri_causal_softmax_row_backward(da + t * T, a + t * T, da + t * T, t, T);
        /* dq = dscores k * scale; dk = dscores^T q * scale */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)HS, (int)T, scale, da,
                    (int)T, k, ld3, 0.0f, dq, ld3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)HS, (int)T, scale, da,
                    (int)T, q, ld3, 0.0f, dk, ld3);
    }
}

int tri_cpu_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout,
                               tri_tensor qkv, tri_tensor att)
{
    TRI_ON_THREADS(nthreads(d), attention_backward_loop(dqkv, datt, dout, qkv, att));
    return TRI_OK;
}

/* ---- fused attention (engine/device/ops/flash_cpu.c) ---- */

int tri_cpu_flash_attention_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv)
{
    tri_cpu_flash_forward(nthreads(d), fp(out), fp(lse), fp(qkv), tri_flash_dims_of(qkv, out, lse));
    return TRI_OK;
}

int tri_cpu_flash_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                     tri_tensor qkv, tri_tensor out, tri_tensor lse)
{
    tri_cpu_flash_backward(nthreads(d), fp(dqkv), fp(delta), fp(dout), fp(qkv), fp(out), fp(lse),
                           tri_flash_dims_of(qkv, dout, lse));
    return TRI_OK;
}

/* ---- fused attention across a split sequence (engine/device/ops/flash_cpu.c) ---- */

int tri_cpu_flash_attention_kv_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv, tri_tensor kv,
                                       tri_flash_rows qrows, tri_flash_rows krows)
{
    tri_cpu_flash_kv_forward(nthreads(d), fp(out), fp(lse), fp(qkv), fp(kv), kv.shape[1], kv.shape[2], qrows, krows,
                             tri_flash_dims_of(qkv, out, lse));
    return TRI_OK;
}

int tri_cpu_flash_attention_delta(tri_device *d, tri_tensor delta, tri_tensor dout, tri_tensor out)
{
    tri_flash_dims f = {delta.shape[0], delta.shape[2], delta.shape[1], delta.shape[1], dout.shape[2] / delta.shape[1]};
    tri_cpu_flash_delta(nthreads(d), fp(delta), fp(dout), fp(out), f);
    return TRI_OK;
}

int tri_cpu_flash_attention_kv_backward_dq(tri_device *d, tri_tensor dqkv, tri_tensor dout, tri_tensor qkv,
                                           tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                           tri_flash_rows krows, bool accumulate)
{
    tri_cpu_flash_kv_backward_dq(nthreads(d), fp(dqkv), fp(delta), fp(dout), fp(qkv), fp(kv), fp(lse), kv.shape[1],
                                 kv.shape[2], qrows, krows, tri_flash_dims_of(qkv, dout, lse), accumulate);
    return TRI_OK;
}

int tri_cpu_flash_attention_kv_backward_dkv(tri_device *d, tri_tensor dkv, tri_tensor dout, tri_tensor qkv,
                                            tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                            tri_flash_rows krows, bool accumulate)
{
    tri_cpu_flash_kv_backward_dkv(nthreads(d), fp(dkv), fp(delta), fp(dout), fp(qkv), fp(kv), fp(lse), kv.shape[1],
                                  kv.shape[2], qrows, krows, tri_flash_dims_of(qkv, dout, lse), accumulate);
    return TRI_OK;
}

int tri_cpu_flash_attention_kv_backward(tri_device *d, tri_tensor dqkv, tri_tensor dkv, tri_tensor dout,
                                        tri_tensor qkv, tri_tensor kv, tri_tensor lse, tri_tensor delta,
                                        tri_flash_rows qrows, tri_flash_rows krows, bool accumulate)
{
    tri_cpu_flash_kv_backward(nthreads(d), fp(dqkv), fp(dkv), fp(delta), fp(dout), fp(qkv), fp(kv), fp(lse), kv.shape[1],
                              kv.shape[2], qrows, krows, tri_flash_dims_of(qkv, dout, lse), accumulate);
    return TRI_OK;
}

int tri_cpu_flash_attention_merge(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor out2, tri_tensor lse2)
{
    tri_flash_dims f = {lse.shape[0], lse.shape[2], lse.shape[1], lse.shape[1], out.shape[2] / lse.shape[1]};
    tri_cpu_flash_merge(nthreads(d), fp(out), fp(lse), fp(out2), fp(lse2), f);
    return TRI_OK;
}

/* Row by row through tri_load / tri_store: the convert op's rounding, bits kept for equal dtypes. */
static void copy_columns_loop(tri_tensor dst, int64_t dst_col, tri_tensor src, int64_t src_col, int64_t n)
{
    int64_t N = tri_tensor_rows(dst), Wd = tri_tensor_cols(dst), Ws = tri_tensor_cols(src);
    int db = dst.dtype == TRI_BF16, sb = src.dtype == TRI_BF16;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; r++)
        for (int64_t i = 0; i < n; i++)
            tri_store(dst.data, db, r * Wd + dst_col + i, tri_load(src.data, sb, r * Ws + src_col + i));
}

int tri_cpu_copy_columns(tri_device *d, tri_tensor dst, int64_t dst_col, tri_tensor src, int64_t src_col, int64_t n)
{
    TRI_ON_THREADS(nthreads(d), copy_columns_loop(dst, dst_col, src, src_col, n));
    return TRI_OK;
}

/* ---- rotary position embedding ---- */

/* Rotates (backward: rotates back) the first n_heads heads of every row of x in place. */
static void rope_loop(tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T, int64_t row0,
                      int cp, int cp_rank, bool backward)
{
    int64_t N = tri_tensor_rows(x), W = tri_tensor_cols(x), half = tri_tensor_cols(cos), HS = 2 * half;
    float *v = fp(x);
    const float *c = fp(cos), *s = fp(sin);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t pos = tri_seq_position(T, row0 + n, cp, cp_rank);
        for (int64_t h = 0; h < n_heads; h++)
            for (int64_t i = 0; i < half; i++) {
                float *a = v + n * W + h * HS + i;
                if (backward)
                    tri_rope_pair_backward(a, a + half, c[pos * half + i], s[pos * half + i]);
                else
                    tri_rope_pair(a, a + half, c[pos * half + i], s[pos * half + i]);
            }
    }
}

int tri_cpu_rope_forward(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                         int64_t row0, int cp, int cp_rank)
{
    TRI_ON_THREADS(nthreads(d), rope_loop(x, cos, sin, n_heads, T, row0, cp, cp_rank, false));
    return TRI_OK;
}

int tri_cpu_rope_backward(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads,
                          int64_t T, int64_t row0, int cp, int cp_rank)
{
    TRI_ON_THREADS(nthreads(d), rope_loop(dx, cos, sin, n_heads, T, row0, cp, cp_rank, true));
    return TRI_OK;
}
