/* engine/device/ops/norms_cpu.c - layernorm and RMSNorm on the CPU backend.
 *
 * A row at a time through engine/device/ops/norms_math.h's row functions (the order every backend sums a row
 * in), parallel over rows; the weight (and bias) gradients are column sums in math.h's order
 * (TRI_COL_CHUNK row chunks), parallel over column blocks with the rows in order, so every result
 * is the same for any thread count and equal to the CUDA kernels'. The fused add + norm ops have
 * no CPU slot (the wrappers run the add and the norm). The per-head RMSNorm (rmsnorm_heads_*) runs
 * rmsnorm's row functions on each head row of the fused q|k|v rows. */
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/ops/norms_math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"

/* ---- layernorm ---- */

static void layernorm_forward_loop(tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                 tri_tensor inp, tri_tensor w, tri_tensor b)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    const float *x = fp(inp);
    float *o = fp(out), *mu = fp(mean), *rs = fp(rstd);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        tri_layernorm_row_forward(o + n * C, mu + n, rs + n, x + n * C, fp(w), fp(b), C);
}

int tri_cpu_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                              tri_tensor inp, tri_tensor w, tri_tensor b)
{
    TRI_ON_THREADS(nthreads(d), layernorm_forward_loop(out, mean, rstd, inp, w, b));
    return TRI_OK;
}

/* Two worksharing loops: the second starts after the first's implicit barrier. */
static void layernorm_backward_loops(tri_tensor dinp, tri_tensor dw, tri_tensor db, tri_tensor dout, tri_tensor inp,
                                     tri_tensor w, tri_tensor mean, tri_tensor rstd)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    const float *x = fp(inp), *g = fp(dout), *mu = fp(mean), *rs = fp(rstd);
    float *dx = fp(dinp), *pdw = fp(dw), *pdb = fp(db);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        tri_layernorm_row_backward_input(dx + n * C, g + n * C, x + n * C, fp(w), mu[n], rs[n], C);
    /* dw, db: column sums in engine/core/math.h's order (TRI_COL_CHUNK row chunks) */
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < C; j0 += TRI_CPU_COL_BLOCK) {
        int64_t j1 = j0 + TRI_CPU_COL_BLOCK < C ? j0 + TRI_CPU_COL_BLOCK : C;
        float pw[TRI_CPU_COL_BLOCK], pb[TRI_CPU_COL_BLOCK];
        for (int64_t c0 = 0; c0 < N; c0 += TRI_COL_CHUNK) {
            int64_t c1 = c0 + TRI_COL_CHUNK < N ? c0 + TRI_COL_CHUNK : N;
            for (int64_t j = j0; j < j1; j++)
                pw[j - j0] = pb[j - j0] = 0.0f;
            for (int64_t n = c0; n < c1; n++)
                for (int64_t j = j0; j < j1; j++) {
                    float norm = (x[n * C + j] - mu[n]) * rs[n];
                    pw[j - j0] += norm * g[n * C + j];
                    pb[j - j0] += g[n * C + j];
                }
            for (int64_t j = j0; j < j1; j++) {
                pdw[j] += pw[j - j0];
                pdb[j] += pb[j - j0];
            }
        }
    }
}

int tri_cpu_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db,
                               tri_tensor dout, tri_tensor inp, tri_tensor w, tri_tensor mean,
                               tri_tensor rstd)
{
    TRI_ON_THREADS(nthreads(d), layernorm_backward_loops(dinp, dw, db, dout, inp, w, mean, rstd));
    return TRI_OK;
}

static void rmsnorm_forward_loop(tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    const float *x = fp(inp);
    float *o = fp(out), *rs = fp(rstd);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        tri_rmsnorm_row_forward_mixed(o + n * C, 0, rs + n, x + n * C, 0, fp(w), 0, C, eps);
}

int tri_cpu_rmsnorm_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps)
{
    TRI_ON_THREADS(nthreads(d), rmsnorm_forward_loop(out, rstd, inp, w, eps));
    return TRI_OK;
}

/* Two worksharing loops, as layernorm_backward_loops. */
static void rmsnorm_backward_loops(tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp, tri_tensor w,
                                   tri_tensor rstd)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    const float *x = fp(inp), *g = fp(dout), *rs = fp(rstd);
    float *dx = fp(dinp), *pdw = fp(dw);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        tri_rmsnorm_row_backward_input_mixed(dx + n * C, 0, g + n * C, 0, x + n * C, 0, fp(w), 0, rs[n], C);
    /* dw: column sums of dout * norm in engine/core/math.h's order (TRI_COL_CHUNK row chunks) */
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < C; j0 += TRI_CPU_COL_BLOCK) {
        int64_t j1 = j0 + TRI_CPU_COL_BLOCK < C ? j0 + TRI_CPU_COL_BLOCK : C;
        float pw[TRI_CPU_COL_BLOCK];
        for (int64_t c0 = 0; c0 < N; c0 += TRI_COL_CHUNK) {
            int64_t c1 = c0 + TRI_COL_CHUNK < N ? c0 + TRI_COL_CHUNK : N;
            for (int64_t j = j0; j < j1; j++)
                pw[j - j0] = 0.0f;
            for (int64_t n = c0; n < c1; n++)
                for (int64_t j = j0; j < j1; j++)
                    pw[j - j0] += x[n * C + j] * rs[n] * g[n * C + j];
            for (int64_t j = j0; j < j1; j++)
                pdw[j] += pw[j - j0];
        }
    }
}

int tri_cpu_rmsnorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp,
                             tri_tensor w, tri_tensor rstd)
{
    TRI_ON_THREADS(nthreads(d), rmsnorm_backward_loops(dinp, dw, dout, inp, w, rstd));
    return TRI_OK;
}

/* ---- per-head RMSNorm: the head rows as rmsnorm's rows, the other columns copied ---- */

static void rmsnorm_heads_forward_loop(tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor q_w, tri_tensor k_w,
                                       int64_t NH, int64_t NH_kv, float eps)
{
    int64_t N = tri_tensor_rows(inp), W = tri_tensor_cols(inp), HS = tri_tensor_numel(q_w), H = NH + NH_kv;
    const float *x = fp(inp);
    float *o = fp(out), *rs = fp(rstd);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t h = 0; h < H; h++) {
            int64_t r = n * H + h, at = tri_head_row_at(r, H, W, HS);
            tri_rmsnorm_row_forward_mixed(o + at, 0, rs + r, x + at, 0, h < NH ? fp(q_w) : fp(k_w), 0, HS, eps);
        }
        if (o != x)
            memcpy(o + n * W + H * HS, x + n * W + H * HS, (size_t)(W - H * HS) * sizeof(float));
    }
}

int tri_cpu_rmsnorm_heads_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor q_w,
                                  tri_tensor k_w, int64_t NH, int64_t NH_kv, float eps)
{
    TRI_ON_THREADS(nthreads(d), rmsnorm_heads_forward_loop(out, rstd, inp, q_w, k_w, NH, NH_kv, eps));
    return TRI_OK;
}

/* dw(HS) += the column sums of a group's G heads from head h0 (tri_head_group_row's order), in chunks
 * of TRI_COL_CHUNK weight-gradient rows; called inside a parallel region, column blocks shared. */
static void rmsnorm_heads_dw(float *dw, const float *g, const float *x, const float *rs, int64_t N, int64_t h0,
                             int64_t G, int64_t H, int64_t W, int64_t HS)
{
    int64_t M = N * G;
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < HS; j0 += TRI_CPU_COL_BLOCK) {
        int64_t j1 = j0 + TRI_CPU_COL_BLOCK < HS ? j0 + TRI_CPU_COL_BLOCK : HS;
        float pw[TRI_CPU_COL_BLOCK];
        for (int64_t c0 = 0; c0 < M; c0 += TRI_COL_CHUNK) {
            int64_t c1 = c0 + TRI_COL_CHUNK < M ? c0 + TRI_COL_CHUNK : M;
            for (int64_t j = j0; j < j1; j++)
                pw[j - j0] = 0.0f;
            for (int64_t m = c0; m < c1; m++)
                for (int64_t j = j0; j < j1; j++)
                    pw[j - j0] += tri_rmsnorm_heads_dw_term(g, 0, x, 0, rs, m, j, h0, G, H, W, HS);
            for (int64_t j = j0; j < j1; j++)
                dw[j] += pw[j - j0];
        }
    }
}

/* The weight gradients first (they read dout, which dinp may be), then the input gradient. */
static void rmsnorm_heads_backward_loops(tri_tensor dinp, tri_tensor dq_w, tri_tensor dk_w, tri_tensor dout,
                                         tri_tensor inp, tri_tensor q_w, tri_tensor k_w, tri_tensor rstd, int64_t NH,
                                         int64_t NH_kv)
{
    int64_t N = tri_tensor_rows(inp), W = tri_tensor_cols(inp), HS = tri_tensor_numel(q_w), H = NH + NH_kv;
    const float *x = fp(inp), *g = fp(dout), *rs = fp(rstd);
    float *dx = fp(dinp);
    rmsnorm_heads_dw(fp(dq_w), g, x, rs, N, 0, NH, H, W, HS);
    rmsnorm_heads_dw(fp(dk_w), g, x, rs, N, NH, NH_kv, H, W, HS);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t h = 0; h < H; h++) {
            int64_t r = n * H + h, at = tri_head_row_at(r, H, W, HS);
            tri_rmsnorm_row_backward_set_mixed(dx + at, 0, g + at, 0, x + at, 0, h < NH ? fp(q_w) : fp(k_w), 0, rs[r],
                                               HS);
        }
        if (dx != g)
            memcpy(dx + n * W + H * HS, g + n * W + H * HS, (size_t)(W - H * HS) * sizeof(float));
    }
}

int tri_cpu_rmsnorm_heads_backward(tri_device *d, tri_tensor dinp, tri_tensor dq_w, tri_tensor dk_w, tri_tensor dout,
                                   tri_tensor inp, tri_tensor q_w, tri_tensor k_w, tri_tensor rstd, int64_t NH,
                                   int64_t NH_kv)
{
    TRI_ON_THREADS(nthreads(d),
                   rmsnorm_heads_backward_loops(dinp, dq_w, dk_w, dout, inp, q_w, k_w, rstd, NH, NH_kv));
    return TRI_OK;
}
