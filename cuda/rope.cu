/* cuda/rope.cu - rotary position embedding on the GPU: cuda/kernels/rope.kern.h, in place. */
#include "cuda/kernels/rope.kern.h"
#include "cuda/launch.cuh"

static int rope(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T, int64_t row0,
                int backward)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(x), W = tri_tensor_cols(x), half = tri_tensor_cols(cos);
    return TRI_CUDA_LAUNCH_N(rope_kernel, N * n_heads * half, cu->stream, tri_data(x), tri_is_bf16(x), tri_fp(cos),
                             tri_fp(sin), N, W, n_heads, half, T, row0, backward);
}

extern "C" int tri_cuda_rope_forward(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads,
                                     int64_t T, int64_t row0)
{
    return rope(d, x, cos, sin, n_heads, T, row0, 0);
}

extern "C" int tri_cuda_rope_backward(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads,
                                      int64_t T, int64_t row0)
{
    return rope(d, dx, cos, sin, n_heads, T, row0, 1);
}
