/* engine/device/device_cost.h - the cost device: a backend that runs no math and records, for every
 * op called on it, the GPU kernels the CUDA backend would launch for it and what each moves and
 * computes (the first half of the kernel-time model; partitioner/kernel_time.h turns the record
 * into seconds on a named GPU).
 *
 * A training step run on this device (the same session, layers and trainer as on a GPU) issues the
 * real sequence of ops with their real tensors: shapes, dtypes and views into the planned buffers.
 * Each op's cost function (engine/device/ops_cost.c, one per row of engine/device/ops_list.h, beside
 * the CUDA kernels it mirrors in cuda/<family>/) appends one tri_kernel_cost per kernel launch:
 *   bytes     DRAM bytes read plus written, each tensor counted once per kernel pass over it at its
 *             dtype's size (caches assumed to hold what a kernel re-reads within one row or tile);
 *   flops_tc  multiply-adds x 2 on the tensor cores (bf16 cuBLASLt products, the bf16 flash kernels);
 *   flops     other floating-point work on the CUDA cores (fp32 products: cuBLASLt with
 *             CUBLAS_COMPUTE_32F, no TF32; element-wise arithmetic, a few FLOPs an element).
 * A cuBLASLt matmul counts as one launch.
 *
 * Memory is real host memory (so host copies of losses and norms read zeros), allocated lazily
 * (large buffers are mapped, not touched), 256-byte aligned as cudaMalloc's, so the alignment tests
 * the CUDA backend makes (the bias epilogue) see the same pointers. No op reads or writes it.
 *
 * Two op sets:
 *   fused true   the CUDA backend at HEAD: every optional row of ops_list.h is a slot of its own
 *                (add_layernorm_forward, sum_squares_multi, adamw_multi, ...), ce_fused one kernel;
 *   fused false  the CUDA backend of the 2026-11-27 H200 profile (docs/cuda-correctness.md): no
 *                optional slot (the wrappers run add then layernorm, a sum_squares and an adamw per
 *                parameter), and the classifier as its four vocab-parallel pieces, recorded under
 *                their own names (ce_row_max, ce_sumexp_target, ce_loss, ce_backward).
 *
 * Graphs (--enable-cuda-graph, engine/train/step_graph.h): the device captures as the CUDA backend
 * does. The kernels of a capture are kept aside, not recorded; each tri_device_graph_launch records
 * one "graph_launch" (a launch with no work) and then the graph's kernels again, marked graph_node.
 * A host copy, wait or allocation inside a capture fails, as on CUDA. */
#ifndef TRIDENT_ENGINE_DEVICE_DEVICE_COST_H
#define TRIDENT_ENGINE_DEVICE_DEVICE_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One kernel launch of one op call. */
typedef struct tri_kernel_cost {
    const char *op;    /* the op's name, as the profiler prints it (a string literal) */
    int64_t call;      /* the op call it belongs to: 0, 1, ... in program order */
    double bytes;      /* DRAM bytes read + written */
    double flops_tc;   /* FLOPs on tensor cores */
    double flops;      /* FLOPs on CUDA cores */
    bool graph_node;   /* run as a node of a launched graph (its launch cost is a node's, not a launch's) */
} tri_kernel_cost;

/* A cost device with the op set above. TRI_ENOMEM on failure; destroy with tri_device_destroy. */
int tri_device_cost_create(tri_device **out, bool fused);

/* Whether d is a cost device. */
bool tri_device_is_cost(const tri_device *d);

/* The kernels recorded since creation or the last clear, in launch order; *n their count.
 * NULL (and *n 0) for a device that is not a cost device. */
const tri_kernel_cost *tri_device_cost_kernels(const tri_device *d, int64_t *n);

/* Forgets the recorded kernels (a warm-up step's), keeping the memory. */
void tri_device_cost_clear(tri_device *d);

#ifdef __cplusplus
}
#endif

#endif
