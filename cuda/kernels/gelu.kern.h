/* cuda/kernels/gelu.kern.h - simple GELU kernels (CUDA and C): tri_gelu / tri_gelu_grad of
 * engine/math.h per element, as the CPU backend. dinp may alias dout (read before written). */
#ifndef TRIDENT_CUDA_KERNELS_GELU_KERN_H
#define TRIDENT_CUDA_KERNELS_GELU_KERN_H

#include "cuda/kernels/shim.h"

/* out[i] = gelu(inp[i]) */
TRI_KERNEL gelu_forward_kernel(float *out, const float *inp, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        out[i] = tri_gelu(inp[i]);
}

/* dinp[i] = gelu'(inp[i]) * dout[i] */
TRI_KERNEL gelu_backward_kernel(float *dinp, const float *inp, const float *dout, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        dinp[i] = tri_gelu_grad(inp[i]) * dout[i];
}

#endif
