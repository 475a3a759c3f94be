/* checkpoints/snapshot.c - one rank's part of a checkpoint step, copied to host memory (see
 * snapshot.h). */
#include "checkpoints/snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "engine/core/status.h"

bool tri_ckpt_stores(const tri_trainer *t, const tri_param *p)
{
    return !p->spec.tied_copy && (!p->tp_replicated || t->grid->tp_rank == 0) &&
           (p->replicas <= 1 || t->grid->tp_rank % p->replicas == 0); /* one holder of a shared shard */
}

tri_box tri_ckpt_shard_box(const tri_param *p)
{
    tri_box b = {.ndim = p->spec.ndim};
    for (int d = 0; d < b.ndim; d++) {
        b.off[d] = p->global_offset[d];
        b.shape[d] = p->local_shape[d];
    }
    return b;
}

/* The sizes a snapshot of t needs: entries of each kind and floats of pool (values, plus one
 * parameter's worth of scratch for the reads a non-writing rank takes part in). */
static void measure(const tri_trainer *t, bool writes_model, bool writes_optim, int *n_model, int *n_optim,
                    size_t *floats)
{
    size_t values = 0, scratch = 0;
    *n_model = *n_optim = 0;
    for (int c = 0; c < t->v; c++) {
        const tri_param_layout *L = &t->chunks[c]->layout;
        const tri_zero *z = &t->chunks[c]->zero;
        for (int i = 0; i < L->n; i++) {
            const tri_param *p = &L->params[i];
            if (!tri_ckpt_stores(t, p))
                continue;
            if (writes_model) {
                (*n_model)++;
                values += (size_t)p->numel;
            } else if ((size_t)p->numel > scratch) {
                scratch = (size_t)p->numel;
            }
            for (int k = 0; writes_optim && k < tri_zero_n_owned(z); k++) {
                int64_t s, n, at;
                if (tri_zero_owned_piece(z, k, p, &s, &n, &at)) {
                    (*n_optim)++;
                    values += 2 * (size_t)n;
                }
            }
        }
    }
    *floats = values + scratch;
}

/* Makes room for `floats` floats and the entries; the pool only grows. */
static int reserve(tri_ckpt_snapshot *s, size_t floats, int n_model, int n_optim)
{
    if (floats > s->pool_cap) {
        tri_device_host_free(s->dev, s->pool);
        s->pool = NULL;
        s->pool_cap = 0;
        int rc = tri_device_host_alloc(s->dev, (void **)&s->pool, floats * sizeof(float));
        if (rc)
            return tri_error_context(rc, "checkpoint: host staging memory of %zu bytes", floats * sizeof(float));
        s->pool_cap = floats;
    }
    free(s->model);
    free(s->optim);
    s->model = calloc((size_t)(n_model > 0 ? n_model : 1), sizeof *s->model);
    s->optim = calloc((size_t)(n_optim > 0 ? n_optim : 1), sizeof *s->optim);
    if (!s->model || !s->optim)
        return TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %d snapshot entries", n_model + n_optim);
    return TRI_OK;
}

static int tensor_of(const tri_ckpt_manifest *m, const tri_param *p, int *tensor)
{
    *tensor = tri_manifest_tensor(m, p->spec.name);
    if (*tensor < 0)
        return TRI_ERR(TRI_EINVAL, "checkpoint: parameter %s is not in the model's parameter list", p->spec.name);
    return TRI_OK;
}

/* Parameter i of chunk c: its local values into the pool (a writing rank) or the scratch at the
 * pool's end (the others: the read is collective over dp, so every rank takes part even after a
 * failure here). */
static int take_param(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, int c, int i, int rc)
{
    tri_chunk *st = t->chunks[c];
    const tri_param *p = &st->layout.params[i];
    float *dst = s->pool + (s->writes_model ? s->pool_used : s->pool_cap - (size_t)p->numel);
    int prc = tri_zero_read_param(&st->zero, p, false, dst);
    if (rc || !s->writes_model)
        return rc ? rc : prc;
    tri_ckpt_snap_entry *e = &s->model[s->n_model];
    snprintf(e->name, sizeof e->name, "%s", p->spec.name);
    e->shard = tri_ckpt_shard_box(p);
    e->lo = 0;
    e->hi = p->numel;
    e->data = s->pool_used;
    if (!prc) prc = tensor_of(m, p, &e->tensor);
    if (!prc) {
        s->n_model++;
        s->pool_used += (size_t)p->numel;
    }
    return prc;
}

/* The owned pieces of parameter i of chunk c: Adam's m and v over them into the pool. */
static int take_moments(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, int c, int i)
{
    const tri_zero *z = &t->chunks[c]->zero;
    const tri_param *p = &t->chunks[c]->layout.params[i];
    int rc = TRI_OK;
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t start, n, at;
        if (!tri_zero_owned_piece(z, k, p, &start, &n, &at))
            continue;
        tri_ckpt_snap_entry *e = &s->optim[s->n_optim];
        snprintf(e->name, sizeof e->name, "%s", p->spec.name);
        e->shard = tri_ckpt_shard_box(p);
        e->lo = start - p->offset;
        e->hi = e->lo + n;
        e->data = s->pool_used;
        rc = tensor_of(m, p, &e->tensor);
        if (!rc) rc = tri_device_copy_to_host(t->dev, s->pool + s->pool_used, tri_tensor_range(t->opt[c].m, at, n));
        if (!rc) rc = tri_device_copy_to_host(t->dev, s->pool + s->pool_used + n, tri_tensor_range(t->opt[c].v, at, n));
        if (!rc) {
            s->n_optim++;
            s->pool_used += 2 * (size_t)n;
        }
    }
    return rc;
}

int tri_ckpt_snapshot_reserve(tri_ckpt_snapshot *s, tri_trainer *t)
{
    int zero_stage = t->chunks[0]->zero.stage, n_model, n_optim;
    size_t floats;
    s->dev = t->dev;
    measure(t, t->grid->dp_rank == 0, zero_stage > 0 || t->grid->dp_rank == 0, &n_model, &n_optim, &floats);
    int rc = reserve(s, floats, n_model, n_optim);
    if (!rc && s->pool)
        memset(s->pool, 0, floats * sizeof(float)); /* the page faults happen here, not in the loop */
    return rc;
}

int tri_ckpt_snapshot_take(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, int64_t iteration)
{
    const tri_grid *g = t->grid;
    int zero_stage = t->chunks[0]->zero.stage;
    s->dev = t->dev;
    s->writes_model = g->dp_rank == 0;
    s->writes_optim = zero_stage > 0 || g->dp_rank == 0;
    s->tp_rank = g->tp_rank;
    s->pp_rank = g->pp_rank;
    s->dp_rank = g->dp_rank;
    s->world_rank = g->world_rank;
    s->optim_dp = zero_stage > 0 ? g->dp_rank : 0;
    s->iteration = iteration;
    s->optimizer_step = t->opt[0].step;
    s->n_model = s->n_optim = 0;
    s->pool_used = 0;
    int n_model, n_optim;
    size_t floats;
    measure(t, s->writes_model, s->writes_optim, &n_model, &n_optim, &floats);
    int rc = reserve(s, floats, n_model, n_optim);
    /* every data-parallel rank reads every stored parameter, in the same order, even after an error */
    for (int c = 0; c < t->v; c++)
        for (int i = 0; i < t->chunks[c]->layout.n; i++)
            if (tri_ckpt_stores(t, &t->chunks[c]->layout.params[i]))
                rc = s->pool ? take_param(s, t, m, c, i, rc) : rc;
    for (int c = 0; c < t->v && !rc && s->writes_optim; c++)
        for (int i = 0; i < t->chunks[c]->layout.n && !rc; i++)
            if (tri_ckpt_stores(t, &t->chunks[c]->layout.params[i]))
                rc = take_moments(s, t, m, c, i);
    return rc;
}

void tri_ckpt_snapshot_free(tri_ckpt_snapshot *s)
{
    if (s->dev)
        tri_device_host_free(s->dev, s->pool);
    free(s->model);
    free(s->optim);
    memset(s, 0, sizeof *s);
}
