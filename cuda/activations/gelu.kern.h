/* cuda/activations/gelu.kern.h - simple GELU kernels (CUDA and C): tri_gelu / tri_gelu_grad of
 * engine/core/math.h per element, as the CPU backend, in fp32 with each array fp32 or bf16 (its `_bf16`
 * flag; tri_load / tri_store). dinp may alias dout (same dtype; read before written). */
#ifndef TRIDENT_CUDA_ACTIVATIONS_GELU_KERN_H
#define TRIDENT_CUDA_ACTIVATIONS_GELU_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/activations_math.h"

/* out[i] = gelu(inp[i]) */
TRI_KERNEL gelu_forward_kernel(void *out, int out_bf16, const void *inp, int inp_bf16, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(out, out_bf16, i, tri_gelu(tri_load(inp, inp_bf16, i)));
}

/* dinp[i] = gelu'(inp[i]) * dout[i] */
TRI_KERNEL gelu_backward_kernel(void *dinp, int dinp_bf16, const void *inp, int inp_bf16, const void *dout,
                                int dout_bf16, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(dinp, dinp_bf16, i, tri_gelu_grad(tri_load(inp, inp_bf16, i)) * tri_load(dout, dout_bf16, i));
}

#endif
