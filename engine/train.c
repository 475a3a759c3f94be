/* engine/train.c - one training step and evaluation (see train.h). */
#include "engine/train.h"

#include <math.h>
#include <stdlib.h>

#include "engine/status.h"

int tri_trainer_create(tri_trainer *t, tri_stage *stage, const tri_grid *grid, tri_device *dev,
                       const tri_step_config *cfg, const tri_adamw_config *adamw)
{
    t->stage = stage;
    t->grid = grid;
    t->dev = dev;
    t->cfg = *cfg;
    if (cfg->n_micro < 1)
        return TRI_ERR(TRI_EINVAL, "a step needs at least one micro-batch (got %d)", cfg->n_micro);
    if (grid->pp > 1)
        return TRI_ERR(TRI_ENOTSUP, "pipeline parallelism needs the pipeline executor");
    t->windows = malloc((size_t)(stage->samples_per_mb * stage->window) * sizeof *t->windows);
    if (!t->windows)
        return TRI_ERR(TRI_ENOMEM, "trainer: out of memory");
    int64_t lo = 0, hi = stage->layout->padded_numel;
    tri_arena_plan(&t->arena);
    int rc = tri_optimizer_take(&t->opt, &t->arena, adamw, lo, hi);
    if (!rc) rc = tri_arena_commit(&t->arena, dev);
    if (!rc) rc = tri_optimizer_take(&t->opt, &t->arena, adamw, lo, hi);
    if (!rc) rc = tri_optimizer_reset(dev, &t->opt);
    return rc;
}

void tri_trainer_destroy(tri_trainer *t)
{
    tri_arena_release(&t->arena);
    free(t->windows);
    t->windows = NULL;
}

int64_t tri_trainer_global_batch(const tri_trainer *t)
{
    return t->stage->samples_per_mb * t->cfg.n_micro * t->grid->dp;
}

/* First sample of micro-batch mb of this data-parallel rank in global batch `iter`. */
static int64_t first_sample(const tri_trainer *t, int64_t iter, int mb)
{
    int64_t B = t->stage->samples_per_mb;
    return iter * tri_trainer_global_batch(t) + ((int64_t)t->grid->dp_rank * t->cfg.n_micro + mb) * B;
}

static int load(tri_trainer *t, const tri_batch_source *src, int64_t first, int slot)
{
    int rc = src->fill(src->ctx, first, t->stage->samples_per_mb, t->windows);
    return rc ? rc : t->stage->load_batch(t->stage->self, slot, t->windows);
}

/* Forward and backward of this replica's micro-batches; *loss_sum = sum of their token losses. */
static int run_microbatches(tri_trainer *t, const tri_batch_source *src, int64_t iter, double *loss_sum)
{
    tri_stage *st = t->stage;
    float dloss = 1.0f / (float)(st->tokens_per_mb * t->cfg.n_micro * t->grid->dp);
    *loss_sum = 0.0;
    int rc = TRI_OK;
    for (int mb = 0; mb < t->cfg.n_micro && !rc; mb++) {
        double s = 0.0;
        rc = load(t, src, first_sample(t, iter, mb), 0);
        if (!rc) rc = st->forward(st->self, 0, true, dloss);
        if (!rc) rc = st->backward(st->self, 0);
        if (!rc) rc = st->loss_sum(st->self, 0, &s);
        *loss_sum += s;
    }
    return rc;
}

/* Gradient reductions that make every rank's gradients complete for its optimizer range. */
static int sync_grads(tri_trainer *t)
{
    const tri_param_layout *L = t->stage->layout;
    tri_tensor grads = t->stage->grads;
    int rc = TRI_OK;
    for (int i = 0; i < L->n && !rc; i++) {
        const tri_param *p = &L->params[i];
        tri_tensor g = tri_tensor_range(grads, p->offset, p->numel);
        /* under SP each TP rank saw only its sequence shard: sum the replicated parameters' parts */
        if (t->cfg.sequence_parallel && p->tp_replicated && t->grid->tp > 1)
            rc = tri_comm_all_reduce(t->grid->tp_comm, g, TRI_REDUCE_SUM);
        if (!rc && p->spec.tied && t->grid->embd_comm)
            rc = tri_comm_all_reduce(t->grid->embd_comm, g, TRI_REDUCE_SUM);
    }
    if (!rc && t->grid->dp > 1)
        rc = tri_comm_all_reduce(t->grid->dp_comm, grads, TRI_REDUCE_SUM);
    return rc;
}

/* x = the sum of x over comm, through the device scalar (comms work on device memory). */
static int all_reduce_value(tri_trainer *t, tri_comm *comm, double *x)
{
    if (comm->size == 1)
        return TRI_OK;
    float f = (float)*x;
    int rc = tri_device_copy_from_host(t->dev, t->opt.scalar, &f);
    if (!rc) rc = tri_comm_all_reduce(comm, t->opt.scalar, TRI_REDUCE_SUM);
    if (!rc) rc = tri_device_copy_to_host(t->dev, &f, t->opt.scalar);
    *x = f;
    return rc;
}

static int grad_norm(tri_trainer *t, double *norm)
{
    double sumsq = 0.0;
    int rc = tri_grad_sumsq(t->dev, t->stage->layout, t->stage->grads, t->opt.lo, t->opt.hi,
                            t->opt.scalar, &sumsq);
    /* sum over the ranks of one model replica (tp x pp); every replica holds the same gradients */
    if (!rc) rc = all_reduce_value(t, t->grid->mp_comm, &sumsq);
    *norm = sqrt(sumsq);
    return rc;
}

int tri_trainer_gradients(tri_trainer *t, const tri_batch_source *src, int64_t iter, double *loss)
{
    tri_stage *st = t->stage;
    double loss_sum = 0.0;
    int rc = tri_op_fill(t->dev, st->grads, 0.0f);
    if (!rc) rc = run_microbatches(t, src, iter, &loss_sum);
    if (!rc) rc = sync_grads(t);
    if (!rc) rc = all_reduce_value(t, t->grid->dp_comm, &loss_sum);
    *loss = loss_sum / (double)(st->tokens_per_mb * t->cfg.n_micro * t->grid->dp);
    return rc;
}

int tri_trainer_step(tri_trainer *t, const tri_batch_source *src, int64_t iter, float lr,
                     tri_step_result *res)
{
    tri_stage *st = t->stage;
    double norm = 0.0;
    int rc = tri_trainer_gradients(t, src, iter, &res->loss);
    if (!rc) rc = grad_norm(t, &norm);
    if (rc)
        return rc;
    if (!isfinite(norm))
        return TRI_ERR(TRI_ENONFINITE, "iteration %lld: the gradient norm is %g; no update applied",
                       (long long)iter + 1, norm);
    float scale = t->cfg.clip_grad > 0 && norm > t->cfg.clip_grad ? (float)(t->cfg.clip_grad / norm) : 1.0f;
    rc = tri_optimizer_step(t->dev, &t->opt, st->layout, st->params, st->grads, lr, scale);
    res->grad_norm = norm;
    res->lr = lr;
    return rc;
}

int tri_trainer_eval(tri_trainer *t, const tri_batch_source *src, int n_batches, double *loss)
{
    tri_stage *st = t->stage;
    double total = 0.0;
    int rc = TRI_OK;
    int64_t B = st->samples_per_mb;
    for (int k = 0; k < n_batches && !rc; k++) {
        double s = 0.0;
        rc = load(t, src, ((int64_t)k * t->grid->dp + t->grid->dp_rank) * B, 0);
        if (!rc) rc = st->forward(st->self, 0, false, 0.0f);
        if (!rc) rc = st->loss_sum(st->self, 0, &s);
        total += s;
    }
    if (!rc) rc = all_reduce_value(t, t->grid->dp_comm, &total);
    *loss = total / (double)(st->tokens_per_mb * (int64_t)n_batches * t->grid->dp);
    return rc;
}
