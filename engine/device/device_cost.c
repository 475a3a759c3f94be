/* engine/device/device_cost.c - the cost device's lifetime, memory, record and ops table (see
 * device_cost.h; the per-op costs are engine/device/ops_cost.c). */
#include "engine/device/device_cost.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/device/cost_ops.h"

#define ALIGNMENT 256 /* cudaMalloc's */

/* A captured graph: its kernels, with the op calls [first_call, first_call + n_calls) they came from. */
typedef struct cost_graph {
    tri_kernel_cost *k;
    int64_t n, first_call, n_calls;
} cost_graph;

typedef struct cost_state {
    bool fused;
    int64_t capture_start, capture_call; /* the record's length and the calls when a capture began */
    tri_kernel_cost *k;
    int64_t n, cap;
    int64_t calls;        /* op calls started */
    const char *op;       /* the current call's op */
} cost_state;

static cost_state *state(const tri_device *d)
{
    return d->impl;
}

/* ---- memory: zeroed host memory nobody writes but the host copies ----
 * calloc maps large blocks lazily, so the planned buffers of a big model cost no resident memory;
 * the block's own pointer is kept in the ALIGNMENT bytes before the aligned one. */

static int cost_alloc(tri_device *d, void **ptr, size_t bytes)
{
    if (d->capturing)
        return TRI_ERR(TRI_EINVAL, "cost device: an allocation of %zu bytes inside a graph capture", bytes);
    char *raw = calloc(1, bytes + 2 * ALIGNMENT);
    if (!raw)
        return TRI_ERR(TRI_ENOMEM, "cost device: cannot allocate %zu bytes", bytes);
    char *p = raw + ALIGNMENT + (ALIGNMENT - (uintptr_t)raw % ALIGNMENT) % ALIGNMENT;
    memcpy(p - sizeof raw, &raw, sizeof raw);
    *ptr = p;
    return TRI_OK;
}

static void cost_free(tri_device *d, void *ptr)
{
    (void)d;
    if (!ptr)
        return;
    char *raw;
    memcpy(&raw, (char *)ptr - sizeof raw, sizeof raw);
    free(raw);
}

/* Host <-> device copies run: a step reads its losses and norm (zeros: no op wrote them). */
static int cost_host_copy(tri_device *d, void *dst, const void *src, size_t bytes)
{
    if (d->capturing)
        return TRI_ERR(TRI_EINVAL, "cost device: a host copy of %zu bytes inside a graph capture", bytes);
    memmove(dst, src, bytes);
    return TRI_OK;
}

/* A device-to-device copy: the CUDA backend's cudaMemcpyAsync, costed as a kernel reading and
 * writing the bytes; the memory itself is not copied (nothing holds values). */
static int cost_copy(tri_device *d, void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src;
    tri_cost_call(d, "copy");
    return tri_cost_kernel(d, 2.0 * (double)bytes, 0, 0);
}

static int cost_sync(tri_device *d)
{
    if (d->capturing)
        return TRI_ERR(TRI_EINVAL, "cost device: a wait inside a graph capture");
    return TRI_OK;
}

static void cost_destroy(tri_device *d)
{
    cost_state *s = state(d);
    if (s)
        free(s->k);
    free(s);
    free(d);
}

/* ---- the record ---- */

void tri_cost_call(tri_device *d, const char *name)
{
    cost_state *s = state(d);
    s->op = name;
    s->calls++;
}

int tri_cost_kernel(tri_device *d, double bytes, double flops_tc, double flops)
{
    cost_state *s = state(d);
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 1024;
        tri_kernel_cost *k = realloc(s->k, (size_t)cap * sizeof *k);
        if (!k)
            return TRI_ERR(TRI_ENOMEM, "cost device: out of memory for %lld kernel records", (long long)cap);
        s->k = k;
        s->cap = cap;
    }
    s->k[s->n++] = (tri_kernel_cost){.op = s->op, .call = s->calls - 1, .bytes = bytes, .flops_tc = flops_tc,
                                     .flops = flops};
    return TRI_OK;
}

/* ---- graphs: the kernels of a capture set aside, recorded again at each launch ---- */

static int cost_capture_begin(tri_device *d)
{
    cost_state *s = state(d);
    s->capture_start = s->n;
    s->capture_call = s->calls;
    return TRI_OK;
}

static int cost_capture_end(tri_device *d, void **graph, int64_t *nodes)
{
    cost_state *s = state(d);
    cost_graph *g = calloc(1, sizeof *g);
    int64_t n = s->n - s->capture_start;
    if (g && n > 0)
        g->k = malloc((size_t)n * sizeof *g->k);
    if (!g || (n > 0 && !g->k)) {
        free(g);
        s->n = s->capture_start;
        return TRI_ERR(TRI_ENOMEM, "cost device: out of memory for a graph of %lld kernels", (long long)n);
    }
    if (n > 0)
        memcpy(g->k, s->k + s->capture_start, (size_t)n * sizeof *g->k);
    g->n = n;
    g->first_call = s->capture_call;
    g->n_calls = s->calls - s->capture_call;
    s->n = s->capture_start; /* captured, not run */
    s->calls = s->capture_call;
    *graph = g;
    *nodes = n;
    return TRI_OK;
}

static int cost_graph_launch(tri_device *d, void *graph)
{
    const cost_graph *g = graph;
    cost_state *s = state(d);
    tri_cost_call(d, "graph_launch");
    int rc = tri_cost_kernel(d, 0, 0, 0);
    int64_t calls = s->calls;
    for (int64_t i = 0; i < g->n && !rc; i++) {
        s->op = g->k[i].op;
        rc = tri_cost_kernel(d, g->k[i].bytes, g->k[i].flops_tc, g->k[i].flops);
        s->k[s->n - 1].call = calls + (g->k[i].call - g->first_call);
        s->k[s->n - 1].graph_node = true;
    }
    s->calls = calls + g->n_calls;
    return rc;
}

static void cost_graph_free(tri_device *d, void *graph)
{
    (void)d;
    cost_graph *g = graph;
    if (g)
        free(g->k);
    free(g);
}

bool tri_cost_fused(const tri_device *d)
{
    return state(d)->fused;
}

/* ---- the tables: every row's tri_cost_<op>; the unfused one leaves the optional rows NULL ---- */

#define COST_MEMORY_SLOTS                                                                                       \
    .alloc = cost_alloc, .free = cost_free, .copy_to_host = cost_host_copy, .copy_from_host = cost_host_copy,     \
    .copy = cost_copy, .sync = cost_sync, .destroy = cost_destroy, .host_alloc = cost_alloc, .host_free = cost_free, \
    .capture_begin = cost_capture_begin, .capture_end = cost_capture_end, .graph_launch = cost_graph_launch,       \
    .graph_free = cost_graph_free

static const tri_device_ops fused_ops = {
    .name = "cost",
    COST_MEMORY_SLOTS,
#define TRI_OP(name, params) .name = tri_cost_##name,
#include "engine/device/ops_list.h"
};

static const tri_device_ops unfused_ops = {
    .name = "cost",
    COST_MEMORY_SLOTS,
#define TRI_OP(name, params) .name = tri_cost_##name,
#define TRI_OP_OPTIONAL(name, params) .name = NULL,
#include "engine/device/ops_list.h"
};

int tri_device_cost_create(tri_device **out, bool fused)
{
    tri_device *d = calloc(1, sizeof *d);
    cost_state *s = calloc(1, sizeof *s);
    if (!d || !s) {
        free(d);
        free(s);
        return TRI_ERR(TRI_ENOMEM, "cost device: cannot allocate the device");
    }
    s->fused = fused;
    d->ops = fused ? &fused_ops : &unfused_ops;
    d->impl = s;
    d->native_bf16 = true; /* as the CUDA backend: bf16 tensors reach the ops as they are */
    *out = d;
    return TRI_OK;
}

bool tri_device_is_cost(const tri_device *d)
{
    return d && (d->ops == &fused_ops || d->ops == &unfused_ops);
}

const tri_kernel_cost *tri_device_cost_kernels(const tri_device *d, int64_t *n)
{
    *n = tri_device_is_cost(d) ? state(d)->n : 0;
    return *n ? state(d)->k : NULL;
}

void tri_device_cost_clear(tri_device *d)
{
    if (tri_device_is_cost(d))
        state(d)->n = 0;
}
