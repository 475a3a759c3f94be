/* cuda/activations/gelu_fast.cuh - the fast GELU kernels (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): 8 consecutive elements a thread (cuda/warp.cuh's tri_vec8_*), 16-byte
 * loads and stores when every tensor starts 16-byte aligned; each element
 * engine/device/ops/activations_math.h's tri_gelu / tri_gelu_grad, so the bits of the simple kernels of
 * cuda/activations/gelu.kern.h. */
#ifndef TRIDENT_CUDA_ACTIVATIONS_GELU_FAST_CUH
#define TRIDENT_CUDA_ACTIVATIONS_GELU_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/activations_math.h"

__global__ void gelu_forward_fast_kernel(void *out, int out_bf16, const void *inp, int inp_bf16, int64_t n, bool vec)
{
    float v[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(v, inp, inp_bf16, i, n, vec);
        for (int k = 0; k < 8; k++)
            v[k] = tri_gelu(v[k]);
        tri_store8(out, out_bf16, i, n, v, vec);
    }
}

__global__ void gelu_backward_fast_kernel(void *dinp, int dinp_bf16, const void *inp, int inp_bf16, const void *dout,
                                          int dout_bf16, int64_t n, bool vec)
{
    float x[8] = {0}, g[8] = {0};
    for (int64_t i = tri_vec8_first(); i < n; i += tri_vec8_stride()) {
        tri_load8(x, inp, inp_bf16, i, n, vec);
        tri_load8(g, dout, dout_bf16, i, n, vec);
        for (int k = 0; k < 8; k++)
            x[k] = tri_gelu_grad(x[k]) * g[k];
        tri_store8(dinp, dinp_bf16, i, n, x, vec);
    }
}

#endif
