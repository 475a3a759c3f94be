/* cuda/attention/rope.cu - rotary position embedding on the GPU, in place: the fast kernel of
 * cuda/attention/rope_fast.cuh (a block per row, 8 frequencies of a head a thread with 16-byte
 * accesses, also run on the CPU), or with the device's simple switch its twin of
 * cuda/attention/rope.kern.h (a thread per pair, tested on the CPU against the CPU backend). The same
 * function per pair: the same bits. */
#include "cuda/attention/rope.kern.h"
#include "cuda/attention/rope_fast.cuh"
#include "cuda/launch.cuh"

static int rope(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T, int64_t row0,
                int cp, int cp_rank, int backward)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(x), W = tri_tensor_cols(x), half = tri_tensor_cols(cos);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(rope_kernel, N * n_heads * half, cu->stream, tri_data(x), tri_is_bf16(x), tri_fp(cos),
                                 tri_fp(sin), N, W, n_heads, half, T, row0, cp, cp_rank, backward);
    return TRI_CUDA_LAUNCH_STRIDED(rope_fast_kernel, tri_row_blocks(N), TRI_BLOCK, cu->stream, tri_data(x),
                                   tri_is_bf16(x), tri_fp(cos), tri_fp(sin), N, W, n_heads, half, T, row0, cp, cp_rank, backward);
}

extern "C" int tri_cuda_rope_forward(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads,
                                     int64_t T, int64_t row0, int cp, int cp_rank)
{
    return rope(d, x, cos, sin, n_heads, T, row0, cp, cp_rank, 0);
}

extern "C" int tri_cuda_rope_backward(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads,
                                      int64_t T, int64_t row0, int cp, int cp_rank)
{
    return rope(d, dx, cos, sin, n_heads, T, row0, cp, cp_rank, 1);
}
