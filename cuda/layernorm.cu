/* cuda/layernorm.cu - layernorm forward and backward on the GPU.
 *
 * The simple kernels of cuda/kernels/layernorm.kern.h, tested on the CPU against the CPU backend:
 * one thread per row for the normalisation and the input gradient (engine/math.h's row
 * functions), one thread per column for dw and db, walking the rows in order (deterministic, the
 * CPU backend's order, no atomics). The backward's two launches touch disjoint outputs. */
#include "cuda/kernels/layernorm.kern.h"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean,
                                          tri_tensor rstd, tri_tensor inp, tri_tensor w, tri_tensor b)
{
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    return TRI_CUDA_LAUNCH_N(layernorm_forward_kernel, N, tri_cuda_of(d)->stream, tri_fp(out),
                             tri_fp(mean), tri_fp(rstd), tri_fp(inp), tri_fp(w), tri_fp(b), N, C);
}

extern "C" int tri_cuda_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw,
                                           tri_tensor db, tri_tensor dout, tri_tensor inp,
                                           tri_tensor w, tri_tensor mean, tri_tensor rstd)
{
    cudaStream_t s = tri_cuda_of(d)->stream;
    int64_t N = tri_tensor_rows(inp), C = tri_tensor_cols(inp);
    int rc = TRI_CUDA_LAUNCH_N(layernorm_backward_input_kernel, N, s, tri_fp(dinp), tri_fp(dout),
                               tri_fp(inp), tri_fp(w), tri_fp(mean), tri_fp(rstd), N, C);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(layernorm_backward_params_kernel, C, s, tri_fp(dw), tri_fp(db),
                                    tri_fp(dout), tri_fp(inp), tri_fp(mean), tri_fp(rstd), N, C);
    return rc;
}
