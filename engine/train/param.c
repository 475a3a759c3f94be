/* engine/train/param.c - parameter initialisation and views (see param.h). */
#include "engine/train/param.h"

#include "engine/core/rng.h"

void tri_param_init_host(const tri_param *p, uint64_t seed, float *host)
{
    const tri_param_spec *s = &p->spec;
    uint64_t stream = tri_rng_hash_str(s->name);
    int64_t idx[TRI_MAX_DIMS] = {0};
    for (int64_t i = 0; i < p->numel; i++) {
        /* global flat index of local element i */
        int64_t g = 0;
        for (int d = 0; d < s->ndim; d++)
            g = g * s->shape[d] + p->global_offset[d] + idx[d];
        bool live = p->global_offset[0] + idx[0] < s->init_rows;
        float v = 0.0f;
        if (live && s->init == TRI_INIT_ONES)
            v = 1.0f;
        else if (live && s->init == TRI_INIT_NORMAL)
            v = (float)(tri_rng_normal(seed, stream, (uint64_t)g) * s->init_std);
        host[i] = v;
        for (int d = s->ndim - 1; d >= 0; d--) {
            if (++idx[d] < p->local_shape[d])
                break;
            idx[d] = 0;
        }
    }
}

tri_tensor tri_param_view(const tri_param *p, tri_tensor flat)
{
    tri_tensor t = tri_tensor_range(flat, p->offset, p->numel);
    return tri_tensor_reshape(t, p->spec.ndim, p->local_shape);
}

int64_t tri_param_real_numel(const tri_param *p)
{
    const tri_param_spec *s = &p->spec;
    if (s->ndim < 1 || s->init_rows <= 0 || s->init_rows >= s->shape[0] || p->local_shape[0] <= 0)
        return p->numel;
    int64_t rows = s->init_rows - p->global_offset[0], row = p->numel / p->local_shape[0];
    rows = rows < 0 ? 0 : rows > p->local_shape[0] ? p->local_shape[0] : rows;
    return rows * row;
}
