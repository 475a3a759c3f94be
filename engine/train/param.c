/* engine/train/param.c - parameter initialisation and views (see param.h). */
#include "engine/train/param.h"

#include "engine/core/rng.h"

/* Writes the n elements of one run (consecutive global indices from g, the first `live` of them the
 * model's; the rest, vocabulary padding, stay zero). */
static void init_run(const tri_param_spec *s, uint64_t seed, uint64_t stream, int64_t g, int64_t n, int64_t live,
                     float *host)
{
    live = live < 0 ? 0 : live > n ? n : live;
    int64_t j = 0;
    if (s->init == TRI_INIT_NORMAL) {
        tri_rng_normal_floats(seed, stream, (uint64_t)g, live, s->init_std, host);
        j = live;
    }
    for (; j < n; j++)
        host[j] = j < live && s->init == TRI_INIT_ONES ? 1.0f : 0.0f;
}

/* The local shard is a set of runs along the last dimension, each a range of consecutive global flat
 * indices: one bulk draw per run (tri_rng_normal_floats, the same floats as element by element). */
void tri_param_init_host(const tri_param *p, uint64_t seed, float *host)
{
    const tri_param_spec *s = &p->spec;
    uint64_t stream = tri_rng_hash_str(s->name);
    const int last = s->ndim > 0 ? s->ndim - 1 : 0;
    const int64_t run = s->ndim > 0 ? p->local_shape[last] : p->numel;
    int64_t idx[TRI_MAX_DIMS] = {0}; /* the run's local index; idx[last] stays 0 */
    for (int64_t i = 0; i < p->numel && run > 0; i += run) {
        int64_t g = 0; /* global flat index of the run's first element */
        for (int d = 0; d < s->ndim; d++)
            g = g * s->shape[d] + p->global_offset[d] + idx[d];
        /* rows from init_rows on (along the first dimension) are padding: a whole run, or part of a
         * 1-d parameter's */
        int64_t first_row = p->global_offset[0] + idx[0];
        int64_t live = s->ndim > 1 ? (first_row < s->init_rows ? run : 0) : s->init_rows - first_row;
        init_run(s, seed, stream, g, run, live, host + i);
        for (int d = last - 1; d >= 0; d--) {
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
