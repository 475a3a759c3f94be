/* cuda/activations/bias_gelu_fast.cuh - the fast bias + GELU kernel (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): 8 consecutive elements of out a thread in a grid-stride loop (cuda/warp.cuh's
 * tri_vec8_*), 16-byte loads and stores of inp and out when both start 16-byte aligned, one by one
 * otherwise. The 8 biases: one 16-byte load (two for fp32) when OC is a multiple of 8 and bias is aligned
 * (the 8 elements then lie in one row, at a column that is a multiple of 8), else one by one from
 * column i % OC, wrapping to 0 at OC. Each element engine/device/ops/activations_math.h's tri_bias_gelu, so
 * the bits of the simple kernel of cuda/activations/bias_gelu.kern.h. */
#ifndef TRIDENT_CUDA_ACTIVATIONS_BIAS_GELU_FAST_CUH
#define TRIDENT_CUDA_ACTIVATIONS_BIAS_GELU_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/activations_math.h"

/* out[i] = gelu(inp[i] + bias[i % OC]) for i < n (n a multiple of OC >= 1); vec: inp and out aligned;
 * bias_vec: bias aligned and OC % 8 == 0. */
__global__ void bias_gelu_forward_fast_kernel(void *out, int out_bf16, const void *inp, int inp_bf16, const void *bias,
                                              int bias_bf16, int64_t n, int64_t OC, bool vec, bool bias_vec)
{
    float v[8] = {0}, b[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(v, inp, inp_bf16, i, n, vec);
        int64_t c = i % OC;
        if (bias_vec) {
            tri_load8(b, bias, bias_bf16, c, OC, true);
        } else {
            for (int k = 0; k < 8; k++) {
                b[k] = tri_load(bias, bias_bf16, c);
                c = c + 1 == OC ? 0 : c + 1;
            }
        }
        for (int k = 0; k < 8; k++)
            v[k] = tri_bias_gelu(v[k], b[k]);
        tri_store8(out, out_bf16, i, n, v, vec);
    }
}

#endif
