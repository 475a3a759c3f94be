/* partitioner/preview.c - one layout on one cluster, all figures (see preview.h). */
#include "partitioner/preview.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/forward_schedule.h"
#include "partitioner/memory_model.h"
#include "partitioner/pipeline_schedules.h"

int tri_preview_chunk_in_flight(const tri_train_layout *l, const tri_schedule *train, int r, int *in_flight)
{
    /* the engine's rule (models/session.c): slots for the training and evaluation schedules */
    tri_schedule eval;
    int rc = tri_schedule_forward_only(&eval, train->pp, train->v, l->n_micro);
    if (rc)
        return rc;
    for (int c = 0; c < train->v; c++) {
        int a = tri_sched_slots_needed(train, r, c), b = tri_sched_slots_needed(&eval, r, c);
        in_flight[c] = a > b ? a : b;
        if (in_flight[c] < 1)
            in_flight[c] = 1;
    }
    tri_schedule_free(&eval);
    return TRI_OK;
}

static int alloc_arrays(tri_preview *p, int pp)
{
    p->pp = pp;
    p->mem = calloc((size_t)pp, sizeof *p->mem);
    p->model_mem = calloc((size_t)pp, sizeof *p->model_mem);
    p->total = calloc((size_t)pp, sizeof *p->total);
    p->model_total = calloc((size_t)pp, sizeof *p->model_total);
    p->in_flight = calloc((size_t)pp, sizeof *p->in_flight);
    p->fits = calloc((size_t)pp, sizeof *p->fits);
    if (!p->mem || !p->model_mem || !p->total || !p->model_total || !p->in_flight || !p->fits)
        return TRI_ERR(TRI_ENOMEM, "preview: out of memory");
    return TRI_OK;
}

/* The engine's plan for every rank. */
static int engine_memory(tri_preview *p, tri_engine_plan_fn fn, void *ctx)
{
    for (int r = 0; r < p->pp; r++) {
        size_t bytes[TRI_MEM_KINDS];
        int rc = fn(ctx, &p->layout, r, bytes);
        if (rc)
            return tri_error_context(rc, "the engine's memory plan of pipeline stage %d", r);
        for (int k = 0; k < TRI_MEM_KINDS; k++)
            p->mem[r][k] = (double)bytes[k];
    }
    p->from_engine_plan = true;
    return TRI_OK;
}

int tri_preview_create(tri_preview *p, const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                       tri_engine_plan_fn engine_plan, void *ctx)
{
    memset(p, 0, sizeof *p);
    p->model = *m;
    p->layout = *l;
    p->cluster = *c;
    tri_layout_shape shape = tri_train_layout_shape(l);
    tri_stage_options so = {.v = l->v, .first_layers = l->first_layers, .last_layers = l->last_layers};
    int rc = tri_stage_split(&p->plan, m, &shape, &so);
    if (!rc) rc = tri_schedule_make(&p->sched, l->schedule, l->pp, l->v, l->n_micro);
    if (!rc) rc = alloc_arrays(p, l->pp);
    if (!rc) rc = tri_time_model_run(m, l, c, &p->plan, &p->sched, &p->time, &p->sim);
    int *chunk = rc ? NULL : malloc((size_t)l->v * sizeof *chunk);
    if (!rc && !chunk)
        rc = TRI_ERR(TRI_ENOMEM, "preview: out of memory");
    for (int r = 0; r < l->pp && !rc; r++) {
        rc = tri_preview_chunk_in_flight(l, &p->sched, r, chunk);
        if (rc)
            break;
        for (int k = 0; k < l->v; k++)
            p->in_flight[r] += chunk[k];
        tri_mem_model_rank(m, l, &p->plan, r, chunk, p->model_mem[r]);
        memcpy(p->mem[r], p->model_mem[r], sizeof p->mem[r]);
    }
    free(chunk);
    /* the engine plans every layout it runs: fp32 and bf16 alike, context parallelism with either comm
       type (the p2p ring's blocks in flight and accumulators, all_gather's gathered sequence,
       deterministic mode's exact backward) */
    if (!rc && engine_plan)
        rc = engine_memory(p, engine_plan, ctx);
    if (rc) {
        tri_preview_destroy(p);
        return rc;
    }
    p->usable_bytes = tri_cluster_usable_bytes(c);
    p->all_fit = true;
    for (int r = 0; r < l->pp; r++) {
        for (int k = 0; k < TRI_MEM_KINDS; k++) {
            p->total[r] += p->mem[r][k];
            p->model_total[r] += p->model_mem[r][k];
        }
        p->fits[r] = p->total[r] <= p->usable_bytes;
        p->all_fit = p->all_fit && p->fits[r];
    }
    return TRI_OK;
}

void tri_preview_destroy(tri_preview *p)
{
    tri_stage_plan_free(&p->plan);
    tri_schedule_free(&p->sched);
    tri_sim_result_free(&p->sim);
    free(p->mem);
    free(p->model_mem);
    free(p->total);
    free(p->model_total);
    free(p->in_flight);
    free(p->fits);
    memset(p, 0, sizeof *p);
}

void tri_preview_stage_ranks(const tri_preview *p, int r, int *lo, int *hi, int *node_lo, int *node_hi)
{
    tri_stage_world_ranks(r, p->layout.tp, p->layout.dp * tri_layout_cp(&p->layout), lo, hi); /* tp x cp x dp a stage */
    int g = p->cluster.gpus_per_node > 0 ? p->cluster.gpus_per_node : 1;
    *node_lo = *lo / g;
    *node_hi = *hi / g;
}
