/* engine/train/chunk.c - a model chunk: the engine's side (see chunk.h). The ZeRO choreography around
 * the model's passes, the parameters' initialisation, and the buffers' planning. */
#include "engine/train/chunk.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

void tri_chunk_begin(tri_chunk *c, const tri_train_layout *run, const tri_chunk_place *place, int n_global_params,
                     const tri_param_layout *layout)
{
    memset(c, 0, sizeof *c);
    c->run = *run;
    c->first = place->first;
    c->last = place->last;
    c->n_slots = place->n_slots;
    c->tokens_per_mb = run->B * run->T;
    c->window = (place->cp > 1 ? place->seq_T : run->T) + 1; /* cp: the whole window, cut by the model */
    c->samples_per_mb = run->B;
    c->n_micro = run->n_micro;
    c->n_global_params = n_global_params;
    c->seed = place->seed;
    c->layout = *layout;
}

int tri_chunk_add_pass(tri_chunk *c, tri_pass_list list, const tri_pass *p)
{
    for (int k = 0; k < p->n_units; k++)
        if (p->unit[k] < 0 || p->unit[k] >= c->layout.n_units)
            return TRI_ERR(TRI_EINVAL, "chunk: pass %d.%d uses unit %d of %d", p->kind, p->index, p->unit[k],
                           c->layout.n_units);
    if (p->n_units < 0 || p->n_units > TRI_PASS_MAX_UNITS)
        return TRI_ERR(TRI_EINVAL, "chunk: a pass uses %d units (at most %d)", p->n_units, TRI_PASS_MAX_UNITS);
    if (c->n_passes[list] == c->cap_passes[list]) {
        int cap = c->cap_passes[list] ? 2 * c->cap_passes[list] : 16;
        tri_pass *v = realloc(c->passes[list], (size_t)cap * sizeof *v);
        if (!v)
            return TRI_ERR(TRI_ENOMEM, "chunk: out of memory for passes");
        c->passes[list] = v;
        c->cap_passes[list] = cap;
    }
    c->passes[list][c->n_passes[list]++] = *p;
    return TRI_OK;
}

/* ---- units around a pass ---- */

/* Makes unit u's parameters (and with grads its gradient buffer) the model's, through bind. */
static int acquire(tri_chunk *c, int u, bool grads)
{
    tri_tensor p, g = tri_tensor_none();
    int rc = tri_zero_params(&c->zero, u, &p);
    if (!rc && grads && (rc = tri_zero_grads(&c->zero, u, &g)) != TRI_OK)
        tri_zero_release_params(&c->zero, u);
    if (!rc)
        c->model.bind(c->model.self, u, p, g);
    return rc;
}

/* Done with unit u for this pass: its gradients (when taken) are complete, its parameters released. */
static int release(tri_chunk *c, int u, bool grads)
{
    int rc = grads ? tri_zero_grads_done(&c->zero, u) : TRI_OK;
    tri_zero_release_params(&c->zero, u);
    return rc;
}

/* Pass p between acquiring its units (in order) and releasing them (in reverse), every acquired
 * unit released whatever fails. */
static int run_pass(tri_chunk *c, const tri_pass *p, int slot, bool train, float dloss)
{
    int rc = tri_zero_exact_grads(&c->zero), got = 0; /* deterministic mode: this chunk's scratch */
    for (; got < p->n_units && !rc; got++)
        if ((rc = acquire(c, p->unit[got], p->grads[got])) != TRI_OK)
            break;
    if (!rc) rc = c->model.run(c->model.self, p, slot, train, dloss);
    for (int k = got - 1; k >= 0; k--) {
        int rc2 = release(c, p->unit[k], p->grads[k]);
        rc = rc ? rc : rc2;
    }
    return rc;
}

static int run_list(tri_chunk *c, tri_pass_list list, int slot, bool train, float dloss)
{
    int rc = TRI_OK;
    for (int i = 0; i < c->n_passes[list] && !rc; i++)
        rc = run_pass(c, &c->passes[list][i], slot, train, dloss);
    return rc;
}

int tri_chunk_forward(tri_chunk *c, int slot, bool train, float dloss)
{
    if (train)
        c->dloss = dloss; /* the same for every micro-batch of a step; the backward passes get it */
    return run_list(c, train ? TRI_PASSES_FORWARD : TRI_PASSES_FORWARD_EVAL, slot, train, dloss);
}

int tri_chunk_backward(tri_chunk *c, int slot)
{
    return run_list(c, TRI_PASSES_BACKWARD, slot, true, c->dloss);
}

int tri_chunk_loss_sum(tri_chunk *c, int slot, double *sum)
{
    tri_tensor losses = c->model.buffer(c->model.self, TRI_CHUNK_LOSSES, slot);
    int64_t n = tri_tensor_numel(losses);
    float *host = malloc((size_t)(n ? n : 1) * sizeof *host);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "chunk: out of memory reading %lld losses", (long long)n);
    int rc = tri_device_copy_to_host(c->dev, host, losses);
    *sum = rc ? 0.0 : tri_chunk_loss_sum_host(host, n);
    free(host);
    return rc;
}

double tri_chunk_loss_sum_host(const float *losses, int64_t n)
{
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++)
        acc += losses[i];
    return acc;
}

int tri_chunk_finish_grads(tri_chunk *c)
{
    return run_list(c, TRI_PASSES_FINISH, 0, true, 0.0f);
}

int tri_chunk_zero_grads(tri_chunk *c)
{
    int rc = tri_zero_zero_grads(&c->zero);
    if (!rc && c->model.zero_private)
        rc = c->model.zero_private(c->model.self);
    return rc;
}

/* ---- what the pass lists say about the units ---- */

/* Passes of a list reading unit u, and those writing its gradients. */
static void count_uses(const tri_chunk *c, tri_pass_list list, int u, int *reads, int *writes)
{
    *reads = *writes = 0;
    for (int i = 0; i < c->n_passes[list]; i++)
        for (int k = 0; k < c->passes[list][i].n_units; k++)
            if (c->passes[list][i].unit[k] == u) {
                (*reads)++;
                *writes += c->passes[list][i].grads[k];
            }
}

void tri_chunk_unit_uses(const tri_chunk *c, tri_unit_uses *out)
{
    for (int u = 0; u < c->layout.n_units; u++) {
        out[u] = (tri_unit_uses){.len = c->layout.units[u].len};
        count_uses(c, TRI_PASSES_FORWARD, u, &out[u].fwd_reads, &out[u].fwd_writes);
        count_uses(c, TRI_PASSES_BACKWARD, u, &out[u].bwd_reads, &out[u].bwd_writes);
    }
}

/* When each unit's gradient is complete in a step: the passes writing it per micro-batch, and the
 * finish passes once (ZeRO starts an overlapped reduction then). */
static void expect_grads(tri_chunk *c)
{
    tri_unit_uses uses;
    for (int u = 0; u < c->layout.n_units; u++) {
        int reads, finish;
        count_uses(c, TRI_PASSES_FORWARD, u, &reads, &uses.fwd_writes);
        count_uses(c, TRI_PASSES_BACKWARD, u, &reads, &uses.bwd_writes);
        count_uses(c, TRI_PASSES_FINISH, u, &reads, &finish);
        int calls = c->n_micro * (uses.fwd_writes + uses.bwd_writes) + finish;
        tri_zero_expect_grads(&c->zero, u, c->n_micro > 0 ? calls : 0);
    }
}

/* ---- initialisation ---- */

/* Fills unit u's parameters with their initial values: the whole unit on stages 0-2, this rank's
 * slice on stage 3; under bf16 the master weights and their rounding, parameter by parameter. */
static int init_unit(tri_chunk *c, int u)
{
    const tri_param_unit *unit = &c->layout.units[u];
    float *host = calloc((size_t)unit->len, sizeof *host);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "chunk: out of memory initialising unit %d", u);
    for (int i = unit->first; i < unit->first + unit->count; i++)
        tri_param_init_host(&c->layout.params[i], c->seed, host + (c->layout.params[i].offset - unit->start));
    int rc = TRI_OK;
    if (c->zero.bf16) {
        for (int i = unit->first; i < unit->first + unit->count && !rc; i++)
            rc = tri_zero_write_param(&c->zero, &c->layout.params[i],
                                      host + (c->layout.params[i].offset - unit->start));
    } else if (c->zero.stage < 3) {
        rc = tri_device_copy_from_host(c->dev, tri_tensor_range(c->zero.params, unit->start, unit->len), host);
    } else { /* the owned slice of each of its parts (engine/train/param.h tri_param_part) */
        for (int k = unit->first_part; k < unit->first_part + unit->n_parts && !rc; k++) {
            int64_t start, len, local;
            tri_zero_owned(&c->zero, k, &start, &len, &local);
            rc = tri_device_copy_from_host(c->dev, tri_zero_owned_params(&c->zero, start, len),
                                           host + (start - unit->start));
        }
    }
    free(host);
    return rc;
}

static int init_params(tri_chunk *c)
{
    int rc = TRI_OK;
    /* bf16 writes parameter by parameter: zero the master weights and the model's parameters
     * first, so the units' padding holds zeros as the fp32 path's whole-unit copies give (else the
     * optimizer updates and publishes uninitialised padding) */
    if (c->zero.bf16) {
        rc = tri_op_zero(c->dev, c->zero.master);
        if (!rc) rc = tri_op_zero(c->dev, c->zero.stage < 3 ? c->zero.params : c->zero.param_shard);
    }
    for (int u = 0; u < c->layout.n_units && !rc; u++)
        rc = init_unit(c, u);
    return rc ? rc : tri_chunk_zero_grads(c);
}

/* ---- buffers ---- */

/* ZeRO's buffers first, then the model's. */
static int take_all(tri_chunk *c)
{
    int rc = tri_zero_take(&c->zero, &c->arena, &c->layout, &c->run);
    return rc ? rc : c->model.take_buffers(c->model.self, &c->arena);
}

int tri_chunk_build(tri_chunk *c, const tri_chunk_model *model, tri_device *dev, tri_comm *dp_comm)
{
    c->model = *model;
    c->dev = dev;
    tri_arena_plan(&c->arena);
    int rc = take_all(c);
    if (rc || !dev)
        return rc;
    rc = tri_arena_commit(&c->arena, dev);
    if (!rc) rc = take_all(c);
    if (rc)
        return rc;
    tri_zero_bind(&c->zero, dev, dp_comm);
    expect_grads(c);
    return init_params(c);
}

void tri_chunk_destroy(tri_chunk *c)
{
    tri_zero_destroy(&c->zero); /* first: waits for collectives still in flight on arena buffers */
    tri_arena_release(&c->arena);
    free(c->layout.params);
    free(c->layout.units);
    free(c->layout.parts);
    for (int l = 0; l < TRI_PASS_LISTS; l++)
        free(c->passes[l]);
    memset(c, 0, sizeof *c);
}
