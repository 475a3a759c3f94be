/* bench/pipeline.c - pipeline bubbles and pipeline throughput, measured beside theory in one run.
 *
 * Part 1: for a few (p, m) and schedules, trains a GPT on p thread ranks (one thread each) and
 * measures, per stage, the idle share of the pipeline's run (1 - compute time / wall time of the
 * executor's run), printed beside the closed form (p - 1) / (m + p - 1) of GPipe and 1F1B
 * (Narayanan et al. 2021 §2.2; smaller for interleaved) and beside the simulator's figure for the
 * same schedule with the stage plan's FLOP imbalance (partitioner/simulate.h).
 * Part 2: tokens/s of tp 2 x pp 2 (4 ranks, one thread each) against tp 1 x pp 1 (one thread) on
 * the same global batch.
 * With more ranks than cores the ranks time-share the cores, which inflates every stage's compute
 * time; the printed core count says when that applies. Not a test: no thresholds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/comm/comm.h"
#include "engine/comm/grid.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/train/train.h"
#include "models/config.h"
#include "models/gpt.h"
#include "models/session.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/simulate.h"
#include "tools/cli/backend.h"
#include "tools/cli/flags.h"
#include "tools/cli/layout_flags.h"
#include "tools/cli/threads.h"

#define MAX_RANKS 16

typedef struct bench {
    const char *config;
    int B, T, iters;
    tri_gpt_config cfg;
    tri_model model;            /* the session's handle on cfg (models/model.h) */
    /* the run in progress */
    int tp, pp, m, v;
    const char *schedule;
    double busy[MAX_RANKS], total[MAX_RANKS];  /* summed over timed iterations, per world rank */
    double seconds;                            /* wall time of the timed iterations (rank 0) */
    double chunk_flops[MAX_RANKS * 4];         /* the stage plan's FLOPs per chunk */
} bench;

static int fill_random(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const bench *b = ctx;
    for (int64_t i = 0; i < n * (b->T + 1); i++)
        w[i] = (int32_t)(tri_rng_uniform(3, (uint64_t)first, (uint64_t)i) * b->cfg.vocab_size);
    return TRI_OK;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    bench *b = arg;
    tri_device *dev = NULL;
    tri_session ss;
    tri_session_options o = {.run = {.seed = 1}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
    tri_layout_request req = {.num_gpus = b->tp * b->pp, .tp = b->tp, .pp = b->pp, .micro_batch = b->B,
                              .global_batch = (int64_t)b->B * b->m, .seq_length = b->T, .schedule = b->schedule,
                              .layers_per_virtual_stage = b->v > 1 ? b->cfg.n_layer / (b->pp * b->v) : 0,
                              .first_layers = -1, .last_layers = -1};
    int lrc = tri_cli_model_layout(&b->model, req, &o.run.layout);
    if (lrc)
        return lrc;
    int rc = tri_cli_device_create("cpu", 1, &dev);
    if (!rc) rc = tri_session_create(&ss, world, dev, &b->model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_batch_source src = {.ctx = b, .fill = fill_random};
    tri_step_result res;
    rc = tri_trainer_step(&ss.trainer, &src, 0, 1e-4f, &res);
    if (!rc && rank == 0)
        for (int c = 0; c < ss.model.plan.n_chunks && c < MAX_RANKS * 4; c++)
            b->chunk_flops[c] = ss.model.plan.costs[c].flops;
    b->busy[rank] = b->total[rank] = 0.0;
    double t0 = tri_now_s();
    for (int it = 1; it <= b->iters && !rc; it++) {
        rc = tri_trainer_step(&ss.trainer, &src, it, 1e-4f, &res);
        b->busy[rank] += ss.trainer.train_pipe.busy_s;
        b->total[rank] += ss.trainer.train_pipe.total_s;
    }
    if (!rc && rank == 0)
        b->seconds = tri_now_s() - t0;
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

static int timed(bench *b, int tp, int pp, int m, int v, const char *schedule)
{
    b->tp = tp;
    b->pp = pp;
    b->m = m;
    b->v = v;
    b->schedule = schedule;
    int rc = tri_run_thread_ranks(tp * pp, run_rank, b);
    if (rc)
        fprintf(stderr, "bench_pipeline: %s\n", tri_error_message());
    return rc;
}

/* The simulator's bubble for the schedule with the plan's per-chunk FLOPs (forward : backward 1 : 2). */
static double simulated_bubble(const bench *b, double *idle)
{
    tri_schedule s;
    tri_sim_result sim;
    double scale[MAX_RANKS * 4], mean = 0.0, bubble = -1.0;
    int chunks = b->pp * b->v;
    for (int c = 0; c < chunks; c++)
        mean += b->chunk_flops[c] / chunks;
    for (int c = 0; c < chunks; c++)
        scale[c] = b->chunk_flops[c] / mean;
    tri_sim_costs costs = {.fwd = 1, .bwd = 2, .chunk_scale = scale};
    if (tri_schedule_make(&s, b->schedule, b->pp, b->v, b->m) == TRI_OK) {
        if (tri_schedule_simulate(&s, &costs, &sim) == TRI_OK) {
            bubble = sim.bubble;
            for (int r = 0; r < b->pp; r++)
                idle[r] = sim.idle[r];
            tri_sim_result_free(&sim);
        }
        tri_schedule_free(&s);
    }
    return bubble;
}

static int bubbles(bench *b)
{
    struct { int p, m, v; const char *schedule; } cases[] = {
        {2, 1, 1, "1f1b"}, {2, 2, 1, "1f1b"}, {2, 4, 1, "1f1b"}, {2, 8, 1, "1f1b"}, {2, 4, 1, "gpipe"},
        {2, 4, 2, "interleaved"}, {2, 8, 2, "interleaved"}, {4, 4, 1, "1f1b"}, {4, 8, 1, "1f1b"},
    };
    printf("Pipeline bubble per stage, measured (1 - compute / wall time of the pipeline run) vs theory\n");
    printf("%-12s %2s %2s %2s | %-36s | %-36s | %s\n", "schedule", "p", "m", "v", "measured idle per stage",
           "simulator (plan's FLOP imbalance)", "closed form");
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        if (timed(b, 1, cases[k].p, cases[k].m, cases[k].v, cases[k].schedule))
            return 1;
        double sim_idle[MAX_RANKS] = {0};
        double sim = simulated_bubble(b, sim_idle);
        char meas[128] = "", simulated[128] = "";
        for (int r = 0; r < cases[k].p; r++) {
            snprintf(meas + strlen(meas), sizeof meas - strlen(meas), " %.3f", 1.0 - b->busy[r] / b->total[r]);
            snprintf(simulated + strlen(simulated), sizeof simulated - strlen(simulated), " %.3f", sim_idle[r]);
        }
        double p = cases[k].p, m = cases[k].m, v = cases[k].v;
        printf("%-12s %2d %2d %2d | %-36s | %-27s (%.3f) | %.3f | %.0f ms/iter\n", cases[k].schedule, cases[k].p,
               cases[k].m, cases[k].v, meas, simulated, sim, (p - 1) / (v * m + p - 1), 1e3 * b->seconds / b->iters);
    }
    return 0;
}

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    bench b = {.config = "models/gpt2-tiny-byte.json", .B = 4, .T = 128, .iters = 3};
    tri_flag flags[] = {
        {"config", TRI_FLAG_STRING, &b.config, "model config (n_layer divisible by 8 for every case)", 0, 0, NULL, false},
        {"micro-batch-size", TRI_FLAG_INT, &b.B, "sequences per micro-batch", 1, 1 << 16, NULL, false},
        {"seq-length", TRI_FLAG_INT, &b.T, "sequence length", 1, 1 << 16, NULL, false},
        {"iters", TRI_FLAG_INT, &b.iters, "timed iterations per case (after one warm-up)", 1, 1 << 20, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_pipeline: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_pipeline",
                        "Measures pipeline bubbles per stage against theory, and tp2 x pp2 against one rank.");
        return rc ? 2 : 0;
    }
    if (tri_gpt_config_load(&b.cfg, b.config)) {
        fprintf(stderr, "bench_pipeline: %s\n", tri_error_message());
        return 1;
    }
    b.model = tri_gpt_model(&b.cfg);
    tri_cli_set_threads(1);
    printf("%s, micro-batch %d x seq %d, one thread per rank, %ld cores\n", b.cfg.name, b.B, b.T,
           sysconf(_SC_NPROCESSORS_ONLN));
    if (bubbles(&b))
        return 1;
    /* tp2 x pp2 against one rank, same global batch of 4 micro-batches */
    if (timed(&b, 1, 1, 4, 1, "1f1b"))
        return 1;
    double one = b.seconds / b.iters;
    if (timed(&b, 2, 2, 4, 1, "1f1b"))
        return 1;
    double four = b.seconds / b.iters;
    double tokens = 4.0 * b.B * b.T;
    printf("throughput, global batch of 4 micro-batches: tp 1 x pp 1 (1 thread) %.0f tokens/s (%.1f ms/iter); "
           "tp 2 x pp 2 (4 ranks x 1 thread) %.0f tokens/s (%.1f ms/iter): %.2fx\n", tokens / one, one * 1e3,
           tokens / four, four * 1e3, one / four);
    return 0;
}
