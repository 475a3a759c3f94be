/* engine/device/arena.h - planned memory: one device allocation per arena, carved into tensors.
 *
 * Memory is planned, not discovered (DESIGN.md §7, llm.c preallocates the same way): the owner
 * runs its buffer-taking code twice, first on an arena in planning mode (takes only count bytes,
 * by category), then after tri_arena_commit on the real allocation, getting identical offsets.
 * The planned bytes are then exactly what is allocated, and the per-category totals are what
 * engine_train prints and the partitioner predicts. */
#ifndef TRIDENT_ENGINE_DEVICE_ARENA_H
#define TRIDENT_ENGINE_DEVICE_ARENA_H

#include <stddef.h>

#include "engine/device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TRI_MEM_PARAMS = 0,
    TRI_MEM_GRADS,
    TRI_MEM_OPTIMIZER,
    TRI_MEM_ACTIVATIONS,
    TRI_MEM_COMM,
    TRI_MEM_WORKSPACE,
    TRI_MEM_KINDS
} tri_mem_kind;

typedef struct tri_arena {
    tri_device *dev;                 /* NULL while planning */
    char *base;                      /* the one allocation (NULL while planning) */
    size_t cap;                      /* bytes allocated */
    size_t used;                     /* bytes taken so far */
    size_t by_kind[TRI_MEM_KINDS];   /* bytes taken per category */
} tri_arena;

#define TRI_ARENA_ALIGN 256 /* bytes; every tensor starts aligned (cuBLASLt wants 16, AVX-512 64) */

/* Starts an arena in planning mode. */
void tri_arena_plan(tri_arena *a);
/* Allocates the planned bytes on d and rewinds, so the same takes run again for real.
 * TRI_ENOMEM on failure. */
int tri_arena_commit(tri_arena *a, tri_device *d);
/* Takes a tensor of the given dtype and shape (ndim dims), counted under `kind`. In planning mode
 * t->data is NULL. TRI_ENOMEM when a committed arena has no room (a planning bug), or when the
 * size overflows. */
int tri_arena_take(tri_arena *a, tri_mem_kind kind, tri_tensor *t, tri_dtype dtype, int ndim,
                   const int64_t *shape);
/* The same with the shape written out: TRI_ARENA_TAKE(a, TRI_MEM_ACTIVATIONS, &x, TRI_F32, N, C). */
#define TRI_ARENA_TAKE(a, kind, t, dtype, ...)                                                                    \
    tri_arena_take((a), (kind), (t), (dtype), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),        \
                   (const int64_t[]){__VA_ARGS__})
/* Frees the allocation. */
void tri_arena_release(tri_arena *a);

const char *tri_mem_kind_name(tri_mem_kind kind);

#ifdef __cplusplus
}
#endif

#endif
