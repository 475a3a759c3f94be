/* engine/device/device_cost.c - the cost device's lifetime, memory, record and ops table (see
 * device_cost.h; the per-op costs are engine/device/ops_cost.c). */
#include "engine/device/device_cost.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/device/cost_ops.h"

#define ALIGNMENT 256 /* cudaMalloc's */

typedef struct cost_state {
    bool fused;
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
    (void)d;
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
    (void)d;
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
    (void)d;
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

bool tri_cost_fused(const tri_device *d)
{
    return state(d)->fused;
}

/* ---- the tables: every row's tri_cost_<op>; the unfused one leaves the optional rows NULL ---- */

#define COST_MEMORY_SLOTS                                                                                       \
    .alloc = cost_alloc, .free = cost_free, .copy_to_host = cost_host_copy, .copy_from_host = cost_host_copy,     \
    .copy = cost_copy, .sync = cost_sync, .destroy = cost_destroy, .host_alloc = cost_alloc, .host_free = cost_free

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
