/* cuda/elementwise/convert.cu - fp32 <-> bf16 conversion on the GPU, for bf16 mixed precision (the bf16 model
 * copy of the fp32 master weights after every optimizer step): the device op `convert`,
 * engine/core/math.h's round-to-nearest-even. The simple kernels of cuda/elementwise/convert.kern.h are
 * tested on the CPU against known values and the scalar functions; the fast form
 * (cuda/elementwise/convert_fast.cuh) takes 8 consecutive elements a thread with
 * 16-byte accesses, each converted by the same function, so the same bits. */
#include "cuda/device_cuda.h"
#include "cuda/elementwise/convert.kern.h"
#include "cuda/elementwise/convert_fast.cuh"
#include "cuda/launch.cuh"

/* dst = src converted, the fast form unless the device runs the simple kernels. */
static int convert_fast(tri_cuda *cu, tri_tensor dst, tri_tensor src, int64_t n)
{
    bool vec = tri_aligned16_host(dst.data) && tri_aligned16_host(src.data);
    return TRI_CUDA_LAUNCH_STRIDED(convert_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream, tri_data(dst),
                                   tri_is_bf16(dst), tri_data(src), tri_is_bf16(src), n, vec);
}

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
    tri_cuda *cu = tri_cuda_of(d);
    if (!cu->simple)
        return convert_fast(cu, out, in, n);
    return TRI_CUDA_LAUNCH_N(float_to_bf16_kernel, n, cu->stream, (uint16_t *)out.data, (const float *)in.data, n);
}

extern "C" int tri_cuda_bf16_to_float(tri_device *d, tri_tensor out, tri_tensor in)
{
    int rc = check("bf16_to_float", out, TRI_F32, in, TRI_BF16);
    int64_t n = tri_tensor_numel(in);
    if (rc || n == 0)
        return rc;
    tri_cuda *cu = tri_cuda_of(d);
    if (!cu->simple)
        return convert_fast(cu, out, in, n);
    return TRI_CUDA_LAUNCH_N(bf16_to_float_kernel, n, cu->stream, (float *)out.data, (const uint16_t *)in.data, n);
}

/* The device op convert (engine/device/device.h): dst = src in dst's dtype; the wrapper has checked the
 * dtypes are fp32/bf16 and differ. */
extern "C" int tri_cuda_convert(tri_device *d, tri_tensor dst, tri_tensor src)
{
    return dst.dtype == TRI_BF16 ? tri_cuda_float_to_bf16(d, dst, src) : tri_cuda_bf16_to_float(d, dst, src);
}
