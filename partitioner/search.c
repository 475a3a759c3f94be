/* partitioner/search.c - layouts that fit, fastest first (see search.h). */
#include "partitioner/search.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/constraints.h"
#include "partitioner/memory_model.h"

#define SCREEN_MARGIN 1.10   /* formulas may undercount the engine's plan by a few percent */
#define POOL_PER_RESULT 20   /* screened candidates previewed exactly per result asked for */
#define POOL_MIN 200

typedef struct pool {
    tri_search_entry *e;
    int n, cap;
} pool;

/* Keeps the cap candidates with the smallest quick iteration time, sorted. */
static void pool_offer(pool *p, const tri_train_layout *l, const tri_time_result *t)
{
    if (p->n == p->cap && t->iteration_s >= p->e[p->n - 1].time.iteration_s)
        return;
    int i = p->n < p->cap ? p->n++ : p->cap - 1;
    for (; i > 0 && p->e[i - 1].time.iteration_s > t->iteration_s; i--)
        p->e[i] = p->e[i - 1];
    p->e[i] = (tri_search_entry){.layout = *l, .time = *t};
}

/* Micro-batches rank r keeps in flight in each local chunk, in closed form (schedule.h): 1F1B
 * min(pp - r, m), interleaved min(w + 1, m v) over its v chunks, w = min(2 (pp - r - 1) + (v - 1) pp,
 * m v); the engine's executor may hold one more slot. The engine plans and runs both precisions
 * with the same slots (partitioner/preview.h), so bf16 counts that slot too. */
static void in_flight_closed(const tri_train_layout *l, int r, int *chunk)
{
    int m = l->n_micro, pp = l->pp, v = l->v, total;
    if (v > 1) {
        int w = 2 * (pp - r - 1) + (v - 1) * pp;
        w = w < m * v ? w : m * v;
        total = w + 1 < m * v ? w + 1 : m * v;
    } else {
        total = pp - r < m ? pp - r : m;
    }
    if (pp > 1)
        total += 1;
    for (int c = 0; c < v; c++)
        chunk[c] = (total + v - 1) / v;
}

/* The fullest rank by the formulas, or -1 on allocation failure. */
static double screen_memory(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan)
{
    int *chunk = malloc((size_t)l->v * sizeof *chunk);
    if (!chunk)
        return -1.0;
    double worst = 0.0;
    for (int r = 0; r < l->pp; r++) {
        double bytes[TRI_MEM_KINDS], total = 0.0;
        in_flight_closed(l, r, chunk);
        tri_mem_model_rank(m, l, plan, r, chunk, bytes);
        for (int k = 0; k < TRI_MEM_KINDS; k++)
            total += bytes[k];
        worst = total > worst ? total : worst;
    }
    free(chunk);
    return worst;
}

/* All the options for one (tp, pp, mb, schedule, v, sp): ZeRO stages and recomputation. */
static int try_options(const tri_transformer *m, const tri_cluster *c, const tri_search_space *sp,
                       tri_layout_request *req, pool *p, tri_search_stats *st)
{
    tri_stage_plan plan;
    bool have_plan = false;
    int rc = TRI_OK;
    for (int z = 0; z <= 3 && !rc; z++) {
        for (int rec = 0; rec < 3 && !rc; rec++) {
            req->zero_stage = z;
            req->recompute = (tri_recompute)rec;
            st->considered++;
            tri_train_layout l;
            if (tri_layout_resolve(m, req, &l) != TRI_OK)
                continue;
            l.moe = sp->moe;
            if (z > 0 && l.dp == 1)
                continue;   /* ZeRO without data parallelism is ZeRO 0 */
            st->valid++;
            if (!have_plan) {
                tri_layout_shape shape = tri_train_layout_shape(&l);
                tri_stage_options so = {.v = l.v, .first_layers = -1, .last_layers = -1};
                if (tri_stage_split(&plan, m, &shape, &so) != TRI_OK)
                    return TRI_OK;  /* this (tp, pp, v) cannot be split: no option of it can */
                have_plan = true;
            }
            double worst = screen_memory(m, &l, &plan);
            if (worst < 0)
                rc = TRI_ERR(TRI_ENOMEM, "search: out of memory");
            if (rc || worst > tri_cluster_usable_bytes(c) * SCREEN_MARGIN)
                continue;
            st->screened++;
            tri_time_result t;
            tri_time_model_quick(m, &l, c, &plan, &t);
            pool_offer(p, &l, &t);
        }
    }
    if (have_plan)
        tri_stage_plan_free(&plan);
    return rc;
}

/* Schedules and micro-batch sizes for one (tp, cp, pp). */
static int try_tp_pp(const tri_transformer *m, const tri_cluster *c, const tri_search_space *sp, int tp, int cp,
                     int pp, pool *p, tri_search_stats *st)
{
    int dp = c->num_gpus / (tp * cp * pp);
    tri_layout_request req = sp->base;
    req.tp = tp;
    req.cp = cp;
    req.pp = pp;
    req.first_layers = req.last_layers = -1;
    if (req.global_batch % dp != 0)
        return TRI_OK;
    int64_t per_replica = req.global_batch / dp;
    int rc = TRI_OK;
    for (int64_t mb = 1; mb <= per_replica && mb <= sp->max_micro_batch && !rc; mb++) {
        if (per_replica % mb != 0)
            continue;
        req.micro_batch = mb;
        for (int v = 1; v <= (pp > 1 ? sp->max_v : 1) && !rc; v++) {
            if (v > 1 && m->n_layer % ((int64_t)pp * v) != 0)
                continue;
            req.schedule = v > 1 ? "interleaved" : "1f1b";
            req.layers_per_virtual_stage = v > 1 ? (int)(m->n_layer / ((int64_t)pp * v)) : 0;
            for (int s = 0; s < (tp > 1 ? 2 : 1) && !rc; s++) {
                req.sequence_parallel = s == 1;
                /* expert parallelism: each ep dividing the experts and the stage's tp x cp x dp ranks,
                   and each expert-tensor-parallel size etp dividing tp x cp x dp / ep and the experts'
                   moe_intermediate_size (Megatron's usual etp is 1 or tp; the time model ranks them);
                   the layout rules and the family's check (the slices' alignment) refuse the rest */
                int64_t max_ep = m->n_experts > 0 ? m->n_experts : 1, ranks = (int64_t)tp * cp * dp;
                for (int64_t ep = 1; ep <= max_ep && ep <= ranks && !rc; ep++) {
                    if (max_ep % ep != 0 || ranks % ep != 0)
                        continue;
                    req.ep = (int)ep;
                    for (int64_t etp = 1; etp <= ranks / ep && !rc; etp++) {
                        if ((ranks / ep) % etp != 0 || (etp > 1 && (m->expert_ffn <= 0 || m->expert_ffn % etp != 0)))
                            continue;
                        req.etp = (int)etp;
                        rc = try_options(m, c, sp, &req, p, st);
                    }
                }
            }
        }
    }
    return rc;
}

static int by_throughput(const void *a, const void *b)
{
    double x = ((const tri_search_entry *)a)->time.iteration_s, y = ((const tri_search_entry *)b)->time.iteration_s;
    return x < y ? -1 : x > y ? 1 : 0;
}

int tri_search_layouts(const tri_transformer *m, const tri_cluster *c, const tri_search_space *space,
                       tri_engine_plan_fn engine_plan, void *ctx, tri_search_entry *best, int n_best, int *n_found,
                       tri_search_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    *n_found = 0;
    pool p = {.cap = n_best * POOL_PER_RESULT > POOL_MIN ? n_best * POOL_PER_RESULT : POOL_MIN};
    p.e = calloc((size_t)p.cap, sizeof *p.e);
    if (!p.e)
        return TRI_ERR(TRI_ENOMEM, "search: out of memory");
    int rc = TRI_OK;
    for (int tp = 1; tp <= space->max_tp && tp <= c->num_gpus && !rc; tp++) {
        if (!tri_layout_tp_fits_heads(m, tp) || c->num_gpus % tp != 0)
            continue;
        /* context parallelism: cp 1 first, then the divisors of the rest whose 2 cp chunks of the
           sequence are whole tiles (the layout rules refuse the others anyway) */
        int max_cp = space->max_cp > 1 ? space->max_cp : 1;
        int64_t T = space->base.seq_length;
        for (int cp = 1; cp <= max_cp && cp <= c->num_gpus / tp && !rc; cp++) {
            if ((c->num_gpus / tp) % cp != 0 || (cp > 1 && T % (2 * cp * 64) != 0))
                continue;
            int rest = c->num_gpus / (tp * cp);
            for (int pp = 1; pp <= rest && pp <= m->n_layer && !rc; pp++)
                if (rest % pp == 0)
                    rc = try_tp_pp(m, c, space, tp, cp, pp, &p, stats);
        }
    }
    /* exact previews of the screened pool; keep what fits */
    int kept = 0;
    for (int i = 0; i < p.n && !rc; i++) {
        tri_preview pv;
        rc = tri_preview_create(&pv, m, &p.e[i].layout, c, engine_plan, ctx);
        if (rc == TRI_EINVAL) {   /* refused by the engine's own checks: not a candidate */
            tri_error_clear();
            rc = TRI_OK;
            continue;
        }
        if (rc)
            break;
        stats->previewed++;
        if (pv.all_fit) {
            double worst = 0.0;
            for (int r = 0; r < pv.pp; r++)
                worst = pv.total[r] > worst ? pv.total[r] : worst;
            p.e[kept] = (tri_search_entry){.layout = p.e[i].layout, .time = pv.time, .max_bytes = worst,
                                           .from_engine_plan = pv.from_engine_plan};
            kept++;
            stats->fit++;
        }
        tri_preview_destroy(&pv);
    }
    if (!rc) {
        qsort(p.e, (size_t)kept, sizeof *p.e, by_throughput);
        *n_found = kept < n_best ? kept : n_best;
        memcpy(best, p.e, (size_t)*n_found * sizeof *best);
    }
    free(p.e);
    return rc;
}
