/* cuda/optimizer/momentum.cu - SGD with momentum, LARS, LAMB and the trust ratio on the GPU: the
 * kernels of cuda/optimizer/momentum.kern.h, a launch per piece on the device's stream (no host
 * wait; the trust ratios stay in device memory). LAMB's bias corrections are computed on the host
 * with powf exactly as the CPU backend computes them. */
#include <math.h>

#include "cuda/launch.cuh"
#include "cuda/optimizer/momentum.kern.h"

static const float *ratios_of(tri_tensor ratios)
{
    return tri_tensor_present(ratios) ? (const float *)ratios.data : NULL;
}

extern "C" int tri_cuda_sgd_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios,
                                  const tri_sgd_hparams *hp)
{
    tri_cuda *c = tri_cuda_of(d);
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++) {
        const tri_sgd_piece *p = &pieces[k];
        int64_t len = tri_tensor_numel(p->param);
        rc = TRI_CUDA_LAUNCH_N(sgd_kernel, len, c->stream, tri_fp(p->param), tri_fp(p->grad), tri_fp(p->buf), len,
                               ratios_of(ratios), p->ratio, hp->lr, hp->momentum, p->weight_decay, hp->grad_scale,
                               (int)hp->nesterov, (int)hp->lars);
    }
    return rc;
}

extern "C" int tri_cuda_lamb_direction_multi(tri_device *d, const tri_adamw_piece *pieces, int n,
                                             const tri_adamw_hparams *hp)
{
    tri_cuda *c = tri_cuda_of(d);
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step), bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++) {
        const tri_adamw_piece *p = &pieces[k];
        int64_t len = tri_tensor_numel(p->param);
        rc = TRI_CUDA_LAUNCH_N(lamb_direction_kernel, len, c->stream, tri_fp(p->param), tri_fp(p->grad), tri_fp(p->m),
                               tri_fp(p->v), len, hp->beta1, hp->beta2, hp->eps, p->weight_decay, bc1, bc2,
                               hp->grad_scale);
    }
    return rc;
}

extern "C" int tri_cuda_lamb_update_multi(tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, float lr)
{
    tri_cuda *c = tri_cuda_of(d);
    int rc = TRI_OK;
    for (int k = 0; k < n && !rc; k++) {
        const tri_sgd_piece *p = &pieces[k];
        int64_t len = tri_tensor_numel(p->param);
        rc = TRI_CUDA_LAUNCH_N(lamb_update_kernel, len, c->stream, tri_fp(p->param), tri_fp(p->grad), len,
                               ratios_of(ratios), p->ratio, lr);
    }
    return rc;
}

extern "C" int tri_cuda_trust_ratio(tri_device *d, tri_tensor ratios, tri_tensor sums, int64_t span,
                                    const tri_trust_hparams *hp)
{
    int64_t n = tri_tensor_numel(ratios);
    return TRI_CUDA_LAUNCH_N(trust_ratio_kernel, n, tri_cuda_of(d)->stream, tri_fp(ratios),
                             (const float *)sums.data, n, span, (int)hp->kind, hp->eta, hp->weight_decay, hp->u_scale);
}
