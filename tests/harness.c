/* tests/harness.c - a small model of any family in any layout (see harness.h). */
#include "tests/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/grid.h"
#include "engine/core/math.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/comm_staged.h"
#include "engine/train/grad_compression.h"
#include "engine/train/state_shards.h"
#include "engine/train/train.h"
#include "models/gpt.h"
#include "models/session.h"
#include "partitioner/layout.h"
#include "partitioner/traffic.h"
#include "tools/cli/layout_flags.h"

typedef struct job {
    const tri_model *model;
    int64_t B, T;
    tu_layout layout;
    const int32_t *windows;
    int steps;
    tu_result *out;
} job;

static int fill(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const job *j = ctx;
    memcpy(w, j->windows + first * (j->T + 1), (size_t)(n * (j->T + 1)) * sizeof *w);
    return TRI_OK;
}

/* The chunk of this rank holding global parameter `gi` (copy: its tied copy, the LM head's wte on
 * the last stage; else the parameter itself), or -1. */
static int holder(const tri_model_rank *r, int gi, bool copy, int *param)
{
    for (int c = 0; c < r->v; c++) {
        const tri_param_layout *L = &r->chunk[c]->layout;
        for (int i = 0; i < L->n; i++)
            if (L->params[i].spec.global_index == gi && L->params[i].spec.tied_copy == copy) {
                *param = i;
                return c;
            }
    }
    return -1;
}

/* Gathers global parameter gi from `flat` buffers (params or grads) to world rank 0: its holder
 * stage all-gathers the TP shards and places them, then broadcasts over the world from the
 * holder's (tp 0, dp 0) rank; *dst (malloc'd) receives it on world rank 0. copy: the stage holding
 * its tied copy instead (*dst NULL on every rank when no stage does). */
static int collect(const tri_model_rank *r, const tri_grid *g, int gi, bool grads, bool copy,
                   const tri_param_spec *spec, float **dst)
{
    int64_t global = 1;
    for (int d = 0; d < spec->ndim; d++)
        global *= spec->shape[d];
    int pi = -1, c = holder(r, gi, copy, &pi);
    /* the root (vote by all-reduce): the lowest world rank among the holders' TP rank 0 (one stage
     * holds it; dp rank 0 but for an expert under expert parallelism: its ep rank) */
    /* an expert under expert parallelism is whole on its ep rank, which with tp > 1 may be any TP rank
     * (folding over tp x dp): its lowest holder is the root, its TP peers hold other experts */
    bool whole = c >= 0 && r->chunk[c]->layout.params[pi].spec.expert;
    int32_t v[2] = {0, c >= 0 ? -(whole ? g->world_rank
                                        : tri_grid_world_rank_cp(g->tp, g->cp, g->dp, 0, 0, g->dp_rank, g->pp_rank))
                           : -(1 << 30)};
    tri_device *dev = r->chunk[0]->dev;
    tri_tensor vote = {0}, buf = {0};
    int rc = tri_device_alloc(dev, &vote.data, sizeof v);
    vote = tri_tensor_1d(vote.data, TRI_I32, 2);
    if (!rc) rc = tri_device_copy_from_host(dev, vote, v);
    if (!rc) rc = tri_comm_all_reduce(g->world, vote, TRI_REDUCE_MAX);
    if (!rc) rc = tri_device_copy_to_host(dev, v, vote);
    int32_t root = -v[1];
    tri_device_free(dev, vote.data);
    *dst = NULL;
    if (rc || root == 1 << 30) /* no stage holds it (a tied copy at pp 1) */
        return rc;
    float *global_host = calloc((size_t)global, sizeof *global_host);
    if (!global_host)
        return TRI_ERR(TRI_ENOMEM, "harness: no memory");
    if (!rc && c >= 0) {
        const tri_param *p = &r->chunk[c]->layout.params[pi];
        /* an expert-tensor-parallel slice: the etp group's slices joined along the split dimension */
        bool sliced = whole && p->spec.etp > 1;
        int tp = sliced ? p->spec.etp : whole ? 1 : g->tp;
        int64_t total = p->numel * tp;
        float *host = malloc((size_t)total * sizeof *host);
        tri_tensor mine = {0};
        rc = tri_device_alloc(dev, &buf.data, (size_t)total * sizeof(float));
        buf = tri_tensor_1d(buf.data, TRI_F32, total);
        /* the local tensor at any ZeRO stage (collective over dp), then its TP shards */
        if (!rc) rc = tri_zero_read_param(&r->chunk[c]->zero, &r->chunk[c]->layout.params[pi], grads, host);
        if (!rc) rc = tri_device_alloc(dev, &mine.data, (size_t)p->numel * sizeof(float));
        mine = tri_tensor_1d(mine.data, TRI_F32, p->numel);
        if (!rc) rc = tri_device_copy_from_host(dev, mine, host);
        if (!rc) rc = sliced  ? tri_comm_all_gather(g->etp_comm, buf, mine)
                      : whole ? tri_op_copy(dev, buf, mine)
                              : tri_comm_all_gather(g->tp_comm, buf, mine);
        tri_device_free(dev, mine.data);
        if (!rc) rc = tri_device_copy_to_host(dev, host, buf);
        /* a replicated parameter's TP copies are one tensor: every rank's weights the same bits */
        for (int k = 1; !rc && !grads && p->tp_replicated && k < tp; k++)
            if (memcmp(host, host + k * p->numel, (size_t)p->numel * sizeof *host) != 0)
                rc = TRI_ERR(TRI_EINVAL, "harness: the TP copies of replicated parameter %s differ (tp rank %d "
                             "against 0)", spec->name, k);
        for (int k = 0; !rc && k < (p->tp_replicated ? 1 : tp); k++)
            tri_shard_place(p, k, host + k * p->numel, global_host);
        /* vocabulary padding rows (at or beyond init_rows) stay zero */
        int64_t row = spec->ndim > 0 ? global / spec->shape[0] : 0;
        for (int64_t i = spec->ndim > 0 ? spec->init_rows * row : global; !rc && !grads && i < global; i++)
            if (global_host[i] != 0.0f)
                rc = TRI_ERR(TRI_EINVAL, "harness: %s's padding row %lld is not zero (%g)", spec->name,
                             (long long)(i / row), (double)global_host[i]);
        tri_device_free(dev, buf.data);
        free(host);
    }
    /* broadcast the global tensor from the root */
    if (!rc) rc = tri_device_alloc(dev, &buf.data, (size_t)global * sizeof(float));
    buf = tri_tensor_1d(buf.data, TRI_F32, global);
    if (!rc) rc = tri_device_copy_from_host(dev, buf, global_host);
    if (!rc) rc = tri_comm_broadcast(g->world, buf, root);
    if (!rc) rc = tri_device_copy_to_host(dev, global_host, buf);
    tri_device_free(dev, buf.data);
    if (rc || g->world_rank != 0) {
        free(global_host);
        global_host = NULL;
    }
    *dst = global_host;
    return rc;
}

static int collect_all(const tri_model_rank *r, const tri_grid *g, const tri_model *model, bool grads,
                       tu_result *out)
{
    tri_param_spec *specs = NULL;
    int n = 0;
    int rc = tri_model_all_specs(model, g->tp, &specs, &n), differs = 0; /* global index + 1 */
    for (int i = 0; i < n && !rc; i++) {
        float *t = NULL, *copy = NULL;
        int64_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++)
            numel *= specs[i].shape[d];
        rc = collect(r, g, specs[i].global_index, grads, false, &specs[i], &t);
        /* a tied copy's weights (the last stage's wte) are the holder's, bit for bit (world rank 0
         * compares; the verdict waits for the loop's end, whose collectives every rank runs). Every
         * parameter is asked: the model's global specs do not mark the tied one (spec.tied is the
         * stages' layout's), and one that has no copy costs a single vote */
        if (!rc && !grads) rc = collect(r, g, specs[i].global_index, false, true, &specs[i], &copy);
        if (!rc && t && copy && !differs && memcmp(t, copy, (size_t)numel * sizeof *t) != 0)
            differs = specs[i].global_index + 1;
        free(copy);
        if (rc || g->world_rank != 0) {
            free(t);
            continue;
        }
        int k = specs[i].global_index;
        snprintf(out->names[k], sizeof out->names[k], "%s", specs[i].name);
        out->numel[k] = numel;
        out->rows[k] = specs[i].shape[0];
        out->cols[k] = out->numel[k] / specs[i].shape[0];
        if (grads)
            out->grads[k] = t;
        else
            out->weights[k] = t;
        out->n = n;
    }
    for (int i = 0; i < n && !rc && differs; i++)
        if (specs[i].global_index == differs - 1)
            rc = TRI_ERR(TRI_EINVAL, "harness: the tied copy of %s differs from the parameter", specs[i].name);
    free(specs);
    return rc;
}

/* Per pipeline rank, the executor's measured peak and the schedule's planned in-flight count
 * (summed over the rank's chunks), to world rank 0 by a max all-reduce. */
static int collect_in_flight(const tri_model_rank *r, const tri_trainer *t, const tri_grid *g, tu_result *out)
{
    int32_t v[2 * TU_MAX_PP] = {0};
    for (int c = 0; c < r->v; c++) {
        v[g->pp_rank] += t->train_pipe.peak[c];
        v[TU_MAX_PP + g->pp_rank] += tri_sched_slots_needed(&r->train, g->pp_rank, c);
    }
    tri_device *dev = r->chunk[0]->dev;
    tri_tensor buf = {0};
    int rc = tri_device_alloc(dev, &buf.data, sizeof v);
    buf = tri_tensor_1d(buf.data, TRI_I32, 2 * TU_MAX_PP);
    if (!rc) rc = tri_device_copy_from_host(dev, buf, v);
    if (!rc) rc = tri_comm_all_reduce(g->world, buf, TRI_REDUCE_MAX);
    if (!rc) rc = tri_device_copy_to_host(dev, v, buf);
    tri_device_free(dev, buf.data);
    for (int p = 0; p < TU_MAX_PP; p++) {
        out->peak_in_flight[p] = v[p];
        out->planned_in_flight[p] = v[TU_MAX_PP + p];
    }
    return rc;
}

/* bf16: compares every owned range's bf16 parameters with its rounded fp32 master weights on this
 * rank; counts (compared, differing) summed over the world into out on world rank 0. */
static int check_bf16_params(const tri_model_rank *r, const tri_grid *g, tu_result *out)
{
    int64_t counts[2] = {0, 0};
    int rc = TRI_OK;
    for (int c = 0; c < r->v && !rc; c++) {
        tri_zero *z = &r->chunk[c]->zero;
        rc = tri_zero_sync(z);
        for (int k = 0; k < tri_zero_n_owned(z) && !rc && z->bf16; k++) {
            int64_t start, len, local;
            tri_zero_owned(z, k, &start, &len, &local);
            float *master = malloc((size_t)(len > 0 ? len : 1) * sizeof *master);
            uint16_t *model = malloc((size_t)(len > 0 ? len : 1) * sizeof *model);
            if (!master || !model)
                rc = TRI_ERR(TRI_ENOMEM, "harness: out of memory");
            if (!rc) rc = tri_device_copy_to_host(z->dev, master, tri_zero_owned_params(z, start, len));
            if (!rc) rc = tri_device_copy_to_host(z->dev, model, tri_zero_owned_model(z, start, len));
            for (int64_t i = 0; i < len && !rc; i++)
                counts[1] += model[i] != tri_float_to_bf16(master[i]);
            counts[0] += len;
            free(master);
            free(model);
        }
    }
    tri_device *dev = r->chunk[0]->dev;
    tri_tensor buf = {0};
    if (!rc) rc = tri_device_alloc(dev, &buf.data, sizeof counts);
    buf = tri_tensor_1d(buf.data, TRI_I64, 2);
    if (!rc) rc = tri_device_copy_from_host(dev, buf, counts);
    if (!rc) rc = tri_comm_all_reduce(g->world, buf, TRI_REDUCE_SUM);
    if (!rc) rc = tri_device_copy_to_host(dev, counts, buf);
    tri_device_free(dev, buf.data);
    out->bf16_checked = counts[0];
    out->bf16_stale = counts[1];
    return rc;
}

/* World rank 0's optimizer bytes, owned elements and analytic DP traffic of a step. */
static void record_zero(tri_session *ss, job *j)
{
    tri_unit_uses uses[512];
    int n = 0;
    j->out->optimizer_bytes = ss->trainer.arena.by_kind[TRI_MEM_OPTIMIZER];
    size_t model[TRI_MEM_KINDS];
    tri_model_rank_memory(&ss->model, model);
    j->out->activation_bytes = model[TRI_MEM_ACTIVATIONS];
    j->out->owned_elements = 0;
    j->out->grads_zeroed = ss->model.chunk[0]->zero.grads_zeroed;
    for (int c = 0; c < ss->model.v; c++) {
        const tri_chunk *m = ss->model.chunk[c];
        j->out->owned_elements += tri_zero_owned_numel(&m->zero);
        j->out->overlap_started += m->zero.started_grad_reductions + m->zero.started_param_gathers;
        j->out->prefetches_used += m->zero.prefetches_used;
        if (n + m->layout.n_units <= 512) {
            tri_chunk_unit_uses(m, uses + n);
            n += m->layout.n_units;
        }
    }
    tri_dp_step_traffic_sized(uses, n, j->layout.zero, j->layout.n_micro, ss->grid.dp * ss->grid.cp,
                              j->layout.deterministic ? 8 : 4, j->layout.bf16 ? 2 : 4, j->out->dp_expected);
}

/* The expert bias (the chunks' model buffers, engine/train/state_shards.h) of the whole model into
 * dst (layers, E, at most TU_MAX_BIAS values; a larger model's is not recorded) on world rank 0: each stored entry read by its holder, the rest zeros, summed over the
 * world (exact: one value per element). */
static int collect_bias(tri_trainer *t, const tri_grid *g, float *dst)
{
    int E = t->moe.E, n_all = t->moe.n_layers * E;
    if (E == 0 || n_all > TU_MAX_BIAS) /* dense, or too large to record (left zero) */
        return TRI_OK;
    float host[TU_MAX_BIAS] = {0};
    tri_state_shard *sh = NULL;
    int n = 0;
    int rc = tri_trainer_state_shards(t, &sh, &n);
    for (int i = 0; i < n && !rc; i++) {
        int layer = -1;
        if (!sh[i].buffer || !sh[i].stored || sscanf(sh[i].param->spec.name, "model.layers.%d.", &layer) != 1)
            continue;
        rc = tri_trainer_state_read(t, &sh[i], host + (int64_t)layer * E);
    }
    free(sh);
    tri_tensor buf = {0};
    if (!rc) rc = tri_device_alloc(t->dev, &buf.data, sizeof host);
    buf = tri_tensor_1d(buf.data, TRI_F32, TU_MAX_BIAS);
    if (!rc) rc = tri_device_copy_from_host(t->dev, buf, host);
    if (!rc) rc = tri_comm_all_reduce(g->world, buf, TRI_REDUCE_SUM);
    if (!rc && g->world_rank == 0) rc = tri_device_copy_to_host(t->dev, dst, buf);
    tri_device_free(t->dev, buf.data);
    return rc;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    job *j = arg;
    tri_device *dev = NULL;
    tri_session ss;
    tri_session_options o = {.run = {.seed = 1234}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                       .kind = (tri_optimizer_kind)j->layout.optimizer, .momentum = 0.9f,
                                       .lars_eta = 0.02f, .freeze_step = j->layout.adam_freeze_step,
                                       .onebit_adam = j->layout.onebit_adam,
                                       .unfused_update = j->layout.unfused_update}};
    o.local_sgd = j->layout.local;
    int lrc = tu_model_layout_resolve(j->model, j->B, j->T, &j->layout, size, &o.run.layout);
    if (lrc)
        return lrc;
    int rc = tri_device_cpu_create(&dev, 1);
    tri_comm *staged = NULL; /* layout.staged: owns a split of the thread comm */
    if (!rc && j->layout.staged) {
        tri_comm *inner = NULL;
        rc = tri_comm_split(world, 0, rank, &inner);
        if (!rc) rc = tri_comm_staged_create(&staged, inner, dev);
        if (rc)
            tri_comm_destroy(inner);
        else
            world = staged;
    }
    if (!rc) rc = tri_session_create(&ss, world, dev, j->model, &o);
    if (rc) {
        tri_comm_destroy(staged);
        tri_device_destroy(dev);
        return rc;
    }
    tri_grid *grid = &ss.grid;
    tri_trainer *tr = &ss.trainer;
    tri_batch_source src = {.ctx = j, .fill = fill};
    tri_comm_reset_counters(grid->tp_comm);
    rc = tri_trainer_gradients(tr, &src, 0, &j->out->grad_loss);
    if (grid->world_rank == 0)
        memcpy(j->out->tp_bytes, grid->tp_comm->bytes, sizeof j->out->tp_bytes);
    if (!rc && grid->world_rank == 0 && tr->moe.E > 0) {
        int64_t n = (int64_t)tr->moe.n_layers * 2 * tr->moe.E + 2;
        if (n > TU_MAX_MOE_SUMS)
            rc = TRI_ERR(TRI_EINVAL, "harness: a MoE account of %lld sums (at most %d)", (long long)n, TU_MAX_MOE_SUMS);
        else
            memcpy(j->out->moe_sums, tr->moe.sums, (size_t)n * sizeof *tr->moe.sums);
        j->out->moe_E = tr->moe.E;
        j->out->moe_layers = tr->moe.n_layers;
        j->out->moe_micro = tr->moe.micro;
    }
    if (!rc) rc = tri_trainer_grad_norm(tr, &j->out->grad_norm);
    if (!rc) rc = collect_all(&ss.model, grid, j->model, true, j->out);
    if (!rc) rc = collect_in_flight(&ss.model, tr, grid, j->out);
    for (int s = 0; s < j->steps && !rc; s++) {
        tri_step_result res;
        tri_comm_reset_counters(grid->dp_cp_comm);
        rc = tri_trainer_step(tr, &src, s, 1e-3f, &res);
        if (!rc && grid->world_rank == 0) {
            j->out->losses[s] = res.loss;
            j->out->norms[s] = res.grad_norm;
            j->out->moe[s] = tri_moe_stats_summary(&tr->moe);
            if (s == 0)
                memcpy(j->out->dp_bytes, grid->dp_cp_comm->bytes, sizeof j->out->dp_bytes);
            for (int k = 0; s < TU_BIAS_STEPS && k < tr->moe.n_layers * tr->moe.E && k < TU_MAX_BIAS; k++)
                j->out->moe_kept[s][k] = tr->moe.sums[(k / tr->moe.E * 2 + 1) * tr->moe.E + k % tr->moe.E];
        }
        if (!rc && s < TU_BIAS_STEPS)
            rc = collect_bias(tr, grid, j->out->moe_bias[s]);
    }
    if (!rc && grid->world_rank == 0)
        record_zero(&ss, j);
    if (!rc && j->layout.bf16)
        rc = check_bf16_params(&ss.model, grid, j->out);
    if (!rc) rc = collect_all(&ss.model, grid, j->model, false, j->out);
    if (grid->world_rank == 0)
        j->out->staged = (grid->cp_comm ? grid->cp_comm : grid->world)->device_buffers;
    tri_session_destroy(&ss);
    tri_comm_destroy(staged);
    tri_device_destroy(dev);
    return rc;
}

static job make_job(const tri_model *model, int64_t B, int64_t T, const tu_layout *layout,
                    const int32_t *windows, int steps, tu_result *out)
{
    memset(out, 0, sizeof *out);
    out->steps = steps;
    job j = {.model = model, .B = B, .T = T, .layout = *layout, .windows = windows, .steps = steps, .out = out};
    if (j.layout.n_micro < 1)
        j.layout.n_micro = 1;
    if (j.layout.pp < 1)
        j.layout.pp = 1;
    if (j.layout.tp < 1)
        j.layout.tp = 1;
    if (j.layout.dp < 1)
        j.layout.dp = 1;
    if (j.layout.cp < 1)
        j.layout.cp = 1;
    return j;
}

int tu_run_model(const tri_model *model, int64_t B, int64_t T, const tu_layout *layout, const int32_t *windows,
                 int steps, tu_result *out)
{
    job j = make_job(model, B, T, layout, windows, steps, out);
    return tri_run_thread_ranks(j.layout.tp * j.layout.cp * j.layout.pp * j.layout.dp, run_rank, &j);
}

int tu_run_gpt(const tri_gpt_config *cfg, int64_t B, int64_t T, const tu_layout *layout,
               const int32_t *windows, int steps, tu_result *out)
{
    tri_model model = tri_gpt_model(cfg);
    return tu_run_model(&model, B, T, layout, windows, steps, out);
}

int tu_run_gpt_rank(tri_comm *world, const tri_gpt_config *cfg, int64_t B, int64_t T,
                    const tu_layout *layout, const int32_t *windows, int steps, tu_result *out)
{
    tri_model model = tri_gpt_model(cfg);
    job j = make_job(&model, B, T, layout, windows, steps, out);
    return run_rank(world->rank, world->size, world, &j);
}

void tu_result_free(tu_result *r)
{
    for (int i = 0; i < r->n; i++) {
        free(r->grads[i]);
        free(r->weights[i]);
    }
    r->n = 0;
}

const float *tu_result_grad(const tu_result *r, const char *name, int *index)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->names[i], name) == 0) {
            if (index)
                *index = i;
            return r->grads[i];
        }
    return NULL;
}

int tu_model_layout_resolve(const tri_model *m, int64_t B, int64_t T, const tu_layout *l, int world,
                            tri_train_layout *out)
{
    int tp = l->tp > 0 ? l->tp : 1, pp = l->pp > 0 ? l->pp : 1, cp = l->cp > 0 ? l->cp : 1, dp = world / (tp * cp * pp);
    tri_layout_request req = {
        .num_gpus = world, .tp = tp, .pp = pp, .layers_per_virtual_stage = l->layers_per_virtual_stage,
        .micro_batch = B, .global_batch = B * (l->n_micro > 0 ? l->n_micro : 1) * dp, .seq_length = T,
        .sequence_parallel = l->sp, .zero_stage = l->zero, .schedule = l->schedule,
        .recompute = (tri_recompute)l->recompute, .attention = (tri_attention_backend)l->attention,
        .precision = l->bf16 ? TRI_PRECISION_BF16 : TRI_PRECISION_FP32,
        .first_layers = l->first_layers > 0 ? l->first_layers : -1, .last_layers = -1,
        .deterministic = l->deterministic, .overlap_grad_reduce = l->overlap, .overlap_param_gather = l->overlap,
        .ep = l->ep > 0 ? l->ep : 1, .etp = l->etp > 0 ? l->etp : 1, .cp = cp,
        .cp_comm_type = l->cp_comm_type ? l->cp_comm_type : "all_gather"};
    int rc = tri_cli_model_layout(m, req, out);
    if (!rc) {
        out->compression = l->compression;
        out->moe = l->moe;
    }
    return rc;
}

int tu_layout_resolve(const tri_gpt_config *cfg, int64_t B, int64_t T, const tu_layout *l, int world,
                      tri_train_layout *out)
{
    tri_model m = tri_gpt_model(cfg);
    return tu_model_layout_resolve(&m, B, T, l, world, out);
}

tri_gpt_config tu_tiny_config(void)
{
    tri_gpt_config c = {.n_layer = 4, .n_head = 12, .n_embd = 48, .vocab_size = 100,
                        .n_positions = 16, .init_std = 0.02f};
    snprintf(c.name, sizeof c.name, "tiny-test");
    return c;
}

int32_t *tu_make_windows(int64_t n, int64_t T, int V, uint64_t seed)
{
    int64_t total = n * (T + 1);
    int32_t *w = malloc((size_t)total * sizeof *w);
    for (int64_t i = 0; i < total; i++) {
        if (i % (T + 1) == 0 || tri_rng_uniform(seed, 2, (uint64_t)i) < 0.2)
            w[i] = (int32_t)(tri_rng_uniform(seed, 1, (uint64_t)i) * V);
        else
            w[i] = (w[i - 1] * 7 + 3) % V;
    }
    return w;
}

double tu_adamw_drift_bound(double lr, double beta1, double beta2, int64_t first, int64_t last, double max_abs)
{
    double sum_k = 0.0;
    for (int64_t t = first; t <= last; t++) {
        double geo = 0.0, r = beta1 * beta1 / beta2;
        for (int64_t k = 0; k < t; k++)
            geo += pow(r, (double)k);
        sum_k += (1.0 - beta1) * sqrt(1.0 - pow(beta2, (double)t)) /
                 ((1.0 - pow(beta1, (double)t)) * sqrt(1.0 - beta2)) * sqrt(geo);
    }
    return 2.0 * lr * sum_k * (1.0 + ldexp(1.0, -20)) + (double)(last - first + 1) * 4.0 * ldexp(max_abs, -24);
}

double tu_adamw_drift_ratio(const float *a, const float *b, int64_t n, double lr, double beta1, double beta2,
                            int64_t first, int64_t last)
{
    double diff = 0.0, max_abs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        max_abs = fmax(max_abs, fmax(fabs((double)a[i]), fabs((double)b[i])));
    }
    /* |w| during the steps: at most its final value plus what the steps moved it */
    double bound = tu_adamw_drift_bound(lr, beta1, beta2, first, last, max_abs + 2.0 * lr * (double)(last - first + 1));
    return diff / bound;
}

int64_t tu_result_compared(const tu_result *r, int i, int64_t vocab)
{
    const char *n = r->names[i];
    bool vocab_rows = strcmp(n, "wte") == 0 || strcmp(n, "model.embed_tokens.weight") == 0 ||
                      strcmp(n, "lm_head.weight") == 0;
    return vocab_rows ? vocab * r->cols[i] : r->numel[i];
}

tri_compression tu_small_compressor(tri_compression_kind kind, tri_compression_reduce reduce, int64_t start)
{
    tri_compression c = tri_compression_defaults();
    c.kind = kind;
    c.reduce = reduce;
    c.block_size = 64;
    c.topk_fraction = 0.25f;
    c.seed = 3;
    c.start_iter = start;
    return c;
}

bool tu_weights_same(const tu_result *a, const tu_result *b)
{
    if (a->n != b->n || a->n == 0)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->numel[i] != b->numel[i] || memcmp(a->weights[i], b->weights[i], (size_t)a->numel[i] * 4) != 0)
            return false;
    return true;
}

bool tu_results_same(const tu_result *a, const tu_result *b, int64_t vocab, char *why, size_t why_size)
{
    if (memcmp(a->losses, b->losses, sizeof a->losses) != 0) {
        snprintf(why, why_size, "losses differ: %.17g vs %.17g", a->losses[a->steps - 1], b->losses[b->steps - 1]);
        return false;
    }
    if (memcmp(a->norms, b->norms, sizeof a->norms) != 0) {
        snprintf(why, why_size, "gradient norms differ");
        return false;
    }
    for (int i = 0; i < a->n; i++) {
        int64_t n = tu_result_compared(a, i, vocab);
        if (memcmp(a->weights[i], b->weights[i], (size_t)n * sizeof(float)) != 0) {
            snprintf(why, why_size, "final %s differs (relative %.2g)", a->names[i],
                     tu_tensor_rel(a->weights[i], b->weights[i], n));
            return false;
        }
    }
    return true;
}

int tu_result_gap_of(const tu_result *ref, const tu_result *got, int64_t vocab, double lr, tu_result_gap *g)
{
    *g = (tu_result_gap){.loss = fabs(got->grad_loss - ref->grad_loss) / ref->grad_loss};
    if (got->n != ref->n)
        return TRI_ERR(TRI_EINVAL, "tu_result_gap_of: %d parameters vs the reference's %d", got->n, ref->n);
    for (int i = 0; i < ref->n; i++) {
        if (strcmp(got->names[i], ref->names[i]) != 0)
            return TRI_ERR(TRI_EINVAL, "tu_result_gap_of: parameter %d is %s, the reference's %s", i, got->names[i],
                           ref->names[i]);
        int64_t n = tu_result_compared(ref, i, vocab);
        double e = tu_tensor_rel(got->grads[i], ref->grads[i], n);
        if (e > g->grad)
            g->grad = e, g->grad_at = i;
        double d = lr > 0 ? tu_adamw_drift_ratio(got->weights[i], ref->weights[i], n, lr, 0.9, 0.95, 1, ref->steps)
                          : 0.0;
        if (d > g->drift)
            g->drift = d, g->drift_at = i;
    }
    for (int s = 0; s < ref->steps; s++) {
        double e = fabs(got->losses[s] - ref->losses[s]) / ref->losses[s];
        if (e > g->step)
            g->step = e, g->step_at = s;
    }
    return TRI_OK;
}

double tu_tensor_rel(const float *a, const float *b, int64_t n)
{
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        ref = fmax(ref, fabs((double)b[i]));
    }
    return ref > 0 ? diff / ref : diff;
}

double tu_tensor_rel_f64(const float *a, const double *b, int64_t n)
{
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        ref = fmax(ref, fabs(b[i]));
    }
    return ref > 0 ? diff / ref : diff;
}
