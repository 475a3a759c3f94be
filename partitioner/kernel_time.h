/* partitioner/kernel_time.h - the kernel-time model: the seconds each op of a training step takes
 * on a named GPU, from what its kernels move and compute (engine/device/device_cost.h records them
 * by running the step on the cost device).
 *
 * A kernel takes max(compute, memory) + launch (a roofline, Williams et al. 2009, plus a fixed cost
 * per launch), where
 *   compute = flops_tc / (peak_bf16 x gemm) + flops / (peak_fp32 x gemm)
 *   memory  = bytes / (mem_bw x memory)
 *   launch  = the preset's launch_s
 * with the preset's dense peaks, bandwidth and achievable fractions (partitioner/hardware.h: gemm is
 * MAMF x the transformer factor, memory 0.8), the same numbers the partitioner's time model uses.
 * An op's time is the sum over its kernels; its bound is the term that gave it the most seconds
 * (compute or memory summed over the kernels that term set, launch over all its launches). The
 * ops run one after another on one stream, so the step is the sum of the ops. What the model leaves
 * out: kernels that reach neither roof (latency-bound reductions, small grids that fill few SMs,
 * shapes cuBLASLt runs slowly), cache effects, and host time between launches beyond launch_s.
 *
 * A kernel replayed as a node of a CUDA graph (tri_kernel_cost.graph_node: --enable-cuda-graph)
 * costs graph_node_s instead of launch_s, and each graph launch is one launch with no work (the
 * "graph_launch" row). TRI_GRAPH_NODE_S, 1 us a node, is an assumption, not a measurement: NVIDIA
 * describes a graph's launch as removing most of the per-kernel CPU launch cost, and what is left is
 * the GPU's own scheduling of each node, assumed here at a quarter of the 4 us launch. */
#ifndef TRIDENT_PARTITIONER_KERNEL_TIME_H
#define TRIDENT_PARTITIONER_KERNEL_TIME_H

#include <stdint.h>
#include <stdio.h>

#include "engine/device/device_cost.h"
#include "partitioner/hardware.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tri_bound { TRI_BOUND_MEMORY = 0, TRI_BOUND_COMPUTE = 1, TRI_BOUND_LAUNCH = 2 } tri_bound;

/* "memory", "compute", "launch". */
const char *tri_bound_name(tri_bound b);

/* What a device reaches. */
typedef struct tri_kernel_rates {
    double tc_flops;   /* FLOP/s on the tensor cores: peak_bf16 x eff.gemm */
    double cc_flops;   /* FLOP/s on the CUDA cores: peak_fp32 x eff.gemm */
    double bytes;      /* bytes/s of device memory: mem_bw x eff.memory */
    double launch_s;   /* seconds per kernel launch */
    double graph_node_s; /* seconds per kernel node of a launched graph (TRI_GRAPH_NODE_S) */
    double call_s;     /* seconds per op call on top (0; the profiler's synchronisation after each op
                          when predicting what --profile measures: bench_cuda_train --sync-us) */
} tri_kernel_rates;

#define TRI_GRAPH_NODE_S 1e-6 /* an assumption (see the top comment) */

/* The rates of a preset, with its default fractions (call_s 0, graph_node_s TRI_GRAPH_NODE_S). */
tri_kernel_rates tri_kernel_rates_of(const tri_hardware *hw);

/* Seconds of one kernel; *bound (may be NULL) gets the term that set them. */
double tri_kernel_seconds(const tri_kernel_cost *k, const tri_kernel_rates *r, tri_bound *bound);

/* One op of the prediction: all its calls in the step. */
typedef struct tri_op_time {
    const char *op;
    int64_t calls, launches;
    double bytes, flops;     /* bytes moved; FLOPs on both kinds of cores */
    double seconds;          /* compute_s + memory_s + launch_s + calls x call_s */
    double compute_s;        /* of the kernels compute bound: their compute time */
    double memory_s;         /* of the kernels memory bound: their memory time */
    double launch_s;         /* launches x launch_s (graph nodes: x graph_node_s) + calls x call_s */
    tri_bound bound;         /* the largest of the three */
} tri_op_time;

#define TRI_OP_TIME_ROWS 64

/* A step's prediction: its ops by seconds, largest first. */
typedef struct tri_step_prediction {
    int n;
    tri_op_time row[TRI_OP_TIME_ROWS];
    double seconds;          /* the sum of the rows */
    int64_t graph_nodes;     /* kernels run as graph nodes (0 without graphs) */
} tri_step_prediction;

/* Adds up the n kernels of k (in launch order, as the cost device records them) into one row per op.
 * TRI_EINVAL for more than TRI_OP_TIME_ROWS ops. */
int tri_kernel_time_predict(const tri_kernel_cost *k, int64_t n, const tri_kernel_rates *r, tri_step_prediction *out);

/* The row of op `name`, or NULL. */
const tri_op_time *tri_step_prediction_find(const tri_step_prediction *p, const char *name);

/* Prints the profiler's columns (op, calls, ms, share; engine/device/device.h
 * tri_device_profile_report) and the model's (launches, GB moved, GFLOP, bound), then the total. */
void tri_step_prediction_report(const tri_step_prediction *p, FILE *f);

#ifdef __cplusplus
}
#endif

#endif
