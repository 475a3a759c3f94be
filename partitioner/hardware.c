/* partitioner/hardware.c - device presets with their sources, and cluster arithmetic (see
 * hardware.h).
 *
 * Sources of the preset values:
 *  [H100]  NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOP/s dense BF16 (1979 with
 *          sparsity), 67 TFLOP/s FP32, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s (both directions
 *          together, so 450 GB/s each way). DGX H100: one 400 Gb/s ConnectX-7 (NDR InfiniBand) per
 *          GPU, 50 GB/s each way.
 *  [H200]  NVIDIA H200 datasheet: H100's compute and NVLink, 141 GB HBM3e at 4.8 TB/s; DGX H200
 *          keeps 400 Gb/s per GPU.
 *  [A100]  NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOP/s dense BF16, 19.5 FP32, 80 GB HBM2e at
 *          2.039 TB/s, NVLink 600 GB/s (300 each way). DGX A100: one 200 Gb/s HDR InfiniBand
 *          adapter per GPU, 25 GB/s each way.
 *  [CPU]   ../shared/NOTES.md, measured on this machine (AMD Zen 4, 2 vCPUs, 24 GiB): fp32 FMA
 *          peak ~115 GFLOP/s per core; a fused AdamW streams at ~53 GB/s.
 *  [MAMF]  S. Bekman, Machine Learning Engineering, compute/accelerator "Maximum Achievable Matmul
 *          FLOPS" (v2 table, torch 2.6-2.7): A100 SXM 271.2 of 312 TFLOP/s (86.9%), H100 SXM
 *          794.5 of 989 (80.3%); H200 taken as H100 (same tensor cores and clocks).
 *  [NCCL]  NVIDIA/nccl-tests issue #149: all_reduce bus bandwidth ~200 GB/s on 8 A100-SXM4-80GB over
 *          NVLink (300 GB/s each way): 0.67. Issue #119: 84.8 GB/s average of 100 GB/s over HDR
 *          InfiniBand across 3 DGX-class A100 nodes: 0.85. The same fractions are assumed for
 *          H100 / H200 (NVLink 4, NDR).
 *  [LAUNCH] 4 us per kernel launch on every GPU preset: an assumption, not measured here, inside the
 *          2-5 us commonly reported for a cudaLaunchKernel of a short kernel on one stream (host
 *          driver call, command fetch, block scheduling; NVIDIA's CUDA Graphs material puts the
 *          saving of a graph at a few us per kernel). It matters only for ops of many small
 *          launches (docs/cuda-correctness.md, "Kernel-time model").
 *  memory fraction 0.8 on GPUs is an assumption (no source; the elementwise work is 5-10% of a
 *  large model's step, so it moves predictions by about 1%). */
#include "partitioner/hardware.h"

#include <stddef.h>
#include <string.h>

#include "engine/comm/comm.h"

#define GB 1e9
#define GIB 1073741824.0

static const tri_hardware presets[] = {
    {.name = "h100-sxm", .description = "NVIDIA H100 SXM5 80GB (DGX H100: NVLink 4, NDR 400 Gb/s per GPU)",
     .peak_bf16 = 989e12, .peak_fp32 = 67e12, .memory_bytes = 80 * GB, .reserve_bytes = 2 * GIB,
     .mem_bw = 3.35e12, .intra_bw = 450 * GB, .inter_bw = 50 * GB, .gpus_per_node = 8,
     .mamf = 0.803, .launch_s = 4e-6,
     .eff = {.gemm = 0.803 * TRI_GEMM_TRANSFORMER_FACTOR, .memory = 0.8, .intra = 0.67, .inter = 0.85,
             .tp_exposed = 1.0, .dp_exposed = 1.0}},
    {.name = "h200", .description = "NVIDIA H200 SXM 141GB (DGX H200: NVLink 4, NDR 400 Gb/s per GPU)",
     .peak_bf16 = 989e12, .peak_fp32 = 67e12, .memory_bytes = 141 * GB, .reserve_bytes = 2 * GIB,
     .mem_bw = 4.8e12, .intra_bw = 450 * GB, .inter_bw = 50 * GB, .gpus_per_node = 8,
     .mamf = 0.803, .launch_s = 4e-6,
     .eff = {.gemm = 0.803 * TRI_GEMM_TRANSFORMER_FACTOR, .memory = 0.8, .intra = 0.67, .inter = 0.85,
             .tp_exposed = 1.0, .dp_exposed = 1.0}},
    {.name = "a100-80gb", .description = "NVIDIA A100 SXM4 80GB (DGX A100: NVLink 3, HDR 200 Gb/s per GPU)",
     .peak_bf16 = 312e12, .peak_fp32 = 19.5e12, .memory_bytes = 80 * GB, .reserve_bytes = 2 * GIB,
     .mem_bw = 2.039e12, .intra_bw = 300 * GB, .inter_bw = 25 * GB, .gpus_per_node = 8,
     .mamf = 0.869, .launch_s = 4e-6,
     .eff = {.gemm = 0.869 * TRI_GEMM_TRANSFORMER_FACTOR, .memory = 0.8, .intra = 0.67, .inter = 0.85,
             .tp_exposed = 1.0, .dp_exposed = 1.0}},
    /* This machine. Ranks are MPI processes (or threads) of one node sharing its cores; a node's
     * "links" are shared memory (intra, assumed 10 GB/s through Open MPI's vader copies) and, for
     * several machines, 100 Gb/s Ethernet (inter, assumed). gemm 0.506: `partitioner --calibrate`
     * on the README's default engine_train run (tp 2 x pp 2, 4 single-thread ranks on 2 cores,
     * 1000 iterations, median 0.502 s; docs/partitioner-validation.md). The cores are shared with
     * other work here: the same run's median has ranged 0.42-0.69 s. bf16 mixed precision runs
     * on the CPU backend by computing in fp32 (bf16 storage widened around each op, engine/device/device.h
     * "Precision"), so its peak is the fp32 one. */
    {.name = "cpu", .description = "this machine's CPU (fp32, OpenBLAS; per-core peak from NOTES.md)",
     .peak_bf16 = 115e9, .peak_fp32 = 115e9, .memory_bytes = 24 * GIB, .reserve_bytes = 1 * GIB,
     .mem_bw = 53 * GB, .intra_bw = 10 * GB, .inter_bw = 12.5 * GB, .gpus_per_node = 2, .cpu = true,
     .mamf = 0,
     .eff = {.gemm = 0.506, .memory = 1.0, .intra = 1.0, .inter = 1.0, .tp_exposed = 1.0, .dp_exposed = 1.0}},
};

const tri_hardware *tri_hardware_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof presets / sizeof *presets; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

const char *tri_hardware_names(void)
{
    return "h100-sxm|h200|a100-80gb|cpu";
}

/* Ranks sharing one node's cores, memory and memory bandwidth (cpu). */
static double cpu_share(const tri_cluster *c)
{
    int ranks = c->gpus_per_node < c->num_gpus ? c->gpus_per_node : c->num_gpus;
    return ranks > 0 ? 1.0 / ranks : 1.0;
}

double tri_cluster_peak(const tri_cluster *c, tri_precision p)
{
    double peak = p == TRI_PRECISION_BF16 ? c->hw->peak_bf16 : c->hw->peak_fp32;
    if (c->hw->cpu)
        return peak * (c->cpu_cores > 0 ? c->cpu_cores : 1) * cpu_share(c);
    return peak;
}

double tri_cluster_usable_bytes(const tri_cluster *c)
{
    double b = c->hw->memory_bytes - c->hw->reserve_bytes;
    return c->hw->cpu ? b * cpu_share(c) : b;
}

double tri_cluster_mem_bw(const tri_cluster *c)
{
    return c->hw->cpu ? c->hw->mem_bw * cpu_share(c) : c->hw->mem_bw;
}

double tri_collective_seconds(int kind, double bytes, int n, double bw)
{
    if (bytes <= 0 || bw <= 0)
        return 0.0;
    if (kind == TRI_COMM_P2P)
        return bytes / bw;
    if (n <= 1)
        return 0.0;
    double share = (double)(n - 1) / n;
    return (kind == TRI_COMM_ALL_REDUCE ? 2.0 * share : share) * bytes / bw;
}



double tri_cluster_inter_bw(const tri_cluster *c)
{
    return c->inter_bw > 0 ? c->inter_bw : c->hw->inter_bw;
}
