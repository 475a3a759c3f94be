/* cuda/activations/swiglu.kern.h - SwiGLU kernels (CUDA and C): a thread per output element, gate and up
 * read from the row's two halves of gate_up(N, 2F), engine/device/ops/activations_math.h's tri_swiglu and
 * tri_swiglu_backward: the twins of cuda/activations/swiglu_fast.cuh's block-per-row kernels. */
#ifndef TRIDENT_CUDA_ACTIVATIONS_SWIGLU_KERN_H
#define TRIDENT_CUDA_ACTIVATIONS_SWIGLU_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/activations_math.h"

TRI_KERNEL swiglu_forward_kernel(void *out, int out_bf16, const void *gate_up, int gu_bf16, int64_t N, int64_t F)
{
    for (int64_t e = TRI_GLOBAL_ID; e < N * F; e += TRI_GLOBAL_STRIDE) {
        int64_t n = e / F, i = e % F;
        tri_store(out, out_bf16, e,
                  tri_swiglu(tri_load(gate_up, gu_bf16, n * 2 * F + i), tri_load(gate_up, gu_bf16, n * 2 * F + F + i)));
    }
}

TRI_KERNEL swiglu_backward_kernel(void *dgate_up, int dgu_bf16, const void *gate_up, int gu_bf16, const void *dout,
                                  int dout_bf16, int64_t N, int64_t F)
{
    for (int64_t e = TRI_GLOBAL_ID; e < N * F; e += TRI_GLOBAL_STRIDE) {
        int64_t n = e / F, i = e % F;
        float dg, du;
        tri_swiglu_backward(tri_load(gate_up, gu_bf16, n * 2 * F + i), tri_load(gate_up, gu_bf16, n * 2 * F + F + i),
                            tri_load(dout, dout_bf16, e), &dg, &du);
        tri_store(dgate_up, dgu_bf16, n * 2 * F + i, dg);
        tri_store(dgate_up, dgu_bf16, n * 2 * F + F + i, du);
    }
}

#endif
