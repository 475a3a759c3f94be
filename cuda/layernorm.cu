/* cuda/layernorm.cu - layernorm forward and backward on the GPU.
 *
 * Fast kernels (the default): a warp per row for the normalisation and the input gradient, 16-byte
 * loads, the row sums in engine/core/math.h's order (cuda/warp.cuh); the parameter gradients dw, db
 * as chunked column sums in two coalesced passes (cuda/kernels/colsum.kern.h) through the device's
 * workspace. Their twins, the simple kernels of cuda/kernels/layernorm.kern.h (one thread per row,
 * one per column; tested on the CPU against the CPU backend), run with the device's simple switch
 * on, or for dw, db when the chunk sums do not fit the workspace. Both compute the same additions in
 * the same order: the GPU suite holds them and the CPU backend to the same bits. Every tensor but
 * mean and rstd (fp32) is fp32 or bf16, each as its dtype says. */
#include "cuda/kernels/layernorm.kern.h"
#include "cuda/launch.cuh"
#include "cuda/warp.cuh"

/* out(N,C) = layernorm(inp) * w + b, mean(N), rstd(N): a warp per row (math.h's
 * tri_layernorm_row_forward_mixed with its sums across the lanes) */
__global__ void layernorm_forward_fast_kernel(void *out, int out_bf16, float *mean, float *rstd, const void *inp,
                                              int inp_bf16, const void *w, int w_bf16, const void *b, int b_bf16,
                                              int64_t N, int64_t C)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    int lane = tri_lane();
    const void *x = tri_at(inp, inp_bf16, row * C);
    void *o = tri_at(out, out_bf16, row * C);
    bool vx = tri_aligned16(x), vo = tri_aligned16(o), vw = tri_aligned16(w), vb = tri_aligned16(b);
    float r[8] = {0}, v[8] = {0}, wv[8] = {0}, bv[8] = {0};
    for (int64_t i = 8 * lane; i < C; i += TRI_ROW_SLOTS) {
        tri_load8(v, x, inp_bf16, i, C, vx);
        for (int k = 0; k < 8 && i + k < C; k++)
            r[k] += v[k];
    }
    float m = tri_warp_row_sum(r) / (float)C;
    for (int k = 0; k < 8; k++)
        r[k] = 0.0f;
    for (int64_t i = 8 * lane; i < C; i += TRI_ROW_SLOTS) {
        tri_load8(v, x, inp_bf16, i, C, vx);
        for (int k = 0; k < 8 && i + k < C; k++) {
            float dx = v[k] - m;
            r[k] += dx * dx;
        }
    }
    float var = tri_warp_row_sum(r) / (float)C;
    float rs = 1.0f / sqrtf(var + TRI_LN_EPS);
    for (int64_t i = 8 * lane; i < C; i += TRI_ROW_SLOTS) {
        tri_load8(v, x, inp_bf16, i, C, vx);
        tri_load8(wv, w, w_bf16, i, C, vw);
        tri_load8(bv, b, b_bf16, i, C, vb);
        for (int k = 0; k < 8; k++)
            v[k] = (v[k] - m) * rs * wv[k] + bv[k];
        tri_store8(o, out_bf16, i, C, v, vo);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* dinp(N,C) += the input gradient: a warp per row (math.h's tri_layernorm_row_backward_input_mixed) */
__global__ void layernorm_backward_input_fast_kernel(void *dinp, int dinp_bf16, const void *dout, int dout_bf16,
                                                     const void *inp, int inp_bf16, const void *w, int w_bf16,
                                                     const float *mean, const float *rstd, int64_t N, int64_t C)
{
    int64_t row = tri_warp_row();
    if (row >= N)
        return;
    int lane = tri_lane();
    const void *x = tri_at(inp, inp_bf16, row * C), *g = tri_at(dout, dout_bf16, row * C);
    void *dx = tri_at(dinp, dinp_bf16, row * C);
    bool vx = tri_aligned16(x), vg = tri_aligned16(g), vw = tri_aligned16(w), vd = tri_aligned16(dx);
    float mu = mean[row], rs = rstd[row];
    float a1[8] = {0}, a2[8] = {0}, xv[8] = {0}, gv[8] = {0}, wv[8] = {0}, dv[8] = {0};
    for (int64_t i = 8 * lane; i < C; i += TRI_ROW_SLOTS) {
        tri_load8(xv, x, inp_bf16, i, C, vx);
        tri_load8(gv, g, dout_bf16, i, C, vg);
        tri_load8(wv, w, w_bf16, i, C, vw);
        for (int k = 0; k < 8 && i + k < C; k++) {
            float norm = (xv[k] - mu) * rs;
            float dnorm = wv[k] * gv[k];
            a1[k] += dnorm;
            a2[k] += dnorm * norm;
        }
    }
    float dnorm_mean = tri_warp_row_sum(a1) / (float)C;
    float dnorm_norm_mean = tri_warp_row_sum(a2) / (float)C;
    for (int64_t i = 8 * lane; i < C; i += TRI_ROW_SLOTS) {
        tri_load8(xv, x, inp_bf16, i, C, vx);
        tri_load8(gv, g, dout_bf16, i, C, vg);
        tri_load8(wv, w, w_bf16, i, C, vw);
        tri_load8(dv, dx, dinp_bf16, i, C, vd);
        for (int k = 0; k < 8; k++) {
            float norm = (xv[k] - mu) * rs;
            float dnorm = wv[k] * gv[k];
            dv[k] = dv[k] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
        tri_store8(dx, dinp_bf16, i, C, dv, vd);
    }
}

extern "C" int tri_cuda_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                          tri_tensor inp, tri_tensor w, tri_tensor b)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(layernorm_forward_kernel, N, cu->stream, tri_data(out), tri_is_bf16(out),
                                 tri_fp(mean), tri_fp(rstd), tri_data(inp), tri_is_bf16(inp), tri_data(w),
                                 tri_is_bf16(w), tri_data(b), tri_is_bf16(b), N, C);
    return TRI_CUDA_LAUNCH(layernorm_forward_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK, cu->stream,
                           tri_data(out), tri_is_bf16(out), tri_fp(mean), tri_fp(rstd), tri_data(inp),
                           tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), tri_data(b), tri_is_bf16(b), N, C);
}

/* dw, db += the column sums: two passes through the workspace when the chunk sums fit it */
static int params_backward(tri_cuda *cu, tri_tensor dw, tri_tensor db, tri_tensor dout, tri_tensor inp,
                           tri_tensor mean, tri_tensor rstd, int64_t N, int64_t C)
{
    int64_t nch = tri_col_chunks(N);
    if (cu->simple || (size_t)(2 * nch * C) * sizeof(float) > cu->workspace_bytes)
        return TRI_CUDA_LAUNCH_N(layernorm_backward_params_kernel, C, cu->stream, tri_data(dw), tri_is_bf16(dw),
                                 tri_data(db), tri_is_bf16(db), tri_data(dout), tri_is_bf16(dout), tri_data(inp),
                                 tri_is_bf16(inp), tri_fp(mean), tri_fp(rstd), N, C);
    float *pw = (float *)cu->workspace, *pb = pw + nch * C;
    int rc = TRI_CUDA_LAUNCH_N(layernorm_params_chunks_kernel, nch * C, cu->stream, pw, pb, tri_data(dout),
                               tri_is_bf16(dout), tri_data(inp), tri_is_bf16(inp), tri_fp(mean), tri_fp(rstd), N, C);
    if (!rc) rc = tri_cuda_col_chunks_finish(cu, dw, pw, nch, C);
    if (!rc) rc = tri_cuda_col_chunks_finish(cu, db, pb, nch, C);
    return rc;
}

extern "C" int tri_cuda_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db,
                                           tri_tensor dout, tri_tensor inp, tri_tensor w, tri_tensor mean,
                                           tri_tensor rstd)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    int rc = cu->simple
                 ? TRI_CUDA_LAUNCH_N(layernorm_backward_input_kernel, N, cu->stream, tri_data(dinp),
                                     tri_is_bf16(dinp), tri_data(dout), tri_is_bf16(dout), tri_data(inp),
                                     tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), tri_fp(mean), tri_fp(rstd), N, C)
                 : TRI_CUDA_LAUNCH(layernorm_backward_input_fast_kernel, tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK,
                                   cu->stream, tri_data(dinp), tri_is_bf16(dinp), tri_data(dout), tri_is_bf16(dout),
                                   tri_data(inp), tri_is_bf16(inp), tri_data(w), tri_is_bf16(w), tri_fp(mean),
                                   tri_fp(rstd), N, C);
    if (!rc) rc = params_backward(cu, dw, db, dout, inp, mean, rstd, N, C);
    return rc;
}
