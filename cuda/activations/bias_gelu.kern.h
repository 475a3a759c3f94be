/* cuda/activations/bias_gelu.kern.h - the simple bias + GELU kernel (CUDA and C): a thread per element
 * of out (grid-stride), its column i % OC picking the bias, engine/device/ops/activations_math.h's
 * tri_bias_gelu in fp32 with each array fp32 or bf16 (its `_bf16` flag; tri_load / tri_store), as the
 * CPU backend. out may alias inp (same dtype; each element read before written). */
#ifndef TRIDENT_CUDA_ACTIVATIONS_BIAS_GELU_KERN_H
#define TRIDENT_CUDA_ACTIVATIONS_BIAS_GELU_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/activations_math.h"

/* out[i] = gelu(inp[i] + bias[i % OC]) for i < n (n a multiple of OC >= 1) */
TRI_KERNEL bias_gelu_forward_kernel(void *out, int out_bf16, const void *inp, int inp_bf16, const void *bias,
                                    int bias_bf16, int64_t n, int64_t OC)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        tri_store(out, out_bf16, i, tri_bias_gelu(tri_load(inp, inp_bf16, i), tri_load(bias, bias_bf16, i % OC)));
}

#endif
