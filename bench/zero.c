/* bench/zero.c - ZeRO: per-rank model-state memory by stage and data-parallel size, and step time
 * with and without overlapped communication.
 *
 * Part 1 (one process): for ZeRO stages 0-3 and dp = 1, 2, 4, 8 on one model (default GPT-2 124M,
 * tp = pp = 1), data-parallel rank 0's bytes by category, from the plan the session allocates
 * (tri_model_rank_plan), beside the ZeRO paper's model-state formulas (Rajbhandari et al. 2020 §5.1
 * and Figure 1) for fp32 training - 4 bytes of parameters, 4 of gradients and K = 8 of AdamW state
 * per parameter (the paper's mixed precision has 2 + 2 + 12):
 *     baseline 16 Psi;  P_os 8 Psi + 8 Psi / Nd;  P_os+g 4 Psi + 12 Psi / Nd;  P_os+g+p 16 Psi / Nd.
 * The planned model state also holds what the formulas leave out: the padding of every unit to dp
 * slices, and the whole-unit buffers a rank needs while it uses a unit (stage 2 gradient buckets;
 * stage 3 gathered parameters too) - the ratio column shows their weight. Where the whole job fits
 * in --memory-budget-gb, the layout then trains one real step on dp thread ranks, and rank 0's
 * measured device peak is printed beside the planned total.
 *
 * Part 2 (--step-time, under `mpirun -np DP`): milliseconds per training step of every ZeRO stage,
 * with and without --overlap-grad-reduce / --overlap-param-gather, over MPI (whose non-blocking
 * collectives really are in flight while ranks compute; on thread ranks they complete at their
 * start). The ratio is the step time without overlap over with. Ranks outnumbering cores
 * time-share them, which the printed core count shows. Not a test: no thresholds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/comm/comm.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/arena.h"
#include "engine/train/train.h"
#include "models/config.h"
#include "models/gpt.h"
#include "models/session.h"
#include "tools/cli/backend.h"
#include "tools/cli/flags.h"
#include "tools/cli/layout_flags.h"
#include "tools/cli/threads.h"

#define MIB (1024.0 * 1024.0)

typedef struct bench {
    const char *config;
    int B, T, iters, n_micro, only_stage;
    float budget_gb;
    bool step_time;
    tri_gpt_config cfg;
    tri_model model;            /* the session's handle on cfg (models/model.h) */
    /* the run in progress */
    int dp, zero;
    bool overlap;
    size_t peak;       /* rank 0's measured device peak */
    double seconds;    /* slowest rank's time of the timed steps */
} bench;

static int fill_random(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const bench *b = ctx;
    for (int64_t i = 0; i < n * (b->T + 1); i++)
        w[i] = (int32_t)(tri_rng_uniform(5, (uint64_t)first, (uint64_t)i) * b->cfg.vocab_size);
    return TRI_OK;
}

/* The session of data-parallel size dp (one stage, tp 1) at the bench's ZeRO stage and overlap. */
static int session_options(const bench *b, int dp, tri_session_options *o)
{
    *o = (tri_session_options){.run = {.seed = 1}, .clip_grad = 1.0f,
                               .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
    tri_layout_request req = {.num_gpus = dp, .tp = 1, .pp = 1, .micro_batch = b->B,
                              .global_batch = (int64_t)b->B * b->n_micro * dp, .seq_length = b->T,
                              .zero_stage = b->zero, .overlap_grad_reduce = b->overlap,
                              .overlap_param_gather = b->overlap, .first_layers = -1, .last_layers = -1};
    return tri_cli_model_layout(&b->model, req, &o->run.layout);
}

/* One rank: a session, one warm-up step, then `iters` timed steps (0: the warm-up only). */
static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    bench *b = arg;
    tri_device *dev = NULL;
    tri_session ss;
    tri_session_options o;
    int rc = session_options(b, size, &o);
    if (!rc) rc = tri_cli_device_create("cpu", 1, &dev);
    if (!rc) rc = tri_session_create(&ss, world, dev, &b->model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_batch_source src = {.ctx = b, .fill = fill_random};
    tri_step_result res;
    rc = tri_trainer_step(&ss.trainer, &src, 0, 1e-4f, &res);
    if (!rc) rc = tri_comm_barrier(world);
    double t0 = tri_now_s();
    for (int it = 1; it <= b->iters && !rc; it++)
        rc = tri_trainer_step(&ss.trainer, &src, it, 1e-4f, &res);
    double seconds = tri_now_s() - t0;
    if (!rc && rank == 0)
        b->peak = dev->peak_bytes;
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    float slowest = (float)seconds;
    if (!rc) rc = tri_comm_all_reduce(world, tri_tensor_1d(&slowest, TRI_F32, 1), TRI_REDUCE_MAX);
    if (!rc && rank == 0)
        b->seconds = slowest;
    return rc;
}

/* The ZeRO paper's model-state bytes per rank, fp32 (4 + 4 + 8 bytes per parameter). */
static double paper_bytes(int stage, double psi, int nd)
{
    switch (stage) {
    case 0: return 16.0 * psi;
    case 1: return 8.0 * psi + 8.0 * psi / nd;
    case 2: return 4.0 * psi + 12.0 * psi / nd;
    default: return 16.0 * psi / nd;
    }
}

static int memory_table(bench *b)
{
    static const int dps[] = {1, 2, 4, 8};
    size_t base[TRI_MEM_KINDS];
    b->zero = 0;
    b->dp = 1;
    tri_session_options o;
    int rc = session_options(b, 1, &o);
    if (!rc) rc = tri_model_rank_plan(&b->model, &o.run, 0, 0, 0, base);
    if (rc)
        return rc;
    double psi = (double)base[TRI_MEM_PARAMS] / 4.0;
    printf("Part 1: model-state memory of data-parallel rank 0, %s (Psi = %.2fM parameters as laid out), "
           "micro-batch %d x seq %d\n", b->cfg.name, psi / 1e6, b->B, b->T);
    printf("ZeRO paper formula, fp32: baseline 16 Psi, P_os 8 Psi + 8 Psi/Nd, P_os+g 4 Psi + 12 Psi/Nd, "
           "P_os+g+p 16 Psi/Nd; ratio = planned model state / formula\n");
    printf("%-5s %3s | %9s %9s %9s | %11s %11s %6s | %9s %9s | %11s %11s\n", "ZeRO", "dp", "params", "grads",
           "optimizer", "model state", "formula", "ratio", "comm buf", "acts+work", "planned all",
           "measured peak");
    for (int stage = 0; stage <= 3; stage++) {
        for (size_t k = 0; k < sizeof dps / sizeof *dps; k++) {
            size_t by[TRI_MEM_KINDS], total = 0;
            b->zero = stage;
            b->dp = dps[k];
            rc = session_options(b, dps[k], &o);
            if (!rc) rc = tri_model_rank_plan(&b->model, &o.run, 0, 0, 0, by);
            if (rc)
                return rc;
            for (int c = 0; c < TRI_MEM_KINDS; c++)
                total += by[c];
            double state = (double)(by[TRI_MEM_PARAMS] + by[TRI_MEM_GRADS] + by[TRI_MEM_OPTIMIZER]);
            double formula = paper_bytes(stage, psi, dps[k]);
            char measured[48] = "(over budget)";
            if ((double)total * dps[k] <= b->budget_gb * 1024.0 * MIB) {
                b->iters = 0;
                rc = tri_run_thread_ranks(dps[k], run_rank, b);
                if (rc)
                    return rc;
                snprintf(measured, sizeof measured, "%.1f MiB %+.1f%%", (double)b->peak / MIB,
                         100.0 * ((double)b->peak - (double)total) / (double)total);
            }
            printf("%-5d %3d | %9.1f %9.1f %9.1f | %11.1f %11.1f %6.3f | %9.1f %9.1f | %11.1f %s\n", stage, dps[k],
                   by[TRI_MEM_PARAMS] / MIB, by[TRI_MEM_GRADS] / MIB, by[TRI_MEM_OPTIMIZER] / MIB, state / MIB,
                   formula / MIB, state / formula, by[TRI_MEM_COMM] / MIB,
                   (by[TRI_MEM_ACTIVATIONS] + by[TRI_MEM_WORKSPACE]) / MIB, (double)total / MIB, measured);
            fflush(stdout);
        }
    }
    printf("(MiB; measured peak: one real training step on dp thread ranks, where dp x planned total fits in "
           "--memory-budget-gb %.0f)\n", (double)b->budget_gb);
    return TRI_OK;
}

/* Part 2: under mpirun, every ZeRO stage with and without overlap. */
static int step_times(bench *b, int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm mw = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    int rc = tri_comm_mpi_create(&world, &mw);
    if (rc)
        return rc;
    b->dp = world->size;
    if (world->rank == 0)
        printf("Part 2: step time over MPI, %s, dp %d (tp = pp = 1), micro-batch %d x seq %d, %d micro-batches "
               "per rank, %d timed steps after one warm-up, %ld cores\n%-5s | %14s | %14s | %s\n", b->cfg.name,
               world->size, b->B, b->T, b->n_micro, b->iters, sysconf(_SC_NPROCESSORS_ONLN), "ZeRO",
               "no overlap", "overlap", "speed-up (no overlap / overlap)");
    for (int stage = 0; stage <= 3 && !rc; stage++) {
        double ms[2] = {0, 0};
        if (b->only_stage >= 0 && stage != b->only_stage)
            continue;
        for (int ov = 0; ov < 2 && !rc; ov++) {
            b->zero = stage;
            b->overlap = ov == 1;
            rc = run_rank(world->rank, world->size, world, b);
            ms[ov] = 1e3 * b->seconds / b->iters;
        }
        if (!rc && world->rank == 0)
            printf("%-5d | %11.1f ms | %11.1f ms | %.3f\n", stage, ms[0], ms[1], ms[0] / ms[1]);
        fflush(stdout);
    }
    if (rc)
        fprintf(stderr, "bench_zero: rank %d: %s\n", world->rank, tri_error_message());
    tri_comm_destroy(world);
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    bench b = {.config = "models/gpt2.json", .B = 1, .T = 64, .iters = 2, .n_micro = 2, .budget_gb = 6.0, .only_stage = -1};
    tri_flag flags[] = {
        {"config", TRI_FLAG_STRING, &b.config, "model config", 0, 0, NULL, false},
        {"micro-batch-size", TRI_FLAG_INT, &b.B, "sequences per micro-batch", 1, 1 << 16, NULL, false},
        {"seq-length", TRI_FLAG_INT, &b.T, "sequence length", 1, 1 << 16, NULL, false},
        {"micro-batches", TRI_FLAG_INT, &b.n_micro, "micro-batches per step and rank", 1, 1 << 16, NULL, false},
        {"memory-budget-gb", TRI_FLAG_FLOAT, &b.budget_gb, "part 1: run a layout for real when dp x its planned "
         "total fits (GiB)", 0, 1e6, NULL, false},
        {"step-time", TRI_FLAG_BOOL, &b.step_time, "part 2 instead: step time with and without overlap (run "
         "under mpirun -np DP)", 0, 0, NULL, false},
        {"iters", TRI_FLAG_INT, &b.iters, "part 2: timed steps per case", 1, 1 << 20, NULL, false},
        {"zero-stage", TRI_FLAG_INT, &b.only_stage, "part 2: only this ZeRO stage (-1: all)", -1, 3, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_zero: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_zero",
                        "ZeRO memory by stage and dp beside the ZeRO paper's formulas; step time with and "
                        "without overlap (--step-time under mpirun).");
        return rc ? 2 : 0;
    }
    if (tri_gpt_config_load(&b.cfg, b.config)) {
        fprintf(stderr, "bench_zero: %s\n", tri_error_message());
        return 1;
    }
    b.model = tri_gpt_model(&b.cfg);
    tri_cli_set_threads(1);
    rc = b.step_time ? step_times(&b, argc, argv) : memory_table(&b);
    if (rc && !b.step_time)
        fprintf(stderr, "bench_zero: %s\n", tri_error_message());
    return rc ? 1 : 0;
}
