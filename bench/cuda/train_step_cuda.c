/* bench/cuda/train_step_cuda.c - GPT-2 training speed on NVIDIA GPUs: ms/iter, tokens/s and MFU.
 *
 * One command on an H100 or H200 (or A100): `bash tools/trident.sh bench-cuda`, or
 * build/bin/bench_cuda_train [--model gpt2-xl] [--micro-batch-size 4] ..., and for several GPUs
 * `mpirun -np 8 build/bin/bench_cuda_train --tensor-model-parallel-size 8` (dp = ranks / tp).
 * For each model (GPT-2 124M, 355M, 774M, 1.5B by default) it trains on random tokens through the
 * same path as engine_train (GPT stage, trainer with clipping and AdamW, NCCL comm), runs warm-up
 * iterations, times the next ones with the device synchronised at both ends, and prints ms/iter,
 * tokens/s, achieved TFLOP/s (model FLOPs of Narayanan et al. 2021 eq. 3, without recomputation,
 * the figure engine_train prints) and MFU = achieved / (GPUs x the card's dense peak).
 * --fit-memory-gib G picks each model's micro-batch: the largest whose planned bytes per GPU (the
 * engine's own plan, equal to what it allocates) are at most G GiB, e.g. 72.5 for "the largest
 * micro-batch that fits an 80 GB card" (the partitioner's H100 preset less its 2 GiB reserve).
 *
 * Peaks (dense, no sparsity): the table of cuda/peaks.c (tri_cuda_peak_tflops), which engine_train
 * shares. By default Trident computes in fp32 (cuBLASLt with CUBLAS_COMPUTE_32F, no TF32),
 * and MFU is against the fp32 peak, with the bf16 peak's figure beside it; with --bf16 (bf16
 * weights and activations, bf16 cuBLASLt GEMMs accumulating in fp32, fp32 master weights; the
 * engine_train flag) MFU is against the bf16 peak. --peak-tflops overrides the table (other cards,
 * in the run's precision). Without a usable GPU it prints why and exits with status 1.
 *
 * --predict --hardware h200 needs no GPU: it runs one training step (after a warm-up one) of the same
 * session on the cost device (engine/device/device_cost.h), which records every kernel the CUDA
 * backend would launch, and prints the per-op table --profile prints on a GPU, predicted by the
 * kernel-time model (partitioner/kernel_time.h: a roofline on the partitioner's preset plus a launch
 * cost), with each op's launches, bytes, FLOPs and bound, and the predicted step. --op-set 2026-11-27
 * predicts the op set of the H200 profile of that date (docs/cuda-correctness.md, "Kernel-time
 * model"). One rank, tp 1. --enable-cuda-graph replays each micro-batch's forward and backward as a
 * CUDA graph (engine/train/step_graph.h) in the timed run, and with --predict prints the step with and
 * without it (graph nodes priced at an assumed 1 us instead of a 4 us launch). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/device_cuda.h"
#include "engine/comm/grid.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/train.h"
#include "models/model.h"
#include "models/session.h"
#include "partitioner/flops.h"
#include "partitioner/hardware.h"
#include "partitioner/kernel_time.h"
#include "tools/cli/backend.h"
#include "tools/cli/flags.h"
#include "tools/cli/layout_flags.h"
#include "tools/cli/predict.h"
#include "tools/cli/threads.h"
#include "tools/cli/validate.h"

#ifndef TRIDENT_SOURCE_DIR
#define TRIDENT_SOURCE_DIR "."
#endif


typedef struct bench {
    const char *model, *models_dir;
    int B, T, iters, warmup, tp;
    float peak_tflops;
    float fit_gib;             /* > 0: the micro-batch is the largest whose plan fits this many GiB */
    bool profile, bf16, simple;
    bool predict;              /* --predict: the kernel-time model on the CPU, no GPU */
    const char *hardware;      /* --hardware: its preset (partitioner/hardware.h) */
    const char *op_set;        /* --op-set: head or 2026-11-27 (engine/device/device_cost.h) */
    float sync_us;             /* --sync-us: microseconds per op call added (the profiler's sync) */
    const char *comm;
    const char *attention;     /* --attention-backend */
    bool cuda_graph;           /* --enable-cuda-graph (engine/train/step_graph.h) */
} bench;

/* What the random batches need: sequence length and the model's vocabulary. */
typedef struct fill_ctx {
    int T, vocab;
} fill_ctx;

typedef struct model_default {
    const char *name;
    int B; /* micro-batch that fits an 80 GB card in fp32 with AdamW at T = 1024 */
} model_default;

/* "all" is the four GPT-2 sizes; gpt2-8k (GPT-2 124M with 8192 positions, for long sequences) and the
 * Llamas (a Llama of GPT-2 124M's matmul volume, SmolLM-135M, Llama 3.2 1B) run only when named. */
static const model_default MODELS[] = {{"gpt2", 8}, {"gpt2-medium", 4}, {"gpt2-large", 4}, {"gpt2-xl", 2},
                                       {"gpt2-8k", 1}, {"llama-124m", 8}, {"smollm-135m", 8}, {"llama-3.2-1b", 2}};

static int fill_random(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const fill_ctx *f = ctx;
    for (int64_t i = 0; i < n * (f->T + 1); i++)
        w[i] = (int32_t)(tri_rng_uniform(42, (uint64_t)first, (uint64_t)i) * f->vocab);
    return TRI_OK;
}


/* The layout request of a run of model m at micro-batch B (--attention-backend auto: engine_train's
 * choice on a GPU, tools/cli/layout_flags.h). */
static tri_layout_request request(const bench *b, const tri_model *m, int B)
{
    tri_transformer dims = tri_model_dims(m);
    tri_attention_backend attention = strcmp(b->attention, "unfused") == 0 ? TRI_ATTENTION_UNFUSED
                                      : strcmp(b->attention, "flash") == 0 ? TRI_ATTENTION_FLASH
                                                                           : tri_cli_attention_auto(true, &dims);
    return (tri_layout_request){.num_gpus = b->tp, .tp = b->tp, .pp = 1, .micro_batch = B, .global_batch = B,
                                .seq_length = b->T, .precision = b->bf16 ? TRI_PRECISION_BF16 : TRI_PRECISION_FP32,
                                .attention = attention, .first_layers = -1, .last_layers = -1};
}

/* Whether micro-batch B is a valid layout whose planned bytes per GPU (tri_model_rank_plan, what the
 * run allocates; the partitioner's figure) are at most gib GiB; if not, why in why[n]. */
static bool plan_fits(const bench *b, const tri_model *m, int B, double gib, char *why, size_t n)
{
    tri_model_run run = {.seed = 1};
    bool fits = tri_cli_model_layout(m, request(b, m, B), &run.layout) == TRI_OK &&
                tri_cli_check_memory(m, &run, gib) == TRI_OK;
    if (!fits)
        snprintf(why, n, "%s", tri_error_message());
    tri_error_clear();
    return fits;
}

/* The largest micro-batch (at most 4096) that plan_fits b->fit_gib GiB per GPU: doubling, then
 * bisection (the plan grows with B); why the next one does not, in why[n]. TRI_EINVAL when not
 * even 1 fits. */
static int fit_micro_batch(const bench *b, const tri_model *m, int *B, char *why, size_t n)
{
    if (!plan_fits(b, m, 1, b->fit_gib, why, n))
        return TRI_ERR(TRI_EINVAL, "--fit-memory-gib %g: not even micro-batch 1 fits: %s", b->fit_gib, why);
    int lo = 1, hi = 2; /* lo fits; hi is the smallest candidate above that may not */
    snprintf(why, n, "the bench's limit of 4096");
    while (hi <= 4096 && plan_fits(b, m, hi, b->fit_gib, why, n)) {
        lo = hi;
        hi *= 2;
    }
    char mid_why[1024];
    while (hi <= 4096 && hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (plan_fits(b, m, mid, b->fit_gib, mid_why, sizeof mid_why)) {
            lo = mid;
        } else {
            hi = mid;
            snprintf(why, n, "%s", mid_why);
        }
    }
    *B = lo;
    return TRI_OK;
}

/* Trains `model` on dev/world and prints one result line (rank 0). */
static int run_model(const bench *b, const char *model, int B, tri_device *dev, tri_comm *world, const char *gpu)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.json", b->models_dir, model);
    tri_model m; /* any family (models/model.h) */
    int rc = tri_model_load(&m, path);
    if (rc)
        return rc;
    tri_transformer dims = tri_model_dims(&m);
    fill_ctx fc = {.T = b->T, .vocab = tri_model_vocab_size(&m)};
    if (b->T > dims.n_positions) {
        tri_model_free(&m);
        return TRI_ERR(TRI_EINVAL, "--seq-length %d exceeds %s's %lld positions", b->T, model,
                       (long long)dims.n_positions);
    }
    tri_session ss;
    tri_session_options o = {.run = {.seed = 1}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
                             .cuda_graph = b->cuda_graph};
    if (b->fit_gib > 0) {
        char why[1024];
        rc = fit_micro_batch(b, &m, &B, why, sizeof why);
        if (!rc && world->rank == 0)
            printf("%s: micro-batch %d, the largest whose planned memory fits %g GiB per GPU (%d: %s)\n", model,
                   B, (double)b->fit_gib, B + 1, why);
    }
    if (!rc) rc = tri_cli_model_layout(&m, request(b, &m, B), &o.run.layout);
    if (!rc) rc = tri_session_create(&ss, world, dev, &m, &o);
    if (rc) {
        tri_model_free(&m);
        return rc;
    }
    tri_grid grid = ss.grid;
    tri_trainer *tr = &ss.trainer;
    tri_batch_source src = {.ctx = &fc, .fill = fill_random};
    tri_step_result res;
    for (int it = 0; it < b->warmup && !rc; it++)
        rc = tri_trainer_step(tr, &src, it, 1e-4f, &res);
    if (!rc && b->profile && grid.world_rank == 0)
        rc = tri_device_profile_enable(dev);
    if (!rc) rc = tri_device_sync(dev);
    double t0 = tri_now_s();
    for (int it = 0; it < b->iters && !rc; it++)
        rc = tri_trainer_step(tr, &src, b->warmup + it, 1e-4f, &res);
    if (!rc) rc = tri_device_sync(dev);
    double dt = (tri_now_s() - t0) / b->iters;
    if (!rc && grid.world_rank == 0) {
        int gpus = world->size;
        double tokens = (double)B * b->T * grid.dp;
        double achieved = tri_iteration_flops(&dims, (int64_t)B * grid.dp, b->T, false) / dt / 1e12;
        double table = 0.0, bf16 = 0.0;
        tri_cuda_peak_tflops(gpu, b->bf16, &table);
        tri_cuda_peak_tflops(gpu, true, &bf16);
        double own = b->peak_tflops > 0 ? b->peak_tflops : table;
        const char *prec = b->bf16 ? "bf16" : "fp32";
        printf("%-12s %6.0fM  %s B %2d x T %4d x dp %d | %9.1f ms/iter | %9.0f tok/s | %7.2f TFLOP/s | ", model,
               (double)m.family->num_params(m.cfg) / 1e6, prec, B, b->T, grid.dp, dt * 1e3, tokens / dt, achieved);
        if (own > 0)
            printf("MFU %5.1f%% of %s peak", 100.0 * achieved / (gpus * own), prec);
        else
            printf("MFU n/a (unknown card: pass --peak-tflops)");
        if (!b->bf16 && bf16 > 0 && b->peak_tflops <= 0)
            printf(" (%4.1f%% of bf16 peak)", 100.0 * achieved / (gpus * bf16));
        printf(" | loss %.3f\n", res.loss);
        if (b->profile)
            tri_device_profile_report(dev, stdout);
        fflush(stdout);
    }
    if (dev->profile) { /* the next model starts unprofiled */
        free(dev->profile);
        dev->profile = NULL;
    }
    tri_session_destroy(&ss);
    tri_model_free(&m);
    return rc;
}

/* Predicts one training step of `model` on b->hardware (no GPU) and prints the per-op table and the
 * step: ms/iter, tokens/s, MFU against the preset's bf16 or fp32 peak. */
static int predict_model(const bench *b, const char *model, int B, tri_comm *world)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.json", b->models_dir, model);
    const tri_hardware *hw = tri_hardware_find(b->hardware);
    if (!hw)
        return TRI_ERR(TRI_EINVAL, "--hardware %s: expected one of %s", b->hardware, tri_hardware_names());
    tri_model m;
    int rc = tri_model_load(&m, path);
    if (rc)
        return rc;
    tri_transformer dims = tri_model_dims(&m);
    tri_step_prediction p;
    if (b->T > dims.n_positions)
        rc = TRI_ERR(TRI_EINVAL, "--seq-length %d exceeds %s's %lld positions", b->T, model,
                     (long long)dims.n_positions);
    tri_layout_request req = request(b, &m, B);
    bool fused = strcmp(b->op_set, "head") == 0;
    tri_step_prediction eager; /* --enable-cuda-graph: the same step without the graph, for comparison */
    if (!rc && b->cuda_graph) rc = tri_cli_predict_step(world, &m, req, fused, false, hw, b->sync_us * 1e-6, &eager);
    if (!rc) rc = tri_cli_predict_step(world, &m, req, fused, b->cuda_graph, hw, b->sync_us * 1e-6, &p);
    if (!rc) {
        double dt = p.seconds, peak = b->bf16 ? hw->peak_bf16 : hw->peak_fp32;
        double flops = tri_iteration_flops(&dims, B, b->T, false);
        printf("%s predicted on %s (%s attention, %s, op set %s; roofline at %.0f%% of the dense peak and %.0f%% "
               "of %.2f TB/s, %.1f us a launch, %.1f us a call):\n",
               model, hw->name, req.attention == TRI_ATTENTION_FLASH ? "flash" : "unfused", b->bf16 ? "bf16" : "fp32",
               b->op_set, 100 * hw->eff.gemm,
               100 * hw->eff.memory, hw->mem_bw / 1e12, hw->launch_s * 1e6, (double)b->sync_us);
        tri_step_prediction_report(&p, stdout);
        if (b->cuda_graph) {
            const tri_op_time *gl = tri_step_prediction_find(&p, "graph_launch");
            int64_t kernels = 0;
            for (int i = 0; i < eager.n; i++)
                kernels += eager.row[i].launches;
            printf("--enable-cuda-graph: %.3f ms/iter without the graph, %.3f ms with it (%+.3f ms): %lld of the "
                   "step's %lld kernels run as graph nodes (%.1f us each, an assumption: partitioner/kernel_time.h) "
                   "in %lld graph launches (%.1f us each) instead of one launch each\n",
                   eager.seconds * 1e3, p.seconds * 1e3, (p.seconds - eager.seconds) * 1e3, (long long)p.graph_nodes,
                   (long long)kernels, TRI_GRAPH_NODE_S * 1e6, (long long)(gl ? gl->launches : 0), hw->launch_s * 1e6);
        }
        printf("%-12s %6.0fM  %s B %2d x T %4d | %9.1f ms/iter predicted | %9.0f tok/s | %7.2f TFLOP/s | MFU %5.1f%% "
               "of %s peak\n",
               model, (double)m.family->num_params(m.cfg) / 1e6, b->bf16 ? "bf16" : "fp32", B, b->T, dt * 1e3,
               (double)B * b->T / dt, flops / dt / 1e12, 100.0 * flops / dt / peak, b->bf16 ? "bf16" : "fp32");
        fflush(stdout);
    }
    tri_model_free(&m);
    return rc;
}

/* --predict: each model's step on the cost device, one rank, no GPU. */
static int predict_all(const bench *b, int size)
{
    if (size != 1 || b->tp != 1)
        return TRI_ERR(TRI_EINVAL, "--predict models one GPU: run it as one process with tp 1");
    if (b->fit_gib > 0)
        return TRI_ERR(TRI_EINVAL, "--predict takes --micro-batch-size, not --fit-memory-gib");
    MPI_Comm comm_world = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    int rc = tri_comm_mpi_create(&world, &comm_world);
    for (size_t i = 0; i < sizeof MODELS / sizeof *MODELS && !rc; i++) {
        if (strcmp(b->model, "all") != 0 ? strcmp(b->model, MODELS[i].name) != 0
                                         : strncmp(MODELS[i].name, "gpt2", 4) != 0 ||
                                               strcmp(MODELS[i].name, "gpt2-8k") == 0)
            continue;
        rc = predict_model(b, MODELS[i].name, b->B ? b->B : MODELS[i].B, world);
        if (rc)
            tri_error_context(rc, "%s", MODELS[i].name);
    }
    tri_comm_destroy(world);
    return rc;
}

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    MPI_Init(&argc, &argv);
    bench b = {.model = "all", .models_dir = TRIDENT_SOURCE_DIR "/models", .B = 0, .T = 1024, .iters = 10,
               .warmup = 3, .tp = 1, .comm = "auto", .attention = "auto", .hardware = "h200", .op_set = "head"};
    tri_flag flags[] = {
        {"model", TRI_FLAG_CHOICE, &b.model, "which model (all: the four GPT-2 sizes)", 0, 0,
         "all|gpt2|gpt2-medium|gpt2-large|gpt2-xl|gpt2-8k|llama-124m|smollm-135m|llama-3.2-1b", false},
        {"models-dir", TRI_FLAG_STRING, &b.models_dir, "folder of the model configs", 0, 0, NULL, false},
        {"micro-batch-size", TRI_FLAG_INT, &b.B, "sequences per GPU (0: 8, 4, 4, 2 for 124M..1.5B)", 0, 1 << 16, NULL, false},
        {"fit-memory-gib", TRI_FLAG_FLOAT, &b.fit_gib, "instead of --micro-batch-size: the largest micro-batch whose planned memory per GPU (the engine's plan, as the partitioner shows it) fits this many GiB (72.5: an 80 GB card less the partitioner's 2 GiB reserve)", 0, 1e6, NULL, false},
        {"seq-length", TRI_FLAG_INT, &b.T, "sequence length", 1, 1 << 16, NULL, false},
        {"iters", TRI_FLAG_INT, &b.iters, "timed iterations", 1, 1 << 20, NULL, false},
        {"warmup", TRI_FLAG_INT, &b.warmup, "untimed iterations first", 0, 1 << 20, NULL, false},
        {"tensor-model-parallel-size", TRI_FLAG_INT, &b.tp, "tensor-parallel size (ranks / tp = dp)", 1, 4096, NULL, false},
        {"peak-tflops", TRI_FLAG_FLOAT, &b.peak_tflops, "dense peak per GPU in the run's precision for MFU (0: the built-in table)", 0, 1e6, NULL, false},
        {"bf16", TRI_FLAG_BOOL, &b.bf16, "bf16 mixed precision (engine_train --bf16); MFU against the bf16 peak", 0, 0, NULL, false},
        {"profile", TRI_FLAG_BOOL, &b.profile, "print time per device op of the timed iterations", 0, 0, NULL, false},
        {"comm", TRI_FLAG_CHOICE, &b.comm, "how ranks talk: NCCL, MPI staged through host memory (ranks sharing a GPU), or auto", 0, 0, "auto|nccl|mpi", false},
        {"attention-backend", TRI_FLAG_CHOICE, &b.attention, "attention core: flash (fused), unfused (the T x T softmax through cuBLASLt) or auto (engine_train's default on a GPU: unfused, the path measured fastest there, flash for the Llamas)", 0, 0, "auto|flash|unfused", false},
        {"simple-kernels", TRI_FLAG_BOOL, &b.simple, "run the simple twin kernels (before/after comparisons)", 0, 0, NULL, false},
        {"predict", TRI_FLAG_BOOL, &b.predict, "no GPU: predict the per-op table of one step with the kernel-time model (a roofline on --hardware plus launch costs)", 0, 0, NULL, false},
        {"hardware", TRI_FLAG_CHOICE, &b.hardware, "--predict: the GPU preset (partitioner/hardware.c)", 0, 0, "h100-sxm|h200|a100-80gb", false},
        {"sync-us", TRI_FLAG_FLOAT, &b.sync_us, "--predict: microseconds added per op call, to predict what --profile measures (it synchronises after every op; 0: the unprofiled step)", 0, 1e6, NULL, false},
        {"enable-cuda-graph", TRI_FLAG_BOOL, &b.cuda_graph, "engine_train's --enable-cuda-graph: each micro-batch's forward and backward replayed as a CUDA graph from the second iteration on (tp 1, one rank); with --predict the step is predicted with and without it (a graph node assumed at 1 us against a launch's 4 us)", 0, 0, NULL, false},
        {"op-set", TRI_FLAG_CHOICE, &b.op_set, "--predict: the ops of HEAD's CUDA backend, or those of the 2026-11-27 H200 profile (no multi-tensor norm and AdamW, no fused residual norm, the classifier in four pieces)", 0, 0, "head|2026-11-27", false},
    };
    int nf = sizeof flags / sizeof *flags, rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc && rank == 0)
            fprintf(stderr, "bench_cuda_train: %s\n", tri_error_message());
        if (rank == 0)
            tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_cuda_train",
                            "Times GPT-2 training on NVIDIA GPUs: ms/iter, tokens/s, MFU against the card's dense peak.");
        MPI_Finalize();
        return rc ? 2 : 0;
    }
    if (b.cuda_graph && b.profile) {
        fprintf(stderr, "bench_cuda_train: --enable-cuda-graph with --profile: profiling waits for the device after "
                "every op, which a capture forbids (profile without the graph)\n");
        MPI_Finalize();
        return 2;
    }
    if (b.predict) {
        rc = predict_all(&b, size);
        if (rc)
            fprintf(stderr, "bench_cuda_train: error: %s\n", tri_error_message());
        MPI_Finalize();
        return rc ? 1 : 0;
    }
    tri_device *dev = NULL;
    tri_comm *world = NULL;
    const char *why = "";
    if (!tri_cuda_available(&why)) {
        if (rank == 0)
            fprintf(stderr, "bench_cuda_train: no usable CUDA device: %s\n", why);
        MPI_Finalize();
        return 1;
    }
    /* one GPU per rank of a node (ranks beyond the node's GPUs need CUDA_VISIBLE_DEVICES per rank) */
    int ordinal = rank % tri_cuda_device_count();
    tri_cuda_info info;
    rc = tri_cuda_device_info(ordinal, &info);
    if (!rc) rc = tri_device_cuda_create(&dev, ordinal);
    if (!rc && b.simple) rc = tri_cuda_set_simple_kernels(dev, true);
    const char *gpu = info.name;
    if (!rc) rc = tri_cli_device_world("cuda", b.comm, dev, 600.0 /* NCCL's and PyTorch's watchdog default */, &world);
    if (!rc && rank == 0)
        printf("bench_cuda_train: %d x %s (sm_%d%d, %d SMs, %.0f GiB), %s, tp %d, "
               "%s attention, %d timed iterations after %d warm-up\n", size, gpu, info.major, info.minor, info.sm_count,
               (double)info.memory_bytes / 1073741824.0,
               b.bf16 ? (b.simple ? "bf16 (bf16 cuBLASLt GEMMs accumulating in fp32, fp32 master weights), simple kernels"
                                  : "bf16 (bf16 cuBLASLt GEMMs accumulating in fp32, fp32 master weights)")
                      : (b.simple ? "fp32 (cuBLASLt COMPUTE_32F), simple kernels" : "fp32 (cuBLASLt COMPUTE_32F)"),
               b.tp, b.attention, b.iters, b.warmup);
    for (size_t i = 0; i < sizeof MODELS / sizeof *MODELS && !rc; i++) {
        if (strcmp(b.model, "all") != 0 ? strcmp(b.model, MODELS[i].name) != 0 : strncmp(MODELS[i].name, "gpt2", 4) != 0 ||
                                                                         strcmp(MODELS[i].name, "gpt2-8k") == 0)
            continue;
        rc = run_model(&b, MODELS[i].name, b.B ? b.B : MODELS[i].B, dev, world, gpu);
        if (rc)
            tri_error_context(rc, "%s", MODELS[i].name);
    }
    if (rc) {
        fprintf(stderr, "bench_cuda_train: error: %s%s\n", tri_error_message(),
                rc == TRI_ENOMEM ? " (try a smaller --micro-batch-size)" : "");
        if (world)
            tri_comm_abort(world, 1);
    }
    tri_comm_destroy(world);
    tri_device_destroy(dev);
    MPI_Finalize();
    return rc ? 1 : 0;
}
