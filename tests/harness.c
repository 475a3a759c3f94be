/* tests/harness.c - a small GPT in any layout on thread ranks (see harness.h). */
#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device.h"
#include "engine/grid.h"
#include "engine/rng.h"
#include "engine/status.h"
#include "engine/train.h"
#include "models/gpt.h"
#include "partitioner/layout.h"

typedef struct job {
    const tri_gpt_config *cfg;
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

/* Gathers every parameter's gradient over TP into global tensors on rank 0 of the world. */
static int gather_grads(tri_gpt *m, const tri_grid *g, tu_result *out)
{
    int rc = TRI_OK;
    for (int i = 0; i < m->layout.n && !rc; i++) {
        const tri_param *p = &m->layout.params[i];
        tri_tensor all;
        float *host = NULL;
        int64_t total = p->numel * g->tp;
        rc = tri_device_alloc(m->dev, &all.data, (size_t)total * sizeof(float));
        all = tri_tensor_1d(all.data, TRI_F32, total);
        if (!rc) rc = tri_comm_all_gather(g->tp_comm, all, tri_param_view(p, m->grads));
        if (!rc && g->world_rank == 0) {
            host = malloc((size_t)total * sizeof *host);
            rc = host ? tri_device_copy_to_host(m->dev, host, all) : TRI_ERR(TRI_ENOMEM, "harness: no memory");
        }
        if (!rc && g->world_rank == 0) {
            int64_t global = 1;
            for (int d = 0; d < p->spec.ndim; d++)
                global *= p->spec.shape[d];
            float *dst = calloc((size_t)global, sizeof *dst);
            for (int r = 0; r < (p->tp_replicated ? 1 : g->tp); r++)
                tri_shard_place(p, r, host + r * p->numel, dst);
            snprintf(out->names[i], sizeof out->names[i], "%s", p->spec.name);
            out->numel[i] = global;
            out->rows[i] = p->spec.shape[0];
            out->cols[i] = global / p->spec.shape[0];
            out->grads[i] = dst;
            out->n = i + 1;
        }
        free(host);
        tri_device_free(m->dev, all.data);
    }
    return rc;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    job *j = arg;
    tri_device *dev = NULL;
    tri_grid grid;
    tri_gpt *m = NULL;
    tri_trainer tr;
    bool have_grid = false, have_trainer = false;
    int rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_grid_create(&grid, world, j->layout.tp, 1);
    have_grid = rc == TRI_OK;
    tri_gpt_options opt = {.B = j->B, .T = j->T, .n_slots = 1, .layer_end = j->cfg->n_layer,
                           .first = true, .last = true, .sequence_parallel = j->layout.sp,
                           .dp = have_grid ? grid.dp : 1, .dp_rank = have_grid ? grid.dp_rank : 0,
                           .seed = 1234};
    if (!rc) rc = tri_gpt_create(&m, j->cfg, &opt, dev, grid.tp_comm);
    tri_step_config sc = {.n_micro = j->layout.n_micro, .sequence_parallel = j->layout.sp, .clip_grad = 1.0f};
    tri_adamw_config ac = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    if (!rc) rc = tri_trainer_create(&tr, &m->stage, &grid, dev, &sc, &ac);
    have_trainer = rc == TRI_OK;
    tri_batch_source src = {.ctx = j, .fill = fill};
    if (!rc) {
        tri_comm_reset_counters(grid.tp_comm);
        rc = tri_trainer_gradients(&tr, &src, 0, &j->out->grad_loss);
        if (grid.world_rank == 0)
            memcpy(j->out->tp_bytes, grid.tp_comm->bytes, sizeof j->out->tp_bytes);
    }
    if (!rc) rc = gather_grads(m, &grid, j->out);
    for (int s = 0; s < j->steps && !rc; s++) {
        tri_step_result res;
        rc = tri_trainer_step(&tr, &src, s, 1e-3f, &res);
        if (!rc && grid.world_rank == 0) {
            j->out->losses[s] = res.loss;
            j->out->norms[s] = res.grad_norm;
        }
    }
    if (have_trainer)
        tri_trainer_destroy(&tr);
    tri_gpt_destroy(m);
    if (have_grid)
        tri_grid_destroy(&grid);
    tri_device_destroy(dev);
    return rc;
}

static job make_job(const tri_gpt_config *cfg, int64_t B, int64_t T, const tu_layout *layout,
                    const int32_t *windows, int steps, tu_result *out)
{
    memset(out, 0, sizeof *out);
    out->steps = steps;
    job j = {.cfg = cfg, .B = B, .T = T, .layout = *layout, .windows = windows, .steps = steps, .out = out};
    if (j.layout.n_micro < 1)
        j.layout.n_micro = 1;
    return j;
}

int tu_run_gpt(const tri_gpt_config *cfg, int64_t B, int64_t T, const tu_layout *layout,
               const int32_t *windows, int steps, tu_result *out)
{
    job j = make_job(cfg, B, T, layout, windows, steps, out);
    return tri_run_thread_ranks(layout->tp, run_rank, &j);
}

int tu_run_gpt_rank(tri_comm *world, const tri_gpt_config *cfg, int64_t B, int64_t T,
                    const tu_layout *layout, const int32_t *windows, int steps, tu_result *out)
{
    job j = make_job(cfg, B, T, layout, windows, steps, out);
    return run_rank(world->rank, world->size, world, &j);
}

void tu_result_free(tu_result *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->grads[i]);
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

tri_gpt_config tu_tiny_config(void)
{
    tri_gpt_config c = {.n_layer = 2, .n_head = 12, .n_embd = 48, .vocab_size = 100,
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
