/* models/session.c - one rank's chunks, schedules, sampling pipeline and trainer, for a model of any
 * family (see session.h). */
#include "models/session.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/context_parallel.h"
#include "partitioner/forward_schedule.h"
#include "partitioner/layout.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/train_layout.h"

static const char *schedule_name(const tri_train_layout *l)
{
    return l->schedule ? l->schedule : "1f1b";
}

static int make_plan(const tri_model *m, const tri_train_layout *l, tri_stage_plan *plan)
{
    tri_stage_options so = {.v = l->v > 0 ? l->v : 1, .first_layers = l->first_layers, .last_layers = l->last_layers};
    if (so.v > TRI_MAX_CHUNKS)
        return TRI_ERR(TRI_EINVAL, "%d model chunks per rank; at most %d", so.v, TRI_MAX_CHUNKS);
    tri_transformer dims = m->family->dims(m->cfg);
    tri_layout_shape shape = tri_train_layout_shape(l);
    return tri_stage_split(plan, &dims, &shape, &so);
}

static int make_train_schedule(tri_schedule *s, const tri_train_layout *l, int v)
{
    return tri_schedule_make(s, schedule_name(l), l->pp, v, l->n_micro);
}

/* The options of local chunk c on pipeline rank pp_rank: its layers and its activation slots; under
 * context parallelism (cp_rank of cp; the grid's cp_comm) its chunks of each sequence, and dp_rank its rank
 * in dp x cp (cp_rank + cp dp_rank: ZeRO's shard over the dp x cp replicas). */
static tri_chunk_place chunk_place(const tri_model_rank *r, const tri_model_run *o, int pp_rank, int dp_rank,
                                   int cp_rank, int c)
{
    int cp = o->layout.cp > 1 ? o->layout.cp : 1;
    const tri_stage_place *pl = &r->plan.chunks[tri_sched_global_chunk(&r->train, pp_rank, c)];
    int slots = tri_sched_slots_needed(&r->train, pp_rank, c);
    int eval_slots = tri_sched_slots_needed(&r->eval, pp_rank, c);
    tri_chunk_place opt = {.n_slots = slots > eval_slots ? slots : eval_slots, .layer_start = pl->layer_start,
                           .layer_end = pl->layer_end, .first = pl->first, .last = pl->last,
                           .dp_rank = cp_rank + cp * dp_rank, .seed = o->seed, .cp = cp, .cp_rank = cp_rank,
                           .seq_T = o->layout.T, .cp_comm = r->grid ? r->grid->cp_comm : NULL};
    opt.tokens_comm = r->tokens_comm ? r->tokens_comm : opt.cp_comm;
    if (opt.n_slots < 1)
        opt.n_slots = 1;
    if (r->grid) {
        opt.ep = r->grid->ep;
        opt.ep_rank = r->grid->ep_rank;
        opt.ep_comm = r->grid->ep_comm;
        opt.edp_comm = r->grid->edp_comm;
        opt.etp = r->grid->etp;
        opt.etp_rank = r->grid->etp_rank;
        opt.etp_comm = r->grid->etp_comm;
    } else if (o->layout.ep > 1 || o->layout.etp > 1) { /* planning (no grid, no comms): the same sizes */
        int etp = o->layout.etp > 1 ? o->layout.etp : 1;
        opt.ep = o->layout.ep > 1 ? o->layout.ep : 1;
        opt.ep_rank = opt.dp_rank / etp % opt.ep; /* tp 1: the stage rank s = cp_rank + cp dp_rank */
        opt.etp = etp;
        opt.etp_rank = opt.dp_rank % etp;
    }
    return opt;
}

int tri_model_rank_check(const tri_model *m, const tri_model_run *o)
{
    const tri_train_layout *l = &o->layout;
    tri_chunk_place probe = {.n_slots = 1, .layer_end = (int)m->family->dims(m->cfg).n_layer};
    int rc = m->family->check(m->cfg, l, &probe);
    if (rc)
        return rc;
    if (l->n_micro < 1)
        return TRI_ERR(TRI_EINVAL, "a step needs at least one micro-batch (got %d)", l->n_micro);
    tri_stage_plan plan;
    rc = make_plan(m, l, &plan);
    if (rc)
        return rc;
    tri_schedule s;
    rc = make_train_schedule(&s, l, plan.v);
    tri_stage_plan_free(&plan);
    if (rc)
        return rc;
    tri_schedule_free(&s);
    return TRI_OK;
}

static int make_schedules(tri_model_rank *r, const tri_model_run *o)
{
    const tri_train_layout *l = &o->layout;
    int eval_m = o->eval_micro > 0 ? o->eval_micro : l->n_micro;
    int rc = make_train_schedule(&r->train, l, r->v);
    if (!rc) rc = tri_schedule_forward_only(&r->eval, l->pp, r->v, eval_m);
    if (!rc) rc = tri_schedule_forward_only(&r->sample, l->pp, r->v, 1);
    return rc;
}

static int create_chunks(tri_model_rank *r, const tri_grid *g, const tri_model_run *o, tri_device *dev)
{
    const tri_model *m = r->model;
    int rc = TRI_OK;
    for (int c = 0; c < r->v && !rc; c++) {
        tri_chunk_place place = chunk_place(r, o, g->pp_rank, g->dp_rank, g->cp_rank, c);
        /* the replicated parameters' gradients reduce, and ZeRO shards, over dp x cp (dp_comm at cp 1) */
        rc = m->family->create(&r->impl[c], &r->chunk[c], m->cfg, &r->local, &place, dev, g->tp_comm, g->dp_cp_comm);
    }
    return rc;
}

int tri_model_rank_create(tri_model_rank *r, const tri_model *m, const tri_grid *g, const tri_model_run *o,
                          tri_device *dev)
{
    memset(r, 0, sizeof *r);
    r->model = m;
    r->grid = g;
    r->layout = o->layout;
    r->local = tri_layout_cp_local(&o->layout);
    int cp = r->layout.cp > 1 ? r->layout.cp : 1;
    if (g->tp != r->layout.tp || g->pp != r->layout.pp || g->dp != r->layout.dp || g->cp != cp)
        return TRI_ERR(TRI_EINTERNAL, "session: a grid of tp %d x cp %d x pp %d x dp %d for a layout of %d x %d x %d x %d",
                       g->tp, g->cp, g->pp, g->dp, r->layout.tp, cp, r->layout.pp, r->layout.dp);
    int rc = make_plan(m, &r->layout, &r->plan);
    if (rc)
        return rc;
    r->v = r->plan.v;
    rc = make_schedules(r, o);
    /* cp with tp: the tp x cp ranks of one micro-batch's tokens, ranked tp_rank + tp cp_rank (collective
     * over the world; every rank has the same cp and tp) */
    if (!rc && g->cp > 1 && g->tp > 1)
        rc = tri_comm_split(g->world, g->dp_rank + g->dp * g->pp_rank, g->tp_rank + g->tp * g->cp_rank, &r->tokens_comm);
    if (!rc) rc = create_chunks(r, g, o, dev);
    if (!rc) rc = tri_pipeline_create(&r->sample_pipe, &r->sample, g->pp_rank, g->pp_comm, r->chunk);
    if (rc)
        tri_model_rank_destroy(r);
    return rc;
}

void tri_model_rank_destroy(tri_model_rank *r)
{
    if (r->sample_pipe.sched)
        tri_pipeline_destroy(&r->sample_pipe);
    for (int c = 0; c < TRI_MAX_CHUNKS; c++)
        if (r->impl[c])
            r->model->family->destroy(r->impl[c]);
    tri_comm_destroy(r->tokens_comm);
    tri_schedule_free(&r->train);
    tri_schedule_free(&r->eval);
    tri_schedule_free(&r->sample);
    tri_stage_plan_free(&r->plan);
    memset(r, 0, sizeof *r);
}

static int load_sample(void *ctx, int chunk, int mb, int slot)
{
    tri_model_rank *r = ctx;
    tri_chunk *c = r->chunk[chunk];
    r->sample_slot[chunk] = slot;
    return c->model.load_batch(c->model.self, slot, r->sample_windows);
}

int tri_model_rank_logits(tri_model_rank *r, const int32_t *windows, int64_t row, float *logits, bool *have)
{
    tri_pipeline_io io = {.ctx = r, .load = load_sample};
    int64_t loss = 0;
    r->sample_windows = windows;
    *have = false;
    int rc = tri_pipeline_run(&r->sample_pipe, &io, false, 0.0f, &loss);
    for (int c = 0; c < r->v && !rc; c++)
        if (r->chunk[c]->last) {
            rc = r->model->family->logits_row(r->impl[c], r->sample_slot[c], row, logits);
            *have = rc == TRI_OK;
        }
    return rc;
}

void tri_model_rank_memory(const tri_model_rank *r, size_t bytes[TRI_MEM_KINDS])
{
    memset(bytes, 0, TRI_MEM_KINDS * sizeof *bytes);
    for (int c = 0; c < r->v; c++)
        for (int k = 0; k < TRI_MEM_KINDS; k++)
            bytes[k] += r->chunk[c]->arena.by_kind[k];
}

int tri_session_create(tri_session *s, tri_comm *world, tri_device *dev, const tri_model *m,
                       const tri_session_options *o)
{
    memset(s, 0, sizeof *s);
    const tri_train_layout *l = &o->run.layout;
    int rc = tri_grid_create_cp(&s->grid, world, l->tp, l->cp > 1 ? l->cp : 1, l->pp);
    s->have_grid = rc == TRI_OK;
    if (!rc) rc = tri_grid_add_experts_etp(&s->grid, l->ep > 1 ? l->ep : 1, l->etp > 1 ? l->etp : 1);
    if (!rc) rc = tri_model_rank_create(&s->model, m, &s->grid, &o->run, dev);
    s->have_model = s->have_grid && rc == TRI_OK;
    tri_step_config sc = {.n_micro = l->n_micro, .sequence_parallel = l->sequence_parallel,
                          .clip_grad = o->clip_grad, .local = o->local_sgd, .cuda_graph = o->cuda_graph};
    if (!rc) rc = tri_trainer_create(&s->trainer, s->model.chunk, s->model.v, &s->grid, dev, &sc, &o->adamw,
                                     &s->model.train, &s->model.eval);
    s->have_trainer = s->have_model && rc == TRI_OK;
    if (rc)
        tri_session_destroy(s);
    return rc;
}

void tri_session_destroy(tri_session *s)
{
    if (s->have_trainer)
        tri_trainer_destroy(&s->trainer);
    if (s->have_model)
        tri_model_rank_destroy(&s->model);
    if (s->have_grid)
        tri_grid_destroy(&s->grid);
    s->have_trainer = s->have_model = s->have_grid = false;
}

/* The bytes one chunk would allocate on TP rank tp_rank: the family's own plan, or the chunk built
 * without a device (every family's create only plans then: nothing is allocated or sent). */
static int chunk_plan(const tri_model *m, const tri_train_layout *l, const tri_chunk_place *place, int tp_rank,
                      size_t bytes[TRI_MEM_KINDS])
{
    if (m->family->plan)
        return m->family->plan(m->cfg, l, place, tp_rank, bytes);
    tri_comm group = {.rank = tp_rank, .size = l->tp}; /* sizes only: planning sends nothing */
    void *impl = NULL;
    tri_chunk *chunk = NULL;
    int rc = m->family->create(&impl, &chunk, m->cfg, l, place, NULL, &group, NULL);
    if (!rc)
        memcpy(bytes, chunk->arena.by_kind, TRI_MEM_KINDS * sizeof *bytes);
    if (impl)
        m->family->destroy(impl);
    return rc;
}

int tri_model_rank_plan(const tri_model *m, const tri_model_run *o, int tp_rank, int pp_rank, int dp_rank,
                        size_t bytes[TRI_MEM_KINDS])
{
    tri_train_layout local = tri_layout_cp_local(&o->layout);
    const tri_train_layout *l = &local; /* the rank's view: T / cp rows, dp x cp replicas */
    int cp = o->layout.cp > 1 ? o->layout.cp : 1;
    tri_model_rank r;
    memset(&r, 0, sizeof r);
    memset(bytes, 0, TRI_MEM_KINDS * sizeof *bytes);
    r.model = m;
    r.layout = o->layout;
    r.local = local;
    int rc = make_plan(m, l, &r.plan);
    if (rc)
        return rc;
    r.v = r.plan.v;
    rc = make_schedules(&r, o);
    tri_param_layout layouts[TRI_MAX_CHUNKS];
    const tri_param_layout *lp[TRI_MAX_CHUNKS];
    int made = 0;
    for (int c = 0; c < r.v && !rc; c++) {
        tri_chunk_place place = chunk_place(&r, o, pp_rank, dp_rank / cp, dp_rank % cp, c);
        size_t chunk[TRI_MEM_KINDS];
        rc = chunk_plan(m, l, &place, tp_rank, chunk);
        for (int k = 0; k < TRI_MEM_KINDS && !rc; k++)
            bytes[k] += chunk[k];
        tri_param_spec *specs = NULL;
        int n = 0;
        if (!rc) rc = m->family->param_specs(m->cfg, l->tp, &place, &specs, &n);
        if (!rc) rc = tri_layout_create(&layouts[c], specs, n, l->tp, tp_rank, l->dp, dp_rank);
        free(specs);
        if (!rc)
            lp[made++] = &layouts[c];
        if (!rc && tri_layout_has_experts(&layouts[c])) /* the experts' parts are sharded over edp */
            rc = tri_layout_set_experts_etp(&layouts[c], l->ep > 1 ? l->ep : 1, l->etp > 1 ? l->etp : 1, l->tp,
                                            tp_rank);
    }
    size_t trainer[TRI_MEM_KINDS];
    if (!rc) rc = tri_trainer_plan(lp, r.v, m->family->num_param_tensors(m->cfg), l->tp, l->zero_stage, NULL, trainer);
    for (int k = 0; k < TRI_MEM_KINDS && !rc; k++)
        bytes[k] += trainer[k];
    for (int c = 0; c < made; c++)
        tri_layout_destroy(&layouts[c]);
    tri_model_rank_destroy(&r);
    return rc;
}
