/* engine/device/cpu_ops.h - what the CPU backend's files share: its op functions and loop helpers.
 *
 * tri_cpu_<op> for every row of engine/device/ops_list.h that is not optional (the params of the
 * row), which the CPU table (engine/device/device_cpu.c) points to by name; the CPU backend leaves
 * the optional slots NULL but adamw_fused_multi. Each family's CPU loops (engine/device/ops/<family>_cpu.c) run on the
 * device's threads (engine/device/cpu_threads.h) over fp32 data: the wrappers have widened bf16.
 * Not a public header: callers use the checked tri_op_* wrappers of engine/device/device.h. */
#ifndef TRIDENT_ENGINE_DEVICE_CPU_OPS_H
#define TRIDENT_ENGINE_DEVICE_CPU_OPS_H

#include <omp.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/device/device.h"

#define TRI_CPU_COL_BLOCK 64      /* columns per task in column-blocked reductions */
#define TRI_CPU_REDUCE_CHUNKS 64  /* fixed chunk count of full reductions (thread-count independent) */

#define TRI_OP(name, params) int tri_cpu_##name params;
#define TRI_OP_OPTIONAL(name, params)
#include "engine/device/ops_list.h"
/* The one optional row the CPU fills (engine/device/ops/optimizer_cpu.c): the trainer fuses AdamW,
 * the bf16 publish and the gradient zeroing only on a device that has it. */
int tri_cpu_adamw_fused_multi(tri_device *d, const tri_adamw_piece *pieces, const tri_tensor *models, int n,
                              const tri_adamw_hparams *hp);

/* The threads of d's loops (its own count, or OpenMP's default). */
static inline int nthreads(const tri_device *d)
{
    return d->threads > 0 ? d->threads : omp_get_max_threads();
}

/* A tensor's data as fp32 / as i32 token ids. */
static inline float *fp(tri_tensor t)
{
    return (float *)t.data;
}

static inline const int32_t *ids(tri_tensor t)
{
    return (const int32_t *)t.data;
}

#endif
