/* cuda/adamw.cu - the fused AdamW update on the GPU: one pass over param, grad, m and v with the
 * simple kernel of cuda/kernels/adamw.kern.h (engine/core/math.h's tri_adamw_element, tested on the CPU
 * against the CPU backend). The bias corrections are computed on the host with powf exactly as the
 * CPU backend computes them, so both backends feed the element update the same constants. */
#include <math.h>

#include "cuda/kernels/adamw.kern.h"
#include "cuda/launch.cuh"

extern "C" int tri_cuda_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m,
                              tri_tensor v, const tri_adamw_hparams *hp)
{
    int64_t n = tri_tensor_numel(param);
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const float bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    return TRI_CUDA_LAUNCH_N(adamw_kernel, n, tri_cuda_of(d)->stream, tri_fp(param), tri_fp(grad),
                             tri_fp(m), tri_fp(v), n, hp->lr, hp->beta1, hp->beta2, hp->eps,
                             hp->weight_decay, bc1, bc2, hp->grad_scale);
}
