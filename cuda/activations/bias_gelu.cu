/* cuda/activations/bias_gelu.cu - bias + GELU forward on the GPU (the MLP's first matmul epilogue where
 * cuBLASLt's GELU epilogue does not serve: its own GELU approximation is not activations_math.h's),
 * each tensor fp32 or bf16.
 *
 * The fast kernel (the default; cuda/activations/bias_gelu_fast.cuh, also run on the CPU): a thread per 8
 * consecutive elements, 16-byte accesses to inp and out when both start 16-byte aligned and to the bias
 * when it is aligned and OC a multiple of 8; with the device's simple switch on, its twin of
 * cuda/activations/bias_gelu.kern.h (a thread per element, tested on the CPU against the CPU backend).
 * Both call engine/device/ops/activations_math.h's tri_bias_gelu per element: the same bits. */
#include "cuda/activations/bias_gelu.kern.h"
#include "cuda/activations/bias_gelu_fast.cuh"
#include "cuda/launch.cuh"
#include "engine/device/ops/activations_math.h"

extern "C" int tri_cuda_bias_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp, tri_tensor bias)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(inp), OC = tri_tensor_numel(bias);
    if (cu->simple)
        return TRI_CUDA_LAUNCH_N(bias_gelu_forward_kernel, n, cu->stream, tri_data(out), tri_is_bf16(out),
                                 tri_data(inp), tri_is_bf16(inp), tri_data(bias), tri_is_bf16(bias), n, OC);
    bool vec = tri_aligned16_host(out.data) && tri_aligned16_host(inp.data);
    bool bias_vec = tri_aligned16_host(bias.data) && OC % 8 == 0;
    return TRI_CUDA_LAUNCH_STRIDED(bias_gelu_forward_fast_kernel, tri_vec8_grid(n), TRI_BLOCK, cu->stream,
                                   tri_data(out), tri_is_bf16(out), tri_data(inp), tri_is_bf16(inp), tri_data(bias),
                                   tri_is_bf16(bias), n, OC, vec, bias_vec);
}
