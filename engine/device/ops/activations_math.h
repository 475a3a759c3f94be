/* engine/device/ops/activations_math.h - GELU (alone and after a bias add) and SwiGLU per element,
 * written once.
 *
 * Inline functions (TRI_HD: C for the CPU backend, __host__ __device__ under nvcc) that the CPU loops
 * (activations_cpu.c) and the CUDA kernels (cuda/activations/gelu.kern.h, gelu_fast.cuh,
 * bias_gelu.kern.h, bias_gelu_fast.cuh, swiglu.kern.h, swiglu_fast.cuh, and cuda/matmul/matmul.cu's
 * GELU epilogue) both call. */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_ACTIVATIONS_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_ACTIVATIONS_MATH_H

#include <math.h>
#include <stdint.h>

#include "engine/core/math.h"

#define TRI_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* ---- GELU ----
 * The tanh form 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as the identical
 * x * sigmoid(2u) = x / (1 + exp(-2u)), which is stable at both ends and vectorizes. */
TRI_HD float tri_gelu(float x)
{
    float u = TRI_GELU_K * (x + 0.044715f * x * x * x);
    return x / (1.0f + tri_expf(-2.0f * u));
}

/* One element of bias_gelu_forward: gelu(inp + bias), the sum one fp32 addition (not rounded to a
 * storage dtype: the caller widens both with tri_load and rounds only the result with tri_store). */
TRI_HD float tri_bias_gelu(float inp, float bias)
{
    return tri_gelu(inp + bias);
}

/* d gelu(x) / dx = s + 2 x s (1 - s) u', s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2);
 * equal to the tanh form's 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t = 2s - 1. 1 - s is computed as
 * e s (e = exp(-2u)), which does not cancel where s rounds to 1. */
TRI_HD float tri_gelu_grad(float x)
{
    float u = TRI_GELU_K * (x + 0.044715f * x * x * x);
    float du = TRI_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    float e = tri_expf(-2.0f * u);
    float s = 1.0f / (1.0f + e);
    return s + 2.0f * x * (e * s) * s * du;
}

/* ---- SwiGLU (Shazeer 2020), as Hugging Face's LlamaMLP: silu(gate) * up ----
 * silu(g) = g sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g)). */
TRI_HD float tri_sigmoid(float g)
{
    return 1.0f / (1.0f + tri_expf(-g));
}

TRI_HD float tri_swiglu(float gate, float up)
{
    return gate * tri_sigmoid(gate) * up;
}

/* d out / d gate and d out / d up, times dout. */
TRI_HD void tri_swiglu_backward(float gate, float up, float dout, float *dgate, float *dup)
{
    float sg = tri_sigmoid(gate);
    *dup = dout * (gate * sg);
    *dgate = dout * up * (sg * (1.0f + gate * (1.0f - sg)));
}

#endif
