/* engine/device/arena.c - the planned-memory arena (see arena.h). */
#include "engine/device/arena.h"

#include <string.h>

#include "engine/core/checked.h"
#include "engine/core/status.h"

void tri_arena_plan(tri_arena *a)
{
    memset(a, 0, sizeof *a);
}

int tri_arena_commit(tri_arena *a, tri_device *d)
{
    size_t bytes = a->used;
    int rc = tri_device_alloc(d, (void **)&a->base, bytes);
    if (rc)
        return tri_error_context(rc, "allocating the planned %zu bytes", bytes);
    a->dev = d;
    a->cap = bytes;
    a->used = 0;
    memset(a->by_kind, 0, sizeof a->by_kind);
    return TRI_OK;
}

int tri_arena_take(tri_arena *a, tri_mem_kind kind, tri_tensor *t, tri_dtype dtype, int ndim,
                   const int64_t *shape)
{
    size_t bytes = tri_dtype_size(dtype), padded = 0, used = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || !tri_mul_size(bytes, (size_t)shape[i], &bytes))
            return TRI_ERR(TRI_ENOMEM, "arena: tensor size overflows (dim %d = %lld)", i,
                           (long long)shape[i]);
    }
    if (!tri_add_size(bytes, TRI_ARENA_ALIGN - 1, &padded) || !tri_add_size(a->used, padded, &used))
        return TRI_ERR(TRI_ENOMEM, "arena: %zu bytes after %zu overflow the address space", bytes, a->used);
    padded = padded / TRI_ARENA_ALIGN * TRI_ARENA_ALIGN;
    if (a->base && a->used + padded > a->cap)
        return TRI_ERR(TRI_ENOMEM, "arena: %zu bytes requested with %zu of %zu left (plan mismatch)",
                       padded, a->cap - a->used, a->cap);
    void *data = a->base ? a->base + a->used : NULL;
    switch (ndim) {
    case 1: *t = tri_tensor_1d(data, dtype, shape[0]); break;
    case 2: *t = tri_tensor_2d(data, dtype, shape[0], shape[1]); break;
    case 3: *t = tri_tensor_3d(data, dtype, shape[0], shape[1], shape[2]); break;
    case 4: *t = tri_tensor_4d(data, dtype, shape[0], shape[1], shape[2], shape[3]); break;
    default: return TRI_ERR(TRI_EINVAL, "arena: ndim %d outside 1..4", ndim);
    }
    a->used += padded;
    a->by_kind[kind] += padded;
    return TRI_OK;
}

void tri_arena_release(tri_arena *a)
{
    if (a->dev && a->base)
        tri_device_free(a->dev, a->base);
    a->base = NULL;
    a->cap = 0;
    a->used = 0;
}

const char *tri_mem_kind_name(tri_mem_kind kind)
{
    static const char *names[TRI_MEM_KINDS] = {"parameters", "gradients", "optimizer state",
                                               "activations", "communication buffers", "workspace"};
    return kind < TRI_MEM_KINDS ? names[kind] : "?";
}
