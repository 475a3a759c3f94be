/* engine/train/step_graph.c - the training step's forward and backward passes as device graphs
 * (see step_graph.h). */
#include "engine/train/step_graph.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/core/status.h"
#include "engine/train/schedule.h"

int tri_step_graph_check(const tri_device *dev, const tri_grid *grid, tri_chunk *const *chunks, int v)
{
    if (!tri_device_can_capture(dev))
        return TRI_ERR(TRI_ENOTSUP, "--enable-cuda-graph: the %s device cannot capture graphs (CUDA only)",
                       dev->ops->name);
    if (dev->profile)
        return TRI_ERR(TRI_ENOTSUP, "--enable-cuda-graph: profiling waits for the device after every op, which a "
                       "capture forbids (profile without the graph)");
    if (grid->tp > 1 || grid->pp > 1 || grid->dp > 1)
        return TRI_ERR(TRI_ENOTSUP, "--enable-cuda-graph: supported at tp = pp = dp = 1 (here tp %d, pp %d, dp %d): "
                       "the pipeline's exchanges and the tensor- and data-parallel collectives are not "
                       "captured (the MPI and staged comms wait on the host)", grid->tp, grid->pp, grid->dp);
    for (int c = 0; c < v; c++) {
        const tri_zero *z = &chunks[c]->zero;
        if (z->stage >= 2)
            return TRI_ERR(TRI_ENOTSUP, "--enable-cuda-graph: --zero-stage %d keeps gradient buckets%s per pass on "
                           "the host, which a replay would skip (use stage 0 or 1)", z->stage,
                           z->stage == 3 ? " and parameter gathers" : "");
        if (z->deterministic)
            return TRI_ERR(TRI_ENOTSUP, "--enable-cuda-graph: --deterministic-mode sums gradients through buckets "
                           "kept per pass on the host, which a replay would skip");
        if (z->overlap_grad_reduce)
            return TRI_ERR(TRI_ENOTSUP, "--enable-cuda-graph: --overlap-grad-reduce starts reductions from host "
                           "counts of the passes, which a replay would skip");
    }
    return TRI_OK;
}

void tri_step_graph_init(tri_step_graph *g, tri_device *dev)
{
    *g = (tri_step_graph){.dev = dev};
}

void tri_step_graph_free(tri_step_graph *g)
{
    for (int i = 0; i < g->n; i++)
        tri_device_graph_free(g->dev, g->entry[i].graph);
    free(g->entry);
    *g = (tri_step_graph){0};
}

void tri_step_graph_begin_step(tri_step_graph *g)
{
    g->steps++;
}

static const char *op_name(int kind)
{
    return kind == TRI_SCHED_FWD ? "forward" : kind == TRI_SCHED_BWD ? "backward" : "op";
}

static tri_step_graph_entry *find(tri_step_graph *g, int kind, int chunk, int slot, float dloss)
{
    for (int i = 0; i < g->n; i++) {
        tri_step_graph_entry *e = &g->entry[i];
        if (e->kind == kind && e->chunk == chunk && e->slot == slot && e->dloss == dloss)
            return e;
    }
    return NULL;
}

/* Captures pass(ctx) as a new entry (the pass does not run: its graph does, when launched). */
static int capture(tri_step_graph *g, int kind, int chunk, int slot, float dloss, int (*pass)(void *ctx), void *ctx,
                   tri_step_graph_entry **out)
{
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 4;
        tri_step_graph_entry *e = realloc(g->entry, (size_t)cap * sizeof *e);
        if (!e)
            return TRI_ERR(TRI_ENOMEM, "--enable-cuda-graph: out of memory for the graphs");
        g->entry = e;
        g->cap = cap;
    }
    tri_step_graph_entry e = {.kind = kind, .chunk = chunk, .slot = slot, .dloss = dloss};
    int rc = tri_device_capture_begin(g->dev);
    if (rc)
        return tri_error_context(rc, "--enable-cuda-graph: starting the capture");
    rc = pass(ctx);
    tri_device_graph *graph = NULL;
    if (rc) {
        /* the capture always ends; the pass's own error (a wait, an upload, an allocation inside
         * the capture) is the one to report, not the invalidated capture's */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tri_error_message());
        (void)tri_device_capture_end(g->dev, &graph, NULL);
        tri_device_graph_free(g->dev, graph);
        tri_error_restore(rc, msg);
        return tri_error_context(rc, "--enable-cuda-graph: capturing the %s of chunk %d, slot %d (nothing inside "
                                 "a captured pass may wait for the device, upload or allocate)", op_name(kind),
                                 chunk, slot);
    }
    rc = tri_device_capture_end(g->dev, &graph, &e.nodes);
    if (rc)
        return tri_error_context(rc, "--enable-cuda-graph: ending the capture of the %s of chunk %d, slot %d",
                                 op_name(kind), chunk, slot);
    e.graph = graph;
    g->entry[g->n] = e;
    *out = &g->entry[g->n++];
    g->captures++;
    return TRI_OK;
}

int tri_step_graph_run(tri_step_graph *g, int kind, int chunk, int slot, float dloss, int (*pass)(void *ctx),
                       void *ctx)
{
    if (g->steps < 2)
        return pass(ctx);
    if (g->dev->profile)
        return TRI_ERR(TRI_ENOTSUP, "--enable-cuda-graph: profiling waits for the device after every op, which a "
                       "capture forbids (profile without the graph)");
    tri_step_graph_entry *e = find(g, kind, chunk, slot, dloss);
    int rc = e ? TRI_OK : capture(g, kind, chunk, slot, dloss, pass, ctx, &e);
    if (!rc) rc = tri_device_graph_launch(g->dev, e->graph);
    g->launches += rc == TRI_OK;
    return rc;
}
