/* checkpoints/snapshot.c - one rank's part of a checkpoint step, copied to host memory (see
 * snapshot.h). */
#include "checkpoints/snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "engine/train/state_shards.h"
#include "engine/core/status.h"

tri_box tri_ckpt_shard_box(const tri_param *p)
{
    tri_box b = {.ndim = p->spec.ndim};
    for (int d = 0; d < b.ndim; d++) {
        b.off[d] = p->global_offset[d];
        b.shape[d] = p->local_shape[d];
    }
    return b;
}

/* The sizes a snapshot of the state shards (tri_trainer_state_shards) needs: entries of each kind and
 * floats of pool (the stored values, plus one parameter's worth of scratch for the collective weight
 * reads a rank takes part in without storing). */
static void measure(const tri_state_shard *sh, int n, int *n_model, int *n_optim, int *n_local, size_t *floats)
{
    size_t values = 0, scratch = 0;
    *n_model = *n_optim = *n_local = 0;
    for (int i = 0; i < n; i++) {
        const tri_state_shard *e = &sh[i];
        size_t len = (size_t)(e->hi - e->lo);
        if (!e->stored) {
            if (e->group == TRI_STATE_WEIGHTS && e->holder && len > scratch)
                scratch = len;
            continue;
        }
        values += len;
        *n_model += e->group == TRI_STATE_WEIGHTS;
        *n_optim += e->group == TRI_STATE_EXP_AVG || e->group == TRI_STATE_MOMENTUM;
        *n_local += e->group >= TRI_STATE_OUTER_ANCHOR;
    }
    *floats = values + scratch;
}

/* Makes room for `floats` floats and the entries; the pool only grows. */
static int reserve(tri_ckpt_snapshot *s, size_t floats, int n_model, int n_optim, int n_local)
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
    free(s->local);
    s->model = calloc((size_t)(n_model > 0 ? n_model : 1), sizeof *s->model);
    s->optim = calloc((size_t)(n_optim > 0 ? n_optim : 1), sizeof *s->optim);
    s->local = calloc((size_t)(n_local > 0 ? n_local : 1), sizeof *s->local);
    if (!s->model || !s->optim || !s->local)
        return TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %d snapshot entries", n_model + n_optim + n_local);
    return TRI_OK;
}

static int tensor_of(const tri_ckpt_manifest *m, const tri_param *p, int *tensor)
{
    *tensor = tri_manifest_tensor(m, p->spec.name);
    if (*tensor < 0)
        return TRI_ERR(TRI_EINVAL, "checkpoint: parameter %s is not in the model's parameter list", p->spec.name);
    return TRI_OK;
}

/* A stored shard's snapshot entry (model: the weights; optimizer: the first moment, the second
 * following it in the pool). */
static int add_entry(tri_ckpt_snap_entry *e, const tri_ckpt_manifest *m, const tri_state_shard *sh, size_t data)
{
    snprintf(e->name, sizeof e->name, "%s", sh->param->spec.name);
    e->shard = tri_ckpt_shard_box(sh->param);
    e->lo = sh->lo;
    e->hi = sh->hi;
    e->data = data;
    e->n_groups = 0;
    return tensor_of(m, sh->param, &e->tensor);
}

/* The weights: every holder reads (collective over dp: every rank takes part, in the same order,
 * even after a failure here or before, rc), into the pool where stored, else into the scratch at its
 * end. */
static int take_weights(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, const tri_state_shard *sh,
                        int n, int rc)
{
    for (int i = 0; i < n; i++) {
        const tri_state_shard *e = &sh[i];
        if (e->group != TRI_STATE_WEIGHTS || !e->holder)
            continue;
        size_t len = (size_t)(e->hi - e->lo);
        float *dst = s->pool + (e->stored ? s->pool_used : s->pool_cap - len);
        int prc = tri_trainer_state_read(t, e, dst);
        if (rc || !e->stored) {
            rc = rc ? rc : prc;
            continue;
        }
        if (!prc) prc = add_entry(&s->model[s->n_model], m, e, s->pool_used);
        if (!prc) {
            s->n_model++;
            s->pool_used += len;
        }
        rc = prc;
    }
    return rc;
}

/* The stored optimizer state: each owned piece's groups (the first moment, then the second; or the
 * momentum buffer) into the pool, one entry a piece. */
static int take_moments(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, const tri_state_shard *sh,
                        int n)
{
    int rc = TRI_OK;
    for (int i = 0; i < n && !rc; i++) {
        const tri_state_shard *e = &sh[i];
        if (e->group == TRI_STATE_WEIGHTS || e->group >= TRI_STATE_OUTER_ANCHOR || !e->stored)
            continue;
        if (e->group == TRI_STATE_EXP_AVG || e->group == TRI_STATE_MOMENTUM)
            rc = add_entry(&s->optim[s->n_optim++], m, e, s->pool_used);
        tri_ckpt_snap_entry *x = &s->optim[s->n_optim - 1];
        if (!rc && x->n_groups < 2)
            x->groups[x->n_groups++] = tri_state_group_name(e->group);
        if (!rc) rc = tri_trainer_state_read(t, e, s->pool + s->pool_used);
        s->pool_used += (size_t)(e->hi - e->lo);
    }
    return rc;
}

/* Local SGD's stored entries (outer slices, the replica's own state) and the error-feedback
 * residual, each into the pool. */
static int take_local(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, const tri_state_shard *sh,
                      int n)
{
    int rc = TRI_OK;
    for (int i = 0; i < n && !rc; i++) {
        const tri_state_shard *e = &sh[i];
        if (e->group < TRI_STATE_OUTER_ANCHOR || !e->stored)
            continue;
        tri_ckpt_snap_entry *x = &s->local[s->n_local++];
        rc = add_entry(x, m, e, s->pool_used);
        x->group = (int)e->group;
        if (!rc) rc = tri_trainer_state_read(t, e, s->pool + s->pool_used);
        s->pool_used += (size_t)(e->hi - e->lo);
    }
    return rc;
}

int tri_ckpt_snapshot_reserve(tri_ckpt_snapshot *s, tri_trainer *t)
{
    tri_state_shard *sh = NULL;
    int n = 0, n_model, n_optim, n_local;
    size_t floats;
    s->dev = t->dev;
    int rc = tri_trainer_state_shards(t, &sh, &n);
    measure(sh, n, &n_model, &n_optim, &n_local, &floats);
    if (!rc) rc = reserve(s, floats, n_model, n_optim, n_local);
    if (!rc && s->pool)
        memset(s->pool, 0, floats * sizeof(float)); /* the page faults happen here, not in the loop */
    free(sh);
    return rc;
}

int tri_ckpt_snapshot_take(tri_ckpt_snapshot *s, tri_trainer *t, const tri_ckpt_manifest *m, int64_t iteration)
{
    const tri_grid *g = t->grid;
    int zero_stage = t->chunks[0]->run.zero_stage;
    s->dev = t->dev;
    /* under expert parallelism each ep rank's first replica (edp rank 0) holds experts no other
     * rank of its (tp, pp) stores: it writes a model file (and, at ZeRO 0, an optimizer file) too */
    bool ep_first = (g->ep > 1 || g->etp > 1) && g->edp_rank == 0;
    /* the replica rank: under context parallelism the cp ranks of a (tp, dp, pp) coordinate hold the same
     * parameters and ZeRO shards over dp x cp (the layout's rank), so the files are indexed by the rank in
     * dp x cp and only its rank 0 writes the model file; at cp 1 it is the dp rank */
    int rep = g->cp > 1 ? g->cp_rank + g->cp * g->dp_rank : g->dp_rank;
    s->writes_model = rep == 0 || ep_first;
    s->writes_optim = zero_stage > 0 || rep == 0 || ep_first;
    /* the file's index: the ep rank, and under expert tensor parallelism the (etp, ep) slice holder, so
     * two etp ranks of one (tp, pp) never write one name */
    s->model_ep = ep_first ? g->ep_rank + (g->etp > 1 ? g->ep * g->etp_rank : 0) : 0;
    s->tp_rank = g->tp_rank;
    s->pp_rank = g->pp_rank;
    s->dp_rank = rep;
    s->world_rank = g->world_rank;
    s->optim_dp = zero_stage > 0 || ep_first ? rep : 0;
    s->iteration = iteration;
    s->optimizer_step = t->opt[0].step;
    s->n_model = s->n_optim = s->n_local = 0;
    s->writes_outer = t->cfg.local.steps > 0;
    s->writes_local = s->writes_outer || t->chunks[0]->zero.comp.on;
    s->pool_used = 0;
    tri_state_shard *sh = NULL;
    int n = 0, n_model, n_optim, n_local;
    size_t floats;
    int rc = tri_trainer_state_shards(t, &sh, &n);
    if (rc)
        return rc;
    measure(sh, n, &n_model, &n_optim, &n_local, &floats);
    rc = reserve(s, floats, n_model, n_optim, n_local);
    if (s->pool) /* the collective reads, even after a failure on this rank */
        rc = take_weights(s, t, m, sh, n, rc);
    if (!rc) rc = take_moments(s, t, m, sh, n);
    if (!rc) rc = take_local(s, t, m, sh, n);
    free(sh);
    return rc;
}

void tri_ckpt_snapshot_free(tri_ckpt_snapshot *s)
{
    if (s->dev)
        tri_device_host_free(s->dev, s->pool);
    free(s->model);
    free(s->optim);
    free(s->local);
    memset(s, 0, sizeof *s);
}
