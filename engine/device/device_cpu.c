/* engine/device/device_cpu.c - the CPU backend of the device interface: the reference and tested path.
 *
 * Its lifetime, its memory (host memory: "device" pointers are ordinary pointers, 64-byte aligned)
 * and its ops table. The ops themselves live by family in engine/device/ops/<family>_cpu.c: every
 * matmul (including the per-head products inside attention) is an OpenBLAS sgemm; the rest are
 * OpenMP loops over rows calling the shared arithmetic of engine/core/math.h, each op's loops in a
 * function of their own that the op runs on the device's threads (engine/device/cpu_threads.h: no
 * OpenMP parallel region when there is one thread). Sums over rows that feed parameter gradients
 * (bias, layernorm and embedding backward) are parallel over column blocks with rows in order, and
 * full reductions use a fixed number of chunks, so every result is the same for any thread count. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE (Linux) */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/core/status.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/device.h"

#define ALIGNMENT 64
#define HUGE_PAGE ((size_t)2 << 20)

/* ---- memory ---- */

/* A block of 2 MiB or more starts on a 2 MiB boundary and asks for transparent huge pages, so it
 * faults in 2 MiB at a time (the kernel gives them where madvise asks: the default of most
 * distributions), whatever the allocator: glibc's default set-up and AddressSanitizer map large
 * blocks afresh with 4 KiB pages, and on the VMs of the kind a first touch costs ~15 us a page
 * (docs/test-suite.md). Its size is not rounded: a tail shorter than 2 MiB keeps small pages. */
static int cpu_alloc(tri_device *d, void **ptr, size_t bytes)
{
    size_t align = bytes >= HUGE_PAGE ? HUGE_PAGE : ALIGNMENT;
    size_t rounded = (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    if (posix_memalign(ptr, align, rounded) != 0) {
        *ptr = NULL;
        return TRI_ERR(TRI_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
    }
    if (align == HUGE_PAGE)
        (void)madvise(*ptr, rounded, MADV_HUGEPAGE);
    return TRI_OK;
}

static void cpu_free(tri_device *d, void *ptr)
{
    free(ptr);
}

static int cpu_copy(tri_device *d, void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
    return TRI_OK;
}

static int cpu_sync(tri_device *d)
{
    return TRI_OK;
}

static void cpu_destroy(tri_device *d)
{
    free(d);
}

/* ---- the table ---- */

/* Memory slots by hand; the op slots from engine/device/ops_list.h, by name: every row's tri_cpu_<op>
 * (engine/device/cpu_ops.h), so an op without a CPU implementation does not link. The optional rows
 * stay NULL (the wrappers run the ops that define them) but adamw_fused_multi, whose use the trainer
 * decides by the slot: each optional row says here which (a new one fails to compile until it does). */
#define CPU_OPTIONAL_sum_squares_multi NULL
#define CPU_OPTIONAL_add_layernorm_forward NULL
#define CPU_OPTIONAL_add_rmsnorm_forward NULL
#define CPU_OPTIONAL_adamw_multi NULL
#define CPU_OPTIONAL_adamw_fused_multi tri_cpu_adamw_fused_multi
static const tri_device_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .host_alloc = cpu_alloc, /* host memory is the device's own */
    .host_free = cpu_free,
#define TRI_OP(name, params) .name = tri_cpu_##name,
#define TRI_OP_OPTIONAL(name, params) .name = CPU_OPTIONAL_##name,
#include "engine/device/ops_list.h"
};

int tri_device_cpu_create(tri_device **out, int threads)
{
    tri_device *d = calloc(1, sizeof *d);
    if (!d)
        return TRI_ERR(TRI_ENOMEM, "cpu: cannot allocate the device");
    d->ops = &cpu_ops;
    d->threads = threads;
    *out = d;
    return TRI_OK;
}
