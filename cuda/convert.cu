/* cuda/convert.cu - fp32 <-> bf16 conversion on the GPU, for bf16 mixed precision: the device op
 * `convert` through the simple kernels of cuda/kernels/convert.kern.h, engine/core/math.h's
 * round-to-nearest-even, tested on the CPU against known values and the scalar functions. */
#include "cuda/device_cuda.h"
#include "cuda/kernels/convert.kern.h"
#include "cuda/launch.cuh"

static int check(const char *op, tri_tensor out, tri_dtype out_type, tri_tensor in, tri_dtype in_type)
{
    if (out.dtype != out_type || in.dtype != in_type || tri_tensor_numel(out) != tri_tensor_numel(in))
        return TRI_ERR(TRI_EINVAL, "%s: expected %s out and %s in of equal numel (got %s %lld, %s %lld)", op,
                       tri_dtype_name(out_type), tri_dtype_name(in_type), tri_dtype_name(out.dtype),
                       (long long)tri_tensor_numel(out), tri_dtype_name(in.dtype), (long long)tri_tensor_numel(in));
    return TRI_OK;
}

extern "C" int tri_cuda_float_to_bf16(tri_device *d, tri_tensor out, tri_tensor in)
{
    int rc = check("float_to_bf16", out, TRI_BF16, in, TRI_F32);
    int64_t n = tri_tensor_numel(in);
    if (rc || n == 0)
        return rc;
    return TRI_CUDA_LAUNCH_N(float_to_bf16_kernel, n, tri_cuda_of(d)->stream, (uint16_t *)out.data,
                             (const float *)in.data, n);
}

extern "C" int tri_cuda_bf16_to_float(tri_device *d, tri_tensor out, tri_tensor in)
{
    int rc = check("bf16_to_float", out, TRI_F32, in, TRI_BF16);
    int64_t n = tri_tensor_numel(in);
    if (rc || n == 0)
        return rc;
    return TRI_CUDA_LAUNCH_N(bf16_to_float_kernel, n, tri_cuda_of(d)->stream, (float *)out.data,
                             (const uint16_t *)in.data, n);
}

/* The device op convert (engine/device/device.h): dst = src in dst's dtype; the wrapper has checked the
 * dtypes are fp32/bf16 and differ. */
extern "C" int tri_cuda_convert(tri_device *d, tri_tensor dst, tri_tensor src)
{
    return dst.dtype == TRI_BF16 ? tri_cuda_float_to_bf16(d, dst, src) : tri_cuda_bf16_to_float(d, dst, src);
}
