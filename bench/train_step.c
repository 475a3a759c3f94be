/* bench/train_step.c - speed of a training iteration against OpenBLAS sgemm, in one run.
 *
 * Runs full training iterations (forward, backward, AdamW) of a model of any family (default GPT-2
 * 124M, micro-batch 4, sequence 64) on random tokens, on tp thread ranks in this process, and reports
 * ms/iter, tokens/s and achieved GFLOP/s (model FLOPs of Narayanan et al. 2021 eq. 3 / time).
 * The baseline is measured in the same run: the exact list of GEMMs one iteration performs (every
 * linear layer's forward, input-gradient and weight-gradient products and the LM head), timed
 * with cblas_sgemm alone on the same threads. The printed ratio, achieved / sgemm GFLOP/s, is the
 * share of BLAS speed the whole iteration keeps (everything that is not a GEMM costs the rest).
 * With --compare-tp N it also runs tp = N (one thread per rank) against tp = 1 with one thread and
 * prints the speedup and parallel efficiency. --compare-config (default models/llama-124m.json, a
 * Llama with GPT-2 124M's matmul volume) times a second model the same way in the same run and
 * prints its time per token over the first's (the Llama issue's target: at most 1.2). Not a test:
 * no threshold here. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/comm/grid.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/train.h"
#include "models/model.h"
#include "models/session.h"
#include "partitioner/flops.h"
#include "tools/cli/backend.h"
#include "tools/cli/flags.h"
#include "tools/cli/layout_flags.h"
#include "tools/cli/threads.h"

typedef struct bench {
    const char *config, *compare_config;
    int B, T, iters, threads, compare_tp;
    bool profile;
    tri_model model;            /* the model timed (models/model.h) */
    /* results of one run */
    int tp;
    double ms_per_iter;
} bench;

static int fill_random(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const bench *b = ctx;
    for (int64_t i = 0; i < n * (b->T + 1); i++)
        w[i] = (int32_t)(tri_rng_uniform(42, (uint64_t)first, (uint64_t)i) * tri_model_vocab_size(&b->model));
    return TRI_OK;
}

/* One rank of a timed run: warm-up iteration, then `iters` timed ones. */
static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    bench *b = arg;
    tri_device *dev = NULL;
    tri_session ss;
    tri_session_options o = {.run = {.seed = 1}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
    tri_layout_request req = {.num_gpus = b->tp, .tp = b->tp, .pp = 1, .micro_batch = b->B, .global_batch = b->B,
                              .seq_length = b->T, .first_layers = -1, .last_layers = -1};
    int lrc = tri_cli_model_layout(&b->model, req, &o.run.layout);
    if (lrc)
        return lrc;
    tri_cli_set_threads(b->threads);
    int rc = tri_cli_device_create("cpu", b->threads, &dev);
    if (!rc) rc = tri_session_create(&ss, world, dev, &b->model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_batch_source src = {.ctx = b, .fill = fill_random};
    tri_step_result res;
    rc = tri_trainer_step(&ss.trainer, &src, 0, 1e-4f, &res);
    if (!rc && b->profile && rank == 0)
        rc = tri_device_profile_enable(dev);
    double t0 = tri_now_s();
    for (int it = 1; it <= b->iters && !rc; it++)
        rc = tri_trainer_step(&ss.trainer, &src, it, 1e-4f, &res);
    if (!rc && rank == 0)
        b->ms_per_iter = (tri_now_s() - t0) * 1e3 / b->iters;
    if (!rc && rank == 0 && b->profile)
        tri_device_profile_report(dev, stdout);
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

typedef struct gemm_shape {
    int M, N, K;
    bool ta, tb;
} gemm_shape;

/* The GEMMs of one training iteration at tp = 1: per linear layer (N rows, in C_in, out C_out)
 * the forward x w^T, the input gradient dy w and the weight gradient dy^T x. A block's linear layers
 * are the matmuls its family says its forward runs (tri_block_cost.linear: GPT-2's c_attn, c_proj,
 * c_fc, c_proj; a Llama's q|k|v, o, [gate | up], down); then the LM head. *block of them are a
 * block's. */
static int iteration_gemms(const tri_transformer *m, int64_t B, int64_t T, gemm_shape *g, int *block)
{
    tri_train_layout one = {.tp = 1, .pp = 1, .dp = 1, .B = B, .T = T};
    tri_block_cost c = tri_transformer_block(m, &one);
    int N = (int)(B * T), n = 0;
    for (int l = 0; l <= c.n_linear; l++) {
        bool head = l == c.n_linear;
        int in = head ? (int)m->n_embd : (int)c.linear[l][0];
        int out = head ? (int)tri_padded_vocab(m->vocab_size, 1) : (int)c.linear[l][1];
        if (head)
            *block = n;
        g[n++] = (gemm_shape){N, out, in, false, true};   /* y = x w^T */
        g[n++] = (gemm_shape){N, in, out, false, false};  /* dx = dy w */
        g[n++] = (gemm_shape){out, in, N, true, false};   /* dw = dy^T x */
    }
    return n;
}

/* GFLOP/s of cblas_sgemm over one iteration's GEMM list (blocks repeated n_layer times). */
static double sgemm_gflops(const bench *b)
{
    gemm_shape g[3 * (TRI_BLOCK_MAX_LINEAR + 1)];
    tri_transformer dims = tri_model_dims(&b->model);
    int in_block = 0, n = iteration_gemms(&dims, b->B, b->T, g, &in_block);
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        size_t sa = (size_t)g[i].M * g[i].K, sb = (size_t)g[i].K * g[i].N, sc = (size_t)g[i].M * g[i].N;
        most = sa > most ? sa : most;
        most = sb > most ? sb : most;
        most = sc > most ? sc : most;
    }
    float *A = malloc(most * sizeof *A), *B = malloc(most * sizeof *B), *Cm = malloc(most * sizeof *Cm);
    for (size_t i = 0; i < most; i++)
        A[i] = B[i] = Cm[i] = 0.001f * (float)(i % 1000);
    double best = 0.0;
    for (int rep = 0; rep < 4; rep++) { /* a warm-up pass, then the best of three timed passes */
        double flops = 0.0, secs = 0.0;
        for (int i = 0; i < n; i++) {
            int times = i < in_block ? (int)dims.n_layer : 1;
            const gemm_shape *s = &g[i];
            int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
            double t0 = tri_now_s();
            for (int k = 0; k < times; k++)
                cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                            s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, Cm, s->N);
            secs += tri_now_s() - t0;
            flops += 2.0 * s->M * s->N * (double)s->K * times;
        }
        if (rep > 0 && flops / secs / 1e9 > best)
            best = flops / secs / 1e9;
    }
    free(A);
    free(B);
    free(Cm);
    return best;
}

static int timed_run(bench *b, int tp, int threads)
{
    b->tp = tp;
    b->threads = threads;
    int rc = tri_run_thread_ranks(tp, run_rank, b);
    if (rc)
        fprintf(stderr, "bench_train_step: %s\n", tri_error_message());
    return rc;
}

/* Times b->model at tp 1 and prints its figures against sgemm; *ms_per_token receives its time. */
static int report(bench *b, double *ms_per_token)
{
    tri_transformer dims = tri_model_dims(&b->model);
    double flops = tri_iteration_flops(&dims, b->B, b->T, false);
    int threads = b->threads;
    if (timed_run(b, 1, threads))
        return 1;
    tri_cli_set_threads(threads);
    double base = sgemm_gflops(b);
    double achieved = flops / (b->ms_per_iter / 1e3) / 1e9;
    *ms_per_token = b->ms_per_iter / (double)(b->B * b->T);
    printf("%s (%s), micro-batch %d x seq %d, tp 1, %d threads:\n", tri_model_name(&b->model), b->model.family->type,
           b->B, b->T, threads);
    printf("  %.1f ms/iter, %.0f tokens/s, %.1f GFLOP/s achieved (%.1f GFLOP model FLOPs per iteration)\n",
           b->ms_per_iter, b->B * b->T / (b->ms_per_iter / 1e3), achieved, flops / 1e9);
    printf("  OpenBLAS sgemm on the same GEMM shapes, same run (best of 3): %.1f GFLOP/s\n", base);
    printf("  ratio achieved / sgemm = %.3f (target >= 0.6)\n", achieved / base);
    return 0;
}

static int load(tri_model *m, const char *path)
{
    int rc = tri_model_load(m, path);
    if (rc)
        fprintf(stderr, "bench_train_step: %s\n", tri_error_message());
    return rc;
}

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    bench b = {.config = "models/gpt2.json", .compare_config = "models/llama-124m.json", .B = 4, .T = 64,
               .iters = 5, .threads = 2};
    tri_flag flags[] = {
        {"config", TRI_FLAG_STRING, &b.config, "model config", 0, 0, NULL, false},
        {"compare-config", TRI_FLAG_STRING, &b.compare_config, "a second model timed in the same run, its time per token "
         "over the first's printed (none: no second model)", 0, 0, NULL, false},
        {"micro-batch-size", TRI_FLAG_INT, &b.B, "sequences per iteration", 1, 1 << 16, NULL, false},
        {"seq-length", TRI_FLAG_INT, &b.T, "sequence length", 1, 1 << 16, NULL, false},
        {"iters", TRI_FLAG_INT, &b.iters, "timed iterations (after one warm-up)", 1, 1 << 20, NULL, false},
        {"threads", TRI_FLAG_INT, &b.threads, "BLAS/OpenMP threads for the tp = 1 run", 1, 1024, NULL, false},
        {"profile", TRI_FLAG_BOOL, &b.profile, "print time per device op of the timed tp = 1 iterations", 0, 0, NULL, false},
        {"compare-tp", TRI_FLAG_INT, &b.compare_tp, "also run tp = N thread ranks (1 thread each) vs tp = 1 (1 thread)", 0, 64, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_train_step: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_train_step",
                        "Times training iterations against OpenBLAS sgemm on the same GEMM shapes.");
        return rc ? 2 : 0;
    }
    double first = 0.0, second = 0.0;
    if (load(&b.model, b.config) || report(&b, &first))
        return 1;
    if (b.compare_tp > 1) {
        b.profile = false;
        if (timed_run(&b, 1, 1))
            return 1;
        double t1 = b.ms_per_iter;
        if (timed_run(&b, b.compare_tp, 1))
            return 1;
        double tn = b.ms_per_iter;
        printf("tensor parallelism, one thread per rank, thread ranks in one process:\n");
        printf("  tp 1: %.1f ms/iter; tp %d: %.1f ms/iter; speedup %.2fx, parallel efficiency %.0f%%\n",
               t1, b.compare_tp, tn, t1 / tn, 100.0 * t1 / tn / b.compare_tp);
    }
    if (strcmp(b.compare_config, "none") != 0) {
        char name[128];
        snprintf(name, sizeof name, "%s", tri_model_name(&b.model));
        tri_model_free(&b.model);
        if (load(&b.model, b.compare_config) || report(&b, &second))
            return 1;
        printf("%s / %s time per token = %.3f (target <= 1.2 when the two have the same matmul volume)\n",
               tri_model_name(&b.model), name, second / first);
    }
    tri_model_free(&b.model);
    return 0;
}
