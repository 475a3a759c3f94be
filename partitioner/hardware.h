/* partitioner/hardware.h - devices and clusters the partitioner plans for, and how much of their
 * peaks a training run achieves.
 *
 * A preset holds the vendor's dense peaks and sizes (each value's source is in hardware.c) and the
 * achievable fractions the time model multiplies them by:
 *   gemm    the model's matmul FLOPs run at peak x gemm. GPUs: the largest fraction a bf16 matmul
 *           reaches on the device (Bekman's "maximum achievable matmul FLOPS", MAMF) times one
 *           factor for real transformer shapes and kernels, calibrated ONCE on a published run
 *           (Korthikanti et al. 2022, GPT-3 175B on 64 A100s; docs/partitioner-validation.md) and
 *           held fixed for every preset and run. CPU: calibrated on an engine_train run here.
 *   memory  memory-bound elementwise work (layernorm, GELU, softmax, residual adds, the optimizer)
 *           runs at HBM bandwidth x memory.
 *   intra   collectives inside a node (NVLink) reach link bandwidth x intra (NCCL's ring bus
 *   inter   bandwidth), across nodes (InfiniBand) x inter.
 *   tp_exposed, dp_exposed: the share of tensor- / data-parallel communication that is not hidden
 *           behind compute (1 = none overlapped, Megatron-LM's default without
 *           --overlap-grad-reduce / --tp-comm-overlap).
 * A user replaces gemm with one measured on their own run (partitioner --calibrate
 * run/metrics.jsonl) or sets any fraction by flag. */
#ifndef TRIDENT_PARTITIONER_HARDWARE_H
#define TRIDENT_PARTITIONER_HARDWARE_H

#include <stdbool.h>

#include "engine/train/grad_compression.h"
#include "partitioner/train_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_efficiency {
    double gemm;        /* fraction of the dense peak the model's FLOPs achieve */
    double memory;      /* fraction of memory bandwidth memory-bound work achieves */
    double intra;       /* fraction of intra-node link bandwidth a collective achieves */
    double inter;       /* fraction of inter-node bandwidth */
    double tp_exposed;  /* share of TP communication on the critical path */
    double dp_exposed;  /* share of data-parallel communication on the critical path */
} tri_efficiency;

typedef struct tri_hardware {
    const char *name;          /* "h100-sxm", "h200", "a100-80gb", "cpu" */
    const char *description;
    double peak_bf16;          /* dense FLOP/s per device (cpu: per core; bf16 computed in fp32 -> the
                                  fp32 peak) */
    double peak_fp32;          /* FLOP/s per device (cpu: per core) */
    double memory_bytes;       /* device memory (cpu: per node, shared by its ranks) */
    double reserve_bytes;      /* of it, not available to the plan (runtime, comm libraries) */
    double mem_bw;             /* bytes/s of device memory (cpu: per node) */
    double intra_bw;           /* bytes/s per device and direction inside a node */
    double inter_bw;           /* bytes/s per device and direction between nodes */
    int gpus_per_node;         /* the usual node (cpu: ranks per node default) */
    bool cpu;                  /* ranks of a node share its cores, memory and bandwidth */
    tri_efficiency eff;        /* default achievable fractions */
    double mamf;               /* cpu: 0; GPUs: MAMF / bf16 peak (the gemm fraction's first factor) */
    double launch_s;           /* seconds one kernel launch adds (the kernel-time model,
                                  partitioner/kernel_time.h; cpu: 0, an op is a function call) */
} tri_hardware;

/* The factor for transformer shapes and kernels on top of MAMF (see the top comment), re-derived by
 * tests/test_partitioner_published.c. It was 0.844 while bf16 activations (which set the time
 * model's elementwise traffic) were Korthikanti et al.'s Megatron-LM bytes, dropout included; 0.820
 * since they are the engine's own bf16 buffers (no dropout: 44% less elementwise traffic on the
 * 175B run, so the same measured 13.75 s leaves a lower matmul fraction). */
#define TRI_GEMM_TRANSFORMER_FACTOR 0.820

/* The preset called name, or NULL. */
const tri_hardware *tri_hardware_find(const char *name);

/* "h100-sxm|h200|a100-80gb|cpu" (static). */
const char *tri_hardware_names(void);

/* How data parallelism communicates (partitioner/time_model.h); all zero: a full-precision reduction
 * every iteration. */
typedef struct tri_dp_method {
    tri_compression compression; /* engine/train/grad_compression.h; kind none (0): fp32 */
    int local_sgd_steps;         /* H > 1: local SGD / DiLoCo, one synchronisation every H iterations
                                    (engine_train --local-sgd-steps); 0 or 1: every iteration */
} tri_dp_method;

/* A cluster: num_gpus devices of one preset, gpus_per_node to a node (cpu: ranks to a node sharing
 * cpu_cores cores), the fractions in use, and how its data parallelism communicates. Zero
 * initialisation of the fields after eff keeps the preset's links, the overlap simulation and a
 * plain reduction. */
typedef struct tri_cluster {
    const tri_hardware *hw;
    int num_gpus, gpus_per_node;
    int cpu_cores;             /* cpu: cores of a node */
    tri_efficiency eff;
    double inter_bw;           /* > 0: bytes/s per device and direction between nodes, replacing the
                                  preset's (partitioner --inter-node-bandwidth) */
    bool dp_exposed_given;     /* eff.dp_exposed was set by the user (--dp-comm-exposed): it replaces
                                  the overlap simulation (time_model.h) */
    tri_dp_method dp;
} tri_cluster;

/* Bytes/s per device and direction between nodes: c->inter_bw when set, else the preset's. */
double tri_cluster_inter_bw(const tri_cluster *c);

/* FLOP/s one rank can reach at 100%: the device's dense peak for precision p (cpu: the node's cores
 * shared by its ranks). */
double tri_cluster_peak(const tri_cluster *c, tri_precision p);

/* Bytes a rank may plan for: device memory minus the reserve (cpu: the node's share per rank). */
double tri_cluster_usable_bytes(const tri_cluster *c);

/* Memory bandwidth of one rank, bytes/s. */
double tri_cluster_mem_bw(const tri_cluster *c);

/* Ring time, in seconds, of one collective of `bytes` (engine/comm/comm.h's payload: the buffer of an
 * all-reduce, the full buffer of a reduce-scatter / all-gather, the message of a p2p) over a group
 * of n ranks, at link bandwidth bw x fraction: all-reduce 2 (n-1)/n bytes / bw, reduce-scatter and
 * all-gather (n-1)/n bytes / bw, p2p bytes / bw (Thakur et al. 2005; NCCL's bus bandwidth). */
double tri_collective_seconds(int kind, double bytes, int n, double bw);

#ifdef __cplusplus
}
#endif

#endif
