/* cuda/elementwise/convert.kern.h - fp32 <-> bf16 conversion kernels (CUDA and C), for bf16 mixed
 * precision: round to nearest even and NaN kept NaN by tri_float_to_bf16 of engine/core/math.h (the
 * rounding torch and CUDA's __float2bfloat16 use); widening is exact. */
#ifndef TRIDENT_CUDA_ELEMENTWISE_CONVERT_KERN_H
#define TRIDENT_CUDA_ELEMENTWISE_CONVERT_KERN_H

#include "cuda/kernels/shim.h"

/* out[i] = bf16(in[i]) (raw bf16 bits) */
TRI_KERNEL float_to_bf16_kernel(uint16_t *out, const float *in, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        out[i] = tri_float_to_bf16(in[i]);
}

/* out[i] = float(in[i]) */
TRI_KERNEL bf16_to_float_kernel(float *out, const uint16_t *in, int64_t n)
{
    for (int64_t i = TRI_GLOBAL_ID; i < n; i += TRI_GLOBAL_STRIDE)
        out[i] = tri_bf16_to_float(in[i]);
}

#endif
