/* cuda/activations/swiglu.cu - SwiGLU on the GPU: the fast kernels of cuda/activations/swiglu_fast.cuh (a block per
 * row, 8 elements a thread with 16-byte accesses, also run on the CPU), or with the device's simple
 * switch their twins of cuda/activations/swiglu.kern.h (a thread per element, tested on the CPU against
 * the CPU backend). The same function per element: the same bits. */
#include "cuda/activations/swiglu.kern.h"
#include "cuda/activations/swiglu_fast.cuh"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_swiglu_forward(tri_device *d, tri_tensor out, tri_tensor gate_up)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(gate_up), F = tri_tensor_cols(gate_up) / 2;
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(swiglu_forward_kernel, N * F, cu->stream, tri_data(out), tri_is_bf16(out),
                                 tri_data(gate_up), tri_is_bf16(gate_up), N, F);
    return TRI_CUDA_LAUNCH_STRIDED(swiglu_forward_fast_kernel, tri_row_blocks(N), TRI_BLOCK, cu->stream, tri_data(out),
                                   tri_is_bf16(out), tri_data(gate_up), tri_is_bf16(gate_up), N, F);
}

extern "C" int tri_cuda_swiglu_backward(tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(gate_up), F = tri_tensor_cols(gate_up) / 2;
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(swiglu_backward_kernel, N * F, cu->stream, tri_data(dgate_up), tri_is_bf16(dgate_up),
                                 tri_data(gate_up), tri_is_bf16(gate_up), tri_data(dout), tri_is_bf16(dout), N, F);
    return TRI_CUDA_LAUNCH_STRIDED(swiglu_backward_fast_kernel, tri_row_blocks(N), TRI_BLOCK, cu->stream,
                                   tri_data(dgate_up), tri_is_bf16(dgate_up), tri_data(gate_up), tri_is_bf16(gate_up),
                                   tri_data(dout), tri_is_bf16(dout), N, F);
}
