/* engine/train/pipeline.c - the pipeline executor (see pipeline.h). */
#include "engine/train/pipeline.h"
#include "engine/core/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

int tri_pipeline_create(tri_pipeline *p, const tri_schedule *s, int rank, tri_comm *pp_comm,
                        tri_chunk **chunks)
{
    memset(p, 0, sizeof *p);
    p->sched = s;
    p->rank = rank;
    p->pp_comm = pp_comm;
    p->chunks = chunks;
    int n = s->n_ops[rank];
    p->last_use = malloc((size_t)(n > 0 ? n : 1));
    p->slot = malloc((size_t)s->v * (size_t)s->m * sizeof *p->slot);
    p->in_use = calloc((size_t)s->v, sizeof *p->in_use);
    p->peak = calloc((size_t)s->v, sizeof *p->peak);
    p->busy = calloc((size_t)s->v, sizeof *p->busy);
    p->batch = malloc((size_t)(n > 0 ? n : 1) * sizeof *p->batch);
    p->loss_read = calloc((size_t)s->m, 1);
    if (!p->last_use || !p->slot || !p->in_use || !p->peak || !p->busy || !p->batch || !p->loss_read) {
        tri_pipeline_destroy(p);
        return TRI_ERR(TRI_ENOMEM, "pipeline: out of memory");
    }
    tri_sched_last_uses(s, rank, p->last_use);
    for (int c = 0; c < s->v; c++) {
        int need = tri_sched_slots_needed(s, rank, c);
        if (chunks[c]->n_slots < need) {
            tri_pipeline_destroy(p);
            return TRI_ERR(TRI_EINVAL, "pipeline rank %d chunk %d has %d activation slots; schedule %s "
                           "keeps %d micro-batches in flight", rank, c, chunks[c]->n_slots, s->name, need);
        }
        p->busy[c] = calloc((size_t)chunks[c]->n_slots, 1);
        if (!p->busy[c]) {
            tri_pipeline_destroy(p);
            return TRI_ERR(TRI_ENOMEM, "pipeline: out of memory");
        }
    }
    return TRI_OK;
}

void tri_pipeline_destroy(tri_pipeline *p)
{
    for (int c = 0; p->busy && c < p->sched->v; c++)
        free(p->busy[c]);
    free(p->busy);
    free(p->last_use);
    free(p->slot);
    free(p->in_use);
    free(p->peak);
    free(p->batch);
    free(p->loss_read);
    if (p->loss_dev)
        tri_device_host_free(p->loss_dev, p->loss_host);
    memset(p, 0, sizeof *p);
}

/* The slot of (chunk, mb), taking a free one at the micro-batch's first op on this rank. */
static int acquire(tri_pipeline *p, const tri_sched_op *op, int *slot)
{
    int *s = &p->slot[op->chunk * p->sched->m + op->mb];
    if (*s >= 0) {
        *slot = *s;
        return TRI_OK;
    }
    tri_chunk *st = p->chunks[op->chunk];
    for (int k = 0; k < st->n_slots; k++) {
        if (p->busy[op->chunk][k])
            continue;
        p->busy[op->chunk][k] = 1;
        *s = *slot = k;
        if (++p->in_use[op->chunk] > p->peak[op->chunk])
            p->peak[op->chunk] = p->in_use[op->chunk];
        return TRI_OK;
    }
    return TRI_ERR(TRI_EINTERNAL, "pipeline rank %d: no free activation slot for micro-batch %d of "
                   "chunk %d (%d slots)", p->rank, op->mb, op->chunk, st->n_slots);
}

static void release(tri_pipeline *p, const tri_sched_op *op)
{
    int *s = &p->slot[op->chunk * p->sched->m + op->mb];
    p->busy[op->chunk][*s] = 0;
    p->in_use[op->chunk]--;
    *s = -1;
}

static tri_chunk_buffer buffer_of(int kind)
{
    switch (kind) {
    case TRI_SCHED_RECV_ACT: return TRI_CHUNK_ACT_IN;
    case TRI_SCHED_SEND_ACT: return TRI_CHUNK_ACT_OUT;
    case TRI_SCHED_RECV_GRAD: return TRI_CHUNK_GRAD_OUT;
    default: return TRI_CHUNK_GRAD_IN;
    }
}

/* One batched exchange of ops [i, end). */
static int exchange(tri_pipeline *p, const tri_sched_op *ops, int i, int end)
{
    int k = 0, rc = TRI_OK;
    for (int j = i; j < end && !rc; j++) {
        int slot = 0, peer = tri_sched_peer(p->sched, p->rank, &ops[j]);
        if (peer < 0)
            return TRI_ERR(TRI_EINTERNAL, "pipeline rank %d: %s of micro-batch %d has no peer",
                           p->rank, tri_sched_kind_name(ops[j].kind), ops[j].mb);
        rc = acquire(p, &ops[j], &slot);
        tri_chunk *st = p->chunks[ops[j].chunk];
        p->batch[k++] = (tri_p2p){
            .send = ops[j].kind == TRI_SCHED_SEND_ACT || ops[j].kind == TRI_SCHED_SEND_GRAD,
            .peer = peer,
            .tag = tri_sched_tag(ops[j].kind),
            .t = st->model.buffer(st->model.self, buffer_of(ops[j].kind), slot),
        };
    }
    return rc ? rc : tri_comm_p2p(p->pp_comm, p->batch, k);
}

/* Starts reading micro-batch mb's per-token losses (slot's) to the host without waiting: the
 * run adds them up after its last op (sum_losses), so the last stage's forward does not stop the
 * host until the device has caught up, as a copy that waits would, once per micro-batch. */
static int read_losses(tri_pipeline *p, tri_chunk *st, int mb, int slot)
{
    tri_tensor losses = st->model.buffer(st->model.self, TRI_CHUNK_LOSSES, slot);
    int64_t n = tri_tensor_numel(losses);
    if (n == 0)
        return TRI_OK; /* no tokens, nothing to add */
    if (!p->loss_host) {
        void *host = NULL;
        int rc = tri_device_host_alloc(st->dev, &host, (size_t)(p->sched->m * n) * sizeof(float));
        if (rc)
            return tri_error_context(rc, "pipeline: staging the losses of %d micro-batches", p->sched->m);
        p->loss_dev = st->dev;
        p->loss_host = host;
        p->loss_n = n;
    }
    if (n != p->loss_n || st->dev != p->loss_dev)
        return TRI_ERR(TRI_EINTERNAL, "pipeline: micro-batch %d has %lld token losses, the others %lld", mb,
                       (long long)n, (long long)p->loss_n);
    p->loss_read[mb] = 1;
    return tri_device_copy_to_host_async(st->dev, p->loss_host + (int64_t)mb * n, losses);
}

/* *loss_fixed = each read micro-batch's token-loss sum (tri_chunk_loss_sum_host, the order of
 * tri_chunk_loss_sum) rounded to 2^-TRI_LOSS_BITS and added up, after one wait for the device. */
int tri_pipeline_losses(tri_pipeline *p, int64_t *loss_fixed)
{
    int rc = TRI_OK, any = 0;
    *loss_fixed = 0;
    for (int mb = 0; mb < p->sched->m; mb++)
        any |= p->loss_read[mb];
    if (any)
        rc = tri_device_sync(p->loss_dev);
    for (int mb = 0; mb < p->sched->m && !rc; mb++)
        if (p->loss_read[mb]) {
            double s = tri_chunk_loss_sum_host(p->loss_host + (int64_t)mb * p->loss_n, p->loss_n);
            *loss_fixed += (int64_t)llrint(ldexp(s, TRI_LOSS_BITS));
        }
    return rc;
}

/* A compute op's pass, as tri_step_graph_run calls it. */
typedef struct pass_args {
    tri_chunk *st;
    int kind, slot;
    bool train;
    float dloss;
} pass_args;

static int run_pass(void *ctx)
{
    const pass_args *a = ctx;
    return a->kind == TRI_SCHED_FWD ? tri_chunk_forward(a->st, a->slot, a->train, a->dloss)
                                    : tri_chunk_backward(a->st, a->slot);
}

/* The pass eagerly, or in a training run with graphs through its graph (the tokens are uploaded
 * before it, the losses read after it: both outside the graph). */
static int pass(tri_pipeline *p, const tri_sched_op *op, int slot, bool train, float dloss)
{
    pass_args a = {.st = p->chunks[op->chunk], .kind = op->kind, .slot = slot, .train = train, .dloss = dloss};
    if (!p->graph || !train)
        return run_pass(&a);
    return tri_step_graph_run(p->graph, op->kind, op->chunk, slot, dloss, run_pass, &a);
}

static int compute(tri_pipeline *p, const tri_pipeline_io *io, const tri_sched_op *op, bool train,
                   float dloss)
{
    tri_chunk *st = p->chunks[op->chunk];
    int slot = 0, rc = acquire(p, op, &slot);
    if (rc)
        return rc;
    if (op->kind == TRI_SCHED_FWD) {
        if (st->first || st->last)
            rc = io->load(io->ctx, op->chunk, op->mb, slot);
        if (!rc) rc = pass(p, op, slot, train, dloss);
        if (!rc && st->last)
            rc = read_losses(p, st, op->mb, slot);
        return rc;
    }
    if (op->kind == TRI_SCHED_BWD) {
        if (!train)
            return TRI_ERR(TRI_EINVAL, "pipeline: a forward-only run met a backward op");
        return pass(p, op, slot, train, dloss);
    }
    return TRI_ERR(TRI_ENOTSUP, "pipeline: op %s is not supported by the executor",
                   tri_sched_kind_name(op->kind));
}

int tri_pipeline_run(tri_pipeline *p, const tri_pipeline_io *io, bool train, float dloss,
                     int64_t *loss_fixed)
{
    const tri_schedule *s = p->sched;
    const tri_sched_op *ops = s->ops[p->rank];
    int n = s->n_ops[p->rank], rc = TRI_OK;
    for (int k = 0; k < s->v * s->m; k++)
        p->slot[k] = -1;
    memset(p->loss_read, 0, (size_t)s->m);
    p->busy_s = 0.0;
    double t_run = tri_now_s();
    for (int i = 0; i < n && !rc;) {
        int end = tri_sched_batch_end(ops, n, i);
        if (tri_sched_is_comm(ops[i].kind)) {
            rc = exchange(p, ops, i, end);
        } else {
            double t0 = tri_now_s();
            rc = compute(p, io, &ops[i], train, dloss);
            p->busy_s += tri_now_s() - t0;
        }
        for (int j = i; j < end && !rc; j++)
            if (p->last_use[j])
                release(p, &ops[j]);
        if (rc)
            rc = tri_error_context(rc, "pipeline rank %d, op %d (%s of micro-batch %d, chunk %d)", p->rank,
                                   i, tri_sched_kind_name(ops[i].kind), ops[i].mb, ops[i].chunk);
        i = end;
    }
    if (!rc && loss_fixed) rc = tri_pipeline_losses(p, loss_fixed);
    p->total_s = tri_now_s() - t_run;
    return rc;
}
