/* models/gpt_rank.c - one rank's chunks, schedules and sampling pipeline (see gpt_rank.h). */
#include "models/gpt_rank.h"

#include <stdlib.h>
#include <string.h>

#include "engine/status.h"
#include "partitioner/layout.h"
#include "partitioner/schedule.h"
#include "partitioner/schedule_forward.h"

static const char *schedule_name(const tri_gpt_run_options *o)
{
    return o->schedule ? o->schedule : "1f1b";
}

static bool interleaved(const tri_gpt_run_options *o)
{
    return strcmp(schedule_name(o), "interleaved") == 0;
}

/* Model chunks per rank: L / (pp * layers per virtual stage) when interleaving, else 1. */
static int chunks_per_rank(const tri_gpt_config *cfg, int pp, const tri_gpt_run_options *o, int *v)
{
    *v = 1;
    if (!interleaved(o))
        return TRI_OK;
    int rc = tri_stage_virtual_size(cfg->n_layer, pp, o->layers_per_virtual_stage, v);
    if (rc)
        return rc;
    if (*v < 2)
        return TRI_ERR(TRI_EINVAL, "--num-layers-per-virtual-pipeline-stage %d gives %d model chunk per "
                       "rank; interleaving needs at least 2 (n_layer %d, pipeline size %d)",
                       o->layers_per_virtual_stage, *v, cfg->n_layer, pp);
    if (*v > TRI_MAX_CHUNKS)
        return TRI_ERR(TRI_EINVAL, "%d model chunks per rank; at most %d", *v, TRI_MAX_CHUNKS);
    return TRI_OK;
}

static int make_plan(const tri_gpt_config *cfg, int tp, int pp, int dp, const tri_gpt_run_options *o,
                     tri_stage_plan *plan)
{
    tri_stage_options so = {.v = 1, .first_layers = o->first_stage_layers, .last_layers = o->last_stage_layers};
    int rc = chunks_per_rank(cfg, pp, o, &so.v);
    if (rc)
        return rc;
    tri_transformer dims = tri_gpt_dims(cfg);
    tri_layout_shape shape = {.tp = tp, .pp = pp, .dp = dp, .sequence_parallel = o->sequence_parallel,
                              .B = o->B, .T = o->T, .n_micro = o->n_micro};
    return tri_stage_split(plan, &dims, &shape, &so);
}

static int make_train_schedule(tri_schedule *s, int pp, int v, const tri_gpt_run_options *o)
{
    return tri_schedule_make(s, schedule_name(o), pp, v, o->n_micro);
}

int tri_gpt_rank_check(const tri_gpt_config *cfg, int tp, int pp, int dp, const tri_gpt_run_options *o)
{
    tri_gpt_options probe = {.B = o->B, .T = o->T, .n_slots = 1, .layer_end = cfg->n_layer,
                             .sequence_parallel = o->sequence_parallel};
    int rc = tri_gpt_check(cfg, tp, &probe);
    if (rc)
        return rc;
    if (o->n_micro < 1)
        return TRI_ERR(TRI_EINVAL, "a step needs at least one micro-batch (got %d)", o->n_micro);
    tri_stage_plan plan;
    rc = make_plan(cfg, tp, pp, dp, o, &plan);
    if (rc)
        return rc;
    tri_schedule s;
    rc = make_train_schedule(&s, pp, plan.v, o);
    tri_stage_plan_free(&plan);
    if (rc)
        return rc;
    tri_schedule_free(&s);
    return TRI_OK;
}

/* The options of local chunk c on pipeline rank pp_rank: its layers and its activation slots. */
static tri_gpt_options chunk_options(const tri_gpt_rank *r, const tri_gpt_run_options *o, int dp,
                                     int pp_rank, int dp_rank, int c)
{
    const tri_stage_place *pl = &r->plan.chunks[tri_sched_global_chunk(&r->train, pp_rank, c)];
    int slots = tri_sched_slots_needed(&r->train, pp_rank, c);
    int eval_slots = tri_sched_slots_needed(&r->eval, pp_rank, c);
    tri_gpt_options opt = {.B = o->B, .T = o->T, .n_slots = slots > eval_slots ? slots : eval_slots,
                           .layer_start = pl->layer_start, .layer_end = pl->layer_end,
                           .first = pl->first, .last = pl->last, .sequence_parallel = o->sequence_parallel,
                           .dp = dp, .dp_rank = dp_rank, .zero_stage = o->zero_stage,
                           .recompute = o->recompute, .deterministic = o->deterministic,
                           .overlap_grad_reduce = o->overlap_grad_reduce,
                           .overlap_param_gather = o->overlap_param_gather, .bf16 = o->bf16,
                           .n_micro = o->n_micro, .seed = o->seed};
    if (opt.n_slots < 1)
        opt.n_slots = 1;
    return opt;
}

static int make_schedules(tri_gpt_rank *r, int pp, const tri_gpt_run_options *o)
{
    int eval_m = o->eval_micro > 0 ? o->eval_micro : o->n_micro;
    int rc = make_train_schedule(&r->train, pp, r->v, o);
    if (!rc) rc = tri_schedule_forward_only(&r->eval, pp, r->v, eval_m);
    if (!rc) rc = tri_schedule_forward_only(&r->sample, pp, r->v, 1);
    return rc;
}

static int create_chunks(tri_gpt_rank *r, const tri_gpt_config *cfg, const tri_grid *g,
                         const tri_gpt_run_options *o, tri_device *dev)
{
    int rc = TRI_OK;
    for (int c = 0; c < r->v && !rc; c++) {
        tri_gpt_options opt = chunk_options(r, o, g->dp, g->pp_rank, g->dp_rank, c);
        rc = tri_gpt_create(&r->chunk[c], cfg, &opt, dev, g->tp_comm, g->dp_comm);
        if (!rc)
            r->stage[c] = &r->chunk[c]->chunk;
    }
    return rc;
}

int tri_gpt_rank_create(tri_gpt_rank *r, const tri_gpt_config *cfg, const tri_grid *g,
                        const tri_gpt_run_options *o, tri_device *dev)
{
    memset(r, 0, sizeof *r);
    r->grid = g;
    int rc = make_plan(cfg, g->tp, g->pp, g->dp, o, &r->plan);
    if (rc)
        return rc;
    r->v = r->plan.v;
    rc = make_schedules(r, g->pp, o);
    if (!rc) rc = create_chunks(r, cfg, g, o, dev);
    if (!rc) rc = tri_pipeline_create(&r->sample_pipe, &r->sample, g->pp_rank, g->pp_comm, r->stage);
    if (rc)
        tri_gpt_rank_destroy(r);
    return rc;
}

void tri_gpt_rank_destroy(tri_gpt_rank *r)
{
    if (r->sample_pipe.sched)
        tri_pipeline_destroy(&r->sample_pipe);
    for (int c = 0; c < TRI_MAX_CHUNKS; c++)
        tri_gpt_destroy(r->chunk[c]);
    tri_schedule_free(&r->train);
    tri_schedule_free(&r->eval);
    tri_schedule_free(&r->sample);
    tri_stage_plan_free(&r->plan);
    memset(r, 0, sizeof *r);
}

static int load_sample(void *ctx, int chunk, int mb, int slot)
{
    tri_gpt_rank *r = ctx;
    return tri_gpt_load_batch(r->chunk[chunk], slot, r->sample_windows);
}

int tri_gpt_rank_logits(tri_gpt_rank *r, const int32_t *windows, int64_t row, float *logits, bool *have)
{
    tri_pipeline_io io = {.ctx = r, .load = load_sample};
    int64_t loss = 0;
    r->sample_windows = windows;
    *have = false;
    int rc = tri_pipeline_run(&r->sample_pipe, &io, false, 0.0f, &loss);
    for (int c = 0; c < r->v && !rc; c++)
        if (r->chunk[c]->opt.last) {
            rc = tri_gpt_read_logits_row(r->chunk[c], row, logits);
            *have = rc == TRI_OK;
        }
    return rc;
}

void tri_gpt_rank_memory(const tri_gpt_rank *r, size_t bytes[TRI_MEM_KINDS])
{
    memset(bytes, 0, TRI_MEM_KINDS * sizeof *bytes);
    for (int c = 0; c < r->v; c++)
        for (int k = 0; k < TRI_MEM_KINDS; k++)
            bytes[k] += r->chunk[c]->chunk.arena.by_kind[k];
}

int tri_gpt_session_create(tri_gpt_session *s, tri_comm *world, tri_device *dev, const tri_gpt_config *cfg,
                           const tri_gpt_session_options *o)
{
    memset(s, 0, sizeof *s);
    int rc = tri_grid_create(&s->grid, world, o->tp, o->pp);
    s->have_grid = rc == TRI_OK;
    if (!rc) rc = tri_gpt_rank_create(&s->model, cfg, &s->grid, &o->run, dev);
    s->have_model = s->have_grid && rc == TRI_OK;
    tri_step_config sc = {.n_micro = o->run.n_micro, .sequence_parallel = o->run.sequence_parallel,
                          .clip_grad = o->clip_grad};
    if (!rc) rc = tri_trainer_create(&s->trainer, s->model.stage, s->model.v, &s->grid, dev, &sc, &o->adamw,
                                     &s->model.train, &s->model.eval);
    s->have_trainer = s->have_model && rc == TRI_OK;
    if (rc)
        tri_gpt_session_destroy(s);
    return rc;
}

void tri_gpt_session_destroy(tri_gpt_session *s)
{
    if (s->have_trainer)
        tri_trainer_destroy(&s->trainer);
    if (s->have_model)
        tri_gpt_rank_destroy(&s->model);
    if (s->have_grid)
        tri_grid_destroy(&s->grid);
    s->have_trainer = s->have_model = s->have_grid = false;
}

int tri_gpt_rank_plan(const tri_gpt_config *cfg, int tp, int pp, int dp, const tri_gpt_run_options *o,
                      int tp_rank, int pp_rank, int dp_rank, size_t bytes[TRI_MEM_KINDS])
{
    tri_gpt_rank r;
    memset(&r, 0, sizeof r);
    memset(bytes, 0, TRI_MEM_KINDS * sizeof *bytes);
    int rc = make_plan(cfg, tp, pp, dp, o, &r.plan);
    if (rc)
        return rc;
    r.v = r.plan.v;
    rc = make_schedules(&r, pp, o);
    tri_param_layout layouts[TRI_MAX_CHUNKS];
    const tri_param_layout *lp[TRI_MAX_CHUNKS];
    int made = 0;
    for (int c = 0; c < r.v && !rc; c++) {
        tri_gpt_options opt = chunk_options(&r, o, dp, pp_rank, dp_rank, c);
        size_t chunk[TRI_MEM_KINDS];
        rc = tri_gpt_plan(cfg, &opt, tp, tp_rank, chunk);
        for (int k = 0; k < TRI_MEM_KINDS && !rc; k++)
            bytes[k] += chunk[k];
        tri_param_spec *specs = NULL;
        int n = 0;
        if (!rc) rc = tri_gpt_param_specs(cfg, tp, &opt, &specs, &n);
        if (!rc) rc = tri_layout_create(&layouts[c], specs, n, tp, tp_rank, dp, dp_rank);
        free(specs);
        if (!rc)
            lp[made++] = &layouts[c];
    }
    size_t trainer[TRI_MEM_KINDS];
    if (!rc) rc = tri_trainer_plan(lp, r.v, tri_gpt_num_param_tensors(cfg), tp, o->zero_stage, trainer);
    for (int k = 0; k < TRI_MEM_KINDS && !rc; k++)
        bytes[k] += trainer[k];
    for (int c = 0; c < made; c++)
        tri_layout_destroy(&layouts[c]);
    tri_gpt_rank_destroy(&r);
    return rc;
}
