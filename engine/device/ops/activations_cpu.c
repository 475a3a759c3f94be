/* engine/device/ops/activations_cpu.c - GELU and SwiGLU on the CPU backend: OpenMP loops over the
 * elements (GELU) or the rows (bias + GELU's broadcast bias, SwiGLU's [gate | up] halves) calling
 * engine/device/ops/activations_math.h's per-element functions, the arithmetic the CUDA kernels share. */
#include "engine/core/math.h"
#include "engine/device/ops/activations_math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"

/* ---- GELU ---- */

static void gelu_forward_loop(tri_tensor out, tri_tensor inp)
{
    const float *x = fp(inp);
    float *o = fp(out);
    int64_t n = tri_tensor_numel(inp);
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        o[i] = tri_gelu(x[i]);
}

int tri_cpu_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp)
{
    TRI_ON_THREADS(nthreads(d), gelu_forward_loop(out, inp));
    return TRI_OK;
}

static void gelu_backward_loop(tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    const float *x = fp(inp), *g = fp(dout);
    float *dx = fp(dinp);
    int64_t n = tri_tensor_numel(inp);
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        dx[i] = tri_gelu_grad(x[i]) * g[i];
}

int tri_cpu_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    TRI_ON_THREADS(nthreads(d), gelu_backward_loop(dinp, inp, dout));
    return TRI_OK;
}

/* out(N,OC) = gelu(inp + bias) with bias(OC) broadcast over the rows (the wrapper's fp32 copies of
 * bf16 arguments: widening is exact and out is rounded once, so the bits of tri_bias_gelu on the
 * stored values). */
static void bias_gelu_forward_loop(tri_tensor out, tri_tensor inp, tri_tensor bias)
{
    const float *x = fp(inp), *b = fp(bias);
    float *o = fp(out);
    int64_t OC = tri_tensor_numel(bias), N = tri_tensor_numel(inp) / OC;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
#pragma omp simd
        for (int64_t c = 0; c < OC; c++)
            o[n * OC + c] = tri_bias_gelu(x[n * OC + c], b[c]);
    }
}

int tri_cpu_bias_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp, tri_tensor bias)
{
    TRI_ON_THREADS(nthreads(d), bias_gelu_forward_loop(out, inp, bias));
    return TRI_OK;
}

/* ---- SwiGLU ---- */

static void swiglu_forward_loop(tri_tensor out, tri_tensor gate_up)
{
    int64_t N = tri_tensor_rows(gate_up), F = tri_tensor_cols(gate_up) / 2;
    const float *gu = fp(gate_up);
    float *o = fp(out);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < F; i++)
            o[n * F + i] = tri_swiglu(gu[n * 2 * F + i], gu[n * 2 * F + F + i]);
}

int tri_cpu_swiglu_forward(tri_device *d, tri_tensor out, tri_tensor gate_up)
{
    TRI_ON_THREADS(nthreads(d), swiglu_forward_loop(out, gate_up));
    return TRI_OK;
}

static void swiglu_backward_loop(tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout)
{
    int64_t N = tri_tensor_rows(gate_up), F = tri_tensor_cols(gate_up) / 2;
    const float *gu = fp(gate_up), *g = fp(dout);
    float *dgu = fp(dgate_up);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < F; i++)
            tri_swiglu_backward(gu[n * 2 * F + i], gu[n * 2 * F + F + i], g[n * F + i], &dgu[n * 2 * F + i],
                                &dgu[n * 2 * F + F + i]);
}

int tri_cpu_swiglu_backward(tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout)
{
    TRI_ON_THREADS(nthreads(d), swiglu_backward_loop(dgate_up, gate_up, dout));
    return TRI_OK;
}
